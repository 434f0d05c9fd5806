//! JUnit XML (via `quick-junit`), for CI dashboards that read test reports.
//!
//! - suite `<step> tests` per test step — **one test case per real test**, passing and skipped
//!   ones included, with its duration, when the runner named its tests
//!   ([`TestTotals::cases`](nuvira_api::report::TestTotals), carried by `test:completed`);
//!   each failing one with its message and captured output. A failure the runner did not name
//!   as a case (a compile error, a test run that stopped) is a failing case of its own. When the
//!   runner gave only totals, the suite has the failing tests as cases and the totals as
//!   properties;
//! - suite `nuvira` — one test case per step that is not a test step (classname
//!   `nuvira.<module>`): passed, failed (message and category), skipped (reason) or errored
//!   (never finished). A test step is not a case here: its tests are, in its own suite, so a
//!   failed test step is not counted as one more failure;
//! - suite `<step> findings` per step with other error findings (syntax errors, security
//!   errors, verification blockers) — one failing test case each.
//!
//! Every suite has `tests`, `failures`, `errors`, `skipped` and `time`, and `timestamp` when
//! the run's start is known. Text is shown with its control characters escaped (XML cannot
//! carry them).

use crate::builder::location;
use crate::clean::xml;
use crate::{ExecutionReport, StepRecord};
use nuvira_api::report::FindingKind;
use nuvira_api::{Severity, StepStatus, TestOutcome};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

/// Whether a step ran tests (its tests are reported in their own suite).
fn is_test_step(s: &StepRecord) -> bool {
    s.tests.is_some()
        || s.findings
            .iter()
            .any(|f| f.kind == FindingKind::TestFailure)
}

/// An ISO 8601 UTC timestamp (`2026-12-01T11:17:17`) for milliseconds since the epoch.
pub(crate) fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Sets `skipped`, `time` and `timestamp` on a suite.
pub(crate) fn finish_suite(suite: &mut TestSuite, time_ms: u64, started_ms: Option<u64>) {
    let skipped = suite
        .test_cases
        .iter()
        .filter(|c| matches!(c.status, TestCaseStatus::Skipped { .. }))
        .count();
    suite
        .extra
        .insert("skipped".into(), skipped.to_string().into());
    suite.set_time(Duration::from_millis(time_ms));
    if let Some(ts) = started_ms {
        suite.extra.insert("timestamp".into(), iso8601(ts).into());
    }
}

/// Renders the report as JUnit XML.
pub fn render(r: &ExecutionReport) -> String {
    let mut report = Report::new(xml(&format!("nuvira run {}", r.run_id)));
    report.set_time(Duration::from_millis(r.duration_ms));
    let started = |s: &StepRecord| r.started_at_ms.map(|t| t + s.started_ms.unwrap_or(0));

    let mut steps = TestSuite::new("nuvira");
    steps.add_property(Property::new("report_id", xml(&r.report_id)));
    steps.add_property(Property::new("goal", xml(&r.goal)));
    if let Some(u) = &r.usage {
        steps.add_property(Property::new("model_usage", xml(&u.describe())));
    }
    if let Some(b) = &r.budget_exceeded {
        steps.add_property(Property::new("budget_exceeded", xml(b)));
    }
    let mut steps_time = 0;
    for s in r.steps.iter().filter(|s| !is_test_step(s)) {
        let status = match s.status {
            StepStatus::Succeeded => TestCaseStatus::success(),
            StepStatus::Failed => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(xml(s.message.as_deref().unwrap_or_default()));
                st.set_type(s.category.map(|c| c.as_str()).unwrap_or("failed"));
                if !s.evidence.is_empty() {
                    st.set_description(xml(&s.evidence.join("\n")));
                }
                st
            }
            StepStatus::Skipped => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(xml(s.message.as_deref().unwrap_or_default()));
                st
            }
            StepStatus::Pending | StepStatus::Running => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                st.set_message("the step never finished (the run ended or was cancelled first)");
                st.set_type("unfinished");
                st
            }
        };
        let mut case = TestCase::new(xml(&s.id), status);
        case.set_classname(xml(&format!("nuvira.{}", s.module)));
        if let Some(d) = s.duration_ms {
            case.set_time(Duration::from_millis(d));
            steps_time += d;
        }
        if let Some(u) = &s.usage {
            case.add_property(Property::new("model_usage", u.describe()));
        }
        steps.add_test_case(case);
    }
    finish_suite(&mut steps, steps_time, r.started_at_ms);
    report.add_test_suite(steps);

    for s in &r.steps {
        if is_test_step(s) {
            report.add_test_suite(test_suite(s, started(s)));
        }
        let others: Vec<_> = s
            .findings
            .iter()
            .filter(|f| f.kind != FindingKind::TestFailure && f.kind != FindingKind::StepFailure)
            .filter(|f| f.severity == Severity::Error)
            .collect();
        if !others.is_empty() {
            let mut suite = TestSuite::new(xml(&format!("{} findings", s.id)));
            for f in others {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(xml(&f.message));
                st.set_type(xml(&f.rule_id));
                let mut case = TestCase::new(xml(&format!("{} at {}", f.title, location(f))), st);
                case.set_classname(xml(&f.rule_id));
                suite.add_test_case(case);
            }
            finish_suite(&mut suite, 0, started(s));
            report.add_test_suite(suite);
        }
    }
    to_xml(&report)
}

/// The suite of one test step: its real tests.
fn test_suite(s: &StepRecord, started_ms: Option<u64>) -> TestSuite {
    let mut suite = TestSuite::new(xml(&format!("{} tests", s.id)));
    let failures: Vec<_> = s
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::TestFailure)
        .collect();
    let name_of =
        |f: &nuvira_api::report::Finding| f.title.trim_start_matches("test failed: ").to_owned();
    let failed_status = |f: &nuvira_api::report::Finding| {
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
        st.set_message(xml(&f.message));
        st.set_type("test-failure");
        if !f.detail.is_empty() {
            st.set_description(xml(&f.detail));
        }
        st
    };
    let cases = s
        .tests
        .as_ref()
        .map(|t| t.cases.as_slice())
        .unwrap_or_default();
    let mut matched = vec![false; failures.len()];
    for c in cases {
        let status = match c.outcome {
            TestOutcome::Passed => TestCaseStatus::success(),
            TestOutcome::Skipped => TestCaseStatus::skipped(),
            TestOutcome::Failed | _ => {
                match failures
                    .iter()
                    .enumerate()
                    .find(|(i, f)| !matched[*i] && name_of(f) == c.name)
                {
                    Some((i, f)) => {
                        matched[i] = true;
                        failed_status(f)
                    }
                    None => {
                        let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                        st.set_message("the test failed");
                        st.set_type("test-failure");
                        st
                    }
                }
            }
        };
        let mut case = TestCase::new(xml(&c.name), status);
        let file = failures
            .iter()
            .find(|f| name_of(f) == c.name)
            .and_then(|f| f.path.clone());
        case.set_classname(xml(&c
            .classname
            .clone()
            .or(file)
            .unwrap_or_else(|| s.id.clone())));
        if let Some(d) = c.duration_ms {
            case.set_time(Duration::from_millis(d));
        }
        suite.add_test_case(case);
    }
    // Failures that are no case of the runner's (a compile error, a run that stopped), or all
    // of them when the runner named no tests.
    for (f, _) in failures.iter().zip(&matched).filter(|(_, m)| !**m) {
        let mut case = TestCase::new(xml(&name_of(f)), failed_status(f));
        case.set_classname(xml(&f.path.clone().unwrap_or_else(|| s.id.clone())));
        suite.add_test_case(case);
    }
    let mut time = 0;
    if let Some(t) = &s.tests {
        if cases.is_empty() {
            suite.add_property(Property::new("passed", t.passed.to_string()));
            suite.add_property(Property::new("failed", t.failed.to_string()));
            suite.add_property(Property::new("skipped", t.skipped.to_string()));
        }
        if let Some(f) = &t.framework {
            suite.add_property(Property::new("framework", xml(f)));
        }
        time = t.duration_ms;
    }
    finish_suite(&mut suite, time, started_ms);
    suite
}

/// Writes a JUnit report as XML ending in one newline. Serializing plain strings and numbers
/// does not fail; if it ever does, the output is an XML comment saying why rather than a panic.
///
/// `quick-junit` writes a `disabled` count on every `testsuite`, which the Jenkins JUnit schema
/// (the one CI dashboards validate against) does not allow: it is dropped here, by rewriting the
/// suite tags with `quick-xml`; the `skipped` count says the same.
pub(crate) fn to_xml(report: &Report) -> String {
    match report.to_string() {
        Ok(s) => {
            let mut s = drop_disabled(&s).unwrap_or(s);
            if !s.ends_with('\n') {
                s.push('\n');
            }
            s
        }
        Err(e) => format!("<!-- failed to serialize the JUnit report: {e} -->\n"),
    }
}

/// The XML with the `disabled` attribute removed from `testsuite` tags (`None` if it cannot be
/// rewritten, which does not happen for what `quick-junit` writes).
fn drop_disabled(xml: &str) -> Option<String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(xml.len()));
    loop {
        let event = reader.read_event().ok()?;
        match event {
            Event::Eof => break,
            Event::Start(e) if e.name().as_ref() == b"testsuite" => {
                writer
                    .write_event(Event::Start(without_disabled(&e)?))
                    .ok()?;
            }
            Event::Empty(e) if e.name().as_ref() == b"testsuite" => {
                writer
                    .write_event(Event::Empty(without_disabled(&e)?))
                    .ok()?;
            }
            other => writer.write_event(other).ok()?,
        }
    }
    String::from_utf8(writer.into_inner()).ok()
}

fn without_disabled(
    e: &quick_xml::events::BytesStart<'_>,
) -> Option<quick_xml::events::BytesStart<'static>> {
    let mut tag = quick_xml::events::BytesStart::new("testsuite");
    for a in e.attributes() {
        let a = a.ok()?;
        if a.key.as_ref() != b"disabled" {
            tag.push_attribute(a);
        }
    }
    Some(tag)
}
