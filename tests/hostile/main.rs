//! Adversarial tests: Nuvira run on repositories an attacker prepared, and raced by other
//! processes. One module per promise; each case says what must hold:
//! - nothing outside the repository changes ([`support::Sentinel`] hashes a tree before and after);
//! - no edit is lost;
//! - the error names the cause.
//!
//! Real symlinks, real `git clone`s of repositories with planted state, real concurrent
//! processes and real signals: no mocks. Cases that need something the machine may lack
//! (a tmpfs, `chattr`) say that they were skipped and why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod batches;
mod contained;
mod edits;
mod env;
mod escaping;
mod fuzz;
mod git;
mod journal;
mod limits;
mod model_plans;
mod nested_git;
mod oom;
mod runs;
mod runs_race;
mod signals;
mod special_files;
mod support;
mod toctou;
