//! After ~50 mixed Docker runs (passing, failing, timed out, cancelled, and abandoned: the run's
//! future dropped at different moments) no container of this process is left.
//! Its own test binary, so that no other test's containers are running at the same time.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Docker only: built with the `docker` feature (the default).
#![cfg(feature = "docker")]

#[allow(dead_code)]
mod common;

use common::docker;
use nuvira_api::{NeverCancelled, Sandbox, SandboxError, SandboxRequest};
use nuvira_test_support::Trigger;
use std::time::Duration;

const BUSYBOX: &str = "nuvira-busybox:latest";

fn leftovers() -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            "label=nuvira.sandbox",
            "--filter",
            &format!("name=nuvira-sandbox-{}-", std::process::id()),
            "--format",
            "{{.Names}}",
        ])
        .output()
        .expect("run `docker ps`");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_container_is_left_after_fifty_mixed_runs() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("data.txt"), "x").unwrap();
    let sh = |script: &str, timeout_ms: u64| {
        let mut r = SandboxRequest::new(ws.path(), vec!["sh".into(), "-c".into(), script.into()]);
        r.image = Some(BUSYBOX.into());
        r.limits.timeout = Duration::from_millis(timeout_ms);
        r
    };

    let mut kinds = [0usize; 5];
    for batch in 0..10 {
        let mut jobs = Vec::new();
        for slot in 0..5 {
            let case = batch * 5 + slot;
            let sandbox = &sandbox;
            let sh = &sh;
            jobs.push(async move {
                match case % 5 {
                    0 => {
                        let out = sandbox
                            .run(&sh("cat data.txt", 30_000), &NeverCancelled)
                            .await;
                        assert_eq!(out.unwrap().stdout, "x");
                    }
                    1 => {
                        let out = sandbox.run(&sh("exit 3", 30_000), &NeverCancelled).await;
                        assert_eq!(out.unwrap().exit_code, Some(3));
                    }
                    2 => {
                        let out = sandbox.run(&sh("sleep 60", 300), &NeverCancelled).await;
                        assert!(out.unwrap().timed_out);
                    }
                    3 => {
                        // Cancelled as soon as the container exists, or after a delay that
                        // falls in a different phase each time (create, upload, start, wait).
                        let cancel = Trigger::default();
                        let req = sh("sleep 60", 30_000);
                        let out = if (case / 5) % 2 == 0 {
                            sandbox
                                .run_observed(&req, &cancel, &|_| cancel.fire())
                                .await
                        } else {
                            let after = Duration::from_millis(((case * 53) % 400) as u64);
                            let fire = async {
                                tokio::time::sleep(after).await;
                                cancel.fire();
                            };
                            tokio::join!(sandbox.run(&req, &cancel), fire).0
                        };
                        assert!(matches!(out, Err(SandboxError::Cancelled)), "{out:?}");
                    }
                    _ => {
                        // Abandoned: the future is dropped at a different moment each time
                        // (before, during or after the create call, while running).
                        let after = Duration::from_millis(((case * 37) % 400) as u64);
                        let req = sh("sleep 60", 30_000);
                        let run = sandbox.run(&req, &NeverCancelled);
                        assert!(tokio::time::timeout(after, run).await.is_err());
                    }
                }
                case % 5
            });
        }
        for k in futures::future::join_all(jobs).await {
            kinds[k] += 1;
        }
    }
    assert_eq!(kinds, [10; 5]);
    sandbox.wait_for_cleanup().await;
    let left = leftovers();
    assert!(left.is_empty(), "containers left behind: {left:?}");
}
