//! Helpers shared by the sandbox tests: a Docker engine or a clear skip, an event recorder, a
//! cancel signal scripted by the test.

use nuvira_api::{CancelSignal, EventKind, EventSink, async_trait};
use nuvira_sandbox::DockerSandbox;
use std::path::PathBuf;
use std::sync::Mutex;
use tokio::sync::watch;

/// The small real projects of these tests.
pub fn project(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/projects")).join(name)
}

/// A Docker sandbox whose engine answers and has `image`, or `None` after printing why the
/// test is skipped. With `NUVIRA_REQUIRE_DOCKER=1` a missing engine or image fails the test.
pub async fn docker(image: &str) -> Option<DockerSandbox> {
    match DockerSandbox::connect_checked(image).await {
        Ok((sandbox, _)) => Some(sandbox),
        Err(err) => {
            assert!(
                std::env::var("NUVIRA_REQUIRE_DOCKER").as_deref() != Ok("1"),
                "NUVIRA_REQUIRE_DOCKER=1 but the Docker sandbox is unavailable: {err}"
            );
            eprintln!("SKIPPED (no Docker engine or image; run scripts/docker-up.sh): {err}");
            None
        }
    }
}

/// Records every event.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<EventKind>>);

impl EventSink for Recorder {
    fn emit(&self, _step_id: Option<&str>, kind: EventKind) {
        self.0.lock().unwrap().push(kind);
    }
}

impl Recorder {
    pub fn names(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().iter().map(EventKind::name).collect()
    }
}

/// A cancel signal the test fires.
pub struct Trigger(watch::Sender<bool>);

impl Default for Trigger {
    fn default() -> Self {
        Self(watch::channel(false).0)
    }
}

impl Trigger {
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

#[async_trait]
impl CancelSignal for Trigger {
    fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }
    async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// Whether a process is gone (or a zombie waiting to be reaped: dead either way).
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Whether a process that was sent SIGKILL is dead within 5 s (a signal is delivered
/// asynchronously: right after `kill` returns the target may not have exited yet).
pub fn process_is_dead(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if is_dead(pid) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether pytest can run here. Without it the pytest tests are skipped with a printed reason,
/// unless NUVIRA_REQUIRE_PYTEST=1 (set by .ci/run), which makes a missing pytest a failure.
pub fn pytest_ready() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("NUVIRA_REQUIRE_PYTEST").as_deref() != Ok("1"),
            "NUVIRA_REQUIRE_PYTEST=1 but pytest is not installed (python3 -m pip install pytest)"
        );
        eprintln!(
            "SKIPPED: pytest is not installed (python3 -m pip install pytest to run this test)"
        );
    }
    ok
}
