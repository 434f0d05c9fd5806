//! Integration tests of nuvira-inspect: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod inspect_repo;
mod outline_real_code;
