//! Compiler diagnostics that stop tests from running: rustc (`error[E0308]: ...` followed by
//! `--> file:line:col`, or cargo's `--message-format=json`), the go compiler
//! (`file.go:12:30: msg` under a `# package` header), and tsc (`file(5,37): error TS2345: msg`
//! or the `--pretty` form `file:5:37 - error TS2345: msg`). Each error becomes one
//! [`TestFailure`] named `compile error`, with its file and line; warnings are ignored.

use super::{Ctx, re, strip_ansi};
use nuvira_api::TestFailure;
use regex::Regex;
use std::sync::LazyLock;

static RUSTC_HEADER: LazyLock<Regex> = LazyLock::new(|| re(r"^error(\[E\d{4}\])?: (.+)$"));
static RUSTC_ARROW: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*--> (.+?):(\d+):(\d+)\s*$"));
static GO_ERROR: LazyLock<Regex> = LazyLock::new(|| re(r"^(\S+\.go):(\d+):(?:(\d+):)? (.+)$"));
static TSC_PLAIN: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(.+?)\((\d+),(\d+)\): error (TS\d+): (.+)$"));
static TSC_PRETTY: LazyLock<Regex> =
    LazyLock::new(|| re(r"^(.+?):(\d+):(\d+) - error (TS\d+): (.+)$"));

/// The name given to compiler-error failures.
pub const COMPILE_ERROR: &str = "compile error";

/// rustc errors in cargo's human output (stderr). Errors without a source location (`error:
/// could not compile ...`) are summaries, not diagnostics, and are skipped.
pub fn parse_rustc(text: &str, ctx: &Ctx) -> Vec<TestFailure> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(caps) = RUSTC_HEADER.captures(lines[i]) else {
            i += 1;
            continue;
        };
        let code = caps.get(1).map(|m| m.as_str()).unwrap_or_default();
        let message = format!("error{code}: {}", &caps[2]);
        // The block runs to the next unindented diagnostic header or summary line.
        let mut end = i + 1;
        while end < lines.len() {
            let l = lines[end];
            if l.starts_with("error")
                || l.starts_with("warning")
                || l.starts_with("For more information")
                || l.starts_with("Some errors")
            {
                break;
            }
            end += 1;
        }
        let block = &lines[i..end];
        if let Some(arrow) = block.iter().take(4).find_map(|l| RUSTC_ARROW.captures(l)) {
            let failure = TestFailure::new(COMPILE_ERROR, message)
                .at(ctx.relative(&arrow[1]), arrow[2].parse().ok())
                .with_output(block.join("\n").trim_end().to_owned());
            out.push(failure);
        }
        i = end;
    }
    out
}

/// rustc errors from cargo's `--message-format=json` (compiler-message lines on stdout).
pub fn parse_cargo_json(text: &str, ctx: &Ctx) -> Vec<TestFailure> {
    let mut out = Vec::new();
    for line in text.lines() {
        if !line.starts_with('{') || !line.contains("\"compiler-message\"") {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(msg) = v.get("message") else {
            continue;
        };
        if msg.get("level").and_then(|l| l.as_str()) != Some("error") {
            continue;
        }
        let text = msg
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("error");
        let code = msg
            .pointer("/code/code")
            .and_then(|c| c.as_str())
            .map(|c| format!("[{c}]"))
            .unwrap_or_default();
        let rendered = msg
            .get("rendered")
            .and_then(|r| r.as_str())
            .unwrap_or_default();
        let mut failure = TestFailure::new(COMPILE_ERROR, format!("error{code}: {text}"))
            .with_output(rendered.trim_end().to_owned());
        let primary = msg
            .get("spans")
            .and_then(|s| s.as_array())
            .and_then(|spans| {
                spans.iter().find(|s| {
                    s.get("is_primary").and_then(serde_json::Value::as_bool) == Some(true)
                })
            });
        if let Some(span) = primary {
            let file = span
                .get("file_name")
                .and_then(|f| f.as_str())
                .unwrap_or_default();
            let line = span
                .get("line_start")
                .and_then(serde_json::Value::as_u64)
                .and_then(|l| u32::try_from(l).ok());
            failure = failure.at(ctx.relative(file), line);
        }
        out.push(failure);
    }
    out
}

/// Go compiler errors (stderr of `go test`/`go build`): `file.go:line:col: message` lines
/// following a `# package` header. `dir_of` maps a package import path to its folder (relative
/// to the root) so that `beta_test.go` becomes `beta/beta_test.go`.
pub fn parse_go(
    text: &str,
    ctx: &Ctx,
    dir_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<TestFailure> {
    let mut out = Vec::new();
    let mut package: Option<String> = None;
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("# ") {
            package = header.split_whitespace().next().map(str::to_owned);
            continue;
        }
        let Some(pkg) = &package else { continue };
        let Some(caps) = GO_ERROR.captures(line) else {
            if !line.starts_with('\t') && !line.starts_with(' ') {
                package = None;
            }
            continue;
        };
        let raw = &caps[1];
        let file = if raw.starts_with('/') {
            ctx.relative(raw)
        } else if raw.contains('/') {
            raw.trim_start_matches("./").to_owned()
        } else {
            match dir_of(pkg) {
                Some(dir) if !dir.is_empty() => format!("{dir}/{raw}"),
                _ => raw.to_owned(),
            }
        };
        out.push(
            TestFailure::new(COMPILE_ERROR, format!("{pkg}: {}", &caps[4]))
                .at(file, caps[2].parse().ok())
                .with_output(line.to_owned()),
        );
    }
    out
}

/// TypeScript compiler errors, plain (`file(line,col): error TSxxxx: msg`) or `--pretty`.
pub fn parse_tsc(text: &str, ctx: &Ctx) -> Vec<TestFailure> {
    let text = strip_ansi(text);
    let mut out = Vec::new();
    for line in text.lines() {
        let caps = TSC_PLAIN
            .captures(line)
            .or_else(|| TSC_PRETTY.captures(line));
        if let Some(caps) = caps {
            out.push(
                TestFailure::new(COMPILE_ERROR, format!("error {}: {}", &caps[4], &caps[5]))
                    .at(ctx.relative(caps[1].trim()), caps[2].parse().ok())
                    .with_output(line.to_owned()),
            );
        }
    }
    out
}

/// Every kind of diagnostic above, from both streams (for commands of unknown frameworks).
pub fn parse_all(stdout: &str, stderr: &str, ctx: &Ctx) -> Vec<TestFailure> {
    let mut out = Vec::new();
    for text in [stdout, stderr] {
        let text = strip_ansi(text);
        out.extend(parse_rustc(&text, ctx));
        out.extend(parse_cargo_json(&text, ctx));
        out.extend(parse_go(&text, ctx, &|_| None));
        out.extend(parse_tsc(&text, ctx));
    }
    out
}
