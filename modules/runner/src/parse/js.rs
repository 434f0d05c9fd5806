//! jest and vitest: their JSON report (`--json` / `--reporter=json`, from a file or stdout), a
//! JUnit report, else their default terminal output. A test file that failed to run (a syntax
//! error, a missing import: vitest "Failed Suites", jest "Test suite failed to run") is one
//! failure named after the file and counted in `failed`. Tests are named
//! `file > describe > test`.

use super::{
    Ctx, RunnerOutput, Tally, cap_output, first_line, js_frame_location, junit, re, secs_to_ms,
    strip_ansi,
};
use crate::detect::Framework;
use nuvira_api::TestFailure;
use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

static ANY_LOCATION: LazyLock<Regex> =
    LazyLock::new(|| re(r#"((?:file://)?[^\s:()'"\[\]]+\.[cm]?[jt]sx?):(\d+)(?::\d+)?"#));
static CODE_FRAME: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*> ?(\d+) \|"));
// jest
static JEST_FILE: LazyLock<Regex> = LazyLock::new(|| re(r"^(FAIL|PASS) (\S+)(?: \(.*\))?\s*$"));
static JEST_BULLET: LazyLock<Regex> = LazyLock::new(|| re(r"^  ● (.+)$"));
static JEST_TESTS: LazyLock<Regex> = LazyLock::new(|| re(r"^Tests:\s+(.*)$"));
static JEST_TIME: LazyLock<Regex> = LazyLock::new(|| re(r"^Time:\s+([\d.]+) ?s"));
// vitest
static VITEST_TESTS: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+Tests\s+(.*)\(\d+\)\s*$"));
static VITEST_DURATION: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+Duration\s+([\d.]+)(ms|s)"));
static VITEST_SECTION: LazyLock<Regex> = LazyLock::new(|| re(r"^⎯+ Failed (Suites|Tests) \d+ ⎯+$"));
static VITEST_FAIL: LazyLock<Regex> =
    LazyLock::new(|| re(r"^ FAIL  (\S+)(?: > (.+?)| \[ .* \])?\s*$"));
static VITEST_FILE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^ [❯✓×↓] (\S+) \((\d+) tests?(?: \| (\d+) failed)?(?: \| (\d+) skipped)?\)")
});
static VITEST_X: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+× (.+?)(?: \d+ms)?$"));
static COUNT: LazyLock<Regex> = LazyLock::new(|| re(r"(\d+) (failed|passed|skipped|todo|pending)"));

/// Parses a vitest run.
pub fn parse_vitest(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    parse_js(output, ctx, Framework::Vitest)
}

/// Parses a jest run.
pub fn parse_jest(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    parse_js(output, ctx, Framework::Jest)
}

fn parse_js(output: &RunnerOutput, ctx: &Ctx, framework: Framework) -> Tally {
    let json = output
        .json_report
        .as_deref()
        .and_then(|j| serde_json::from_str::<Value>(j).ok())
        .or_else(|| json_in_stdout(&output.stdout));
    if let Some(report) = json
        && report.get("testResults").is_some()
    {
        return parse_json_report(&report, ctx);
    }
    // A collected JUnit file, or `--reporter=junit` without an output file (XML on stdout).
    let stdout_xml = output
        .stdout
        .trim_start()
        .starts_with("<?xml")
        .then_some(output.stdout.as_str());
    if let Some(xml) = output.junit_xml.as_deref().or(stdout_xml)
        && let Ok(t) = junit::parse_with(xml, ctx, Some(framework))
    {
        return t;
    }
    let stdout = strip_ansi(&output.stdout);
    let stderr = strip_ansi(&output.stderr);
    match framework {
        Framework::Jest => parse_jest_terminal(&format!("{stdout}\n{stderr}"), ctx),
        _ => parse_vitest_terminal(&stdout, &stderr, ctx),
    }
}

fn json_in_stdout(stdout: &str) -> Option<Value> {
    let start = stdout.find("{\"num")?;
    let text = stdout[start..].trim_end();
    serde_json::from_str(text).ok()
}

/// Parses a jest `--json` or vitest `--reporter=json` report (the same shape).
pub fn parse_json_report(report: &Value, ctx: &Ctx) -> Tally {
    let mut tally = Tally {
        completed: true,
        ..Tally::default()
    };
    let start = report.get("startTime").and_then(Value::as_f64);
    let mut end: Option<f64> = None;
    for file in report
        .get("testResults")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let path = file.get("name").and_then(Value::as_str).unwrap_or_default();
        let rel = ctx.relative(path);
        if let Some(e) = file.get("endTime").and_then(Value::as_f64) {
            end = Some(end.map_or(e, |x: f64| x.max(e)));
        }
        let asserts = file.get("assertionResults").and_then(Value::as_array);
        for a in asserts.into_iter().flatten() {
            let mut name = rel.clone();
            for t in a
                .get("ancestorTitles")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                name.push_str(" > ");
                name.push_str(t.as_str().unwrap_or_default());
            }
            name.push_str(" > ");
            name.push_str(a.get("title").and_then(Value::as_str).unwrap_or_default());
            let duration = a
                .get("duration")
                .and_then(Value::as_f64)
                .map(|d| d.round() as u64);
            let status = a.get("status").and_then(Value::as_str).unwrap_or_default();
            let outcome = match status {
                "passed" => nuvira_api::TestOutcome::Passed,
                "failed" => nuvira_api::TestOutcome::Failed,
                _ => nuvira_api::TestOutcome::Skipped,
            };
            tally.case(name.clone(), Some(rel.clone()), outcome, duration);
            match status {
                "passed" => tally.passed += 1,
                "failed" => {
                    let messages: Vec<String> = a
                        .get("failureMessages")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|m| m.as_str())
                        .map(|m| strip_ansi(m).into_owned())
                        .collect();
                    let text = messages.join("\n");
                    let mut f =
                        TestFailure::new(name, message_of(&text)).with_output(cap_output(&text));
                    if let Some((file, line)) = js_frame_location(&text, Some(&rel), ctx) {
                        f = f.at(file, Some(line));
                    } else {
                        f = f.at(rel.clone(), None);
                    }
                    tally.fail(f);
                }
                _ => tally.skipped += 1,
            }
        }
        let message = file
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let suite_failed = file.get("status").and_then(Value::as_str) == Some("failed");
        if suite_failed && asserts.is_none_or(Vec::is_empty) && !message.trim().is_empty() {
            tally.fail(suite_failure(&rel, &strip_ansi(message), ctx));
        }
    }
    if let (Some(s), Some(e)) = (start, end)
        && e >= s
    {
        tally.duration_ms = (e - s).round() as u64;
    }
    tally
}

/// The message of a failure text: its first line, with the next one when the first is just
/// an introduction (`Transform failed with 1 error:`).
fn message_of(text: &str) -> String {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("● "));
    let first = lines.next().unwrap_or("failed").to_owned();
    if first.ends_with(':')
        && let Some(next) = lines.next()
    {
        return format!("{first} {next}");
    }
    first
}

/// A test file that failed to run: named after the file, located in it where possible.
fn suite_failure(rel: &str, text: &str, ctx: &Ctx) -> TestFailure {
    let mut f =
        TestFailure::new(rel, message_of(text)).with_output(cap_output(text.trim_matches('\n')));
    let line = js_frame_location(text, Some(rel), ctx)
        .filter(|(file, _)| file == rel)
        .map(|(_, l)| l)
        .or_else(|| {
            ANY_LOCATION
                .captures_iter(text)
                .find(|c| ctx.relative(&c[1]) == rel)
                .and_then(|c| c[2].parse().ok())
        })
        .or_else(|| {
            text.lines()
                .find_map(|l| CODE_FRAME.captures(l).and_then(|c| c[1].parse().ok()))
        });
    f = f.at(rel, line);
    f
}

/// Parses jest's default terminal output (normally all on stderr).
pub fn parse_jest_terminal(text: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut file: Option<String> = None;
    let mut blocks: Vec<(String, String, String)> = Vec::new(); // (file, title, body)
    let mut in_block = false;
    for line in text.lines() {
        if let Some(caps) = JEST_FILE.captures(line) {
            file = Some(ctx.relative(&caps[2]));
            in_block = false;
            continue;
        }
        if let Some(caps) = JEST_TESTS.captures(line) {
            tally.completed = true;
            in_block = false;
            for c in COUNT.captures_iter(&caps[1]) {
                let n: u32 = c[1].parse().unwrap_or(0);
                match &c[2] {
                    "passed" => tally.passed += n,
                    "failed" => tally.failed += n,
                    _ => tally.skipped += n,
                }
            }
            continue;
        }
        if let Some(caps) = JEST_TIME.captures(line) {
            tally.duration_ms = secs_to_ms(&caps[1]).unwrap_or(0);
            continue;
        }
        if line.starts_with("Test Suites:")
            || line.starts_with("Snapshots:")
            || line.starts_with("Ran all test suites")
        {
            in_block = false;
            continue;
        }
        if let Some(caps) = JEST_BULLET.captures(line)
            && let Some(f) = &file
        {
            blocks.push((f.clone(), caps[1].trim().to_owned(), String::new()));
            in_block = true;
            continue;
        }
        if in_block && let Some((_, _, body)) = blocks.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    let mut test_failures = 0;
    for (file, title, body) in blocks {
        if title == "Test suite failed to run" {
            tally.fail(suite_failure(&file, &body, ctx));
            continue;
        }
        test_failures += 1;
        let name = format!("{file} > {}", title.replace(" › ", " > "));
        let mut f = TestFailure::new(name, message_of(&body))
            .with_output(cap_output(body.trim_matches('\n')));
        let loc = js_frame_location(&body, Some(&file), ctx);
        f = match loc {
            Some((lf, l)) => f.at(lf, Some(l)),
            None => f.at(file, None),
        };
        tally.failures.push(f);
    }
    if !tally.completed {
        tally.failed += test_failures;
    }
    tally
}

/// Parses vitest's default terminal output (summary on stdout, failure details on stderr).
pub fn parse_vitest_terminal(stdout: &str, stderr: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut partial = (0u32, 0u32, 0u32);
    let mut crossed: Vec<(String, String, String)> = Vec::new(); // (file, test, message)
    let mut file_of_line: Option<String> = None;
    let mut lines = stdout.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(caps) = VITEST_TESTS.captures(line) {
            tally.completed = true;
            for c in COUNT.captures_iter(&caps[1]) {
                let n: u32 = c[1].parse().unwrap_or(0);
                match &c[2] {
                    "passed" => tally.passed += n,
                    "failed" => tally.failed += n,
                    _ => tally.skipped += n,
                }
            }
            continue;
        }
        if let Some(caps) = VITEST_DURATION.captures(line) {
            let v: f64 = caps[1].parse().unwrap_or(0.0);
            tally.duration_ms = if &caps[2] == "s" {
                (v * 1000.0).round() as u64
            } else {
                v.round() as u64
            };
            continue;
        }
        if let Some(caps) = VITEST_FILE_LINE.captures(line) {
            let n: u32 = caps[2].parse().unwrap_or(0);
            let failed: u32 = caps
                .get(3)
                .and_then(|m| m.as_str().parse().ok())
                .unwrap_or(0);
            let skipped: u32 = caps
                .get(4)
                .and_then(|m| m.as_str().parse().ok())
                .unwrap_or(0);
            partial.0 += n.saturating_sub(failed + skipped);
            partial.1 += failed;
            partial.2 += skipped;
            file_of_line = Some(ctx.relative(&caps[1]));
            continue;
        }
        if let Some(caps) = VITEST_X.captures(line)
            && let Some(file) = &file_of_line
        {
            let message = lines
                .peek()
                .and_then(|l| l.trim_start().strip_prefix("→ "))
                .map(str::to_owned)
                .unwrap_or_default();
            crossed.push((file.clone(), caps[1].to_owned(), message));
        }
    }
    // Failure details from stderr.
    let mut section = "";
    let mut blocks: Vec<(bool, String, Option<String>, String)> = Vec::new(); // (suite?, file, test, body)
    for line in stderr.lines() {
        if let Some(caps) = VITEST_SECTION.captures(line) {
            section = if &caps[1] == "Suites" {
                "suites"
            } else {
                "tests"
            };
            continue;
        }
        if line.starts_with('⎯') {
            continue;
        }
        if let Some(caps) = VITEST_FAIL.captures(line) {
            blocks.push((
                section == "suites",
                ctx.relative(&caps[1]),
                caps.get(2).map(|m| m.as_str().to_owned()),
                String::new(),
            ));
            continue;
        }
        if let Some((_, _, _, body)) = blocks.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if !tally.completed {
        tally.passed = partial.0;
        tally.failed = partial.1;
        tally.skipped = partial.2;
    }
    let have_test_details = blocks.iter().any(|b| !b.0);
    for (suite, file, test, body) in blocks {
        if suite {
            tally.fail(suite_failure(&file, &body, ctx));
            continue;
        }
        let name = match &test {
            Some(t) => format!("{file} > {t}"),
            None => file.clone(),
        };
        let mut f = TestFailure::new(name, message_of(&body))
            .with_output(cap_output(body.trim_matches('\n')));
        f = match js_frame_location(&body, Some(&file), ctx) {
            Some((lf, l)) => f.at(lf, Some(l)),
            None => f.at(file, None),
        };
        tally.failures.push(f);
    }
    if !have_test_details {
        for (file, test, message) in crossed {
            let message = if message.is_empty() {
                first_line("failed")
            } else {
                message
            };
            tally
                .failures
                .push(TestFailure::new(format!("{file} > {test}"), message).at(file, None));
        }
    }
    tally
}
