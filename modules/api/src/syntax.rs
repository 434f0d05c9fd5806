//! Syntax checking: the [`SyntaxChecker`] trait and its diagnostics.

use serde::{Deserialize, Serialize};

/// One syntax problem, located.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SyntaxDiagnostic {
    /// The file.
    pub path: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// 1-based end line.
    pub end_line: u32,
    /// 1-based end column.
    pub end_column: u32,
    /// The offending node kind: `ERROR` (unexpected text) or `MISSING` (something expected,
    /// e.g. `MISSING }`).
    pub node_kind: String,
    /// A readable description.
    pub message: String,
}

impl SyntaxDiagnostic {
    /// A diagnostic at a position.
    pub fn new(
        path: impl Into<String>,
        (line, column): (u32, u32),
        (end_line, end_column): (u32, u32),
        node_kind: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            line,
            column,
            end_line,
            end_column,
            node_kind: node_kind.into(),
            message: message.into(),
        }
    }
}

/// The result of checking one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SyntaxReport {
    /// The language checked, or `None` when no grammar covers the file.
    pub language: Option<String>,
    /// Whether a check ran at all.
    pub checked: bool,
    /// Problems found.
    pub diagnostics: Vec<SyntaxDiagnostic>,
    /// Why no check ran (set by [`SyntaxReport::unchecked`]), for reports and logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl SyntaxReport {
    /// The note of [`SyntaxReport::unchecked`].
    pub const NO_CHECK_NOTE: &'static str = "no syntax check ran: no grammar covers this file type";

    /// A report for a file no grammar covers: clean, `checked: false`, with a note saying no
    /// check ran.
    pub fn unchecked() -> Self {
        Self {
            note: Some(Self::NO_CHECK_NOTE.to_owned()),
            ..Self::default()
        }
    }

    /// A report of a check that ran.
    pub fn checked(language: impl Into<String>, diagnostics: Vec<SyntaxDiagnostic>) -> Self {
        Self {
            language: Some(language.into()),
            checked: true,
            diagnostics,
            note: None,
        }
    }

    /// No problems found (or no check ran).
    pub fn is_clean(&self) -> bool {
        self.diagnostics.is_empty()
    }
}

/// Checks source text for syntax errors.
///
/// A checker only finds problems. Which of them an edit introduced (so that a file that was
/// already broken stays editable) is decided by one rule for every checker,
/// `nuvira_syntax::introduced_by`, which the edit module calls; it is not a method here, so
/// no checker can answer differently.
///
/// ```
/// use nuvira_api::{SyntaxChecker, SyntaxReport};
///
/// /// Accepts everything, checks nothing.
/// struct Nothing;
///
/// impl SyntaxChecker for Nothing {
///     fn language_for(&self, _path: &str) -> Option<&'static str> { None }
///     fn check(&self, _path: &str, _source: &str) -> SyntaxReport { SyntaxReport::unchecked() }
/// }
/// assert!(!Nothing.check("a.rs", "fn").checked);
/// ```
pub trait SyntaxChecker: Send + Sync {
    /// The language a path is checked as, if any.
    fn language_for(&self, path: &str) -> Option<&'static str>;
    /// Checks a file's text.
    fn check(&self, path: &str, source: &str) -> SyntaxReport;
}
