//! Cutting keys and tokens out of error text before it is logged, emitted or sent to a model.
//!
//! `nuvira-llm` removes the configured key from its own messages ([`ApiKey::scrub`] only knows
//! that one key); failures can carry any secret a test printed, so this scrubber works on
//! shapes instead: provider key prefixes, bearer tokens, cloud access keys and
//! `key = value` assignments whose name says secret.
//!
//! [`ApiKey::scrub`]: https://docs.rs/nuvira-llm

use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

#[expect(
    clippy::expect_used,
    reason = "constant patterns, checked by the tests"
)]
static SHAPES: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // OpenAI / Anthropic style keys.
        r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        // GitHub, Slack, Google tokens.
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
        r"\bAIza[0-9A-Za-z_-]{35}",
        // AWS access key ids.
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        // Bearer tokens.
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",
        // JWTs.
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("valid regex"))
    .collect()
});

#[expect(clippy::expect_used, reason = "constant pattern, checked by the tests")]
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b([A-Za-z0-9_]*(?:api[_-]?key|secret|token|password|passwd|authorization)[A-Za-z0-9_]*)(["']?\s*[:=]\s*["']?)([^\s"',;]{4,})"#,
    )
    .expect("valid regex")
});

/// `text` with keys, tokens and secret assignments replaced by [`REDACTED`].
///
/// ```
/// let s = nuvira_repair_strategies::scrub("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx failed");
/// assert_eq!(s, "OPENAI_API_KEY=[redacted] failed");
/// ```
pub fn scrub(text: &str) -> String {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    for re in SHAPES.iter() {
        if let Cow::Owned(s) = re.replace_all(&out, REDACTED) {
            out = Cow::Owned(s);
        }
    }
    ASSIGNMENT
        .replace_all(&out, |c: &regex::Captures<'_>| {
            format!("{}{}{REDACTED}", &c[1], &c[2])
        })
        .into_owned()
}
