//! Helpers of these tests: a Docker engine or a clear skip. The cancel trigger and the
//! environment checks are `nuvira-test-support`'s.

use nuvira_api::SandboxRequest;
#[cfg(feature = "docker")]
use nuvira_sandbox::DockerSandbox;
use nuvira_test_support::env::{Requirement, require};
use std::path::Path;

/// `sh -c SCRIPT` in a copy of `workspace`, with the default limits.
pub fn sh(workspace: &Path, script: &str) -> SandboxRequest {
    SandboxRequest::new(workspace, vec!["sh".into(), "-c".into(), script.into()])
}

/// The permission bits of `p` (not through a link).
pub fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Sets the permission bits of `p`.
pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `req` in `sandbox` on a thread (and runtime) of its own and returns its result, or
/// fails the test with `what` when none comes within `deadline`: a run that blocks (on a FIFO,
/// say) fails at its deadline instead of hanging the test binary.
pub fn run_within<S>(
    sandbox: S,
    req: SandboxRequest,
    deadline: std::time::Duration,
    what: &str,
) -> Result<nuvira_api::SandboxOutcome, nuvira_api::SandboxError>
where
    S: nuvira_api::Sandbox + Send + 'static,
{
    use nuvira_api::NeverCancelled;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _ = tx.send(rt.block_on(sandbox.run(&req, &NeverCancelled)));
    });
    rx.recv_timeout(deadline)
        .unwrap_or_else(|_| panic!("no result within {deadline:?}: {what}"))
}

/// Serves one HTTP response on 127.0.0.1 (loopback only) and returns its port: what a
/// sandbox's network check tries to reach.
pub async fn one_shot_server() -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        if let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut conn, &mut buf).await;
            let _ = conn
                .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                .await;
        }
    });
    (port, task)
}

#[cfg(feature = "docker")]
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

#[cfg(feature = "docker")]
/// A run on a (remote) engine: the workspace is uploaded, the output and a collected file come
/// back, the exit code is the command's, and the limits in the result name `host`.
pub async fn assert_runs_an_uploaded_workspace(sandbox: &DockerSandbox, image: &str, host: &str) {
    use nuvira_api::{NeverCancelled, Sandbox};
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("sub/input.txt"), "from the client").unwrap();
    let mut req = SandboxRequest::new(
        ws.path(),
        vec![
            "sh".into(),
            "-c".into(),
            "cat sub/input.txt; echo; echo made > out.txt; exit 3".into(),
        ],
    );
    req.image = Some(image.into());
    req.collect = vec!["out.txt".into()];
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert_eq!(out.stdout.trim(), "from the client");
    assert_eq!(out.collected["out.txt"], b"made\n");
    assert!(
        out.info.limits.as_deref().unwrap().contains(host),
        "{:?}",
        out.info.limits
    );
}
