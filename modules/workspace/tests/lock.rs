//! The repository lock and the compare-and-swap check of a batch's writes.

use nuvira_workspace::{
    FileOp, Journal, JournalError, LockError, LockWait, RepoLock, Seen, Workspace,
};
use std::path::Path;

fn op(path: &str, text: &str) -> FileOp {
    FileOp::Write {
        path: path.into(),
        content: text.as_bytes().to_vec(),
        mode: None,
    }
}

fn repo() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "beta\n").unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    (dir, ws)
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

#[test]
fn the_lock_is_shared_within_a_process_and_names_its_holder_in_the_file() {
    let (dir, ws) = repo();
    let held = RepoLock::acquire(&ws, "nuvira apply e.yaml", LockWait::Fail, |_| {}).unwrap();
    // A batch of this process goes through while the command holds the lock.
    let journal = Journal::new(&ws);
    let mut txn = journal.begin("run-1", None);
    txn.apply(&[op("a.txt", "ALPHA\n")]).unwrap();
    txn.commit().unwrap();
    // A record of fixed size, padded with newlines: written in place, never truncated.
    let text = read(dir.path(), ".nuvira/lock");
    assert_eq!(text.len(), 512);
    assert_eq!(
        text.trim_end_matches('\n'),
        format!("{}\nnuvira apply e.yaml", std::process::id())
    );
    assert_eq!(held.root(), ws.root());
    assert_eq!(read(dir.path(), ".nuvira/.gitignore"), "*\n");
    drop(held);
    assert_eq!(
        read(dir.path(), ".nuvira/lock").trim_end_matches('\n'),
        "",
        "a released lock names nobody"
    );
}

#[cfg(unix)]
#[test]
fn a_lock_file_planted_as_a_symlink_is_refused_and_its_target_untouched() {
    let (dir, ws) = repo();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("bashrc");
    std::fs::write(&target, "keep me\n").unwrap();
    std::fs::create_dir(dir.path().join(".nuvira")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(".nuvira/lock")).unwrap();
    let err = RepoLock::acquire(&ws, "x", LockWait::Fail, |_| {}).unwrap_err();
    assert!(matches!(err, LockError::Unsafe { .. }), "{err}");
    assert!(err.to_string().contains("symlink"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
}

#[cfg(unix)]
#[test]
fn a_state_folder_planted_as_a_symlink_is_refused_and_nothing_is_created_through_it() {
    let (dir, ws) = repo();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".nuvira")).unwrap();
    let err = RepoLock::acquire(&ws, "x", LockWait::Fail, |_| {}).unwrap_err();
    assert!(matches!(err, LockError::Unsafe { .. }), "{err}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_file_changed_since_the_batch_read_it_aborts_the_batch_before_any_write() {
    let (dir, ws) = repo();
    let journal = Journal::new(&ws);
    let mut txn = journal.begin("run-1", None);
    txn.expect("a.txt", Seen::bytes(b"alpha\n"));
    txn.expect("b.txt", Seen::bytes(b"beta\n"));
    std::fs::write(dir.path().join("b.txt"), "someone else\n").unwrap();
    let err = txn
        .apply(&[op("a.txt", "ALPHA\n"), op("b.txt", "BETA\n")])
        .unwrap_err();
    match &err {
        JournalError::ChangedSinceRead { path, what } => {
            assert_eq!((path.as_str(), what.as_str()), ("b.txt", "edited"));
        }
        other => panic!("expected ChangedSinceRead, got {other}"),
    }
    assert_eq!(read(dir.path(), "a.txt"), "alpha\n");
    assert_eq!(read(dir.path(), "b.txt"), "someone else\n");
    drop(txn);
    assert_eq!(
        journal.last_run().unwrap(),
        None,
        "an aborted batch left a record"
    );
}

#[test]
fn a_file_created_since_the_batch_saw_it_absent_is_not_overwritten() {
    let (dir, ws) = repo();
    let journal = Journal::new(&ws);
    let mut txn = journal.begin("run-1", None);
    txn.expect("new.txt", Seen::absent());
    std::fs::write(dir.path().join("new.txt"), "mine\n").unwrap();
    let err = txn.apply(&[op("new.txt", "theirs\n")]).unwrap_err();
    assert!(
        matches!(&err, JournalError::ChangedSinceRead { what, .. } if what == "created"),
        "{err}"
    );
    assert_eq!(read(dir.path(), "new.txt"), "mine\n");
}

#[test]
fn a_rollback_of_a_repository_without_a_journal_creates_no_state() {
    let (dir, ws) = repo();
    let journal = Journal::new(&ws);
    assert!(journal.recover_incomplete().unwrap().is_empty());
    assert!(journal.rollback_run("run-1").unwrap().is_empty());
    assert!(!dir.path().join(".nuvira").exists());
}
