//! Repository inspection results.

use serde::{Deserialize, Serialize};

/// A symbol found in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Symbol {
    /// Name (`Type::method` for methods).
    pub name: String,
    /// `function`, `method`, `struct`, `enum`, `trait`, `impl`, `class`, `interface`, `type`.
    pub kind: String,
    /// 1-based line.
    pub line: u32,
}

impl Symbol {
    /// A symbol record.
    pub fn new(name: impl Into<String>, kind: impl Into<String>, line: u32) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            line,
        }
    }
}

/// What was learned about one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Artifact {
    /// Workspace-relative path.
    pub path: String,
    /// Language, if recognised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Size in bytes.
    pub size: u64,
    /// Relevance to the goal (higher is more relevant).
    pub score: f64,
    /// Symbols defined.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub symbols: Vec<Symbol>,
    /// Imports (`use`, `import`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
    /// Test files that belong to this file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_files: Vec<String>,
    /// The file's text, capped; present for the most relevant files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// Counters of an inspection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct InspectionStats {
    /// Files seen by the walk.
    pub total_files: u64,
    /// Files read.
    pub inspected_files: u64,
    /// Files that could not be read.
    pub errors: u64,
    /// Whether keyword scanning stood in for a model.
    pub llm_fallback_used: bool,
}

/// The outcome of inspecting a repository for a goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct InspectionResult {
    /// Per-file findings, most relevant first.
    pub artifacts: Vec<Artifact>,
    /// A rendering of the file tree.
    pub file_tree: String,
    /// The relevant files, most relevant first.
    pub relevant_paths: Vec<String>,
    /// Counters.
    pub stats: InspectionStats,
}
