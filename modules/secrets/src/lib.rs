//! The credential patterns Nuvira looks for in what a change adds: one list, used by the edit
//! module (a batch that adds a secret warns, or is refused by config), by the `security`
//! verification check (a diff that adds one fails the check; a [`Confidence::Likely`] one, a
//! hard-coded password, warns) and by [`redact`], which cuts secrets out of text that leaves the
//! process. The rules and their tests live here only.
//!
//! A match says which rule and what kind of credential, never the matched text: callers report
//! the rule and the line, so the secret is not copied into events, reports or logs.
//!
//! ```
//! let line = format!("token = \"ghp_{}\"", "a".repeat(36));
//! let found: Vec<&str> = nuvira_secrets::find(&line).map(|r| r.id).collect();
//! assert_eq!(found, ["github-token"]);
//! assert_eq!(nuvira_secrets::find("let key = std::env::var(\"API_KEY\")?;").count(), 0);
//! ```
#![deny(missing_docs)]

use regex::Regex;
use std::sync::LazyLock;

/// How sure a match is that it found a real credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Confidence {
    /// The text has the shape of a known credential format (a key prefix and length, a key
    /// block): worth refusing a change over. [`find`] and [`redact`] use only these.
    Certain,
    /// A secret-named variable set to a string literal: often a real password, sometimes a
    /// placeholder, so callers warn rather than fail. Only [`find_all`] reports these.
    Likely,
}

/// One kind of credential.
#[derive(Debug)]
pub struct Rule {
    /// A stable id (used as the rule id in reports and SARIF), e.g. `aws-access-key`.
    pub id: &'static str,
    /// What it is, with an article, for messages: "an AWS access key id".
    pub what: &'static str,
    /// How sure a match is.
    pub confidence: Confidence,
    re: Regex,
}

/// The rules: id, what, confidence, pattern. Compiled once into [`RULES`]; the test
/// `every_rule_compiles` compiles each one and names any that does not.
const PATTERNS: &[(&str, &str, Confidence, &str)] = &[
    (
        "private-key",
        "a private key block",
        Confidence::Certain,
        r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "aws-access-key",
        "an AWS access key id",
        Confidence::Certain,
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
    ),
    (
        "aws-secret-key",
        "an AWS secret access key",
        Confidence::Certain,
        r#"(?i)aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?(?P<v>[A-Za-z0-9/+=]{40})\b"#,
    ),
    (
        "gcp-api-key",
        "a Google Cloud API key",
        Confidence::Certain,
        r"\bAIza[0-9A-Za-z_\-]{35}\b",
    ),
    (
        "gcp-service-account",
        "a Google Cloud service-account private key",
        Confidence::Certain,
        r#""private_key_id"\s*:\s*"(?P<v>[0-9a-f]{40})""#,
    ),
    (
        "github-token",
        "a GitHub token",
        Confidence::Certain,
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    ),
    (
        "slack-token",
        "a Slack token",
        Confidence::Certain,
        r"\bxox[abposr]-[0-9A-Za-z\-]{10,}\b",
    ),
    (
        "slack-webhook",
        "a Slack webhook URL",
        Confidence::Certain,
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    ),
    (
        "anthropic-key",
        "an Anthropic API key",
        Confidence::Certain,
        r"\bsk-ant-(?:api|admin)[0-9]{2}-[A-Za-z0-9_\-]{20,}",
    ),
    (
        "openai-key",
        "an OpenAI-style API key",
        Confidence::Certain,
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}|\bsk-(?:proj-|svcacct-)[A-Za-z0-9_\-]{40,}|\bsk-[A-Za-z0-9]{48}\b",
    ),
    (
        "stripe-key",
        "a Stripe live secret key",
        Confidence::Certain,
        r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}\b",
    ),
    (
        "jwt",
        "a JSON Web Token",
        Confidence::Certain,
        r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
    ),
    (
        "gitlab-token",
        "a GitLab token",
        Confidence::Certain,
        r"\bglpat-[A-Za-z0-9_\-]{20,}\b",
    ),
    (
        "hardcoded-secret",
        "a hard-coded credential",
        Confidence::Likely,
        r#"(?i)\b(?:password|passwd|secret|api_?key|access_?token|auth_?token)\b["']?\s*[:=]\s*["'](?P<v>[^"'\s]{8,})["']"#,
    ),
];

#[expect(
    clippy::expect_used,
    reason = "the patterns are constants, each compiled by the `every_rule_compiles` test"
)]
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    PATTERNS
        .iter()
        .map(|&(id, what, confidence, pattern)| Rule {
            id,
            what,
            confidence,
            re: Regex::new(pattern).expect("secret patterns are valid"),
        })
        .collect()
});

/// What [`redact`] puts in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// Shapes that are worth cutting out of text that leaves the process (logs, events, prompts)
/// but too loose to fail a change over: any `sk-` key, shorter provider tokens, bearer tokens.
#[expect(
    clippy::expect_used,
    reason = "the patterns are constants covered by the unit tests below"
)]
static REDACT_ONLY: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // A whole private key block, body included (the rule matches only its first line).
        r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY[A-Z ]*-----.*?(?:-----END [A-Z ]*PRIVATE KEY[A-Z ]*-----|\z)",
        r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ]
    .iter()
    .map(|p| Regex::new(p).expect("redaction patterns are valid"))
    .collect()
});

/// `name = value` (or `name: value`) where the name says secret: the value is cut, the name kept.
#[expect(
    clippy::expect_used,
    reason = "the pattern is a constant covered by the unit tests below"
)]
static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b([A-Za-z0-9_]*(?:api[_-]?key|secret|token|password|passwd|authorization)[A-Za-z0-9_]*)(["']?\s*[:=]\s*["']?)([^\s"',;]{4,})"#,
    )
    .expect("the assignment pattern is valid")
});

/// `text` with every credential of the [`Confidence::Certain`] rules, other key and token shapes, and the
/// values of secret-named assignments replaced by [`REDACTED`]. For error text, test output and
/// anything else about to be logged, emitted or sent to a model.
///
/// ```
/// let s = nuvira_secrets::redact("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx failed");
/// assert_eq!(s, "OPENAI_API_KEY=[redacted] failed");
/// assert_eq!(nuvira_secrets::redact("3 tests failed"), "3 tests failed");
/// ```
pub fn redact(text: &str) -> String {
    use std::borrow::Cow;
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    // The key block first, so that its body goes with its first line.
    let (block, loose) = REDACT_ONLY.split_at(1);
    for re in block
        .iter()
        .chain(certain().map(|r| &r.re))
        .chain(loose.iter())
    {
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

/// `text` with the credential of every finding of the scanner ([`find_all`]: every rule, of
/// any [`Confidence`]) replaced by [`REDACTED`], keeping everything around it: the line, the
/// name a value is assigned to, a diff's `+`/`-` marker. For rendered reports and diffs, which
/// must show *where* the scanner found a secret without repeating it. A private key block is
/// masked line by line, its `BEGIN`/`END` lines kept. Borrowed when nothing matched.
///
/// ```
/// let key = format!("AKIA{}", "A".repeat(16));
/// let diff = format!("+aws_key = \"{key}\"\n+password = \"correct-horse\"\n");
/// assert_eq!(
///     nuvira_secrets::mask(&diff),
///     "+aws_key = \"[redacted]\"\n+password = \"[redacted]\"\n"
/// );
/// assert_eq!(nuvira_secrets::mask("3 tests failed"), "3 tests failed");
/// ```
pub fn mask(text: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    if let Cow::Owned(s) =
        REDACT_ONLY[0].replace_all(&out, |c: &regex::Captures<'_>| mask_key_block(&c[0]))
    {
        out = Cow::Owned(s);
    }
    for rule in RULES.iter().filter(|r| r.id != "private-key") {
        let replaced = rule
            .re
            .replace_all(&out, |c: &regex::Captures<'_>| match c.name("v") {
                Some(v) => {
                    let whole = c.get(0).map_or(0..0, |m| m.range());
                    let (start, end) = (v.start() - whole.start, v.end() - whole.start);
                    format!("{}{REDACTED}{}", &c[0][..start], &c[0][end..])
                }
                None => REDACTED.to_owned(),
            });
        if let Cow::Owned(s) = replaced {
            out = Cow::Owned(s);
        }
    }
    out
}

/// A private key block with each body line replaced by [`REDACTED`] (a leading diff marker
/// and the `-----BEGIN`/`-----END` lines kept).
fn mask_key_block(block: &str) -> String {
    block
        .split_inclusive('\n')
        .map(|line| {
            let (body, nl) = match line.strip_suffix('\n') {
                Some(b) => (b, "\n"),
                None => (line, ""),
            };
            let marker = match body.chars().next() {
                Some(c @ ('+' | '-' | ' ')) if !body.starts_with("-----") => c.to_string(),
                _ => String::new(),
            };
            let rest = &body[marker.len()..];
            if rest.trim().is_empty() || rest.trim_start().starts_with("-----") {
                line.to_owned()
            } else {
                format!("{marker}{REDACTED}{nl}")
            }
        })
        .collect()
}

/// Every rule, [`Confidence::Certain`] ones first.
pub fn rules() -> impl Iterator<Item = &'static Rule> {
    RULES.iter()
}

fn certain() -> impl Iterator<Item = &'static Rule> {
    RULES.iter().filter(|r| r.confidence == Confidence::Certain)
}

/// The [`Confidence::Certain`] rules whose credential appears in `text` (usually one line).
pub fn find(text: &str) -> impl Iterator<Item = &'static Rule> + '_ {
    certain().filter(move |r| r.re.is_match(text))
}

/// Every rule, of any [`Confidence`], that matches `text` (usually one line).
///
/// ```
/// let line = "password = \"correct-horse-battery\"";
/// let found: Vec<_> = nuvira_secrets::find_all(line).map(|r| (r.id, r.confidence)).collect();
/// assert_eq!(found, [("hardcoded-secret", nuvira_secrets::Confidence::Likely)]);
/// assert_eq!(nuvira_secrets::find(line).count(), 0);
/// ```
pub fn find_all(text: &str) -> impl Iterator<Item = &'static Rule> + '_ {
    RULES.iter().filter(move |r| r.re.is_match(text))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ids(text: &str) -> Vec<&'static str> {
        find_all(text).map(|r| r.id).collect()
    }

    #[test]
    fn every_rule_compiles() {
        let broken: Vec<String> = PATTERNS
            .iter()
            .filter_map(|(id, _, _, p)| Regex::new(p).err().map(|e| format!("{id}: {e}")))
            .collect();
        assert!(broken.is_empty(), "rules that do not compile: {broken:?}");
        assert_eq!(rules().count(), PATTERNS.len());
        let mut ids: Vec<&str> = rules().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), PATTERNS.len(), "rule ids are unique");
    }

    /// Cases from the edit module's and the security check's own copies are here too.
    #[test]
    fn each_rule_finds_its_credential() {
        // Test values are assembled at run time so this file itself holds no secret.
        let cases = [
            (
                "private-key",
                format!("-----BEGIN {}PRIVATE KEY-----", "RSA "),
            ),
            (
                "private-key",
                format!("-----BEGIN {}PRIVATE KEY-----", "OPENSSH "),
            ),
            (
                "aws-access-key",
                format!("key = \"AKIA{}\"", "IOSFODNN7EXAMPLE"),
            ),
            ("aws-access-key", format!("id: ASIA{}", "IOSFODNN7EXAMPLE")),
            (
                "aws-secret-key",
                format!(
                    "aws_secret_access_key = {}",
                    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
                ),
            ),
            (
                "gcp-api-key",
                format!("AIza{}", "SyA1234567890abcdefghijklmnopqrstuv"),
            ),
            (
                "gcp-service-account",
                format!(
                    "\"private_key_id\": \"{}\"",
                    "0123456789abcdef".repeat(3)[..40].to_owned()
                ),
            ),
            ("github-token", format!("ghp_{}", "a".repeat(36))),
            (
                "github-token",
                format!("token: ghp_{}", "0123456789abcdefghijABCDEFGHIJ012345"),
            ),
            ("github-token", format!("github_pat_{}", "A1_".repeat(10))),
            ("gitlab-token", format!("glpat-{}", "x".repeat(20))),
            ("slack-token", format!("xoxb-{}", "1234567890-abcdef")),
            (
                "slack-webhook",
                format!(
                    "https://hooks.slack.com/services/T{}/B{}/{}",
                    "0A1B2C",
                    "3D4E5F",
                    "x".repeat(24)
                ),
            ),
            ("openai-key", format!("sk-proj-{}", "A".repeat(48))),
            ("anthropic-key", format!("sk-ant-api03-{}", "x".repeat(30))),
            ("stripe-key", format!("sk_live_{}", "0".repeat(24))),
            (
                "jwt",
                format!(
                    "eyJ{}.eyJ{}.{}",
                    "hbGciOiJIUzI1", "zdWIiOiIxMjM0", "SflKxwRJSMeKKF2QT4fw"
                ),
            ),
            (
                "hardcoded-secret",
                format!("password = \"{}\"", "hunter2hunter2"),
            ),
            (
                "hardcoded-secret",
                format!("API_KEY: '{}'", "0123456789abcdef"),
            ),
        ];
        for (rule, text) in &cases {
            assert!(
                ids(text).contains(rule),
                "{rule}: {:?} in {text}",
                ids(text)
            );
            // `find` reports exactly the certain rules of `find_all`.
            let certain: Vec<&str> = find(text).map(|r| r.id).collect();
            let all_certain: Vec<&str> = find_all(text)
                .filter(|r| r.confidence == Confidence::Certain)
                .map(|r| r.id)
                .collect();
            assert_eq!(certain, all_certain, "{text}");
        }
        assert!(find(&cases.last().unwrap().1).next().is_none());
        // Every rule has a case above.
        for r in rules() {
            assert!(
                cases.iter().any(|(id, _)| *id == r.id),
                "no case for {}",
                r.id
            );
        }
    }

    #[test]
    fn redact_cuts_every_rule_and_the_looser_shapes_but_keeps_ordinary_text() {
        let key = format!("sk-{}", "abcdefghijklmnopqrstu");
        assert_eq!(
            redact(&format!("OPENAI_API_KEY={key} failed")),
            "OPENAI_API_KEY=[redacted] failed"
        );
        assert_eq!(redact(&format!("AKIA{}", "IOSFODNN7EXAMPLE")), REDACTED);
        assert_eq!(
            redact("password = \"hunter22\""),
            "password = \"[redacted]\""
        );
        assert_eq!(
            redact(&format!("Authorization: Bearer {}", "abc.def-ghi_jkl")),
            "Authorization: [redacted]"
        );
        let block = format!(
            "before\n-----BEGIN {}PRIVATE KEY-----\nMIIEvQIBADANBg\nkqhkiG9w0BAQEF\n-----END {}PRIVATE KEY-----\nafter",
            "RSA ", "RSA "
        );
        assert_eq!(redact(&block), "before\n[redacted]\nafter");
        let truncated = format!("-----BEGIN {}PRIVATE KEY-----\nMIIEvQIBADANBg", "OPENSSH ");
        assert_eq!(redact(&truncated), REDACTED);
        for ordinary in [
            "3 tests failed; expected 4, got 5",
            "token count: 12",
            "nothing secret here",
            "let key = std::env::var(\"API_KEY\")?;",
        ] {
            assert_eq!(redact(ordinary), ordinary);
        }
    }

    #[test]
    fn ordinary_code_and_lookalikes_are_not_credentials() {
        for text in [
            "let key = std::env::var(\"OPENAI_API_KEY\")?;",
            "fn sk_live_mode() {}",
            "// AKIA prefix is documented here",
            "const TASK = \"sk-learn\";",
            "-----BEGIN PUBLIC KEY-----",
            "ghp_short",
            "password = os.environ[\"PASSWORD\"]",
            "password = \"short\"",
        ] {
            assert!(ids(text).is_empty(), "{text}: {:?}", ids(text));
        }
    }

    #[test]
    fn mask_keeps_the_line_and_cuts_only_the_value() {
        let aws = format!("AKIA{}", "Q".repeat(16));
        let gh = format!("ghp_{}", "a1".repeat(18));
        let secret = format!("aws_secret_access_key = \"{}\"", "Ab1/".repeat(9) + "Ab12");
        let diff =
            format!("@@ -1 +1,4 @@\n+let id = \"{aws}\";\n+token: {gh}\n+{secret}\n-old line\n");
        let masked = mask(&diff);
        assert_eq!(
            masked,
            "@@ -1 +1,4 @@\n+let id = \"[redacted]\";\n+token: [redacted]\n+aws_secret_access_key = \"[redacted]\"\n-old line\n"
        );
        for rule in find_all(&diff) {
            assert!(
                find_all(&masked).all(|r| r.id != rule.id),
                "{} survived",
                rule.id
            );
        }
        let block = "+-----BEGIN RSA PRIVATE KEY-----\n+MIIEowIBAAKCAQEA\n+abcdefgh\n+-----END RSA PRIVATE KEY-----\n+after\n";
        assert_eq!(
            mask(block),
            "+-----BEGIN RSA PRIVATE KEY-----\n+[redacted]\n+[redacted]\n+-----END RSA PRIVATE KEY-----\n+after\n"
        );
        assert!(matches!(
            mask("fn main() {}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
