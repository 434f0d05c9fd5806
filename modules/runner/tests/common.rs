//! Helpers of these tests: the small real projects and a Docker engine or a clear skip. The
//! event recorder, the cancel trigger and the environment checks are `nuvira-test-support`'s.

use nuvira_sandbox::DockerSandbox;
use nuvira_test_support::env::{Requirement, require};
use std::path::PathBuf;

/// The small real projects of these tests.
pub fn project(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/projects")).join(name)
}

/// A Docker sandbox whose engine answers and has `image`, or `None` after printing why the
/// test is skipped. With `NUVIRA_REQUIRE_DOCKER=1` a missing engine or image fails the test.
pub async fn docker(image: &str) -> Option<DockerSandbox> {
    let found = DockerSandbox::connect_checked(image)
        .await
        .map(|(sandbox, _)| sandbox)
        .map_err(|e| format!("the Docker sandbox is unavailable: {e}"));
    require(Requirement::Docker, found)
}
