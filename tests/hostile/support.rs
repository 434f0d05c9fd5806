//! Helpers of the adversarial tests.
#![allow(dead_code)]

use assert_cmd::Command;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `nuvira` binary built for these tests.
pub fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

/// The path of the `nuvira` binary, for `std::process::Command` (signals, concurrency).
pub fn nuvira_path() -> PathBuf {
    assert_cmd::cargo::cargo_bin("nuvira")
}

/// Runs `git` in `dir` and panics with its stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A snapshot of everything below a folder (files with their content hash and mode, symlinks
/// with their target, folders), never following a symlink. Take one of a folder outside the
/// repository before the attack and compare after: nothing may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinel(BTreeMap<String, String>);

impl Sentinel {
    /// Snapshots `dir`.
    pub fn of(dir: &Path) -> Self {
        let mut map = BTreeMap::new();
        walk(dir, dir, &mut map);
        Self(map)
    }

    /// Snapshots a repository's own files: everything but Nuvira's state in `.nuvira/`, which
    /// a run may create or update.
    pub fn of_repo(dir: &Path) -> Self {
        let mut s = Self::of(dir);
        s.0.retain(|k, _| k != ".nuvira" && !k.starts_with(".nuvira/"));
        s
    }

    /// Panics, listing the differences, when the repository `dir` (without `.nuvira/`) no longer
    /// matches this snapshot (taken with [`Sentinel::of_repo`]).
    pub fn assert_repo_unchanged(&self, dir: &Path) {
        self.assert_same(&Self::of_repo(dir), dir);
    }

    /// Panics, listing the differences, when `dir` no longer matches this snapshot.
    pub fn assert_unchanged(&self, dir: &Path) {
        self.assert_same(&Self::of(dir), dir);
    }

    fn assert_same(&self, now: &Self, dir: &Path) {
        if *now != *self {
            let mut diff = Vec::new();
            for (k, v) in &self.0 {
                match now.0.get(k) {
                    None => diff.push(format!("removed: {k}")),
                    Some(w) if w != v => diff.push(format!("changed: {k} ({v} -> {w})")),
                    _ => {}
                }
            }
            for k in now.0.keys() {
                if !self.0.contains_key(k) {
                    diff.push(format!("added: {k}"));
                }
            }
            panic!(
                "{} changed outside the repository:\n{}",
                dir.display(),
                diff.join("\n")
            );
        }
    }
}

fn walk(root: &Path, dir: &Path, map: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            map.insert(rel, format!("link -> {}", target.display()));
        } else if meta.is_dir() {
            map.insert(rel, format!("dir {mode:o}"));
            walk(root, &path, map);
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            let hash = Sha256::digest(&bytes);
            map.insert(rel, format!("file {mode:o} {hash:x}"));
        } else {
            map.insert(rel, "special".into());
        }
    }
}

#[test]
fn a_sentinel_sees_a_changed_file_and_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), "1").unwrap();
    let s = Sentinel::of(dir.path());
    s.assert_unchanged(dir.path());
    std::fs::write(dir.path().join("a"), "2").unwrap();
    let r = std::panic::catch_unwind(|| s.assert_unchanged(dir.path()));
    assert!(r.is_err(), "a changed file must be seen");
    std::fs::write(dir.path().join("a"), "1").unwrap();
    std::fs::write(dir.path().join("b"), "").unwrap();
    let r = std::panic::catch_unwind(|| s.assert_unchanged(dir.path()));
    assert!(r.is_err(), "an added file must be seen");
}

/// Whether a Docker engine with the `nuvira-busybox` image answers; with
/// `NUVIRA_REQUIRE_DOCKER=1` its absence fails the test instead of skipping it.
pub fn docker_ready() -> bool {
    use nuvira_test_support::env::{Requirement, require};
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "nuvira-busybox:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    let found = if ok {
        Ok(())
    } else {
        Err("no Docker engine with the nuvira-busybox image answers")
    };
    require(Requirement::Docker, found).is_some()
}
