//! `nuvira apply` and `nuvira rollback` end to end: the real binary, the real strategies and
//! tree-sitter grammars, on repositories copied into temp folders.
//!
//! Scenario folders (`tests/scenarios/NNN_name/`, the format of `nuvira_test_support::scenario`)
//! hold `input/` (the repository), `request.yaml` (the batch) and either `expected/` (the whole
//! tree after a successful apply) or `expected_error.txt` (lines that must appear on stderr;
//! the tree must stay byte-identical to `input/`). An optional `expected_stdout.txt` lists
//! lines that must appear on stdout (warnings).
//! Every applied scenario is then rolled back with `nuvira rollback`, which must restore
//! `input/` exactly.

use assert_cmd::Command;
use nuvira_test_support::scenario::{
    self, Expected, Tree, compare_trees, contains_lines, copy_tree, read_tree,
};
use std::path::{Path, PathBuf};

fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// Every file below `dir` (skipping `.nuvira/`) with its bytes, by `/`-separated relative path.
fn tree(dir: &Path) -> Tree {
    read_tree(dir)
}

/// Folders below `dir` (skipping `.nuvira/`), to check that a rollback removes created ones.
fn folders(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in walk_dirs(dir) {
        let rel = e.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
        if !rel.starts_with(".nuvira") {
            out.push(rel);
        }
    }
    out.sort();
    out
}

fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.push(p.clone());
            out.extend(walk_dirs(&p));
        }
    }
    out
}

#[test]
fn scenarios_apply_as_expected_and_roll_back_exactly() {
    scenario::run(&scenarios_dir(), 15, |s| {
        let work = tempfile::tempdir().unwrap();
        copy_tree(&s.input(), work.path());
        let before = tree(work.path());
        let before_dirs = folders(work.path());
        let out = nuvira()
            .arg("apply")
            .arg(s.request_path())
            .arg("--repo")
            .arg(work.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        match s.expected() {
            Expected::Tree(want) => {
                if out.status.code() != Some(0) {
                    return Err(format!("exit code {:?}\n{ctx}", out.status.code()));
                }
                compare_trees(&tree(work.path()), &want).map_err(|e| format!("{e}\n{ctx}"))?;
                // Every applied batch is undone byte for byte, created folders included.
                nuvira()
                    .arg("rollback")
                    .arg("--repo")
                    .arg(work.path())
                    .assert()
                    .code(0);
                compare_trees(&tree(work.path()), &before)
                    .map_err(|e| format!("rollback did not restore input/: {e}\n{ctx}"))?;
                if folders(work.path()) != before_dirs {
                    return Err(format!("rollback left folders behind\n{ctx}"));
                }
            }
            Expected::Error(lines) => {
                if out.status.code() != Some(1) {
                    return Err(format!("exit code {:?}\n{ctx}", out.status.code()));
                }
                compare_trees(&tree(work.path()), &before)
                    .map_err(|e| format!("a rejected batch wrote something: {e}\n{ctx}"))?;
                contains_lines(&stderr, &lines, "stderr")?;
                if work.path().join(".nuvira/journal").exists() {
                    return Err(format!("a rejected batch left a journal\n{ctx}"));
                }
            }
        }
        contains_lines(&stdout, &s.expected_stdout(), "stdout")
    });
}

fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn edits_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const RENAME_YAML: &str =
    "edits:\n  - strategy: search-replace\n    path: a.txt\n    search: one\n    replace: two\n";

#[test]
fn json_output_is_the_edit_result_and_dry_run_json_is_the_preview() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(f.path(), "e.yaml", RENAME_YAML);

    let out = nuvira()
        .args(["apply", "--dry-run", "--format", "json", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changes"][0]["path"], "a.txt");
    assert_eq!(v["changes"][0]["kind"], "modify");
    assert!(
        v["changes"][0]["diff"]
            .as_str()
            .unwrap()
            .contains("-one\n+two\n")
    );
    assert_eq!(v["validation"]["syntax_valid"], true);
    assert_eq!(v["estimated_impact"]["files"], 1);
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );

    let out = nuvira()
        .args(["apply", "--format", "json", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["applied_count"], 1);
    assert_eq!(v["skipped_changes"], serde_json::json!([]));
    assert_eq!(v["preview"]["changes"][0]["path"], "a.txt");
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "two\n"
    );
}

#[test]
fn a_rejected_batch_in_json_lists_every_reason_with_path_and_line() {
    let r = repo(&[("a.txt", "one\n"), ("b.rs", "fn b() {}\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.json",
        r#"{"edits": [
            {"strategy": "search-replace", "path": "a.txt", "search": "zero", "replace": "x"},
            {"strategy": "search-replace", "path": "b.rs", "search": "fn b() {}", "replace": "fn b() {"}
        ]}"#,
    );
    let out = nuvira()
        .args(["apply", "--format", "json", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["applied_count"], 0);
    let skipped = v["skipped_changes"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    assert_eq!(skipped[0]["path"], "a.txt");
    assert_eq!(skipped[1]["path"], "b.rs");
    assert_eq!(skipped[1]["line"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert!(
        stderr.contains("b.rs:1: the edit introduces a syntax error"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(r.path().join("b.rs")).unwrap(),
        "fn b() {}\n"
    );
}

#[test]
fn a_dry_run_of_an_invalid_batch_exits_1_and_writes_nothing() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.toml",
        "[[edits]]\nstrategy = \"search-replace\"\npath = \"a.txt\"\nsearch = \"zero\"\nreplace = \"x\"\n",
    );
    let out = nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a.txt"));
    assert!(!r.path().join(".nuvira").exists());
}

#[test]
fn malformed_edits_files_exit_2_naming_file_line_and_column() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let cases = [
        (
            "bad.yaml",
            "edits:\n  - strategy: search-replace\n    path: a: b\n",
            "line 3, column 12",
        ),
        (
            "bad.json",
            "{\"edits\": [\n  {\"strategy\": }\n]}",
            "line 2, column 16",
        ),
        ("bad.toml", "[[edits]]\nstrategy = \n", "line 2"),
        (
            "unknown.yaml",
            "edits: []\ncolour: red\n",
            "unknown field `colour`",
        ),
        ("noedits.yaml", "format: true\n", "no `edits` list"),
        (
            "fields.yaml",
            "edits:\n  - strategy: search-replace\n    path: a.txt\n  - strategy: teleport\n",
            "fields.yaml:2: edits[0].search: missing",
        ),
        // Entries of JSON and TOML files have lines too, at the field a problem names; a byte
        // order mark is skipped (the plan loader's rules).
        (
            "fields.json",
            "{\"edits\": [\n  {\"path\": \"a.txt\",\n   \"strategy\": \"teleport\"}\n]}",
            "fields.json:3: edits[0].strategy: unknown strategy",
        ),
        (
            "fields.toml",
            "[[edits]]\npath = \"a.txt\"\nstrategy = \"teleport\"\n",
            "fields.toml:3: edits[0].strategy: unknown strategy",
        ),
        (
            "bom.json",
            "\u{feff}{\"edits\": [{\"strategy\": \"teleport\"}]}",
            "bom.json:1: edits[0].strategy",
        ),
        ("notes.txt", "edits: []\n", "unknown extension"),
        ("instr.yaml", "instructions: rename things\n", "nuvira run"),
    ];
    for (name, text, needle) in cases {
        let p = edits_file(f.path(), name, text);
        let out = nuvira()
            .args(["apply", "--repo"])
            .arg(r.path())
            .arg(&p)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(name),
            "{name}: the file is not named: {stderr}"
        );
        assert!(
            stderr.contains(needle),
            "{name}: expected `{needle}` in: {stderr}"
        );
    }
    let out = nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(f.path().join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.yaml"));
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );
}

#[test]
fn rollback_with_nothing_to_roll_back_exits_1_with_a_clear_message() {
    let r = repo(&[("a.txt", "one\n")]);
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to roll back"));

    // After an apply and its rollback there is again nothing to roll back.
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(f.path(), "e.yaml", RENAME_YAML);
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .assert()
        .code(0);
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("a.txt"));
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );
    nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(1);
}

#[test]
fn an_empty_batch_offers_no_undo_and_leaves_the_last_apply_to_roll_back() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let real = edits_file(f.path(), "1.yaml", RENAME_YAML);
    let empty = edits_file(f.path(), "2.yaml", "edits: []\n");
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&real)
        .assert()
        .code(0);
    let out = nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&empty)
        .assert()
        .code(0)
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("applied 0 change(s)"), "{stdout}");
    assert!(!stdout.contains("undo with"), "{stdout}");
    // The rollback still undoes the real apply, not the empty one.
    nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );
}

#[test]
fn rollback_undoes_only_the_last_apply() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let first = edits_file(f.path(), "1.yaml", RENAME_YAML);
    let second = edits_file(
        f.path(),
        "2.yaml",
        "edits:\n  - strategy: search-replace\n    path: a.txt\n    search: two\n    replace: three\n",
    );
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&first)
        .assert()
        .code(0);
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&second)
        .assert()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "three\n"
    );
    nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "two\n"
    );
    nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );
}

#[test]
fn rollback_refuses_to_overwrite_a_file_edited_after_the_apply_unless_told() {
    let r = repo(&[("a.txt", "one\n"), ("b.txt", "bee\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.yaml",
        "edits:\n  - strategy: search-replace\n    path: a.txt\n    search: one\n    replace: two\n  - strategy: search-replace\n    path: b.txt\n    search: bee\n    replace: wasp\n",
    );
    let apply = || {
        nuvira()
            .args(["apply", "--repo"])
            .arg(r.path())
            .arg(&edits)
            .assert()
            .code(0);
    };
    let rollback = |flag: Option<&str>| {
        let mut cmd = nuvira();
        cmd.args(["rollback", "--repo"]).arg(r.path());
        if let Some(flag) = flag {
            cmd.arg(flag);
        }
        cmd.assert()
    };
    let read = |rel: &str| std::fs::read_to_string(r.path().join(rel)).unwrap();
    apply();
    std::fs::write(r.path().join("a.txt"), "two, and my own line\n").unwrap();

    // Refused: exit 1, names the file and the ways out, touches nothing.
    let out = rollback(None).code(1).get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("a.txt (edited)"), "{stderr}");
    assert!(stderr.contains("nothing was restored"), "{stderr}");
    assert!(
        stderr.contains("--keep-changed") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(read("a.txt"), "two, and my own line\n");
    assert_eq!(read("b.txt"), "wasp\n");

    // --keep-changed: the other file is restored, the edited one kept.
    let out = rollback(Some("--keep-changed"))
        .code(0)
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("kept 1 file(s)"), "{stdout}");
    assert_eq!(read("a.txt"), "two, and my own line\n");
    assert_eq!(read("b.txt"), "bee\n");

    // --force overwrites the later edit.
    std::fs::write(r.path().join("a.txt"), "one\n").unwrap();
    apply();
    std::fs::write(r.path().join("b.txt"), "my bees\n").unwrap();
    rollback(Some("--force")).code(0);
    assert_eq!(read("a.txt"), "one\n");
    assert_eq!(read("b.txt"), "bee\n");

    // The two flags exclude each other.
    let mut both = nuvira();
    both.args(["rollback", "--force", "--keep-changed", "--repo"])
        .arg(r.path())
        .assert()
        .code(2);
}

#[test]
fn rollback_says_which_files_it_restored_and_which_it_removed() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.yaml",
        "edits:\n  - strategy: search-replace\n    path: a.txt\n    search: one\n    replace: two\n  - strategy: whole-file\n    path: notes/new.txt\n    content: made by the run\n",
    );
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .assert()
        .code(0);
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(0)
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "restored 1 file(s) to their contents before it and removed 1 file(s) it had created"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("\n  a.txt\n"), "{stdout}");
    assert!(stdout.contains("\n  notes/new.txt (removed)"), "{stdout}");
    assert!(!r.path().join("notes").exists());
}

/// A three-file batch whose process is killed (the documented fault-injection hook aborts it
/// like a kill) after its second durable file write.
fn crash_mid_batch() -> (tempfile::TempDir, Tree) {
    let r = repo(&[
        ("src/a.rs", "pub fn a() -> u8 {\n    1\n}\n"),
        ("src/b.rs", "pub fn b() -> u8 {\n    2\n}\n"),
        ("docs/c.md", "# c\n"),
    ]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            r.path().join("src/b.rs"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
    }
    let before = tree(r.path());
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.yaml",
        "edits:\n  - {strategy: search-replace, path: src/a.rs, search: '    1', replace: '    10'}\n  - {strategy: search-replace, path: src/b.rs, search: '    2', replace: '    20'}\n  - {strategy: whole-file, path: docs/new/c2.md, content: \"# c2\\n\"}\n  - {strategy: delete-file, path: docs/c.md}\n",
    );
    let out = nuvira()
        // The hook exists because the root crate's dev-dependency turns on `fault-injection`.
        .env(nuvira_workspace::FAULT_CRASH_AFTER_WRITES_ENV, "2")
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the process was meant to die mid-batch"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "expected SIGABRT: {out:?}");
    }
    // The crash really happened between writes: two files changed, the rest not.
    let mid = tree(r.path());
    assert_ne!(mid, before);
    assert_eq!(mid["src/a.rs"], b"pub fn a() -> u8 {\n    10\n}\n");
    assert_eq!(mid["src/b.rs"], b"pub fn b() -> u8 {\n    20\n}\n");
    assert!(mid.contains_key("docs/c.md"));
    assert!(!mid.contains_key("docs/new/c2.md"));
    (r, before)
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_crash_between_writes_is_undone_by_nuvira_rollback() {
    let (r, before) = crash_mid_batch();
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted batch"));
    assert!(
        tree(r.path()) == before,
        "not every original byte was restored"
    );
    #[cfg(unix)]
    assert_eq!(mode(&r.path().join("src/b.rs")), 0o640);
    assert!(!r.path().join("docs/new").exists());
}

#[test]
fn a_crash_between_writes_is_undone_by_the_next_start() {
    let (r, before) = crash_mid_batch();
    // The next command to touch the workspace (here a dry run of anything) recovers first.
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(
        f.path(),
        "e.yaml",
        "edits:\n  - {strategy: search-replace, path: docs/c.md, search: '# c', replace: '# C'}\n",
    );
    let out = nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rolled back an interrupted batch"));
    assert!(
        tree(r.path()) == before,
        "not every original byte was restored"
    );
    // The crashed batch is gone from the journal: nothing left to roll back.
    nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(1);
}

#[test]
fn a_repo_that_is_not_a_folder_exits_2_and_names_it() {
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(f.path(), "e.yaml", RENAME_YAML);
    let missing = f.path().join("no-such-repo");
    for args in [vec!["apply"], vec!["rollback"]] {
        let mut cmd = nuvira();
        cmd.args(&args).arg("--repo").arg(&missing);
        if args[0] == "apply" {
            cmd.arg(&edits);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-repo"));
    }
}

#[test]
fn nuvira_state_stays_in_dot_nuvira_and_is_ignored_by_git() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(f.path(), "e.yaml", RENAME_YAML);
    nuvira()
        .args(["apply", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .assert()
        .code(0);
    let top: Vec<String> = std::fs::read_dir(r.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut top = top;
    top.sort();
    assert_eq!(top, vec![".nuvira", "a.txt"]);
    assert_eq!(
        std::fs::read_to_string(r.path().join(".nuvira/.gitignore")).unwrap(),
        "*\n"
    );
}

#[test]
fn the_undo_hint_after_apply_names_the_repository() {
    // Regression: after `apply --repo rs` the hint said `nuvira rollback`, which would undo
    // in the current folder instead.
    let parent = tempfile::tempdir().unwrap();
    let f = tempfile::tempdir().unwrap();
    let edits = edits_file(f.path(), "e.yaml", RENAME_YAML);
    for name in ["rs", "my repo"] {
        let r = parent.path().join(name);
        std::fs::create_dir(&r).unwrap();
        std::fs::write(r.join("a.txt"), "one\n").unwrap();
        let out = nuvira()
            .current_dir(parent.path())
            .args(["apply", "--repo", name])
            .arg(&edits)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let hint = if name.contains(' ') {
            format!("undo with `nuvira rollback --repo '{name}'`")
        } else {
            format!("undo with `nuvira rollback --repo {name}`")
        };
        assert!(stdout.contains(&hint), "{stdout}");
    }
    let r = repo(&[("a.txt", "one\n")]);
    let out = nuvira()
        .current_dir(r.path())
        .arg("apply")
        .arg(&edits)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("undo with `nuvira rollback`\n"));
}

#[test]
fn after_a_crash_a_file_edited_since_is_kept_by_the_next_command_and_named() {
    let (r, before) = crash_mid_batch();
    // The user goes on working on a file the crashed batch had written.
    let mine = b"pub fn a() -> u8 {\n    10 + 1 // mine\n}\n".to_vec();
    std::fs::write(r.path().join("src/a.rs"), &mine).unwrap();
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(r.path())
        .assert()
        .code(0)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("kept 1 file(s) edited after that crash, as they are: src/a.rs"),
        "{stderr}"
    );
    let after = tree(r.path());
    assert_eq!(after["src/a.rs"], mine);
    assert_eq!(after["src/b.rs"], before["src/b.rs"]);
}

#[test]
fn json_format_prints_an_error_object_when_apply_fails_early() {
    let r = repo(&[("a.txt", "one\n")]);
    let f = tempfile::tempdir().unwrap();
    let good = edits_file(f.path(), "ok.yaml", RENAME_YAML);
    let broken = edits_file(f.path(), "broken.yaml", "edits: [\n");
    let invalid = edits_file(
        f.path(),
        "invalid.yaml",
        "edits:\n  - { strategy: teleport, path: a.txt }\n",
    );
    let missing = f.path().join("no-such-repo");
    for (edits, repo, kind, code) in [
        (&broken, r.path(), "invalid-input", 2),
        (&good, missing.as_path(), "repository", 2),
        (&invalid, r.path(), "invalid-input", 2),
    ] {
        let out = nuvira()
            .args(["apply", "--format", "json", "--repo"])
            .arg(repo)
            .arg(edits)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", edits.display());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"]["kind"], kind, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // An invalid entry lists every problem.
    let out = nuvira()
        .args(["apply", "--format", "json", "--repo"])
        .arg(r.path())
        .arg(&invalid)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["error"]["problems"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
        "one\n"
    );
}
