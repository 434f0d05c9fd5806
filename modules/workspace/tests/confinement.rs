//! Every way out of the workspace is refused, and nothing is ever written outside.

use nuvira_workspace::{FileOp, Journal, Workspace, WorkspaceError};
use std::path::Path;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

/// `<tmp>/repo` is the workspace, `<tmp>/outside` a folder next to it holding `secret.txt`.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "outside\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn a() {}\n").unwrap();
    Fixture {
        _tmp: tmp,
        root,
        outside,
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        out.push((e.display().to_string(), std::fs::read(&e).unwrap()));
    }
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            out.extend(walk(&p));
        } else if meta.is_file() {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Tries `path` as a read, a write resolution and a journaled write; all must fail with an
/// escape, and `outside/` must be byte-identical afterwards.
fn assert_refused(f: &Fixture, path: &str) {
    let ws = Workspace::open(&f.root).unwrap();
    let before = snapshot(&f.outside);
    let err = ws.resolve(path).unwrap_err();
    assert!(
        matches!(err, WorkspaceError::Escape { .. }),
        "{path}: expected an escape, got {err}"
    );
    assert!(err.to_string().contains("inside the workspace"), "{err}");
    assert!(ws.resolve_for_write(path).is_err());
    assert!(ws.read_text(path).is_err());
    let journal = Journal::new(&ws);
    let mut txn = journal.begin("escape-test", None);
    let res = txn.apply(&[
        FileOp::Write {
            path: "src/ok.rs".into(),
            content: b"fn ok() {}\n".to_vec(),
            mode: None,
        },
        FileOp::Write {
            path: path.into(),
            content: b"pwned\n".to_vec(),
            mode: None,
        },
    ]);
    assert!(res.is_err(), "{path}: a journaled write went through");
    drop(txn);
    assert_eq!(
        snapshot(&f.outside),
        before,
        "{path}: something was written outside"
    );
    assert!(
        !f.root.join("src/ok.rs").exists(),
        "{path}: the batch was partly written"
    );
}

#[test]
fn dot_dot_that_leaves_the_root_is_refused() {
    let f = fixture();
    assert_refused(&f, "../outside/secret.txt");
    assert_refused(&f, "src/../../outside/new.txt");
    assert_refused(&f, "../x");
}

#[test]
fn absolute_paths_are_refused() {
    let f = fixture();
    assert_refused(&f, "/etc/passwd");
    let abs = f.outside.join("secret.txt");
    assert_refused(&f, abs.to_str().unwrap());
}

#[cfg(unix)]
#[test]
fn a_symlink_to_a_folder_outside_is_refused_for_files_below_it() {
    let f = fixture();
    std::os::unix::fs::symlink(&f.outside, f.root.join("out")).unwrap();
    assert_refused(&f, "out/secret.txt");
    assert_refused(&f, "out/new.txt");
    assert_refused(&f, "out");
}

#[cfg(unix)]
#[test]
fn a_symlink_chain_that_ends_outside_is_refused() {
    let f = fixture();
    // repo/a -> repo/b -> ../outside/secret.txt: every hop but the last is inside.
    std::os::unix::fs::symlink(f.outside.join("secret.txt"), f.root.join("b")).unwrap();
    std::os::unix::fs::symlink(f.root.join("b"), f.root.join("a")).unwrap();
    assert_refused(&f, "a");
    assert_refused(&f, "b");
}

#[cfg(unix)]
#[test]
fn a_path_through_a_symlinked_parent_is_refused() {
    let f = fixture();
    std::fs::create_dir_all(f.outside.join("deep/er")).unwrap();
    // repo/src/vendor -> ../../outside/deep (relative link), then deeper components.
    std::os::unix::fs::symlink("../../outside/deep", f.root.join("src/vendor")).unwrap();
    assert_refused(&f, "src/vendor/er/file.rs");
    assert_refused(&f, "src/./vendor/../vendor/er/x");
}

#[cfg(unix)]
#[test]
fn a_dangling_symlink_is_refused_because_a_write_could_follow_it_anywhere() {
    let f = fixture();
    std::os::unix::fs::symlink(f.outside.join("not-yet.txt"), f.root.join("dangling")).unwrap();
    assert_refused(&f, "dangling");
    assert!(!f.outside.join("not-yet.txt").exists());
}

#[cfg(unix)]
#[test]
fn symlinks_that_stay_inside_resolve_to_their_real_path() {
    let f = fixture();
    std::os::unix::fs::symlink("src", f.root.join("code")).unwrap();
    let ws = Workspace::open(&f.root).unwrap();
    assert_eq!(ws.resolve("code/lib.rs").unwrap().rel, "src/lib.rs");
    assert_eq!(ws.read_text("code/lib.rs").unwrap().unwrap(), "fn a() {}\n");
}

#[cfg(unix)]
#[test]
fn writes_into_git_or_nuvira_are_refused_even_through_a_symlink() {
    let f = fixture();
    std::fs::create_dir_all(f.root.join(".git")).unwrap();
    std::fs::write(f.root.join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(".git", f.root.join("gitdir")).unwrap();
    let ws = Workspace::open(&f.root).unwrap();
    for p in [
        ".git/config",
        "gitdir/config",
        ".nuvira/journal/x",
        "./.nuvira",
    ] {
        let err = ws.resolve_for_write(p).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::Protected { .. }),
            "{p}: {err}"
        );
    }
    // Reading is fine.
    assert!(ws.read_text(".git/config").unwrap().is_some());
}

#[test]
fn size_cap_and_binary_detection_guard_reads() {
    let f = fixture();
    std::fs::write(f.root.join("big.txt"), vec![b'a'; 2048]).unwrap();
    std::fs::write(f.root.join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0").unwrap();
    let ws = Workspace::open(&f.root).unwrap().with_max_file_size(1024);
    let err = ws.read_text("big.txt").unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                size: 2048,
                limit: 1024,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("max_file_size"), "{err}");
    let err = ws.read_text("image.png").unwrap_err();
    assert!(matches!(err, WorkspaceError::Binary { .. }), "{err}");
    assert_eq!(ws.read_text("missing.txt").unwrap(), None);
}

#[test]
fn listing_honours_gitignore_and_skips_state_folders() {
    let f = fixture();
    std::fs::write(f.root.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::create_dir_all(f.root.join("target")).unwrap();
    std::fs::write(f.root.join("target/out.o"), "x").unwrap();
    std::fs::write(f.root.join("debug.log"), "x").unwrap();
    std::fs::create_dir_all(f.root.join(".nuvira/journal")).unwrap();
    std::fs::write(f.root.join(".nuvira/journal/x"), "x").unwrap();
    std::fs::create_dir_all(f.root.join(".git")).unwrap();
    std::fs::write(f.root.join(".git/HEAD"), "x").unwrap();
    let ws = Workspace::open(&f.root).unwrap();
    assert_eq!(ws.list_files().unwrap(), vec![".gitignore", "src/lib.rs"]);
}

#[cfg(unix)]
mod property {
    use super::*;
    use proptest::prelude::*;

    fn component() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "..", ".", "src", "a.txt", "out", "inner", "chain", "dangling", "new", "",
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the mix of `..`, `.`, symlinks in and out, and missing components: a path
        /// either is refused or resolves to a real path under the root.
        #[test]
        fn every_resolved_path_is_inside_the_root(
            parts in prop::collection::vec(component(), 1..6),
            absolute in any::<bool>(),
        ) {
            let f = fixture();
            std::os::unix::fs::symlink(&f.outside, f.root.join("out")).unwrap();
            std::os::unix::fs::symlink("src", f.root.join("inner")).unwrap();
            std::os::unix::fs::symlink("out", f.root.join("chain")).unwrap();
            std::os::unix::fs::symlink(f.outside.join("nope"), f.root.join("dangling")).unwrap();
            let ws = Workspace::open(&f.root).unwrap();
            let mut path = parts.join("/");
            if absolute {
                path.insert(0, '/');
            }
            if let Ok(r) = ws.resolve(&path) {
                prop_assert!(r.abs.starts_with(ws.root()), "{path} -> {}", r.abs.display());
                prop_assert!(!r.rel.split('/').any(|c| c == ".." || c.is_empty()), "{path} -> {}", r.rel);
                let canonical_parent = std::fs::canonicalize(r.abs.parent().unwrap());
                if let Ok(parent) = canonical_parent {
                    prop_assert!(parent.starts_with(ws.root()), "{path}: parent {}", parent.display());
                }
            }
        }
    }
}
