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
