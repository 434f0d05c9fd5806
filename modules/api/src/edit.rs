//! Edits: the entries a plan (or a model) asks for, the [`EditStrategy`] trait that turns one
//! entry into new file contents, and the preview/result types of the edit module.
//!
//! Strategies never touch the disk: they read and write through a [`FileView`], an in-memory
//! overlay of the workspace that the edit module validates as a whole before the first byte is
//! written. That is what makes a batch all-or-nothing.

use crate::SyntaxDiagnostic;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One requested edit. `strategy` picks the [`EditStrategy`]; the other fields are read by it.
///
/// | strategy | fields |
/// |---|---|
/// | `search-replace` | `path`, `search`, `replace`, `all` |
/// | `unified-diff` | `path` (optional), `patch` |
/// | `regex` | `path`, `pattern`, `replace`, `all` |
/// | `whole-file` | `path`, `content` |
/// | `delete-file` | `path` |
/// | `rename-file` | `path`, `to` |
/// | `ast-replace` | `path`, `symbol`, `content` |
///
/// Fields a custom strategy needs go in `extra` (any other key of the entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EditEntry {
    /// The strategy's name.
    pub strategy: String,
    /// The file, relative to the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Exact text to find (`search-replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Replacement text (`search-replace`, `regex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<String>,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// A unified diff (`unified-diff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// A regular expression (`regex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// New content (`whole-file`, `ast-replace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// New path (`rename-file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Symbol name (`ast-replace`): `name` or `Type::method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// Any other field, for custom strategies.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EditEntry {
    /// The `path` field, or an error naming the strategy that needs it.
    ///
    /// # Errors
    /// When the entry has no `path`.
    pub fn require_path(&self) -> Result<&str, EditError> {
        self.path
            .as_deref()
            .ok_or_else(|| EditError::new(None, format!("`{}` edit has no `path`", self.strategy)))
    }

    /// A required string field, or an error naming the field and the path.
    ///
    /// # Errors
    /// When the field is missing.
    pub fn require<'a>(
        &self,
        field: &'static str,
        value: &'a Option<String>,
    ) -> Result<&'a str, EditError> {
        value.as_deref().ok_or_else(|| {
            EditError::new(
                self.path.clone(),
                format!("`{}` edit needs a `{field}` field", self.strategy),
            )
        })
    }
}

/// Why an edit entry cannot be applied. Names the file and, where known, the line, and says
/// what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EditError {
    /// The file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The 1-based line, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// What went wrong and what to do.
    pub message: String,
    /// The closest candidate text, for near misses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.path, self.line) {
            (Some(p), Some(l)) => write!(f, "{p}:{l}: {}", self.message)?,
            (Some(p), None) => write!(f, "{p}: {}", self.message)?,
            _ => f.write_str(&self.message)?,
        }
        if let Some(c) = &self.candidate {
            write!(f, "\n  closest match: {c}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EditError {}

impl EditError {
    /// An error for a path (if any) with a message.
    pub fn new(path: Option<String>, message: impl Into<String>) -> Self {
        Self {
            path,
            line: None,
            message: message.into(),
            candidate: None,
        }
    }

    /// Builder-style: sets the line.
    #[must_use]
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = Some(line);
        self
    }

    /// Builder-style: sets the closest candidate.
    #[must_use]
    pub fn with_candidate(mut self, candidate: impl Into<String>) -> Self {
        self.candidate = Some(candidate.into());
        self
    }
}

/// The in-memory view of the workspace that strategies edit. Paths are workspace-relative;
/// the implementation confines them to the workspace.
///
/// The edit module provides the real one; a strategy only calls it. A map of files is enough to
/// test a strategy:
///
/// ```
/// use nuvira_api::{EditError, FileView};
/// use std::collections::BTreeMap;
///
/// struct Files(BTreeMap<String, String>);
///
/// impl FileView for Files {
///     fn read(&mut self, path: &str) -> Result<Option<String>, EditError> {
///         Ok(self.0.get(path).cloned())
///     }
///     fn write(&mut self, path: &str, content: String) -> Result<(), EditError> {
///         self.0.insert(path.into(), content);
///         Ok(())
///     }
///     fn delete(&mut self, path: &str) -> Result<(), EditError> {
///         self.0.remove(path).map(|_| ()).ok_or_else(|| EditError::new(Some(path.into()), "no such file"))
///     }
///     fn rename(&mut self, from: &str, to: &str) -> Result<(), EditError> {
///         let text = self.0.remove(from).ok_or_else(|| EditError::new(Some(from.into()), "no such file"))?;
///         self.write(to, text)
///     }
/// }
///
/// let mut files = Files(BTreeMap::from([("a.rs".to_owned(), "fn a() {}".to_owned())]));
/// files.rename("a.rs", "b.rs").unwrap();
/// assert_eq!(files.read("b.rs").unwrap().as_deref(), Some("fn a() {}"));
/// assert_eq!(files.delete("a.rs").unwrap_err().to_string(), "a.rs: no such file");
/// ```
pub trait FileView {
    /// The current text of a file (after earlier entries of the batch), or `None` if it does
    /// not exist.
    ///
    /// # Errors
    /// When the path escapes the workspace, the file is binary or too large, or cannot be read.
    fn read(&mut self, path: &str) -> Result<Option<String>, EditError>;
    /// Replaces (or creates) a file's text.
    ///
    /// # Errors
    /// When the path escapes the workspace or the content is too large.
    fn write(&mut self, path: &str, content: String) -> Result<(), EditError>;
    /// Deletes a file.
    ///
    /// # Errors
    /// When the path escapes the workspace or the file does not exist.
    fn delete(&mut self, path: &str) -> Result<(), EditError>;
    /// Renames a file.
    ///
    /// # Errors
    /// When either path escapes the workspace, the source does not exist or the target does.
    fn rename(&mut self, from: &str, to: &str) -> Result<(), EditError>;
}

/// Turns one [`EditEntry`] into changes on a [`FileView`].
///
/// # Errors
/// [`apply`](EditStrategy::apply) returns an [`EditError`] naming the file and line when the
/// entry does not apply; the whole batch is then rejected and nothing is written.
///
/// ```
/// use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};
///
/// /// Appends `content` to the end of a file.
/// struct Append;
///
/// impl EditStrategy for Append {
///     fn name(&self) -> &str { "append" }
///     fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
///         let path = entry.require_path()?;
///         let extra = entry.require("content", &entry.content)?;
///         let mut text = files.read(path)?.unwrap_or_default();
///         text.push_str(extra);
///         files.write(path, text)
///     }
/// }
/// ```
pub trait EditStrategy: Send + Sync {
    /// The name entries use in `strategy:`.
    fn name(&self) -> &str;

    /// The workspace-relative paths the entry writes (for write-set scheduling). Defaults to
    /// `path` (and `to`, for renames).
    fn paths(&self, entry: &EditEntry) -> Vec<String> {
        entry.path.iter().chain(entry.to.iter()).cloned().collect()
    }

    /// Applies the entry to the view.
    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError>;
}

/// How a file changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// A new file.
    Create,
    /// An existing file with new content.
    Modify,
    /// A removed file.
    Delete,
    /// A file moved from `from` (its content may also have changed).
    Rename {
        /// The old path.
        from: String,
    },
}

/// One file's change, with its unified diff.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FileChange {
    /// Workspace-relative path (the new path for renames).
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// `diff -u` style text.
    pub diff: String,
    /// Lines added.
    pub additions: usize,
    /// Lines removed.
    pub deletions: usize,
}

impl FileChange {
    /// A change record.
    pub fn new(
        path: impl Into<String>,
        kind: ChangeKind,
        diff: impl Into<String>,
        additions: usize,
        deletions: usize,
    ) -> Self {
        Self {
            path: path.into(),
            kind,
            diff: diff.into(),
            additions,
            deletions,
        }
    }
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// For information.
    Info,
    /// Worth a look.
    Warning,
    /// Blocks.
    Error,
}

impl Severity {
    /// The lowercase name (`info`, `warning`, `error`), as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// A secret or dangerous pattern introduced by an edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SecurityWarning {
    /// The file.
    pub path: String,
    /// The 1-based line in the new content.
    pub line: u32,
    /// A stable rule id (`private-key`, `aws-access-key`, ...).
    pub rule: String,
    /// What was found (never the secret itself).
    pub message: String,
    /// How serious.
    pub severity: Severity,
}

impl SecurityWarning {
    /// A warning record.
    pub fn new(
        path: impl Into<String>,
        line: u32,
        rule: impl Into<String>,
        message: impl Into<String>,
        severity: Severity,
    ) -> Self {
        Self {
            path: path.into(),
            line,
            rule: rule.into(),
            message: message.into(),
            severity,
        }
    }
}

/// The validation of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EditValidation {
    /// No edited file gained syntax errors.
    pub syntax_valid: bool,
    /// The syntax errors the batch would introduce.
    pub ast_issues: Vec<SyntaxDiagnostic>,
    /// Secrets and dangerous patterns the batch would introduce.
    pub security_warnings: Vec<SecurityWarning>,
}

/// What a batch would change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EstimatedImpact {
    /// Files touched.
    pub files: usize,
    /// Lines added.
    pub lines_added: usize,
    /// Lines removed.
    pub lines_removed: usize,
    /// `low`, `medium` or `high`.
    pub level: String,
}

/// A preview of a batch: the diffs and the validation, with nothing written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EditPreview {
    /// One entry per changed file.
    pub changes: Vec<FileChange>,
    /// Non-blocking remarks (no syntax check for a language, formatter missing, ...).
    pub warnings: Vec<String>,
    /// Size of the change.
    pub estimated_impact: EstimatedImpact,
    /// The validation.
    pub validation: EditValidation,
    /// Entries that did not apply (search text not found, path outside the workspace, ...).
    /// Any entry here rejects the whole batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<EditError>,
}

impl EditPreview {
    /// Whether the batch may be written: every entry applied, no new syntax errors, and no
    /// security finding of [`Severity::Error`] (a blocking secret).
    pub fn is_valid(&self) -> bool {
        self.errors.is_empty()
            && self.validation.syntax_valid
            && !self
                .validation
                .security_warnings
                .iter()
                .any(|w| w.severity == Severity::Error)
    }
}

/// A change that was previewed but not written, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SkippedChange {
    /// The file.
    pub path: String,
    /// Why it was not written.
    pub reason: String,
    /// The 1-based line the reason points at, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl SkippedChange {
    /// A skipped change record.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
            line: None,
        }
    }

    /// Builder-style: sets the line.
    #[must_use]
    pub fn at_line(mut self, line: Option<u32>) -> Self {
        self.line = line;
        self
    }
}

/// The outcome of applying a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct EditResult {
    /// The preview the batch was validated against.
    pub preview: EditPreview,
    /// Files written.
    pub applied_count: usize,
    /// Changes not written.
    pub skipped_changes: Vec<SkippedChange>,
}
