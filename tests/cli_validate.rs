//! `nuvira validate` and `nuvira graph` end to end.

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;

fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plans")
        .join(name)
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_example_plans_are_valid_in_all_three_formats() {
    for f in [
        "pipeline.yaml",
        "pipeline.json",
        "pipeline.toml",
        "fan-out.yaml",
    ] {
        let out = nuvira().arg("validate").arg(example(f)).assert().code(0);
        let stdout = String::from_utf8_lossy(&out.get_output().stdout).to_string();
        assert!(stdout.contains("valid, 5 step(s)"), "{f}: {stdout}");
    }
}

#[test]
fn an_invalid_plan_lists_every_problem_one_line_each_and_exits_2() {
    let out = nuvira()
        .arg("validate")
        .arg(example("invalid.yaml"))
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    let lines: Vec<&str> = stderr.lines().collect();
    for kind in [
        "duplicate-id",
        "unknown-module",
        "invalid-config",
        "dangling",
        "cycle",
        "orphan",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("error[{kind}]: "))),
            "{kind} missing:\n{stderr}"
        );
    }
    assert!(lines.iter().all(|l| l.starts_with("error[")), "{stderr}");
    assert!(
        stderr.contains("invalid.yaml:7: step `edit` depends on `inspekt`"),
        "{stderr}"
    );
}

#[test]
fn json_output_has_the_documented_shape() {
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(example("invalid.yaml"))
        .assert()
        .code(2);
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["steps"], 7);
    let errors = v["errors"].as_array().unwrap();
    let find = |kind: &str| {
        errors
            .iter()
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind}"))
    };
    assert_eq!(
        find("dangling")["steps"],
        serde_json::json!(["edit", "inspekt"])
    );
    assert_eq!(find("cycle")["steps"], serde_json::json!(["a", "b", "a"]));
    assert!(
        find("cycle")["message"]
            .as_str()
            .unwrap()
            .contains("a -> b -> a")
    );

    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(example("pipeline.toml"))
        .assert()
        .code(0);
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"valid": true, "steps": 5, "errors": []})
    );
}

#[test]
fn parse_errors_name_file_line_and_column_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(&dir, "bad.yaml", "steps:\n  - id: a\n    module: [x\n");
    let out = nuvira().arg("validate").arg(&bad).assert().code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(stderr.starts_with("error[parse]: "), "{stderr}");
    assert!(stderr.contains("bad.yaml:3:"), "{stderr}");
    let bad_json = write(
        &dir,
        "bad.json",
        "{\"steps\": [\n  {\"id\": \"a\" \"module\": \"x\"}\n]}",
    );
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(&bad_json)
        .assert()
        .code(2);
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["errors"][0]["kind"], "parse");
    assert_eq!(v["errors"][0]["line"], 2);
    assert_eq!(v["steps"], 0);
}

#[test]
fn unreadable_and_unsupported_files_exit_2_with_a_clear_message() {
    let out = nuvira()
        .args(["validate", "/nonexistent/plan.yaml"])
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        stderr.contains("/nonexistent/plan.yaml") && stderr.contains("no such file"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let txt = write(&dir, "plan.txt", "steps: []");
    let out = nuvira().arg("validate").arg(&txt).assert().code(2);
    assert!(String::from_utf8_lossy(&out.get_output().stderr).contains(".yaml"));
    // Never a Rust debug dump or a panic.
    assert!(!String::from_utf8_lossy(&out.get_output().stderr).contains("panicked"));
}

#[test]
fn graph_renders_dot_mermaid_and_json_with_dependency_edges() {
    let plan = example("fan-out.yaml");
    let dot = nuvira().args(["graph"]).arg(&plan).assert().code(0);
    let dot = String::from_utf8_lossy(&dot.get_output().stdout).to_string();
    assert!(dot.starts_with("digraph plan {"), "{dot}");
    assert!(dot.contains("\"fix\" -> \"clippy\";"), "{dot}");
    let mm = nuvira()
        .args(["graph", "--format", "mermaid"])
        .arg(&plan)
        .assert()
        .code(0);
    let mm = String::from_utf8_lossy(&mm.get_output().stdout).to_string();
    assert!(mm.starts_with("flowchart LR"));
    assert_eq!(mm.matches("-->").count(), 5, "{mm}");
    let js = nuvira()
        .args(["graph", "--format", "json"])
        .arg(&plan)
        .assert()
        .code(0);
    let v: Value = serde_json::from_slice(&js.get_output().stdout).unwrap();
    assert_eq!(v["edges"].as_array().unwrap().len(), 5);
    assert_eq!(v["order"][0], "inspect");
    assert_eq!(v["outputs"], serde_json::json!(["report"]));
    nuvira()
        .args(["graph"])
        .arg(example("invalid.yaml"))
        .assert()
        .code(2);
}

#[test]
fn bad_arguments_exit_2() {
    nuvira().args(["validate"]).assert().code(2);
    nuvira()
        .args(["graph", "x.yaml", "--format", "png"])
        .assert()
        .code(2);
    nuvira().args(["frobnicate"]).assert().code(2);
}
