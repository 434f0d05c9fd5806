//! The local, bwrap and Docker sandboxes on real commands.
//! Docker tests print "SKIPPED" and pass when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1;
//! bwrap tests likewise unless NUVIRA_REQUIRE_BWRAP=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bwrap;
mod cache;
#[allow(dead_code)]
mod common;
mod docker;
mod limits;
mod local;
mod remote;
mod remote_ssh;
mod reuse;
