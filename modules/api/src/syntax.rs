//! Syntax checking: the [`SyntaxChecker`] trait and its diagnostics.

use serde::{Deserialize, Serialize};

/// One syntax problem, located.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    /// Only the problems `new` introduces compared with `original`, as a report on `new`, so
    /// that a file that was already broken can still be edited.
    ///
    /// The default checks both texts and drops each diagnostic of `new` that matches a
    /// not-yet-matched diagnostic of `original` with the same node kind, message and trimmed
    /// line text (line numbers are not compared: they shift with the edit). Checkers with a
    /// better notion of "the same error" override it.
    ///
    /// ```
    /// use nuvira_api::{SyntaxChecker, SyntaxDiagnostic, SyntaxReport};
    ///
    /// /// Flags every line containing `!!`.
    /// struct Bangs;
    /// impl SyntaxChecker for Bangs {
    ///     fn language_for(&self, _: &str) -> Option<&'static str> { Some("bangs") }
    ///     fn check(&self, path: &str, text: &str) -> SyntaxReport {
    ///         let found = text.lines().enumerate().filter(|(_, l)| l.contains("!!"));
    ///         let diags = found.map(|(i, _)| {
    ///             let at = (i as u32 + 1, 1);
    ///             SyntaxDiagnostic::new(path, at, at, "ERROR", "unexpected `!!`")
    ///         });
    ///         SyntaxReport::checked("bangs", diags.collect())
    ///     }
    /// }
    /// // The old `a !!` moved down a line: not new. `b !!` is.
    /// let r = Bangs.check_introduced("f", "a !!\n", "x\na !!\nb !!\n");
    /// assert_eq!(r.diagnostics.len(), 1);
    /// assert_eq!(r.diagnostics[0].line, 3);
    /// ```
    fn check_introduced(&self, path: &str, original: &str, new: &str) -> SyntaxReport {
        let mut after = self.check(path, new);
        if after.is_clean() {
            return after;
        }
        let before = self.check(path, original);
        let line = |text: &str, n: u32| -> String {
            let idx = (n as usize).saturating_sub(1);
            text.lines().nth(idx).unwrap_or("").trim().to_owned()
        };
        let mut old: Vec<(String, String, String)> = before
            .diagnostics
            .iter()
            .map(|d| {
                (
                    d.node_kind.clone(),
                    d.message.clone(),
                    line(original, d.line),
                )
            })
            .collect();
        after.diagnostics.retain(|d| {
            let key = (d.node_kind.clone(), d.message.clone(), line(new, d.line));
            match old.iter().position(|k| *k == key) {
                Some(i) => {
                    old.swap_remove(i);
                    false
                }
                None => true,
            }
        });
        after
    }
}
