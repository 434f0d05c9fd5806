//! `python -m unittest` (discover, `-v` or not). unittest writes to stderr:
//!
//! - with `-v`, one line per test: `test_x (pkg.mod.Class.test_x) ... ok` (Python ≥ 3.11;
//!   `(pkg.mod.Class)` before), the status being `ok`, `FAIL`, `ERROR`, `skipped 'why'`,
//!   `expected failure` or `unexpected success` — possibly on a later line when the test
//!   printed something, or never when the run was killed in that test;
//! - without `-v`, a progress line of `.`, `F`, `E`, `s`, `x`, `u`;
//! - a `FAIL: name (id)` / `ERROR: name (id)` block with its traceback per failure (a module
//!   that failed to import is an `ERROR` of `unittest.loader._FailedTest`);
//! - `Ran N tests in Xs`, then `OK (skipped=1)` or `FAILED (failures=1, errors=1, skipped=2,
//!   expected failures=1, unexpected successes=1)`.
//!
//! Counting follows the other parsers: skipped and expected failures are `skipped`; failures,
//! errors and unexpected successes (which make unittest exit 1) are `failed`.

use super::{Ctx, RunnerOutput, Tally, cap_output, re, secs_to_ms, strip_ansi};
use nuvira_api::TestFailure;
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::LazyLock;

static VERBOSE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(\w+) \(([\w.]+)\)(?:$|\n| \.\.\. ?(.*)$)"));
static BLOCK: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\S+) \(([\w.]+)\)"));
static RAN: LazyLock<Regex> = LazyLock::new(|| re(r"^Ran (\d+) tests? in ([\d.]+)s$"));
static RESULT: LazyLock<Regex> = LazyLock::new(|| re(r"^(OK|FAILED)(?: \((.*)\))?$"));
static PROGRESS: LazyLock<Regex> = LazyLock::new(|| re(r"^[.FEsxu]+$"));
static PY_FILE: LazyLock<Regex> = LazyLock::new(|| re(r#"^\s*File "([^"]+)", line (\d+)"#));
const RULE_EQ: &str = "======================================================================";
const RULE_DASH: &str = "----------------------------------------------------------------------";

/// Parses a unittest run (stderr, where unittest reports; stdout when stderr has nothing).
pub fn parse(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    let stderr = strip_ansi(&output.stderr);
    let stdout = strip_ansi(&output.stdout);
    let tally = parse_text(&stderr, ctx);
    if !tally.completed && tally.passed + tally.failed + tally.skipped == 0 {
        let other = parse_text(&stdout, ctx);
        if other.completed || other.passed + other.failed + other.skipped > 0 {
            return other;
        }
    }
    tally
}

/// The full test id from a verbose line's name and parenthesis (`pkg.mod.Class.test_x`).
fn full_id(name: &str, paren: &str) -> String {
    if paren == name || paren.ends_with(&format!(".{name}")) {
        paren.to_owned()
    } else {
        format!("{paren}.{name}")
    }
}

/// The test file of a test id: the longest dotted prefix that names a module
/// (`tests.test_alpha.AddTest.test_x` → `tests/test_alpha.py`), confirmed against the text.
fn file_of(id: &str, body: &str) -> Option<String> {
    let parts: Vec<&str> = id.split('.').collect();
    for k in (1..=parts.len()).rev() {
        let file = format!("{}.py", parts[..k].join("/"));
        if body.contains(&file) {
            return Some(file);
        }
    }
    None
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pass,
    Fail,
    Skip,
}

fn status_of(word: &str) -> Option<Status> {
    let word = word.trim();
    if word == "ok" || word.starts_with("ok ") {
        Some(Status::Pass)
    } else if word == "FAIL" || word == "ERROR" || word == "unexpected success" {
        Some(Status::Fail)
    } else if word.starts_with("skipped") || word == "expected failure" {
        Some(Status::Skip)
    } else {
        None
    }
}

/// Parses unittest's report text.
pub fn parse_text(text: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut verbose = (0u32, 0u32, 0u32);
    let mut verbose_failed: Vec<String> = Vec::new();
    let mut progress = (0u32, 0u32, 0u32);
    let mut running: Option<String> = None;
    let mut blocks: Vec<(String, String, String)> = Vec::new(); // (kind, id, body)
    let mut in_block = false;
    let mut ran: Option<u32> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line == RULE_EQ {
            in_block = false;
            if let Some(header) = lines.peek()
                && let Some(c) = BLOCK.captures(header)
            {
                let id = if &c[3] == "unittest.loader._FailedTest"
                    || c[3].starts_with("unittest.loader._FailedTest.")
                {
                    c[2].to_owned()
                } else {
                    full_id(&c[2], &c[3])
                };
                blocks.push((c[1].to_owned(), id, String::new()));
                lines.next();
                if lines.peek() == Some(&RULE_DASH) {
                    lines.next();
                }
                in_block = true;
            }
            continue;
        }
        if line == RULE_DASH {
            // The rule before `Ran N tests` ends the last block.
            if lines.peek().is_some_and(|next| RAN.is_match(next)) {
                in_block = false;
                continue;
            }
        }
        if let Some(c) = RAN.captures(line) {
            ran = c[1].parse().ok();
            tally.duration_ms = secs_to_ms(&c[2]).unwrap_or(0);
            in_block = false;
            continue;
        }
        if ran.is_some()
            && let Some(c) = RESULT.captures(line)
        {
            tally.completed = true;
            let mut counts = (0u32, 0u32, 0u32, 0u32, 0u32);
            for part in c.get(2).map_or("", |m| m.as_str()).split(", ") {
                let Some((key, n)) = part.split_once('=') else {
                    continue;
                };
                let n: u32 = n.trim().parse().unwrap_or(0);
                match key.trim() {
                    "failures" => counts.0 += n,
                    "errors" => counts.1 += n,
                    "skipped" => counts.2 += n,
                    "expected failures" => counts.3 += n,
                    "unexpected successes" => counts.4 += n,
                    _ => {}
                }
            }
            let total = ran.unwrap_or(0);
            tally.failed = counts.0 + counts.1 + counts.4;
            tally.skipped = counts.2 + counts.3;
            tally.passed = total.saturating_sub(tally.failed + tally.skipped);
            continue;
        }
        if in_block {
            if let Some((_, _, body)) = blocks.last_mut() {
                body.push_str(line);
                body.push('\n');
            }
            continue;
        }
        if let Some(c) = VERBOSE.captures(line) {
            let id = full_id(&c[1], &c[2]);
            match c.get(3).map(|m| m.as_str()) {
                Some(rest) if !rest.trim().is_empty() => match status_of(rest) {
                    Some(s) => {
                        count(&mut verbose, s);
                        record(&mut tally, &id, s);
                        if s == Status::Fail {
                            verbose_failed.push(id);
                        }
                        running = None;
                    }
                    // Output the test printed, on the same line: the status comes later.
                    None => running = Some(id),
                },
                _ => running = Some(id),
            }
            continue;
        }
        if let Some(id) = running.clone() {
            // The status of a test that printed something, or whose docstring was shown.
            let tail = line.rsplit(" ... ").next().unwrap_or(line);
            if let Some(s) = status_of(tail)
                && (tail.len() == line.len() || line.ends_with(tail))
            {
                count(&mut verbose, s);
                record(&mut tally, &id, s);
                if s == Status::Fail {
                    verbose_failed.push(id);
                }
                running = None;
            }
            continue;
        }
        if PROGRESS.is_match(line) {
            for ch in line.chars() {
                count(
                    &mut progress,
                    match ch {
                        '.' => Status::Pass,
                        'F' | 'E' | 'u' => Status::Fail,
                        _ => Status::Skip,
                    },
                );
            }
        }
    }
    if !tally.completed {
        let seen = if verbose != (0, 0, 0) {
            verbose
        } else {
            progress
        };
        (tally.passed, tally.failed, tally.skipped) = seen;
        if let Some(id) = running {
            tally.unfinished.push(id);
        }
    }
    let mut named: BTreeSet<String> = BTreeSet::new();
    for (kind, id, body) in &blocks {
        named.insert(id.clone());
        tally.failures.push(block_failure(kind, id, body, ctx));
    }
    for id in verbose_failed {
        if !named.contains(&id) {
            // Killed before unittest printed the details.
            tally.failures.push(
                TestFailure::new(
                    id.clone(),
                    "failed; the run ended before unittest printed the details",
                )
                .at_opt(file_from_id(&id)),
            );
        }
    }
    tally
}

/// A test `-v` gave a status: a case named by its id, classed by its module and class.
fn record(tally: &mut Tally, id: &str, s: Status) {
    let outcome = match s {
        Status::Pass => nuvira_api::TestOutcome::Passed,
        Status::Fail => nuvira_api::TestOutcome::Failed,
        Status::Skip => nuvira_api::TestOutcome::Skipped,
    };
    let classname = id.rsplit_once('.').map(|(class, _)| class.to_owned());
    tally.case(id, classname, outcome, None);
}

fn count(acc: &mut (u32, u32, u32), s: Status) {
    match s {
        Status::Pass => acc.0 += 1,
        Status::Fail => acc.1 += 1,
        Status::Skip => acc.2 += 1,
    }
}

/// `tests.test_alpha.AddTest.test_x` → `tests/test_alpha.py` by the test-module naming rule
/// (the last part starting with `test`).
fn file_from_id(id: &str) -> Option<String> {
    let parts: Vec<&str> = id.split('.').collect();
    let upper = |p: &str| p.starts_with(|c: char| c.is_ascii_uppercase());
    let module = (0..parts.len()).rev().find(|&i| {
        parts[i].starts_with("test")
            && match parts.get(i + 1) {
                Some(next) => upper(next),
                // Last: a module only when it does not follow a class (then it is a method).
                None => i == 0 || !upper(parts[i - 1]),
            }
    })?;
    Some(format!("{}.py", parts[..=module].join("/")))
}

trait AtOpt {
    fn at_opt(self, file: Option<String>) -> Self;
}

impl AtOpt for TestFailure {
    fn at_opt(self, file: Option<String>) -> Self {
        match file {
            Some(f) => self.at(f, None),
            None => self,
        }
    }
}

fn block_failure(kind: &str, id: &str, body: &str, ctx: &Ctx) -> TestFailure {
    let body = body.trim_end_matches('\n');
    let frames: Vec<(String, u32)> = body
        .lines()
        .filter_map(|l| PY_FILE.captures(l))
        .map(|c| (ctx.relative(&c[1]), c[2].parse().unwrap_or(0)))
        .collect();
    let test_file = file_of(
        id,
        &frames
            .iter()
            .map(|(f, _)| f.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    // The last frame in the test's own file, else the last one in the workspace.
    let location = test_file
        .as_ref()
        .and_then(|tf| frames.iter().rev().find(|(f, _)| f == tf))
        .or_else(|| {
            frames
                .iter()
                .rev()
                .find(|(f, l)| *l > 0 && !f.starts_with('/') && !f.starts_with('<'))
        })
        .cloned();
    // The exception line: the last unindented line that is not the traceback header.
    let message = body
        .lines()
        .rev()
        .map(str::trim_end)
        .find(|l| {
            !l.is_empty() && !l.starts_with(char::is_whitespace) && !l.starts_with("Traceback ")
        })
        .map(str::to_owned)
        .unwrap_or_else(|| match kind {
            "UNEXPECTED SUCCESS" => "unexpected success (marked as an expected failure)".to_owned(),
            "ERROR" => "error".to_owned(),
            _ => "failed".to_owned(),
        });
    let f = TestFailure::new(id, message).with_output(cap_output(body));
    match location {
        Some((file, line)) => f.at(file, Some(line)),
        None => f.at_opt(test_file.or_else(|| file_from_id(id))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_test_files() {
        assert_eq!(
            file_from_id("tests.test_alpha.AddTest.test_x").as_deref(),
            Some("tests/test_alpha.py")
        );
        assert_eq!(
            file_from_id("tests.test_broken").as_deref(),
            Some("tests/test_broken.py")
        );
        assert_eq!(file_from_id("mod.Class.helper"), None);
        assert_eq!(full_id("test_x", "m.C"), "m.C.test_x");
        assert_eq!(full_id("test_x", "m.C.test_x"), "m.C.test_x");
    }

    #[test]
    fn verbose_output_gives_every_test_as_a_case() {
        use nuvira_api::TestOutcome::{Failed, Passed, Skipped};
        let text = include_str!("../../tests/fixtures/unittest/basic-verbose.stderr");
        let tally = parse_text(text, &Ctx::new(None));
        let cases: Vec<(&str, Option<&str>, nuvira_api::TestOutcome)> = tally
            .cases
            .iter()
            .map(|c| (c.name.as_str(), c.classname.as_deref(), c.outcome))
            .collect();
        assert_eq!(
            cases,
            [
                (
                    "tests.test_alpha.AddTest.test_add_assertion_fails",
                    Some("tests.test_alpha.AddTest"),
                    Failed
                ),
                (
                    "tests.test_alpha.AddTest.test_adds",
                    Some("tests.test_alpha.AddTest"),
                    Passed
                ),
                (
                    "tests.test_alpha.AddTest.test_skipped",
                    Some("tests.test_alpha.AddTest"),
                    Skipped
                ),
                (
                    "tests.test_beta.ParseTest.test_expected_to_fail",
                    Some("tests.test_beta.ParseTest"),
                    Skipped
                ),
                (
                    "tests.test_beta.ParseTest.test_parse_raises",
                    Some("tests.test_beta.ParseTest"),
                    Failed
                ),
                (
                    "tests.test_beta.ParseTest.test_parses",
                    Some("tests.test_beta.ParseTest"),
                    Passed
                ),
                (
                    "tests.test_beta.ParseTest.test_skips_itself",
                    Some("tests.test_beta.ParseTest"),
                    Skipped
                ),
            ]
        );
        // The failures are named as their cases.
        for f in &tally.failures {
            assert!(tally.cases.iter().any(|c| c.name == f.name), "{f:?}");
        }
    }
}
