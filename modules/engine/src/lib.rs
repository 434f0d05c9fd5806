//! Nuvira's engine: validates a plan, then runs its steps as a dependency graph.
//!
//! This crate is what an embedder needs to run plans with modules of their own: it depends on
//! the contract ([`nuvira_api`]) and tokio, nothing else of Nuvira's. The built-in modules
//! (inspect, edit, test, verify, report), the model clients and the CLI live in their own crates
//! and are wired together by the `nuvira` facade crate; `nuvira` with `default-features = false`
//! is this crate re-exported.
//!
//! - [`validate`] finds every problem of a plan before anything runs;
//! - [`scheduler`] runs a validated plan's steps as soon as their dependencies succeed;
//! - [`registry`] maps the `module:` names of a plan to [`nuvira_api::Module`]s;
//! - [`events`] stamps, stores and fans out the events modules emit;
//! - [`engine`] ties them together: [`Engine`] is a registry plus run defaults;
//! - [`hooks`] lets a caller reuse recorded step outputs (resume) and scope the model per step;
//! - [`graph`] renders a validated plan (DOT, Mermaid, JSON);
//! - [`exit`] holds the process exit codes every `nuvira` command shares.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use nuvira_api::{ExecutionPlan, Module, ModuleError, PlanStep, StepContext, StepOutput};
//! use std::sync::Arc;
//!
//! struct Hello;
//! #[nuvira_api::async_trait]
//! impl Module for Hello {
//!     fn name(&self) -> &str { "hello" }
//!     async fn run(&self, _: &PlanStep, _: &StepContext) -> Result<StepOutput, ModuleError> {
//!         Ok(StepOutput::Value(serde_json::json!("hi")))
//!     }
//! }
//!
//! let engine = nuvira_engine::Engine::builder().module(Arc::new(Hello)).build();
//! let plan = ExecutionPlan {
//!     goal: "greet".into(),
//!     steps: vec![PlanStep::new("a", "hello")],
//!     ..Default::default()
//! };
//! let bus = nuvira_engine::EventBus::with_history("run-1", false);
//! let summary = engine.run(plan, bus, Default::default()).await.unwrap();
//! assert_eq!(summary.exit_code(), nuvira_engine::exit::SUCCESS);
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod engine;
pub mod events;
pub mod exit;
pub mod graph;
pub mod hooks;
pub mod registry;
pub mod scheduler;
pub mod validate;

pub use engine::{Engine, EngineBuilder, MaxParallel, ParseMaxParallelError, RunSettings};
pub use events::EventBus;
pub use registry::ModuleRegistry;
pub use scheduler::{RunOptions, RunSummary, StepOutcome, TokenSignal};
pub use validate::{Adjacency, Problem, ProblemKind, ValidatedPlan, ValidationErrors};
