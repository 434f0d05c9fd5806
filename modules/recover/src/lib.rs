//! # nuvira-recover — the recover stage
//!
//! When a step fails in a way another attempt might fix ([`nuvira_api::ModuleError::Recoverable`]),
//! the engine asks its recovery policy ([`nuvira_api::RecoveryPolicy`]) what to do. [`RecoverStage`]
//! is the recover stage, and that policy: it classifies the failure, keeps the repair budget
//! (per step and per run; a *repair* is one attempt of one strategy), and picks a strategy from
//! `nuvira-repair-strategies` — or the model-driven ones here:
//!
//! - [`DebugTests`] (`debug-tests`): the debugger loop for test steps — test failures and
//!   compiler errors go to the model with the relevant files, its edit batch goes through the
//!   editor's validated, journaled transaction, and the tests run again;
//! - [`ModelEditor`]: the edit module's [`nuvira_edit::InstructionEditor`] hook, turning an edit
//!   step's `instructions` into an `edit_batch` ([`edit_batch_schema`]) with the inspected
//!   context, the previous attempt's feedback and one correction round for rejected edits.
//!
//! Why it is shaped so: the engine knows nothing about models or edits — it only carries out
//! [`nuvira_api::RecoveryDecision`]s — and the strategies know nothing about runtimes. This
//! crate is where the model, the editor and the strategies meet, so it is the only one that
//! depends on all three. It does not depend on the engine (`nuvira`): [`RecoverStage::wrap`]
//! adapts any module so that plans can carry `config.recover` and success after a repair is
//! reported.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod batch;
mod debug;
mod model_edit;
mod policy;

pub use batch::{
    EDIT_BATCH, EditBatch, InvalidEditBatch, ask_edit_batch, edit_batch_schema, llm_failure,
    parse_edit_batch,
};
pub use debug::DebugTests;
pub use model_edit::{DEFAULT_CONTEXT_TOKENS, ModelEditor, upstream_artifacts};
pub use nuvira_repair_strategies::{
    Classification, RepairInput, RepairStrategy, classify_error, default_strategies,
};
pub use policy::{DEFAULT_RUN_ATTEMPTS, RecoverConfig, RecoverStage, StrategySelection};
