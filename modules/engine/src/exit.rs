//! Process exit codes, the same for every `nuvira` command.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | the work failed: tests failed, verification blocked, edits were rejected |
//! | 2 | invalid input or arguments: a malformed plan or edits file, a bad flag |
//! | 3 | the environment lacks something needed: a Docker engine, a model key |
//! | 129 | cancelled by SIGHUP (the terminal closed) |
//! | 130 | cancelled (Ctrl-C) |
//! | 143 | cancelled by SIGTERM |

/// Success.
pub const SUCCESS: u8 = 0;
/// The work failed (tests, verification, rejected edits).
pub const FAILED: u8 = 1;
/// Invalid input or arguments.
pub const INVALID: u8 = 2;
/// The environment lacks something needed (Docker engine, model key).
pub const ENVIRONMENT: u8 = 3;
/// Cancelled (Ctrl-C, SIGINT): 128 + 2.
pub const CANCELLED: u8 = 130;
/// Cancelled by SIGHUP (the terminal closed): 128 + 1.
pub const HANGUP: u8 = 129;
/// Cancelled by SIGTERM: 128 + 15.
pub const TERMINATED: u8 = 143;
