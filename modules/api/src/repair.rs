//! Repair: budgets, attempts and results of the recover stage.

use crate::ErrorCategory;
use serde::{Deserialize, Serialize};

/// How many repair attempts a step (and a run) may make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct RepairBudget {
    /// Attempts per step, including the first run (default 3).
    pub max_attempts: u32,
    /// Attempts over the whole run, across steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_attempts: Option<u32>,
}

impl Default for RepairBudget {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            max_run_attempts: None,
        }
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RepairOutcome {
    /// The step succeeded.
    Success,
    /// It failed again.
    Failed,
    /// The strategy did not apply.
    Skipped,
    /// Degraded gracefully: reported as such, never as success.
    Bypassed,
}

/// One repair attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct RepairAttempt {
    /// From 1.
    pub attempt: u32,
    /// The strategy's name.
    pub strategy: String,
    /// The category of the failure it addressed.
    pub category: ErrorCategory,
    /// How it ended.
    pub outcome: RepairOutcome,
    /// How long it took.
    pub duration_ms: u64,
    /// The error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of recovering a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct RepairResult {
    /// The step ended up succeeding.
    pub success: bool,
    /// Every attempt.
    pub attempts: Vec<RepairAttempt>,
    /// The last error, if it did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_error: Option<String>,
    /// The model switched to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switched_model: Option<String>,
}

/// What the engine should do after a step failed recoverably.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RecoveryDecision {
    /// Stop: the step fails.
    GiveUp,
    /// Run the step again after `delay`, with `feedback` in its context
    /// ([`StepContext::feedback`](crate::StepContext)), optionally with a changed step
    /// (a rephrased instruction, a simplified goal, another model in its config).
    Retry {
        /// Wait this long first.
        delay: std::time::Duration,
        /// Given to the next attempt.
        feedback: Option<String>,
        /// The step to run instead (same id), when the strategy changed it.
        step: Option<Box<crate::PlanStep>>,
    },
    /// Replace the step by smaller steps (split-task): they are validated (unique new ids,
    /// dependencies only among themselves or on the step's own dependencies, no cycles, known
    /// modules), announced with `plan:step-created`, and run in dependency order in the
    /// failed step's place; the step's result is that of the last of them.
    Split {
        /// The sub-steps.
        steps: Vec<crate::PlanStep>,
    },
    /// Graceful degradation: the step is recorded as bypassed (never as succeeded), its
    /// dependents run, and the run does not count as a success.
    Bypass {
        /// Why the step was bypassed.
        reason: String,
    },
}

/// Decides what happens after a recoverable failure. The recover stage implements it; the
/// engine only ever hands it [`ModuleError::Recoverable`](crate::ModuleError) failures, and
/// calls it from the failed step's own task (so a slow policy delays only that step).
///
/// ```
/// use nuvira_api::{async_trait, Failure, PlanStep, RecoveryDecision, RecoveryPolicy, StepContext};
///
/// /// Retries every recoverable failure once.
/// struct RetryOnce;
///
/// #[async_trait]
/// impl RecoveryPolicy for RetryOnce {
///     async fn on_failure(&self, _s: &PlanStep, _c: &StepContext, attempt: u32, _f: &Failure) -> RecoveryDecision {
///         if attempt < 2 {
///             RecoveryDecision::Retry { delay: Default::default(), feedback: None, step: None }
///         } else {
///             RecoveryDecision::GiveUp
///         }
///     }
/// }
/// ```
#[crate::async_trait]
pub trait RecoveryPolicy: Send + Sync {
    /// Called after attempt `attempt` (from 1) of `step` failed with `failure`.
    async fn on_failure(
        &self,
        step: &crate::PlanStep,
        ctx: &crate::StepContext,
        attempt: u32,
        failure: &crate::Failure,
    ) -> RecoveryDecision;

    /// Called once the sub-steps of a [`RecoveryDecision::Split`] for `step` have all run:
    /// `success` is whether every one of them succeeded. The default does nothing.
    async fn on_split_finished(
        &self,
        step: &crate::PlanStep,
        ctx: &crate::StepContext,
        success: bool,
    ) {
        let _ = (step, ctx, success);
    }
}

/// A failure's category and the evidence for it (compiler errors with file:line, failing tests,
/// the line that shows a timeout or a rate limit), as the recover stage's classifier judged it.
/// Evidence is redacted of keys and tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Classification {
    /// The category.
    pub category: ErrorCategory,
    /// Lines that show it, most telling first (at most [`MAX_EVIDENCE`]).
    pub evidence: Vec<String>,
}

impl Classification {
    /// A classification of a category with its evidence.
    pub fn new(category: ErrorCategory, evidence: Vec<String>) -> Self {
        Self { category, evidence }
    }
}

/// The most evidence lines a [`Classification`] keeps.
pub const MAX_EVIDENCE: usize = 20;

/// What a [`RepairStrategy`] is given to decide on.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RepairInput<'a> {
    /// The failed step (as it ran: an earlier repair may have changed it).
    pub step: &'a crate::PlanStep,
    /// The failed attempt's context (its events go to the run's bus).
    pub ctx: &'a crate::StepContext,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// The failure.
    pub failure: &'a crate::Failure,
    /// Its classification.
    pub classification: &'a Classification,
    /// How often this strategy already acted on this step in this run.
    pub uses: u32,
}

impl<'a> RepairInput<'a> {
    /// An input for a strategy that has not acted on the step yet.
    pub fn new(
        step: &'a crate::PlanStep,
        ctx: &'a crate::StepContext,
        attempt: u32,
        failure: &'a crate::Failure,
        classification: &'a Classification,
    ) -> Self {
        Self {
            step,
            ctx,
            attempt,
            failure,
            classification,
            uses: 0,
        }
    }

    /// Builder-style: sets how often the strategy already acted on the step.
    #[must_use]
    pub fn with_uses(mut self, uses: u32) -> Self {
        self.uses = uses;
        self
    }
}

/// One way to repair a failed step, picked by name per failure category
/// (`config.recover.strategies`). The recover stage (a [`RecoveryPolicy`]) classifies each
/// recoverable failure, asks its strategies in order, and hands the first decision to the
/// engine.
///
/// [`applies`](RepairStrategy::applies) is a cheap check (does the step have instructions to
/// rephrase? is there another model?); [`decide`](RepairStrategy::decide) does the work and may
/// still decline with `None` (e.g. the model could not produce a fix), in which case the
/// policy tries the next strategy. `nuvira-repair-strategies` has the built-in ones.
///
/// ```
/// use nuvira_api::{async_trait, Classification, ErrorCategory, Failure, PlanStep, RecoveryDecision};
/// use nuvira_api::{RepairInput, RepairStrategy, StepContext};
/// use std::time::Duration;
///
/// /// Waits a minute before retrying a timed-out step, once.
/// struct SlowRetry;
///
/// #[async_trait]
/// impl RepairStrategy for SlowRetry {
///     fn name(&self) -> &str { "slow-retry" }
///     fn applies(&self, input: &RepairInput<'_>) -> bool {
///         input.uses == 0 && input.classification.category == ErrorCategory::Timeout
///     }
///     async fn decide(&self, _input: &RepairInput<'_>) -> Option<RecoveryDecision> {
///         Some(RecoveryDecision::Retry { delay: Duration::from_secs(60), feedback: None, step: None })
///     }
/// }
///
/// let step = PlanStep::new("test", "test");
/// let ctx = StepContext::standalone(".");
/// let failure = Failure::new(ErrorCategory::Timeout, "killed at its timeout (2m)");
/// let class = Classification::new(ErrorCategory::Timeout, vec![]);
/// assert!(SlowRetry.applies(&RepairInput::new(&step, &ctx, 1, &failure, &class)));
/// assert!(!SlowRetry.applies(&RepairInput::new(&step, &ctx, 2, &failure, &class).with_uses(1)));
/// ```
#[crate::async_trait]
pub trait RepairStrategy: Send + Sync {
    /// The name used in `config.recover.strategies` and in events.
    fn name(&self) -> &str;
    /// Whether the strategy can act on this failure at all.
    fn applies(&self, input: &RepairInput<'_>) -> bool;
    /// What the engine should do, or `None` when the strategy could not act after all.
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision>;
}
