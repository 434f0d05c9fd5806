//! Nuvira's test module: detects test frameworks, runs them in a sandbox and parses their
//! results into [`nuvira_api::TestResult`].
//!
//! - [`detect`] finds the frameworks of a workspace and the command to run for each;
//! - [`parse`] turns a runner's output into a [`nuvira_api::TestResult`];
//! - [`sandbox`] runs a command isolated from the workspace: [`sandbox::LocalSandbox`] (a
//!   temporary copy and a process group) or, with the `docker` feature (on by default),
//!   `sandbox::DockerSandbox` (a hardened, labelled container removed in every case);
//! - [`TestModule`] (`test`) and [`ExecuteModule`] (`execute`) are the [`nuvira_api::Module`]s
//!   that plans use; the `nuvira test` command runs [`TestModule`] on its own.
//!
//! The crate is split this way so that each part can be used and tested alone: the parsers on
//! stored runner output, the sandboxes on any command, the modules on small real projects.
#![forbid(unsafe_code)]

pub mod detect;
pub mod parse;
pub mod sandbox;

mod module;

pub use module::{ExecuteModule, SANDBOX_SELECTED, SandboxConfig, TestConfig, TestModule};
