//! Integration tests of nuvira-edit: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

mod editor;
mod failed_entries;
mod module;
