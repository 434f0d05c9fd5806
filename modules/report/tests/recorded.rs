//! Reports of event files recorded from real `nuvira run`s (see `fixtures/README.md`).

use nuvira_api::StepStatus;
use nuvira_report::{ExecutionReport, Format, read_jsonl_file, render};
use std::path::Path;

fn recorded(name: &str) -> ExecutionReport {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    read_jsonl_file(&path).unwrap()
}

fn step<'r>(r: &'r ExecutionReport, id: &str) -> &'r nuvira_report::StepRecord {
    r.steps.iter().find(|s| s.id == id).unwrap()
}

#[test]
fn a_cancelled_run_does_not_count_the_changes_it_rolled_back() {
    let r = recorded("cancelled_run.jsonl");
    // The `edit:rolled-back` event has no step and comes after `run:completed`.
    assert_eq!(step(&r, "fix").rolled_back, ["src/lib.rs"]);
    let c = &r.counts;
    assert_eq!((c.files_changed, c.lines_added, c.lines_removed), (0, 0, 0));
    assert!(
        r.summary
            .ends_with("; 1 file(s) changed, then rolled back (nothing of it is left)"),
        "{}",
        r.summary
    );
    assert!(!r.summary.contains("(+1 -1)"), "{}", r.summary);
    // Every format that shows file changes says they were undone; the JSON lists them.
    let text = render(&r, Format::Text);
    assert!(
        text.contains("file changes (0 file(s), +0 -0; 1 file(s) rolled back, not counted):"),
        "{text}"
    );
    assert!(text.contains("[fix] rolled back"), "{text}");
    let md = render(&r, Format::Markdown);
    assert!(md.contains("1 file(s) rolled back, not counted"), "{md}");
    assert!(md.contains("[fix] <b>rolled back</b>"), "{md}");
    let html = render(&r, Format::Html);
    assert!(html.contains("· <b>rolled back</b>"), "{html}");
    let json: serde_json::Value = serde_json::from_str(&render(&r, Format::Json)).unwrap();
    assert_eq!(json["counts"]["files_changed"], 0);
    assert_eq!(json["steps"][0]["rolled_back"][0], "src/lib.rs");
}

#[test]
fn a_step_stopped_by_the_cancellation_shows_as_cancelled_with_its_real_duration() {
    let r = recorded("cancelled_run.jsonl");
    let wait = step(&r, "wait");
    assert_eq!(wait.status, StepStatus::Failed);
    assert_eq!(wait.category, None, "not `unknown`");
    // The scheduler reports 0 ms; the step ran from `step:started` to the cancellation (~2 s).
    let d = wait.duration_ms.unwrap();
    assert!((1_900..=2_200).contains(&d), "{d}");
    let finding = &wait.findings[0];
    assert_eq!(finding.rule_id, "nuvira/step-failure/cancelled");
    assert_eq!(finding.severity, nuvira_api::Severity::Warning);
    let text = render(&r, Format::Text);
    assert!(text.contains("  wait    cancelled      2.0s"), "{text}");
    assert!(!text.contains("(unknown)"), "{text}");
    assert!(render(&r, Format::Markdown).contains("⏹️ cancelled"));
    assert!(render(&r, Format::Html).contains("<g class=\"node cancelled\" data-step=\"wait\">"));
    // The step skipped by the cancellation is not said to be skipped for a failed dependency,
    // nor the cancelled step to have failed.
    assert_eq!(
        r.follow_up,
        [
            "the run was cancelled (the run was cancelled): run it again to finish the remaining steps"
        ]
    );
}

#[test]
fn the_cancelled_category_of_current_runs_is_read_as_a_cancellation_too() {
    // The fixture predates `ErrorCategory::Cancelled`; today's scheduler says it directly.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cancelled_run.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let old = r#""category":"unknown","message":"cancelled while running""#;
    assert!(text.contains(old));
    let now = text.replace(
        old,
        r#""category":"cancelled","message":"cancelled while running""#,
    );
    let r = nuvira_report::read_jsonl(std::io::Cursor::new(now), Path::new("now.jsonl")).unwrap();
    let wait = step(&r, "wait");
    assert_eq!(wait.status, StepStatus::Failed);
    assert_eq!(wait.category, None);
    assert_eq!(wait.findings[0].rule_id, "nuvira/step-failure/cancelled");
    assert!(render(&r, Format::Text).contains("  wait    cancelled"));
}

#[test]
fn the_text_report_of_a_rejected_edit_names_each_reason_with_its_file() {
    let r = recorded("edit_rejected_run.jsonl");
    let text = render(&r, Format::Text);
    assert!(
        text.contains(
            "  error   src/config.rs [edit] edit rejected: edit 1 (search-replace): apply `search-replace`: the file does not exist; check the path"
        ),
        "{text}"
    );
    assert!(!text.contains("no location"), "{text}");
    let edit = step(&r, "edit");
    assert_eq!(edit.findings.len(), 1, "{:?}", edit.findings);
    assert_eq!(edit.findings[0].path.as_deref(), Some("src/config.rs"));
    // The other formats locate it too.
    let sarif = render(&r, Format::Sarif);
    assert!(sarif.contains("\"uri\": \"src/config.rs\""), "{sarif}");
    let gh = nuvira_report::github::render_with_token(&r, "t");
    assert!(gh.contains("::error file=src/config.rs,"), "{gh}");
}
