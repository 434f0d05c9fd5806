//! A FIFO and a unix socket in the repository: `nuvira test` in the Docker sandbox (whose tar
//! upload used to break off on them) and in the local one runs the tests without them and says
//! so, naming each file; a reader of the FIFO would block forever, so the run ending at all
//! shows it was never opened.

use crate::support::{docker_ready, nuvira};
use std::path::Path;

fn repo_with_a_fifo_and_a_socket() -> (tempfile::TempDir, std::os::unix::net::UnixListener) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README"), "x\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path().join("sub/pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let socket = std::os::unix::net::UnixListener::bind(dir.path().join("control.sock")).unwrap();
    (dir, socket)
}

fn run(repo: &Path, sandbox: &[&str]) -> std::process::Output {
    nuvira()
        .args(["test", "--sandbox"])
        .args(sandbox)
        .args(["--command", "ls -a . sub", "--format", "json", "--repo"])
        .arg(repo)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

fn assert_noted(out: &std::process::Output, kind: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
    for name in ["sub/pipe", "control.sock"] {
        assert!(
            stderr.contains(&format!("warning: left `{name}` out of the {kind} sandbox")),
            "{kind}: {name} is named: {stderr}"
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["sandbox"]["skipped_special_files"],
        serde_json::json!(["control.sock", "sub/pipe"]),
        "{v}"
    );
    let log = v["log"].as_str().unwrap_or_default();
    assert!(log.contains("README") && !log.contains("pipe"), "{log}");
}

#[test]
fn the_local_sandbox_skips_a_fifo_and_a_socket_and_names_them() {
    let (dir, _socket) = repo_with_a_fifo_and_a_socket();
    let out = run(dir.path(), &["local"]);
    assert_noted(&out, "local");
}

#[test]
fn the_docker_sandbox_skips_a_fifo_and_a_socket_and_names_them() {
    if !docker_ready() {
        return;
    }
    let (dir, _socket) = repo_with_a_fifo_and_a_socket();
    let out = run(dir.path(), &["docker", "--image", "nuvira-busybox:latest"]);
    assert_noted(&out, "docker");
}
