//! Events: everything that happens in a run, as owned, serializable values.
//!
//! Every module reports through [`EventSink::emit`]; the engine's bus stamps each event with a
//! sequence number, a timestamp and the run id, keeps a history, and fans it out to independent
//! consumers (tracing logs, a JSONL store, progress display, reporters). A report can be rebuilt
//! from a stored event stream alone, which is why step outputs travel inside
//! [`EventKind::StepSucceeded`] and [`EventKind::StepFailed`].
//!
//! On the wire an event is one JSON object whose `type` names the kind:
//! `{"seq":3,"ts":1764480000000,"run_id":"r1","step_id":"test","type":"step:started","module":"test","attempt":1}`.

use crate::{
    ErrorCategory, ExecutionPlan, RunStatus, StepOutput, TestFailure, VerificationCheck,
    report::StepStatus,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Milliseconds since the Unix epoch, the clock [`Event::ts`] is stamped with (0 for a clock set
/// before 1970, saturating far in the future). Everything in Nuvira that records a wall-clock
/// time in milliseconds uses this one function.
///
/// ```
/// let before = nuvira_api::now_ms();
/// assert!(nuvira_api::now_ms() >= before);
/// ```
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One stamped event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Event {
    /// Position in the run's stream, from 0, without gaps.
    pub seq: u64,
    /// Milliseconds since the Unix epoch ([`now_ms`]).
    pub ts: u64,
    /// The run.
    pub run_id: Arc<str>,
    /// The step, for step-scoped events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_id: Option<Arc<str>>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. The serialized `type` follows `area:what` names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum EventKind {
    // ---- run and steps (the scheduler) ----
    /// A run began.
    #[serde(rename = "run:started")]
    RunStarted {
        /// The validated plan being run (shared, so announcing a large plan copies nothing).
        plan: Arc<ExecutionPlan>,
        /// The cap on steps in flight.
        max_parallel: usize,
        /// Whether nothing will be changed.
        #[serde(default)]
        dry_run: bool,
    },
    /// A run ended (also after cancellation, which first emits [`EventKind::RunCancelled`]).
    #[serde(rename = "run:completed")]
    RunCompleted {
        /// How it ended.
        status: RunStatus,
        /// Steps that succeeded.
        succeeded: usize,
        /// Steps that failed.
        failed: usize,
        /// Steps skipped because something they depend on failed, or never started.
        skipped: usize,
        /// Wall-clock duration.
        duration_ms: u64,
    },
    /// The run was cancelled.
    #[serde(rename = "run:cancelled")]
    RunCancelled {
        /// Why (e.g. "interrupted (Ctrl-C)").
        reason: String,
    },
    /// All dependencies of a step succeeded; it waits for a free slot.
    #[serde(rename = "step:ready")]
    StepReady,
    /// A step began running.
    #[serde(rename = "step:started")]
    StepStarted {
        /// The module running it.
        module: Arc<str>,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// A step succeeded.
    #[serde(rename = "step:succeeded")]
    StepSucceeded {
        /// How long it ran (last attempt).
        duration_ms: u64,
        /// What it produced.
        output: Arc<StepOutput>,
    },
    /// A step failed for good.
    #[serde(rename = "step:failed")]
    StepFailed {
        /// What kind of failure.
        category: ErrorCategory,
        /// What failed.
        message: String,
        /// Whether the failure was of the recoverable kind.
        recoverable: bool,
        /// Evidence lines.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        evidence: Vec<String>,
        /// How long it ran (last attempt).
        duration_ms: u64,
        /// What it produced before failing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Arc<StepOutput>>,
    },
    /// A step will not run.
    #[serde(rename = "step:skipped")]
    StepSkipped {
        /// Why, in words.
        reason: String,
        /// The failed or skipped dependency that caused it, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
    /// A step is about to be run again.
    #[serde(rename = "step:retrying")]
    StepRetrying {
        /// The attempt about to start.
        attempt: u32,
        /// Why.
        reason: String,
        /// Delay before it starts.
        delay_ms: u64,
    },

    // ---- planning ----
    /// A planner began.
    #[serde(rename = "plan:started")]
    PlanStarted {
        /// The goal.
        goal: String,
        /// The planner.
        planner: String,
    },
    /// A planner created a step.
    #[serde(rename = "plan:step-created")]
    PlanStepCreated {
        /// The new step's id.
        step: String,
        /// Its module.
        module: String,
    },
    /// A planner finished.
    #[serde(rename = "plan:completed")]
    PlanCompleted {
        /// Number of steps.
        steps: usize,
        /// Judged complexity, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        complexity: Option<crate::Complexity>,
    },

    // ---- inspection ----
    /// A directory is being walked.
    #[serde(rename = "inspect:scanning")]
    InspectScanning {
        /// The directory.
        path: String,
    },
    /// A relevant file was found.
    #[serde(rename = "inspect:file-found")]
    InspectFileFound {
        /// Workspace-relative path.
        path: String,
        /// Extension without the dot.
        extension: String,
        /// Size in bytes.
        size: u64,
    },
    /// Inspection finished.
    #[serde(rename = "inspect:completed")]
    InspectCompleted {
        /// Artifacts produced.
        artifacts: usize,
        /// Bytes read.
        total_bytes: u64,
    },

    // ---- edits ----
    /// An edit is being prepared for a file.
    #[serde(rename = "edit:generating")]
    EditGenerating {
        /// The file.
        path: String,
        /// Its language, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        language: Option<String>,
    },
    /// An edited file was validated.
    #[serde(rename = "edit:validating")]
    EditValidating {
        /// The file.
        path: String,
        /// Whether it introduced no syntax errors.
        syntax_valid: bool,
        /// Number of new issues.
        issues: usize,
    },
    /// A file was written.
    #[serde(rename = "edit:written")]
    EditWritten {
        /// The file.
        path: String,
        /// Bytes written (0 for a deletion).
        bytes: u64,
        /// The change with its diff, on the event of the change's own path (a rename's other
        /// path has none). Lets a report show edits that a step other than `edit` made, such
        /// as the fixes the `debug-tests` repair applies during a test step.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        change: Option<Arc<crate::FileChange>>,
    },
    /// An edit was not applied.
    #[serde(rename = "edit:skipped")]
    EditSkipped {
        /// The file, if the edit named one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// Why.
        reason: String,
    },
    /// Written files were restored to their original contents.
    #[serde(rename = "edit:rolled-back")]
    EditRolledBack {
        /// The restored files.
        paths: Vec<String>,
        /// Why.
        reason: String,
    },

    // ---- tests ----
    /// A test run began.
    #[serde(rename = "test:started")]
    TestStarted {
        /// The framework.
        framework: String,
        /// The sandbox kind (`local`, `docker`).
        sandbox: String,
        /// The command line.
        command: String,
    },
    /// A sandbox (container) was created.
    #[serde(rename = "test:sandbox-created")]
    TestSandboxCreated {
        /// The sandbox kind.
        kind: String,
        /// The container id, for Docker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container_id: Option<String>,
        /// The image, for Docker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<String>,
    },
    /// A test failed.
    #[serde(rename = "test:failure")]
    TestFailed {
        /// The failure.
        failure: TestFailure,
    },
    /// A test run finished.
    #[serde(rename = "test:completed")]
    TestCompleted {
        /// Whether every test passed and the run completed.
        success: bool,
        /// Passed tests.
        passed: u32,
        /// Failed tests.
        failed: u32,
        /// Skipped tests.
        skipped: u32,
        /// Wall-clock duration.
        duration_ms: u64,
        /// Every test by name with its outcome and duration, where the runner named them
        /// (empty when it printed only totals).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cases: Vec<crate::TestCase>,
    },

    // ---- recovery ----
    /// A failure was classified.
    #[serde(rename = "recover:classified")]
    RecoverClassified {
        /// The category.
        category: ErrorCategory,
        /// The strategy chosen.
        strategy: String,
        /// Evidence for the classification.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        evidence: Vec<String>,
    },
    /// A repair attempt began.
    #[serde(rename = "recover:attempt")]
    RecoverAttempt {
        /// The attempt number, from 1.
        attempt: u32,
        /// The strategy.
        strategy: String,
    },
    /// The model was switched.
    #[serde(rename = "recover:model-switch")]
    RecoverModelSwitch {
        /// The old model.
        from: String,
        /// The new model.
        to: String,
    },
    /// The repair budget ran out.
    #[serde(rename = "recover:budget-exhausted")]
    RecoverBudgetExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        final_error: String,
    },
    /// Recovery ended.
    #[serde(rename = "recover:result")]
    RecoverResult {
        /// Whether the step ended up succeeding.
        success: bool,
        /// Attempts made.
        attempts: u32,
        /// Time spent recovering.
        duration_ms: u64,
    },

    // ---- verification ----
    /// Verification began.
    #[serde(rename = "verify:starting")]
    VerifyStarting {
        /// Number of checks to run.
        checks: usize,
    },
    /// A check finished.
    #[serde(rename = "verify:check")]
    VerifyCheck {
        /// The check.
        check: VerificationCheck,
    },
    /// Verification finished.
    #[serde(rename = "verify:completed")]
    VerifyCompleted {
        /// Whether it passed.
        passed: bool,
        /// Score from 0 to 1.
        score: f64,
        /// Number of blockers.
        blockers: usize,
    },

    // ---- reporting ----
    /// A report was written.
    #[serde(rename = "report:generated")]
    ReportGenerated {
        /// The report's id.
        report_id: String,
        /// The format.
        format: String,
        /// Where it was written, if to a file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
    },

    // ---- model calls ----
    /// A model request is about to be sent. Carries hashes, never a key or the prompt's text
    /// (the full, redacted request is in the run folder's `calls/`).
    #[serde(rename = "llm:request")]
    LlmRequest {
        /// The call's number in the run, from 1 (its record is `calls/<call>.json`).
        call: u64,
        /// The step's attempt, from 1.
        attempt: u32,
        /// `provider:model` of the client asked.
        model: String,
        /// Hashes of what was sent (`sha256:<hex>`).
        hashes: Box<crate::llm::RequestHashes>,
    },
    /// A model request ended (answered or failed).
    #[serde(rename = "llm:response")]
    LlmResponse {
        /// The call's number in the run (as in its `llm:request`).
        call: u64,
        /// The model that answered (`provider:model`), empty when none did.
        model: String,
        /// Tokens used.
        usage: crate::TokenUsage,
        /// What the call cost in US dollars, when the model's price is known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// How long the call took, retries included.
        latency_ms: u64,
        /// Retries the client made (when it says).
        #[serde(default)]
        retries: u32,
        /// Why it failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },

    /// An event of a third-party module.
    #[serde(rename = "custom")]
    Custom {
        /// The event's name (`area:what`).
        name: String,
        /// Its payload.
        #[serde(default)]
        data: serde_json::Value,
    },
}

impl EventKind {
    /// Every serialized `type` name this version knows, in declaration order. A reader of
    /// stored events can tell an event of a newer Nuvira (a `type` not in this list) from a
    /// malformed line.
    pub const TYPES: &'static [&'static str] = &[
        "run:started",
        "run:completed",
        "run:cancelled",
        "step:ready",
        "step:started",
        "step:succeeded",
        "step:failed",
        "step:skipped",
        "step:retrying",
        "plan:started",
        "plan:step-created",
        "plan:completed",
        "inspect:scanning",
        "inspect:file-found",
        "inspect:completed",
        "edit:generating",
        "edit:validating",
        "edit:written",
        "edit:skipped",
        "edit:rolled-back",
        "test:started",
        "test:sandbox-created",
        "test:failure",
        "test:completed",
        "recover:classified",
        "recover:attempt",
        "recover:model-switch",
        "recover:budget-exhausted",
        "recover:result",
        "verify:starting",
        "verify:check",
        "verify:completed",
        "report:generated",
        "llm:request",
        "llm:response",
        "custom",
    ];

    /// Whether `name` is the `type` of an event this version knows.
    pub fn is_known_type(name: &str) -> bool {
        Self::TYPES.contains(&name)
    }

    /// The serialized `type` name (`"step:started"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run:started",
            Self::RunCompleted { .. } => "run:completed",
            Self::RunCancelled { .. } => "run:cancelled",
            Self::StepReady => "step:ready",
            Self::StepStarted { .. } => "step:started",
            Self::StepSucceeded { .. } => "step:succeeded",
            Self::StepFailed { .. } => "step:failed",
            Self::StepSkipped { .. } => "step:skipped",
            Self::StepRetrying { .. } => "step:retrying",
            Self::PlanStarted { .. } => "plan:started",
            Self::PlanStepCreated { .. } => "plan:step-created",
            Self::PlanCompleted { .. } => "plan:completed",
            Self::InspectScanning { .. } => "inspect:scanning",
            Self::InspectFileFound { .. } => "inspect:file-found",
            Self::InspectCompleted { .. } => "inspect:completed",
            Self::EditGenerating { .. } => "edit:generating",
            Self::EditValidating { .. } => "edit:validating",
            Self::EditWritten { .. } => "edit:written",
            Self::EditSkipped { .. } => "edit:skipped",
            Self::EditRolledBack { .. } => "edit:rolled-back",
            Self::TestStarted { .. } => "test:started",
            Self::TestSandboxCreated { .. } => "test:sandbox-created",
            Self::TestFailed { .. } => "test:failure",
            Self::TestCompleted { .. } => "test:completed",
            Self::RecoverClassified { .. } => "recover:classified",
            Self::RecoverAttempt { .. } => "recover:attempt",
            Self::RecoverModelSwitch { .. } => "recover:model-switch",
            Self::RecoverBudgetExhausted { .. } => "recover:budget-exhausted",
            Self::RecoverResult { .. } => "recover:result",
            Self::VerifyStarting { .. } => "verify:starting",
            Self::VerifyCheck { .. } => "verify:check",
            Self::VerifyCompleted { .. } => "verify:completed",
            Self::ReportGenerated { .. } => "report:generated",
            Self::LlmRequest { .. } => "llm:request",
            Self::LlmResponse { .. } => "llm:response",
            Self::Custom { .. } => "custom",
        }
    }

    /// The final status a step event implies, if it is a terminal step event.
    pub fn step_status(&self) -> Option<StepStatus> {
        match self {
            Self::StepSucceeded { .. } => Some(StepStatus::Succeeded),
            Self::StepFailed { .. } => Some(StepStatus::Failed),
            Self::StepSkipped { .. } => Some(StepStatus::Skipped),
            _ => None,
        }
    }
}

/// Where modules send events. The engine's bus implements it; so can a test.
///
/// Emitting never blocks and never fails: a slow consumer must not slow the run.
///
/// ```
/// use nuvira_api::{EventKind, EventSink};
/// use std::sync::Mutex;
///
/// #[derive(Default)]
/// struct Collect(Mutex<Vec<String>>);
///
/// impl EventSink for Collect {
///     fn emit(&self, step: Option<&str>, kind: EventKind) {
///         self.0.lock().unwrap().push(format!("{:?} {}", step, kind.name()));
///     }
/// }
///
/// let sink = Collect::default();
/// sink.emit(Some("edit"), EventKind::StepReady);
/// assert_eq!(sink.0.lock().unwrap()[0], "Some(\"edit\") step:ready");
/// ```
pub trait EventSink: Send + Sync {
    /// Records an event, scoped to a step or to the run (`None`).
    fn emit(&self, step_id: Option<&str>, kind: EventKind);
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _step_id: Option<&str>, _kind: EventKind) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_flat_with_a_type_tag_and_round_trip() {
        let ev = Event {
            seq: 3,
            ts: 10,
            run_id: "r".into(),
            step_id: Some("s".into()),
            kind: EventKind::StepStarted {
                module: "test".into(),
                attempt: 1,
            },
        };
        let text = serde_json::to_string(&ev).unwrap();
        assert!(text.contains(r#""type":"step:started""#), "{text}");
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ev);
        assert_eq!(ev.kind.name(), "step:started");
    }

    #[test]
    fn types_lists_exactly_the_tags_serde_accepts() {
        // serde names every variant it accepts when it meets an unknown one.
        let err = serde_json::from_str::<EventKind>(r#"{"type":"no:such"}"#).unwrap_err();
        let msg = err.to_string();
        let listed = msg
            .split_once("expected one of ")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("unexpected serde message: {msg}"));
        // `a`, `b`, ..., `z` at line 1 column 18: every other piece between backticks.
        let accepted: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
        assert_eq!(accepted, EventKind::TYPES, "{msg}");
        assert!(EventKind::is_known_type("step:started"));
        assert!(!EventKind::is_known_type("step:exploded"));
    }

    #[test]
    fn name_matches_the_serialized_tag_for_unit_and_struct_variants() {
        let kinds = [
            EventKind::StepReady,
            EventKind::RunCancelled { reason: "x".into() },
            EventKind::EditRolledBack {
                paths: vec![],
                reason: "x".into(),
            },
        ];
        for k in kinds {
            let v = serde_json::to_value(&k).unwrap();
            assert_eq!(v["type"], k.name());
        }
    }
}
