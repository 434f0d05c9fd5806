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
        serde_json::json!({"schema_version": 1, "valid": true, "steps": 5, "errors": []})
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

fn stderr_of(path: &std::path::Path) -> String {
    let out = nuvira().arg("validate").arg(path).assert().code(2);
    String::from_utf8_lossy(&out.get_output().stderr).to_string()
}

#[test]
fn step_lines_come_from_the_steps_list_not_from_ids_in_strings_or_configs() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        &dir,
        "cfg_id.yaml",
        "goal: \"step - id: r is the report\"\nsteps:\n  - id: a\n    module: inspect\n    config: { keywords: [x], id: r }\n  - id: lonely\n    module: inspect\n  - id: r\n    module: report\n    depends_on: [a, ghost]\n",
    );
    let stderr = stderr_of(&plan);
    assert!(
        stderr.contains("cfg_id.yaml:8: step `r` depends on `ghost`"),
        "{stderr}"
    );
    assert!(stderr.contains("cfg_id.yaml:6: step `lonely`"), "{stderr}");
    let flow = write(
        &dir,
        "flow.toml",
        "steps = [\n  { id = \"a\", module = \"inspect\" },\n  { module = \"report\", id = \"r\", depends_on = [\"a\", \"ghost\"] },\n]\n",
    );
    assert!(stderr_of(&flow).contains("flow.toml:3: step `r`"));
}

#[test]
fn invalid_ids_unknown_outputs_and_empty_plans_get_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        &dir,
        "ids.yaml",
        "outputs:\n  - r\n  - nope\nsteps:\n  - id: a\n    module: inspect\n  - id: b c\n    module: bogus\n    depends_on: [zz]\n  - id: r\n    module: report\n    depends_on: [a, \"b c\"]\n",
    );
    let stderr = stderr_of(&plan);
    for expected in [
        "error[invalid-id]: ",
        "error[unknown-module]: ",
        "error[dangling]: ",
    ] {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(expected))
            .unwrap_or_else(|| panic!("{expected}: {stderr}"));
        assert!(line.contains("ids.yaml:7: "), "{line}");
    }
    assert!(
        stderr.contains("error[unknown-output]: ")
            && stderr.contains("ids.yaml:3: `outputs` names `nope`"),
        "{stderr}"
    );
    let empty = write(&dir, "empty.yaml", "goal: g\nsteps: []\n");
    assert!(
        stderr_of(&empty).contains("error[empty-plan]: ")
            && stderr_of(&empty).contains("empty.yaml:2: "),
        "{}",
        stderr_of(&empty)
    );
}

#[test]
fn thousands_of_problems_each_get_the_line_of_their_own_step() {
    // Every lookup reads one index built once; this checks the lines, not the time.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("steps:\n");
    for i in 0..3000 {
        text.push_str(&format!("  - id: o{i}\n    module: inspect\n"));
    }
    text.push_str("  - id: r\n    module: report\n");
    let plan = write(&dir, "orphans.yaml", &text);
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(&plan)
        .assert()
        .code(2);
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 3000);
    for (i, e) in errors.iter().enumerate() {
        assert_eq!(e["steps"][0], format!("o{i}"));
        assert_eq!(e["line"], 2 + 2 * i, "{e}");
    }
}

#[test]
fn every_schema_error_is_its_own_parse_problem_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        &dir,
        "typos.yaml",
        "steps:\n  - id: a\n    module: inspect\n    depend_on: [x]\n  - id: r\n    module: report\n    dependson: [a]\n    timeout: 0s\n",
    );
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(&plan)
        .assert()
        .code(2);
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let errors = v["errors"].as_array().unwrap();
    let located: Vec<_> = errors
        .iter()
        .map(|e| (e["kind"].clone(), e["line"].clone(), e["column"].clone()))
        .collect();
    assert_eq!(
        located,
        vec![
            ("parse".into(), 4.into(), 5.into()),
            ("parse".into(), 7.into(), 5.into()),
            ("parse".into(), 8.into(), 5.into()),
        ],
        "{errors:?}"
    );
    assert!(errors[1]["message"].as_str().unwrap().contains("dependson"));
    assert!(errors[2]["message"].as_str().unwrap().contains("\"30s\""));
}

#[test]
fn bom_empty_and_missing_files_get_friendly_messages() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = write(
        &dir,
        "bom.yaml",
        "\u{feff}steps:\n  - id: a\n    module: report\n",
    );
    nuvira().arg("validate").arg(&yaml).assert().code(0);
    let json = write(
        &dir,
        "bom.json",
        "\u{feff}{\"steps\": [{\"id\": \"a\", \"module\": \"report\"}]}",
    );
    nuvira().arg("validate").arg(&json).assert().code(0);
    let empty = write(&dir, "empty.json", "\n  \n");
    let stderr = stderr_of(&empty);
    assert!(stderr.contains("empty.json: the file is empty"), "{stderr}");
    let stderr = stderr_of(&dir.path().join("missing.txt"));
    assert!(stderr.contains("no such file"), "{stderr}");
    let unicode = write(&dir, "u.json", "{\"goal\": \"ééé\" x}");
    assert!(
        stderr_of(&unicode).contains("u.json:1:16: "),
        "{}",
        stderr_of(&unicode)
    );
}

#[test]
fn invalid_config_says_the_expected_keys_once() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        &dir,
        "cfg.yaml",
        "goal: g\nsteps:\n  - id: look\n    module: inspect\n    config: { keyword: [x] }\n  - id: look2\n    module: inspect\n    config: { max_files: ten }\n  - id: check\n    module: verify\n    depends_on: [look, look2]\n    config: { check: [] }\n",
    );
    let out = nuvira().arg("validate").arg(&plan).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("invalid-config"))
        .collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    // Unknown keys: serde's own list, once.
    for line in [lines[0], lines[2]] {
        assert_eq!(line.matches("expected one of").count(), 1, "{line}");
        assert!(!line.contains("expected keys"), "{line}");
    }
    // A wrong type: the keys are named once, by us.
    assert_eq!(lines[1].matches("expected keys").count(), 1, "{}", lines[1]);
}

#[test]
fn validate_rejects_step_paths_that_leave_the_workspace() {
    // Regression: inspect `paths` and edit paths outside the repository were `valid`.
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "inspect",
            r#"config: { paths: ["../"] }"#,
            "paths[0]",
            "../",
        ),
        (
            "inspect",
            r#"config: { paths: [src, "/etc"] }"#,
            "paths[1]",
            "/etc",
        ),
        (
            "inspect",
            r#"config: { paths: [".git"] }"#,
            "paths[0]",
            ".git",
        ),
        (
            "edit",
            r#"config: { edits: [{ path: "../x", strategy: whole-file, content: "x" }] }"#,
            "edits[0].path",
            "../x",
        ),
        (
            "edit",
            r#"config: { edits: [{ path: a.txt, strategy: whole-file, content: "" }, { path: /etc/passwd, strategy: whole-file, content: "x" }] }"#,
            "edits[1].path",
            "/etc/passwd",
        ),
        (
            "edit",
            r#"config: { edits: [{ path: a.txt, strategy: rename-file, to: .git/hooks/pre-commit }] }"#,
            "edits[0].to",
            ".git/hooks/pre-commit",
        ),
    ];
    for (module, config, index, path) in cases {
        let plan = write(
            &dir,
            "plan.yaml",
            &format!(
                "steps:\n  - id: s1\n    module: {module}\n    {config}\n  - id: report\n    module: report\n    depends_on: [s1]\n"
            ),
        );
        let out = nuvira().arg("validate").arg(&plan).assert().code(2);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(
            stderr.starts_with("error[invalid-config]: ")
                && stderr.contains("step `s1`")
                && stderr.contains(index)
                && stderr.contains(&format!("`{path}`"))
                && stderr.contains("relative to the repository root"),
            "{module} {path}: {stderr}"
        );
    }
}
