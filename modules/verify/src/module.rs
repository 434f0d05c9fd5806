//! The `verify` [`Module`] and its step config.

use crate::{
    CheckInput, GoalAlignmentCheck, LintCheck, Strictness, SyntaxCheck, TestsCheck, VerifyCheck,
    run_checks, security::SecurityCheck,
};
use nuvira_api::{
    ConfigError, ErrorCategory, EventKind, Failure, FileChange, Module, ModuleError, ModuleKind,
    PlanStep, Sandbox, StepContext, StepOutput, SyntaxChecker, VerificationResult, WriteSet,
    async_trait,
};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The built-in checks run when a step names none (`lint` joins them when commands are set).
pub const DEFAULT_CHECKS: &[&str] = &["syntax", "tests", "security", "goal-alignment"];

/// The config of a `verify` step.
///
/// ```yaml
/// - id: verify
///   module: verify
///   config:
///     checks: [syntax, tests, security, goal-alignment, lint]
///     strictness: high            # low | medium (default) | high
///     lint: ["cargo clippy --all-targets -- -D warnings"]
///     lint_timeout: 10m
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct VerifyConfig {
    /// The checks to run, by name; all built-in and registered checks when absent.
    #[serde(default)]
    pub checks: Option<Vec<String>>,
    /// Which findings block.
    #[serde(default)]
    pub strictness: Strictness,
    /// Lint commands (shell command lines), each run as one `lint` check.
    #[serde(default)]
    pub lint: Vec<String>,
    /// The limit on each lint command (default 300 s).
    #[serde(default, with = "nuvira_api::duration::serde_opt")]
    pub lint_timeout: Option<Duration>,
}

impl VerifyConfig {
    /// Reads a step's config (`null` means all defaults).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the step and the bad key.
    pub fn from_step(step: &PlanStep) -> Result<Self, ConfigError> {
        step.config_as().map_err(|e| {
            e.map_message(|e| {
                // serde lists the keys itself for an unknown one; say them once.
                let keys = if e.contains("expected one of") {
                    ""
                } else {
                    " (expected keys: checks, strictness, lint, lint_timeout)"
                };
                format!("invalid verify config: {e}{keys}")
            })
        })
    }
}

/// Why a verify config names checks that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChecksError {
    /// `lint` commands are configured but `checks` leaves `lint` out.
    #[error(
        "`lint` commands are configured but `lint` is not in `checks`; add it or remove the commands"
    )]
    LintNotSelected,
    /// `checks` names `lint` but there are no commands.
    #[error(
        "check `lint` needs at least one command in `lint` (e.g. `lint: [\"cargo clippy -- -D warnings\"]`)"
    )]
    LintWithoutCommands,
    /// `checks` names a check that is neither built in nor registered.
    #[error("unknown check `{name}` (known: {})", known.join(", "))]
    UnknownCheck {
        /// The name.
        name: String,
        /// Every check there is.
        known: Vec<String>,
    },
}

/// The `verify` module: the built-in checks plus any registered ones.
#[derive(Clone)]
pub struct VerifyModule {
    checker: Arc<dyn SyntaxChecker>,
    sandbox: Option<Arc<dyn Sandbox>>,
    custom: Vec<Arc<dyn VerifyCheck>>,
}

impl std::fmt::Debug for VerifyModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyModule")
            .field(
                "sandbox",
                &self.sandbox.as_ref().map(|s| s.kind().to_owned()),
            )
            .field(
                "custom",
                &self
                    .custom
                    .iter()
                    .map(|c| c.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tree-sitter")]
impl Default for VerifyModule {
    /// The module with `nuvira-syntax`'s tree-sitter checker, lint run in a local sandbox.
    fn default() -> Self {
        Self::new(Arc::new(nuvira_syntax::TreeSitterChecker::new()))
    }
}

impl VerifyModule {
    /// A module whose `syntax` check uses `checker`.
    pub fn new(checker: Arc<dyn SyntaxChecker>) -> Self {
        Self {
            checker,
            sandbox: None,
            custom: Vec::new(),
        }
    }

    /// Builder-style: runs lint commands in this sandbox (the run's, e.g. Docker) instead of a
    /// [`nuvira_sandbox::LocalSandbox`] (a temporary copy of the workspace). Either way they
    /// never run in the workspace itself.
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// Builder-style: registers a custom check (it replaces a built-in one of the same name).
    #[must_use]
    pub fn with_check(mut self, check: Arc<dyn VerifyCheck>) -> Self {
        self.custom.retain(|c| c.name() != check.name());
        self.custom.push(check);
        self
    }

    /// The checks a config asks for, in order.
    ///
    /// # Errors
    /// A [`ChecksError`] naming an unknown check, or `lint` without commands.
    pub fn checks_for(
        &self,
        config: &VerifyConfig,
    ) -> Result<Vec<Arc<dyn VerifyCheck>>, ChecksError> {
        let names: Vec<String> = match &config.checks {
            Some(names) => names.clone(),
            None => {
                let mut n: Vec<String> = DEFAULT_CHECKS.iter().map(|s| (*s).to_owned()).collect();
                for c in &self.custom {
                    if !n.iter().any(|x| x == c.name()) {
                        n.push(c.name().to_owned());
                    }
                }
                if !config.lint.is_empty() {
                    n.push("lint".into());
                }
                n
            }
        };
        if !config.lint.is_empty() && !names.iter().any(|n| n == "lint") {
            return Err(ChecksError::LintNotSelected);
        }
        let mut out: Vec<Arc<dyn VerifyCheck>> = Vec::new();
        for name in &names {
            if let Some(c) = self.custom.iter().find(|c| c.name() == name) {
                out.push(c.clone());
                continue;
            }
            match name.as_str() {
                "syntax" => out.push(Arc::new(SyntaxCheck::new(self.checker.clone()))),
                "tests" => out.push(Arc::new(TestsCheck)),
                "security" => out.push(Arc::new(SecurityCheck)),
                "goal-alignment" => out.push(Arc::new(GoalAlignmentCheck)),
                "lint" => {
                    if config.lint.is_empty() {
                        return Err(ChecksError::LintWithoutCommands);
                    }
                    for cmd in &config.lint {
                        let mut c = LintCheck::new(cmd.clone()).with_sandbox(self.sandbox.clone());
                        if let Some(t) = config.lint_timeout {
                            c = c.with_timeout(t);
                        }
                        out.push(Arc::new(c));
                    }
                }
                other => {
                    let mut known: Vec<String> =
                        DEFAULT_CHECKS.iter().map(|c| (*c).to_owned()).collect();
                    known.push("lint".into());
                    known.extend(self.custom.iter().map(|c| c.name().to_owned()));
                    return Err(ChecksError::UnknownCheck {
                        name: other.to_owned(),
                        known,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Runs the checks a config asks for on an input, emitting `verify:*` events through
    /// `emit`.
    ///
    /// # Errors
    /// The config's [`ChecksError`] (see [`checks_for`](Self::checks_for)).
    pub async fn verify(
        &self,
        config: &VerifyConfig,
        input: &CheckInput<'_>,
        emit: &(dyn Fn(EventKind) + Sync),
    ) -> Result<VerificationResult, ChecksError> {
        let checks = self.checks_for(config)?;
        emit(EventKind::VerifyStarting {
            checks: checks.len(),
        });
        let result = run_checks(&checks, input, &|c| {
            emit(EventKind::VerifyCheck { check: c.clone() });
        })
        .await;
        emit(EventKind::VerifyCompleted {
            passed: result.passed,
            score: result.overall_score,
            blockers: result.blockers.len(),
        });
        Ok(result)
    }
}

#[async_trait]
impl Module for VerifyModule {
    fn name(&self) -> &str {
        "verify"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Verify
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        let config = VerifyConfig::from_step(step)?;
        self.checks_for(&config)
            .map(|_| ())
            .map_err(|e| ConfigError::new(&step.id, e.to_string()).at("checks"))
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let config = VerifyConfig::from_step(step)?;
        let upstream = ctx.upstream();
        let changes: Vec<FileChange> = upstream
            .iter()
            .filter_map(|(_, out)| match out.as_ref() {
                StepOutput::Edit(r) => Some(r.preview.changes.iter().cloned()),
                StepOutput::EditPreview(p) if ctx.dry_run() => Some(p.changes.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect();
        let test = ctx.find_upstream(|o| match o {
            StepOutput::Test(t) => Some(t.clone()),
            _ => None,
        });
        let input = CheckInput::new(ctx.workspace_root(), ctx.goal(), ctx.cancel().as_ref())
            .with_changes(&changes)
            .with_test(test.as_ref())
            .with_llm(ctx.llm())
            .with_strictness(config.strictness)
            .with_dry_run(ctx.dry_run());
        let emit = |kind| ctx.emit(kind);
        let result = self
            .verify(&config, &input, &emit)
            .await
            .map_err(|e| ModuleError::invalid_config(format!("step `{}`: {e}", step.id)))?;
        if ctx.cancel().is_cancelled() {
            return Err(ModuleError::Cancelled);
        }
        if result.passed {
            return Ok(StepOutput::Verification(result));
        }
        let message = format!(
            "verification found {} blocker(s) at strictness {}: {}",
            result.blockers.len(),
            config.strictness.as_str(),
            result.blockers.join("; ")
        );
        let evidence: Vec<String> = result
            .checks
            .iter()
            .filter(|c| {
                c.blocking
                    && matches!(
                        c.status,
                        nuvira_api::CheckStatus::Failed | nuvira_api::CheckStatus::Warning
                    )
            })
            .flat_map(|c| c.findings.iter().map(move |f| format!("{}: {f}", c.name)))
            .collect();
        Err(ModuleError::Recoverable(
            Failure::new(ErrorCategory::VerificationFailed, message)
                .with_evidence(evidence)
                .with_output(StepOutput::Verification(result)),
        ))
    }
}
