//! `nuvira run` end to end on copies of the quickstart example: a passing run, a run whose
//! tests fail (exit 1, failures in every format), an invalid plan (exit 2), a dry run that
//! changes nothing, reports rebuilt from the event file, and Ctrl-C rolling edits back.

use assert_cmd::Command;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

fn quickstart() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    nuvira::scratch::copy_tree(&src, &repo).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    (dir, repo)
}

fn plan_with_edit(dir: &Path, search: &str, replace: &str) -> PathBuf {
    let plan = format!(
        r#"goal: "Fix the off-by-one error in average()"
steps:
  - id: inspect
    module: inspect
    config: {{ keywords: [average] }}
  - id: fix
    module: edit
    depends_on: [inspect]
    config:
      edits:
        - {{ path: src/lib.rs, strategy: search-replace, search: "{search}", replace: "{replace}" }}
  - id: test
    module: test
    depends_on: [fix]
    timeout: 5m
    config: {{ sandbox: local }}
  - id: verify
    module: verify
    depends_on: [test]
  - id: report
    module: report
    depends_on: [verify]
"#
    );
    let path = dir.join("plan.yaml");
    std::fs::write(&path, plan).unwrap();
    path
}

fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stdout).to_string()
}

fn stderr(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stderr).to_string()
}

#[test]
fn the_quickstart_plan_fixes_the_bug_and_passes() {
    let (dir, repo) = quickstart();
    let events = dir.path().join("events.jsonl");
    let html = dir.path().join("out/report.html");
    let out = nuvira()
        .args(["run", "--format", "json", "--sandbox", "local", "--quiet"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart/plan.yaml"))
        .arg("--repo")
        .arg(&repo)
        .arg("--events")
        .arg(&events)
        .arg("--report")
        .arg(format!("html={}", html.display()))
        .assert()
        .code(0);
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["status"], "succeeded", "{report:#}");
    let lib = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    assert!(lib.contains("Some(sum / xs.len() as f64)"));
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    // The same report comes back out of the event file alone.
    let again = nuvira()
        .args(["report", "--format", "json"])
        .arg(&events)
        .assert()
        .code(0);
    let rebuilt: Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert_eq!(rebuilt["status"], report["status"]);
    assert_eq!(rebuilt["steps"], report["steps"]);
}

#[test]
fn a_run_whose_tests_fail_exits_1_and_every_format_names_the_failure() {
    let (dir, repo) = quickstart();
    // An edit that applies but does not fix the bug.
    let plan = plan_with_edit(
        dir.path(),
        "let sum: f64",
        "let sum: f64 = 0.0; let _s: f64",
    );
    let events = dir.path().join("events.jsonl");
    let out = nuvira()
        .args(["run", "--quiet"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .arg("--events")
        .arg(&events)
        .assert()
        .code(1);
    let text = stdout(&out);
    assert!(text.contains("average_of_three_numbers"), "{text}");
    // The failed run's edit stays, and the user is told how to undo it.
    let err = stderr(&out);
    assert!(
        err.contains("stay as they are: undo them with `nuvira rollback --repo"),
        "{err}"
    );
    for format in [
        "json", "markdown", "github", "sarif", "junit", "html", "text",
    ] {
        let out = nuvira()
            .args(["report", "--format", format])
            .arg(&events)
            .assert()
            .code(0);
        let body = stdout(&out);
        assert!(
            body.contains("average_of_three_numbers"),
            "{format}: {body}"
        );
        assert!(
            body.contains("src/lib.rs"),
            "{format} lacks the failure's file"
        );
    }
    let gh = stdout(
        &nuvira()
            .args(["report", "--format", "github"])
            .arg(&events)
            .assert()
            .code(0),
    );
    assert!(
        gh.lines()
            .any(|l| l.starts_with("::error file=src/lib.rs,line=")),
        "{gh}"
    );
}

#[test]
fn an_invalid_plan_exits_2_before_anything_runs() {
    let (dir, repo) = quickstart();
    let plan = dir.path().join("bad.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - id: a\n    module: edit\n    depends_on: [ghost]\n",
    )
    .unwrap();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let out = nuvira()
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(
        err.contains("error[dangling]") && err.contains("bad.yaml:2"),
        "{err}"
    );
    // Problems that are not about one step (a cycle, a missing output) are located too.
    let cyclic = dir.path().join("cyclic.yaml");
    std::fs::write(
        &cyclic,
        "goal: g\nsteps:\n  - id: a\n    module: inspect\n    depends_on: [b]\n  - id: b\n    module: inspect\n    depends_on: [a]\noutputs: [b, nope]\n",
    )
    .unwrap();
    let out = nuvira()
        .arg("run")
        .arg(&cyclic)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(
        err.contains("error[cycle]: ") && err.contains("cyclic.yaml:3:"),
        "{err}"
    );
    assert!(
        err.contains("error[unknown-output]: ") && err.contains("cyclic.yaml:9:"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    assert!(!repo.join(".nuvira").exists());
    nuvira()
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(dir.path().join("missing"))
        .assert()
        .code(2);
    nuvira()
        .args(["run", "--report", "pdf=x.pdf"])
        .arg(&plan)
        .assert()
        .code(2);
}

#[test]
fn a_dry_run_changes_nothing() {
    let (dir, repo) = quickstart();
    let plan = plan_with_edit(
        dir.path(),
        "Some(sum / (xs.len() - 1) as f64)",
        "Some(sum / xs.len() as f64)",
    );
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let out = nuvira()
        .args(["run", "--dry-run", "--format", "json", "--quiet"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert();
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["dry_run"], true, "{report:#}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    assert!(
        stdout(&out).contains("xs.len() as f64"),
        "the preview shows the diff"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_run_and_rolls_its_edits_back() {
    let (dir, repo) = quickstart();
    let plan = dir.path().join("slow.yaml");
    std::fs::write(
        &plan,
        r#"steps:
  - id: fix
    module: edit
    config:
      edits:
        - { path: src/lib.rs, strategy: search-replace, search: "(xs.len() - 1)", replace: "xs.len()" }
  - id: wait
    module: execute
    depends_on: [fix]
    config: { command: "sleep 60", sandbox: local }
"#,
    )
    .unwrap();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (by reading its progress, not by sleeping) until the edit is written and the slow
    // step runs.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("started  wait") {
            break;
        }
    }
    assert!(seen.iter().any(|l| l.contains("ok       fix")), "{seen:?}");
    assert_ne!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    let pid = i32::try_from(child.id()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("rolled back 1 file(s)")),
        "{rest:?}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
}

#[test]
fn ctrl_c_keeps_a_file_the_user_changed_while_the_run_went_on() {
    let (dir, repo) = quickstart();
    let plan = dir.path().join("slow.yaml");
    std::fs::write(
        &plan,
        r#"steps:
  - id: fix
    module: edit
    config:
      edits:
        - { path: src/lib.rs, strategy: search-replace, search: "(xs.len() - 1)", replace: "xs.len()" }
  - id: wait
    module: execute
    depends_on: [fix]
    config: { command: "sleep 60", sandbox: local }
"#,
    )
    .unwrap();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("started  wait") {
            break;
        }
    }
    // The user saves their own change on top of the run's edit.
    let lib = repo.join("src/lib.rs");
    let mine = std::fs::read_to_string(&lib).unwrap() + "// my own note\n";
    std::fs::write(&lib, &mine).unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(child.wait().unwrap().code(), Some(130), "{rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("kept 1 file(s) changed after the run wrote them: src/lib.rs")),
        "{rest:?}"
    );
    assert_eq!(std::fs::read_to_string(&lib).unwrap(), mine);
}

#[test]
fn run_with_docker_and_no_engine_exits_3_before_writing_any_edit() {
    // Regression: the edit was written, then the test step found no engine (exit 3).
    let (dir, repo) = quickstart();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let plan = plan_with_edit(dir.path(), "/ (len - 1)", "/ len");
    let out = nuvira()
        .args(["run", "--quiet", "--sandbox", "docker", "--format", "json"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .env("DOCKER_HOST", "unix:///tmp/nuvira-no-such-engine.sock")
        .assert()
        .code(3);
    let err = stderr(&out);
    assert!(
        err.contains("no Docker engine answers") && err.contains("step(s) `test`"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    assert!(
        !repo.join(".nuvira/journal").exists() || {
            std::fs::read_dir(repo.join(".nuvira/journal"))
                .unwrap()
                .count()
                == 0
        }
    );
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(json["error"]["kind"], "environment");
}

#[test]
fn report_targets_that_cannot_be_written_exit_2_before_the_run() {
    // Regression: `--report html=DIR` failed after the run with a raw `(os error 21)`.
    let (dir, repo) = quickstart();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let plan = plan_with_edit(dir.path(), "/ (len - 1)", "/ len");
    let folder = dir.path().join("a-folder");
    std::fs::create_dir(&folder).unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for (target, why) in [
        (folder.clone(), "it is a folder"),
        (file.join("sub/report.html"), "is a file"),
    ] {
        let out = nuvira()
            .args(["run", "--quiet", "--sandbox", "local"])
            .arg(&plan)
            .arg("--repo")
            .arg(&repo)
            .arg("--report")
            .arg(format!("html={}", target.display()))
            .assert()
            .code(2);
        let err = stderr(&out);
        assert!(
            err.contains(&target.display().to_string()) && err.contains(why),
            "{err}"
        );
        assert!(!err.contains("os error"), "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
}

#[test]
fn a_goal_without_a_model_exits_3_and_says_what_to_set_before_running() {
    // Regression: the inspect step ran, then the edit step failed (exit 1).
    let (dir, repo) = quickstart();
    let events = dir.path().join("events.jsonl");
    let out = nuvira()
        .args(["run", "--quiet", "--goal", "fix add", "--format", "json"])
        .arg("--repo")
        .arg(&repo)
        .arg("--events")
        .arg(&events)
        .env_remove("NUVIRA_MODEL")
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .assert()
        .code(3);
    let err = stderr(&out);
    assert!(
        err.contains("no model is configured") && err.contains("NUVIRA_MODEL="),
        "{err}"
    );
    assert!(!events.exists(), "nothing should have run");
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["error"]["kind"], "environment");
}

#[test]
fn max_parallel_takes_a_number_cpus_or_unbounded_and_names_a_bad_value() {
    let (dir, repo) = quickstart();
    let plan = plan_with_edit(
        dir.path(),
        "Some(sum / (xs.len() - 1) as f64)",
        "Some(sum / xs.len() as f64)",
    );
    for p in ["unbounded", "cpus", "3"] {
        let out = nuvira()
            .args([
                "run",
                "--dry-run",
                "--format",
                "json",
                "--quiet",
                "--max-parallel",
                p,
            ])
            .arg(&plan)
            .arg("--repo")
            .arg(&repo)
            .assert()
            .success();
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["dry_run"], true, "{p}: {report:#}");
    }
    let out = nuvira()
        .args(["run", "--dry-run", "--max-parallel", "0"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    let err = stderr(&out);
    assert!(
        err.contains("`0` is not a parallelism") && err.contains("unbounded"),
        "{err}"
    );
}
