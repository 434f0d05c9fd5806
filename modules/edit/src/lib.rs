//! # nuvira-edit — validated, all-or-nothing edit batches
//!
//! An edit batch is a list of [`EditEntry`]s (search-replace, unified diff, regex, whole file,
//! delete, rename, AST replace, or any registered [`EditStrategy`]). The [`Editor`] applies
//! them in order to an in-memory overlay of the workspace, then validates the result as a whole
//! before a single byte is written:
//!
//! - every entry must apply (a search text that is missing or ambiguous rejects the batch);
//! - no edited file may gain syntax errors it did not have (a [`SyntaxChecker`] checks the
//!   original and the new text and [`nuvira_syntax::introduced_by`], the one rule for every
//!   checker, keeps only the new errors, so a file that was already broken stays editable);
//! - lines the batch adds are scanned for secrets (private keys, cloud and API tokens); a
//!   finding is a warning, or blocks the batch when `block_on_secrets` is set.
//!
//! [`Editor::dry_run`] stops there and returns the [`EditPreview`] (unified diffs, warnings,
//! impact, validation). [`Editor::edit`] goes on to write everything through a
//! [`nuvira_workspace::Journal`] transaction: originals are recorded durably first, each file is
//! replaced atomically, and a crash in between is rolled back at the next start.
//!
//! [`EditModule`] is the `edit` step of a plan ([`nuvira_api::Module`]).
//!
//! Why the split: strategies only compute new text (they see a [`nuvira_api::FileView`], never
//! the disk), the workspace crate owns every rule about touching files, and this crate only
//! decides *whether* a batch may be written. Each piece is testable alone.
//!
//! ```
//! use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};
//! use nuvira_edit::{Editor, Emit};
//! use nuvira_workspace::Workspace;
//! use std::sync::Arc;
//!
//! struct Append;
//! impl EditStrategy for Append {
//!     fn name(&self) -> &str { "append" }
//!     fn apply(&self, e: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
//!         let path = e.require_path()?;
//!         let mut text = files.read(path)?.unwrap_or_default();
//!         text.push_str(e.require("content", &e.content)?);
//!         files.write(path, text)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("notes.txt"), "one\n")?;
//! let ws = Workspace::open(dir.path())?;
//! let editor = Editor::new().with_strategy(Arc::new(Append));
//! let entry = EditEntry {
//!     strategy: "append".into(),
//!     path: Some("notes.txt".into()),
//!     content: Some("two\n".into()),
//!     ..EditEntry::default()
//! };
//! let preview = editor.dry_run(&ws, &[entry.clone()], &Emit::none());
//! assert!(preview.is_valid());
//! assert!(preview.changes[0].diff.contains("+two"));
//! let result = editor.edit(&ws, &[entry], "run-1", &Emit::none())?;
//! assert_eq!(result.applied_count, 1);
//! assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt"))?, "one\ntwo\n");
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod diff;
mod format;
mod module;
mod overlay;
mod secrets;

pub use module::{EditModule, EditStepConfig, InstructionEditor, parse_entries};
pub use nuvira_workspace;

use diff::Diff;
use nuvira_api::{
    ChangeKind, EditEntry, EditError, EditPreview, EditResult, EditStrategy, EventKind, EventSink,
    FileChange, SecurityWarning, Severity, SkippedChange, SyntaxChecker, SyntaxDiagnostic,
};
use nuvira_workspace::{FileOp, Journal, JournalError, OnChanged, Workspace};
use overlay::{FileState, Overlay};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Where the editor's events go: a sink and the step they belong to.
#[derive(Clone, Copy)]
pub struct Emit<'a> {
    sink: Option<&'a dyn EventSink>,
    step_id: Option<&'a str>,
}

impl<'a> Emit<'a> {
    /// Events are dropped.
    pub fn none() -> Self {
        Self {
            sink: None,
            step_id: None,
        }
    }

    /// Events go to `sink`, scoped to `step_id`.
    pub fn to(sink: &'a dyn EventSink, step_id: Option<&'a str>) -> Self {
        Self {
            sink: Some(sink),
            step_id,
        }
    }

    fn emit(&self, kind: EventKind) {
        if let Some(sink) = self.sink {
            sink.emit(self.step_id, kind);
        }
    }
}

/// Batch-wide switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EditOptions {
    /// Secrets found in added lines reject the batch (otherwise they are warnings).
    pub block_on_secrets: bool,
    /// Run the file type's formatter (rustfmt, ruff, prettier) on written files, when installed.
    pub format: bool,
}

/// The `before_write` of [`Editor::edit_after`] for a batch of step `ctx`'s: waits for what
/// the engine holds the step's changes for
/// ([`StepContext::before_changes`](nuvira_api::StepContext::before_changes)) or for the run's
/// cancellation, then says whether the batch may still be written (not once cancelled: the
/// scheduler no longer awaits the batch's thread then). Made on the runtime, called on a
/// thread of the blocking pool (it blocks on the runtime there).
///
/// # Panics
/// Made outside a tokio runtime.
pub fn before_write_gate(ctx: &nuvira_api::StepContext) -> impl FnOnce() -> bool + Send + 'static {
    let settle = ctx.before_changes();
    let cancel = Arc::clone(ctx.cancel());
    let handle = tokio::runtime::Handle::current();
    move || {
        handle.block_on(async {
            tokio::select! {
                () = settle => {}
                () = cancel.cancelled() => {}
            }
        });
        !cancel.is_cancelled()
    }
}

/// Why [`Editor::edit`] wrote nothing (or undid what it wrote).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EditFailure {
    /// The batch did not validate; nothing was written. The result lists every reason in
    /// `skipped_changes`.
    #[error("apply the edit batch: {} problem(s) found, nothing was written", .0.skipped_changes.len())]
    Rejected(Box<EditResult>),
    /// A write failed; the files already written were restored from the journal.
    #[error("write the edit batch")]
    Write(#[source] JournalError),
    /// The caller stopped the batch before anything was written (`before_write` of
    /// [`Editor::edit_after`] said no: the step was cancelled or ran out of time); nothing
    /// was written.
    #[error("the edit batch was stopped before anything was written")]
    Stopped,
}

/// Applies edit batches: strategies by name, an optional syntax checker, and options.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Editor {
    strategies: BTreeMap<String, Arc<dyn EditStrategy>>,
    checker: Option<Arc<dyn SyntaxChecker>>,
    options: EditOptions,
    /// Where formatters run (set by [`EditModule`] when it has a sandbox).
    format_sandbox: Option<format::FormatSandbox>,
}

impl std::fmt::Debug for Editor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Editor")
            .field("strategies", &self.strategies.keys().collect::<Vec<_>>())
            .field("checker", &self.checker.is_some())
            .field("options", &self.options)
            .field(
                "format_sandbox",
                &self
                    .format_sandbox
                    .as_ref()
                    .map(|s| s.sandbox.kind().to_owned()),
            )
            .finish()
    }
}

impl Editor {
    /// An editor with no strategies and no syntax checker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder-style: registers a strategy (replacing one of the same name).
    #[must_use]
    pub fn with_strategy(mut self, strategy: Arc<dyn EditStrategy>) -> Self {
        self.strategies.insert(strategy.name().to_owned(), strategy);
        self
    }

    /// Builder-style: registers several strategies.
    #[must_use]
    pub fn with_strategies(
        mut self,
        strategies: impl IntoIterator<Item = Arc<dyn EditStrategy>>,
    ) -> Self {
        for s in strategies {
            self = self.with_strategy(s);
        }
        self
    }

    /// Builder-style: sets the syntax checker. Whatever the checker, the errors an edit
    /// introduced are found with the one rule, [`nuvira_syntax::introduced_by`].
    #[must_use]
    pub fn with_checker(mut self, checker: Option<Arc<dyn SyntaxChecker>>) -> Self {
        self.checker = checker;
        self
    }

    /// Builder-style: sets the options.
    #[must_use]
    pub fn with_options(mut self, options: EditOptions) -> Self {
        self.options = options;
        self
    }

    /// Builder-style: runs formatters in this sandbox, from the blocking thread the batch
    /// runs on (the edit module's `spawn_blocking`), through `handle`.
    #[must_use]
    pub(crate) fn with_format_sandbox(mut self, sandbox: format::FormatSandbox) -> Self {
        self.format_sandbox = Some(sandbox);
        self
    }

    /// The options.
    pub fn options(&self) -> EditOptions {
        self.options
    }

    /// A strategy by name.
    pub fn strategy(&self, name: &str) -> Option<&Arc<dyn EditStrategy>> {
        self.strategies.get(name)
    }

    /// The registered strategy names, sorted.
    pub fn strategy_names(&self) -> Vec<&str> {
        self.strategies.keys().map(String::as_str).collect()
    }

    /// Applies the batch in memory and validates it. Touches nothing on disk.
    pub fn dry_run(&self, ws: &Workspace, entries: &[EditEntry], emit: &Emit<'_>) -> EditPreview {
        self.prepare(ws, entries, emit).preview
    }

    /// Validates the batch, then writes all of it or nothing, recording the originals in the
    /// workspace's journal under `run_id` (and the emitter's step) first.
    ///
    /// # Errors
    /// [`EditFailure::Rejected`] when the batch does not validate (nothing written), or
    /// [`EditFailure::Write`] when a write fails (the written files are restored).
    pub fn edit(
        &self,
        ws: &Workspace,
        entries: &[EditEntry],
        run_id: &str,
        emit: &Emit<'_>,
    ) -> Result<EditResult, EditFailure> {
        self.edit_after(ws, entries, run_id, emit, || true)
    }

    /// [`edit`](Self::edit), calling `before_write` once the batch is validated and formatted,
    /// right before the journal records it and anything is written (not at all when the batch
    /// is rejected); `false` from it stops the batch with nothing written. The edit module
    /// waits there for the run's records
    /// ([`StepContext::before_changes`](nuvira_api::StepContext::before_changes)), so that
    /// wait overlaps reading, parsing and formatting, and says no when the step was cancelled
    /// or ran out of time meanwhile.
    ///
    /// # Errors
    /// As [`edit`](Self::edit), and [`EditFailure::Stopped`] when `before_write` says no.
    pub fn edit_after(
        &self,
        ws: &Workspace,
        entries: &[EditEntry],
        run_id: &str,
        emit: &Emit<'_>,
        before_write: impl FnOnce() -> bool,
    ) -> Result<EditResult, EditFailure> {
        let Prepared {
            mut preview,
            mut ops,
            seen,
        } = self.prepare(ws, entries, emit);
        if !preview.is_valid() {
            let reasons = rejection_reasons(&preview);
            for r in &reasons {
                emit.emit(EventKind::EditSkipped {
                    path: Some(r.path.clone()).filter(|p| !p.is_empty()),
                    reason: r.reason.clone(),
                });
            }
            let mut result = EditResult::default();
            result.preview = preview;
            result.skipped_changes = reasons;
            return Err(EditFailure::Rejected(Box::new(result)));
        }
        if self.options.format {
            self.format_ops(ws, &mut ops, &mut preview);
        }
        if !before_write() {
            return Err(EditFailure::Stopped);
        }
        let journal = Journal::new(ws);
        let mut txn = journal.begin(run_id, emit.step_id);
        // Compare-and-swap: a file changed by anyone else since it was read aborts the batch.
        for op in &ops {
            if let Some(s) = seen.get(op.path()) {
                txn.expect(op.path(), s.clone());
            }
        }
        let written = match txn.apply(&ops) {
            Ok(w) => w,
            Err(e) => {
                // `apply` restored what it had written before failing.
                emit.emit(EventKind::EditRolledBack {
                    paths: ops.iter().map(|o| o.path().to_owned()).collect(),
                    reason: e.to_string(),
                });
                return Err(EditFailure::Write(e));
            }
        };
        txn.commit().map_err(EditFailure::Write)?;
        let mut change_of: std::collections::HashMap<&str, &nuvira_api::FileChange> = preview
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c))
            .collect();
        for (op, bytes) in ops.iter().zip(written) {
            emit.emit(EventKind::EditWritten {
                path: op.path().to_owned(),
                bytes,
                // Each change once, on its own path.
                change: change_of.remove(op.path()).cloned().map(Arc::new),
            });
        }
        let mut result = EditResult::default();
        result.applied_count = preview.changes.len();
        result.preview = preview;
        Ok(result)
    }

    fn prepare(&self, ws: &Workspace, entries: &[EditEntry], emit: &Emit<'_>) -> Prepared {
        let mut overlay = Overlay::new(ws);
        let mut preview = EditPreview::default();
        for (i, entry) in entries.iter().enumerate() {
            let paths = match (&entry.path, &entry.patch) {
                (Some(p), _) => vec![p.clone()],
                (None, Some(patch)) => module::patch_paths(patch),
                (None, None) => Vec::new(),
            };
            for path in paths {
                emit.emit(EventKind::EditGenerating {
                    language: self
                        .checker
                        .as_ref()
                        .and_then(|c| c.language_for(&path))
                        .map(str::to_owned),
                    path,
                });
            }
            let Some(strategy) = self.strategies.get(&entry.strategy) else {
                preview.errors.push(EditError::new(
                    entry.path.clone(),
                    format!(
                        "edit {} uses unknown strategy `{}`; use one of: {}",
                        i + 1,
                        entry.strategy,
                        self.strategy_names().join(", ")
                    ),
                ));
                continue;
            };
            // Entries are atomic on the overlay too: a failing entry leaves no half-change for
            // the entries after it.
            let checkpoint = overlay.checkpoint();
            if let Err(mut e) = strategy.apply(entry, &mut overlay) {
                overlay.restore(checkpoint);
                if e.path.is_none() {
                    e.path.clone_from(&entry.path);
                }
                let own_prefix = format!("{}: ", entry.strategy);
                let message = e.message.strip_prefix(&own_prefix).unwrap_or(&e.message);
                e.message = format!("edit {} ({}): {message}", i + 1, entry.strategy);
                preview.errors.push(e);
            }
        }

        let changes = collect_changes(&overlay);
        let severity = if self.options.block_on_secrets {
            Severity::Error
        } else {
            Severity::Warning
        };
        let mut ops_write = Vec::new();
        let mut ops_delete = Vec::new();
        let (mut files, mut added, mut removed) = (0, 0, 0);
        for change in &changes {
            let diff = diff_of(change);
            files += 1;
            added += diff.additions;
            removed += diff.deletions;
            // Syntax: only NEW errors count.
            if let Some(new_text) = change.new.text() {
                let (new_issues, note) = self.new_syntax_errors(change, new_text);
                preview.warnings.extend(note);
                if let Some(checker) = &self.checker
                    && checker.language_for(&change.path).is_some()
                {
                    emit.emit(EventKind::EditValidating {
                        path: change.path.clone(),
                        syntax_valid: new_issues.is_empty(),
                        issues: new_issues.len(),
                    });
                }
                preview.validation.ast_issues.extend(new_issues);
                preview
                    .validation
                    .security_warnings
                    .extend(secrets::scan_added_lines(
                        &change.path,
                        diff.added_lines.iter().map(|(n, s)| (*n, s.as_str())),
                        severity,
                    ));
                ops_write.push(FileOp::Write {
                    path: change.path.clone(),
                    content: new_text.as_bytes().to_vec(),
                    mode: overlay.modes.get(&change.path).copied(),
                });
            } else {
                ops_delete.push(FileOp::Delete {
                    path: change.path.clone(),
                });
            }
            if let ChangeKind::Rename { from } = &change.kind {
                ops_delete.push(FileOp::Delete { path: from.clone() });
            }
            preview.changes.push(FileChange::new(
                change.path.clone(),
                change.kind.clone(),
                diff.text,
                diff.additions,
                diff.deletions,
            ));
        }
        preview.validation.syntax_valid = preview.validation.ast_issues.is_empty();
        if self.checker.is_none() && !preview.changes.is_empty() {
            preview
                .warnings
                .push("no syntax checker is configured: syntax was not validated".into());
        }
        if entries.is_empty() {
            preview.warnings.push("the batch has no edits".into());
        }
        preview.estimated_impact.files = files;
        preview.estimated_impact.lines_added = added;
        preview.estimated_impact.lines_removed = removed;
        preview.estimated_impact.level = impact_level(files, added + removed).into();
        ops_write.extend(ops_delete);
        Prepared {
            preview,
            ops: ops_write,
            seen: overlay.seen,
        }
    }

    /// The syntax errors the change introduced, and the checker's note on the check, if any
    /// (said once: e.g. that Python got the tree-sitter check only).
    fn new_syntax_errors(
        &self,
        change: &Change,
        new_text: &str,
    ) -> (Vec<SyntaxDiagnostic>, Option<String>) {
        let Some(checker) = &self.checker else {
            return (Vec::new(), None);
        };
        if checker.language_for(&change.path).is_none() {
            return (Vec::new(), None);
        }
        // The old text is checked as the new path's language (a rename keeps the language).
        let c = nuvira_syntax::introduced_by(
            checker.as_ref(),
            &change.path,
            change.old.text(),
            new_text,
        );
        (c.introduced, c.note)
    }

    fn format_ops(&self, ws: &Workspace, ops: &mut [FileOp], preview: &mut EditPreview) {
        for op in ops.iter_mut() {
            let FileOp::Write { path, content, .. } = op else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(content) else {
                continue;
            };
            match format::format(ws.root(), path, text, self.format_sandbox.as_ref()) {
                format::Formatted::NotApplicable => {}
                format::Formatted::Skipped(why) => preview.warnings.push(why),
                format::Formatted::Text(formatted) if formatted != text => {
                    // Never let a formatter introduce syntax errors of its own.
                    if let Some(checker) = &self.checker
                        && checker.language_for(path).is_some()
                        && !nuvira_syntax::introduced_by(
                            checker.as_ref(),
                            path,
                            Some(text),
                            &formatted,
                        )
                        .introduced
                        .is_empty()
                    {
                        preview.warnings.push(format!(
                            "{path}: formatter output discarded, it broke syntax"
                        ));
                        continue;
                    }
                    if let Some(change) = preview.changes.iter_mut().find(|c| &c.path == path) {
                        let old_path = match &change.kind {
                            ChangeKind::Rename { from } => from.clone(),
                            _ => path.clone(),
                        };
                        let old = ws.read_text(&old_path).ok().flatten().unwrap_or_default();
                        let d = unified(&old, &formatted, &old_path, path, &change.kind);
                        change.diff = d.text;
                        change.additions = d.additions;
                        change.deletions = d.deletions;
                    }
                    *content = formatted.into_bytes();
                }
                format::Formatted::Text(_) => {}
            }
        }
    }
}

#[cfg(feature = "standard")]
impl Editor {
    /// The editor Nuvira uses by default: every built-in strategy
    /// (`nuvira_edit_strategies::builtin`) and the tree-sitter syntax checker.
    pub fn standard() -> Self {
        Self::new()
            .with_strategies(nuvira_edit_strategies::builtin())
            .with_checker(Some(Arc::new(nuvira_syntax::TreeSitterChecker::new())))
    }
}

struct Prepared {
    preview: EditPreview,
    ops: Vec<FileOp>,
    /// What each file held when the batch read it.
    seen: BTreeMap<String, nuvira_workspace::Seen>,
}

/// One changed file, before diffing.
struct Change {
    path: String,
    old_path: String,
    kind: ChangeKind,
    old: FileState,
    new: FileState,
}

fn collect_changes(overlay: &Overlay<'_>) -> Vec<Change> {
    let absent = FileState::Absent;
    let orig = |p: &str| overlay.original.get(p).unwrap_or(&absent);
    let cur = |p: &str| overlay.current.get(p).unwrap_or(&absent);
    let mut consumed = BTreeSet::new();
    let mut renames = BTreeMap::new();
    for (to, from) in &overlay.renamed_from {
        if orig(from).exists() && !cur(from).exists() && !orig(to).exists() && cur(to).exists() {
            renames.insert(to.clone(), from.clone());
            consumed.insert(from.clone());
        }
    }
    let mut out = Vec::new();
    for path in &overlay.order {
        if consumed.contains(path) {
            continue;
        }
        if let Some(from) = renames.get(path) {
            out.push(Change {
                path: path.clone(),
                old_path: from.clone(),
                kind: ChangeKind::Rename { from: from.clone() },
                old: orig(from).clone(),
                new: cur(path).clone(),
            });
            continue;
        }
        let (old, new) = (orig(path), cur(path));
        if old == new {
            continue;
        }
        let kind = match (old.exists(), new.exists()) {
            (false, true) => ChangeKind::Create,
            (true, false) => ChangeKind::Delete,
            _ => ChangeKind::Modify,
        };
        out.push(Change {
            path: path.clone(),
            old_path: path.clone(),
            kind,
            old: old.clone(),
            new: new.clone(),
        });
    }
    out
}

fn diff_of(change: &Change) -> Diff {
    match (&change.old, &change.new) {
        (FileState::Opaque(_), _) => Diff {
            text: format!("Binary file a/{} deleted\n", change.old_path),
            additions: 0,
            deletions: 0,
            added_lines: Vec::new(),
        },
        (old, new) => unified(
            old.text().unwrap_or_default(),
            new.text().unwrap_or_default(),
            &change.old_path,
            &change.path,
            &change.kind,
        ),
    }
}

fn unified(old: &str, new: &str, old_path: &str, new_path: &str, kind: &ChangeKind) -> Diff {
    let a = match kind {
        ChangeKind::Create => "/dev/null".to_owned(),
        _ => format!("a/{old_path}"),
    };
    let b = match kind {
        ChangeKind::Delete => "/dev/null".to_owned(),
        _ => format!("b/{new_path}"),
    };
    let mut diff = diff::unified(old, new, &a, &b);
    if diff.text.is_empty() && old_path != new_path {
        diff.text = format!("rename from {old_path}\nrename to {new_path}\n");
    }
    diff
}

fn impact_level(files: usize, lines: usize) -> &'static str {
    if files <= 1 && lines <= 20 {
        "low"
    } else if files <= 5 && lines <= 200 {
        "medium"
    } else {
        "high"
    }
}

/// Undoes every batch of a run (for a cancelled or failed run) and emits one
/// `edit:rolled-back` event per restored batch. Returns the restored paths.
///
/// A file changed after the run wrote it (by the user, during the run) is left as it is; the
/// event's reason names it.
///
/// # Errors
/// When the journal cannot be read or a file cannot be restored.
pub fn rollback_run(
    ws: &Workspace,
    run_id: &str,
    reason: &str,
    emit: &Emit<'_>,
) -> Result<Vec<String>, JournalError> {
    let done = Journal::new(ws).rollback_run_with(run_id, OnChanged::Keep)?;
    let mut paths = Vec::new();
    for batch in done {
        let scoped = Emit {
            sink: emit.sink,
            step_id: batch.step_id.as_deref().or(emit.step_id),
        };
        scoped.emit(EventKind::EditRolledBack {
            paths: batch.paths.clone(),
            reason: with_kept(reason, &batch.kept),
        });
        paths.extend(batch.paths);
    }
    Ok(paths)
}

/// A rollback's reason, naming the files it left because they changed after the run wrote them.
pub fn with_kept(reason: &str, kept: &[String]) -> String {
    if kept.is_empty() {
        reason.to_owned()
    } else {
        format!(
            "{reason}; not restored, as {} changed after the run wrote {}: {}",
            if kept.len() == 1 { "it" } else { "they" },
            if kept.len() == 1 { "it" } else { "them" },
            kept.join(", ")
        )
    }
}

/// Every reason a preview is not valid, as skipped changes naming path and line.
pub fn rejection_reasons(preview: &EditPreview) -> Vec<SkippedChange> {
    let mut out = Vec::new();
    for e in &preview.errors {
        let mut reason = e.message.clone();
        if let Some(c) = &e.candidate {
            reason.push_str(&format!("; closest match: {c}"));
        }
        out.push(SkippedChange::new(e.path.clone().unwrap_or_default(), reason).at_line(e.line));
    }
    for d in &preview.validation.ast_issues {
        out.push(
            SkippedChange::new(
                d.path.clone(),
                format!(
                    "the edit introduces a syntax error at {}:{}: {}",
                    d.line, d.column, d.message
                ),
            )
            .at_line(Some(d.line)),
        );
    }
    for w in &preview.validation.security_warnings {
        if w.severity == Severity::Error {
            out.push(
                SkippedChange::new(
                    w.path.clone(),
                    format!(
                        "{} [{}] (blocked: `block_on_secrets` is on)",
                        w.message, w.rule
                    ),
                )
                .at_line(Some(w.line)),
            );
        }
    }
    out
}

/// Whether a security warning blocks (for callers that print them).
pub fn is_blocking(w: &SecurityWarning) -> bool {
    w.severity == Severity::Error
}
