//! The secret scan: patterns of credentials an edit must not add to a repository.
//!
//! Only lines the edit *adds* are scanned, so a file that already held a test key does not
//! warn on every unrelated edit. A finding names the rule and the line, never the secret.

use nuvira_api::{SecurityWarning, Severity};
use regex::Regex;
use std::sync::LazyLock;

struct Rule {
    id: &'static str,
    what: &'static str,
    re: Regex,
}

#[expect(
    clippy::expect_used,
    reason = "the patterns are constants covered by the unit tests below"
)]
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |id, what, pattern: &str| Rule {
        id,
        what,
        re: Regex::new(pattern).expect("secret patterns are valid"),
    };
    vec![
        rule(
            "private-key",
            "a private key block",
            r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----",
        ),
        rule(
            "aws-access-key",
            "an AWS access key id",
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
        ),
        rule(
            "aws-secret-key",
            "an AWS secret access key",
            r#"(?i)aws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}\b"#,
        ),
        rule(
            "gcp-api-key",
            "a Google Cloud API key",
            r"\bAIza[0-9A-Za-z_\-]{35}\b",
        ),
        rule(
            "gcp-service-account",
            "a Google Cloud service-account private key",
            r#""private_key_id"\s*:\s*"[0-9a-f]{40}""#,
        ),
        rule(
            "github-token",
            "a GitHub token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
        ),
        rule(
            "slack-token",
            "a Slack token",
            r"\bxox[abposr]-[0-9A-Za-z\-]{10,}\b",
        ),
        rule(
            "slack-webhook",
            "a Slack webhook URL",
            r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
        ),
        rule(
            "anthropic-key",
            "an Anthropic API key",
            r"\bsk-ant-(?:api|admin)[0-9]{2}-[A-Za-z0-9_\-]{20,}",
        ),
        rule(
            "openai-key",
            "an OpenAI-style API key",
            r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}|\bsk-(?:proj-|svcacct-)[A-Za-z0-9_\-]{40,}|\bsk-[A-Za-z0-9]{48}\b",
        ),
        rule(
            "stripe-key",
            "a Stripe live secret key",
            r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}\b",
        ),
        rule(
            "jwt",
            "a JSON Web Token",
            r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
        ),
    ]
});

/// Scans the lines an edit added (`(line number, text)`, 1-based) for secrets.
pub(crate) fn scan_added_lines<'a>(
    path: &str,
    added: impl IntoIterator<Item = (u32, &'a str)>,
    severity: Severity,
) -> Vec<SecurityWarning> {
    let mut out = Vec::new();
    for (line, text) in added {
        for rule in RULES.iter() {
            if rule.re.is_match(text) {
                out.push(SecurityWarning::new(
                    path,
                    line,
                    rule.id,
                    format!("the edit adds {} on line {line}; keep secrets out of the repository (use an environment variable or a secret store)", rule.what),
                    severity,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn rules_hit(text: &str) -> Vec<String> {
        scan_added_lines("f", [(1, text)], Severity::Warning)
            .into_iter()
            .map(|w| w.rule)
            .collect()
    }

    #[test]
    fn each_rule_finds_its_secret_and_never_echoes_it() {
        // Test values are assembled at run time so this file itself holds no secret.
        let cases = [
            (
                "private-key",
                format!("-----BEGIN {}PRIVATE KEY-----", "RSA "),
            ),
            (
                "aws-access-key",
                format!("key = \"AKIA{}\"", "IOSFODNN7EXAMPLE"),
            ),
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
            ("github-token", format!("ghp_{}", "a".repeat(36))),
            ("slack-token", format!("xoxb-{}", "1234567890-abcdef")),
            ("openai-key", format!("sk-proj-{}", "A".repeat(48))),
            ("anthropic-key", format!("sk-ant-api03-{}", "x".repeat(30))),
            ("stripe-key", format!("sk_live_{}", "0".repeat(24))),
        ];
        for (rule, text) in cases {
            let found = scan_added_lines("f", [(7, text.as_str())], Severity::Error);
            assert!(found.iter().any(|w| w.rule == rule), "{rule}: {found:?}");
            for w in &found {
                assert_eq!(w.line, 7);
                assert_eq!(w.severity, Severity::Error);
                assert!(
                    !w.message.contains(&text[text.len() - 8..]),
                    "{}",
                    w.message
                );
            }
        }
    }

    #[test]
    fn ordinary_code_is_not_a_secret() {
        for text in [
            "let key = std::env::var(\"OPENAI_API_KEY\")?;",
            "fn sk_live_mode() {}",
            "// AKIA prefix is documented here",
            "const TASK = \"sk-learn\";",
        ] {
            assert!(rules_hit(text).is_empty(), "{text}: {:?}", rules_hit(text));
        }
    }
}
