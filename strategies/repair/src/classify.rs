//! [`classify_error`]: what kind of failure a step had, with the lines that show it.

use nuvira_api::{ErrorCategory, Failure, StepOutput};
use nuvira_secrets::redact;
use regex::Regex;
use std::sync::LazyLock;

pub use nuvira_api::repair::{Classification, MAX_EVIDENCE};

#[expect(
    clippy::expect_used,
    reason = "constant patterns, checked by the tests"
)]
static RUSTC_ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^error(\[E\d{4}\])?: (.+)\n\s*--> ([^\s:]+):(\d+):(\d+)").expect("valid regex")
});
#[expect(
    clippy::expect_used,
    reason = "constant patterns, checked by the tests"
)]
static PANIC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^thread '([^']+)'(?: \(\d+\))? panicked at ([^\s:]+):(\d+):\d+:\n(.*)")
        .expect("valid regex")
});
#[expect(
    clippy::expect_used,
    reason = "constant patterns, checked by the tests"
)]
static TSC_OR_GO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^([\w./-]+\.(?:ts|tsx|go|py))[:(](\d+)[,:]\d+\)?:? (?:- )?(?:error )?(.+)$")
        .expect("valid regex")
});

#[expect(
    clippy::expect_used,
    reason = "constant patterns, checked by the tests"
)]
static PYTEST_FAILED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^FAILED ([^\s:]+)::(\S+) - (.*)$").expect("valid regex"));

/// Text signals, checked in order; the first match decides when the module's own category does
/// not (it said `unknown` or `io`). Our own model and edit messages are matched by their exact
/// wording, so that test output quoting such words is not mistaken for them; `timeout` comes last
/// because test names and logs mention it freely.
const SIGNALS: &[(ErrorCategory, &[&str])] = &[
    (
        ErrorCategory::SandboxUnavailable,
        &[
            "cannot connect to the docker daemon",
            "docker engine is not",
            "sandbox unavailable",
            "no docker engine",
        ],
    ),
    (
        ErrorCategory::LlmRateLimit,
        &[
            "rate limited by the provider",
            "429 too many requests",
            "the circuit breaker for",
        ],
    ),
    (
        ErrorCategory::LlmInvalidOutput,
        &["the model's answer was invalid", "the model refused"],
    ),
    (
        ErrorCategory::EditRejected,
        &[
            "edit batch rejected",
            "search text not found",
            "no match for",
        ],
    ),
    (
        ErrorCategory::OutOfMemory,
        &[
            "out of memory",
            "oom-killed",
            "oomkilled",
            "memory limit",
            "memory allocation of",
        ],
    ),
    (
        ErrorCategory::CompileError,
        &[
            "error: could not compile",
            "syntaxerror",
            "errors during collection",
            "[build failed]",
            "error ts",
            "error during collection",
        ],
    ),
    (
        ErrorCategory::TestFailure,
        &[
            "test result: failed",
            "panicked at",
            "assertionerror",
            "--- fail:",
            "tests failed",
        ],
    ),
    (
        ErrorCategory::Timeout,
        &[
            "timed out",
            "timeout",
            "deadline exceeded",
            "has been running for over",
        ],
    ),
];

/// Classifies a failure: the module's category when it is specific, otherwise what the message,
/// the evidence and the partial output (test log, command output) show. Evidence is extracted
/// from the text where possible (`src/lib.rs:7:22: error[E0308]: mismatched types`,
/// `tests::add (src/lib.rs:16): assertion failed`), else the failure's own evidence is kept.
///
/// ```
/// use nuvira_api::{ErrorCategory, Failure};
/// let f = Failure::new(ErrorCategory::Unknown, "the model request failed: rate limited by the provider");
/// assert_eq!(nuvira_repair_strategies::classify_error(&f).category, ErrorCategory::LlmRateLimit);
/// ```
pub fn classify_error(failure: &Failure) -> Classification {
    let text = failure_text(failure);
    let lower = text.to_ascii_lowercase();
    let category = match failure.category {
        ErrorCategory::Unknown | ErrorCategory::Io => SIGNALS
            .iter()
            .find(|(_, needles)| needles.iter().any(|n| lower.contains(n)))
            .map_or(failure.category, |(c, _)| *c),
        // A test failure whose log is a compiler error is a compile error.
        ErrorCategory::TestFailure
            if RUSTC_ERROR.is_match(&text) && !lower.contains("test result:") =>
        {
            ErrorCategory::CompileError
        }
        c => c,
    };
    let mut evidence = match category {
        ErrorCategory::CompileError => compile_evidence(&text),
        ErrorCategory::TestFailure => test_evidence(failure, &text),
        _ => Vec::new(),
    };
    if evidence.is_empty() {
        evidence.clone_from(&failure.evidence);
    }
    if evidence.is_empty() {
        evidence = SIGNALS
            .iter()
            .filter(|(c, _)| *c == category)
            .flat_map(|(_, needles)| needles.iter())
            .find_map(|n| {
                text.lines()
                    .find(|l| l.to_ascii_lowercase().contains(n))
                    .map(|l| l.trim().to_owned())
            })
            .into_iter()
            .collect();
    }
    if evidence.is_empty() && !failure.message.is_empty() {
        evidence.push(failure.message.clone());
    }
    evidence.truncate(MAX_EVIDENCE);
    Classification::new(category, evidence.iter().map(|e| redact(e)).collect())
}

/// Everything a failure says, as one text: message, evidence, and the log or output it carries.
fn failure_text(failure: &Failure) -> String {
    let mut text = failure.message.clone();
    for e in &failure.evidence {
        text.push('\n');
        text.push_str(e);
    }
    match failure.output.as_deref() {
        Some(StepOutput::Test(t)) => {
            for f in &t.failures {
                text.push('\n');
                text.push_str(&f.message);
                if !f.output.is_empty() {
                    text.push('\n');
                    text.push_str(&f.output);
                }
            }
            text.push('\n');
            text.push_str(&t.log);
        }
        Some(StepOutput::Command(c)) => {
            text.push('\n');
            text.push_str(&c.stdout);
            text.push('\n');
            text.push_str(&c.stderr);
        }
        Some(StepOutput::Value(v)) => {
            text.push('\n');
            text.push_str(&v.to_string());
        }
        _ => {}
    }
    text
}

fn compile_evidence(text: &str) -> Vec<String> {
    let mut out: Vec<String> = RUSTC_ERROR
        .captures_iter(text)
        .map(|c| {
            let code = c.get(1).map_or("", |m| m.as_str());
            format!("{}:{}:{}: error{code}: {}", &c[3], &c[4], &c[5], &c[2])
        })
        .collect();
    if out.is_empty() {
        out = TSC_OR_GO
            .captures_iter(text)
            .map(|c| format!("{}:{}: {}", &c[1], &c[2], c[3].trim()))
            .collect();
    }
    dedup(out)
}

fn test_evidence(failure: &Failure, text: &str) -> Vec<String> {
    if let Some(StepOutput::Test(t)) = failure.output.as_deref()
        && !t.failures.is_empty()
    {
        return t
            .failures
            .iter()
            .map(|f| {
                let first = f.message.lines().next().unwrap_or_default();
                match (&f.file, f.line) {
                    (Some(file), Some(line)) => format!("{} ({file}:{line}): {first}", f.name),
                    (Some(file), None) => format!("{} ({file}): {first}", f.name),
                    _ => format!("{}: {first}", f.name),
                }
            })
            .collect();
    }
    let mut out: Vec<String> = PANIC
        .captures_iter(text)
        .map(|c| format!("{} ({}:{}): {}", &c[1], &c[2], &c[3], c[4].trim()))
        .collect();
    out.extend(
        PYTEST_FAILED
            .captures_iter(text)
            .map(|c| format!("{} ({}): {}", &c[2], &c[1], c[3].trim())),
    );
    dedup(out)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(v.len());
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Where a piece of evidence points: `(path, line)` when it names one (`src/lib.rs:7:22: ...`
/// or `name (src/lib.rs:16): ...`).
pub fn evidence_location(evidence: &str) -> Option<(String, u32)> {
    #[expect(clippy::expect_used, reason = "constant pattern, checked by the tests")]
    static LOC: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"([A-Za-z0-9_./-]+\.[A-Za-z0-9]+):(\d+)").expect("valid regex")
    });
    let c = LOC.captures(evidence)?;
    Some((c[1].to_owned(), c[2].parse().ok()?))
}
