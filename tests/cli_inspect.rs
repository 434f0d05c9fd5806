//! `nuvira inspect` end to end: the real binary on a repository built in a temp folder.

use assert_cmd::Command;
use std::path::Path;

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(
        r,
        "Cargo.toml",
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n",
    );
    write(
        r,
        "src/config.rs",
        "pub struct Config;\n\nimpl Config {\n    pub fn reload(&self) {}\n}\n\npub fn parse_config(t: &str) -> Config {\n    let _ = t;\n    Config\n}\n",
    );
    write(
        r,
        "src/main.rs",
        "mod config;\nfn main() {\n    config::parse_config(\"\");\n}\n",
    );
    write(r, "src/unrelated.rs", "pub fn other() {}\n");
    dir
}

fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

#[test]
fn text_output_ranks_files_with_scores_symbols_and_stats() {
    let dir = repo();
    let out = nuvira()
        .args(["inspect", "--goal", "rename parse_config", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "relevant files (most relevant first):");
    assert!(
        lines[1].starts_with("  1. src/config.rs") && lines[1].contains("score"),
        "{text}"
    );
    // The symbol the goal names comes first, then the others in source order.
    assert!(
        lines[2]
            .starts_with("       symbols: function parse_config (line 7), struct Config (line 1)")
            && lines[2].contains("method Config::reload"),
        "{text}"
    );
    assert!(!text.contains("unrelated.rs"), "{text}");
    assert!(
        text.contains("4 files walked, 4 inspected, 0 unreadable"),
        "{text}"
    );
}

#[test]
fn json_output_is_the_inspection_result() {
    let dir = repo();
    let out = nuvira()
        .args([
            "inspect",
            "--goal",
            "parse_config",
            "--max-files",
            "1",
            "--format",
            "json",
            "--repo",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["relevant_paths"], serde_json::json!(["src/config.rs"]));
    assert_eq!(v["artifacts"].as_array().unwrap().len(), 1);
    assert_eq!(v["artifacts"][0]["symbols"][0]["name"], "Config");
    assert_eq!(v["stats"]["total_files"], 4);
    assert!(v["file_tree"].as_str().unwrap().contains("config.rs"));
}

#[test]
fn a_missing_repository_or_bad_arguments_exit_2_with_a_clear_message() {
    let dir = repo();
    let out = nuvira()
        .args(["inspect", "--goal", "x", "--repo"])
        .arg(dir.path().join("nope"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope") && err.contains("--repo"), "{err}");

    let out = nuvira().args(["inspect", "--repo", "."]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "missing --goal");
    let out = nuvira()
        .args(["inspect", "--goal", "x", "--max-files", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "zero max files");
    let out = nuvira()
        .args(["inspect", "--goal", "x", "--format", "yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "unknown format");
    let out = nuvira().args(["inspect", "--goal", "  "]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "empty goal");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--goal"));
}

#[test]
fn a_goal_of_only_common_verbs_still_finds_the_file_that_defines_them() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    );
    write(
        dir.path(),
        "src/other.rs",
        "pub fn mul(a: i32, b: i32) -> i32 {\n    a * b\n}\n",
    );
    let out = nuvira()
        .args(["inspect", "--goal", "add", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("1. src/lib.rs"), "{stdout}");
    assert!(!stdout.contains("src/other.rs"), "{stdout}");
}
