//! Nuvira: run coding work as a validated dependency graph.
#![forbid(unsafe_code)]

pub use nuvira_api as api;
/// Plan files (`load_file`, `parse_str`) and the planners, so an embedder needs no extra
/// dependency to load a plan.
pub use nuvira_plan as plan;

pub mod agent;
#[cfg(feature = "cli")]
pub mod cli;
pub mod defaults;
pub mod engine;
pub mod events;
pub mod exit;
pub mod graph;
pub mod registry;
pub mod scheduler;
pub mod scratch;
pub mod validate;

pub use engine::{Engine, EngineBuilder, RunSettings};
pub use events::EventBus;
pub use registry::ModuleRegistry;
pub use scheduler::{RunOptions, RunSummary, StepOutcome};
pub use validate::{Problem, ProblemKind, ValidatedPlan, ValidationErrors};
