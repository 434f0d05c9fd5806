//! cargo-nextest: its JUnit report when one was collected, else its human output on stderr
//! (status lines `FAIL [ 0.006s] (1/4) binary test`, the `Summary [...] N tests run: ...`
//! line), else libtest JSON on stdout (`--message-format libtest-json`). Build errors are rustc
//! diagnostics on stderr.

use super::{Ctx, RunnerOutput, Tally, diagnostics, junit, libtest, re, secs_to_ms, strip_ansi};
use crate::detect::Framework;
use nuvira_api::TestFailure;
use regex::Regex;
use std::sync::LazyLock;

static STATUS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^\s*(PASS|FAIL|SKIP|TIMEOUT|ABORT|LEAK|LEAK-FAIL|FLAKY|SIG[A-Z0-9]+|TRY \d+ [A-Z-]+|RETRY|SLOW|TERMINATING|START|CANCEL)\s+\[[^\]]*\]\s+(?:\([^)]*\)\s+)?(\S+)\s+(.+?)\s*$",
    )
});
static SUMMARY: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*Summary \[\s*([\d.]+)s\]\s+(?:\d+/)?\d+ tests? run: (.*)$"));
static COUNT: LazyLock<Regex> =
    LazyLock::new(|| re(r"(\d+) (passed|failed|timed out|skipped|exec failed)"));

/// Parses a nextest run.
pub fn parse(output: &RunnerOutput, ctx: &Ctx) -> Tally {
    let stderr = strip_ansi(&output.stderr);
    let mut tally = if let Some(xml) = &output.junit_xml
        && let Ok(t) = junit::parse_with(xml, ctx, Some(Framework::Nextest))
    {
        t
    } else {
        let human = parse_human(&stderr, ctx);
        let stdout = strip_ansi(&output.stdout);
        if !human.completed && libtest::has_json_events(&stdout) {
            libtest::parse_json(&stdout, ctx)
        } else {
            human
        }
    };
    let diags = diagnostics::parse_rustc(&stderr, ctx);
    if !diags.is_empty() {
        tally.add_diagnostics(diags);
        tally.completed = false;
    }
    tally
}

fn is_final_failure(status: &str) -> bool {
    matches!(status, "FAIL" | "TIMEOUT" | "ABORT" | "LEAK-FAIL") || status.starts_with("SIG")
}

/// Parses nextest's human output (stderr).
pub fn parse_human(stderr: &str, ctx: &Ctx) -> Tally {
    let mut tally = Tally::default();
    let mut failures: Vec<(String, String, String)> = Vec::new(); // (name, status, output)
    let mut block: Option<usize> = None;
    let mut counted = (0u32, 0u32, 0u32);
    for line in stderr.lines() {
        if let Some(caps) = SUMMARY.captures(line) {
            tally.completed = true;
            tally.duration_ms = secs_to_ms(&caps[1]).unwrap_or(0);
            let (mut p, mut f, mut s) = (0, 0, 0);
            for c in COUNT.captures_iter(&caps[2]) {
                let n: u32 = c[1].parse().unwrap_or(0);
                match &c[2] {
                    "passed" => p += n,
                    "skipped" => s += n,
                    _ => f += n,
                }
            }
            tally.passed = p;
            tally.failed = f;
            tally.skipped = s;
            break;
        }
        if let Some(caps) = STATUS.captures(line) {
            block = None;
            let status = &caps[1];
            let name = format!("{} {}", &caps[2], &caps[3]);
            // `[ 0.006s]`: the test's own time.
            let ms = line
                .split_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .and_then(|(t, _)| t.trim().strip_suffix('s')?.trim().parse::<f64>().ok())
                .map(|secs| (secs * 1000.0).round() as u64);
            match status {
                "PASS" | "LEAK" | "FLAKY" => {
                    counted.0 += 1;
                    tally.case(name.clone(), None, nuvira_api::TestOutcome::Passed, ms);
                }
                "SKIP" => {
                    counted.2 += 1;
                    tally.case(name.clone(), None, nuvira_api::TestOutcome::Skipped, None);
                }
                s if is_final_failure(s) => {
                    counted.1 += 1;
                    if !failures.iter().any(|(n, _, _)| *n == name) {
                        tally.case(name.clone(), None, nuvira_api::TestOutcome::Failed, ms);
                        failures.push((name, status.to_owned(), String::new()));
                        block = Some(failures.len() - 1);
                    }
                }
                _ => {}
            }
            continue;
        }
        if line.trim_start().starts_with('─') && line.trim().chars().all(|c| c == '─') {
            block = None;
            continue;
        }
        if let Some(i) = block
            && let Some(entry) = failures.get_mut(i)
        {
            entry.2.push_str(line.strip_prefix("    ").unwrap_or(line));
            entry.2.push('\n');
        }
    }
    if !tally.completed {
        // No summary: count what the status lines showed.
        tally.passed = counted.0;
        tally.failed = counted.1;
        tally.skipped = counted.2;
    }
    for (name, status, text) in failures {
        let text = text.trim_matches('\n');
        let mut failure = libtest::rust_failure(&name, text, ctx);
        if failure.file.is_none() || status != "FAIL" {
            let why = match status.as_str() {
                "TIMEOUT" => "timed out (nextest slow-timeout)".to_owned(),
                "LEAK-FAIL" => "leaked handles".to_owned(),
                s if s.starts_with("SIG") => format!("killed by {s}"),
                s => s.to_lowercase(),
            };
            if failure.file.is_none() {
                failure = TestFailure::new(name, why).with_output(text);
            }
        }
        tally.failures.push(failure);
    }
    tally
}
