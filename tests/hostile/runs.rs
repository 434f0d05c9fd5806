//! The run history (`.nuvira/runs/`) of a hostile checkout: run folders are data. A symlinked
//! run folder, a symlinked `.nuvira/runs`, a symlink inside a run folder and a symlinked
//! `run.json` must never make `nuvira runs`, `runs show`, `runs gc` or `nuvira run` read,
//! write or delete anything outside the repository.

use crate::support::{Sentinel, nuvira};
use std::os::unix::fs::symlink;
use std::path::Path;

fn meta(id: &str, started_ms: u64) -> String {
    serde_json::json!({
        "format": 1, "id": id, "goal": "g", "status": "succeeded", "started_ms": started_ms,
        "pid": 0, "steps": 1
    })
    .to_string()
}

fn real_run(repo: &Path, id: &str, started_ms: u64) {
    let dir = repo.join(".nuvira/runs").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), meta(id, started_ms)).unwrap();
}

/// A folder outside the repository that looks like a run folder, with a file that must stay.
fn outside_run(outside: &Path, id: &str) {
    std::fs::create_dir_all(outside.join("keep")).unwrap();
    std::fs::write(outside.join("run.json"), meta(id, 1)).unwrap();
    std::fs::write(outside.join("keep/precious.txt"), "do not delete").unwrap();
}

#[test]
fn gc_never_follows_a_symlinked_run_folder_out_of_the_repository() {
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    outside_run(outside.path(), "run-evil");
    real_run(repo.path(), "run-1", 1000);
    real_run(repo.path(), "run-2", 2000);
    real_run(repo.path(), "run-3", 3000);
    symlink(outside.path(), repo.path().join(".nuvira/runs/run-evil")).unwrap();
    let before = Sentinel::of(outside.path());
    let out = nuvira()
        .args(["runs", "gc", "--keep", "1", "--keep-days", "0", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("left alone: run-evil (a symlink, never followed)"),
        "{stderr}"
    );
    before.assert_unchanged(outside.path());
    // Exactly the policy: the newest real run stays, the link stays a link.
    let runs = repo.path().join(".nuvira/runs");
    assert!(runs.join("run-3").is_dir());
    assert!(!runs.join("run-1").exists() && !runs.join("run-2").exists());
    assert!(
        std::fs::symlink_metadata(runs.join("run-evil"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Neither listed nor shown.
    let out = nuvira()
        .args(["runs", "--json", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(!list.contains("run-evil"), "{list}");
    let out = nuvira()
        .args(["runs", "show", "run-evil", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run `run-evil`"));
}

#[test]
fn gc_removes_a_run_folder_holding_a_symlink_without_following_it() {
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    outside_run(outside.path(), "run-x");
    real_run(repo.path(), "run-old", 1000);
    real_run(repo.path(), "run-new", 2000);
    symlink(
        outside.path(),
        repo.path().join(".nuvira/runs/run-old/calls"),
    )
    .unwrap();
    symlink(
        outside.path().join("keep/precious.txt"),
        repo.path().join(".nuvira/runs/run-old/report.json"),
    )
    .unwrap();
    let before = Sentinel::of(outside.path());
    // `show` does not read a symlinked report either.
    let out = nuvira()
        .args(["runs", "show", "run-old", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("do not delete"));
    let out = nuvira()
        .args(["runs", "gc", "--keep", "1", "--keep-days", "0", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!repo.path().join(".nuvira/runs/run-old").exists());
    assert!(repo.path().join(".nuvira/runs/run-new").is_dir());
    before.assert_unchanged(outside.path());
}

#[test]
fn a_symlinked_runs_folder_or_run_json_is_refused_and_nothing_outside_changes() {
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("run-1")).unwrap();
    std::fs::write(outside.path().join("run-1/run.json"), meta("run-1", 1)).unwrap();
    std::fs::create_dir_all(repo.path().join(".nuvira")).unwrap();
    symlink(outside.path(), repo.path().join(".nuvira/runs")).unwrap();
    let before = Sentinel::of(outside.path());
    for args in [
        &["runs"][..],
        &["runs", "gc", "--keep", "1", "--keep-days", "1"],
    ] {
        let out = nuvira()
            .args(args)
            .arg("--repo")
            .arg(repo.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(".nuvira/runs"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A run records nothing through the link, and says so.
    std::fs::create_dir_all(repo.path().join("src")).unwrap();
    std::fs::write(repo.path().join("src/a.txt"), "x\n").unwrap();
    let plan = repo.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - { id: e, module: edit, config: { edits: [ { path: src/a.txt, strategy: whole-file, content: \"y\\n\" } ] } }\n",
    )
    .unwrap();
    let out = nuvira()
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(repo.path())
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not recorded in the history"));
    before.assert_unchanged(outside.path());

    // A real folder whose run.json is a link to a file outside: not listed, not read.
    let repo2 = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo2.path().join(".nuvira/runs/run-2")).unwrap();
    std::fs::write(outside.path().join("secret.json"), meta("run-2", 5)).unwrap();
    symlink(
        outside.path().join("secret.json"),
        repo2.path().join(".nuvira/runs/run-2/run.json"),
    )
    .unwrap();
    let out = nuvira()
        .args(["runs", "--json", "--repo"])
        .arg(repo2.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
