//! The `tests` check: the upstream test step's result.

use crate::{CheckInput, CheckOutcome, VerifyCheck};
use nuvira_api::{CheckFinding, CheckStatus, async_trait};

/// The built-in `tests` check: fails when the upstream test run failed or did not complete,
/// warns when it found no tests, and is not run when the plan has no test step upstream.
#[derive(Debug, Clone, Copy, Default)]
pub struct TestsCheck;

#[async_trait]
impl VerifyCheck for TestsCheck {
    fn name(&self) -> &str {
        "tests"
    }

    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
        let Some(t) = input.test else {
            if input.dry_run {
                // A dry run runs no tests, so there is no result to check, whatever the plan.
                return CheckOutcome::new(
                    "tests",
                    CheckStatus::NotRun,
                    true,
                    "not run: a dry run runs no tests",
                );
            }
            return CheckOutcome::new(
                "tests",
                CheckStatus::NotRun,
                true,
                "no test step upstream; add a `test` step before `verify` to check the tests",
            );
        };
        let framework = t.framework.as_deref().unwrap_or("tests");
        if t.success && t.failed == 0 {
            if t.total == 0 {
                return CheckOutcome::new(
                    "tests",
                    CheckStatus::Warning,
                    true,
                    format!("the {framework} run found no tests"),
                );
            }
            return CheckOutcome::new(
                "tests",
                CheckStatus::Passed,
                true,
                format!("{} passed, {} skipped ({framework})", t.passed, t.skipped),
            );
        }
        let findings = t
            .failures
            .iter()
            .map(|f| {
                let msg = f.message.lines().next().unwrap_or_default();
                let finding = CheckFinding::new(format!("{}: {msg}", f.name));
                match &f.file {
                    Some(file) => finding.at(file.clone(), f.line),
                    None => finding,
                }
            })
            .collect();
        let details = if t.failed > 0 {
            format!("{} of {} test(s) failed ({framework})", t.failed, t.total)
        } else {
            format!("the {framework} run did not complete successfully")
        };
        CheckOutcome::new("tests", CheckStatus::Failed, true, details).with_findings(findings)
    }
}
