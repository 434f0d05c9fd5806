//! `nuvira report`: a report from a stored event file, in every format, with exit codes.

use assert_cmd::Command;
use std::path::Path;

/// Writes a run's events as JSONL, the way `nuvira run --events` stores them.
fn events_file(dir: &Path, events: &[nuvira_api::Event]) -> std::path::PathBuf {
    let path = dir.join("events.jsonl");
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn nuvira() -> Command {
    let mut c = Command::cargo_bin("nuvira").unwrap();
    c.env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    c
}

#[test]
fn report_prints_a_text_report_of_a_stored_run() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::failing_run());
    let out = nuvira().arg("report").arg(&events).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("run run-7f3a failed: 2 of 6 step(s) succeeded, 2 failed, 2 skipped"),
        "{text}"
    );
    assert!(text.contains("src/config.rs:42 [test] test failed: config::tests::loads_defaults"));
}

#[test]
fn report_renders_every_format_from_the_events_alone() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::failing_run());
    let expected = nuvira_report::read_jsonl_file(&events).unwrap();
    for format in ["text", "json", "markdown", "sarif", "junit", "html"] {
        let out = nuvira()
            .args(["report", "--format", format])
            .arg(&events)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{format}");
        let f: nuvira_report::Format = format.parse().unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            nuvira_report::render(&expected, f),
            "{format}"
        );
    }
    let out = nuvira()
        .args(["report", "--format", "github"])
        .arg(&events)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("::error file=src/config.rs,line=42,"),
        "{text}"
    );
}

#[test]
fn report_writes_to_the_output_file_and_nothing_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::passing_run());
    let target = dir.path().join("report.sarif");
    let out = nuvira()
        .args(["report", "--format", "sarif", "--output"])
        .arg(&target)
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let sarif: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
}

#[test]
fn a_malformed_line_exits_2_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::passing_run());
    let mut text = std::fs::read_to_string(&events).unwrap();
    let n = text.lines().count();
    text.push_str("not json\n");
    std::fs::write(&events, text).unwrap();
    let out = nuvira().arg("report").arg(&events).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(&events.display().to_string()), "{err}");
    assert!(err.contains(&format!("line {}", n + 1)), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_unreadable_file_or_unknown_format_exits_2() {
    let out = nuvira()
        .args(["report", "/nonexistent/events.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/events.jsonl"));
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::passing_run());
    let out = nuvira()
        .args(["report", "--format", "pdf"])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn inside_github_actions_it_annotates_and_appends_the_job_summary() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::failing_run());
    let summary = dir.path().join("step_summary.md");
    std::fs::write(&summary, "# earlier step output\n").unwrap();
    let out = nuvira()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .arg("report")
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("::stop-commands::"), "{text}");
    assert!(text.contains("::error file=src/lib.rs,line=9,col=17,endLine=9,endColumn=30,"));
    assert_eq!(
        text.lines().filter(|l| l.starts_with("::notice")).count(),
        1
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.starts_with("# earlier step output\n"));
    assert!(md.contains("## ❌ Nuvira run `run-7f3a` failed"), "{md}");
}

#[test]
fn events_of_a_newer_nuvira_are_skipped_with_a_warning_and_listed_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let events = events_file(dir.path(), &nuvira_report::sample::failing_run());
    let mut text = std::fs::read_to_string(&events).unwrap();
    text.push_str(
        "{\"seq\":100,\"ts\":1,\"run_id\":\"run-7f3a\",\"type\":\"cache:hit\",\"key\":\"k\"}\n",
    );
    std::fs::write(&events, text).unwrap();

    let out = nuvira().arg("report").arg(&events).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("cache:hit"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("run run-7f3a failed"), "{stdout}");

    let out = nuvira()
        .args(["report", "--format", "json"])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["unknown_event_types"],
        serde_json::json!(["cache:hit"])
    );
}

#[test]
fn an_empty_event_file_exits_2_and_says_what_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty.jsonl", ""), ("blank.jsonl", "\n\n  \n")] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = nuvira().arg("report").arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("holds no events") && stderr.contains(name),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}
