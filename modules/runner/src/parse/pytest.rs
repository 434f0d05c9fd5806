//! pytest: its JUnit report (`--junitxml`) when collected, else its terminal output (default
//! or `-q`): the final `N failed, M passed in Xs` line, the FAILURES / ERRORS sections, and the
//! short test summary's node ids; with `-v`, the `file.py::test PASSED` lines, so a run killed
//! before its summary still counts what finished and names the test that was running (the
//! node id printed with no result). Collection errors (`ERROR collecting x.py`, import errors,
//! syntax errors) are failures; errors count as failed, xpassed as passed, xfailed as skipped.

use super::{Ctx, RunnerOutput, Tally, cap_output, junit, re, secs_to_ms, strip_ansi};
use crate::detect::Framework;
use nuvira_api::TestFailure;
use regex::Regex;
use std::sync::LazyLock;

static SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in ([\d.]+)s(?: \([^)]*\))?\s*=*$")
});
static COUNT: LazyLock<Regex> = LazyLock::new(|| re(r"(\d+) ([a-z]+)"));
static SECTION: LazyLock<Regex> = LazyLock::new(|| re(r"^=+ ([A-Za-z ]+?) =+$"));
static BLOCK_HEADER: LazyLock<Regex> = LazyLock::new(|| re(r"^_{3,} (.+?) _{3,}$"));
static SHORT: LazyLock<Regex> = LazyLock::new(|| re(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$"));
static LOCATION: LazyLock<Regex> = LazyLock::new(|| re(r"^([^\s:][^:]*\.py):(\d+):"));
static PY_FILE: LazyLock<Regex> = LazyLock::new(|| re(r#"File "([^"]+\.py)", line (\d+)"#));
static COLLECTED: LazyLock<Regex> = LazyLock::new(|| re(r"^collected (\d+) items?"));
static VERBOSE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^(\S+\.py::.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: .*?)?\s*(?:\[\s*\d+%\])?$")
});
static VERBOSE_STARTED: LazyLock<Regex> = LazyLock::new(|| re(r"^(\S+\.py::\S.*?)\s*$"));
static PROGRESS: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(?:\S+\.py )?([.FEsxX]+)\s*(?:\[\s*\d+%\])?$"));

/// Parses a pytest run.
pub fn parse(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    if let Some(xml) = &output.junit_xml
        && let Ok(t) = junit::parse_with(xml, ctx, Some(Framework::Pytest))
    {
        return t;
    }
    let text = strip_ansi(&output.stdout);
    let mut tally = parse_terminal(&text, ctx);
    if !tally.completed && tally.failures.is_empty() && tally.unfinished.is_empty() {
        // Crashed before printing anything useful: maybe an error on stderr.
        let err = strip_ansi(&output.stderr);
        if let Some(last) = err.lines().rev().find(|l| !l.trim().is_empty()) {
            let message = if last.contains("No module named pytest") {
                // `python -m pytest` with an interpreter (the project's environment) that
                // lacks pytest.
                format!(
                    "{}: install pytest into the interpreter that ran (`<python> -m pip install pytest`; see the `detected:` line), or pass the command to run",
                    last.trim()
                )
            } else {
                last.trim().to_owned()
            };
            tally.fail(TestFailure::new("pytest", message).with_output(cap_output(&err)));
        }
    }
    tally
}

/// Parses pytest's terminal output.
pub fn parse_terminal(text: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut shorts: Vec<(String, String)> = Vec::new(); // (node id, message)
    let mut section = String::new();
    let mut collected: Option<u32> = None;
    let mut progress = (0u32, 0u32, 0u32);
    let mut verbose = (0u32, 0u32, 0u32);
    let mut verbose_failed: Vec<String> = Vec::new();
    let mut started: Option<String> = None;
    for line in text.lines() {
        if let Some(caps) = SUMMARY.captures(line) {
            tally.completed = true;
            tally.duration_ms = secs_to_ms(&caps[2]).unwrap_or(0);
            for c in COUNT.captures_iter(&caps[1]) {
                let n: u32 = c[1].parse().unwrap_or(0);
                match &c[2] {
                    "passed" | "xpassed" => tally.passed += n,
                    "failed" | "error" | "errors" => tally.failed += n,
                    "skipped" | "xfailed" => tally.skipped += n,
                    _ => {}
                }
            }
            section.clear();
            continue;
        }
        if let Some(caps) = SECTION.captures(line) {
            section = caps[1].trim().to_owned();
            continue;
        }
        if let Some(caps) = COLLECTED.captures(line) {
            collected = caps[1].parse().ok();
            continue;
        }
        match section.as_str() {
            "FAILURES" | "ERRORS" => {
                if let Some(caps) = BLOCK_HEADER.captures(line) {
                    blocks.push((caps[1].to_owned(), String::new()));
                } else if let Some((_, body)) = blocks.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
            "short test summary info" => {
                if let Some(caps) = SHORT.captures(line) {
                    shorts.push((
                        caps[2].to_owned(),
                        caps.get(3)
                            .map(|m| m.as_str().to_owned())
                            .unwrap_or_default(),
                    ));
                }
            }
            "" | "test session starts" => {
                if let Some(caps) = VERBOSE.captures(line) {
                    started = None;
                    match &caps[2] {
                        "PASSED" | "XPASS" => verbose.0 += 1,
                        "FAILED" | "ERROR" => {
                            verbose.1 += 1;
                            verbose_failed.push(caps[1].to_owned());
                        }
                        _ => verbose.2 += 1,
                    }
                } else if let Some(caps) = VERBOSE_STARTED.captures(line) {
                    // `-v` prints the node id when the test starts and its result when it ends.
                    started = Some(caps[1].to_owned());
                } else if let Some(caps) = PROGRESS.captures(line) {
                    for ch in caps[1].chars() {
                        match ch {
                            '.' | 'X' => progress.0 += 1,
                            'F' | 'E' => progress.1 += 1,
                            _ => progress.2 += 1,
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !tally.completed {
        if verbose != (0, 0, 0) || started.is_some() {
            progress = verbose;
        }
        tally.passed = progress.0;
        tally.failed = progress.1;
        tally.skipped = progress.2;
        if let Some(node) = started {
            // Tests after the one that was running never started: not failures.
            tally.unfinished.push(node);
        } else if let Some(n) = collected {
            tally.unfinished_unnamed = n.saturating_sub(progress.0 + progress.1 + progress.2);
        }
        for node in verbose_failed {
            // Killed before pytest printed the FAILURES section.
            if !shorts.iter().any(|(n, _)| *n == node) {
                shorts.push((
                    node,
                    "failed; the run ended before pytest printed the details".to_owned(),
                ));
            }
        }
    }
    let mut used = vec![false; blocks.len()];
    for (node, short_msg) in &shorts {
        let idx = blocks
            .iter()
            .enumerate()
            .position(|(i, (title, _))| !used[i] && title_matches(title, node));
        let body = idx.map(|i| {
            used[i] = true;
            blocks[i].1.as_str()
        });
        tally
            .failures
            .push(failure(node, body.unwrap_or_default(), short_msg, ctx));
    }
    for (i, (title, body)) in blocks.iter().enumerate() {
        if !used[i] {
            let name = title.strip_prefix("ERROR collecting ").unwrap_or(title);
            tally.failures.push(failure(name, body, "", ctx));
        }
    }
    tally
}

fn title_matches(title: &str, node: &str) -> bool {
    if let Some(file) = title.strip_prefix("ERROR collecting ") {
        return file == node;
    }
    let title = title
        .strip_prefix("ERROR at setup of ")
        .or_else(|| title.strip_prefix("ERROR at teardown of "))
        .unwrap_or(title);
    let test_part = node.split_once("::").map_or(node, |(_, rest)| rest);
    test_part.replace("::", ".") == title || node.ends_with(&format!("::{title}"))
}

fn failure(node: &str, body: &str, short_msg: &str, ctx: &Ctx) -> TestFailure {
    let test_file = node.split("::").next().filter(|f| f.ends_with(".py"));
    let message = error_message(body).unwrap_or_else(|| short_msg.to_owned());
    let message = if message.is_empty() {
        "failed".to_owned()
    } else {
        message
    };
    let mut f = TestFailure::new(node, message).with_output(cap_output(body.trim_matches('\n')));
    if let Some((file, line)) = failure_location(body, test_file, ctx) {
        f = f.at(file, Some(line));
    } else if let Some(file) = test_file {
        f = f.at(file, None);
    }
    f
}

/// The failure's message: the first `E   SomeError: ...` line, else the first `E` line.
pub(crate) fn error_message(body: &str) -> Option<String> {
    let e_lines: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix('E'))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let is_error = |l: &&str| {
        let head = l.split(':').next().unwrap_or_default();
        !head.contains(' ')
            && (head.ends_with("Error") || head.ends_with("Exception") || head.ends_with("Exit"))
    };
    e_lines
        .iter()
        .find(|l| is_error(l))
        .or_else(|| e_lines.first())
        .map(|l| (*l).to_owned())
}

/// Where a pytest failure happened: the first `file.py:LINE:` (or `File "...", line N`) in the
/// test's own file, else the last location outside site-packages.
pub(crate) fn failure_location(
    body: &str,
    test_file: Option<&str>,
    ctx: &Ctx,
) -> Option<(String, u32)> {
    let mut candidates: Vec<(String, u32)> = Vec::new();
    for line in body.lines() {
        let line = line.strip_prefix('E').map_or(line, str::trim_start);
        if let Some(c) = LOCATION.captures(line) {
            candidates.push((ctx.relative(&c[1]), c[2].parse().unwrap_or(0)));
        } else if let Some(c) = PY_FILE.captures(line) {
            candidates.push((ctx.relative(&c[1]), c[2].parse().unwrap_or(0)));
        }
    }
    if let Some(tf) = test_file
        && let Some(hit) = candidates.iter().find(|(f, _)| f == tf)
    {
        return Some(hit.clone());
    }
    candidates.into_iter().rev().find(|(f, l)| {
        *l > 0 && !f.contains("site-packages") && !f.starts_with('/') && !f.starts_with('<')
    })
}

/// Splits a pytest JUnit `classname` (`tests.test_x.TestFoo`) into the test file
/// (`tests/test_x.py`, confirmed against the failure text when possible) and the class path.
pub(crate) fn classname_to_file(classname: &str, text: &str) -> (Option<String>, String) {
    if classname.is_empty() {
        return (None, String::new());
    }
    let parts: Vec<&str> = classname.split('.').collect();
    for k in (1..=parts.len()).rev() {
        let file = format!("{}.py", parts[..k].join("/"));
        if text.contains(&file) {
            return (Some(file), parts[k..].join("::"));
        }
    }
    // Not in the text: classes are the trailing capitalized parts.
    let k = parts
        .iter()
        .rposition(|p| !p.starts_with(|c: char| c.is_ascii_uppercase()))
        .map_or(parts.len(), |i| i + 1);
    (
        Some(format!("{}.py", parts[..k].join("/"))),
        parts[k..].join("::"),
    )
}
