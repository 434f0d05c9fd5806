//! `nuvira runs gc` raced by a process that swaps `.nuvira/runs`, or the run folders in it,
//! for symlinks to a folder outside the repository and back, in a loop, while gc scans, locks
//! and removes.
//!
//! By path, gc resolved `.nuvira/runs/<id>` again for each step: a swap between the scan and
//! the removal had it lock, re-read and delete the outside folder of the same name (its
//! `run.json` the same as the real one's). It now opens `.nuvira/runs` once and works through
//! that handle and the run folders' handles (never following a symlink), so what must hold in
//! every trial: the outside folder never changes, and gc either succeeds or refuses naming the
//! symlink.

use crate::support::{Sentinel, nuvira_path};
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Old runs in each repository (all but the newest doomed by `--keep 1`).
const RUNS: usize = 12;
/// Files in each run folder (and in each outside twin).
const FILES: usize = 8;
/// Trials (one `nuvira runs gc` each), half swapping `.nuvira/runs`, half the run folders.
const TRIALS: usize = 80;

fn id(i: usize) -> String {
    format!("run-{}-race{i:02}", 1_000 + i)
}

/// A run folder's `run.json`: an old run that ended.
fn meta(i: usize) -> String {
    serde_json::json!({
        "format": 1, "id": id(i), "goal": "g", "status": "succeeded",
        "started_ms": 1_000 + i, "pid": 0, "steps": 1
    })
    .to_string()
}

/// A run folder (real in the repository, or its twin outside): `run.json` and some files.
fn fill_run(dir: &Path, i: usize) {
    std::fs::create_dir_all(dir.join("calls")).unwrap();
    std::fs::write(dir.join("run.json"), meta(i)).unwrap();
    for f in 0..FILES {
        std::fs::write(dir.join("calls").join(format!("{f:04}.json")), "{}").unwrap();
    }
    std::fs::write(dir.join("events.jsonl"), "").unwrap();
}

/// The attacker's stop signal: set once, waited on with a timeout (the attacker's pacing).
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    fn set(&self) {
        *self.stopped.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn is_set(&self) -> bool {
        *self.stopped.lock().unwrap()
    }

    /// Waits (blocked, not spinning) until `d` has passed or the stop came.
    fn pause(&self, d: Duration) {
        let guard = self.stopped.lock().unwrap();
        let _ = self
            .cv
            .wait_timeout_while(guard, d, |stopped| !*stopped)
            .unwrap();
    }
}

/// What the attacker exchanges: pairs of names, the real folder and a symlink to the outside.
fn pairs(repo: &Path, whole: bool) -> Vec<(PathBuf, PathBuf)> {
    let nuvira = repo.join(".nuvira");
    if whole {
        vec![(nuvira.join("runs"), nuvira.join("runs-link"))]
    } else {
        (0..RUNS)
            .map(|i| {
                let runs = nuvira.join("runs");
                (runs.join(id(i)), runs.join(format!(".swap-{i}")))
            })
            .collect()
    }
}

/// The attacker: exchanges each pair atomically (`renameat2(RENAME_EXCHANGE)`, so the name
/// always exists) until told to stop, holding the link a short while and the real folder a
/// varying one; then puts the real folders back where they still exist.
fn swapper(pairs: &[(PathBuf, PathBuf)], stop: &Stop, swaps: &AtomicU64) {
    let mut n: u64 = 0;
    let mut swapped = false;
    let exchange = |a: &Path, b: &Path| {
        // A run folder gc removed (wherever it was) leaves nothing to exchange with.
        let _ = renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE);
    };
    while !stop.is_set() {
        for (a, b) in pairs {
            exchange(a, b);
        }
        swapped = !swapped;
        if swapped {
            swaps.fetch_add(1, Ordering::Relaxed);
            stop.pause(Duration::from_micros(100));
        } else {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            stop.pause(Duration::from_micros(50 + (n >> 33) % 600));
        }
    }
    if swapped {
        for (a, b) in pairs {
            exchange(a, b);
        }
    }
}

#[test]
fn gc_raced_by_symlink_swaps_of_the_runs_folder_or_its_run_folders_never_removes_anything_outside()
{
    // tmpfs where there is one: the race, not the disk, decides each trial.
    let base = Path::new("/dev/shm");
    let tmp = || {
        if base.is_dir() {
            tempfile::tempdir_in(base).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        }
    };
    // Outside: a twin of every run folder, same names and same `run.json`.
    let outside = tmp();
    let victim = outside.path().join("victim");
    for i in 0..RUNS {
        fill_run(&victim.join(id(i)), i);
    }
    let sentinel = Sentinel::of(outside.path());

    let (mut removed, mut refused, mut total_swaps) = (0usize, 0usize, 0u64);
    for trial in 0..TRIALS {
        let whole = trial % 2 == 0;
        let repo = tmp();
        let runs = repo.path().join(".nuvira/runs");
        for i in 0..RUNS {
            fill_run(&runs.join(id(i)), i);
            std::os::unix::fs::symlink(victim.join(id(i)), runs.join(format!(".swap-{i}")))
                .unwrap();
        }
        std::os::unix::fs::symlink(&victim, repo.path().join(".nuvira/runs-link")).unwrap();

        let pairs = pairs(repo.path(), whole);
        let stop = Arc::new(Stop::default());
        let swaps = Arc::new(AtomicU64::new(0));
        let attacker = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || swapper(&pairs, &stop, &swaps))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while swaps.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the swapper never ran");
            std::thread::yield_now();
        }
        let out = std::process::Command::new(nuvira_path())
            .args(["runs", "gc", "--keep", "1", "--keep-days", "0", "--repo"])
            .arg(repo.path())
            .env_remove("NUVIRA_RUNS_KEEP")
            .env_remove("NUVIRA_RUNS_KEEP_DAYS")
            .env_remove("NUVIRA_CONFIG")
            .output()
            .unwrap();
        stop.set();
        attacker.join().unwrap();
        total_swaps += swaps.load(Ordering::Relaxed);

        let stderr = String::from_utf8_lossy(&out.stderr);
        let ctx = format!(
            "trial {trial} ({}): exit {:?}\nstderr:\n{stderr}",
            if whole {
                ".nuvira/runs swapped"
            } else {
                "run folders swapped"
            },
            out.status.code()
        );
        sentinel.assert_unchanged(outside.path());
        // What gc said it removed is exactly what is gone.
        let said: BTreeSet<String> = stderr
            .lines()
            .filter_map(|l| l.strip_prefix("removed "))
            .filter(|id| id.starts_with("run-"))
            .map(str::to_owned)
            .collect();
        let gone: BTreeSet<String> = (0..RUNS)
            .map(id)
            // (A run folder removed while the attacker had it at its other name leaves the
            // symlink at its own.)
            .filter(|id| !std::fs::symlink_metadata(runs.join(id)).is_ok_and(|m| m.is_dir()))
            .collect();
        assert_eq!(said, gone, "{ctx}");
        if out.status.success() {
            removed += said.len();
        } else {
            // Refused at the start: `.nuvira/runs` was the link when gc opened it.
            assert!(
                stderr.contains("symbolic link") || stderr.contains("symlink"),
                "{ctx}"
            );
            refused += 1;
        }
        // Whatever was not removed is still a whole run folder, in the repository.
        let real = std::fs::symlink_metadata(&runs).unwrap();
        assert!(real.is_dir(), "{ctx}");
        for i in 0..RUNS {
            let dir = runs.join(id(i));
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                assert_eq!(
                    std::fs::read_to_string(dir.join("run.json")).unwrap(),
                    meta(i),
                    "{ctx}"
                );
            }
        }
    }
    eprintln!(
        "{TRIALS} trials: {removed} run folders removed, {refused} gc runs refused, \
         {total_swaps} swaps"
    );
    assert!(
        removed > 0,
        "no trial removed anything: the race was never run"
    );
    assert!(total_swaps >= TRIALS as u64 * 2, "{total_swaps} swaps");
}

/// `runs gc` as the CLI runs it, for `repo` (`--keep 1 --keep-days 0`).
fn gc_command(repo: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(nuvira_path());
    cmd.args(["runs", "gc", "--keep", "1", "--keep-days", "0", "--repo"])
        .arg(repo)
        .env_remove("NUVIRA_RUNS_KEEP")
        .env_remove("NUVIRA_RUNS_KEEP_DAYS")
        .env_remove("NUVIRA_CONFIG");
    cmd
}

#[test]
fn two_gcs_at_once_over_the_same_folders_both_succeed_and_remove_each_folder_once() {
    use nuvira::runs::{Retention, RunStore};
    const ROUNDS: usize = 60;
    let policy = Retention {
        keep_runs: Some(1),
        keep_days: None,
    };
    for round in 0..ROUNDS {
        let repo = tempfile::tempdir().unwrap();
        let runs = repo.path().join(".nuvira/runs");
        for i in 0..RUNS {
            fill_run(&runs.join(id(i)), i);
            // And an abandoned folder (no run.json) for each.
            let dead = runs.join(format!("run-{}-dead{i:02}", 5_000 + i));
            std::fs::create_dir_all(dead.join("calls")).unwrap();
            std::fs::write(dead.join("calls/0000.json"), "{}").unwrap();
        }
        let start = Arc::new(Barrier::new(2));
        let gcs: Vec<_> = (0..2)
            .map(|_| {
                let (start, repo) = (start.clone(), repo.path().to_owned());
                std::thread::spawn(move || {
                    let store = RunStore::open(&repo).unwrap();
                    start.wait();
                    store.gc_with_grace(policy, &[], false, Duration::ZERO)
                })
            })
            .collect();
        let outs: Vec<_> = gcs
            .into_iter()
            .map(|g| g.join().unwrap())
            .map(|r| r.unwrap_or_else(|e| panic!("round {round}: a gc failed: {e}")))
            .collect();
        let mut removed: Vec<String> = outs
            .iter()
            .flat_map(|o| o.removed.iter().chain(&o.abandoned).cloned())
            .collect();
        for o in &outs {
            assert!(o.ignored.is_empty(), "round {round}: {:?}", o.ignored);
        }
        removed.sort();
        let n = removed.len();
        removed.dedup();
        assert_eq!(
            n,
            removed.len(),
            "round {round}: removed twice: {removed:?}"
        );
        // Every folder but the newest run is gone, each said by one of the two.
        assert_eq!(removed.len(), 2 * RUNS - 1, "round {round}: {removed:?}");
        let left: Vec<_> = std::fs::read_dir(&runs)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from(id(RUNS - 1))]);
    }
}

#[test]
fn a_run_folder_thousands_of_levels_deep_is_left_and_said_the_others_still_go() {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let repo = tempfile::tempdir().unwrap();
    let runs = repo.path().join(".nuvira/runs");
    for i in 0..3 {
        fill_run(&runs.join(id(i)), i);
    }
    // 3000 levels in the oldest run folder, made relative to a handle.
    let mut fd = nix::fcntl::open(
        &runs.join(id(0)),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    for _ in 0..3000 {
        mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(
            &fd,
            "d",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
    }
    drop(fd);
    // Under an ordinary descriptor limit (a handle per level would run out of it).
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -n 1024 && exec \"$@\"", "sh"])
        .arg(nuvira_path())
        .args(["runs", "gc", "--keep", "1", "--keep-days", "0", "--repo"])
        .arg(repo.path())
        .env_remove("NUVIRA_RUNS_KEEP")
        .env_remove("NUVIRA_RUNS_KEEP_DAYS")
        .env_remove("NUVIRA_CONFIG");
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("left alone: {}", id(0)))
            && stderr.contains("nested deeper than 256 levels"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("removed {}", id(1))), "{stderr}");
    assert!(!runs.join(id(1)).exists());
    assert!(runs.join(id(0)).join("d/d/d").is_dir());
    assert!(runs.join(id(2)).join("run.json").is_file());
}

#[test]
fn a_run_folder_moved_out_of_the_runs_folder_during_gc_keeps_its_files() {
    use std::io::{BufRead as _, BufReader, Write as _};
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let runs = repo.path().join(".nuvira/runs");
    for i in 0..3 {
        fill_run(&runs.join(id(i)), i);
    }
    let mut child = gc_command(repo.path())
        .env(nuvira_workspace::FAULT_PAUSE_AT_ENV, "gc-locked")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut pauses = 0;
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            break;
        }
        said.push_str(&line);
        if line.trim() == "nuvira: paused at gc-locked" {
            // gc holds the oldest run folder, locked and re-read: it moves out now.
            if pauses == 0 {
                std::fs::rename(runs.join(id(0)), outside.path().join("victim")).unwrap();
            }
            pauses += 1;
            writeln!(stdin).unwrap();
        }
    }
    assert!(child.wait().unwrap().success(), "{said}");
    assert_eq!(pauses, 2, "{said}");
    let victim = outside.path().join("victim");
    assert_eq!(
        std::fs::read_to_string(victim.join("run.json")).unwrap(),
        meta(0),
        "{said}"
    );
    for f in 0..FILES {
        assert!(
            victim.join("calls").join(format!("{f:04}.json")).is_file(),
            "{said}"
        );
    }
    assert!(
        said.contains(&format!("left alone: {} (it was moved out", id(0))),
        "{said}"
    );
    assert!(said.contains(&format!("removed {}", id(1))), "{said}");
    assert!(!runs.join(id(1)).exists());
}
