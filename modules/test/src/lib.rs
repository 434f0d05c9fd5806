//! Nuvira's test module: detects test frameworks, runs them in a sandbox and parses their
//! results into [`nuvira_api::TestResult`].
#![forbid(unsafe_code)]

pub mod detect;
pub mod parse;
