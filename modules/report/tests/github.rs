use super::live;
use nuvira_api::{Event, EventKind, StepOutput, TestFailure};
use nuvira_report::github::{
    self, MAX_ERRORS, MAX_WARNINGS, escape_data, escape_property, parse_command, unescape_data,
    unescape_property,
};
use nuvira_report::{Finding, FindingKind, sample};
use proptest::prelude::*;

proptest! {
    #[test]
    fn data_escaping_round_trips_and_has_no_line_breaks(s in any::<String>()) {
        let e = escape_data(&s);
        prop_assert!(!e.contains('\n') && !e.contains('\r'));
        prop_assert_eq!(unescape_data(&e), s);
    }

    #[test]
    fn property_escaping_round_trips_and_has_no_separators(s in any::<String>()) {
        let e = escape_property(&s);
        prop_assert!(!e.contains('\n') && !e.contains('\r') && !e.contains(',') && !e.contains(':'));
        prop_assert_eq!(unescape_property(&e), s);
    }

    #[test]
    fn an_annotation_parses_back_to_what_was_annotated(
        path in "[a-z/:,%. ]{1,20}",
        line in 1u32..10_000,
        title in any::<String>(),
        message in any::<String>(),
    ) {
        let f = Finding::new(FindingKind::TestFailure, nuvira_api::Severity::Error, "r", title.clone(), message.clone())
            .at(path.clone(), Some(line));
        let text = github::annotation(&f, "step-1");
        prop_assert_eq!(text.lines().count(), 1);
        let cmd = parse_command(&text).unwrap();
        prop_assert_eq!(cmd.name, "error");
        prop_assert_eq!(&cmd.properties[0], &("file".to_owned(), path));
        prop_assert_eq!(&cmd.properties[1], &("line".to_owned(), line.to_string()));
        prop_assert_eq!(&cmd.properties[2], &("title".to_owned(), format!("{title} [step-1]")));
        prop_assert_eq!(cmd.message, message);
    }
}

#[test]
fn annotations_carry_the_full_location_of_a_syntax_error() {
    let out = github::render_with_token(&live(&sample::failing_run()), "T");
    assert!(
        out.contains("::error file=src/lib.rs,line=9,col=17,endLine=9,endColumn=30,title=syntax error in src/lib.rs [edit-docs]::expected `}` to close the `use` group"),
        "{out}"
    );
    assert!(out.contains(
        "::error file=src/config.rs,line=42,title=test failed%3A config%3A%3Atests%3A%3Aloads_defaults [test]::assertion `left == right` failed%0A  left: 8080%0A right: 80"
    ));
    assert!(
        out.contains("::warning file=src/main.rs,line=5,title=security%3A aws-access-key [edit]::")
    );
}

/// Every line that the runner would execute as a command, given the stop-commands blocks.
fn executed(out: &str) -> Vec<String> {
    let mut stopped: Option<String> = None;
    let mut run = Vec::new();
    for line in out.lines() {
        if let Some(tok) = &stopped {
            if line == format!("::{tok}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(tok) = line.strip_prefix("::stop-commands::") {
            stopped = Some(tok.to_owned());
            continue;
        }
        if line.starts_with("::") {
            run.push(line.to_owned());
        }
    }
    run
}

#[test]
fn untrusted_test_output_cannot_inject_workflow_commands() {
    let out = github::render(&live(&sample::failing_run()));
    assert!(
        out.contains("\n::set-output name=pwned::1\n"),
        "the output is shown"
    );
    let run = executed(&out);
    assert!(
        run.iter()
            .all(|l| !l.starts_with("::set-output") && !l.starts_with("::add-mask"))
    );
    let names: Vec<String> = run.iter().map(|l| parse_command(l).unwrap().name).collect();
    assert!(
        names
            .iter()
            .all(|n| ["error", "warning", "notice", "group", "endgroup"].contains(&n.as_str())),
        "{names:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "notice").count(), 1);
}

#[test]
fn the_stop_token_is_random_and_never_occurs_in_the_text_it_protects() {
    let r = live(&sample::failing_run());
    let tok = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("::stop-commands::"))
            .unwrap()
            .to_owned()
    };
    let (a, b) = (github::render(&r), github::render(&r));
    assert_ne!(tok(&a), tok(&b));
    assert_eq!(tok(&a).len(), 32);

    // Test output that contains the token itself cannot close the block early.
    let mut events = sample::failing_run();
    for e in &mut events {
        if let EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures[0].output = "::TOK::\n::add-mask::secret\n".into();
        }
    }
    let out = github::render_with_token(&live(&events), "TOK");
    assert_ne!(tok(&out), "TOK");
    assert!(executed(&out).iter().all(|l| !l.starts_with("::add-mask")));
}

fn many_failures(n: usize) -> Vec<Event> {
    let mut events = sample::failing_run();
    for e in &mut events {
        if let EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures = (0..n)
                .map(|i| {
                    TestFailure::new(format!("t{i}"), "failed")
                        .at("tests/a.rs", Some(i as u32 + 1))
                        .with_output(format!(
                            "thread 't{i}' panicked at tests/a.rs:{i}:5\n```\nleft: 1\n"
                        ))
                })
                .collect();
            t.failed = n as u32;
        }
    }
    events
}

#[test]
fn at_most_ten_errors_and_ten_warnings_most_severe_first_with_one_notice_of_totals() {
    let r = live(&many_failures(25));
    let out = github::render_with_token(&r, "T");
    let run = executed(&out);
    let errors: Vec<_> = run.iter().filter(|l| l.starts_with("::error")).collect();
    let warnings = run.iter().filter(|l| l.starts_with("::warning")).count();
    assert_eq!(errors.len(), MAX_ERRORS);
    assert!(warnings <= MAX_WARNINGS);
    // The syntax error outranks the 25 test failures, and the first tests come next.
    assert!(errors[0].contains("title=syntax error"));
    assert!(errors[1].contains("t0 [test]"));
    let notice: Vec<_> = run.iter().filter(|l| l.starts_with("::notice")).collect();
    assert_eq!(notice.len(), 1);
    let n = parse_command(notice[0]).unwrap();
    assert!(
        n.message.contains("26 error(s), 1 warning(s)"),
        "{}",
        n.message
    );
    assert!(n.message.contains("16 not annotated"), "{}", n.message);
}

#[test]
fn the_step_summary_is_cut_to_the_limit_with_a_note_and_no_open_fence() {
    let r = live(&many_failures(2000));
    let full = nuvira_report::render(&r, nuvira_report::Format::Markdown);
    assert!(full.len() > 20_000);
    let cut = github::step_summary(&r, 20_000);
    assert!(cut.len() <= 20_000, "{}", cut.len());
    assert!(cut.contains("truncated to fit GitHub's 19 KiB limit"));
    let fences = cut.lines().filter(|l| l.starts_with("```")).count();
    assert_eq!(fences % 2, 0, "every code block is closed");
    assert_eq!(github::step_summary(&r, usize::MAX), full);
}

#[test]
fn the_step_summary_is_appended_and_existing_content_counts_toward_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.md");
    std::fs::write(&path, "x".repeat(15_000)).unwrap();
    let r = live(&many_failures(2000));
    github::append_step_summary(&r, &path, 20_000).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&"x".repeat(15_000)));
    assert!(text.len() <= 20_000, "{}", text.len());
    assert!(text.contains("Nuvira run `run-7f3a` failed"));
}
