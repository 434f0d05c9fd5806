//! Verification results.

use serde::{Deserialize, Serialize};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckStatus {
    /// It passed.
    Passed,
    /// It found something that does not block at this strictness.
    Warning,
    /// It failed.
    Failed,
    /// It could not run (e.g. no model for goal alignment). Never counted as passed.
    NotRun,
}

/// One verification check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerificationCheck {
    /// `syntax`, `tests`, `security`, `goal-alignment`, `lint`, or a custom name.
    pub name: String,
    /// How it ended.
    pub status: CheckStatus,
    /// Whether its failure blocks.
    pub blocking: bool,
    /// What it found.
    pub details: String,
    /// Locations, where it has them (`file:line: message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

impl VerificationCheck {
    /// A check record.
    pub fn new(
        name: impl Into<String>,
        status: CheckStatus,
        blocking: bool,
        details: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            status,
            blocking,
            details: details.into(),
            findings: Vec::new(),
        }
    }
}

/// The outcome of verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct VerificationResult {
    /// No blockers.
    pub passed: bool,
    /// Every check.
    pub checks: Vec<VerificationCheck>,
    /// 0.0 – 1.0.
    pub overall_score: f64,
    /// What blocks.
    pub blockers: Vec<String>,
    /// What could be better.
    pub suggestions: Vec<String>,
}
