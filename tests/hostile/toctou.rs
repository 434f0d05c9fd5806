//! A folder swapped for a symlink while `nuvira apply` writes (issue 11, item 3).
//!
//! An attacker process that can write to the repository swaps `d/` for a symlink to a folder
//! outside it and back, in a loop, while a batch rewrites every file of `d/`. Checking each
//! path once and then writing by absolute path sent writes outside (15 of 30 trials). Writes go
//! through a directory handle of the root now, never following a symlink, so what must hold in
//! every trial: the folder outside never changes, and `apply` either succeeds with every file
//! inside the repository or fails naming `d` as the link.

use crate::support::{Sentinel, nuvira_path};
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Files in `d/`, all rewritten by every batch.
const FILES: usize = 32;
/// Trials (one `nuvira apply` each).
const TRIALS: usize = 200;

fn name(i: usize) -> String {
    format!("f{i:02}.txt")
}

/// Spins (yielding) until `d` has passed: paces the attacker without sleeping.
fn pause(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::thread::yield_now();
    }
}

/// The attacker: exchanges `d` (the real folder) and `link` (a symlink to the sentinel)
/// atomically with `renameat2(RENAME_EXCHANGE)`, so `d` always exists, until told to stop;
/// then leaves the real folder at `d`. Holds the link for a short while and the real folder
/// for a varying one, so that many swaps land after the path check and before the writes.
fn swapper(repo: &Path, stop: &AtomicBool, swaps: &AtomicU64) {
    let d = repo.join("d");
    let link = repo.join("link");
    let mut n: u64 = 0;
    let mut swapped = false;
    while !stop.load(Ordering::Relaxed) {
        renameat2(AT_FDCWD, &d, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
        swapped = !swapped;
        if swapped {
            swaps.fetch_add(1, Ordering::Relaxed);
            pause(Duration::from_micros(200));
        } else {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            pause(Duration::from_micros(200 + (n >> 33) % 1500));
        }
    }
    if swapped {
        renameat2(AT_FDCWD, &d, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
    }
}

#[test]
fn a_folder_swapped_for_a_symlink_mid_batch_never_sends_a_write_outside() {
    // tmpfs where there is one: fsync is free there, so 200 trials fit in the time budget and
    // the race (not the disk) decides each trial.
    let base = Path::new("/dev/shm");
    let tmp = || {
        if base.is_dir() {
            tempfile::tempdir_in(base).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        }
    };
    let outside = tmp();
    let sentinel_dir = outside.path().join("sentinel");
    std::fs::create_dir(&sentinel_dir).unwrap();
    for i in 0..FILES {
        std::fs::write(sentinel_dir.join(name(i)), format!("sentinel {i}\n")).unwrap();
    }
    let sentinel = Sentinel::of(outside.path());

    let edits_dir = tmp();
    let edits = edits_dir.path().join("batch.yaml");
    let mut yaml = String::from("edits:\n");
    for i in 0..FILES {
        yaml.push_str(&format!(
            "  - strategy: whole-file\n    path: d/{}\n    content: \"new {i}\\n\"\n",
            name(i)
        ));
    }
    std::fs::write(&edits, yaml).unwrap();

    let (mut ok, mut at_check, mut mid_batch) = (0, 0, 0);
    let started = Instant::now();
    for trial in 0..TRIALS {
        let repo = tmp();
        std::fs::create_dir(repo.path().join("d")).unwrap();
        for i in 0..FILES {
            std::fs::write(repo.path().join("d").join(name(i)), format!("old {i}\n")).unwrap();
        }
        std::os::unix::fs::symlink(&sentinel_dir, repo.path().join("link")).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let attacker = {
            let (root, stop, swaps) = (repo.path().to_path_buf(), stop.clone(), swaps.clone());
            std::thread::spawn(move || swapper(&root, &stop, &swaps))
        };
        // The attacker has swapped at least once before apply starts.
        let deadline = Instant::now() + Duration::from_secs(10);
        while swaps.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the swapper never ran");
            std::thread::yield_now();
        }
        let out = std::process::Command::new(nuvira_path())
            .arg("apply")
            .arg(&edits)
            .arg("--repo")
            .arg(repo.path())
            .output()
            .unwrap();
        stop.store(true, Ordering::Relaxed);
        attacker.join().unwrap();

        sentinel.assert_unchanged(outside.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ctx = format!(
            "trial {trial}: exit {:?}\nstderr:\n{stderr}",
            out.status.code()
        );
        assert!(
            std::fs::symlink_metadata(repo.path().join("d"))
                .unwrap()
                .is_dir(),
            "{ctx}"
        );
        if out.status.success() {
            ok += 1;
            for i in 0..FILES {
                let got = std::fs::read_to_string(repo.path().join("d").join(name(i))).unwrap();
                assert_eq!(
                    got,
                    format!("new {i}\n"),
                    "{} lost its edit; {ctx}",
                    name(i)
                );
            }
        } else {
            assert_eq!(out.status.code(), Some(1), "{ctx}");
            // Refused by a write, or by the rollback of the writes before it (which then
            // leaves the batch pending for the next start to roll back).
            // Or by the compare-and-swap check: through the swapped-in link, a file of `d/`
            // no longer holds what the batch read.
            if stderr.contains("`d` became a symbolic link")
                || stderr.contains("through the symlink `d`")
                || (stderr.contains("`d/") && stderr.contains("changed since the batch read it"))
            {
                mid_batch += 1;
            } else if stderr.contains("`d` is a symlink to") {
                at_check += 1;
            } else {
                panic!("the error does not name `d` as the symlink; {ctx}");
            }
        }
    }
    eprintln!(
        "{TRIALS} trials of {FILES} files in {:.1?}: {ok} applied, {at_check} refused at the \
         path check, {mid_batch} refused mid-batch (the swap landed between check and write)",
        started.elapsed()
    );
    // The harness must actually race: some swaps land after the check.
    assert!(
        mid_batch > 0,
        "no swap landed mid-batch: {ok} applied, {at_check} refused at the check"
    );
}
