//! The credential patterns Nuvira looks for in what a change adds: one list, used by the edit
//! module (a batch that adds a secret warns, or is refused by config) and by the `security`
//! verification check (a diff that adds one fails the check).
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

use regex::Regex;
use std::sync::LazyLock;

/// One kind of credential.
#[derive(Debug)]
pub struct Rule {
    /// A stable id (used as the rule id in reports and SARIF), e.g. `aws-access-key`.
    pub id: &'static str,
    /// What it is, with an article, for messages: "an AWS access key id".
    pub what: &'static str,
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
        rule(
            "gitlab-token",
            "a GitLab token",
            r"\bglpat-[A-Za-z0-9_\-]{20,}\b",
        ),
    ]
});

/// Every rule.
pub fn rules() -> impl Iterator<Item = &'static Rule> {
    RULES.iter()
}

/// The rules whose credential appears in `text` (usually one line).
pub fn find(text: &str) -> impl Iterator<Item = &'static Rule> + '_ {
    RULES.iter().filter(move |r| r.re.is_match(text))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ids(text: &str) -> Vec<&'static str> {
        find(text).map(|r| r.id).collect()
    }

    #[test]
    fn each_rule_finds_its_credential() {
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
        ];
        for (rule, text) in &cases {
            assert!(
                ids(text).contains(rule),
                "{rule}: {:?} in {text}",
                ids(text)
            );
        }
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
    fn ordinary_code_and_lookalikes_are_not_credentials() {
        for text in [
            "let key = std::env::var(\"OPENAI_API_KEY\")?;",
            "fn sk_live_mode() {}",
            "// AKIA prefix is documented here",
            "const TASK = \"sk-learn\";",
            "-----BEGIN PUBLIC KEY-----",
            "ghp_short",
        ] {
            assert!(ids(text).is_empty(), "{text}: {:?}", ids(text));
        }
    }
}
