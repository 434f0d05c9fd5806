use super::{jsonl, live};
use nuvira_api::report::FindingKind;
use nuvira_api::{Event, EventKind, RunStatus, Severity, StepStatus, TestFailure};
use nuvira_report::{ReportBuilder, ReportError, read_jsonl, read_jsonl_file, sample};
use std::io::Cursor;
use std::path::Path;

#[test]
fn a_stored_jsonl_file_gives_the_same_report_as_the_live_run() {
    for events in [sample::failing_run(), sample::passing_run()] {
        let from_live = live(&events);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, jsonl(&events)).unwrap();
        let from_file = read_jsonl_file(&path).unwrap();
        assert_eq!(from_live, from_file);
        // And byte for byte in every format but the randomly-tokened github one.
        for f in nuvira_report::Format::ALL {
            if f != nuvira_report::Format::Github {
                assert_eq!(
                    nuvira_report::render(&from_live, f),
                    nuvira_report::render(&from_file, f),
                    "{f}"
                );
            }
        }
    }
}

#[test]
fn the_failing_run_is_distilled_into_steps_counts_and_findings() {
    let r = live(&sample::failing_run());
    assert_eq!(r.run_id, "run-7f3a");
    assert_eq!(r.goal, "Rename parse_config to load_config");
    assert_eq!(r.status, Some(RunStatus::Failed));
    assert_eq!(r.duration_ms, 2065);
    let status: Vec<_> = r.steps.iter().map(|s| (s.id.as_str(), s.status)).collect();
    assert_eq!(
        status,
        [
            ("inspect", StepStatus::Succeeded),
            ("edit", StepStatus::Succeeded),
            ("edit-docs", StepStatus::Failed),
            ("test", StepStatus::Failed),
            ("verify", StepStatus::Skipped),
            ("report", StepStatus::Skipped),
        ]
    );
    let c = &r.counts;
    assert_eq!(
        (c.succeeded, c.failed, c.skipped, c.unfinished),
        (2, 2, 2, 0)
    );
    assert_eq!(
        (c.tests_passed, c.tests_failed, c.tests_skipped),
        (12, 2, 1)
    );
    // src/config.rs and src/main.rs (edit); src/lib.rs is only the rejected edit's preview:
    // nothing was written, so it is not a change.
    assert_eq!(c.files_changed, 2);
    assert_eq!((c.lines_added, c.lines_removed), (3, 2));
    // 2 test failures + 1 syntax error are errors; the AWS key is a warning. The test step's
    // own failure is covered by its test failures, so it adds no step-failure finding.
    assert_eq!((c.errors, c.warnings), (3, 1));
    let kinds: Vec<_> = r.findings().map(|(s, f)| (s.id.as_str(), f.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("edit", FindingKind::Security),
            ("edit-docs", FindingKind::Syntax),
            ("test", FindingKind::TestFailure),
            ("test", FindingKind::TestFailure),
        ]
    );
    let syntax = &r.steps[2].findings[0];
    assert_eq!(
        (
            syntax.line,
            syntax.column,
            syntax.end_line,
            syntax.end_column
        ),
        (Some(9), Some(17), Some(9), Some(30))
    );
    let test = &r.steps[3];
    assert_eq!(test.started_ms, Some(202));
    assert_eq!(test.duration_ms, Some(1858));
    assert!(test.findings[0].detail.contains("::set-output"));
    assert_eq!(r.steps[4].skip_cause.as_deref(), Some("edit-docs"));
    assert!(
        r.follow_up
            .iter()
            .any(|f| f.contains("fix 2 failing test(s)"))
    );
    assert!(r.follow_up.iter().any(|f| f.contains("aws-access-key")));
    assert!(
        r.summary
            .starts_with("run run-7f3a failed: 2 of 6 step(s) succeeded, 2 failed, 2 skipped")
    );
    assert_eq!(r.events, sample::failing_run().len() as u64);
}

#[test]
fn the_report_id_is_stable_and_depends_on_the_events() {
    let a = live(&sample::failing_run());
    let b = live(&sample::failing_run());
    assert_eq!(a.report_id, b.report_id);
    assert!(a.report_id.starts_with("run-7f3a-"));
    let mut fewer = sample::failing_run();
    fewer.pop();
    assert_ne!(live(&fewer).report_id, a.report_id);
}

#[test]
fn a_malformed_line_is_named_by_file_and_line_number() {
    let mut text = jsonl(&sample::passing_run());
    let good_lines = text.lines().count();
    text.push_str("\n{\"seq\": 99, \"type\": \"step:started\"\n");
    let err = read_jsonl(Cursor::new(text), Path::new("runs/events.jsonl")).unwrap_err();
    let msg = err.to_string();
    match &err {
        ReportError::Malformed { line, .. } => assert_eq!(*line, good_lines as u64 + 2),
        other => panic!("unexpected {other}"),
    }
    assert!(msg.contains("runs/events.jsonl"), "{msg}");
    assert!(msg.contains(&format!("line {}", good_lines + 2)), "{msg}");
}

#[test]
fn events_of_a_newer_nuvira_are_skipped_and_listed_not_fatal() {
    let mut text = String::new();
    for (i, ev) in sample::failing_run().iter().enumerate() {
        text.push_str(&serde_json::to_string(ev).unwrap());
        text.push('\n');
        if i == 2 {
            text.push_str("{\"seq\":99,\"ts\":1,\"run_id\":\"run-7f3a\",\"type\":\"step:exploded\",\"how\":\"loudly\"}\n");
            text.push_str("{\"seq\":99,\"ts\":1,\"run_id\":\"run-7f3a\",\"type\":\"cache:hit\"}\n");
            text.push_str(
                "{\"seq\":99,\"ts\":1,\"run_id\":\"run-7f3a\",\"type\":\"step:exploded\"}\n",
            );
        }
    }
    let got = read_jsonl(Cursor::new(text), Path::new("e.jsonl")).unwrap();
    assert_eq!(got.unknown_event_types, vec!["step:exploded", "cache:hit"]);
    // The known events make the same report as without the unknown ones.
    let mut expected = live(&sample::failing_run());
    expected.unknown_event_types = got.unknown_event_types.clone();
    assert_eq!(got, expected);
}

#[test]
fn a_known_event_with_a_broken_payload_is_still_a_malformed_line() {
    // `run:cancelled` is known, so its missing `reason` is an error, not a newer event.
    let text = "{\"seq\":0,\"ts\":1,\"run_id\":\"r\",\"type\":\"run:cancelled\"}\n";
    let err = read_jsonl(Cursor::new(text), Path::new("e.jsonl")).unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
    // A line with no string `type` is malformed too.
    for bad in [
        "{\"seq\":0,\"ts\":1,\"run_id\":\"r\",\"type\":7}\n",
        "[1,2]\n",
    ] {
        let err = read_jsonl(Cursor::new(bad), Path::new("e.jsonl")).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}

#[test]
fn a_missing_file_is_a_read_error_naming_it() {
    let err = read_jsonl_file(Path::new("/nonexistent/events.jsonl")).unwrap_err();
    assert!(matches!(err, ReportError::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/events.jsonl"));
}

#[test]
fn a_cancelled_run_keeps_streamed_test_failures_of_the_step_that_never_finished() {
    let mut events: Vec<Event> = sample::failing_run()
        .into_iter()
        .take_while(|e| !matches!(e.kind, EventKind::TestCompleted { .. }))
        .collect();
    let seq = events.len() as u64;
    events.push(Event {
        seq,
        ts: sample::T0 + 1600,
        run_id: "run-7f3a".into(),
        step_id: None,
        kind: EventKind::RunCancelled {
            reason: "interrupted (Ctrl-C)".into(),
        },
    });
    let r = live(&events);
    assert_eq!(r.status, Some(RunStatus::Cancelled));
    let test = r.steps.iter().find(|s| s.id == "test").unwrap();
    assert_eq!(test.status, StepStatus::Running);
    assert_eq!(
        test.findings.len(),
        2,
        "streamed test:failure events are kept"
    );
    assert_eq!(r.counts.tests_failed, 2);
    assert_eq!(r.counts.unfinished, 2, "test and report never finished");
    assert!(r.follow_up[0].contains("cancelled (interrupted (Ctrl-C))"));
}

#[test]
fn a_stream_without_run_completed_is_incomplete_and_says_so() {
    let events: Vec<Event> = sample::passing_run().into_iter().take(6).collect();
    let r = live(&events);
    assert_eq!(r.status, None);
    assert!(r.summary.contains("incomplete"));
    assert!(
        r.follow_up
            .iter()
            .any(|f| f.contains("ended before `run:completed`"))
    );
}

#[test]
fn steps_added_at_run_time_are_appended_and_streamed_failures_do_not_double_count() {
    let mut b = ReportBuilder::new();
    for e in sample::passing_run() {
        b.fold_owned(e);
    }
    let ev = |seq, step: &str, kind| Event {
        seq,
        ts: sample::T0 + 5000,
        run_id: "run-0c1d".into(),
        step_id: Some(step.into()),
        kind,
    };
    b.fold(&ev(
        100,
        "split-1",
        EventKind::StepStarted {
            module: "test".into(),
            attempt: 2,
        },
    ));
    b.fold(&ev(
        101,
        "split-1",
        EventKind::TestFailed {
            failure: TestFailure::new("t", "boom").at("a.rs", Some(3)),
        },
    ));
    let mut t = nuvira_api::TestResult::default();
    t.failed = 1;
    t.total = 1;
    t.failures = vec![TestFailure::new("t", "boom").at("a.rs", Some(3))];
    b.fold(&ev(
        102,
        "split-1",
        EventKind::StepFailed {
            category: nuvira_api::ErrorCategory::TestFailure,
            message: "1 test failed".into(),
            recoverable: true,
            evidence: vec![],
            duration_ms: 5,
            output: Some(std::sync::Arc::new(nuvira_api::StepOutput::Test(t))),
        },
    ));
    let r = b.finish();
    let s = r.steps.last().unwrap();
    assert_eq!(
        (s.id.as_str(), s.module.as_str(), s.attempts),
        ("split-1", "test", 2)
    );
    assert_eq!(
        s.findings.len(),
        1,
        "the output's failure replaces the streamed one"
    );
    assert_eq!(s.findings[0].severity, Severity::Error);
}

#[test]
fn a_verification_warning_with_a_location_becomes_a_located_warning() {
    let r = live(&sample::passing_run());
    let (_, f) = r.findings().next().unwrap();
    assert_eq!(f.kind, FindingKind::Verification);
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(
        (f.path.as_deref(), f.line),
        (Some("src/config.rs"), Some(12))
    );
    assert_eq!(f.rule_id, "nuvira/verification/lint");
    assert!(
        r.follow_up
            .iter()
            .any(|s| s.contains("add a test for a missing config file"))
    );
}

#[test]
fn folding_a_large_stream_from_a_reader_is_streaming() {
    // 20,000 events through the JSONL reader: the report holds one record per step, not the
    // events (the report's size is independent of the number of progress events).
    let text: String = sample::large_run(20_000)
        .map(|e| serde_json::to_string(&e).unwrap() + "\n")
        .collect();
    let r = read_jsonl(Cursor::new(text), Path::new("big.jsonl")).unwrap();
    assert_eq!(r.counts.steps, 3333);
    assert_eq!(r.events, 3333 * 6 + 2);
    assert_eq!(r.counts.tests_failed, 1667 * 2);
}

#[test]
fn a_report_steps_own_report_is_not_nested_in_the_run_report() {
    let mut events = sample::passing_run();
    let inner = live(&events);
    for e in &mut events {
        if e.step_id.as_deref() == Some("report")
            && let EventKind::StepSucceeded { output, .. } = &mut e.kind
        {
            *output = std::sync::Arc::new(nuvira_api::StepOutput::Report(Box::new(inner.clone())));
        }
    }
    let r = live(&events);
    let rec = r.steps.iter().find(|s| s.id == "report").unwrap();
    assert_eq!(
        rec.output,
        Some(nuvira_api::StepOutput::Value(
            serde_json::json!({ "report_id": inner.report_id })
        ))
    );
    let text = nuvira_report::render(&r, nuvira_report::Format::Text);
    assert!(
        text.contains(&format!("report {}", inner.report_id)),
        "{text}"
    );
}

#[test]
fn retries_count_attempts_and_a_dry_run_says_would_change() {
    let mut events = sample::passing_run();
    if let EventKind::RunStarted { dry_run, .. } = &mut events[0].kind {
        *dry_run = true;
    }
    // The test step fails once, is retried, then succeeds (the scheduler's order of events).
    let at = events
        .iter()
        .position(|e| {
            e.step_id.as_deref() == Some("test") && matches!(e.kind, EventKind::StepStarted { .. })
        })
        .unwrap();
    let ev = |kind| Event {
        seq: 0,
        ts: events[at].ts + 10,
        run_id: "run-0c1d".into(),
        step_id: Some("test".into()),
        kind,
    };
    let extra = [
        ev(EventKind::StepRetrying {
            attempt: 2,
            reason: "1 test failed".into(),
            delay_ms: 0,
        }),
        ev(EventKind::RecoverAttempt {
            attempt: 1,
            strategy: "retry-same".into(),
        }),
        ev(EventKind::StepStarted {
            module: "test".into(),
            attempt: 2,
        }),
    ];
    events.splice(at + 1..at + 1, extra);
    let r = live(&events);
    let test = r.steps.iter().find(|s| s.id == "test").unwrap();
    assert_eq!((test.attempts, test.repair_attempts), (2, 1));
    assert_eq!(test.status, StepStatus::Succeeded);
    assert_eq!(test.started_ms, Some(161), "the last attempt's start");
    assert!(r.dry_run);
    assert!(
        r.summary.ends_with("1 file(s) would change (+1 -1)"),
        "{}",
        r.summary
    );
    let html = nuvira_report::render(&r, nuvira_report::Format::Html);
    assert!(html.contains("Dry run: file changes are previews"));
}

#[test]
fn files_a_repair_wrote_during_a_test_step_are_reported_with_their_diff() {
    use nuvira_api::{ChangeKind, FileChange};
    let mut events = sample::passing_run();
    let before = live(&events);
    // The `debug-tests` repair fixes a file while the test step runs: only events say so.
    let at = events
        .iter()
        .position(|e| {
            e.step_id.as_deref() == Some("test")
                && matches!(e.kind, EventKind::StepSucceeded { .. })
        })
        .unwrap();
    let fix = FileChange::new(
        "src/units.rs",
        ChangeKind::Modify,
        "--- a/src/units.rs\n+++ b/src/units.rs\n@@ -1 +1 @@\n-a\n+b\n",
        1,
        1,
    );
    let template = events[at].clone();
    events.insert(
        at,
        Event {
            kind: EventKind::EditWritten {
                path: "src/units.rs".into(),
                bytes: 2,
                change: Some(std::sync::Arc::new(fix.clone())),
            },
            ..template
        },
    );
    // The edit step's own writes, announced with their changes too, are not counted twice.
    let edit_changes: Vec<FileChange> = before
        .steps
        .iter()
        .find(|s| s.id == "edit")
        .unwrap()
        .file_changes
        .clone();
    let edit_at = events
        .iter()
        .position(|e| {
            e.step_id.as_deref() == Some("edit")
                && matches!(e.kind, EventKind::StepSucceeded { .. })
        })
        .unwrap();
    let edit_template = events[edit_at].clone();
    for c in &edit_changes {
        events.insert(
            edit_at,
            Event {
                kind: EventKind::EditWritten {
                    path: c.path.clone(),
                    bytes: 1,
                    change: Some(std::sync::Arc::new(c.clone())),
                },
                ..edit_template.clone()
            },
        );
    }
    let after = live(&events);
    let test = after.steps.iter().find(|s| s.id == "test").unwrap();
    assert_eq!(test.file_changes, vec![fix]);
    let edit = after.steps.iter().find(|s| s.id == "edit").unwrap();
    assert_eq!(edit.file_changes, edit_changes);
    assert_eq!(after.counts.files_changed, before.counts.files_changed + 1);
    assert_eq!(after.counts.lines_added, before.counts.lines_added + 1);
    let text = nuvira_report::render(&after, nuvira_report::Format::Markdown);
    assert!(text.contains("src/units.rs"), "{text}");
}

#[test]
fn findings_stored_as_text_read_like_typed_findings_and_render_the_same() {
    // Event files written before findings were typed carry `file:line: message` strings; a
    // typed finding with a severity is written as an object. Both give the same report.
    let text = jsonl(&sample::passing_run());
    let old = "\"src/config.rs:12: this function could be `const`\"";
    assert!(text.contains(old), "the sample has a lint finding");
    let as_text = text.replace(
        old,
        "\"app/net.py:3: error: adds an AWS access key id [aws-access-key]\"",
    );
    let as_object = text.replace(
        old,
        r#"{"file":"app/net.py","line":3,"severity":"error","message":"adds an AWS access key id [aws-access-key]"}"#,
    );
    let from_text = read_jsonl(Cursor::new(as_text), Path::new("old.jsonl")).unwrap();
    let from_object = read_jsonl(Cursor::new(as_object), Path::new("new.jsonl")).unwrap();
    let (_, f) = from_object.findings().next().unwrap();
    assert_eq!(
        (f.path.as_deref(), f.line, f.message.as_str()),
        (
            Some("app/net.py"),
            Some(3),
            "error: adds an AWS access key id [aws-access-key]"
        )
    );
    let findings = |r: &nuvira_report::ExecutionReport| -> Vec<_> {
        r.findings().map(|(_, f)| f.clone()).collect()
    };
    assert_eq!(findings(&from_text), findings(&from_object));
    for format in [
        nuvira_report::Format::Text,
        nuvira_report::Format::Markdown,
        nuvira_report::Format::Sarif,
        nuvira_report::Format::Junit,
    ] {
        assert_eq!(
            nuvira_report::render(&from_text, format),
            nuvira_report::render(&from_object, format),
            "{format}"
        );
    }
}
