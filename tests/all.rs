//! Integration tests of the engine and the `nuvira` CLI: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;
mod cli_apply;
mod cli_cache;
mod cli_ci_trust;
mod cli_conventions;
mod cli_git;
mod cli_inspect;
mod cli_mcp;
mod cli_output;
mod cli_projects;
mod cli_report;
mod cli_resume_changes;
mod cli_run;
mod cli_runs;
mod cli_runs_gc;
mod cli_ssh;
mod cli_test;
mod cli_ui;
mod cli_validate;
mod example_workflow;
mod mcp_client;
/// Setup shared by cli_runs, cli_resume_changes and cli_runs_gc.
mod runs_setup;
mod scheduler;
mod schema;
mod validate;
