//! Edit batches raced by other processes, and batches a failing write cuts short.
//!
//! What must hold: no edit is lost (a second `nuvira apply` on the same repository either waits
//! for the first, or fails with exit 3 naming it); a file changed by anything else between a
//! batch's read and its write aborts the batch with that file named and the outsider's content
//! kept; a write that fails mid-batch restores exactly the files written before it, names the
//! file that failed and its real cause, and leaves a journal the next command can work with.

use super::support::nuvira_path;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// How many times the two processes are raced.
const RACES: usize = 200;

const FILE: &str = "alpha\nbeta\ngamma\ndelta\nomega\n";

fn edits(dir: &Path, name: &str, path: &str, search: &str, replace: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "edits:\n  - {{strategy: search-replace, path: {path}, search: '{search}', replace: '{replace}'}}\n"
        ),
    )
    .unwrap();
    p
}

fn apply(repo: &Path, edits: &Path, wait: bool) -> Command {
    let mut c = Command::new(nuvira_path());
    c.args(["apply", "--repo"]).arg(repo).arg(edits);
    if wait {
        c.arg("--wait");
    }
    c
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Starts two `nuvira apply` at once on one repository, one changing line 1 and one line 5 of
/// the same file; returns both outputs, their pids and the file's content afterwards.
fn race(wait: bool) -> ((Output, u32), (Output, u32), String) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("f.txt"), FILE).unwrap();
    let one = edits(repo.path(), "one.yaml", "f.txt", "alpha", "ALPHA");
    let five = edits(repo.path(), "five.yaml", "f.txt", "omega", "OMEGA");
    // The edits files sit in the repository's root but are not edited.
    let a = apply(repo.path(), &one, wait)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let b = apply(repo.path(), &five, wait)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (pa, pb) = (a.id(), b.id());
    let oa = a.wait_with_output().unwrap();
    let ob = b.wait_with_output().unwrap();
    let content = std::fs::read_to_string(repo.path().join("f.txt")).unwrap();
    ((oa, pa), (ob, pb), content)
}

/// Exit 3, naming the other process as the holder and saying how to queue.
fn refused_naming(out: &Output, holder: u32) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    out.status.code() == Some(3)
        && err.contains(&format!("process {holder}"))
        && err.contains("--wait")
}

#[test]
fn two_applies_racing_on_one_file_never_lose_an_edit() {
    let mut refused = 0;
    for i in 0..RACES {
        let ((oa, pa), (ob, pb), content) = race(false);
        let has_one = content.contains("ALPHA");
        let has_five = content.contains("OMEGA");
        let ok = match (oa.status.code(), ob.status.code()) {
            (Some(0), Some(0)) => has_one && has_five,
            (Some(0), _) => has_one && refused_naming(&ob, pa),
            (_, Some(0)) => has_five && refused_naming(&oa, pb),
            _ => false,
        };
        assert!(
            ok,
            "race {i}: an edit was lost or the refusal did not name the holder\nfile:\n{content}\n--- first:\n{}\n--- second:\n{}",
            text(&oa),
            text(&ob)
        );
        if !oa.status.success() || !ob.status.success() {
            refused += 1;
        }
    }
    eprintln!("{refused} of {RACES} races ended with one process refused (exit 3)");
}

#[test]
fn with_wait_two_racing_applies_both_land() {
    for i in 0..RACES {
        let ((oa, _), (ob, _), content) = race(true);
        assert!(
            oa.status.success() && ob.status.success(),
            "race {i}: with --wait both must succeed\n--- first:\n{}\n--- second:\n{}",
            text(&oa),
            text(&ob)
        );
        assert!(
            content.contains("ALPHA") && content.contains("OMEGA"),
            "race {i}: an edit was lost:\n{content}"
        );
    }
}

/// Polls (bounded) until `path` exists: the paused process says it stopped.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "the batch never reached the fault-injection pause ({})",
            path.display()
        );
        std::thread::yield_now();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A two-file batch paused (by the `fault-injection` hook) right before its `nth` write; while
/// it is paused, another writer changes `b.txt`. The batch must abort naming `b.txt`, keep the
/// outsider's content and leave `a.txt` as it was.
fn outsider_writes_during_the_batch(nth: &str) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
    std::fs::write(repo.path().join("b.txt"), "b\n").unwrap();
    let f = tempfile::tempdir().unwrap();
    let e = f.path().join("e.yaml");
    std::fs::write(
        &e,
        "edits:\n  - {strategy: search-replace, path: a.txt, search: a, replace: A}\n  - {strategy: search-replace, path: b.txt, search: b, replace: B}\n",
    )
    .unwrap();
    let pause = f.path().join("paused");
    let child = apply(repo.path(), &e, false)
        .env(nuvira_workspace::FAULT_PAUSE_BEFORE_WRITE_ENV, nth)
        .env(nuvira_workspace::FAULT_PAUSE_FILE_ENV, &pause)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&pause);
    std::fs::write(repo.path().join("b.txt"), "outsider\n").unwrap();
    std::fs::remove_file(&pause).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        err.contains("`b.txt` changed since the batch read it"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("b.txt")).unwrap(),
        "outsider\n",
        "the outsider's edit was overwritten"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("a.txt")).unwrap(),
        "a\n",
        "the aborted batch left a write behind"
    );
    // The aborted batch is not "the last run": nothing is left to roll back.
    let out = Command::new(nuvira_path())
        .args(["rollback", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to roll back"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_file_changed_before_the_first_write_aborts_the_batch_and_keeps_the_change() {
    outsider_writes_during_the_batch("1");
}

#[test]
fn a_file_changed_after_the_first_write_aborts_the_batch_and_restores_the_written_one() {
    outsider_writes_during_the_batch("2");
}

/// Makes one file impossible to replace, by the first means this machine allows: `chattr +i`
/// (root; the filesystem must support it), else a read-only folder (`chmod 0555`, which does
/// not stop root). Undone on drop.
struct Unwritable {
    path: PathBuf,
    how: &'static str,
}

impl Unwritable {
    /// `None` (with the reason printed) when neither works here.
    fn make(file: &Path) -> Option<Self> {
        // Files this process creates are owned by its effective user.
        let root = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(file).unwrap().uid() == 0
        };
        if root {
            let out = Command::new("chattr").arg("+i").arg(file).output();
            match out {
                Ok(o) if o.status.success() => {
                    return Some(Self {
                        path: file.to_owned(),
                        how: "chattr",
                    });
                }
                Ok(o) => eprintln!(
                    "skipped: running as root, and `chattr +i` failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => eprintln!("skipped: running as root, and there is no `chattr`: {e}"),
            }
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = file.parent().unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        Some(Self {
            path: dir.to_owned(),
            how: "chmod",
        })
    }

    /// What the failed write's error says.
    fn cause(&self) -> &'static str {
        match self.how {
            "chattr" => "Operation not permitted",
            _ => "Permission denied",
        }
    }

    fn undo(&self) {
        if self.how == "chattr" {
            let _ = Command::new("chattr").arg("-i").arg(&self.path).status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        self.undo();
    }
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

const FIVE: [&str; 5] = ["d1/a.txt", "d2/b.txt", "d3/c.txt", "d4/d.txt", "d5/e.txt"];

fn five_file_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    for f in FIVE {
        let p = repo.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "old\n").unwrap();
    }
    repo
}

fn five_edits(dir: &Path) -> PathBuf {
    let mut yaml = String::from("edits:\n");
    for f in FIVE {
        yaml.push_str(&format!(
            "  - {{strategy: search-replace, path: {f}, search: old, replace: new}}\n"
        ));
    }
    let p = dir.join("five.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

fn read(repo: &Path, rel: &str) -> String {
    std::fs::read_to_string(repo.join(rel)).unwrap()
}

#[test]
fn a_batch_whose_third_write_fails_restores_the_two_written_and_touches_nothing_else() {
    let repo = five_file_repo();
    let r = repo.path();
    let Some(guard) = Unwritable::make(&r.join(FIVE[2])) else {
        return;
    };
    let untouched: Vec<u64> = FIVE[2..].iter().map(|f| inode(&r.join(f))).collect();
    let f = tempfile::tempdir().unwrap();
    let out = apply(r, &five_edits(f.path()), false).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        err.contains("write `d3/c.txt`") && err.contains(guard.cause()),
        "the error must name the file that failed and why:\n{err}"
    );
    assert!(
        err.contains("the files already written were restored"),
        "{err}"
    );
    for f in FIVE {
        assert_eq!(read(r, f), "old\n", "{f} was left changed");
    }
    let now: Vec<u64> = FIVE[2..].iter().map(|f| inode(&r.join(f))).collect();
    assert_eq!(now, untouched, "a file the batch never wrote was rewritten");

    // The journal is in a state the next commands work with.
    let one = edits(f.path(), "one.yaml", "d1/a.txt", "old", "next");
    let out = apply(r, &one, false).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(read(r, "d1/a.txt"), "next\n");
    let out = Command::new(nuvira_path())
        .args(["rollback", "--repo"])
        .arg(r)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(read(r, "d1/a.txt"), "old\n");
    drop(guard);
}

#[test]
fn a_rollback_that_cannot_restore_a_file_restores_the_rest_names_it_and_can_be_retried() {
    let repo = five_file_repo();
    let r = repo.path();
    let f = tempfile::tempdir().unwrap();
    let out = apply(r, &five_edits(f.path()), false).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let Some(guard) = Unwritable::make(&r.join(FIVE[2])) else {
        return;
    };
    let out = Command::new(nuvira_path())
        .args(["rollback", "--repo"])
        .arg(r)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        err.contains("d3/c.txt") && err.contains(guard.cause()),
        "the error must name the file it could not restore and why:\n{err}"
    );
    for f in FIVE {
        let want = if f == FIVE[2] { "new\n" } else { "old\n" };
        assert_eq!(read(r, f), want, "{f}");
    }
    guard.undo();
    let out = Command::new(nuvira_path())
        .args(["rollback", "--repo"])
        .arg(r)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the retry must finish: {}",
        text(&out)
    );
    for f in FIVE {
        assert_eq!(read(r, f), "old\n", "{f}");
    }
    drop(guard);
}

/// This test process holds the repository's lock (as another `nuvira` would): `nuvira run`,
/// `nuvira apply` and `nuvira rollback` there exit 3 naming it, and change nothing.
#[test]
fn run_apply_and_rollback_on_a_locked_repository_exit_3_naming_the_holder() {
    use nuvira_workspace::{LockWait, RepoLock, Workspace};
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    std::fs::write(r.join("f.txt"), FILE).unwrap();
    let f = tempfile::tempdir().unwrap();
    let one = edits(f.path(), "one.yaml", "f.txt", "alpha", "ALPHA");
    // A committed apply, so that there is something to roll back.
    let out = apply(r, &one, false).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let five = edits(f.path(), "five.yaml", "f.txt", "omega", "OMEGA");
    let plan = f.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: g\nsteps:\n  - id: fix\n    module: edit\n    config:\n      edits:\n        - {strategy: search-replace, path: f.txt, search: beta, replace: BETA}\n",
    )
    .unwrap();
    let ws = Workspace::open(r).unwrap();
    let _held = RepoLock::acquire(&ws, "the holder test", LockWait::Fail, |_| {}).unwrap();
    let before = std::fs::read_to_string(r.join("f.txt")).unwrap();
    let holder = format!("process {} (`the holder test`)", std::process::id());
    let mut run = Command::new(nuvira_path());
    run.arg("run").arg(&plan).arg("--repo").arg(r);
    let mut rollback = Command::new(nuvira_path());
    rollback.args(["rollback", "--repo"]).arg(r);
    for mut cmd in [apply(r, &five, false), run, rollback] {
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(
            err.contains(&holder) && err.contains("run with --wait to queue"),
            "{}",
            text(&out)
        );
        assert_eq!(std::fs::read_to_string(r.join("f.txt")).unwrap(), before);
    }
}
