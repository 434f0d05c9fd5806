//! Nuvira: run coding work as a validated dependency graph.
#![forbid(unsafe_code)]

pub use nuvira_api as api;

#[cfg(feature = "cli")]
pub mod cli;
pub mod exit;
