//! # nuvira-api — the contract between the Nuvira engine and its plugins
//!
//! Nuvira runs coding work as a validated dependency graph of steps. Each step is executed by a
//! [`Module`]; edits are produced by [`EditStrategy`]s, tests run in a [`Sandbox`], models are
//! reached through an [`LlmClient`], and everything that happens is an [`Event`].
//!
//! This crate is deliberately small: traits, plain serializable data, errors and events. It
//! depends on `serde`, `serde_json`, `thiserror` and `async-trait` only, so that a third-party
//! module can depend on it alone — no tokio, no tree-sitter, no Docker client. Everything that
//! needs a runtime (the scheduler, the event bus, the sandboxes) lives in other crates and is
//! handed to modules through [`StepContext`] as trait objects.
//!
//! Why it is shaped this way:
//! - **Few required methods, safe defaults.** A module implements [`Module::name`] and
//!   [`Module::run`]; everything else has a default, and defaults that could cause damage fail
//!   safe (a module is assumed to write anywhere in the workspace unless it says otherwise).
//! - **One config type per module.** [`PlanStep::config_as`] reads a step's config into the
//!   module's own serde type, in [`Module::validate`] (before anything runs, as a
//!   [`ConfigError`]) and in [`Module::run`] alike.
//! - **Control flow in the types.** [`ModuleError::Recoverable`] and [`ModuleError::Fatal`] are
//!   different variants: only recoverable failures are ever handed to the recover stage, whose
//!   [`RepairStrategy`]s decide what happens next.
//! - **The event enum is the boundary.** Modules emit owned, serializable [`EventKind`]s;
//!   reporters only ever consume events and step outputs, which are typed down to a
//!   verification check's [`CheckFinding`]s.
//! - **Engine plumbing apart.** What an engine needs to build contexts ([`engine`]) is kept out
//!   of the way of module authors; [`ModuleKind`] says in one place what the engine does with
//!   each kind of module.
//!
//! ```
//! use nuvira_api::{async_trait, ConfigError, Module, ModuleError, PlanStep, StepContext, StepOutput, WriteSet};
//!
//! /// A `word-count` step's config.
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config {
//!     #[serde(default)]
//!     text: String,
//! }
//!
//! /// Counts the words of its `text` config value.
//! struct WordCount;
//!
//! #[async_trait]
//! impl Module for WordCount {
//!     fn name(&self) -> &str { "word-count" }
//!     fn write_set(&self, _step: &PlanStep) -> WriteSet { WriteSet::ReadOnly }
//!     fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
//!         step.config_as::<Config>().map(|_| ())
//!     }
//!     async fn run(&self, step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
//!         let config: Config = step.config_as()?;
//!         Ok(StepOutput::Value(serde_json::json!({ "words": config.text.split_whitespace().count() })))
//!     }
//! }
//!
//! let typo = PlanStep::new("count", "word-count").with_config(serde_json::json!({ "txt": "a b" }));
//! assert_eq!(
//!     WordCount.validate(&typo).unwrap_err().to_string(),
//!     "step `count`: unknown field `txt`, expected `text`"
//! );
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod duration;
pub mod edit;
pub mod engine;
pub mod event;
pub mod inspect;
pub mod llm;
pub mod module;
pub mod plan;
pub mod repair;
pub mod report;
pub mod syntax;
pub mod test;
pub mod text;
pub mod verify;

pub use async_trait::async_trait;
pub use config::ConfigError;
pub use edit::{
    ChangeKind, EditEntry, EditError, EditPreview, EditResult, EditStrategy, EditValidation,
    EstimatedImpact, FileChange, FileView, SecurityWarning, Severity, SkippedChange,
};
pub use event::{Event, EventKind, EventSink, NullSink, now_ms};
pub use inspect::{Artifact, InspectionResult, InspectionStats, Symbol};
pub use llm::{
    ChatMessage, ContextSource, LlmClient, LlmError, LlmRequest, LlmResponse, RequestHashes, Role,
    TokenUsage,
};
pub use module::{
    CancelSignal, ErrorCategory, Failure, Module, ModuleError, ModuleKind, NeverCancelled,
    StepContext, StepInputs, StepOutput, WriteSet,
};
pub use plan::{Complexity, ExecutionPlan, PlanError, PlanRequest, PlanStep, Planner};
pub use repair::{
    Classification, RecoveryDecision, RecoveryPolicy, RepairAttempt, RepairBudget, RepairInput,
    RepairOutcome, RepairResult, RepairStrategy,
};
pub use report::{ExecutionReport, ModelUsage, RunStatus, StepRecord, StepStatus};
pub use syntax::{SyntaxChecker, SyntaxDiagnostic, SyntaxReport};
pub use test::{
    CommandOutput, NetworkMode, ResourceLimits, Sandbox, SandboxError, SandboxInfo, SandboxOutcome,
    SandboxRequest, TestCase, TestFailure, TestOutcome, TestResult,
};
pub use verify::{CheckFinding, CheckStatus, VerificationCheck, VerificationResult};
