//! A test command that eats memory under a small Docker memory limit: the run is OOM-killed
//! and must be reported as exactly one failure that says so and how to raise the limit, not
//! also as a bogus "killed at its timeout".

use crate::support::{docker_ready, nuvira};

#[test]
fn an_oom_kill_is_one_failure_that_names_the_memory_limit() {
    if !docker_ready() {
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "x\n").unwrap();
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "docker",
            "--image",
            "nuvira-busybox:latest",
        ])
        .args(["--memory", "32m", "--timeout", "120s"])
        .args(["--command", "x=a; while true; do x=\"$x$x\"; done"])
        .args(["--format", "json", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sandbox"]["oom_killed"], true, "{v}");
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "exactly one failure: {v:#}");
    let message = failures[0]["message"].as_str().unwrap();
    assert!(message.contains("memory limit"), "{message}");
    assert!(message.contains("--memory"), "{message}");
    assert!(!stdout.contains("timeout"), "no timeout is claimed: {v:#}");
}
