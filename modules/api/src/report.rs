//! The report of a run.

use crate::{ErrorCategory, FileChange, Severity, StepOutput};
use serde::{Deserialize, Serialize};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
    /// What it produced. In a report built by `nuvira-report`, the parts distilled into
    /// [`file_changes`](Self::file_changes) and [`findings`](Self::findings) (an edit's changes,
    /// syntax issues and security warnings, a test run's failures) are moved there, not copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<StepOutput>,
    /// What the step is for, from the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Evidence lines of a failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// The failed or skipped dependency that caused a skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_cause: Option<String>,
    /// Files the step changed (or would change, in a dry run), with their diffs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_changes: Vec<FileChange>,
    /// Files restored to their original contents after the step, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_back: Vec<String>,
    /// Test totals, for steps that ran tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestTotals>,
    /// Verification outcome, for steps that verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSummary>,
    /// Repair attempts the recover stage made for the step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repair_attempts: u32,
    /// Everything worth pointing at: test failures, syntax issues, verification blockers and
    /// warnings, security warnings, the step's own failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The model calls the step made (none: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ModelUsage>,
}

/// Model calls and what they used: per step and per run in a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ModelUsage {
    /// Calls made.
    pub calls: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
    /// The cost in US dollars of the calls whose model has a price (`None`: no call had one,
    /// so only tokens are known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Calls whose model has no price, so they are not in `cost_usd`.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub unpriced_calls: u64,
}

impl ModelUsage {
    /// Adds one call's tokens and cost (`None`: its model has no price).
    pub fn add(&mut self, usage: crate::TokenUsage, cost_usd: Option<f64>) {
        self.calls += 1;
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        match cost_usd {
            Some(c) => self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + c),
            None => self.unpriced_calls += 1,
        }
    }

    /// Input and output tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// One line: `3 model calls, 1200 tokens (1000 in, 200 out), $0.0042`.
    pub fn describe(&self) -> String {
        let cost = match self.cost_usd {
            Some(c) if self.unpriced_calls > 0 => {
                format!(
                    ", ${c:.4} (+{} call(s) without a price)",
                    self.unpriced_calls
                )
            }
            Some(c) => format!(", ${c:.4}"),
            None => String::new(),
        };
        format!(
            "{} model call(s), {} tokens ({} in, {} out){cost}",
            self.calls,
            self.total_tokens(),
            self.input_tokens,
            self.output_tokens
        )
    }
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u32) -> bool {
    *n == 0
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
            description: None,
            evidence: Vec::new(),
            skip_cause: None,
            file_changes: Vec::new(),
            rolled_back: Vec::new(),
            tests: None,
            verification: None,
            repair_attempts: 0,
            findings: Vec::new(),
            usage: None,
        }
    }
}

/// The report of a run, built from its events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
    /// A stable id for this report: derived from the run id and the last event folded, so the
    /// same events always give the same id.
    #[serde(default)]
    pub report_id: String,
    /// When the run started, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<u64>,
    /// Whether the run was a dry run (file changes are previews).
    #[serde(default)]
    pub dry_run: bool,
    /// Why the run was cancelled, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// Totals over every step.
    #[serde(default)]
    pub counts: ReportCounts,
    /// What to do next, most important first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_up: Vec<String>,
    /// Number of events the report was built from.
    #[serde(default)]
    pub events: u64,
    /// Event types this version does not know (written by a newer Nuvira), skipped while
    /// building the report: each once, in order of first appearance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_event_types: Vec<String>,
    /// Every model call of the run (planning included); `None` when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ModelUsage>,
    /// Why the run was stopped early by a budget (`--max-tokens`, `--max-cost`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_exceeded: Option<String>,
}

impl ExecutionReport {
    /// Every finding of every step, in step order.
    pub fn findings(&self) -> impl Iterator<Item = (&StepRecord, &Finding)> {
        self.steps
            .iter()
            .flat_map(|s| s.findings.iter().map(move |f| (s, f)))
    }

    /// Every file change of every step, in step order.
    pub fn file_changes(&self) -> impl Iterator<Item = (&StepRecord, &FileChange)> {
        self.steps
            .iter()
            .flat_map(|s| s.file_changes.iter().map(move |c| (s, c)))
    }
}

/// Totals over a report's steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ReportCounts {
    /// Steps in the report.
    pub steps: usize,
    /// Steps that succeeded.
    pub succeeded: usize,
    /// Steps that failed.
    pub failed: usize,
    /// Steps that were skipped.
    pub skipped: usize,
    /// Steps that never finished (pending or running when the stream ended).
    pub unfinished: usize,
    /// Distinct files changed.
    pub files_changed: usize,
    /// Lines added over every change.
    pub lines_added: usize,
    /// Lines removed over every change.
    pub lines_removed: usize,
    /// Tests passed over every test step.
    pub tests_passed: u64,
    /// Tests failed over every test step.
    pub tests_failed: u64,
    /// Tests skipped over every test step.
    pub tests_skipped: u64,
    /// Findings of severity error.
    pub errors: usize,
    /// Findings of severity warning.
    pub warnings: usize,
    /// Findings of severity info.
    pub notices: usize,
}

/// The totals of one test step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct TestTotals {
    /// Every test passed and the run completed.
    pub success: bool,
    /// Passed tests.
    pub passed: u32,
    /// Failed tests.
    pub failed: u32,
    /// Skipped tests.
    pub skipped: u32,
    /// `passed + failed`.
    pub total: u32,
    /// How long the tests ran.
    pub duration_ms: u64,
    /// The framework.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// The command run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Killed at the timeout.
    #[serde(default)]
    pub timed_out: bool,
    /// Killed for exceeding its memory limit.
    #[serde(default)]
    pub oom_killed: bool,
    /// Every test by name, passing ones included, where the runner named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<crate::TestCase>,
}

/// The outcome of one verification step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct VerificationSummary {
    /// No blockers.
    pub passed: bool,
    /// 0.0 – 1.0.
    pub score: f64,
    /// Checks run.
    pub checks: usize,
    /// Blockers found.
    pub blockers: usize,
}

/// What kind of thing a [`Finding`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FindingKind {
    /// A secret or dangerous pattern an edit introduced.
    Security,
    /// A syntax error an edit introduced.
    Syntax,
    /// A failing test.
    TestFailure,
    /// A verification check that failed or warned.
    Verification,
    /// A step that failed for a reason none of the above covers.
    StepFailure,
}

impl FindingKind {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Security => "security",
            Self::Syntax => "syntax",
            Self::TestFailure => "test-failure",
            Self::Verification => "verification",
            Self::StepFailure => "step-failure",
        }
    }
}

/// One thing a report points at, located where possible. Reporters turn findings into
/// annotations, SARIF results and JUnit failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Finding {
    /// What kind of finding.
    pub kind: FindingKind,
    /// How serious.
    pub severity: Severity,
    /// A stable rule id (`nuvira/test-failure`, `nuvira/security/private-key`, ...).
    pub rule_id: String,
    /// A short title (the test name, the check name, ...).
    pub title: String,
    /// What was found. May hold untrusted text (test output, model text).
    pub message: String,
    /// Workspace-relative file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// 1-based line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// 1-based column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// 1-based end line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
    /// 1-based end column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_column: Option<u32>,
    /// Longer untrusted text: a failing test's captured output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Finding {
    /// A finding without location.
    pub fn new(
        kind: FindingKind,
        severity: Severity,
        rule_id: impl Into<String>,
        title: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            severity,
            rule_id: rule_id.into(),
            title: title.into(),
            message: message.into(),
            path: None,
            line: None,
            column: None,
            end_line: None,
            end_column: None,
            detail: String::new(),
        }
    }

    /// Builder-style: sets the file and line.
    #[must_use]
    pub fn at(mut self, path: impl Into<String>, line: Option<u32>) -> Self {
        self.path = Some(path.into());
        self.line = line;
        self
    }

    /// Builder-style: sets the column and the end of the range.
    #[must_use]
    pub fn span(mut self, column: u32, end_line: u32, end_column: u32) -> Self {
        self.column = Some(column);
        self.end_line = Some(end_line);
        self.end_column = Some(end_column);
        self
    }

    /// Builder-style: sets the untrusted detail text.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }
}
