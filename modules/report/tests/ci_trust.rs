//! What a CI step needs to trust the reports (issue 13): secrets masked in every format, paths
//! relative to the checkout, SARIF fingerprints that do not collide and a result cap, Markdown
//! tables that survive a `|`, annotations the runner keeps, control characters shown, and
//! rejected edits that are not changes.

use crate::live;
use nuvira_api::report::{ExecutionReport, Finding, FindingKind, StepRecord};
use nuvira_api::{EventKind, Severity, StepOutput, StepStatus};
use nuvira_report::{Format, render, sample};
use serde_json::Value;

/// An AWS-key-shaped and a GitHub-token-shaped string (built at run time, so this file is not
/// itself a finding of a secret scanner).
fn secrets() -> (String, String) {
    (
        format!("AKIA{}", "Z7Q2".repeat(4)),
        format!("ghp_{}", "x9Kd".repeat(9)),
    )
}

/// The sample failing run, with an edit that adds both secrets and a test whose output and
/// message print the token.
fn leaky_run() -> Vec<nuvira_api::Event> {
    let (aws, gh) = secrets();
    let mut events = sample::failing_run();
    for e in &mut events {
        match &mut e.kind {
            EventKind::StepSucceeded { output, .. } => {
                if let StepOutput::Edit(r) = std::sync::Arc::make_mut(output) {
                    for c in &mut r.preview.changes {
                        c.diff = c.diff.replace("AKIAIOSFODNN7EXAMPLE", &aws);
                        c.diff
                            .push_str(&format!("+    let gh = \"{gh}\"; // a GitHub token\n"));
                    }
                }
            }
            EventKind::StepFailed {
                output: Some(out),
                message,
                ..
            } => {
                message.push_str(&format!(" (GITHUB_TOKEN={gh})"));
                if let StepOutput::Test(t) = std::sync::Arc::make_mut(out) {
                    for f in &mut t.failures {
                        f.output
                            .push_str(&format!("\nusing token {gh} and key {aws}\n"));
                        f.message.push_str(&format!(" with {aws}"));
                    }
                }
            }
            _ => {}
        }
    }
    events
}

#[test]
fn no_format_repeats_a_secret_the_scanner_found() {
    let (aws, gh) = secrets();
    let events = leaky_run();
    // The raw events do hold them: the test is only worth something if they go in.
    let raw = crate::jsonl(&events);
    assert!(raw.contains(&aws) && raw.contains(&gh));
    let report = live(&events);
    let mut outputs: Vec<(String, String)> = Format::ALL
        .iter()
        .map(|f| (f.to_string(), render(&report, *f)))
        .collect();
    outputs.push((
        "step summary".into(),
        nuvira_report::github::step_summary(&report, 1 << 20),
    ));
    for (name, text) in &outputs {
        assert!(!text.contains(&aws), "{name} shows the AWS key:\n{text}");
        assert!(
            !text.contains(&gh),
            "{name} shows the GitHub token:\n{text}"
        );
    }
    // The line stays, the value goes.
    let md = render(&report, Format::Markdown);
    assert!(md.contains("+    let token = \"[redacted]\";"), "{md}");
    assert!(
        md.contains("+    let gh = \"[redacted]\"; // a GitHub token"),
        "{md}"
    );
    let json = render(&report, Format::Json);
    assert!(json.contains("GITHUB_TOKEN=[redacted]"), "{json}");
    // The same report from the stored events, byte for byte.
    let stored = nuvira_report::read_jsonl(raw.as_bytes(), "events.jsonl".as_ref()).unwrap();
    assert_eq!(render(&stored, Format::Json), json);
}

#[test]
fn a_rejected_edit_is_not_a_file_change_in_any_format() {
    let report = live(&sample::failing_run());
    let rejected = report.steps.iter().find(|s| s.id == "edit-docs").unwrap();
    assert_eq!(rejected.status, StepStatus::Failed);
    assert!(rejected.file_changes.is_empty());
    assert_eq!(report.counts.files_changed, 2);
    for f in Format::ALL {
        let text = render(&report, f);
        assert!(
            !text.contains("+++ b/src/lib.rs") && !text.contains("pub use config::{load_config;"),
            "{f} lists the rejected change:\n{text}"
        );
    }
    // The rejection itself is still reported.
    assert!(
        report
            .findings()
            .any(|(s, f)| s.id == "edit-docs" && f.severity == Severity::Error)
    );
}

fn report_with(findings: Vec<Finding>) -> ExecutionReport {
    let mut step = StepRecord::pending("check", "verify", vec![]);
    step.status = StepStatus::Succeeded;
    step.findings = findings;
    let mut r = ExecutionReport::default();
    r.run_id = "run-1".into();
    r.steps.push(step);
    r
}

fn syntax(path: &str, line: u32) -> Finding {
    Finding::new(
        FindingKind::Syntax,
        Severity::Error,
        "nuvira/syntax/error",
        format!("syntax error in {path}"),
        "unexpected token",
    )
    .at(path, Some(line))
}

fn sarif(r: &ExecutionReport, o: &nuvira_report::sarif::Options) -> Value {
    serde_json::from_str(&nuvira_report::sarif::render_with(r, o)).unwrap()
}

fn fingerprints(doc: &Value) -> Vec<String> {
    doc["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["partialFingerprints"]["nuvira/v1"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn sarif_fingerprints_of_lines_1_and_2_differ_and_follow_the_line_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/a.rs"), "fn a( {\nfn b( {\n").unwrap();
    let r = report_with(vec![syntax("src/a.rs", 1), syntax("src/a.rs", 2)]);
    // Without the source: an occurrence index keeps them apart.
    let plain = fingerprints(&sarif(&r, &Default::default()));
    assert_ne!(plain[0], plain[1]);
    // With it: the line text too.
    let opts = nuvira_report::sarif::Options::default().source_root(dir.path());
    crate::sarif::validate(&sarif(&r, &opts));
    let with_text = fingerprints(&sarif(&r, &opts));
    assert_ne!(with_text[0], with_text[1]);
    assert_ne!(with_text, plain, "the line text is part of the fingerprint");
    // Two lines added above: the same lines, now 3 and 4, keep their fingerprints.
    std::fs::write(dir.path().join("src/a.rs"), "\n\nfn a( {\nfn b( {\n").unwrap();
    let moved = report_with(vec![syntax("src/a.rs", 3), syntax("src/a.rs", 4)]);
    assert_eq!(fingerprints(&sarif(&moved, &opts)), with_text);
}

#[test]
fn sarif_caps_results_at_githubs_limit_and_says_how_many_were_dropped() {
    use nuvira_report::sarif::MAX_RESULTS;
    let n = MAX_RESULTS + 7;
    let mut findings: Vec<Finding> = (0..n)
        .map(|i| {
            let mut f = syntax(&format!("src/f{i}.rs"), 1);
            f.severity = Severity::Warning;
            f
        })
        .collect();
    findings.push(syntax("src/worst.rs", 1));
    let doc = sarif(&report_with(findings), &Default::default());
    crate::sarif::validate(&doc);
    let run = &doc["runs"][0];
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), MAX_RESULTS);
    assert!(
        results.iter().any(
            |r| r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/worst.rs"
        ),
        "the error is kept over warnings"
    );
    let notes = run["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .unwrap();
    let note = notes
        .iter()
        .find(|n| n["descriptor"]["id"] == "nuvira/results-capped")
        .unwrap();
    let text = note["message"]["text"].as_str().unwrap();
    assert!(
        text.starts_with("8 of 25008 result(s) were dropped"),
        "{text}"
    );
}

#[test]
fn sarif_metadata_is_real_or_absent_and_provenance_comes_from_the_actions_environment() {
    let r = report_with(vec![syntax("src/a b#c.rs", 1)]);
    let text = nuvira_report::sarif::render(&r);
    assert!(!text.contains("example.invalid"), "{text}");
    let doc: Value = serde_json::from_str(&text).unwrap();
    if let Some(uri) = doc["runs"][0]["tool"]["driver"].get("informationUri") {
        assert!(uri.as_str().unwrap().starts_with("https://"));
    }
    assert_eq!(
        doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "src/a%20b%23c.rs"
    );
    let mut opts = nuvira_report::sarif::Options::default();
    opts.provenance = Some({
        let mut p = nuvira_report::sarif::Provenance::default();
        p.repository_uri = "https://github.com/o/r".into();
        p.revision_id = Some("abc123".into());
        p
    });
    let doc = sarif(&r, &opts);
    crate::sarif::validate(&doc);
    let vcp = &doc["runs"][0]["versionControlProvenance"][0];
    assert_eq!(vcp["repositoryUri"], "https://github.com/o/r");
    assert_eq!(vcp["revisionId"], "abc123");
}

#[test]
fn markdown_tables_escape_pipes_in_paths_and_show_control_characters() {
    let mut f = syntax("src/a|b.rs", 3);
    f.message = "bad\x1b[31m red | pipe".into();
    let md = render(&report_with(vec![f]), Format::Markdown);
    let row = md.lines().find(|l| l.starts_with("| error |")).unwrap();
    assert!(row.contains("`src/a\\|b.rs:3`"), "{row}");
    assert!(row.contains("bad\\x1b\\[31m red \\| pipe"), "{row}");
    // Splitting on unescaped pipes gives the table's four columns (plus the edges).
    let cells = row.replace("\\|", "").split('|').count();
    assert_eq!(cells, 6, "{row}");
    assert!(!md.contains('\x1b'));
}

#[test]
fn html_and_junit_show_control_characters_instead_of_carrying_them() {
    let mut f = syntax("src/x.rs", 1);
    f.message = "a\x1b[2Jb\x07c".into();
    let r = report_with(vec![f]);
    let html = render(&r, Format::Html);
    assert!(!html.contains('\x1b') && !html.contains('\x07'));
    assert!(html.contains("a\\x1b[2Jb\\x07c"), "{html}");
    let xml = render(&r, Format::Junit);
    assert!(!xml.contains('\x1b'));
    assert!(xml.contains("a\\x1b[2Jb\\x07c"), "{xml}");
}

#[test]
fn annotations_spanning_lines_leave_out_the_columns() {
    let one = syntax("src/a.rs", 4).span(2, 4, 9);
    let many = syntax("src/b.rs", 4).span(2, 6, 9);
    let a = nuvira_report::github::annotation(&one, "s");
    assert!(a.contains("line=4,col=2,endLine=4,endColumn=9"), "{a}");
    let b = nuvira_report::github::annotation(&many, "s");
    assert!(b.contains("file=src/b.rs,line=4,endLine=6,title="), "{b}");
    assert!(!b.contains("col="), "{b}");
}

#[test]
fn paths_are_rebased_onto_the_checkout() {
    let mut r = live(&sample::failing_run());
    nuvira_report::rebase_paths(&mut r, "sub");
    let github = render(&r, Format::Github);
    assert!(
        github.contains("::error file=sub/src/config.rs,line=42"),
        "{github}"
    );
    let doc: Value = serde_json::from_str(&render(&r, Format::Sarif)).unwrap();
    for res in doc["runs"][0]["results"].as_array().unwrap() {
        let uri = res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            .as_str()
            .unwrap();
        assert!(uri.starts_with("sub/"), "{uri}");
    }
    assert!(r.file_changes().all(|(_, c)| c.path.starts_with("sub/")));
}

/// The lines the Actions runner would take for commands outside stop-commands blocks: a `::`
/// after leading blanks, or `##[` anywhere.
fn runner_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stopped: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(tok) = &stopped {
            if t == format!("::{tok}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("::")
            && let Some(end) = rest.find("::")
        {
            if rest.starts_with("stop-commands::") {
                stopped = Some(rest[end + 2..].to_owned());
                continue;
            }
            out.push(line.to_owned());
        } else if line.contains("##[") {
            out.push(line.to_owned());
        }
    }
    out
}

#[test]
fn every_format_printed_in_actions_mode_gives_the_runner_no_command() {
    let mut events = sample::failing_run();
    for e in &mut events {
        if let EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures[0].output = "::error ::forged\n  ::warning ::x\nsee ##[error]y\n".into();
            t.failures[0].message = "boom ##[warning]z".into();
        }
    }
    let report = live(&events);
    for f in Format::ALL {
        let raw = render(&report, f);
        let safe = nuvira_report::github::for_log(&raw, f);
        let forged: Vec<_> = runner_commands(&safe)
            .into_iter()
            // The github format's own annotations (all with a title) are meant.
            .filter(|l| !(f == Format::Github && l.contains("title=")))
            .filter(|l| {
                !(f == Format::Github && (l.starts_with("::group::") || l == "::endgroup::"))
            })
            .collect();
        assert!(forged.is_empty(), "{f}: {forged:?}");
        match f {
            Format::Json | Format::Sarif => {
                let a: Value = serde_json::from_str(&raw).unwrap();
                let b: Value = serde_json::from_str(&safe).unwrap();
                assert_eq!(a, b, "{f}: the same JSON");
            }
            Format::Junit => {
                let text = |s: &str| {
                    let mut r = quick_xml::Reader::from_str(s);
                    let mut all = String::new();
                    loop {
                        match r.read_event().unwrap() {
                            quick_xml::events::Event::Eof => break,
                            quick_xml::events::Event::Text(t) => {
                                all.push_str(&t.xml_content().unwrap());
                            }
                            quick_xml::events::Event::GeneralRef(g) => {
                                let name = g.decode().unwrap().into_owned();
                                all.push_str(&format!("&{name};"));
                            }
                            _ => {}
                        }
                    }
                    all
                };
                assert!(text(&raw).contains("::error ::forged"));
                // Well-formed, and the same failure text once references are read.
                let decoded = text(&safe).replace("&#58;", ":").replace("&#91;", "[");
                assert!(decoded.contains("::error ::forged"), "{decoded}");
            }
            _ => {}
        }
    }
}

/// The rules of the Jenkins JUnit schema (`junit-10.xsd` of the Jenkins xunit plugin, the one
/// CI dashboards validate against), checked with a real XML parser: which element may hold
/// which, the attributes each may have and must have, and the `time` pattern of suites.
fn check_jenkins_junit(xml: &str) {
    use std::collections::HashMap;
    let children: HashMap<&str, &[&str]> = HashMap::from([
        ("testsuites", &["testsuite"][..]),
        (
            "testsuite",
            &[
                "testsuite",
                "properties",
                "testcase",
                "system-out",
                "system-err",
            ][..],
        ),
        ("properties", &["property"][..]),
        (
            "testcase",
            &[
                "skipped",
                "error",
                "failure",
                "rerunFailure",
                "rerunError",
                "flakyFailure",
                "flakyError",
                "system-out",
                "system-err",
            ][..],
        ),
    ]);
    let attrs: HashMap<&str, (&[&str], &[&str])> = HashMap::from([
        (
            "testsuites",
            (
                &[][..],
                &["name", "time", "tests", "failures", "errors"][..],
            ),
        ),
        (
            "testsuite",
            (
                &["name", "tests", "failures", "errors"][..],
                &[
                    "group",
                    "time",
                    "skipped",
                    "timestamp",
                    "hostname",
                    "id",
                    "package",
                    "file",
                    "log",
                    "url",
                ][..],
            ),
        ),
        (
            "testcase",
            (&["name"][..], &["time", "classname", "group"][..]),
        ),
        ("property", (&["name", "value"][..], &[][..])),
        ("failure", (&[][..], &["type", "message"][..])),
        ("error", (&[][..], &["type", "message"][..])),
        ("skipped", (&[][..], &["type", "message"][..])),
        ("properties", (&[][..], &[][..])),
        ("system-out", (&[][..], &[][..])),
        ("system-err", (&[][..], &[][..])),
    ]);
    let time_ok = |t: &str| {
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        int.chars().all(|c| c.is_ascii_digit() || c == ',')
            && frac.chars().all(|c| c.is_ascii_digit())
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<String> = Vec::new();
    loop {
        let ev = reader.read_event().unwrap();
        let (e, empty) = match &ev {
            quick_xml::events::Event::Eof => break,
            quick_xml::events::Event::Start(e) => (e.clone(), false),
            quick_xml::events::Event::Empty(e) => (e.clone(), true),
            quick_xml::events::Event::End(_) => {
                stack.pop();
                continue;
            }
            _ => continue,
        };
        let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
        match stack.last() {
            None => assert_eq!(name, "testsuites", "the root"),
            Some(parent) => assert!(
                children
                    .get(parent.as_str())
                    .is_some_and(|c| c.contains(&name.as_str())),
                "<{name}> inside <{parent}>"
            ),
        }
        let (required, optional) = attrs.get(name.as_str()).unwrap();
        let have: Vec<(String, String)> = e
            .attributes()
            .map(|a| {
                let a = a.unwrap();
                (
                    String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                    a.unescape_value().unwrap().into_owned(),
                )
            })
            .collect();
        for (k, v) in &have {
            assert!(
                required.contains(&k.as_str()) || optional.contains(&k.as_str()),
                "<{name}> may not have `{k}`"
            );
            if k == "time" && name != "testcase" {
                assert!(time_ok(v), "<{name} time={v:?}>");
            }
        }
        for r in *required {
            assert!(have.iter().any(|(k, _)| k == r), "<{name}> needs `{r}`");
        }
        if !empty {
            stack.push(name);
        }
    }
}

#[test]
fn junit_follows_the_jenkins_schema_in_every_shape() {
    for events in [sample::failing_run(), sample::passing_run(), leaky_run()] {
        check_jenkins_junit(&render(&live(&events), Format::Junit));
    }
    let mut f = syntax("src/x.rs", 1);
    f.message = "a\x1b[2Jb".into();
    check_jenkins_junit(&render(&report_with(vec![f]), Format::Junit));
    // `nuvira test`'s own JUnit, too.
    let mut t = nuvira_api::TestResult::default();
    t.failed = 1;
    t.failures = vec![nuvira_api::TestFailure::new("a::b", "boom")];
    check_jenkins_junit(&nuvira_report::test_result::junit(&t));
}

#[test]
fn junit_lists_every_test_from_test_completed_when_the_output_names_none() {
    let mut events = sample::failing_run();
    for e in &mut events {
        if let EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.cases.clear();
        }
    }
    let xml = render(&live(&events), Format::Junit);
    let suite = xml
        .lines()
        .find(|l| l.contains("<testsuite name=\"test tests\""))
        .unwrap();
    assert!(
        suite.contains("tests=\"15\"") && suite.contains("skipped=\"1\""),
        "{suite}"
    );
    assert!(
        xml.contains("<testcase name=\"config::tests::case_11\""),
        "{xml}"
    );
}

#[test]
fn nuvira_test_junit_names_every_test_when_the_runner_did() {
    use nuvira_api::{TestCase, TestOutcome};
    let mut t = nuvira_api::TestResult::default();
    t.passed = 2;
    t.failed = 1;
    t.skipped = 1;
    t.failures = vec![nuvira_api::TestFailure::new("m::fails", "boom")];
    let mut ok = TestCase::new("m::works", TestOutcome::Passed);
    ok.duration_ms = Some(1500);
    t.cases = vec![
        ok,
        TestCase::new("m::also", TestOutcome::Passed),
        TestCase::new("m::later", TestOutcome::Skipped),
        TestCase::new("m::fails", TestOutcome::Failed),
    ];
    let xml = nuvira_report::test_result::junit(&t);
    check_jenkins_junit(&xml);
    assert!(
        xml.contains("<testcase name=\"m::works\" classname=\"tests\" time=\"1.500\""),
        "{xml}"
    );
    assert!(xml.contains("name=\"m::later\""), "{xml}");
    assert!(!xml.contains("passed test 1"), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 4, "{xml}");
    assert!(xml.contains("skipped=\"1\""), "{xml}");
}
