//! The `syntax` check: every file the upstream edits changed, re-read from disk and parsed.

use crate::{CheckInput, CheckOutcome, VerifyCheck};
use nuvira_api::{CheckFinding, CheckStatus, SyntaxChecker, async_trait};
use std::path::{Component, Path};
use std::sync::Arc;

/// Files larger than this are not parsed (the edit module refuses them anyway).
const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// The built-in `syntax` check, backed by a [`SyntaxChecker`] (normally `nuvira-syntax`'s
/// tree-sitter checker).
#[derive(Clone)]
pub struct SyntaxCheck {
    checker: Arc<dyn SyntaxChecker>,
}

impl SyntaxCheck {
    /// A check using this checker.
    pub fn new(checker: Arc<dyn SyntaxChecker>) -> Self {
        Self { checker }
    }
}

impl std::fmt::Debug for SyntaxCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyntaxCheck").finish_non_exhaustive()
    }
}

/// Reads a workspace-relative file, refusing paths that leave the root.
fn read_inside(root: &Path, rel: &str) -> Result<String, String> {
    let p = Path::new(rel);
    if p.components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return Err("the path leaves the workspace; it was not read".into());
    }
    let root = std::fs::canonicalize(root).map_err(|e| format!("the workspace root: {e}"))?;
    let abs = std::fs::canonicalize(root.join(p))
        .map_err(|e| format!("the changed file is missing from disk ({e})"))?;
    if !abs.starts_with(&root) {
        return Err("the path resolves outside the workspace; it was not read".into());
    }
    let meta = std::fs::metadata(&abs).map_err(|e| e.to_string())?;
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "the file is larger than {MAX_BYTES} bytes; not parsed"
        ));
    }
    let bytes = std::fs::read(&abs).map_err(|e| format!("cannot read it: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".into())
}

#[async_trait]
impl VerifyCheck for SyntaxCheck {
    fn name(&self) -> &str {
        "syntax"
    }

    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
        if input.dry_run {
            return CheckOutcome::new(
                "syntax",
                CheckStatus::NotRun,
                true,
                "dry run: the changes are not on disk (the edit preview validated their syntax)",
            );
        }
        let files = input.current_files();
        if files.is_empty() {
            return CheckOutcome::new(
                "syntax",
                CheckStatus::NotRun,
                true,
                "no changed files upstream",
            );
        }
        let mut findings = Vec::new();
        let (mut checked, mut unchecked) = (0usize, Vec::new());
        for change in files {
            if self.checker.language_for(&change.path).is_none() {
                unchecked.push(change.path.clone());
                continue;
            }
            match read_inside(input.workspace_root, &change.path) {
                Ok(text) => {
                    let report = self.checker.check(&change.path, &text);
                    if !report.checked {
                        unchecked.push(change.path.clone());
                        continue;
                    }
                    checked += 1;
                    findings.extend(report.diagnostics.iter().map(|d| {
                        CheckFinding::new(d.message.clone())
                            .at(change.path.clone(), Some(d.line))
                            .with_column(Some(d.column))
                    }));
                }
                Err(reason) => {
                    checked += 1;
                    findings.push(CheckFinding::new(reason).at(change.path.clone(), None));
                }
            }
        }
        let mut suggestions = Vec::new();
        if !unchecked.is_empty() {
            suggestions.push(format!(
                "syntax: no grammar for {} changed file(s): {}",
                unchecked.len(),
                unchecked.join(", ")
            ));
        }
        let (status, details) = if checked == 0 {
            (
                CheckStatus::NotRun,
                format!("no grammar covers the {} changed file(s)", unchecked.len()),
            )
        } else if findings.is_empty() {
            (
                CheckStatus::Passed,
                format!("{checked} changed file(s) parse cleanly"),
            )
        } else {
            (
                CheckStatus::Failed,
                format!(
                    "{} syntax error(s) in {checked} changed file(s)",
                    findings.len()
                ),
            )
        };
        CheckOutcome::new("syntax", status, true, details)
            .with_findings(findings)
            .with_suggestions(suggestions)
    }
}
