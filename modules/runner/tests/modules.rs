//! The `test` and `execute` modules on small real projects (tests/projects/), in both sandboxes.
//! Docker tests print "SKIPPED" and pass when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod common;
mod killed;
mod module;
