//! Warm caches and the synced workspace copy, on real files, real processes and a real engine.

use super::common::{mode_of, set_mode};
use nuvira_api::{NeverCancelled, Sandbox, SandboxRequest};
use nuvira_sandbox::LocalSandbox;
use nuvira_sandbox::cache::{CacheKind, CacheRoot, project_key};
use nuvira_sandbox::sync::sync_tree;
use nuvira_workspace::walk::WalkOptions;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const SKIP_BUILD: WalkOptions = WalkOptions {
    include_ignored: false,
    skip_build_dirs: true,
};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Every entry below `root` as (path, what it is: file contents, `-> target`, or `/`).
fn tree(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let ft = e.file_type().unwrap();
            let what = if ft.is_symlink() {
                format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
            } else if ft.is_dir() {
                stack.push(r.clone());
                "/".into()
            } else if ft.is_file() {
                std::fs::read_to_string(e.path()).unwrap()
            } else {
                "special".into()
            };
            out.push((r, what));
        }
    }
    out.sort();
    out
}

struct Synced {
    src: tempfile::TempDir,
    area: tempfile::TempDir,
}

impl Synced {
    fn new() -> Self {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "a.txt", "aaaa");
        write(src.path(), "b.txt", "bbbb");
        write(src.path(), "dir/c.txt", "cccc");
        write(src.path(), "dir/deep/d.txt", "dddd");
        Self {
            src,
            area: tempfile::tempdir().unwrap(),
        }
    }
    fn dst(&self) -> PathBuf {
        self.area.path().join("copy")
    }
    fn sync(&self) -> nuvira_sandbox::sync::SyncReport {
        sync_tree(
            self.src.path(),
            &self.dst(),
            SKIP_BUILD,
            &self.area.path().join("manifest"),
        )
        .unwrap()
    }
}

#[test]
fn sync_propagates_changed_added_and_deleted_files_and_copies_nothing_when_nothing_changed() {
    let s = Synced::new();
    let first = s.sync();
    assert_eq!(first.copied.len(), 6, "{first:?}");
    assert_eq!(tree(s.src.path()), tree(&s.dst()));

    let again = s.sync();
    assert!(
        again.copied.is_empty() && again.removed.is_empty(),
        "{again:?}"
    );
    assert_eq!(again.unchanged, 6);

    // Changed with the same size and the old mtime put back: the hash catches it.
    let a = s.src.path().join("a.txt");
    let old_mtime = std::fs::metadata(&a).unwrap().modified().unwrap();
    std::fs::write(&a, "AAAA").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&a)
        .unwrap()
        .set_modified(old_mtime)
        .unwrap();
    write(s.src.path(), "dir/new.txt", "new");
    std::fs::remove_file(s.src.path().join("b.txt")).unwrap();
    std::fs::remove_dir_all(s.src.path().join("dir/deep")).unwrap();
    let r = s.sync();
    assert_eq!(tree(s.src.path()), tree(&s.dst()));
    assert!(r.copied.contains(&PathBuf::from("dir/new.txt")), "{r:?}");
    assert!(r.removed.contains(&PathBuf::from("b.txt")), "{r:?}");
    assert!(r.removed.contains(&PathBuf::from("dir/deep")), "{r:?}");
    // Same size and the old mtime: the source's ctime moved, so the content was compared.
    assert_eq!(
        std::fs::read_to_string(s.dst().join("a.txt")).unwrap(),
        "AAAA"
    );
}

// Folders of the copy have the workspace's modes, a read-only one filled before it is made
// read-only, and what a run does to a folder's mode (or to a folder it makes unreadable) is
// undone by the next sync, which still prunes and updates inside it.
#[test]
fn folders_of_the_copy_get_the_workspaces_modes_back_whatever_the_last_run_did() {
    let s = Synced::new();
    set_mode(&s.src.path().join("dir"), 0o750);
    set_mode(&s.src.path().join("dir/deep"), 0o555);
    s.sync();
    let d = s.dst();
    assert_eq!(mode_of(&d.join("dir")), 0o750);
    assert_eq!(mode_of(&d.join("dir/deep")), 0o555);
    assert_eq!(
        std::fs::read_to_string(d.join("dir/deep/d.txt")).unwrap(),
        "dddd"
    );

    // A run changes the modes and leaves a file in a folder it then locks.
    set_mode(&d.join("dir/deep"), 0o755);
    std::fs::write(d.join("dir/deep/left.txt"), "x").unwrap();
    set_mode(&d.join("dir/deep"), 0o000);
    set_mode(&d.join("dir"), 0o777);
    // The workspace changes inside the read-only folder.
    set_mode(&s.src.path().join("dir/deep"), 0o755);
    write(s.src.path(), "dir/deep/d.txt", "DDDD");
    set_mode(&s.src.path().join("dir/deep"), 0o555);
    let report = s.sync();
    assert_eq!(mode_of(&d.join("dir")), 0o750);
    assert_eq!(mode_of(&d.join("dir/deep")), 0o555);
    assert_eq!(
        std::fs::read_to_string(d.join("dir/deep/d.txt")).unwrap(),
        "DDDD"
    );
    assert!(!d.join("dir/deep/left.txt").exists(), "{report:?}");
    assert_eq!(tree(&d), tree(s.src.path()));
    // The temporary folders can go.
    set_mode(&s.src.path().join("dir/deep"), 0o755);
    set_mode(&d.join("dir/deep"), 0o755);
}

// The fresh copy (no cache) gives folders their modes too.
#[test]
fn a_fresh_copy_gives_folders_the_workspaces_modes() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "ro/f.txt", "f");
    write(src.path(), "private/g.txt", "g");
    set_mode(&src.path().join("ro"), 0o555);
    set_mode(&src.path().join("private"), 0o700);
    let to = tempfile::tempdir().unwrap();
    let dst = to.path().join("copy");
    nuvira_workspace::walk::copy_tree(src.path(), &dst, SKIP_BUILD).unwrap();
    assert_eq!(mode_of(&dst.join("ro")), 0o555);
    assert_eq!(mode_of(&dst.join("private")), 0o700);
    assert_eq!(std::fs::read_to_string(dst.join("ro/f.txt")).unwrap(), "f");
    set_mode(&src.path().join("ro"), 0o755);
    set_mode(&dst.join("ro"), 0o755);
}

// End to end in the local sandbox: a run's `chmod` of a folder never reaches the next run.
#[tokio::test]
async fn a_runs_chmod_of_a_folder_never_reaches_the_next_run() {
    let base = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
    let p = cargo_project();
    set_mode(&p.path().join("src"), 0o750);
    let show = "stat -c '%a' src; chmod 0500 src; chmod 0777 .";
    let first = sandbox
        .run(&cached(p.path(), show), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(first.stdout.trim(), "750", "{first:?}");
    let second = sandbox
        .run(&cached(p.path(), show), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(second.stdout.trim(), "750", "{second:?}");
    assert!(
        second
            .info
            .workspace_copy
            .as_deref()
            .is_some_and(|c| c.starts_with("synced")),
        "{:?}",
        second.info.workspace_copy
    );
}

#[test]
fn a_touched_file_with_the_same_content_is_hashed_and_not_rewritten() {
    let s = Synced::new();
    s.sync();
    let before = std::fs::metadata(s.dst().join("a.txt")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(s.src.path().join("a.txt"))
        .unwrap()
        .set_modified(SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    let r = s.sync();
    assert_eq!(r.hashed, 1, "{r:?}");
    assert!(r.copied.is_empty(), "{r:?}");
    let after = std::fs::metadata(s.dst().join("a.txt")).unwrap();
    assert_eq!(
        (before.ino(), before.mtime(), before.mtime_nsec()),
        (after.ino(), after.mtime(), after.mtime_nsec())
    );
}

/// mtime in nanoseconds.
fn mtime_of(p: &Path) -> i128 {
    let m = std::fs::metadata(p).unwrap();
    i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
}

#[test]
fn a_copied_file_is_newer_than_anything_written_before_the_sync_began() {
    // cargo keeps a build whose sources are not newer than the moment it started. A build's
    // last stamp written just before the sync must be older than every file the sync copies,
    // even when both land in one tick of the file system's clock: looped, since a tick is a
    // few milliseconds here and a sync of one changed file takes less.
    let s = Synced::new();
    s.sync();
    let stamp = s.area.path().join("invoked.timestamp");
    for i in 0..300 {
        write(s.src.path(), "a.txt", &format!("version {i}"));
        std::fs::write(&stamp, "").unwrap();
        let r = s.sync();
        assert_eq!(r.copied, vec![PathBuf::from("a.txt")], "{r:?}");
        let (built, copied) = (mtime_of(&stamp), mtime_of(&s.dst().join("a.txt")));
        assert!(
            copied > built,
            "iteration {i}: the copy ({copied}) is not newer than the build stamp ({built})"
        );
        assert_eq!(
            std::fs::read_to_string(s.dst().join("a.txt")).unwrap(),
            format!("version {i}")
        );
    }
}

#[test]
fn a_run_that_rewrote_a_copied_file_keeping_its_size_and_mtime_is_undone() {
    let s = Synced::new();
    s.sync();
    let c = s.dst().join("dir/c.txt");
    let m = std::fs::metadata(&c).unwrap().modified().unwrap();
    std::fs::write(&c, "EVIL").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&c)
        .unwrap()
        .set_modified(m)
        .unwrap();
    // And what the run created goes.
    write(&s.dst(), "dir/left-by-the-run.txt", "x");
    write(&s.dst(), ".git/HEAD", "ref: x");
    let r = s.sync();
    assert_eq!(std::fs::read_to_string(&c).unwrap(), "cccc", "{r:?}");
    assert_eq!(tree(s.src.path()), tree(&s.dst()));
}

#[test]
fn a_file_replaced_by_a_symlink_becomes_a_link_and_nothing_is_written_through_links() {
    let s = Synced::new();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "keep me");
    write(outside.path(), "dir/c.txt", "outside c");
    s.sync();

    // In the workspace: a file becomes a link to a file outside.
    let a = s.src.path().join("a.txt");
    std::fs::remove_file(&a).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), &a).unwrap();
    // In the copy (what a hostile run leaves): a folder becomes a link to a folder outside,
    // and a file becomes a link to a file outside.
    std::fs::remove_dir_all(s.dst().join("dir")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("dir"), s.dst().join("dir")).unwrap();
    std::fs::remove_file(s.dst().join("b.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), s.dst().join("b.txt")).unwrap();
    // And a FIFO in place of a file (a reader would block on it).
    write(s.src.path(), "f.txt", "ffff");
    nix::unistd::mkfifo(&s.dst().join("f.txt"), nix::sys::stat::Mode::S_IRWXU).unwrap();

    s.sync();
    assert!(
        std::fs::symlink_metadata(s.dst().join("a.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(s.dst().join("dir"))
            .unwrap()
            .is_dir()
    );
    assert_eq!(tree(s.src.path()), tree(&s.dst()));
    assert_eq!(
        tree(outside.path()),
        vec![
            (PathBuf::from("dir"), "/".into()),
            (PathBuf::from("dir/c.txt"), "outside c".into()),
            (PathBuf::from("secret.txt"), "keep me".into()),
        ]
    );
}

#[test]
fn special_files_of_the_workspace_are_left_out_and_named_and_build_dirs_of_the_copy_kept() {
    let s = Synced::new();
    nix::unistd::mkfifo(&s.src.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let r = s.sync();
    assert_eq!(r.special, vec![PathBuf::from("pipe")]);
    assert!(!s.dst().join("pipe").exists());
    // A node_modules the last run installed stays (the walk leaves it out of the workspace).
    write(&s.dst(), "node_modules/x/index.js", "x");
    s.sync();
    assert!(s.dst().join("node_modules/x/index.js").is_file());
}

fn age(entry_dir: &Path, last_used: u64) {
    let p = entry_dir.join("entry.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["last_used"] = serde_json::json!(last_used);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn lru_eviction_keeps_exactly_what_the_cap_says() {
    let base = tempfile::tempdir().unwrap();
    let root = CacheRoot::at(base.path(), 250);
    let mut projects: Vec<tempfile::TempDir> =
        (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut dirs = Vec::new();
    for (i, p) in projects.iter().enumerate() {
        let (canon, key) = project_key(p.path()).unwrap();
        let lease = root
            .open_entry(&canon, &key, CacheKind::Cargo, false)
            .unwrap()
            .unwrap();
        std::fs::write(lease.data_dir().join("blob"), vec![b'x'; 100]).unwrap();
        lease.record_size(0);
        dirs.push(lease.entry_dir().to_path_buf());
        drop(lease);
        age(&dirs[i], 1000 + i as u64 * 100);
    }
    // The oldest is in use: it stays, and the next oldest goes in its place.
    let (canon0, key0) = project_key(projects[0].path()).unwrap();
    let held = root
        .open_entry(&canon0, &key0, CacheKind::Cargo, false)
        .unwrap()
        .unwrap();
    age(&dirs[0], 1000);
    let r = root.evict().unwrap();
    assert_eq!(r.in_use.len(), 1, "{r:?}");
    drop(held);
    // 4 × 100 bytes with a cap of 250: two must go; entry 0 (the oldest) is held and skipped,
    // so 1 and 2 go, leaving 0 and 3: 200 bytes.
    let left: Vec<PathBuf> = root.list().unwrap().into_iter().map(|e| e.dir).collect();
    assert_eq!(left, {
        let mut v = vec![dirs[0].clone(), dirs[3].clone()];
        v.sort();
        v
    });
    // Free now, and over the cap again after a fourth 100 bytes: the oldest (0) goes.
    let (canon1, key1) = project_key(projects[1].path()).unwrap();
    let lease = root
        .open_entry(&canon1, &key1, CacheKind::Cargo, false)
        .unwrap()
        .unwrap();
    std::fs::write(lease.data_dir().join("blob"), vec![b'x'; 100]).unwrap();
    lease.record_size(0);
    drop(lease);
    root.evict().unwrap();
    let left: Vec<String> = root.list().unwrap().into_iter().map(|e| e.key).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(!left.iter().any(|k| k.starts_with(&key0)), "{left:?}");

    // An entry whose project folder is gone is removed whatever the cap.
    drop(projects.pop());
    let big = CacheRoot::at(base.path(), u64::MAX);
    let r = big.evict().unwrap();
    assert_eq!(r.removed.len(), 1, "{r:?}");
    assert_eq!(big.list().unwrap().len(), 1);
}

fn cached(workspace: &Path, script: &str) -> SandboxRequest {
    let mut req = SandboxRequest::new(workspace, vec!["sh".into(), "-c".into(), script.into()]);
    req.cache = true;
    req.limits.timeout = Duration::from_secs(120);
    req
}

fn cargo_project() -> tempfile::TempDir {
    let p = tempfile::tempdir().unwrap();
    write(
        p.path(),
        "Cargo.toml",
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n",
    );
    write(p.path(), "src/lib.rs", "");
    p
}

#[tokio::test]
async fn a_cache_of_project_a_is_never_used_for_project_b_locally() {
    let base = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
    let (a, b) = (cargo_project(), cargo_project());
    let script = "echo \"$CARGO_TARGET_DIR\"; ls \"$CARGO_TARGET_DIR\" 2>/dev/null; mkdir -p \"$CARGO_TARGET_DIR\" && touch \"$CARGO_TARGET_DIR/mark-$(basename \"$PWD\")\"";
    let out_a = sandbox
        .run(&cached(a.path(), script), &NeverCancelled)
        .await
        .unwrap();
    let out_b = sandbox
        .run(&cached(b.path(), script), &NeverCancelled)
        .await
        .unwrap();
    let dir_a = out_a.stdout.lines().next().unwrap().to_owned();
    let dir_b = out_b.stdout.lines().next().unwrap().to_owned();
    assert_ne!(dir_a, dir_b);
    assert!(
        dir_a.starts_with(&base.path().to_string_lossy().into_owned()),
        "{dir_a}"
    );
    // B's target dir held nothing of A's.
    assert_eq!(out_b.stdout.lines().count(), 1, "{}", out_b.stdout);
    assert_ne!(out_a.info.cache_key, out_b.info.cache_key);
    // A's second run sees its own mark and only that.
    let again = sandbox
        .run(&cached(a.path(), script), &NeverCancelled)
        .await
        .unwrap();
    let listed: Vec<&str> = again.stdout.lines().skip(1).collect();
    assert_eq!(listed.len(), 1, "{}", again.stdout);
    assert!(listed[0].starts_with("mark-"));
}

/// Runs `scripts` at once, each after saying it started and once all the others have: they
/// are in the sandbox together for certain (each holds its cache entries meanwhile).
async fn at_once(
    sandbox: &LocalSandbox,
    p: &Path,
    then: &str,
    n: usize,
) -> Vec<nuvira_api::SandboxOutcome> {
    let marks = tempfile::tempdir().unwrap();
    let m = marks.path().display();
    let runs: Vec<_> = (0..n)
        .map(|i| {
            let wait: String = (0..n)
                .map(|j| format!("while [ ! -e {m}/{j} ]; do :; done; "))
                .collect();
            let req = cached(p, &format!("touch {m}/{i}; {wait}{then}"));
            let sandbox = sandbox.clone();
            tokio::spawn(async move { sandbox.run(&req, &NeverCancelled).await.unwrap() })
        })
        .collect();
    let mut out = Vec::new();
    for r in runs {
        out.push(r.await.unwrap());
    }
    out
}

fn notes(outs: &[nuvira_api::SandboxOutcome]) -> Vec<String> {
    outs.iter()
        .map(|o| o.info.workspace_copy.clone().unwrap())
        .collect()
}

// Before the second warm slot, the second of two runs at once got a fresh copy and built cold
// on every such run.
#[tokio::test]
async fn two_runs_of_one_project_at_once_each_get_a_warm_slot_and_are_warm_the_next_time() {
    let base = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
    let p = tempfile::tempdir().unwrap();
    versioned_bin(p.path(), 1);
    let build = "cargo run --offline 2>&1";
    let first = at_once(&sandbox, p.path(), build, 2).await;
    for o in &first {
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        assert!(o.stdout.contains("Compiling p v0.1.0"), "{o:?}");
        assert!(o.stdout.contains("VERSION=1"), "{o:?}");
    }
    let n = notes(&first);
    assert!(n.iter().all(|n| n.starts_with("synced")), "{n:?}");
    assert!(n.iter().any(|n| n.contains("warm slot 2 of 2")), "{n:?}");
    assert_eq!(first[0].info.cache_key, first[1].info.cache_key);
    // Each slot kept its copy and its own target dir: both warm at once again.
    let second = at_once(&sandbox, p.path(), build, 2).await;
    for o in &second {
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        assert!(!o.stdout.contains("Compiling p"), "{o:?}");
        assert!(o.stdout.contains("VERSION=1"), "{o:?}");
    }
    assert!(
        notes(&second)
            .iter()
            .any(|n| n.contains("warm slot 2 of 2")),
        "{:?}",
        notes(&second)
    );
    // Both slots are entries of the cache, listed (and counted against the cap).
    let root = CacheRoot::at(base.path(), u64::MAX);
    let (_, key) = project_key(p.path()).unwrap();
    let mut keys: Vec<String> = root.list().unwrap().into_iter().map(|e| e.key).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{key}-cargo"),
            format!("{key}-cargo-1"),
            format!("{key}-workspace"),
            format!("{key}-workspace-1"),
        ]
    );
    // A third run at once gets a fresh copy, and all three succeed.
    let third = at_once(&sandbox, p.path(), "echo ok", 3).await;
    assert!(third.iter().all(|o| o.exit_code == Some(0)), "{third:?}");
    let n = notes(&third);
    assert_eq!(
        n.iter().filter(|n| n.starts_with("fresh copy")).count(),
        1,
        "{n:?}"
    );
}

#[tokio::test]
async fn without_cache_a_run_gets_a_fresh_copy_and_no_cache_env() {
    let base = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
    let p = cargo_project();
    let mut req = cached(p.path(), "echo \"[$CARGO_TARGET_DIR]\"; pwd");
    req.cache = false;
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.stdout.starts_with("[]"), "{}", out.stdout);
    assert!(out.info.cache_key.is_none());
    assert!(!base.path().join("sandbox").exists());
}

/// A binary crate printing `VERSION=<version>`.
fn versioned_bin(dir: &Path, version: u32) {
    write(
        dir,
        "Cargo.toml",
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write(
        dir,
        "src/main.rs",
        &format!("fn main() {{\n    println!(\"VERSION={version}\");\n}}\n"),
    );
}

// Before the fix, a run that did not get the project's persistent copy (another run held it)
// still shared the cargo target dir: cargo judges freshness by mtimes, so the run on the
// persistent copy (older sources, synced before the edit) took the build the other run had
// just made of the edited sources, and printed VERSION=2.
#[tokio::test]
async fn overlapping_runs_of_edited_sources_each_run_their_own_build() {
    let base = tempfile::tempdir().unwrap();
    let sandbox = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
    let p = tempfile::tempdir().unwrap();
    versioned_bin(p.path(), 1);
    let marks = tempfile::tempdir().unwrap();
    let synced = marks.path().join("synced");
    let status = std::process::Command::new("mkfifo")
        .arg(&synced)
        .status()
        .unwrap();
    assert!(status.success());
    let go = marks.path().join("go");
    // One: on the persistent copy (synced with VERSION=1); says so through the FIFO, then
    // builds and runs only once two has built the edited sources.
    let one = cached(
        p.path(),
        &format!(
            "echo synced > {}; while [ ! -e {} ]; do :; done; cargo run -q --offline",
            synced.display(),
            go.display()
        ),
    );
    let mut first = {
        let sandbox = sandbox.clone();
        tokio::spawn(async move { sandbox.run(&one, &NeverCancelled).await })
    };
    let fifo = synced.clone();
    let said = tokio::select! {
        said = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo)) => said,
        ended = &mut first => panic!("the first run ended before it said it was synced: {ended:?}"),
    };
    assert_eq!(said.unwrap().unwrap(), "synced\n");
    // The edit, then two: a fresh copy of VERSION=2, built and run first.
    versioned_bin(p.path(), 2);
    let two = cached(
        p.path(),
        &format!("cargo run -q --offline; touch {}", go.display()),
    );
    let second = sandbox.run(&two, &NeverCancelled).await.unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(second.stdout.trim(), "VERSION=2", "{second:?}");
    assert!(
        second
            .info
            .workspace_copy
            .as_deref()
            .is_some_and(|n| n.contains("warm slot 2 of 2")),
        "{second:?}"
    );
    assert_eq!(first.stdout.trim(), "VERSION=1", "{first:?}");
    assert!(
        first
            .info
            .workspace_copy
            .as_deref()
            .is_some_and(|n| n.starts_with("synced")),
        "{first:?}"
    );
    // The next run, on the persistent copy again, runs the edited sources with the warm target.
    let third = sandbox
        .run(&cached(p.path(), "cargo run -q --offline"), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(third.stdout.trim(), "VERSION=2", "{third:?}");
}

mod bwrap {
    use super::*;
    use crate::common::bwrap;

    #[tokio::test]
    async fn bwrap_never_gives_project_b_the_cache_of_project_a() {
        let Some(sandbox) = bwrap() else { return };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let (a, b) = (cargo_project(), cargo_project());
        let script = "echo \"$CARGO_TARGET_DIR\"; ls \"$CARGO_TARGET_DIR\" 2>/dev/null; mkdir -p \"$CARGO_TARGET_DIR\" && touch \"$CARGO_TARGET_DIR/mark-$MARK\"";
        let run = |p: &Path, mark: &str| {
            let mut r = cached(p, script);
            r.env.insert("MARK".into(), mark.into());
            r
        };
        let out_a = sandbox
            .run(&run(a.path(), "a"), &NeverCancelled)
            .await
            .unwrap();
        let out_b = sandbox
            .run(&run(b.path(), "b"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!((out_a.exit_code, out_b.exit_code), (Some(0), Some(0)));
        let dir_a = PathBuf::from(out_a.stdout.lines().next().unwrap());
        let dir_b = PathBuf::from(out_b.stdout.lines().next().unwrap());
        assert_ne!(dir_a, dir_b);
        assert!(dir_a.starts_with(base.path()), "{}", dir_a.display());
        // The marks reached the entries on this machine: the entries are bound, not a tmpfs.
        assert!(dir_a.join("mark-a").is_file() && dir_b.join("mark-b").is_file());
        assert!(!dir_b.join("mark-a").exists() && !dir_a.join("mark-b").exists());
        assert_eq!(out_b.stdout.lines().count(), 1, "{}", out_b.stdout);
        assert_ne!(out_a.info.cache_key, out_b.info.cache_key);
        let again = sandbox
            .run(&run(a.path(), "a"), &NeverCancelled)
            .await
            .unwrap();
        let listed: Vec<&str> = again.stdout.lines().skip(1).collect();
        assert_eq!(listed, ["mark-a"], "{}", again.stdout);
    }

    #[tokio::test]
    async fn a_second_bwrap_run_of_a_cargo_project_is_warm_on_the_synced_copy() {
        let Some(sandbox) = bwrap() else { return };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let p = tempfile::tempdir().unwrap();
        versioned_bin(p.path(), 1);
        let build = cached(p.path(), "cargo run --offline 2>&1; pwd");
        let first = sandbox.run(&build, &NeverCancelled).await.unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        assert!(first.stdout.contains("Compiling p v0.1.0"), "{first:?}");
        assert!(first.stdout.contains("VERSION=1"), "{first:?}");
        let (_, key) = project_key(p.path()).unwrap();
        let entry = base.path().join("sandbox").join(format!("{key}-cargo"));
        assert!(entry.join("data/target").is_dir(), "{first:?}");
        // The copy is the persistent one, synced.
        assert!(
            first
                .info
                .workspace_copy
                .as_deref()
                .is_some_and(|n| n.starts_with("synced")),
            "{first:?}"
        );
        assert!(
            first
                .stdout
                .trim_end()
                .trim_end_matches('/')
                .ends_with(&format!("{key}-workspace/data")),
            "{first:?}"
        );
        let second = sandbox.run(&build, &NeverCancelled).await.unwrap();
        assert!(second.stdout.contains("VERSION=1"), "{second:?}");
        assert!(!second.stdout.contains("Compiling p"), "{second:?}");
        assert!(
            second
                .info
                .workspace_copy
                .as_deref()
                .is_some_and(|n| n.starts_with("synced")),
            "{second:?}"
        );
        // An edit is built.
        versioned_bin(p.path(), 2);
        let third = sandbox.run(&build, &NeverCancelled).await.unwrap();
        assert!(third.stdout.contains("VERSION=2"), "{third:?}");
        // The runs released their entries.
        let root = CacheRoot::at(base.path(), u64::MAX);
        let removal = root.remove(&root.list().unwrap());
        assert!(removal.in_use.is_empty(), "{removal:?}");
    }
}

#[cfg(feature = "docker")]
mod docker {
    use super::*;
    use crate::common::docker;
    use nuvira_sandbox::cache::volume_name;

    const BUSYBOX: &str = "nuvira-busybox:latest";

    fn volumes(filter: &str) -> Vec<String> {
        let out = std::process::Command::new("docker")
            .args(["volume", "ls", "-q", "--filter", filter])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn rm_volumes(key: &str) {
        // The slots' kept containers (nuvira_sandbox::docker_keep) hold the volumes.
        let kept = std::process::Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=nuvira.cache.project={key}"),
            ])
            .output()
            .unwrap();
        let ids: Vec<String> = String::from_utf8_lossy(&kept.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output();
        }
        let _ = std::process::Command::new("docker")
            .args(["volume", "rm", "-f"])
            .args(volumes(&format!("label=nuvira.cache.project={key}")))
            .output();
    }

    #[tokio::test]
    async fn docker_mounts_project_volumes_never_another_projects_and_uploads_only_changes() {
        let Some(sandbox) = docker(BUSYBOX).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let (a, b) = (cargo_project(), cargo_project());
        let (_, key_a) = project_key(a.path()).unwrap();
        let (_, key_b) = project_key(b.path()).unwrap();
        let script = "echo $CARGO_TARGET_DIR; ls /nuvira-cache/cargo; touch /nuvira-cache/cargo/mark-$MARK; cat src/lib.rs";
        let run = |p: &Path, mark: &str| {
            let mut r = cached(p, script);
            r.image = Some(BUSYBOX.into());
            r.env.insert("MARK".into(), mark.into());
            r
        };
        let out_a = sandbox
            .run(&run(a.path(), "a"), &NeverCancelled)
            .await
            .unwrap();
        let out_b = sandbox
            .run(&run(b.path(), "b"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(out_a.exit_code, Some(0), "{out_a:?}");
        assert!(
            out_a.stdout.starts_with("/nuvira-cache/cargo/target"),
            "{}",
            out_a.stdout
        );
        // B's volume had nothing of A's.
        assert!(!out_b.stdout.contains("mark-a"), "{}", out_b.stdout);
        let vols_a = volumes(&format!("label=nuvira.cache.project={key_a}"));
        let vols_b = volumes(&format!("label=nuvira.cache.project={key_b}"));
        assert!(
            vols_a.contains(&volume_name(&format!("{key_a}-cargo"))),
            "{vols_a:?}"
        );
        assert!(
            vols_b.contains(&volume_name(&format!("{key_b}-cargo"))),
            "{vols_b:?}"
        );
        assert!(vols_a.iter().all(|v| !vols_b.contains(v)));

        // A again: its own mark only; nothing to upload; then one changed file.
        let again = sandbox
            .run(&run(a.path(), "a"), &NeverCancelled)
            .await
            .unwrap();
        assert!(again.stdout.contains("mark-a") && !again.stdout.contains("mark-b"));
        assert_eq!(
            again.info.workspace_copy.as_deref(),
            Some("uploaded: 0 changed, 3 unchanged")
        );
        write(a.path(), "src/lib.rs", "// changed");
        let mut changed = run(a.path(), "a");
        // mark-a stands for the last build's start (touched by the run before): a changed
        // file must be newer, or cargo would keep that build. A tar holds whole seconds.
        changed.command = vec![
            "sh".into(),
            "-c".into(),
            "stat -c %Y src/lib.rs /nuvira-cache/cargo/mark-a; cat src/lib.rs".into(),
        ];
        let changed = sandbox.run(&changed, &NeverCancelled).await.unwrap();
        assert!(changed.stdout.ends_with("// changed"), "{}", changed.stdout);
        let secs: Vec<u64> = changed
            .stdout
            .lines()
            .take(2)
            .map(|l| l.trim().parse().unwrap())
            .collect();
        assert!(secs[0] > secs[1], "{}", changed.stdout);
        assert_eq!(
            changed.info.workspace_copy.as_deref(),
            Some("uploaded: 1 changed, 2 unchanged")
        );
        // A deleted file is gone in the container too (the volume is made again).
        std::fs::remove_file(a.path().join("src/lib.rs")).unwrap();
        let mut gone = run(a.path(), "a");
        gone.command = vec!["sh".into(), "-c".into(), "test ! -e src/lib.rs".into()];
        let gone = sandbox.run(&gone, &NeverCancelled).await.unwrap();
        assert_eq!(gone.exit_code, Some(0), "{gone:?}");
        rm_volumes(&key_a);
        rm_volumes(&key_b);
    }

    /// Local (or bwrap) and Docker runs of one project share its warm slot: each keeps its
    /// own record of what its copy holds, so an edit made between any two runs reaches the
    /// next run of either kind. (One record for both had Docker trust the local copy's, and
    /// run the old file for ever after a local run of the edit.)
    #[tokio::test]
    async fn an_edit_reaches_docker_and_local_runs_whichever_ran_last() {
        let Some(docker_sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let docker_sandbox = docker_sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let local = LocalSandbox::new().with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let p = tempfile::tempdir().unwrap();
        let (_, key) = project_key(p.path()).unwrap();
        write(p.path(), "src/value.txt", "v0");
        write(p.path(), "other.txt", "same");
        let docker_run = |want: &'static str| {
            let req = host_run(p.path(), "cat src/value.txt");
            let sandbox = &docker_sandbox;
            async move {
                let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
                assert_eq!(
                    (out.exit_code, out.stdout.as_str()),
                    (Some(0), want),
                    "docker: {out:?}"
                );
            }
        };
        let local_run = |want: &'static str| {
            let req = cached(p.path(), "cat src/value.txt");
            let sandbox = &local;
            async move {
                let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
                assert_eq!(
                    (out.exit_code, out.stdout.as_str()),
                    (Some(0), want),
                    "local: {out:?}"
                );
            }
        };
        docker_run("v0").await;
        // Edited (same size), run locally, then in Docker: both see it.
        write(p.path(), "src/value.txt", "v1");
        local_run("v1").await;
        docker_run("v1").await;
        docker_run("v1").await;
        // Edited, run in Docker, then locally.
        write(p.path(), "src/value.txt", "v2");
        docker_run("v2").await;
        local_run("v2").await;
        // Edited (another size), local, Docker, local, Docker.
        write(p.path(), "src/value.txt", "v3 longer");
        local_run("v3 longer").await;
        docker_run("v3 longer").await;
        write(p.path(), "src/value.txt", "v4");
        local_run("v4").await;
        docker_run("v4").await;
        // Without its record (a failed upload, or an entry of a Nuvira that kept one record
        // for both), the volume is made again: a file the workspace lost is not left in it.
        let records: Vec<PathBuf> = walk_files(base.path())
            .into_iter()
            .filter(|f| f.file_name().is_some_and(|n| n == "volume-manifest"))
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        std::fs::remove_file(&records[0]).unwrap();
        std::fs::remove_file(p.path().join("other.txt")).unwrap();
        let out = docker_sandbox
            .run(
                &host_run(p.path(), "test ! -e other.txt && cat src/value.txt"),
                &NeverCancelled,
            )
            .await
            .unwrap();
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (Some(0), "v4"),
            "{out:?}"
        );
        let note = out.info.workspace_copy.unwrap_or_default();
        assert!(note.contains("new workspace volume"), "{note}");
        rm_volumes(&key);
    }

    /// Every file under `dir`, links not followed.
    fn walk_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                match e.file_type() {
                    Ok(t) if t.is_dir() => stack.push(e.path()),
                    Ok(t) if t.is_file() => out.push(e.path()),
                    _ => {}
                }
            }
        }
        out
    }

    const HOST: &str = "nuvira-host:latest";

    /// A run of `script` in the project `p` with `nuvira-host`, which must exit 0.
    async fn run_ok(
        sandbox: &nuvira_sandbox::DockerSandbox,
        p: &Path,
        script: &str,
    ) -> nuvira_api::SandboxOutcome {
        let out = sandbox
            .run(&host_run(p, script), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{script}: {out:?}");
        out
    }

    fn host_run(p: &Path, script: &str) -> SandboxRequest {
        let mut req = cached(p, script);
        req.image = Some(HOST.into());
        req
    }

    // Before: what a run wrote in /workspace stayed in the volume, so the next run's tree was
    // not the repository's (this second run failed on `leftover.txt`).
    #[tokio::test]
    async fn what_a_docker_run_writes_in_the_workspace_is_gone_in_the_next_run_but_build_dirs_stay()
    {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        write(p.path(), "tests/data.txt", "data");
        let (_, key) = project_key(p.path()).unwrap();
        // The first run makes the (tracked) volume.
        let first = sandbox
            .run(&host_run(p.path(), "ls -A"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        // A run that leaves files, a folder with a quote in its name, a build dir, and exits 3.
        let leave = "echo x > leftover.txt; mkdir -p \"out/it's\" && echo y > \"out/it's/f\"; \
                     echo z > tests/new.txt; mkdir -p node_modules/m && echo w > node_modules/m/i.js; echo oops >&2; exit 3";
        let left = sandbox
            .run(&host_run(p.path(), leave), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(left.exit_code, Some(3), "{left:?}");
        // The wrapper's listings are taken off standard error.
        assert_eq!(left.stderr, "oops\n", "{left:?}");
        let check = "test ! -e leftover.txt && test ! -e out && test ! -e tests/new.txt \
                     && test ! -e .nuvira && test -f node_modules/m/i.js && cat tests/data.txt";
        let next = sandbox
            .run(&host_run(p.path(), check), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        assert_eq!(next.stdout, "data", "{next:?}");
        // Warm: nothing uploaded again, the volume kept; the three created entries removed.
        let note = next.info.workspace_copy.clone().unwrap();
        assert!(note.starts_with("uploaded: 0 changed"), "{note}");
        assert!(note.contains("3 left by the last run removed"), "{note}");
        // A run that changes and deletes tracked files: the next run has them back.
        let spoil = "echo evil > src/lib.rs; rm tests/data.txt";
        let spoiled = sandbox
            .run(&host_run(p.path(), spoil), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(spoiled.exit_code, Some(0), "{spoiled:?}");
        let back = sandbox
            .run(
                &host_run(p.path(), "cat src/lib.rs tests/data.txt; ls node_modules"),
                &NeverCancelled,
            )
            .await
            .unwrap();
        // Before: the volume was made again. Now the two are uploaded again, into it (so the
        // build folder the earlier run left is still there).
        assert_eq!(back.stdout, "datam\n", "{back:?}");
        let note = back.info.workspace_copy.clone().unwrap();
        assert!(
            note.starts_with("uploaded: 2 changed")
                && note.contains("2 the last run changed or deleted uploaded again"),
            "{note}"
        );
        // A run that makes a tracked file a folder: that the upload cannot undo.
        run_ok(&sandbox, p.path(), "rm src/lib.rs && mkdir src/lib.rs").await;
        let back = run_ok(&sandbox, p.path(), "cat src/lib.rs").await;
        let note = back.info.workspace_copy.clone().unwrap();
        assert!(note.contains("new workspace volume"), "{note}");
        // A run killed at its timeout cannot say what it wrote: the next run starts clean.
        let mut hang = host_run(p.path(), "echo x > late.txt; sleep 600");
        hang.limits.timeout = Duration::from_secs(2);
        let hung = sandbox.run(&hang, &NeverCancelled).await.unwrap();
        assert!(hung.timed_out, "{hung:?}");
        let after = sandbox
            .run(&host_run(p.path(), "test ! -e late.txt"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(after.exit_code, Some(0), "{after:?}");
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
    }

    /// A project with a file of each kind the upload carries: plain, executable, in a
    /// read-only folder, links inside and out; every mtime fixed (files in the future, so
    /// that the upload's mtime floor leaves them as they are), so two copies list the same.
    fn kinds_project() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        write(p, "src/lib.rs", "pub fn f() {}\n");
        write(p, "bin/run.sh", "#!/bin/sh\necho run\n");
        write(p, "ro/f.txt", "read-only");
        write(p, "deep/a/b/c.txt", "deep");
        write(p, "bin/suid", "#!/bin/sh\n");
        std::fs::create_dir_all(p.join("empty")).unwrap();
        std::fs::create_dir_all(p.join("ro/empty")).unwrap();
        std::fs::set_permissions(p.join("bin/run.sh"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        // Another user's files (when the test runs as root): the upload keeps their owners.
        for f in ["src/lib.rs", "bin", "bin/suid", "ro/empty"] {
            let _ = std::os::unix::fs::lchown(p.join(f), Some(1000), Some(1000));
        }
        // (After the chown, which clears a set-user-id bit.)
        std::fs::set_permissions(p.join("bin/suid"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        std::os::unix::fs::symlink("../src/lib.rs", p.join("bin/lib-link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("outside-link")).unwrap();
        let future = std::time::UNIX_EPOCH + Duration::from_secs(4_102_444_800);
        let past = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        for f in [
            "src/lib.rs",
            "bin/run.sh",
            "bin/suid",
            "ro/f.txt",
            "deep/a/b/c.txt",
        ] {
            std::fs::File::options()
                .write(true)
                .open(p.join(f))
                .unwrap()
                .set_modified(future)
                .unwrap();
        }
        for d in [
            "src", "bin", "ro", "ro/empty", "empty", "deep", "deep/a", "deep/a/b",
        ] {
            std::fs::File::open(p.join(d))
                .unwrap()
                .set_modified(past)
                .unwrap();
        }
        let at = nix::sys::time::TimeSpec::new(1_000_000_000, 0);
        for link in ["bin/lib-link", "outside-link"] {
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &p.join(link),
                &at,
                &at,
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .unwrap();
        }
        std::fs::set_permissions(p.join("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
        project
    }

    // A new project's first run on this machine's engine writes the workspace straight into
    // the new volume's folder: the container sees exactly what the engine's archive upload
    // gives (entries, types, modes, owners, sizes, mtimes, link targets), and the next run is
    // warm as after an upload.
    #[tokio::test]
    async fn a_new_volume_written_on_this_machine_holds_exactly_what_the_upload_gives() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let uploaded = sandbox.clone().with_direct_write(false);
        let (direct_p, upload_p) = (kinds_project(), kinds_project());
        // (Not `.`: its mtime is when the last entry was added, different in each run.)
        // Run in a subfolder: the engine makes the working folder in the new volume first.
        let list = "cd /workspace && find . -mindepth 1 -path ./.nuvira -prune -o -printf '%p %y %m %U:%G %s %T@ %l\\n' | sort";
        let in_sub = |p: &Path| {
            let mut r = host_run(p, list);
            r.dir = "deep/a".into();
            r
        };
        let direct = sandbox
            .run(&in_sub(direct_p.path()), &NeverCancelled)
            .await
            .unwrap();
        let upload = uploaded
            .run(&in_sub(upload_p.path()), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(direct.exit_code, Some(0), "{direct:?}");
        assert_eq!(upload.exit_code, Some(0), "{upload:?}");
        let note = |o: &nuvira_api::SandboxOutcome| o.info.workspace_copy.clone().unwrap();
        assert!(
            note(&direct).contains("written into the volume's folder on this machine"),
            "{}",
            note(&direct)
        );
        assert!(
            !note(&upload).contains("on this machine"),
            "{}",
            note(&upload)
        );
        for line in [
            "./ro d 555 0:0",
            "./bin/run.sh f 750 0:0",
            "./outside-link l 777",
            "./ro/empty d 755",
            "./bin/suid f 4755",
            "./src/lib.rs f 644 1000:1000",
        ] {
            assert!(direct.stdout.contains(line), "{line}: {}", direct.stdout);
        }
        assert_eq!(direct.stdout, upload.stdout);
        // Warm after it: nothing uploaded, the same tree.
        let again = sandbox
            .run(&in_sub(direct_p.path()), &NeverCancelled)
            .await
            .unwrap();
        assert!(
            note(&again).starts_with("uploaded: 0 changed"),
            "{}",
            note(&again)
        );
        assert_eq!(again.stdout, direct.stdout);
        // At the workspace's root too.
        let root_p = kinds_project();
        let at_root = sandbox
            .run(&host_run(root_p.path(), list), &NeverCancelled)
            .await
            .unwrap();
        assert!(
            note(&at_root).contains("written into the volume's folder on this machine"),
            "{}",
            note(&at_root)
        );
        assert_eq!(at_root.stdout, direct.stdout);
        sandbox.wait_for_cleanup().await;
        for p in [&direct_p, &upload_p, &root_p] {
            rm_volumes(&project_key(p.path()).unwrap().1);
        }
    }

    // Before: a run that wrote `.nuvira/prune` and created nothing else had the next run's
    // wrapper source it (the host uploaded a prune list only when it was not empty).
    #[tokio::test]
    async fn a_prune_file_a_docker_run_plants_is_never_run_by_the_next_run() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        let (_, key) = project_key(p.path()).unwrap();
        let first = sandbox
            .run(&host_run(p.path(), "true"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        let plant = "mkdir -p .nuvira && printf 'echo PLANTED >&2; exit 0\\n' > .nuvira/prune";
        let planted = sandbox
            .run(&host_run(p.path(), plant), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(planted.exit_code, Some(0), "{planted:?}");
        let next = sandbox
            .run(
                &host_run(p.path(), "test ! -e .nuvira; echo real >&2; exit 4"),
                &NeverCancelled,
            )
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(4), "{next:?}");
        assert_eq!(next.stderr, "real\n", "{next:?}");
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
    }

    // Before: an uploaded empty folder a run made a link stayed a link (a changed folder was
    // taken for one that only gained entries).
    #[tokio::test]
    async fn an_uploaded_folder_a_docker_run_makes_a_link_is_a_folder_again_next_run() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        std::fs::create_dir_all(p.path().join("empty")).unwrap();
        let (_, key) = project_key(p.path()).unwrap();
        let swap = "test -d empty && rmdir empty && ln -s /tmp empty";
        let swapped = sandbox
            .run(&host_run(p.path(), swap), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(swapped.exit_code, Some(0), "{swapped:?}");
        let next = sandbox
            .run(
                &host_run(p.path(), "test -d empty && test ! -L empty"),
                &NeverCancelled,
            )
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
    }

    // Before: the next run uploaded `gen/x.rs` (and `out/y`), then its wrapper deleted them
    // (the last run had created them, so they were on its prune list).
    #[tokio::test]
    async fn a_file_the_user_made_where_a_docker_run_had_made_one_is_not_pruned() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        let (_, key) = project_key(p.path()).unwrap();
        let first = sandbox
            .run(&host_run(p.path(), "true"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        let make = "mkdir -p gen out && echo run > gen/x.rs && echo run > out/y";
        let made = sandbox
            .run(&host_run(p.path(), make), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(made.exit_code, Some(0), "{made:?}");
        write(p.path(), "gen/x.rs", "user");
        write(p.path(), "out/y", "user");
        let next = sandbox
            .run(&host_run(p.path(), "cat gen/x.rs out/y"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        assert_eq!(next.stdout, "useruser", "{next:?}");
        let note = next.info.workspace_copy.clone().unwrap();
        assert!(note.contains("new workspace volume"), "{note}");
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
    }

    // Before: a `newer` listing past the 32 MiB of standard error kept pushed its marker out, and
    // the run's standard error was the listing.
    #[tokio::test]
    async fn a_docker_run_that_changes_many_files_gets_its_own_standard_error() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        let (_, key) = project_key(p.path()).unwrap();
        let first = sandbox
            .run(&host_run(p.path(), "true"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        // 10,000 paths of ~3,780 bytes (14 folders of 250-byte names, then the file): 36 MiB
        // in each listing, made quickly (few files, long names).
        let long = "x".repeat(245);
        let many = format!(
            "mkdir many && cd many && for i in $(seq 14); do mkdir d$i{long} && cd d$i{long}; done && seq 10000 | sed 's/$/{long}/' | xargs touch && echo oops >&2"
        );
        let mut req = host_run(p.path(), &many);
        req.limits.timeout = Duration::from_secs(300);
        let made = sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert_eq!(made.exit_code, Some(0), "{made:?}");
        assert_eq!(made.stderr, "oops\n");
        let next = sandbox
            .run(&host_run(p.path(), "test ! -e many"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        let note = next.info.workspace_copy.clone().unwrap();
        assert!(note.contains("1 left by the last run removed"), "{note}");
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
    }

    // The listings over 1 MiB (docker_track::INLINE_CAP) are read from the container instead
    // of standard error, each on its own: `all` long and `newer` short (many uploaded files,
    // one created), then `newer` long and `all` short (a created entry is listed twice in
    // `newer`). A listing that could not be read would make the volume again (a full upload):
    // the prune of exactly what the run created says both were read.
    #[tokio::test]
    async fn docker_listings_over_a_mebibyte_are_read_from_the_container_one_at_a_time() {
        let Some(sandbox) = docker(HOST).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox
            .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
            .with_background_removal();
        let p = cargo_project();
        let (_, key) = project_key(p.path()).unwrap();
        // 6,000 uploaded files of 200-byte names: `all` is about 1.3 MiB.
        let long = "u".repeat(196);
        for i in 0..6000 {
            std::fs::write(p.path().join(format!("{i:04}{long}")), "").unwrap();
        }
        let first = sandbox
            .run(&host_run(p.path(), "true"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        let made = sandbox
            .run(&host_run(p.path(), "echo made > new.txt"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(made.exit_code, Some(0), "{made:?}");
        assert_eq!(made.stderr, "", "{made:?}");
        let next = sandbox
            .run(&host_run(p.path(), "test ! -e new.txt"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        let note = next.info.workspace_copy.clone().unwrap();
        assert!(
            note.contains("uploaded: 0 changed") && note.contains("1 left by the last run removed"),
            "{note}"
        );

        // A small workspace; 3,000 created files of 200-byte names: `newer` (each twice) is
        // about 1.3 MiB, `all` about 0.65 MiB.
        let q = cargo_project();
        let (_, key_q) = project_key(q.path()).unwrap();
        let first = sandbox
            .run(&host_run(q.path(), "true"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(first.exit_code, Some(0), "{first:?}");
        let many = format!("mkdir made && cd made && seq 3000 | sed 's/$/{long}/' | xargs touch");
        let made = sandbox
            .run(&host_run(q.path(), &many), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(made.exit_code, Some(0), "{made:?}");
        assert_eq!(made.stderr, "", "{made:?}");
        let next = sandbox
            .run(&host_run(q.path(), "test ! -e made"), &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(next.exit_code, Some(0), "{next:?}");
        let note = next.info.workspace_copy.clone().unwrap();
        assert!(
            note.contains("uploaded: 0 changed") && note.contains("1 left by the last run removed"),
            "{note}"
        );
        sandbox.wait_for_cleanup().await;
        rm_volumes(&key);
        rm_volumes(&key_q);
    }

    #[tokio::test]
    async fn two_docker_runs_of_one_project_at_once_each_get_a_warm_slot_of_volumes() {
        let Some(sandbox) = docker(BUSYBOX).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let sandbox = sandbox.with_cache_root(CacheRoot::at(base.path(), u64::MAX));
        let p = cargo_project();
        // The pip cache is shared by the slots: the two runs meet there.
        write(p.path(), "requirements.txt", "");
        let (_, key) = project_key(p.path()).unwrap();
        let round = |r: u32| {
            let runs: Vec<_> = (0..2)
                .map(|i| {
                    let q = "/nuvira-cache/python";
                    let mut req = cached(
                        p.path(),
                        &format!(
                            "touch {q}/r{r}-{i}; while [ ! -e {q}/r{r}-0 ] || [ ! -e {q}/r{r}-1 ]; do :; done; ls /nuvira-cache/cargo; touch /nuvira-cache/cargo/built-{r}-{i}"
                        ),
                    );
                    req.image = Some(BUSYBOX.into());
                    req.limits.timeout = Duration::from_secs(60);
                    let sandbox = sandbox.clone();
                    tokio::spawn(async move { sandbox.run(&req, &NeverCancelled).await.unwrap() })
                })
                .collect();
            async move {
                let mut out = Vec::new();
                for r in runs {
                    out.push(r.await.unwrap());
                }
                out
            }
        };
        let first = round(1).await;
        for o in &first {
            assert_eq!(o.exit_code, Some(0), "{o:?}");
            let note = o.info.workspace_copy.as_deref().unwrap();
            assert!(note.contains("into a new workspace volume"), "{note}");
        }
        let vols = volumes(&format!("label=nuvira.cache.project={key}"));
        for kind in ["workspace", "workspace-1", "cargo", "cargo-1", "python"] {
            let name = volume_name(&format!("{key}-{kind}"));
            assert!(vols.contains(&name), "{name} not in {vols:?}");
        }
        // Both warm: nothing to upload, and each sees what its slot's last run built.
        let second = round(2).await;
        let mut built = Vec::new();
        for o in &second {
            assert_eq!(o.exit_code, Some(0), "{o:?}");
            let note = o.info.workspace_copy.as_deref().unwrap();
            assert!(
                note.starts_with("uploaded: 0 changed, 4 unchanged"),
                "{note}"
            );
            let seen: Vec<&str> = o.stdout.lines().collect();
            assert_eq!(seen.len(), 1, "{}", o.stdout);
            built.push(seen[0].to_owned());
        }
        built.sort();
        assert_eq!(built, ["built-1-0", "built-1-1"]);
        rm_volumes(&key);
    }

    // Before: `docker system df` was asked with a `type` filter bollard cannot encode, so the
    // call failed on every run and every volume counted as 0 bytes against the cap.
    #[tokio::test]
    async fn a_docker_volume_is_measured_on_its_first_run_and_counts_against_the_cap() {
        let Some(sandbox) = docker(BUSYBOX).await else {
            return;
        };
        let base = tempfile::tempdir().unwrap();
        let root = CacheRoot::at(base.path(), u64::MAX);
        let sandbox = sandbox
            .with_cache_root(root.clone())
            .with_background_removal();
        let p = cargo_project();
        let (_, key) = project_key(p.path()).unwrap();
        let mut req = cached(
            p.path(),
            "dd if=/dev/zero of=/nuvira-cache/cargo/blob bs=1024 count=3072 2>/dev/null",
        );
        req.image = Some(BUSYBOX.into());
        let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        // Measured after the result, with the container's removal.
        sandbox.wait_for_cleanup().await;
        let cargo = root
            .list()
            .unwrap()
            .into_iter()
            .find(|e| e.key == format!("{key}-cargo"))
            .unwrap();
        assert!(cargo.meta.volume, "{cargo:?}");
        assert!(cargo.meta.size >= 3 << 20, "{cargo:?}");
        assert!(cargo.meta.measured > 0, "{cargo:?}");
        // The next run (within MEASURE_EVERY) keeps the measurement as the estimate.
        let again = sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert_eq!(again.exit_code, Some(0), "{again:?}");
        let after = root
            .list()
            .unwrap()
            .into_iter()
            .find(|e| e.key == cargo.key)
            .unwrap();
        assert_eq!(after.meta.size, cargo.meta.size, "{after:?}");
        // The containers were removed in the background, after the results.
        sandbox.wait_for_cleanup().await;
        let left = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!(
                "id={}",
                again.info.container_id.as_deref().unwrap()
            ))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&left.stdout).trim().is_empty());
        rm_volumes(&key);
    }
}

// The same rule for every sandbox (Docker opens its entries through RunCache::open too): a run
// without the workspace entry gets the download caches but no cargo target dir.
#[test]
fn a_run_without_the_workspace_entry_gets_no_cargo_entry() {
    use nuvira_sandbox::cache::RunCache;
    let base = tempfile::tempdir().unwrap();
    let root = CacheRoot::at(base.path(), u64::MAX);
    let p = cargo_project();
    write(p.path(), "requirements.txt", "");
    let req = cached(p.path(), "cargo test");
    let first = RunCache::open(&root, &req).unwrap();
    assert!(first.workspace().is_some());
    let kinds = |c: &RunCache| c.toolchains().iter().map(|l| l.kind()).collect::<Vec<_>>();
    let keys = |c: &RunCache| {
        c.toolchains()
            .iter()
            .map(|l| l.key().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&first), [CacheKind::Cargo, CacheKind::Python]);
    // The second warm slot: its own workspace entry and target dir, the pip cache shared.
    let second = RunCache::open(&root, &req).unwrap();
    let (ws1, ws2) = (first.workspace().unwrap(), second.workspace().unwrap());
    assert_eq!((ws1.slot(), ws2.slot()), (0, 1));
    assert_ne!(ws1.data_dir(), ws2.data_dir());
    assert_ne!(keys(&first)[0], keys(&second)[0]);
    assert_eq!(keys(&first)[1], keys(&second)[1]);
    assert_ne!(
        first.env()["CARGO_TARGET_DIR"],
        second.env()["CARGO_TARGET_DIR"]
    );
    // Beyond the slots: no workspace entry, so no target dir either.
    let third = RunCache::open(&root, &req).unwrap();
    assert!(third.workspace().is_none());
    assert_eq!(kinds(&third), [CacheKind::Python]);
    assert!(!third.env().contains_key("CARGO_TARGET_DIR"));
    let first_target = first.env()["CARGO_TARGET_DIR"].clone();
    drop((first, second, third));
    let fourth = RunCache::open(&root, &req).unwrap();
    assert_eq!(fourth.env()["CARGO_TARGET_DIR"], first_target);
}
