//! One test run's [`TestResult`] (what `nuvira test` prints), in four formats: [`text`],
//! [`json`](fn@json), [`github`] and [`junit`].
//!
//! A run's report ([`ExecutionReport`](crate::ExecutionReport)) has a test step's result inside
//! it; these renderers are for a result on its own, with no plan and no steps around it. They
//! share the rules of the report renderers: durations as the text report writes them (`340ms`,
//! `1.2s`, `2m05s`), GitHub
//! values escaped by [`escape_data`] / [`escape_property`] with at most [`MAX_ERRORS`]
//! annotations, and JUnit XML written by the same writer as the report's
//! ([`junit`](crate::junit)), ending in one newline.
//!
//! ```
//! use nuvira_api::{TestFailure, TestResult};
//! use nuvira_report::test_result;
//!
//! let mut failure = TestFailure::new("tests::adds", "assertion failed\n  left: 4");
//! failure.file = Some("src/lib.rs".into());
//! failure.line = Some(18);
//! let mut result = TestResult::default();
//! result.passed = 3;
//! result.failed = 1;
//! result.total = 4;
//! result.failures = vec![failure];
//! result.framework = Some("cargo".into());
//! let text = test_result::text(&result);
//! assert!(text.starts_with("FAIL tests::adds (src/lib.rs:18)\n"));
//! assert!(text.ends_with("3 passed, 1 failed, 0 skipped\n"));
//! let github = test_result::github(&result);
//! assert!(github.starts_with("::error file=src/lib.rs,line=18,title=tests%3A%3Aadds::"));
//! ```

use crate::github::{MAX_ERRORS, command, escape_data, escape_property};
use crate::human_ms;
use nuvira_api::TestResult;
use nuvira_api::text::escape_control as esc;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// At most this many lines of a failure's message are shown by [`text`].
pub const TEXT_MESSAGE_LINES: usize = 20;

/// Failures (`FAIL name (file:line)` and up to [`TEXT_MESSAGE_LINES`] lines of the message;
/// for a whole-run failure with no test results, the log's last lines too),
/// how the sandbox ended when it was killed, `FRAMEWORK in KIND sandbox, DURATION`, then
/// `N passed, N failed, N skipped`.
pub fn text(r: &TestResult) -> String {
    let mut out = String::new();
    for f in &r.failures {
        let at = match (&f.file, f.line) {
            (Some(file), Some(line)) => format!(" ({}:{line})", esc(file)),
            (Some(file), None) => format!(" ({})", esc(file)),
            _ => String::new(),
        };
        let _ = writeln!(out, "FAIL {}{at}", esc(&f.name));
        for line in f.message.lines().take(TEXT_MESSAGE_LINES) {
            let _ = writeln!(out, "    {}", esc(line));
        }
        // A whole-run failure that sends the reader to the log (no test results to show): the
        // end of it, here, since text has no other place for it.
        if f.name == "test run" && f.message.ends_with("see the log") {
            let lines: Vec<&str> = r.log.lines().filter(|l| !l.trim().is_empty()).collect();
            if !lines.is_empty() {
                let tail = &lines[lines.len().saturating_sub(TEXT_MESSAGE_LINES)..];
                let what = if tail.len() < lines.len() {
                    format!("the log's last {} lines", tail.len())
                } else {
                    "the log".to_owned()
                };
                let _ = writeln!(out, "    {what}:");
                for line in tail {
                    let _ = writeln!(out, "      {}", esc(line));
                }
            }
        }
    }
    if let Some(s) = &r.sandbox {
        if s.oom_killed {
            out.push_str("the tests were killed for exceeding the memory limit (raise --memory)\n");
        } else if s.timed_out {
            out.push_str("the tests were killed at the timeout (raise --timeout)\n");
        } else if s.pids_limited && !r.success {
            out.push_str(
                "the sandbox's process limit refused to start a process or thread (raise --pids)\n",
            );
        }
    }
    let framework = r.framework.as_deref().unwrap_or("tests");
    let sandbox = r.sandbox.as_ref().map_or("", |s| s.kind.as_str());
    let _ = writeln!(
        out,
        "{framework} in {sandbox} sandbox, {}",
        human_ms(r.duration_ms)
    );
    let _ = writeln!(out, "{}", counts(r));
    out
}

/// The test result as pretty-printed JSON and a newline, always with a `sandbox` object
/// (`kind`, `image`, `container_id`, `timed_out`, `oom_killed`, `exit_code`; empty and false
/// when the result has no sandbox; `skipped_special_files` when the sandbox left FIFOs,
/// sockets or devices of the workspace out; `pids_limited: true` when the process limit
/// refused a process or thread; `limits`, how the sandbox enforced its limits, when it says).
pub fn json(r: &TestResult) -> String {
    let mut v = match serde_json::to_value(r) {
        Ok(v) => v,
        Err(e) => return format!("{{\"error\": {:?}}}\n", e.to_string()),
    };
    if let Value::Object(map) = &mut v {
        let info = r.sandbox.clone().unwrap_or_default();
        let mut sandbox = json!({
            "kind": info.kind,
            "image": info.image,
            "container_id": info.container_id,
            "timed_out": info.timed_out,
            "oom_killed": info.oom_killed,
            "exit_code": info.exit_code,
        });
        if !info.skipped_special_files.is_empty() {
            sandbox["skipped_special_files"] = json!(info.skipped_special_files);
        }
        if info.pids_limited {
            sandbox["pids_limited"] = json!(true);
        }
        if let Some(limits) = &info.limits {
            sandbox["limits"] = json!(limits);
        }
        if let Some(key) = &info.cache_key {
            sandbox["cache_key"] = json!(key);
        }
        if let Some(copy) = &info.workspace_copy {
            sandbox["workspace_copy"] = json!(copy);
        }
        if let Some(from) = &info.collected_from {
            sandbox["collected_from"] = json!(from);
        }
        map.insert("sandbox".into(), sandbox);
    }
    match serde_json::to_string_pretty(&v) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        Err(e) => format!("{{\"error\": {:?}}}\n", e.to_string()),
    }
}

/// One `::error` workflow command per failure (`file` and `line` properties where known, the
/// test's name as `title`, `NAME: MESSAGE` as the escaped message), then the
/// `N passed, N failed, N skipped` line.
///
/// GitHub shows at most [`MAX_ERRORS`] error annotations per workflow step, so at most that
/// many are emitted (failures with a file first, then in order; shown in their order), and a
/// `::notice` says how many were left out.
pub fn github(r: &TestResult) -> String {
    let mut out = String::new();
    let mut shown: Vec<usize> = (0..r.failures.len()).collect();
    shown.sort_by_key(|&i| (r.failures[i].file.is_none(), i));
    shown.truncate(MAX_ERRORS);
    shown.sort_unstable();
    for f in shown.iter().map(|&i| &r.failures[i]) {
        let mut props = Vec::new();
        if let Some(file) = &f.file {
            props.push(("file", file.clone()));
            if let Some(line) = f.line {
                props.push(("line", line.to_string()));
            }
        }
        props.push(("title", f.name.clone()));
        out.push_str(&command(
            "error",
            &props,
            &format!("{}: {}", f.name, f.message),
        ));
        out.push('\n');
    }
    let left_out = r.failures.len() - shown.len();
    if left_out > 0 {
        let _ = writeln!(
            out,
            "::notice title={}::{}",
            escape_property("nuvira test"),
            escape_data(&format!(
                "{left_out} more failure(s) not annotated (GitHub shows at most {MAX_ERRORS} errors per step): see `nuvira test --format text` or `--format junit`"
            ))
        );
    }
    let _ = writeln!(out, "{}", counts(r));
    out
}

/// A JUnit report: one suite per run (named after the framework, with the command, the sandbox
/// kind and how the sandbox was killed as properties), a failing case per failure (the message's
/// first line as its message, the message and `at FILE:LINE` as its body, the test's output as
/// `system-out`), and a passing or skipped case for each test counted as such (runners do not
/// name those, so the cases are numbered).
pub fn junit(r: &TestResult) -> String {
    use crate::clean::xml;
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    use std::time::Duration;
    let framework = r.framework.clone().unwrap_or_else(|| "tests".into());
    let mut suite = TestSuite::new(framework.clone());
    suite.set_time(Duration::from_millis(r.duration_ms));
    if let Some(command) = &r.command {
        suite.add_property(("command", command.as_str()));
    }
    if let Some(s) = &r.sandbox {
        suite.add_property(("sandbox", s.kind.as_str()));
        if s.timed_out {
            suite.add_property(("timed_out", "true"));
        }
        if s.oom_killed {
            suite.add_property(("oom_killed", "true"));
        }
    }
    for f in &r.failures {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        status.set_message(f.message.lines().next().unwrap_or_default());
        let mut description = f.message.clone();
        if let Some(file) = &f.file {
            let _ = write!(description, "\nat {file}");
            if let Some(line) = f.line {
                let _ = write!(description, ":{line}");
            }
        }
        status.set_description(description);
        let mut case = TestCase::new(xml(&f.name), status);
        let named = r
            .cases
            .iter()
            .find(|c| c.name == f.name && c.outcome == nuvira_api::TestOutcome::Failed);
        case.set_classname(xml(named
            .and_then(|c| c.classname.as_deref())
            .unwrap_or(&framework)));
        if let Some(ms) = named.and_then(|c| c.duration_ms) {
            case.set_time(Duration::from_millis(ms));
        }
        if !f.output.is_empty() {
            case.set_system_out(xml(&f.output));
        }
        suite.add_test_case(case);
    }
    if r.cases.is_empty() {
        // The runner printed totals only: placeholders keep the counts right.
        for i in 1..=r.passed {
            let mut case = TestCase::new(format!("passed test {i}"), TestCaseStatus::success());
            case.set_classname(framework.clone());
            suite.add_test_case(case);
        }
        for i in 1..=r.skipped {
            let mut case = TestCase::new(format!("skipped test {i}"), TestCaseStatus::skipped());
            case.set_classname(framework.clone());
            suite.add_test_case(case);
        }
    }
    // Every passing and skipped test by its name, with its time.
    for c in &r.cases {
        let status = match c.outcome {
            nuvira_api::TestOutcome::Passed => TestCaseStatus::success(),
            nuvira_api::TestOutcome::Skipped => TestCaseStatus::skipped(),
            _ => continue,
        };
        let mut case = TestCase::new(xml(&c.name), status);
        case.set_classname(xml(c.classname.as_deref().unwrap_or(&framework)));
        if let Some(ms) = c.duration_ms {
            case.set_time(Duration::from_millis(ms));
        }
        suite.add_test_case(case);
    }
    crate::junit::finish_suite(&mut suite, r.duration_ms, None);
    let mut report = Report::new("nuvira test");
    report.set_time(Duration::from_millis(r.duration_ms));
    report.add_test_suite(suite);
    crate::junit::to_xml(&report)
}

/// `N passed, N failed, N skipped`.
fn counts(r: &TestResult) -> String {
    format!(
        "{} passed, {} failed, {} skipped",
        r.passed, r.failed, r.skipped
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nuvira_api::{SandboxInfo, TestFailure};

    fn failure(name: &str, file: Option<&str>) -> TestFailure {
        let mut f = TestFailure::new(name, format!("{name} broke\nsecond line"));
        f.file = file.map(str::to_owned);
        f.line = file.map(|_| 3);
        f
    }

    fn result(failures: Vec<TestFailure>) -> TestResult {
        let mut sandbox = SandboxInfo::default();
        sandbox.kind = "local".into();
        sandbox.timed_out = true;
        let mut r = TestResult::default();
        r.passed = 2;
        r.failed = u32::try_from(failures.len()).unwrap();
        r.skipped = 1;
        r.failures = failures;
        r.duration_ms = 1_234;
        r.framework = Some("pytest".into());
        r.command = Some("pytest -q".into());
        r.sandbox = Some(sandbox);
        r
    }

    #[test]
    fn text_lists_failures_how_the_sandbox_ended_and_the_counts() {
        let out = text(&result(vec![
            failure("t::a", Some("a.py")),
            failure("t::b", None),
        ]));
        assert_eq!(
            out,
            "FAIL t::a (a.py:3)\n    t::a broke\n    second line\nFAIL t::b\n    t::b broke\n    second line\n\
             the tests were killed at the timeout (raise --timeout)\n\
             pytest in local sandbox, 1.2s\n2 passed, 2 failed, 1 skipped\n"
        );
        let mut long = failure("t::long", None);
        long.message = (0..30).map(|i| format!("l{i}\n")).collect();
        let out = text(&result(vec![long]));
        assert!(out.contains("    l19\n") && !out.contains("l20"), "{out}");
    }

    #[test]
    fn a_run_with_no_results_shows_the_end_of_its_log_escaped() {
        let run = TestFailure::new(
            "test run",
            "the runner reported no test results (exit code 2); see the log",
        );
        let mut r = result(vec![run]);
        r.log = "hello-out\n\nhello-err \x1b[31mred\n".into();
        let out = text(&r);
        assert!(
            out.contains(
                "; see the log\n    the log:\n      hello-out\n      hello-err \\x1b[31mred\n"
            ),
            "{out}"
        );
        r.log = (0..50).map(|i| format!("line {i}\n")).collect();
        let out = text(&r);
        assert!(
            out.contains("    the log's last 20 lines:\n      line 30\n"),
            "{out}"
        );
        assert!(
            out.contains("      line 49\n") && !out.contains("line 29\n"),
            "{out}"
        );
        // A failure of a named test keeps to its message.
        let mut named = result(vec![failure("t::a", Some("a.py"))]);
        named.log = "noise\n".into();
        assert!(!text(&named).contains("noise"));
    }

    #[test]
    fn json_always_has_a_sandbox_object() {
        let mut r = result(vec![]);
        r.sandbox = None;
        let v: Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(v["sandbox"]["kind"], "");
        assert_eq!(v["sandbox"]["timed_out"], false);
        assert!(v["sandbox"].get("container_id").is_some(), "{v}");
        assert!(json(&r).ends_with("}\n"));
    }

    #[test]
    fn github_escapes_and_caps_annotations_at_the_limit() {
        let mut failures: Vec<_> = (0..MAX_ERRORS + 2)
            .map(|i| failure(&format!("t::n{i}"), None))
            .collect();
        failures.push(failure("t::located", Some("a,b.py")));
        let out = github(&result(failures));
        let errors: Vec<_> = out.lines().filter(|l| l.starts_with("::error ")).collect();
        assert_eq!(errors.len(), MAX_ERRORS, "{out}");
        // The located failure is kept, and the unlocated ones shown are the first ones.
        assert!(
            errors.iter().any(|l| l.starts_with(
                "::error file=a%2Cb.py,line=3,title=t%3A%3Alocated::t::located: t::located broke%0Asecond line"
            )),
            "{out}"
        );
        assert!(errors[0].contains("title=t%3A%3An0::"), "{out}");
        assert!(
            out.contains("::notice title=nuvira test::3 more failure(s) not annotated"),
            "{out}"
        );
        assert!(out.ends_with("\n2 passed, 13 failed, 1 skipped\n"), "{out}");
        let few = github(&result(vec![failure("t::a", None)]));
        assert!(!few.contains("::notice"), "{few}");
    }

    #[test]
    fn junit_has_one_case_per_counted_test_and_ends_in_one_newline() {
        let xml = junit(&result(vec![failure("t::a", Some("a.py"))]));
        assert!(
            xml.ends_with("</testsuites>\n") && !xml.ends_with("\n\n"),
            "{xml}"
        );
        let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(report.tests, 4);
        assert_eq!(report.failures, 1);
        let suite = &report.test_suites[0];
        assert_eq!(suite.name.as_str(), "pytest");
        assert!(
            xml.contains("t::a broke\nsecond line\nat a.py:3</failure>"),
            "{xml}"
        );
        assert!(
            xml.contains("<property name=\"timed_out\" value=\"true\"/>"),
            "{xml}"
        );
    }
}
