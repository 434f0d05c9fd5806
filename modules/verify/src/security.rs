//! The `security` check: secrets and dangerous patterns that a change *introduces*.
//!
//! Only the added (`+`) lines of each unified diff are scanned, with their line numbers in the
//! new file taken from the hunk headers, so code that was already there is not blamed on the
//! run. Findings never contain the matched text (it may be a secret), only the rule and where.

use crate::{CheckInput, CheckOutcome, Strictness, VerifyCheck};
use nuvira_api::{CheckFinding, CheckStatus, SecurityWarning, Severity, async_trait};
use nuvira_secrets::Confidence;
use regex::Regex;
use std::sync::LazyLock;

/// One rule: a stable id, a pattern, what it means, and how serious it is. Credentials
/// (hard-coded passwords included) are not here: they come from `nuvira-secrets`, the list the
/// edit module uses too, and are tested there.
struct Rule {
    id: &'static str,
    pattern: &'static str,
    message: &'static str,
    severity: Severity,
}

const RULES: &[Rule] = &[
    Rule {
        id: "curl-pipe-shell",
        pattern: r"\b(?:curl|wget)\b[^|\n]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b",
        message: "downloaded script piped into a shell",
        severity: Severity::Error,
    },
    Rule {
        id: "tls-verification-disabled",
        pattern: r#"(?i)(?:verify\s*=\s*False|rejectUnauthorized\s*:\s*false|NODE_TLS_REJECT_UNAUTHORIZED\s*=\s*["']?0|InsecureSkipVerify\s*:\s*true|danger_accept_invalid_(?:certs|hostnames)\s*\(\s*true|CURLOPT_SSL_VERIFYPEER\s*,\s*(?:0|false)|ssl\._create_unverified_context|\bcurl\b[^\n]*\s(?:-k|--insecure)\b)"#,
        message: "TLS certificate verification disabled",
        severity: Severity::Error,
    },
    Rule {
        id: "eval",
        pattern: r"(?:^|[^\w.])eval\s*\(|\bnew\s+Function\s*\(",
        message: "dynamic code evaluation (`eval`)",
        severity: Severity::Warning,
    },
    Rule {
        id: "shell-injection",
        pattern: r"\bshell\s*=\s*True\b|\bos\.system\s*\(|\bchild_process\.exec(?:Sync)?\s*\(",
        message: "command run through a shell",
        severity: Severity::Warning,
    },
    Rule {
        id: "destructive-command",
        pattern: r"\brm\s+-[a-zA-Z]*r[a-zA-Z]*f?\s+(?:/|~|\$HOME)(?:\s|$|\*)|\bchmod\s+(?:-R\s+)?777\b",
        message: "destructive or world-writable file command",
        severity: Severity::Warning,
    },
];

#[expect(
    clippy::expect_used,
    reason = "the patterns are constants, each compiled by the `every_rule_compiles` test"
)]
static COMPILED: LazyLock<Vec<(&'static Rule, Regex)>> = LazyLock::new(|| {
    // Never skip a rule that does not compile: the check would pass without it.
    RULES
        .iter()
        .map(|r| {
            (
                r,
                Regex::new(r.pattern).expect("security patterns are valid"),
            )
        })
        .collect()
});

/// The added lines of a unified diff with their 1-based line numbers in the new file.
pub fn added_lines(diff: &str) -> Vec<(u32, &str)> {
    let mut out = Vec::new();
    let mut line = 0u32;
    let mut in_hunk = false;
    for l in diff.lines() {
        if let Some(rest) = l.strip_prefix("@@") {
            // `@@ -a,b +c,d @@`
            line = rest
                .split_whitespace()
                .find_map(|p| p.strip_prefix('+'))
                .and_then(|p| p.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            in_hunk = true;
        } else if !in_hunk {
            continue;
        } else if let Some(added) = l.strip_prefix('+') {
            out.push((line, added));
            line += 1;
        } else if l.starts_with(' ') || l.is_empty() {
            line += 1;
        } else if l.starts_with("diff ") {
            in_hunk = false;
        }
    }
    out
}

/// Scans the added lines of one file's diff: credentials (the shared `nuvira-secrets` list:
/// errors, and warnings for its [`Confidence::Likely`] hard-coded passwords), then the
/// dangerous patterns above.
pub fn scan_diff(path: &str, diff: &str) -> Vec<SecurityWarning> {
    let mut out = Vec::new();
    for (line, text) in added_lines(diff) {
        for secret in nuvira_secrets::find_all(text) {
            let severity = match secret.confidence {
                Confidence::Certain => Severity::Error,
                _ => Severity::Warning,
            };
            out.push(SecurityWarning::new(
                path,
                line,
                secret.id,
                format!("adds {}", secret.what),
                severity,
            ));
        }
        for (rule, re) in COMPILED.iter() {
            if re.is_match(text) {
                out.push(SecurityWarning::new(
                    path,
                    line,
                    rule.id,
                    rule.message,
                    rule.severity,
                ));
            }
        }
    }
    out
}

/// The built-in `security` check. Errors (keys, tokens, `curl | sh`, disabled TLS checks) fail
/// it; warnings (`eval(`, shell commands, hard-coded passwords) block from
/// [`Strictness::Medium`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SecurityCheck;

#[async_trait]
impl VerifyCheck for SecurityCheck {
    fn name(&self) -> &str {
        "security"
    }

    fn warnings_block_from(&self) -> Strictness {
        Strictness::Medium
    }

    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
        if input.changes.is_empty() {
            return CheckOutcome::new(
                "security",
                CheckStatus::NotRun,
                true,
                "no changes upstream to scan",
            );
        }
        let warnings: Vec<SecurityWarning> = input
            .changes
            .iter()
            .flat_map(|c| scan_diff(&c.path, &c.diff))
            .collect();
        let errors = warnings
            .iter()
            .filter(|w| w.severity == Severity::Error)
            .count();
        let status = if errors > 0 {
            CheckStatus::Failed
        } else if warnings.is_empty() {
            CheckStatus::Passed
        } else {
            CheckStatus::Warning
        };
        let details = if warnings.is_empty() {
            format!(
                "no secrets or dangerous patterns in the added lines of {} change(s)",
                input.changes.len()
            )
        } else {
            format!(
                "{errors} error(s) and {} warning(s) in added lines",
                warnings.len() - errors
            )
        };
        let findings = warnings
            .iter()
            .map(|w| {
                CheckFinding::new(format!("{} [{}]", w.message, w.rule))
                    .at(w.path.clone(), Some(w.line))
                    .with_severity(w.severity)
            })
            .collect();
        CheckOutcome::new("security", status, true, details).with_findings(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        let broken: Vec<String> = RULES
            .iter()
            .filter_map(|r| {
                Regex::new(r.pattern)
                    .err()
                    .map(|e| format!("{}: {e}", r.id))
            })
            .collect();
        assert!(broken.is_empty(), "rules that do not compile: {broken:?}");
        assert_eq!(COMPILED.len(), RULES.len());
    }

    #[test]
    fn credentials_from_nuvira_secrets_are_errors_and_likely_ones_warnings() {
        let key = format!("token: ghp_{}", "0123456789abcdefghijABCDEFGHIJ012345");
        let diff = format!("@@ -0,0 +1,2 @@\n+{key}\n+password = \"hunter2hunter2\"\n");
        let found: Vec<(u32, String, Severity)> = scan_diff("f", &diff)
            .into_iter()
            .map(|w| {
                assert!(!w.message.contains("ghp_") && !w.message.contains("hunter2"));
                (w.line, w.rule, w.severity)
            })
            .collect();
        assert_eq!(
            found,
            [
                (1, "github-token".to_owned(), Severity::Error),
                (2, "hardcoded-secret".to_owned(), Severity::Warning),
            ]
        );
    }

    #[test]
    fn line_numbers_come_from_hunk_headers() {
        let diff =
            "--- a/x.py\n+++ b/x.py\n@@ -10,3 +10,4 @@\n a = 1\n-b = 2\n+b = 3\n+eval(x)\n c = 4\n";
        assert_eq!(added_lines(diff), [(11, "b = 3"), (12, "eval(x)")]);
        let w = scan_diff("x.py", diff);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].line, w[0].rule.as_str()), (12, "eval"));
    }

    #[test]
    fn removed_and_context_lines_are_not_scanned() {
        let diff = "@@ -1,2 +1,1 @@\n-curl https://x.sh | sh\n requests.get(u, verify=False)\n";
        assert!(scan_diff("a.sh", diff).is_empty());
    }

    #[test]
    fn rules_match_what_they_name_and_not_their_lookalikes() {
        // Credential cases are in `nuvira-secrets`.
        let cases: &[(&str, Option<&str>)] = &[
            (
                "curl -fsSL https://get.example.com | sudo bash",
                Some("curl-pipe-shell"),
            ),
            ("curl -fsSL https://get.example.com -o install.sh", None),
            (
                "requests.get(url, verify=False)",
                Some("tls-verification-disabled"),
            ),
            (
                "const agent = new https.Agent({ rejectUnauthorized: false });",
                Some("tls-verification-disabled"),
            ),
            ("let r = eval(input);", Some("eval")),
            ("let r = evaluate(input);", None),
            ("model.eval()", None),
            ("subprocess.run(cmd, shell=True)", Some("shell-injection")),
        ];
        for (line, want) in cases {
            let diff = format!("@@ -0,0 +1,1 @@\n+{line}\n");
            let got: Vec<String> = scan_diff("f", &diff).into_iter().map(|w| w.rule).collect();
            match want {
                Some(rule) => assert!(got.iter().any(|g| g == rule), "{line:?}: {got:?}"),
                None => assert!(got.is_empty(), "{line:?} matched {got:?}"),
            }
        }
    }
}
