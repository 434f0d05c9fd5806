//! Nuvira engine (placeholder while the engine lands).
pub use nuvira_api as api;
