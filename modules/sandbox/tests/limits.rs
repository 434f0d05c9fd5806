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

/// Whether runs here reuse cgroup v1 pairs joined by a starter thread (the `limits` pool);
/// `false` after saying why the test is skipped.
fn pooled_cgroups() -> bool {
    if !cgroups() {
        return false;
    }
    if !nuvira_sandbox::limits::reuses_cgroups() {
        eprintln!(
            "SKIPPED: runs reuse cgroups only on cgroup v1, kernel 5.10 or later, with NUVIRA_CGROUP_POOL unset"
        );
        return false;
    }
    true
}

/// The memory cgroup a run's shell is in, from its `/proc/self/cgroup`.
fn memory_cgroup(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))
        .unwrap_or_else(|| panic!("no memory cgroup in {stdout}"))
}

#[tokio::test]
async fn a_reused_cgroup_holds_nothing_of_the_run_before() {
    if !pooled_cgroups() {
        return;
    }
    let sandbox = LocalSandbox::new();
    let ws = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("escapee.pid");
    let mut first = sh(
        ws.path(),
        r#"cat /proc/self/cgroup; setsid sh -c 'echo $$ > "$PIDFILE"; exec sleep 1000' & while [ ! -s "$PIDFILE" ]; do sleep 0.05; done"#,
    );
    first
        .env
        .insert("PIDFILE".into(), pidfile.display().to_string());
    first.limits.memory_bytes = 1 << 30;
    first.limits.pids = 100;
    let one = sandbox.run(&first, &NeverCancelled).await.unwrap();
    assert_eq!(one.exit_code, Some(0), "{one:?}");
    let escapee: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        process_is_dead(escapee),
        "the setsid escapee {escapee} survived"
    );

    // The next run gets other limits, and lists the processes of its cgroup.
    let mut second = sh(
        ws.path(),
        r#"cat /proc/self/cgroup; m=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); root=$(awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ { print $2 }' /proc/mounts); echo "limit $(cat "$root$m/memory.limit_in_bytes")"; echo "procs $(cat "$root$m/cgroup.procs" | tr '\n' ' ')""#,
    );
    second.limits.memory_bytes = 256 << 20;
    second.limits.pids = 50;
    let two = sandbox.run(&second, &NeverCancelled).await.unwrap();
    assert_eq!(two.exit_code, Some(0), "{two:?}");
    // Runs one after the other in this test; other tests of this binary may hold other slots,
    // so the second run's cgroup is either the first's (reused) or another free one: either
    // way it holds no process of an earlier run.
    let cgroup = memory_cgroup(&two.stdout);
    assert!(cgroup.contains("/nuvira-run-"), "{}", two.stdout);
    assert!(
        two.stdout.contains(&format!("limit {}", 256u64 << 20)),
        "{}",
        two.stdout
    );
    let procs = two
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("procs "))
        .unwrap();
    assert!(
        !procs.split_whitespace().any(|p| p == escapee.to_string()),
        "{procs}"
    );
    assert!(
        procs
            .split_whitespace()
            .any(|p| p == std::process::id().to_string()),
        "the starter thread of this process is in the cgroup: {procs}"
    );
    assert!(!two.info.oom_killed && !two.info.pids_limited, "{two:?}");
}

#[tokio::test]
async fn processes_smaller_than_this_one_that_fill_the_limit_are_killed_never_this_one() {
    if !pooled_cgroups() {
        return;
    }
    // This process is made bigger than any of the run's: were its starter thread a candidate,
    // the OOM killer would pick this process (and the test would die with it).
    let ballast: Vec<u8> = vec![1; 96 << 20];
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(
        ws.path(),
        r#"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do python3 -c "b = b'a' * (16 << 20); import time; time.sleep(3)" & done; wait; echo finished"#,
    );
    req.limits.memory_bytes = 96 << 20;
    req.limits.timeout = Duration::from_secs(60);
    let sandbox = LocalSandbox::new();
    for _ in 0..2 {
        let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert!(out.info.oom_killed, "{out:?}");
        assert!(out.stdout.contains("finished"), "{out:?}");
    }
    assert_eq!(
        ballast.iter().map(|&b| usize::from(b)).sum::<usize>(),
        96 << 20
    );
}

/// Where the v1 memory hierarchy is mounted.
fn memory_root() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory"))
                .then(|| std::path::PathBuf::from(f[1]))
        })
        .expect("a cgroup v1 memory hierarchy")
}

#[tokio::test]
async fn a_run_that_leaves_memory_charged_does_not_hand_its_cgroup_on() {
    if !pooled_cgroups() {
        return;
    }
    // A file in the shared /dev/shm outlives the run and stays charged to its memory cgroup:
    // a next run in that cgroup would start with 8 MiB of its limit gone.
    let shm = Path::new("/dev/shm").join(format!("nuvira-limits-test-{}", std::process::id()));
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(
        ws.path(),
        r#"cat /proc/self/cgroup; head -c 8388608 /dev/zero > "$SHMFILE""#,
    );
    req.env.insert("SHMFILE".into(), shm.display().to_string());
    let sandbox = LocalSandbox::new();
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    let _ = std::fs::remove_file(&shm);
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let cgroup = memory_cgroup(&out.stdout);
    assert!(cgroup.contains("/nuvira-run-"), "{}", out.stdout);
    let dir = memory_root().join(cgroup.trim_start_matches('/'));
    assert!(
        !dir.exists(),
        "the cgroup {} still charged with the run's /dev/shm file was kept for reuse",
        dir.display()
    );
}

/// Processes whose command line holds `marker`, other than zombies.
fn live_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        if !matches!(state, Some(Some('Z' | 'X')) | None) {
            found.push(format!("{}: {}", path.display(), stat.trim()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_abandoned_at_any_moment_leave_no_process_behind() {
    if !pooled_cgroups() {
        return;
    }
    // Dropped at every moment of a start, including while its start waits on the cgroup's
    // starter thread: nothing may live on in a cgroup that goes back for the next run.
    let marker = format!("4242.{}", std::process::id());
    let ws = tempfile::tempdir().unwrap();
    let req = sh(
        ws.path(),
        &format!("sleep {marker}1 & exec sleep {marker}2"),
    );
    let sandbox = LocalSandbox::new();
    for i in 0..200u64 {
        let wait = Duration::from_micros((i * 37) % 4000);
        let _ = tokio::time::timeout(wait, sandbox.run(&req, &NeverCancelled)).await;
        let alive = live_with(&marker);
        assert!(
            alive.is_empty(),
            "after abandoning run {i} at {wait:?}: {alive:?}"
        );
    }
    // And one that runs to its end still works in the reused cgroups.
    let ok = sandbox
        .run(&sh(ws.path(), "echo done"), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(ok.stdout.trim(), "done", "{ok:?}");
}
