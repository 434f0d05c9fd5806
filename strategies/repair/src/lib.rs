//! # nuvira-repair-strategies — how a failed step is repaired
//!
//! The recover stage (`nuvira-recover`) asks two questions about every recoverable failure:
//! *what kind of failure is it?* ([`classify_error`]) and *what should happen now?* (a
//! [`RepairStrategy`]). This crate answers both without any runtime: classification reads the
//! failure's message, evidence and partial output (real compiler and test-runner text), and the
//! strategies only look at the step, the context and the failure and return a
//! [`nuvira_api::RecoveryDecision`] for the scheduler to carry out.
//!
//! Why it is shaped so: strategies are small values behind one trait so that a plan can pick
//! them by name per category (`config.recover.strategies`), a user can add their own, and each
//! can be tested alone by calling [`RepairStrategy::decide`]. The one strategy that needs a
//! model and the editor (`debug-tests`) lives in `nuvira-recover`, keeping this crate at
//! `nuvira-api`, `nuvira-secrets` + `regex`.
//!
//! | strategy | decision |
//! |---|---|
//! | `retry-same` | retry unchanged, errors as feedback |
//! | `retry-with-backoff` | retry after `base·2ⁿ` (or the provider's `retry after`) |
//! | `rephrase-prompt` | retry once with the instructions restated |
//! | `switch-model` | retry preferring another model whose circuit is closed |
//! | `simplify-goal` | retry once with the instructions cut to their first sentence |
//! | `split-task` | replace an edit step by one sub-step per edit or instruction line |
//! | `bypass` | degrade gracefully: bypassed, never a success |
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod classify;
mod strategy;

pub use classify::{Classification, MAX_EVIDENCE, classify_error, evidence_location};
pub use strategy::{
    Bypass, RepairInput, RepairStrategy, RephrasePrompt, RetrySame, RetryWithBackoff, SimplifyGoal,
    SplitTask, SwitchModel, builtin, default_strategies, feedback, feedback_text, preferred_model,
    rephrase, simplify,
};
