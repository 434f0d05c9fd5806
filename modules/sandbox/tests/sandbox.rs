//! The local, bwrap and Docker sandboxes on real commands.
//! Docker tests print "SKIPPED" and pass when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1;
//! bwrap tests likewise unless NUVIRA_REQUIRE_BWRAP=1. The Docker tests are built with the
//! `docker` feature only (the default); the others with and without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bwrap;
mod cache;
#[allow(dead_code)]
mod common;
#[cfg(feature = "docker")]
mod docker;
mod limits;
mod local;
#[cfg(feature = "docker")]
mod remote;
#[cfg(feature = "docker")]
mod remote_ssh;
#[cfg(feature = "docker")]
mod reuse;
