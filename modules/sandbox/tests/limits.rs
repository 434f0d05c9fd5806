//! Limits that contain runaways without changing healthy outcomes, in every sandbox: a
//! thread-heavy healthy program passes under the default limits (it failed under the local
//! sandbox's old `RLIMIT_DATA` and Docker's old 256-process limit); a memory hog is OOM-killed
//! and a bounded fork bomb stopped by the whole-run cgroup of the local and bwrap sandboxes (as
//! by Docker's); each run says how its limits were enforced.
//!
//! The cgroup tests skip (saying why) where no cgroup can be made, unless
//! `NUVIRA_REQUIRE_CGROUPS=1`.

use super::common::bwrap;
#[cfg(feature = "docker")]
use super::common::docker;
use nuvira_api::{NeverCancelled, ResourceLimits, Sandbox, SandboxRequest};
use nuvira_sandbox::{AnySandbox, LocalSandbox};
use nuvira_test_support::env::{Requirement, process_is_dead, require};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// 300 threads alive at once, each with the default (8 MiB) stack: 2.4 GiB of private
/// mappings, little of it touched.
/// (The threads are released even when starting one fails, so a failure ends at once.)
const THREADS: &str = "import threading\nev = threading.Event()\nts = [threading.Thread(target=ev.wait) for _ in range(300)]\ntry:\n    for t in ts: t.start()\nfinally:\n    ev.set()\nfor t in ts:\n    if t.is_alive(): t.join()\nprint('threads ok', len(ts))\n";

/// Allocates and touches 300 MiB.
const HOG: &str = "b = b'a' * (300 << 20)\nprint('allocated', len(b))\n";

/// A recursive fork bomb, bounded at depth 9 (at most 1023 processes) so that it cannot hurt
/// the machine even if the limit were missing.
const BOMB: &str = "bomb() { if [ $1 -gt 0 ]; then bomb $(($1-1)) & bomb $(($1-1)) & wait; fi; sleep 1; }; bomb 9; echo done";

fn python(workspace: &Path, script: &str) -> SandboxRequest {
    SandboxRequest::new(
        workspace,
        vec!["python3".into(), "-c".into(), script.into()],
    )
}

fn sh(workspace: &Path, script: &str) -> SandboxRequest {
    SandboxRequest::new(workspace, vec!["sh".into(), "-c".into(), script.into()])
}

/// Whether the local sandbox's runs get a cgroup here; `false` after saying why the test is
/// skipped (a failure with `NUVIRA_REQUIRE_CGROUPS=1`).
fn cgroups() -> bool {
    let found = nuvira_sandbox::limits::detect();
    let result = if found.enforced() {
        Ok(())
    } else {
        Err(found.describe())
    };
    require(Requirement::Cgroups, result).is_some()
}

/// The local sandbox, and the bwrap one where it works.
fn cgroup_sandboxes() -> Vec<AnySandbox> {
    let mut all = vec![AnySandbox::Local(Arc::new(LocalSandbox::new()))];
    all.extend(bwrap().map(|b| AnySandbox::Bwrap(Arc::new(b))));
    all
}

#[tokio::test]
async fn a_thread_heavy_program_passes_under_the_default_limits_in_every_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let req = python(ws.path(), THREADS);
    assert_eq!(req.limits, ResourceLimits::default());
    #[cfg_attr(not(feature = "docker"), allow(unused_mut))]
    let mut sandboxes = cgroup_sandboxes();
    #[cfg(feature = "docker")]
    if let Some(d) = docker("nuvira-host:latest").await {
        sandboxes.push(AnySandbox::Docker(Arc::new(d)));
    }
    for sandbox in sandboxes {
        let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert_eq!(
            out.exit_code,
            Some(0),
            "{}: {}\n{}",
            sandbox.kind(),
            out.stdout,
            out.stderr
        );
        assert!(out.stdout.contains("threads ok 300"), "{}", out.stdout);
        assert!(!out.info.pids_limited && !out.info.oom_killed, "{out:?}");
    }
}

/// Why the defaults changed: the same healthy program under the local sandbox's former
/// per-process data limit (opt-in now) cannot start its threads.
#[tokio::test]
async fn the_former_data_rlimit_fails_the_same_thread_heavy_program() {
    let sandbox = LocalSandbox::new().with_rlimit_data();
    if !sandbox.applies_rlimits() {
        eprintln!("SKIPPED: prlimit is not installed");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut req = python(ws.path(), THREADS);
    req.limits.memory_bytes = 512 << 20; // the former default
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(
        out.stderr.contains("can't start new thread"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_memory_hog_is_oom_killed_by_the_runs_cgroup() {
    if !cgroups() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut req = python(ws.path(), HOG);
    req.limits.memory_bytes = 64 << 20;
    req.limits.timeout = Duration::from_secs(60);
    for sandbox in cgroup_sandboxes() {
        let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
        let kind = sandbox.kind();
        assert!(out.oom_killed, "{kind}: {out:?}");
        assert!(out.info.oom_killed, "{kind}");
        assert!(!out.timed_out, "{kind}");
        assert!(!out.stdout.contains("allocated"), "{kind}: {}", out.stdout);
        assert_ne!(out.exit_code, Some(0), "{kind}");
        let note = out.info.limits.unwrap();
        assert!(
            note.contains("memory 64 MiB") && note.contains("cgroup"),
            "{note}"
        );
    }
}

#[tokio::test]
async fn a_bounded_fork_bomb_is_stopped_by_the_runs_pids_limit() {
    if !cgroups() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(ws.path(), BOMB);
    req.limits.pids = 32;
    req.limits.timeout = Duration::from_secs(120);
    for sandbox in cgroup_sandboxes() {
        let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
        let kind = sandbox.kind();
        assert!(!out.timed_out, "{kind}: {out:?}");
        assert!(out.info.pids_limited, "{kind}: {out:?}");
        assert!(
            out.stderr.to_lowercase().contains("fork"),
            "{kind}: {}",
            out.stderr
        );
    }
}

#[tokio::test]
async fn a_process_that_leaves_the_group_still_dies_with_the_runs_cgroup() {
    if !cgroups() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("escapee.pid");
    // `setsid` puts the sleeper in a session (and process group) of its own: the group kill
    // misses it, the cgroup does not.
    let mut req = sh(
        ws.path(),
        r#"setsid sh -c 'echo $$ > "$PIDFILE"; exec sleep 1000' & while [ ! -s "$PIDFILE" ]; do sleep 0.05; done"#,
    );
    req.env
        .insert("PIDFILE".into(), pidfile.display().to_string());
    let out = LocalSandbox::new()
        .run(&req, &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_is_dead(pid), "the setsid escapee {pid} survived");
}

#[tokio::test]
async fn every_local_run_says_how_its_limits_are_enforced() {
    let ws = tempfile::tempdir().unwrap();
    let out = LocalSandbox::new()
        .run(&sh(ws.path(), "true"), &NeverCancelled)
        .await
        .unwrap();
    let note = out.info.limits.expect("a limits note");
    if nuvira_sandbox::limits::detect().enforced() {
        assert!(note.contains("enforced by cgroup"), "{note}");
        assert!(note.contains("4 GiB") && note.contains("4096"), "{note}");
    } else {
        assert!(note.contains("not enforced"), "{note}");
    }
}

#[tokio::test]
async fn the_cgroup_of_a_nuvira_that_died_is_emptied_and_removed_at_the_next_start() {
    if !cgroups() {
        return;
    }
    let parent = match nuvira_sandbox::limits::detect() {
        nuvira_sandbox::limits::Cgroups::V1 { pids, .. } => pids.clone(),
        nuvira_sandbox::limits::Cgroups::V2 { parent } => parent.clone(),
        _ => {
            eprintln!("SKIPPED: runs go through systemd scopes here");
            return;
        }
    };
    // A pid that is not running any more.
    let mut done = std::process::Command::new("true").spawn().unwrap();
    let dead = done.id();
    done.wait().unwrap();
    let cgroup = parent.join(format!("nuvira-run-{dead}-0-test"));
    std::fs::create_dir(&cgroup).unwrap();
    let mut orphan = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    std::fs::write(cgroup.join("cgroup.procs"), orphan.id().to_string()).unwrap();

    let removed = nuvira_sandbox::remove_stale();
    let _ = orphan.wait();
    assert!(removed.contains(&cgroup), "{removed:?}");
    assert!(!cgroup.exists());
}
