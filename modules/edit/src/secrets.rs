//! The secret scan: credentials an edit must not add to a repository (the certain patterns of
//! `nuvira-secrets`, shared with the `security` verification check; the likely ones, hard-coded
//! passwords, are left to that check's warnings). The rules are tested there.
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

    // Which texts are secrets is tested in `nuvira-secrets`; this is how the edit module
    // reports one.
    #[test]
    fn a_secret_is_reported_on_its_line_with_the_severity_and_never_echoed() {
        // Assembled at run time so this file itself holds no secret.
        let text = format!("token = \"ghp_{}\"", "a".repeat(36));
        let found = scan_added_lines(
            "f",
            [
                (3, "let key = std::env::var(\"OPENAI_API_KEY\")?;"),
                (7, text.as_str()),
            ],
            Severity::Error,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        let w = &found[0];
        assert_eq!(
            (w.line, w.rule.as_str(), w.severity),
            (7, "github-token", Severity::Error)
        );
        assert!(
            w.message.contains("a GitHub token on line 7"),
            "{}",
            w.message
        );
        assert!(!w.message.contains("aaaaaaaa"), "{}", w.message);
    }

    #[test]
    fn likely_secrets_are_left_to_the_security_check() {
        let found = scan_added_lines(
            "f",
            [(1, "password = \"hunter2hunter2\"")],
            Severity::Warning,
        );
        assert!(found.is_empty(), "{found:?}");
    }
}
