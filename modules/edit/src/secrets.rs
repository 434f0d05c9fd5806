//! The secret scan: credentials an edit must not add to a repository (the patterns are
//! `nuvira-secrets`, shared with the `security` verification check).
//!
//! Only lines the edit *adds* are scanned, so a file that already held a test key does not
//! warn on every unrelated edit. A finding names the rule and the line, never the secret.

use nuvira_api::{SecurityWarning, Severity};

/// Scans the lines an edit added (`(line number, text)`, 1-based) for secrets.
pub(crate) fn scan_added_lines<'a>(
    path: &str,
    added: impl IntoIterator<Item = (u32, &'a str)>,
    severity: Severity,
) -> Vec<SecurityWarning> {
    let mut out = Vec::new();
    for (line, text) in added {
        for rule in nuvira_secrets::find(text) {
            out.push(SecurityWarning::new(
                path,
                line,
                rule.id,
                format!("the edit adds {} on line {line}; keep secrets out of the repository (use an environment variable or a secret store)", rule.what),
                severity,
            ));
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
