//! Helpers of these tests: a Docker engine or a clear skip. The cancel trigger and the
//! environment checks are `nuvira-test-support`'s.

use nuvira_sandbox::DockerSandbox;
use nuvira_test_support::env::{Requirement, require};

/// A Docker sandbox whose engine answers and has `image`, or `None` after printing why the
/// test is skipped. With `NUVIRA_REQUIRE_DOCKER=1` a missing engine or image fails the test.
pub async fn docker(image: &str) -> Option<DockerSandbox> {
    let found = DockerSandbox::connect_checked(image)
        .await
        .map(|(sandbox, _)| sandbox)
        .map_err(|e| format!("the Docker sandbox is unavailable: {e}"));
    require(Requirement::Docker, found)
}

/// The bubblewrap sandbox when bubblewrap works here, or `None` after printing why the test is
/// skipped. With `NUVIRA_REQUIRE_BWRAP=1` its absence fails the test.
pub fn bwrap() -> Option<nuvira_sandbox::BwrapSandbox> {
    let found = nuvira_sandbox::BwrapSandbox::new()
        .map_err(|e| format!("the bwrap sandbox is unavailable: {e}"));
    require(Requirement::Bwrap, found)
}
