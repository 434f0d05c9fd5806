//! Sandbox and module tests on real commands and small real projects (tests/projects/).
//! Docker tests print "SKIPPED" and pass when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "sandbox/common.rs"]
mod common;
#[path = "sandbox/docker.rs"]
mod docker;
#[path = "sandbox/local.rs"]
mod local;
#[path = "sandbox/module.rs"]
mod module;
