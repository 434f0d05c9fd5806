//! # nuvira-verify — the checks a run must pass before it counts as done
//!
//! The `verify` step of a Nuvira plan looks at what the run changed and decides whether the
//! result can be trusted. It runs a pipeline of [`VerifyCheck`]s and returns a
//! [`nuvira_api::VerificationResult`]:
//!
//! | check | looks at | blocks |
//! |---|---|---|
//! | `syntax` | every file the upstream edit steps changed, re-read from disk | on errors |
//! | `tests` | the upstream test step's result (not run when there is none) | on failures |
//! | `security` | the added (`+`) lines of the changes: keys, tokens, `eval(`, `curl \| sh`, disabled TLS checks | on errors; warnings from `medium` |
//! | `goal-alignment` | the diff, judged by the model (`NotRun` without one, never "passed") | when the model says no |
//! | `lint` | each configured command (`cargo clippy`, `eslint .`), in the sandbox given (else a local copy of the workspace), never in the workspace itself | on a failing exit |
//!
//! Why it is shaped so:
//! - **Checks are values, the pipeline is policy.** A check reports what it saw
//!   ([`CheckOutcome`]); the pipeline alone decides what blocks, from the check's status and the
//!   [`Strictness`]: `low` blocks on errors only, `medium` also on the security check's warnings,
//!   `high` on every warning. So a custom check (registered with
//!   [`VerifyModule::with_check`]) gets the same treatment as the built-in ones.
//! - **"Could not check" is not "passed".** A check that cannot run reports
//!   [`CheckStatus::NotRun`]; it is left out of the score and
//!   listed among the suggestions, so a missing model or test step is visible.
//! - **Model answers are data.** The diff goes to the model as quoted, delimited untrusted
//!   text, and the answer must be JSON of a fixed shape; anything else is retried once and then
//!   reported as not run.
//!
//! A verification with blockers fails the step with a recoverable
//! [`ErrorCategory::VerificationFailed`](nuvira_api::ErrorCategory::VerificationFailed) whose
//! output is the [`VerificationResult`], so reports still show
//! every check.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod alignment;
mod lint;
mod module;
pub mod security;
mod syntax;
mod tests_check;

pub use alignment::GoalAlignmentCheck;
pub use lint::LintCheck;
pub use module::{ChecksError, DEFAULT_CHECKS, VerifyConfig, VerifyModule};
pub use security::SecurityCheck;
pub use syntax::SyntaxCheck;
pub use tests_check::TestsCheck;

use nuvira_api::{
    CancelSignal, CheckFinding, CheckStatus, FileChange, LlmClient, TestResult, VerificationCheck,
    VerificationResult, async_trait,
};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// How strict verification is: which findings block.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Strictness {
    /// Only errors (failed checks) block.
    Low,
    /// Errors block, and so do warnings of checks that say so (the security check).
    #[default]
    Medium,
    /// Every warning blocks.
    High,
}

impl Strictness {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// What a check is given.
#[non_exhaustive]
pub struct CheckInput<'a> {
    /// The workspace root.
    pub workspace_root: &'a Path,
    /// The plan's goal.
    pub goal: &'a str,
    /// Every file change of the upstream edit steps, in order (a file may appear more than once);
    /// in a dry run, the changes of the upstream previews.
    pub changes: &'a [FileChange],
    /// The upstream test step's result, if there is one.
    pub test: Option<&'a TestResult>,
    /// The model, if one is configured.
    pub llm: Option<&'a Arc<dyn LlmClient>>,
    /// The strictness in force.
    pub strictness: Strictness,
    /// Run-wide cancellation.
    pub cancel: &'a dyn CancelSignal,
    /// A dry run: the changes are previews, not on disk.
    pub dry_run: bool,
}

impl<'a> CheckInput<'a> {
    /// An input with no changes, no test result and no model.
    pub fn new(workspace_root: &'a Path, goal: &'a str, cancel: &'a dyn CancelSignal) -> Self {
        Self {
            workspace_root,
            goal,
            changes: &[],
            test: None,
            llm: None,
            strictness: Strictness::Medium,
            cancel,
            dry_run: false,
        }
    }

    /// Builder-style: marks a dry run (the changes are previews; nothing is on disk).
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Builder-style: sets the changes.
    #[must_use]
    pub fn with_changes(mut self, changes: &'a [FileChange]) -> Self {
        self.changes = changes;
        self
    }

    /// Builder-style: sets the test result.
    #[must_use]
    pub fn with_test(mut self, test: Option<&'a TestResult>) -> Self {
        self.test = test;
        self
    }

    /// Builder-style: sets the model.
    #[must_use]
    pub fn with_llm(mut self, llm: Option<&'a Arc<dyn LlmClient>>) -> Self {
        self.llm = llm;
        self
    }

    /// Builder-style: sets the strictness.
    #[must_use]
    pub fn with_strictness(mut self, strictness: Strictness) -> Self {
        self.strictness = strictness;
        self
    }

    /// The last change of each path, in first-seen order; deleted files are left out.
    pub fn current_files(&self) -> Vec<&'a FileChange> {
        let mut out: Vec<&FileChange> = Vec::new();
        for c in self.changes {
            if let Some(slot) = out.iter_mut().find(|o| o.path == c.path) {
                *slot = c;
            } else {
                out.push(c);
            }
        }
        out.retain(|c| c.kind != nuvira_api::ChangeKind::Delete);
        out
    }
}

/// What a check reports: the check record (its `blocking` says whether a failure of this
/// check blocks) and suggestions for the user.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CheckOutcome {
    /// The check record.
    pub check: VerificationCheck,
    /// Improvements worth making, in words.
    pub suggestions: Vec<String>,
}

impl CheckOutcome {
    /// An outcome of a check.
    pub fn new(
        name: impl Into<String>,
        status: CheckStatus,
        blocking: bool,
        details: impl Into<String>,
    ) -> Self {
        Self {
            check: VerificationCheck::new(name, status, blocking, details),
            suggestions: Vec::new(),
        }
    }

    /// Builder-style: adds findings.
    #[must_use]
    pub fn with_findings(mut self, findings: Vec<CheckFinding>) -> Self {
        self.check.findings = findings;
        self
    }

    /// Builder-style: adds suggestions.
    #[must_use]
    pub fn with_suggestions(mut self, suggestions: Vec<String>) -> Self {
        self.suggestions = suggestions;
        self
    }
}

/// One verification check. Implement it to add a check; register it with
/// [`VerifyModule::with_check`], and name it in a step's `checks` (or leave `checks` out to run
/// every registered check).
///
/// ```
/// use nuvira_api::{async_trait, CheckFinding, CheckStatus};
/// use nuvira_verify::{CheckInput, CheckOutcome, VerifyCheck};
///
/// /// Fails when a change adds a `todo!()`.
/// struct NoTodo;
///
/// #[async_trait]
/// impl VerifyCheck for NoTodo {
///     fn name(&self) -> &str { "no-todo" }
///     async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
///         let bad: Vec<CheckFinding> = input.changes.iter()
///             .filter(|c| c.diff.lines().any(|l| l.starts_with('+') && l.contains("todo!()")))
///             .map(|c| CheckFinding::new("adds todo!()").at(c.path.clone(), None))
///             .collect();
///         let status = if bad.is_empty() { CheckStatus::Passed } else { CheckStatus::Failed };
///         CheckOutcome::new("no-todo", status, true, format!("{} file(s) add todo!()", bad.len()))
///             .with_findings(bad)
///     }
/// }
/// ```
#[async_trait]
pub trait VerifyCheck: Send + Sync {
    /// The name steps use in `checks:`.
    fn name(&self) -> &str;

    /// From which strictness on a [`CheckStatus::Warning`] of this check blocks. Defaults to
    /// [`Strictness::High`].
    fn warnings_block_from(&self) -> Strictness {
        Strictness::High
    }

    /// Runs the check. A check that cannot run reports [`CheckStatus::NotRun`] and says why.
    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome;
}

/// Whether a check's outcome blocks at a strictness.
pub fn blocks(
    status: CheckStatus,
    blocking: bool,
    warnings_from: Strictness,
    strictness: Strictness,
) -> bool {
    match status {
        CheckStatus::Failed => blocking || strictness == Strictness::High,
        CheckStatus::Warning => strictness >= warnings_from,
        CheckStatus::Passed | CheckStatus::NotRun => false,
    }
}

/// Runs checks (concurrently) and combines their outcomes into a [`VerificationResult`].
///
/// `on_check` sees each check record as it is finalised (in the order of `checks`).
pub async fn run_checks(
    checks: &[Arc<dyn VerifyCheck>],
    input: &CheckInput<'_>,
    on_check: &(dyn Fn(&VerificationCheck) + Sync),
) -> VerificationResult {
    let outcomes = futures::future::join_all(checks.iter().map(|c| c.run(input))).await;
    let mut result = VerificationResult::default();
    let (mut points, mut ran) = (0.0, 0usize);
    for (check, outcome) in checks.iter().zip(outcomes) {
        let mut record = outcome.check;
        let blocked = blocks(
            record.status,
            record.blocking,
            check.warnings_block_from(),
            input.strictness,
        );
        if matches!(record.status, CheckStatus::Warning | CheckStatus::Failed) {
            record.blocking = blocked;
        }
        match record.status {
            CheckStatus::Passed => {
                points += 1.0;
                ran += 1;
            }
            CheckStatus::Warning => {
                points += 0.5;
                ran += 1;
            }
            CheckStatus::Failed => ran += 1,
            CheckStatus::NotRun => result
                .suggestions
                .push(format!("{} did not run: {}", record.name, record.details)),
        }
        if blocked {
            result
                .blockers
                .push(format!("{}: {}", record.name, record.details));
        } else if matches!(record.status, CheckStatus::Warning | CheckStatus::Failed) {
            result
                .suggestions
                .push(format!("{}: {}", record.name, record.details));
        }
        result.suggestions.extend(outcome.suggestions);
        on_check(&record);
        result.checks.push(record);
    }
    result.overall_score = if ran == 0 {
        0.0
    } else {
        ((points / ran as f64) * 100.0).round() / 100.0
    };
    result.passed = result.blockers.is_empty();
    result
}
