//! Branches, commits, refusals, merge bases and attributes on real repositories.

use crate::support::{commit_all, git, git_cmd, lines, repo_with, write};
use nuvira_git::{CommitOptions, GitError, Repo};

fn paths(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_folder_outside_any_repository_is_no_repository() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(Repo::discover(tmp.path()).unwrap().is_none());
    let err = Repo::open(tmp.path()).unwrap_err();
    assert!(matches!(err, GitError::NotARepository(_)), "{err}");
}

#[test]
fn dirty_files_lists_staged_unstaged_and_untracked_but_never_nuvira_state_or_ignored_files() {
    let (_t, dir) = repo_with(&[
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        (".gitignore", "target/\n"),
    ]);
    let repo = Repo::open(&dir).unwrap();
    write(
        &dir,
        &[(".nuvira/journal/x", "state"), ("target/out", "built")],
    );
    assert_eq!(
        repo.dirty_files().unwrap(),
        vec![],
        "only state and ignored files"
    );
    write(
        &dir,
        &[
            ("a.txt", "changed\n"),
            ("new\u{1b}[31m.txt", "n\n"),
            ("b.txt", "b2\n"),
        ],
    );
    git(&dir, &["add", "b.txt"]);
    let dirty: Vec<(String, &str)> = repo
        .dirty_files()
        .unwrap()
        .into_iter()
        .map(|d| (d.path, d.state))
        .collect();
    assert_eq!(
        dirty,
        vec![
            ("a.txt".to_owned(), "modified"),
            ("b.txt".to_owned(), "staged"),
            ("new\u{1b}[31m.txt".to_owned(), "untracked"),
        ]
    );
}

#[test]
fn create_branch_checks_out_a_new_branch_from_head_or_from_base_and_keeps_local_changes() {
    let (_t, dir) = repo_with(&[("a.txt", "1\n")]);
    write(&dir, &[("a.txt", "2\n")]);
    commit_all(&dir, "second");
    let first = git(&dir, &["rev-parse", "HEAD~1"]).trim().to_owned();
    let repo = Repo::open(&dir).unwrap();

    repo.create_branch("nuvira/work", None).unwrap();
    assert_eq!(
        git(&dir, &["branch", "--show-current"]).trim(),
        "nuvira/work"
    );
    assert_eq!(repo.current_branch().as_deref(), Some("nuvira/work"));

    write(&dir, &[("untracked.txt", "mine\n")]);
    repo.create_branch("from-base", Some(&first)).unwrap();
    assert_eq!(git(&dir, &["branch", "--show-current"]).trim(), "from-base");
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]).trim(), first);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "1\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("untracked.txt")).unwrap(),
        "mine\n",
        "a local file is kept"
    );

    let exists = repo.create_branch("nuvira/work", None).unwrap_err();
    assert!(matches!(exists, GitError::BranchExists(_)), "{exists}");
    let bad = repo.create_branch("no..dots", None).unwrap_err();
    assert!(matches!(bad, GitError::BadBranchName(_)), "{bad}");
    let unknown = repo.create_branch("x", Some("nope")).unwrap_err();
    assert!(
        matches!(unknown, GitError::UnknownRevision { .. }),
        "{unknown}"
    );
}

#[test]
fn a_base_whose_checkout_would_overwrite_a_local_change_changes_nothing() {
    let (_t, dir) = repo_with(&[("a.txt", "1\n")]);
    write(&dir, &[("a.txt", "2\n")]);
    commit_all(&dir, "second");
    write(&dir, &[("a.txt", "local edit\n")]);
    let repo = Repo::open(&dir).unwrap();
    let err = repo.create_branch("b", Some("HEAD~1")).unwrap_err();
    assert!(err.to_string().contains("check out"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "local edit\n"
    );
    assert_eq!(git(&dir, &["branch", "--show-current"]).trim(), "main");
    assert!(git(&dir, &["branch", "--list", "b"]).trim().is_empty());
}

#[test]
fn commit_paths_commits_exactly_the_files_given_never_other_staged_or_unstaged_changes() {
    let (_t, dir) = repo_with(&[
        ("src/lib.rs", "fn a() {}\n"),
        ("gone.txt", "bye\n"),
        ("staged.txt", "s\n"),
        ("other.txt", "o\n"),
    ]);
    // The user's own changes: one staged, one not, one untracked.
    write(&dir, &[("staged.txt", "user staged\n")]);
    git(&dir, &["add", "staged.txt"]);
    write(
        &dir,
        &[("other.txt", "user edit\n"), ("scratch.txt", "x\n")],
    );
    // The run's writes.
    write(
        &dir,
        &[
            ("src/lib.rs", "fn a() {}\nfn b() {}\n"),
            ("src/new.rs", "pub fn n() {}\n"),
        ],
    );
    std::fs::remove_file(dir.join("gone.txt")).unwrap();

    let repo = Repo::open(&dir).unwrap();
    let msg = "Add b\n\nbody\n\nNuvira-Run: run-42\n";
    let done = repo
        .commit_paths(
            &paths(&["src/new.rs", "src/lib.rs", "gone.txt"]),
            msg,
            &CommitOptions::default(),
        )
        .unwrap()
        .expect("a commit");
    assert_eq!(done.branch.as_deref(), Some("main"));
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]).trim(), done.sha);
    assert_eq!(
        lines(&git(&dir, &["show", "--stat=200", "--format=", "HEAD"]))
            .into_iter()
            .filter(|l| l.contains('|'))
            .map(|l| l.split('|').next().unwrap().trim().to_owned())
            .collect::<Vec<_>>(),
        vec!["gone.txt", "src/lib.rs", "src/new.rs"]
    );
    assert_eq!(
        lines(&git(&dir, &["show", "--name-status", "--format=", "HEAD"])),
        vec!["A\tsrc/new.rs", "D\tgone.txt", "M\tsrc/lib.rs"]
    );
    assert_eq!(
        git(
            &dir,
            &["log", "-1", "--format=%(trailers:key=Nuvira-Run,valueonly)"]
        )
        .trim(),
        "run-42"
    );
    assert_eq!(
        git(&dir, &["log", "-1", "--format=%an <%ae>"]).trim(),
        "Test User <test@example.com>"
    );
    // The user's changes are where they were: staged stays staged, the rest unstaged.
    assert_eq!(
        git(&dir, &["diff", "--cached", "--name-only"]).trim(),
        "staged.txt"
    );
    assert_eq!(git(&dir, &["diff", "--name-only"]).trim(), "other.txt");
    assert_eq!(
        lines(&git(&dir, &["status", "--porcelain"])),
        vec![" M other.txt", "?? scratch.txt", "M  staged.txt"]
    );
    assert_eq!(
        git(&dir, &["show", "HEAD:staged.txt"]),
        "s\n",
        "the staged change is not in the commit"
    );
}

#[test]
fn commit_paths_with_nothing_changed_makes_no_commit_and_refuses_paths_outside() {
    let (_t, dir) = repo_with(&[("a.txt", "a\n")]);
    let repo = Repo::open(&dir).unwrap();
    let before = git(&dir, &["rev-parse", "HEAD"]);
    assert_eq!(
        repo.commit_paths(&paths(&["a.txt"]), "m\n", &CommitOptions::default())
            .unwrap(),
        None
    );
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), before);
    for bad in [
        "../x",
        "/etc/passwd",
        ".git/config",
        ".nuvira/journal",
        "a/./b",
    ] {
        let err = repo
            .commit_paths(&paths(&[bad]), "m\n", &CommitOptions::default())
            .unwrap_err();
        assert!(
            matches!(err, GitError::OutsideRepository(_)),
            "{bad}: {err}"
        );
    }
}

#[test]
fn author_from_the_flag_and_committer_from_config() {
    let (_t, dir) = repo_with(&[("a.txt", "a\n")]);
    write(&dir, &[("a.txt", "b\n")]);
    let repo = Repo::open(&dir).unwrap();
    let opts = CommitOptions {
        author: Some("Ada Lovelace <ada@example.com>".into()),
        sign: false,
    };
    repo.commit_paths(&paths(&["a.txt"]), "m\n", &opts)
        .unwrap()
        .unwrap();
    assert_eq!(
        git(&dir, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]).trim(),
        "Ada Lovelace <ada@example.com>|Test User <test@example.com>"
    );
    let bad = CommitOptions {
        author: Some("no email".into()),
        sign: false,
    };
    write(&dir, &[("a.txt", "c\n")]);
    let err = repo
        .commit_paths(&paths(&["a.txt"]), "m\n", &bad)
        .unwrap_err();
    assert!(matches!(err, GitError::BadAuthor(_)), "{err}");
}

#[test]
fn a_commit_on_a_detached_head_moves_head_and_no_branch() {
    let (_t, dir) = repo_with(&[("a.txt", "a\n")]);
    write(&dir, &[("a.txt", "b\n")]);
    commit_all(&dir, "second");
    git(&dir, &["checkout", "-q", "--detach", "HEAD~1"]);
    let main_before = git(&dir, &["rev-parse", "main"]);
    write(&dir, &[("a.txt", "detached\n")]);
    let repo = Repo::open(&dir).unwrap();
    assert_eq!(repo.current_branch(), None);
    let done = repo
        .commit_paths(&paths(&["a.txt"]), "m\n", &CommitOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(done.branch, None);
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]).trim(), done.sha);
    assert_eq!(git(&dir, &["rev-parse", "main"]), main_before);
    // And a branch can start from the detached HEAD.
    repo.create_branch("from-detached", None).unwrap();
    assert_eq!(git(&dir, &["rev-parse", "from-detached"]).trim(), done.sha);
}

#[test]
fn the_first_commit_of_an_empty_repository_holds_only_the_files_given() {
    let (_t, dir) = repo_with(&[]);
    write(&dir, &[("a.txt", "a\n"), ("unrelated.txt", "u\n")]);
    let repo = Repo::open(&dir).unwrap();
    let done = repo
        .commit_paths(&paths(&["a.txt"]), "first\n", &CommitOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(done.branch.as_deref(), Some("main"));
    assert_eq!(
        git(&dir, &["ls-tree", "-r", "--name-only", "HEAD"]).trim(),
        "a.txt"
    );
}

#[test]
fn an_executable_file_and_a_symlink_keep_their_modes() {
    use std::os::unix::fs::PermissionsExt;
    let (_t, dir) = repo_with(&[("a.txt", "a\n")]);
    write(&dir, &[("run.sh", "#!/bin/sh\n")]);
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", dir.join("link")).unwrap();
    let repo = Repo::open(&dir).unwrap();
    repo.commit_paths(
        &paths(&["run.sh", "link"]),
        "m\n",
        &CommitOptions::default(),
    )
    .unwrap()
    .unwrap();
    let tree = git(&dir, &["ls-tree", "HEAD"]);
    assert!(
        tree.contains("100755 blob") && tree.contains("\trun.sh"),
        "{tree}"
    );
    assert!(
        tree.contains("120000 blob") && tree.contains("\tlink"),
        "{tree}"
    );
    assert!(
        git(&dir, &["status", "--porcelain"]).trim().is_empty(),
        "index matches"
    );
}

/// main: c1 - c2 ; feature: c1 - f1 - f2 (merged base is c1).
fn branched() -> (tempfile::TempDir, std::path::PathBuf) {
    let (t, dir) = repo_with(&[("keep.rs", "fn keep() {}\n"), ("change.rs", "fn a() {}\n")]);
    git(&dir, &["checkout", "-q", "-b", "feature"]);
    write(
        &dir,
        &[
            ("change.rs", "fn a() {}\nfn b() {}\n"),
            ("added.rs", "fn c() {}\n"),
        ],
    );
    std::fs::write(dir.join("blob.bin"), b"\0\x01\x02binary\0").unwrap();
    commit_all(&dir, "f1");
    std::fs::remove_file(dir.join("keep.rs")).unwrap();
    commit_all(&dir, "f2");
    git(&dir, &["checkout", "-q", "main"]);
    write(&dir, &[("main-only.rs", "fn m() {}\n")]);
    commit_all(&dir, "c2");
    git(&dir, &["checkout", "-q", "feature"]);
    (t, dir)
}

#[test]
fn changed_since_the_merge_base_matches_git_diff_name_only_three_dots() {
    let (_t, dir) = branched();
    let repo = Repo::open(&dir).unwrap();
    let want = lines(&git(&dir, &["diff", "--name-only", "main...HEAD"]));
    assert_eq!(repo.changed_names("main").unwrap(), want);
    assert_eq!(
        repo.merge_base("main").unwrap(),
        git(&dir, &["merge-base", "main", "HEAD"]).trim()
    );
    let changed = repo.changed_since("main").unwrap();
    let names: Vec<&str> = changed.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        names,
        vec!["added.rs", "blob.bin", "change.rs", "keep.rs"],
        "{changed:#?} {}",
        git(&dir, &["diff", "--stat", "main...HEAD"])
    );
    assert!(changed[1].binary && changed[1].added_lines.is_empty());
    assert!(!changed[0].binary);
    let change = &changed[2];
    assert_eq!(
        change.added_lines.iter().copied().collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!((change.additions, change.deletions), (1, 0));
    assert!(change.diff.contains("+fn b() {}"), "{}", change.diff);
    assert!(changed[3].deleted);
    assert!(
        !names.contains(&"main-only.rs"),
        "a change on main is not the branch's"
    );
}

#[test]
fn generated_files_are_those_gitattributes_marks_linguist_generated_or_minus_diff() {
    let (_t, dir) = repo_with(&[
        (
            ".gitattributes",
            "gen/** linguist-generated\n*.lock -diff\nkept.rs linguist-generated=false\n",
        ),
        ("gen/a.rs", ""),
        ("Cargo.lock", ""),
        ("kept.rs", ""),
        ("src/x.rs", ""),
    ]);
    let repo = Repo::open(&dir).unwrap();
    let all = paths(&["gen/a.rs", "Cargo.lock", "kept.rs", "src/x.rs"]);
    assert_eq!(repo.generated(&all), vec!["Cargo.lock", "gen/a.rs"]);
}

#[test]
fn a_repository_with_a_submodule_is_clean_and_commits_around_it() {
    let (_t1, sub) = repo_with(&[("lib.txt", "sub\n")]);
    let (_t2, dir) = repo_with(&[("a.txt", "a\n")]);
    git(
        &dir,
        &[
            "submodule",
            "add",
            "-q",
            sub.to_str().unwrap(),
            "vendor/sub",
        ],
    );
    commit_all(&dir, "add submodule");
    let repo = Repo::open(&dir).unwrap();
    assert_eq!(repo.dirty_files().unwrap(), vec![]);
    // Opening from inside the submodule finds the submodule's own repository.
    let inner = Repo::open(&dir.join("vendor/sub")).unwrap();
    assert_eq!(
        inner.root().canonicalize().unwrap(),
        dir.join("vendor/sub").canonicalize().unwrap()
    );
    write(&dir, &[("vendor/sub/lib.txt", "changed inside\n")]);
    let dirty = repo.dirty_files().unwrap();
    assert_eq!(dirty.len(), 1, "{dirty:?}");
    assert_eq!(dirty[0].path, "vendor/sub");
    write(&dir, &[("a.txt", "b\n")]);
    repo.commit_paths(&paths(&["a.txt"]), "m\n", &CommitOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        git(&dir, &["show", "--name-only", "--format=", "HEAD"]).trim(),
        "a.txt"
    );
    let err = repo
        .commit_paths(&paths(&["vendor/sub"]), "m\n", &CommitOptions::default())
        .unwrap_err();
    assert!(matches!(err, GitError::NotAFile(_)), "{err}");
}

#[test]
fn a_linked_worktree_gets_its_own_branch_and_commit() {
    let (t, dir) = repo_with(&[("a.txt", "a\n")]);
    let wt = t.path().join("wt");
    git(
        &dir,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "wt-branch",
            wt.to_str().unwrap(),
        ],
    );
    write(&wt, &[("a.txt", "from worktree\n")]);
    let repo = Repo::open(&wt).unwrap();
    assert_eq!(repo.current_branch().as_deref(), Some("wt-branch"));
    assert_eq!(repo.dirty_files().unwrap().len(), 1);
    repo.create_branch("wt-run", None).unwrap();
    let done = repo
        .commit_paths(&paths(&["a.txt"]), "m\n", &CommitOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(done.branch.as_deref(), Some("wt-run"));
    assert_eq!(git(&dir, &["rev-parse", "wt-run"]).trim(), done.sha);
    assert_eq!(
        git(&dir, &["branch", "--show-current"]).trim(),
        "main",
        "the main worktree stays"
    );
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "a\n");
}

#[test]
fn a_shallow_clone_commits_and_says_to_deepen_when_the_merge_base_is_missing() {
    let (t, dir) = branched();
    let url = format!("file://{}", dir.display());
    let clone = t.path().join("clone");
    git(
        t.path(),
        &[
            "clone",
            "-q",
            "--depth",
            "1",
            "--no-single-branch",
            &url,
            clone.to_str().unwrap(),
        ],
    );
    assert_eq!(
        git(&clone, &["rev-parse", "--is-shallow-repository"]).trim(),
        "true"
    );
    let repo = Repo::open(&clone).unwrap();
    let err = repo.changed_since("origin/main").unwrap_err();
    assert!(matches!(err, GitError::NoMergeBase(_)), "{err}");
    assert!(err.to_string().contains("--deepen"), "{err}");
    git(&clone, &["config", "user.name", "Test User"]);
    git(&clone, &["config", "user.email", "test@example.com"]);
    repo.create_branch("run", None).unwrap();
    write(&clone, &[("added.rs", "fn c() {}\nfn d() {}\n")]);
    repo.commit_paths(&paths(&["added.rs"]), "m\n", &CommitOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        git(&clone, &["show", "--name-only", "--format=", "HEAD"]).trim(),
        "added.rs"
    );
    assert_eq!(
        repo.changed_names("origin/feature").unwrap(),
        vec!["added.rs"]
    );
}

#[test]
fn sign_uses_the_users_ssh_signing_config() {
    let keygen = std::process::Command::new("ssh-keygen").arg("-?").output();
    if keygen.is_err() {
        assert!(
            std::env::var("NUVIRA_REQUIRE_SSH_KEYGEN").as_deref() != Ok("1"),
            "ssh-keygen is missing and NUVIRA_REQUIRE_SSH_KEYGEN=1"
        );
        eprintln!("skipped: ssh-keygen is not installed (apt-get install openssh-client)");
        return;
    }
    let (t, dir) = repo_with(&[("a.txt", "a\n")]);
    let key = t.path().join("key");
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "test", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git(&dir, &["config", "gpg.format", "ssh"]);
    // `commit.gpgsign` alone asks for a signature too (the second commit below).
    git(
        &dir,
        &[
            "config",
            "user.signingkey",
            &format!("{}.pub", key.display()),
        ],
    );
    let allowed = t.path().join("allowed");
    let pubkey = std::fs::read_to_string(format!("{}.pub", key.display())).unwrap();
    std::fs::write(&allowed, format!("test@example.com {pubkey}")).unwrap();
    git(
        &dir,
        &[
            "config",
            "gpg.ssh.allowedSignersFile",
            allowed.to_str().unwrap(),
        ],
    );
    write(&dir, &[("a.txt", "signed\n"), ("other.txt", "not in it\n")]);
    let repo = Repo::open(&dir).unwrap();
    let opts = CommitOptions {
        author: None,
        sign: true,
    };
    let done = repo
        .commit_paths(&paths(&["a.txt"]), "signed\n\nNuvira-Run: run-s\n", &opts)
        .unwrap()
        .unwrap();
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]).trim(), done.sha);
    assert_eq!(
        git(&dir, &["show", "--name-only", "--format=", "HEAD"]).trim(),
        "a.txt"
    );
    let verify = git_cmd(&dir)
        .args(["verify-commit", "HEAD"])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert_eq!(git(&dir, &["log", "-1", "--format=%G?"]).trim(), "G");
    assert!(
        git(&dir, &["diff", "--cached", "--name-only"])
            .trim()
            .is_empty()
    );
}
