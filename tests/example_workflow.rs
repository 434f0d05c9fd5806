//! `examples/github-workflow.yml` works as written (issue 13, point 8): its `run:` steps are
//! read from the YAML and run with bash the way the Actions runner runs them (`bash -e -o
//! pipefail`, the job's and the step's `env`, `${{ ... }}` expressions empty), with a fake
//! `GITHUB_*` environment (`GITHUB_ACTIONS`, `GITHUB_WORKSPACE`, `GITHUB_STEP_SUMMARY`,
//! `GITHUB_OUTPUT`, `GITHUB_PATH`, `GITHUB_ENV` as files in a temporary folder), in a checkout
//! made here. The `uses:` steps are GitHub's own actions and are not run.
//!
//! The install step runs as written, on a **cache hit**: the built binary of this test run is
//! placed where `actions/cache` restores it (`~/.nuvira/bin/nuvira`), so the step skips
//! `cargo install --locked --path "$NUVIRA_SRC"` (a full release build, minutes long) and only
//! puts the folder on `GITHUB_PATH`, which the next step's `PATH` gets, as on the runner.
//!
//! What a runner would read is then checked: the commands on both streams (no command from
//! the repository's text, at most 10 error and 10 warning annotations in the step, as GitHub
//! shows), the job summary (under GitHub's 1 MiB), and the files the later steps upload.

use crate::cli_ci_trust::runner_commands;
use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn workflow() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/github-workflow.yml");
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A mapping's string values with `${{ ... }}` expressions replaced by "" (an unset variable
/// or secret, as in a fork's pull request).
fn env_of(v: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = v.get("env").and_then(Value::as_mapping) {
        for (k, v) in m {
            let k = k.as_str().unwrap().to_owned();
            let v = v.as_str().unwrap_or_default();
            let v = if v.contains("${{") {
                String::new()
            } else {
                v.to_owned()
            };
            out.insert(k, v);
        }
    }
    out
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A checkout with a plan: one edit adds an AWS-key-shaped constant (a security warning), one
/// batch of 12 entries is rejected (12 errors, more than GitHub shows), one file holds text
/// that looks like workflow commands.
fn checkout(root: &Path) -> (String, String) {
    let aws = format!("AKIA{}", "Q4W8".repeat(4));
    let gh = format!("ghp_{}", "k3Vx".repeat(9));
    std::fs::create_dir_all(root.join(".nuvira")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/keys.rs"), "// keys\n").unwrap();
    std::fs::write(
        root.join("src/lib.rs"),
        "pub fn f() {}\n::error ::FORGED1\n##[warning]FORGED2\n",
    )
    .unwrap();
    let bad: String = (0..12)
        .map(|i| {
            format!(
                "        - {{ path: src/lib.rs, strategy: search-replace, search: \"::error ::FORGED1 {i}\", replace: \"x\" }}\n"
            )
        })
        .collect();
    std::fs::write(
        root.join(".nuvira/plan.yaml"),
        format!(
            r#"goal: "the workflow example"
outputs: [add, bad]
steps:
  - id: add
    module: edit
    config:
      edits:
        - {{ path: src/keys.rs, strategy: search-replace, search: "// keys", replace: "pub const K: &str = \"{aws}\"; pub const T: &str = \"{gh}\";" }}
  - id: bad
    module: edit
    config:
      edits:
{bad}"#
        ),
    )
    .unwrap();
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "init"]);
    (aws, gh)
}

#[test]
fn the_example_workflow_runs_as_written_and_the_runner_reads_only_nuvira_s_commands() {
    let wf = workflow();
    let job = &wf["jobs"]["nuvira"];
    let steps = job["steps"].as_sequence().unwrap();
    let runs: Vec<&Value> = steps.iter().filter(|s| s.get("run").is_some()).collect();
    let names: Vec<&str> = runs.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Install nuvira", "Run the plan"]);
    // Nuvira is not on crates.io: the example must not install it from there.
    let install = runs[0]["run"].as_str().unwrap();
    assert!(
        install.contains("cargo install --locked --path \"$NUVIRA_SRC\""),
        "{install}"
    );
    assert!(!wf_text().contains("cargo install --locked nuvira\n"));

    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let home = dir.path().join("home");
    let gh = dir.path().join("gh");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(home.join(".nuvira/bin")).unwrap();
    std::fs::create_dir_all(&gh).unwrap();
    let (aws, token) = checkout(&work);
    // The cache hit: the binary where `actions/cache` restores `~/.nuvira`.
    std::fs::copy(
        assert_cmd::cargo::cargo_bin("nuvira"),
        home.join(".nuvira/bin/nuvira"),
    )
    .unwrap();
    let path_file = gh.join("path");
    std::fs::write(&path_file, "").unwrap();
    let base_path = std::env::var("PATH").unwrap_or_default();
    let mut results = Vec::new();
    for (i, step) in runs.iter().enumerate() {
        // A fresh summary file per step, as the runner gives each step.
        let summary = gh.join(format!("summary-{i}.md"));
        std::fs::write(&summary, "").unwrap();
        let extra: Vec<String> = std::fs::read_to_string(&path_file)
            .unwrap()
            .lines()
            .rev()
            .map(str::to_owned)
            .collect();
        let path = extra
            .into_iter()
            .chain(std::iter::once(base_path.clone()))
            .collect::<Vec<_>>()
            .join(":");
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
            .arg(step["run"].as_str().unwrap())
            .current_dir(&work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("CI", "true")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &work)
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_OUTPUT", gh.join("output"))
            .env("GITHUB_ENV", gh.join("env"))
            .env("GITHUB_PATH", &path_file)
            .env("RUNNER_TEMP", dir.path());
        if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
            cmd.env("CARGO_TARGET_DIR", t);
        }
        for (k, v) in env_of(job).into_iter().chain(env_of(step)) {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        results.push((step["name"].as_str().unwrap().to_owned(), out, summary));
    }

    let (_, install_out, _) = &results[0];
    assert!(
        install_out.status.success(),
        "{}",
        String::from_utf8_lossy(&install_out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&path_file).unwrap().trim(),
        home.join(".nuvira/bin").display().to_string()
    );

    let (_, run, summary) = &results[1];
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    // The rejected batch fails the work: exit code 1, so the step fails, as it should.
    assert_eq!(run.status.code(), Some(1), "{stdout}\n---\n{stderr}");
    let (mut errors, mut warnings) = (0, 0);
    for (name, stream) in [("stdout", &stdout), ("stderr", &stderr)] {
        for c in runner_commands(stream) {
            assert!(!c.old_syntax, "{name}: `##[` command: {}", c.line);
            assert!(
                [
                    "error",
                    "warning",
                    "notice",
                    "group",
                    "endgroup",
                    "stop-commands"
                ]
                .contains(&c.name.as_str()),
                "{name}: command `{}` from the repository: {}",
                c.name,
                c.line
            );
            match c.name.as_str() {
                "error" | "warning" | "notice" => {
                    assert!(c.props.contains("title="), "{name}: forged: {}", c.line);
                }
                "stop-commands" => assert!(!c.line.contains("FORGED"), "{}", c.line),
                _ => {}
            }
            errors += usize::from(c.name == "error");
            warnings += usize::from(c.name == "warning");
        }
        assert!(!stream.contains(&aws), "{name} shows the AWS key");
        assert!(!stream.contains(&token), "{name} shows the GitHub token");
    }
    // 12 rejected entries: GitHub shows 10 errors per step, so Nuvira emits 10 and says so.
    assert_eq!(errors, 10, "{stdout}");
    assert!((1..=10).contains(&warnings), "{stdout}");
    assert!(stdout.contains("not annotated"), "{stdout}");
    assert!(stdout.contains("::error file=src/lib.rs,line="), "{stdout}");

    let md = std::fs::read_to_string(summary).unwrap();
    assert!(
        !md.is_empty() && md.len() <= 1024 * 1024,
        "{} bytes",
        md.len()
    );
    assert!(md.contains("Nuvira run"), "{md}");
    assert!(!md.contains(&aws) && !md.contains(&token));
    assert!(md.contains("[redacted]"), "{md}");
    // What the later steps upload is there.
    for f in [
        "nuvira.sarif",
        "nuvira-junit.xml",
        "nuvira-report.html",
        "nuvira-events.jsonl",
    ] {
        let text = std::fs::read_to_string(work.join(f)).unwrap();
        assert!(!text.is_empty(), "{f}");
        if f != "nuvira-events.jsonl" {
            assert!(!text.contains(&aws), "{f} shows the AWS key");
            assert!(!text.contains(&token), "{f} shows the GitHub token");
        }
    }
    let sarif: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("nuvira.sarif")).unwrap()).unwrap();
    // The upload's `category: nuvira` decides: no automationDetails in the file.
    assert!(sarif["runs"][0].get("automationDetails").is_none());
}

fn wf_text() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/github-workflow.yml"),
    )
    .unwrap()
}
