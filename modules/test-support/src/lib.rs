//! # nuvira-test-support — what Nuvira's tests share
//!
//! Test helpers that used to be copied from one crate's `tests/` to the next: a module whose
//! behaviour each step's config scripts ([`Scripted`]), an event sink that keeps what it is
//! sent ([`Recorder`]), the outputs upstream of a step ([`Upstream`]), a cancel signal the test
//! fires ([`Trigger`]), "skip or fail" checks for what the machine may lack ([`env`](mod@env)), a
//! private sshd on loopback ([`sshd`]), and the runner of scenario folders ([`scenario`]).
//!
//! Why it is shaped so: it depends on the contract crate (`nuvira-api`) only, so every crate
//! can take it as a dev-dependency without a cycle, and the tests of a crate keep testing that
//! crate's own types. It is never published and never a normal dependency.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test support: a broken fixture or a poisoned lock must fail the test loudly"
)]

pub mod env;
mod events;
mod inputs;
pub mod scenario;
mod scripted;
pub mod sshd;

pub use events::{Recorder, Trigger};
pub use inputs::Upstream;
pub use scripted::{Mark, Scripted, scripted_step};
