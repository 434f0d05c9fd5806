//! Repair: budgets, attempts and results of the recover stage.

use crate::ErrorCategory;
use serde::{Deserialize, Serialize};

/// How many repair attempts a step (and a run) may make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
