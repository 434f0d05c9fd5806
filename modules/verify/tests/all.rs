//! Integration tests of nuvira-verify: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod checks;
mod module;
mod support;
