//! Integration tests of nuvira-workspace: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod confinement;
mod journal;
mod lock;
mod walk;
