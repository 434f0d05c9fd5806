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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// Spins (yielding) until `d` has passed: paces the attacker without sleeping.
fn pause(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::thread::yield_now();
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
fn swapper(pairs: &[(PathBuf, PathBuf)], stop: &AtomicBool, swaps: &AtomicU64) {
    let mut n: u64 = 0;
    let mut swapped = false;
    let exchange = |a: &Path, b: &Path| {
        // A run folder gc removed (wherever it was) leaves nothing to exchange with.
        let _ = renameat2(AT_FDCWD, a, AT_FDCWD, b, RenameFlags::RENAME_EXCHANGE);
    };
    while !stop.load(Ordering::Relaxed) {
        for (a, b) in pairs {
            exchange(a, b);
        }
        swapped = !swapped;
        if swapped {
            swaps.fetch_add(1, Ordering::Relaxed);
            pause(Duration::from_micros(100));
        } else {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            pause(Duration::from_micros(50 + (n >> 33) % 600));
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
        let stop = Arc::new(AtomicBool::new(false));
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
        stop.store(true, Ordering::Relaxed);
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
        if out.status.success() {
            removed += stderr.matches("removed run-").count();
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
