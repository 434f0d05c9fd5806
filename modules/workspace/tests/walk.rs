//! The one walk over a user's files: what it lists and what `copy_tree` copies.

use nuvira_workspace::{EntryKind, WalkOptions, Workspace, copy_tree, walk};
use std::path::Path;

/// A workspace with everything the walk must leave out, at the root and nested: Nuvira's
/// journal, a nested repository's `.git` folder, a submodule's `.git` file, ignored files and
/// build folders.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("src/lib.rs", "pub fn f() {}"),
        (".gitignore", "*.log\n"),
        (".env.example", "A=1"),
        ("debug.log", "ignored"),
        ("target/debug/out", "build output"),
        ("web/node_modules/pkg/index.js", "dependency"),
        (".nuvira/journal/0001/files/src/lib.rs", "the original"),
        ("crates/x/.nuvira/last-run.json", "{}"),
        (".git/HEAD", "ref: refs/heads/main"),
        ("vendor/lib/.git/HEAD", "ref: refs/heads/main"),
        ("vendor/lib/lib.rs", "pub fn lib() {}"),
        ("module/.git", "gitdir: ../.git/modules/module"),
        ("module/m.rs", "fn m() {}"),
    ] {
        let p = dir.path().join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn files(root: &Path, options: WalkOptions) -> Vec<String> {
    walk(root, options)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| e.rel.to_string_lossy().replace('\\', "/"))
        .collect()
}

/// Every file below `root`, found without the walk (so a copy is checked independently).
fn all_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let ft = entry.file_type().unwrap();
            if ft.is_dir() {
                stack.push(entry.path());
            } else {
                let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

fn has_state(path: &str) -> bool {
    path.split('/').any(|c| c == ".git" || c == ".nuvira")
}

#[test]
fn git_and_nuvira_are_never_walked_at_any_depth() {
    let t = tree();
    for include_ignored in [false, true] {
        for skip_build_dirs in [false, true] {
            let options = WalkOptions {
                include_ignored,
                skip_build_dirs,
            };
            let all: Vec<String> = walk(t.path(), options)
                .unwrap()
                .into_iter()
                .map(|e| e.rel.to_string_lossy().replace('\\', "/"))
                .collect();
            assert!(!all.iter().any(|p| has_state(p)), "{options:?}: {all:?}");
            assert!(all.contains(&"vendor/lib/lib.rs".to_owned()), "{all:?}");
        }
    }
}

#[test]
fn ignored_files_and_build_folders_follow_the_options() {
    let t = tree();
    assert_eq!(
        files(t.path(), WalkOptions::default()),
        [
            ".env.example",
            ".gitignore",
            "module/m.rs",
            "src/lib.rs",
            "target/debug/out",
            "vendor/lib/lib.rs",
            "web/node_modules/pkg/index.js",
        ]
    );
    let skip = files(
        t.path(),
        WalkOptions {
            skip_build_dirs: true,
            ..WalkOptions::default()
        },
    );
    assert!(
        !skip
            .iter()
            .any(|f| f.contains("target/") || f.contains("node_modules/"))
    );
    let everything = files(
        t.path(),
        WalkOptions {
            include_ignored: true,
            ..WalkOptions::default()
        },
    );
    assert!(
        everything.contains(&"debug.log".to_owned()),
        "{everything:?}"
    );
}

#[test]
fn list_files_skips_nested_state_folders() {
    let t = tree();
    let listed = Workspace::open(t.path()).unwrap().list_files().unwrap();
    assert!(listed.contains(&"module/m.rs".to_owned()));
    assert!(!listed.iter().any(|p| has_state(p)), "{listed:?}");
}

#[test]
fn copy_tree_copies_files_and_links_but_never_git_or_nuvira() {
    let t = tree();
    #[cfg(unix)]
    std::os::unix::fs::symlink("src/lib.rs", t.path().join("link.rs")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("copy");
    copy_tree(t.path(), &dest, WalkOptions::default()).unwrap();
    let copied = all_files(&dest);
    assert!(!copied.iter().any(|p| has_state(p)), "{copied:?}");
    assert!(!copied.contains(&"debug.log".to_owned()), "{copied:?}");
    assert_eq!(
        std::fs::read_to_string(dest.join("vendor/lib/lib.rs")).unwrap(),
        "pub fn lib() {}"
    );
    #[cfg(unix)]
    assert_eq!(
        std::fs::read_link(dest.join("link.rs")).unwrap(),
        Path::new("src/lib.rs")
    );
}

#[cfg(unix)]
#[test]
fn copy_tree_keeps_file_modes() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree();
    let script = t.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tempfile::tempdir().unwrap();
    copy_tree(t.path(), out.path(), WalkOptions::default()).unwrap();
    assert_eq!(
        nuvira_workspace::mode_of(&out.path().join("run.sh")),
        Some(0o755)
    );
}
