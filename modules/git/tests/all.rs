//! nuvira-git's integration tests: real repositories made with the `git` binary, and a GitHub
//! REST API spoken by a local server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod github;
mod repo;
mod support;
