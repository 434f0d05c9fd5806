//! JUnit XML (via `quick-junit`), for CI dashboards that read test reports.
//!
//! - suite `nuvira` — one test case per step (classname `nuvira.<module>`): passed, failed
//!   (message and category), skipped (reason) or errored (never finished);
//! - suite `<step> tests` per test step — one failing test case per failing test (classname =
//!   its file), with the captured output as the failure's body; the passed and skipped counts
//!   are properties, since the runner's passing test names are not in the events;
//! - suite `<step> findings` per step with other error findings (syntax errors, security
//!   errors, verification blockers) — one failing test case each.

use crate::ExecutionReport;
use crate::builder::location;
use nuvira_api::report::FindingKind;
use nuvira_api::{Severity, StepStatus};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

/// Renders the report as JUnit XML.
pub fn render(r: &ExecutionReport) -> String {
    let mut report = Report::new(format!("nuvira run {}", r.run_id));
    report.set_time(Duration::from_millis(r.duration_ms));

    let mut steps = TestSuite::new("nuvira");
    steps.add_property(Property::new("report_id", r.report_id.as_str()));
    steps.add_property(Property::new("goal", r.goal.as_str()));
    if let Some(u) = &r.usage {
        steps.add_property(Property::new("model_usage", u.describe()));
    }
    if let Some(b) = &r.budget_exceeded {
        steps.add_property(Property::new("budget_exceeded", b.as_str()));
    }
    for s in &r.steps {
        let status = match s.status {
            StepStatus::Succeeded => TestCaseStatus::success(),
            StepStatus::Failed => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(s.message.clone().unwrap_or_default());
                st.set_type(s.category.map(|c| c.as_str()).unwrap_or("failed"));
                if !s.evidence.is_empty() {
                    st.set_description(s.evidence.join("\n"));
                }
                st
            }
            StepStatus::Skipped => {
                let mut st = TestCaseStatus::skipped();
                st.set_message(s.message.clone().unwrap_or_default());
                st
            }
            StepStatus::Pending | StepStatus::Running => {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
                st.set_message("the step never finished (the run ended or was cancelled first)");
                st.set_type("unfinished");
                st
            }
        };
        let mut case = TestCase::new(s.id.as_str(), status);
        case.set_classname(format!("nuvira.{}", s.module));
        if let Some(d) = s.duration_ms {
            case.set_time(Duration::from_millis(d));
        }
        if let Some(u) = &s.usage {
            case.add_property(Property::new("model_usage", u.describe()));
        }
        steps.add_test_case(case);
    }
    report.add_test_suite(steps);

    for s in &r.steps {
        let tests: Vec<_> = s
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::TestFailure)
            .collect();
        if s.tests.is_some() || !tests.is_empty() {
            let mut suite = TestSuite::new(format!("{} tests", s.id));
            if let Some(t) = &s.tests {
                suite.add_property(Property::new("passed", t.passed.to_string()));
                suite.add_property(Property::new("failed", t.failed.to_string()));
                suite.add_property(Property::new("skipped", t.skipped.to_string()));
                if let Some(f) = &t.framework {
                    suite.add_property(Property::new("framework", f.as_str()));
                }
                suite.set_time(Duration::from_millis(t.duration_ms));
            }
            for f in tests {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(f.message.as_str());
                st.set_type("test-failure");
                if !f.detail.is_empty() {
                    st.set_description(f.detail.as_str());
                }
                let mut case = TestCase::new(f.title.trim_start_matches("test failed: "), st);
                case.set_classname(f.path.clone().unwrap_or_else(|| s.id.clone()));
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
        let others: Vec<_> = s
            .findings
            .iter()
            .filter(|f| f.kind != FindingKind::TestFailure && f.kind != FindingKind::StepFailure)
            .filter(|f| f.severity == Severity::Error)
            .collect();
        if !others.is_empty() {
            let mut suite = TestSuite::new(format!("{} findings", s.id));
            for f in others {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(f.message.as_str());
                st.set_type(f.rule_id.as_str());
                let mut case = TestCase::new(format!("{} at {}", f.title, location(f)), st);
                case.set_classname(f.rule_id.as_str());
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
    }
    to_xml(&report)
}

/// Writes a JUnit report as XML ending in one newline. Serializing plain strings and numbers
/// does not fail; if it ever does, the output is an XML comment saying why rather than a panic.
pub(crate) fn to_xml(report: &Report) -> String {
    match report.to_string() {
        Ok(mut s) => {
            if !s.ends_with('\n') {
                s.push('\n');
            }
            s
        }
        Err(e) => format!("<!-- failed to serialize the JUnit report: {e} -->\n"),
    }
}
