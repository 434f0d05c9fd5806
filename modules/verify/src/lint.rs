//! The `lint` check: one configured command (`cargo clippy -- -D warnings`, `npx eslint .`).
//!
//! The command runs through `sh -c` in a [`Sandbox`]: the one given (the run's, e.g. Docker),
//! else a [`LocalSandbox`] (a temporary copy of the workspace, the command in its own process
//! group that is killed as a whole at the timeout, so `cargo` does not leave `clippy-driver`
//! behind). Never in the workspace itself: a lint command comes from a plan (maybe a model's, or
//! one that came with the repository) and must not write into the real repository.

use crate::{CheckInput, CheckOutcome, VerifyCheck};
use nuvira_api::{CheckFinding, CheckStatus, Sandbox, SandboxRequest, async_trait};
use nuvira_sandbox::LocalSandbox;
use std::sync::Arc;
use std::time::Duration;

/// Default limit on one lint command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Memory limit on one lint command (4 GiB): a linter like clippy compiles the project.
pub const LINT_MEMORY: u64 = 4 << 30;
/// Process limit on one lint command.
const LINT_PIDS: u32 = 4096;
/// Findings kept per command.
const MAX_FINDINGS: usize = 20;

/// How a command ended, whatever ran it.
struct Ran {
    exit_code: Option<i64>,
    output: String,
    timed_out: bool,
    runner: String,
}

/// A `lint` check running one shell command.
#[derive(Clone)]
pub struct LintCheck {
    command: String,
    timeout: Duration,
    sandbox: Option<Arc<dyn Sandbox>>,
}

impl std::fmt::Debug for LintCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LintCheck")
            .field("command", &self.command)
            .field("timeout", &self.timeout)
            .field(
                "sandbox",
                &self.sandbox.as_ref().map(|s| s.kind().to_owned()),
            )
            .finish()
    }
}

impl LintCheck {
    /// A check running `command` (a shell command line) in a [`LocalSandbox`] with the default
    /// timeout.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            timeout: DEFAULT_TIMEOUT,
            sandbox: None,
        }
    }

    /// Builder-style: sets the timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builder-style: runs the command in this sandbox (`None`: a [`LocalSandbox`]).
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Option<Arc<dyn Sandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    async fn run_sandboxed(
        &self,
        sandbox: &dyn Sandbox,
        input: &CheckInput<'_>,
    ) -> Result<Ran, String> {
        let mut request = SandboxRequest::new(
            input.workspace_root,
            vec!["sh".into(), "-c".into(), self.command.clone()],
        );
        request.limits.timeout = self.timeout;
        // A linter builds the project (clippy is a compiler): more room than a test's default.
        request.limits.memory_bytes = LINT_MEMORY;
        request.limits.pids = LINT_PIDS;
        request.limits.cpus = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        let out = sandbox
            .run(&request, input.cancel)
            .await
            .map_err(|e| format!("the {} sandbox could not run it: {e}", sandbox.kind()))?;
        Ok(Ran {
            exit_code: out.exit_code,
            output: format!("{}{}", out.stdout, out.stderr),
            timed_out: out.timed_out,
            runner: format!("{} sandbox", sandbox.kind()),
        })
    }
}

/// Whether a line of linter output reports a warning (`warning: ...`, `warning[E]`,
/// eslint's `  3:5  warning  ...`).
fn is_warning(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("warning:")
        || t.starts_with("warning[")
        || t.split_whitespace().nth(1) == Some("warning")
}

fn is_error(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("error:")
        || t.starts_with("error[")
        || t.split_whitespace().nth(1) == Some("error")
}

#[async_trait]
impl VerifyCheck for LintCheck {
    fn name(&self) -> &str {
        "lint"
    }

    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
        let cmd = &self.command;
        let ran = match &self.sandbox {
            Some(s) => self.run_sandboxed(s.as_ref(), input).await,
            None => self.run_sandboxed(&LocalSandbox::new(), input).await,
        };
        let ran = match ran {
            Ok(r) => r,
            Err(e) => {
                return CheckOutcome::new(
                    "lint",
                    CheckStatus::NotRun,
                    true,
                    format!("`{cmd}`: {e}"),
                );
            }
        };
        if ran.timed_out {
            return CheckOutcome::new(
                "lint",
                CheckStatus::Failed,
                true,
                format!(
                    "`{cmd}` timed out after {}s ({})",
                    self.timeout.as_secs(),
                    ran.runner
                ),
            );
        }
        let lines: Vec<&str> = ran.output.lines().collect();
        let warnings: Vec<String> = lines
            .iter()
            .filter(|l| is_warning(l))
            .take(MAX_FINDINGS)
            .map(|l| l.trim().to_owned())
            .collect();
        match ran.exit_code {
            Some(0) if warnings.is_empty() => CheckOutcome::new(
                "lint",
                CheckStatus::Passed,
                true,
                format!("`{cmd}` passed ({})", ran.runner),
            ),
            Some(0) => CheckOutcome::new(
                "lint",
                CheckStatus::Warning,
                true,
                format!(
                    "`{cmd}` reported {} warning line(s) ({})",
                    lines.iter().filter(|l| is_warning(l)).count(),
                    ran.runner
                ),
            )
            .with_findings(warnings.iter().map(|l| CheckFinding::parse(l)).collect()),
            Some(126 | 127) => CheckOutcome::new(
                "lint",
                CheckStatus::NotRun,
                true,
                format!(
                    "`{cmd}` could not be started (exit code {}): is the tool installed? {}",
                    ran.exit_code.unwrap_or_default(),
                    lines.last().map(|l| l.trim()).unwrap_or_default()
                ),
            ),
            code => {
                let mut findings: Vec<&str> = lines
                    .iter()
                    .filter(|l| is_error(l))
                    .take(MAX_FINDINGS)
                    .map(|l| l.trim())
                    .collect();
                if findings.is_empty() {
                    let start = lines.len().saturating_sub(MAX_FINDINGS);
                    findings = lines[start..]
                        .iter()
                        .filter(|l| !l.trim().is_empty())
                        .map(|l| l.trim())
                        .collect();
                }
                // Tool output lines: `path:line:col: message` where the tool writes that.
                let findings = findings.into_iter().map(CheckFinding::parse).collect();
                let how = code.map_or_else(
                    || "was killed".to_owned(),
                    |c| format!("exited with code {c}"),
                );
                CheckOutcome::new(
                    "lint",
                    CheckStatus::Failed,
                    true,
                    format!("`{cmd}` {how} ({})", ran.runner),
                )
                .with_findings(findings)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_and_error_lines_of_clippy_and_eslint_are_recognised() {
        assert!(is_warning("warning: unused variable: `x`"));
        assert!(is_warning(
            "  3:5  warning  'a' is assigned a value but never used  no-unused-vars"
        ));
        assert!(!is_warning("Compiling foo v0.1.0"));
        assert!(is_error(
            "error[E0425]: cannot find value `y` in this scope"
        ));
        assert!(is_error("  1:1  error  Parsing error: Unexpected token"));
    }
}
