//! The local and Docker sandboxes on real commands.
//! Docker tests print "SKIPPED" and pass when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
#[allow(dead_code)]
mod common;
mod docker;
mod local;
