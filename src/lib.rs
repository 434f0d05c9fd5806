//! Nuvira: run coding work as a validated dependency graph.
//!
//! This crate is the facade: it re-exports the engine ([`nuvira_engine`]: validation, the
//! scheduler, the module registry, the event bus) at its root, and wires the built-in modules
//! behind cargo features, each forwarding to the crate that implements it:
//!
//! | feature | adds | crate |
//! |---|---|---|
//! | (none) | the engine and the contract ([`api`]) | nuvira-engine, nuvira-api |
//! | `plan` | plan files and the template planner ([`plan`]) | nuvira-plan |
//! | `defaults` | the built-in modules ([`defaults`]), scratch copies ([`scratch`]), what a model's plan may do ([`model_plan`]) | nuvira-inspect, nuvira-edit, nuvira-runner, nuvira-verify, nuvira-report |
//! | `docker` | the Docker sandbox | nuvira-sandbox (bollard) |
//! | `llm` | model clients, the model planner and the recover stage ([`agent`]) | nuvira-llm, nuvira-recover |
//! | `rust`, `typescript`, `python`, `javascript` | one tree-sitter grammar each | nuvira-syntax |
//! | `git` | branches, commits of a run's files, review diffs, the GitHub REST client ([`git`]) | nuvira-git (libgit2) |
//! | `mcp` | the `mcp` module and the server of `nuvira mcp` | nuvira-mcp |
//! | `petgraph` | `ValidatedPlan::to_petgraph` | nuvira-engine |
//! | `cli` | the `nuvira` binary | clap, indicatif |
//!
//! Every feature but `petgraph` is on by default. `default-features = false` gives the bare
//! engine: a program that runs plans with modules of its own compiles no tree-sitter, bollard
//! or HTTP client, and can use another tree-sitter version itself.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use nuvira_api as api;
pub use nuvira_engine::{
    Engine, EngineBuilder, EventBus, MaxParallel, ModuleRegistry, Problem, ProblemKind, RunOptions,
    RunSettings, RunSummary, StepOutcome, ValidatedPlan, ValidationErrors,
};
pub use nuvira_engine::{engine, events, exit, graph, hooks, registry, scheduler, validate};
/// Plan files (`load_file`, `parse_str`) and the planners, so an embedder needs no extra
/// dependency to load a plan.
#[cfg(feature = "plan")]
pub use nuvira_plan as plan;

#[cfg(feature = "llm")]
pub mod agent;
#[cfg(feature = "git")]
/// Git and pull requests: the repository before a run, the commit of a run's files, review
/// diffs, the GitHub REST client (feature `git`).
pub use nuvira_git as git;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "defaults")]
pub mod defaults;
#[cfg(feature = "defaults")]
pub mod model_plan;
#[cfg(feature = "defaults")]
pub mod runs;
#[cfg(feature = "defaults")]
pub mod scratch;
