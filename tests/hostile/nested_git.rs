//! `.git` and `.nuvira` folders at any depth, in any case (issue 11, item 4).
//!
//! Only the first component used to be checked, so `sub/.git/config` of a nested repository was
//! writable: code execution through `core.fsmonitor` the next time git runs there. What must
//! hold: every edit path (and `rename-file`'s `to`) with `.git` or `.nuvira` as any component,
//! compared ignoring case, is refused by `nuvira apply` with exit 1, the error names the path,
//! and nothing in the repository is written.

use crate::support::{Sentinel, git, nuvira};

fn refused(batch: &str, path: &str) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
    // A real nested repository, with the config git reads.
    std::fs::create_dir(repo.path().join("sub")).unwrap();
    git(&repo.path().join("sub"), &["init", "-q"]);
    for dir in ["a/.GIT/hooks", "x/.Nuvira"] {
        std::fs::create_dir_all(repo.path().join(dir)).unwrap();
    }
    let edits_dir = tempfile::tempdir().unwrap();
    let edits = edits_dir.path().join("batch.yaml");
    std::fs::write(&edits, batch).unwrap();
    let before = Sentinel::of_repo(repo.path());
    let out = nuvira()
        .arg("apply")
        .arg(&edits)
        .arg("--repo")
        .arg(repo.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{path}: {stderr}");
    assert!(stderr.contains(&format!("`{path}`")), "{path}: {stderr}");
    assert!(stderr.contains("off limits"), "{path}: {stderr}");
    before.assert_repo_unchanged(repo.path());
}

#[test]
fn git_and_nuvira_folders_at_any_depth_in_any_case_are_refused() {
    for path in [
        "sub/.git/config",
        "a/.GIT/hooks/x",
        "x/.Nuvira/y",
        "sub/.git/hooks/pre-commit",
    ] {
        let batch = format!(
            "edits:\n  - strategy: whole-file\n    path: {path}\n    content: \"[core]\\n\\tfsmonitor = touch /tmp/pwned\\n\"\n"
        );
        refused(&batch, path);
    }
}

#[test]
fn rename_file_into_a_nested_git_folder_is_refused() {
    let path = "sub/.git/hooks/pre-commit";
    let batch = format!("edits:\n  - strategy: rename-file\n    path: a.txt\n    to: {path}\n");
    refused(&batch, path);
}
