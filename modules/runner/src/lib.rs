//! Nuvira's test runner: detects test frameworks, runs them in a sandbox and parses their
//! results into [`nuvira_api::TestResult`].
//!
//! - [`detect`] finds the frameworks of a workspace and the command to run for each;
//! - [`parse`] turns a runner's output into a [`nuvira_api::TestResult`];
//! - [`TestModule`] (`test`) and [`ExecuteModule`] (`execute`) are the [`nuvira_api::Module`]s
//!   that plans use; the `nuvira test` command runs [`TestModule`] on its own.
//!
//! Where the command runs is the [`nuvira_sandbox`] crate's job (re-exported as [`sandbox`]):
//! a local temporary copy, or, with the `docker` feature (on by default), a hardened container.
//!
//! The parts are split this way so that each can be used and tested alone: the parsers on
//! stored runner output, the sandboxes on any command, the modules on small real projects.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod detect;
pub mod parse;
pub use nuvira_sandbox as sandbox;

mod module;

pub use module::{
    ExecuteModule, SANDBOX_SELECTED, SandboxConfig, TestConfig, TestConfigError, TestModule,
};
