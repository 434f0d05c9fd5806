//! `nuvira test --sandbox docker` with `DOCKER_HOST=ssh://USER@127.0.0.1:PORT`: the real binary
//! through a private sshd on loopback (nuvira-test-support's `Sshd`) to this machine's engine.
//! The binary runs the `ssh` it finds on `PATH`; the test puts first on `PATH` one that uses the
//! sshd's own client configuration, so the real `~/.ssh` is never read.
//!
//! Needs pytest, the Docker engine with the nuvira images and sshd (NUVIRA_REQUIRE_PYTEST,
//! NUVIRA_REQUIRE_DOCKER, NUVIRA_REQUIRE_SSHD); skipped with the reason otherwise.

use assert_cmd::Command;
use nuvira_test_support::env::{Requirement, pytest_ready, require};
use nuvira_test_support::sshd::{ClientKey, HostKey, Sshd};
use serde_json::Value;
use std::path::PathBuf;

fn pytest_basic() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/modules/runner/tests/projects/pytest-basic"
    ))
}

fn sshd() -> Option<Sshd> {
    if !pytest_ready() {
        return None;
    }
    let images = std::process::Command::new("docker")
        .args(["image", "inspect", "nuvira-host:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Docker,
        if images {
            Ok(())
        } else {
            Err("no Docker engine with the nuvira-host image answers")
        },
    )?;
    require(Requirement::Sshd, Sshd::start())
}

#[test]
fn docker_over_ssh_runs_the_pytest_project_and_reports_its_counts() {
    let Some(sshd) = sshd() else {
        return;
    };
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env("DOCKER_HOST", sshd.docker_host())
        .env(
            "PATH",
            sshd.path_with_ssh(HostKey::Right, ClientKey::Authorized),
        )
        .args(["test", "--sandbox", "docker", "--format", "json", "--repo"])
        .arg(pytest_basic())
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(v["failures"][0]["file"], "test_math.py");
    assert_eq!(v["failures"][0]["line"], 13);
    assert_eq!(v["sandbox"]["kind"], "docker");
    // It went through the ssh engine, not the local socket.
    let limits = v["sandbox"]["limits"].as_str().unwrap_or_default();
    assert!(limits.contains(&sshd.docker_host()), "{v}");
    assert_eq!(
        v["sandbox"]["container_id"].as_str().map(str::len),
        Some(64),
        "{v}"
    );
}

#[test]
fn docker_over_ssh_without_the_host_key_exits_3_with_one_line_naming_the_host() {
    let Some(sshd) = sshd() else {
        return;
    };
    // The real ssh with a configuration whose known_hosts has another key for the server.
    let path = sshd.path_with_ssh(HostKey::Wrong, ClientKey::Authorized);
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env("DOCKER_HOST", sshd.docker_host())
        .env("PATH", path)
        .args(["test", "--sandbox", "docker", "--repo"])
        .arg(pytest_basic())
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let error: Vec<&str> = stderr.lines().filter(|l| l.contains("ssh")).collect();
    assert_eq!(error.len(), 1, "one line: {stderr}");
    assert!(error[0].contains(&sshd.docker_host()), "{stderr}");
    assert!(error[0].contains("ssh-keygen -R"), "{stderr}");
    assert!(!stderr.contains("@@@"), "{stderr}");
}
