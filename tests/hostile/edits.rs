//! Edits on files an attacker shaped: symlinks, broken syntax the gate must see, CRLF files.

use crate::support::{Sentinel, nuvira};
use std::path::Path;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Runs `nuvira apply` of a YAML batch on `repo`; returns (exit code, stderr).
fn apply(repo: &Path, yaml: &str) -> (Option<i32>, String) {
    let f = tempfile::tempdir().unwrap();
    let edits = f.path().join("e.yaml");
    std::fs::write(&edits, yaml).unwrap();
    let out = nuvira()
        .args(["apply", "--repo"])
        .arg(repo)
        .arg(&edits)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn renaming_a_symlink_is_refused_naming_the_link_and_moves_nothing() {
    let r = tempfile::tempdir().unwrap();
    write(r.path(), "src/target.txt", "the target\n");
    std::os::unix::fs::symlink("target.txt", r.path().join("src/link.txt")).unwrap();
    let before = Sentinel::of(r.path());
    let (code, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: rename-file\n    path: src/link.txt\n    to: src/renamed.txt\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("`src/link.txt`: it is a symlink to `target.txt`"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was renamed"), "{stderr}");
    // The link still points at the target, which is unchanged; no new file appeared.
    assert_eq!(
        std::fs::read_link(r.path().join("src/link.txt")).unwrap(),
        Path::new("target.txt")
    );
    assert!(!r.path().join("src/renamed.txt").exists());
    let _ = std::fs::remove_dir_all(r.path().join(".nuvira"));
    before.assert_unchanged(r.path());
}

#[test]
fn renaming_a_symlink_that_points_outside_is_refused_as_an_escape() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "outside\n");
    let guard = Sentinel::of(outside.path());
    let r = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), r.path().join("link.txt"))
        .unwrap();
    let (code, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: rename-file\n    path: link.txt\n    to: moved.txt\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("outside the workspace"), "{stderr}");
    assert!(r.path().join("link.txt").is_symlink());
    assert!(!r.path().join("moved.txt").exists());
    guard.assert_unchanged(outside.path());
}

#[test]
fn deleting_a_symlink_is_refused_naming_the_link_and_deletes_nothing() {
    let r = tempfile::tempdir().unwrap();
    write(r.path(), "src/target.txt", "the target\n");
    std::os::unix::fs::symlink("target.txt", r.path().join("src/link.txt")).unwrap();
    let before = Sentinel::of(r.path());
    let (code, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: delete-file\n    path: src/link.txt\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("`src/link.txt`: it is a symlink to `target.txt`"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was deleted"), "{stderr}");
    // The target is still there and the link still points at it.
    assert_eq!(
        std::fs::read_to_string(r.path().join("src/target.txt")).unwrap(),
        "the target\n"
    );
    assert_eq!(
        std::fs::read_link(r.path().join("src/link.txt")).unwrap(),
        Path::new("target.txt")
    );
    let _ = std::fs::remove_dir_all(r.path().join(".nuvira"));
    before.assert_unchanged(r.path());
}

#[test]
fn deleting_a_symlink_that_points_outside_is_refused_and_the_target_stays() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "outside\n");
    let guard = Sentinel::of(outside.path());
    let r = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), r.path().join("link.txt"))
        .unwrap();
    let (code, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: delete-file\n    path: link.txt\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("link.txt"), "{stderr}");
    assert!(r.path().join("link.txt").is_symlink());
    guard.assert_unchanged(outside.path());
}

/// Applies `yaml` to a repository holding `rel` = `text`; asserts it is rejected with
/// `needle` in the error and the file left as it was.
fn assert_rejected(rel: &str, text: &str, yaml: &str, needle: &str) {
    let r = tempfile::tempdir().unwrap();
    write(r.path(), rel, text);
    let (code, stderr) = apply(r.path(), yaml);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    assert_eq!(std::fs::read_to_string(r.path().join(rel)).unwrap(), text);
}

#[test]
fn a_python_indentation_error_is_rejected_naming_file_line_and_kind() {
    if std::process::Command::new("python3")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!("skipped: python3 is not installed, so only tree-sitter checks Python");
        return;
    }
    assert_rejected(
        "pkg/mod.py",
        "def f():\n    x = 1\n    y = 2\n    return x + y\n",
        "edits:\n  - strategy: search-replace\n    path: pkg/mod.py\n    search: \"    y = 2\"\n    replace: \"      y = 2\"\n",
        "pkg/mod.py:3: the edit introduces a syntax error at 3:",
    );
    // The kind is CPython's.
    let r = tempfile::tempdir().unwrap();
    write(r.path(), "a.py", "def f():\n    return 1\n");
    let (_, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: search-replace\n    path: a.py\n    search: \"    return 1\"\n    replace: \"  return 1\\n    pass\"\n",
    );
    assert!(stderr.contains("a.py:3:"), "{stderr}");
    assert!(stderr.contains("IndentationError"), "{stderr}");
}

#[test]
fn a_mismatched_tsx_tag_is_rejected_naming_file_line_and_tags() {
    assert_rejected(
        "web/App.tsx",
        "export const App = () => (\n  <div>\n    <p>hi</p>\n  </div>\n);\n",
        "edits:\n  - strategy: search-replace\n    path: web/App.tsx\n    search: \"  </div>\"\n    replace: \"  </span>\"\n",
        "web/App.tsx:4: the edit introduces a syntax error at 4:3: mismatched JSX tag: `</span>` closes `<div>`",
    );
}

#[test]
fn fixing_one_error_and_making_the_same_one_on_another_line_is_rejected() {
    let text = "fn a() {\n    let = 1;\n}\n\nfn b() {\n    let x = 2;\n}\n";
    assert_rejected(
        "src/lib.rs",
        text,
        "edits:\n  - strategy: search-replace\n    path: src/lib.rs\n    search: \"let = 1\"\n    replace: \"let y = 1\"\n  - strategy: search-replace\n    path: src/lib.rs\n    search: \"let x = 2\"\n    replace: \"let = 2\"\n",
        "src/lib.rs:6: the edit introduces a syntax error at 6:",
    );
}

#[test]
fn an_edit_of_a_crlf_file_keeps_its_line_endings() {
    let r = tempfile::tempdir().unwrap();
    write(r.path(), "win.txt", "one\r\ntwo\r\nthree\r\n");
    let (code, stderr) = apply(
        r.path(),
        "edits:\n  - strategy: search-replace\n    path: win.txt\n    search: two\n    replace: \"two\\nand a half\"\n  - strategy: regex\n    path: win.txt\n    pattern: \"^three$\"\n    replace: \"3\"\n",
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        std::fs::read(r.path().join("win.txt")).unwrap(),
        b"one\r\ntwo\r\nand a half\r\n3\r\n"
    );
}

/// 40,000 creations took 115 s (each entry copied the whole overlay); now about a second.
/// The bound is far above a linear run on a loaded machine and far below the quadratic one.
#[test]
fn a_dry_run_of_40k_creations_finishes() {
    let r = tempfile::tempdir().unwrap();
    let f = tempfile::tempdir().unwrap();
    let edits: Vec<serde_json::Value> = (0..40_000)
        .map(|i| serde_json::json!({"strategy": "whole-file", "path": format!("d{}/f{i}.txt", i % 50), "content": "x\n"}))
        .collect();
    let file = f.path().join("e.json");
    std::fs::write(&file, serde_json::json!({ "edits": edits }).to_string()).unwrap();
    let started = std::time::Instant::now();
    let out = nuvira()
        .args(["apply", "--dry-run", "--format", "json", "--repo"])
        .arg(r.path())
        .arg(&file)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changes"].as_array().unwrap().len(), 40_000);
    assert!(took < std::time::Duration::from_secs(40), "took {took:?}");
    assert_eq!(
        std::fs::read_dir(r.path()).unwrap().count(),
        0,
        "a dry run wrote"
    );
}

#[test]
fn without_python3_the_tree_sitter_check_alone_runs_and_says_so_once() {
    let r = tempfile::tempdir().unwrap();
    write(r.path(), "a.py", "def f():\n    return 1\n");
    write(r.path(), "b.py", "def g():\n    return 1\n");
    let f = tempfile::tempdir().unwrap();
    let edits = f.path().join("e.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - strategy: search-replace\n    path: a.py\n    search: return 1\n    replace: return 2\n  - strategy: search-replace\n    path: b.py\n    search: return 1\n    replace: return 3\n",
    )
    .unwrap();
    let out = nuvira()
        .env("PATH", "/nonexistent")
        .args(["apply", "--dry-run", "--repo"])
        .arg(r.path())
        .arg(&edits)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert_eq!(all.matches("python3 was not found").count(), 1, "{all}");
}
