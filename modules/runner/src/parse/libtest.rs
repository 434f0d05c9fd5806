//! libtest (the `cargo test` harness): plain output and the JSON format
//! (`-Z unstable-options --format json`, also what nextest prints with `--message-format
//! libtest-json`). Each test binary (lib, every integration test, doctests) is one suite; a
//! suite that started and never printed its `test result:` line (killed, crashed) leaves the
//! run incomplete, with the tests that were running as failures where their names are known
//! (JSON `started` events; in plain output, libtest's `test x has been running for over 60
//! seconds` note).

use super::{
    Ctx, RunnerOutput, Tally, cap_output, diagnostics, re, rust_panic_location, rust_panic_message,
    secs_to_ms, strip_ansi,
};
use nuvira_api::TestFailure;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

static TEST_LINE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^test (.+?) \.\.\. (ok|FAILED|ignored(?:, .*)?|bench:.*)$"));
static RESULT_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; \d+ filtered out(?:; finished in ([\d.]+)s)?",
    )
});
static RUNNING_LINE: LazyLock<Regex> = LazyLock::new(|| re(r"^running (\d+) tests?$"));
static SLOW_LINE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^test (.+?) has been running for over \d+ seconds$"));

/// Parses a `cargo test` run: libtest JSON on stdout when present, else the plain output;
/// rustc errors on stderr become failures.
pub fn parse_cargo(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    let stdout = strip_ansi(&output.stdout);
    let mut tally = if has_json_events(&stdout) {
        parse_json(&stdout, ctx)
    } else {
        parse_plain(&stdout, ctx)
    };
    let diags = diagnostics::parse_rustc(&strip_ansi(&output.stderr), ctx);
    if !diags.is_empty() {
        tally.add_diagnostics(diags);
        tally.completed = false;
    }
    tally
}

/// Whether `text` holds libtest JSON events.
pub fn has_json_events(text: &str) -> bool {
    text.lines().take(50).any(|l| {
        let l = l.trim_start();
        l.starts_with('{') && l.contains("\"type\"") && l.contains("\"suite\"")
    })
}

/// Parses libtest's plain output (stdout of `cargo test`).
pub fn parse_plain(stdout: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut open_suite: Option<(u32, u32)> = None; // (announced, finished so far)
    let mut suites_seen = 0u32;
    let mut failed_names: Vec<String> = Vec::new();
    let mut outputs: BTreeMap<String, String> = BTreeMap::new();
    let mut current_block: Option<(String, String)> = None;
    let mut pending: (u32, u32, u32) = (0, 0, 0);
    // Tests of the open suite libtest said were running long, and have not ended yet.
    let mut slow: Vec<String> = Vec::new();
    for line in stdout.lines() {
        if let Some(caps) = SLOW_LINE.captures(line) {
            if open_suite.is_some() && !slow.iter().any(|n| n == &caps[1]) {
                slow.push(caps[1].to_owned());
            }
            continue;
        }
        if let Some(caps) = RUNNING_LINE.captures(line) {
            close_block(&mut current_block, &mut outputs);
            if let Some((announced, done)) = open_suite.take() {
                // Previous suite never printed its result line.
                tally.passed += pending.0;
                tally.skipped += pending.2;
                tally_unfinished(&mut tally, announced.saturating_sub(done), &mut slow);
            }
            slow.clear();
            open_suite = Some((caps[1].parse().unwrap_or(0), 0));
            suites_seen += 1;
            pending = (0, 0, 0);
            continue;
        }
        if let Some(caps) = TEST_LINE.captures(line) {
            if let Some(s) = open_suite.as_mut() {
                s.1 += 1;
            }
            slow.retain(|n| n != &caps[1]);
            let outcome = match &caps[2] {
                "ok" => {
                    pending.0 += 1;
                    nuvira_api::TestOutcome::Passed
                }
                "FAILED" => {
                    pending.1 += 1;
                    failed_names.push(caps[1].to_owned());
                    nuvira_api::TestOutcome::Failed
                }
                s if s.starts_with("ignored") => {
                    pending.2 += 1;
                    nuvira_api::TestOutcome::Skipped
                }
                _ => {
                    pending.0 += 1;
                    nuvira_api::TestOutcome::Passed
                }
            };
            tally.case(caps[1].to_owned(), None, outcome, None);
            continue;
        }
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|l| l.strip_suffix(" stdout ----"))
        {
            close_block(&mut current_block, &mut outputs);
            current_block = Some((name.to_owned(), String::new()));
            continue;
        }
        if line == "failures:" {
            close_block(&mut current_block, &mut outputs);
            continue;
        }
        if let Some(caps) = RESULT_LINE.captures(line) {
            close_block(&mut current_block, &mut outputs);
            let n = |i: usize| caps[i].parse::<u32>().unwrap_or(0);
            tally.passed += n(1) + n(4);
            tally.failed += n(2);
            tally.skipped += n(3);
            if let Some(ms) = caps.get(5).and_then(|m| secs_to_ms(m.as_str())) {
                tally.duration_ms += ms;
            }
            open_suite = None;
            pending = (0, 0, 0);
            slow.clear();
            continue;
        }
        if let Some((_, text)) = current_block.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    close_block(&mut current_block, &mut outputs);
    if let Some((announced, done)) = open_suite {
        tally.passed += pending.0;
        tally.skipped += pending.2;
        // Failed tests of the unfinished suite are counted as failures below.
        tally.failed += pending.1;
        tally_unfinished(&mut tally, announced.saturating_sub(done), &mut slow);
    } else {
        tally.completed = suites_seen > 0;
    }
    // `tally.failed` already counts failures from result lines; attach the details.
    for name in failed_names {
        let text = outputs.remove(&name).unwrap_or_default();
        tally.failures.push(rust_failure(&name, &text, ctx));
    }
    tally
}

/// Records the `n` tests of a suite that never ended: by name those libtest said were running
/// long, the rest (not started yet, or running without a note) only when none is named.
fn tally_unfinished(tally: &mut Tally, n: u32, slow: &mut Vec<String>) {
    if slow.is_empty() {
        tally.unfinished_unnamed += n.max(1);
    } else {
        tally.unfinished.append(slow);
    }
}

fn close_block(block: &mut Option<(String, String)>, outputs: &mut BTreeMap<String, String>) {
    if let Some((name, text)) = block.take() {
        outputs.insert(name, text.trim_matches('\n').to_owned());
    }
}

/// A failure for a Rust test from its captured output (panic message and location).
pub(crate) fn rust_failure(name: &str, text: &str, ctx: &Ctx) -> TestFailure {
    let message = rust_panic_message(text).unwrap_or_else(|| {
        let first = super::first_line(text);
        if first.is_empty() {
            "test failed".to_owned()
        } else {
            first
        }
    });
    let mut failure = TestFailure::new(name, message).with_output(cap_output(text));
    if let Some((file, line)) = rust_panic_location(text, ctx) {
        failure = failure.at(file, Some(line));
    }
    failure
}

/// Parses libtest JSON events (one object per line; other lines are ignored). Names in
/// nextest's `binary$test` form are shown as `binary test`.
pub fn parse_json(text: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut running: BTreeSet<String> = BTreeSet::new();
    let mut suite_open = false;
    let mut suites = 0u32;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let kind = ev.get("type").and_then(|v| v.as_str()).unwrap_or_default();
        let event = ev.get("event").and_then(|v| v.as_str()).unwrap_or_default();
        let name = ev.get("name").and_then(|v| v.as_str()).map(display_name);
        match (kind, event) {
            ("suite", "started") => {
                suite_open = true;
                suites += 1;
            }
            ("suite", "ok" | "failed") => {
                suite_open = false;
                if let Some(ms) = ev.get("exec_time").and_then(serde_json::Value::as_f64) {
                    tally.duration_ms += (ms * 1000.0).round() as u64;
                }
            }
            ("test", "started") => {
                if let Some(n) = name {
                    running.insert(n);
                }
            }
            ("test", "ok") => {
                tally.passed += 1;
                if let Some(n) = name {
                    running.remove(&n);
                    tally.case(n, None, nuvira_api::TestOutcome::Passed, exec_ms(&ev));
                }
            }
            ("test", "ignored") => {
                tally.skipped += 1;
                if let Some(n) = name {
                    running.remove(&n);
                    tally.case(n, None, nuvira_api::TestOutcome::Skipped, None);
                }
            }
            ("test", "failed") => {
                let n = name.unwrap_or_else(|| "unnamed test".to_owned());
                running.remove(&n);
                let out = ev
                    .get("stdout")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                let out = strip_ansi(out);
                let failure = rust_failure(&n, out.trim_matches('\n'), ctx);
                tally.case(
                    failure.name.clone(),
                    None,
                    nuvira_api::TestOutcome::Failed,
                    exec_ms(&ev),
                );
                tally.fail(failure);
            }
            ("bench", _) => tally.passed += 1,
            _ => {}
        }
    }
    tally.unfinished = running.into_iter().collect();
    tally.completed = suites > 0 && !suite_open;
    tally
}

/// `crate::binary$test` → `crate::binary test`, and `crate::crate$test` → `crate test` (the
/// way nextest prints names).
pub(crate) fn display_name(raw: &str) -> String {
    match raw.split_once('$') {
        Some((binary, test)) => {
            let binary = match binary.split_once("::") {
                Some((a, b)) if a == b => a,
                _ => binary,
            };
            format!("{binary} {test}")
        }
        None => raw.to_owned(),
    }
}

/// A libtest JSON event's `exec_time` (seconds), in milliseconds.
fn exec_ms(ev: &serde_json::Value) -> Option<u64> {
    ev.get("exec_time")
        .and_then(serde_json::Value::as_f64)
        .map(|s| (s * 1000.0).round() as u64)
}
