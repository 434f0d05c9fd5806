//! The report of a run.

use crate::{ErrorCategory, StepOutput};
use serde::{Deserialize, Serialize};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Every step succeeded.
    Succeeded,
    /// At least one step failed.
    Failed,
    /// The run was cancelled.
    Cancelled,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    /// Never reached a terminal state (the run was cancelled first).
    Pending,
    /// Running when the stream ended.
    Running,
    /// Succeeded.
    Succeeded,
    /// Failed.
    Failed,
    /// Skipped.
    Skipped,
}

/// One step in a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StepRecord {
    /// The step id.
    pub id: String,
    /// Its module.
    pub module: String,
    /// Its dependencies.
    pub depends_on: Vec<String>,
    /// How it ended.
    pub status: StepStatus,
    /// Milliseconds from the run's start to the step's (last) start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// How long it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Attempts made.
    pub attempts: u32,
    /// Failure category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<ErrorCategory>,
    /// Failure or skip message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What it produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<StepOutput>,
}

impl StepRecord {
    /// A pending record for a step.
    pub fn pending(
        id: impl Into<String>,
        module: impl Into<String>,
        depends_on: Vec<String>,
    ) -> Self {
        Self {
            id: id.into(),
            module: module.into(),
            depends_on,
            status: StepStatus::Pending,
            started_ms: None,
            duration_ms: None,
            attempts: 0,
            category: None,
            message: None,
            output: None,
        }
    }
}

/// The report of a run, built from its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct ExecutionReport {
    /// The run.
    pub run_id: String,
    /// The goal.
    pub goal: String,
    /// How it ended (`None` while it runs).
    pub status: Option<RunStatus>,
    /// One line.
    pub summary: String,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Every step, in plan order.
    pub steps: Vec<StepRecord>,
}
