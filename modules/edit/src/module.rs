//! The `edit` step: [`EditModule`] implements [`nuvira_api::Module`].

use crate::{EditFailure, EditOptions, Editor, Emit, rejection_reasons};
use nuvira_api::{
    ConfigError, EditEntry, ErrorCategory, Failure, Module, ModuleError, ModuleKind, PlanStep,
    Sandbox, StepContext, StepOutput, WriteSet, async_trait,
};
use nuvira_workspace::Workspace;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// The config of an `edit` step (and the shape of the file `nuvira apply` reads).
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EditStepConfig {
    /// The entries, in order (each checked by [`parse_entries`] as an [`EditEntry`]).
    #[serde(default)]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<Vec<EditEntry>>"))]
    pub edits: Option<Vec<Value>>,
    /// Text for a model to turn into entries (needs a configured model).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Secrets in added lines reject the batch.
    #[serde(default)]
    pub block_on_secrets: Option<bool>,
    /// Format written files when the formatter is installed.
    #[serde(default)]
    pub format: Option<bool>,
    /// Size cap per file in bytes (default 1 MiB).
    #[serde(default)]
    pub max_file_size: Option<u64>,
}

/// Turns an edit step's `instructions` into entries (the hook for model-written edits).
#[async_trait]
pub trait InstructionEditor: Send + Sync {
    /// The entries for these instructions.
    ///
    /// # Errors
    /// A [`ModuleError`] (e.g. the model answered something unusable).
    async fn edits_for(
        &self,
        instructions: &str,
        ctx: &StepContext,
    ) -> Result<Vec<EditEntry>, ModuleError>;
}

/// The fields each built-in strategy needs (beyond `strategy`).
fn required_fields(strategy: &str) -> Option<&'static [&'static str]> {
    Some(match strategy {
        "search-replace" => &["path", "search", "replace"],
        "unified-diff" => &["patch"],
        "regex" => &["path", "pattern", "replace"],
        "whole-file" => &["path", "content"],
        "delete-file" => &["path"],
        "rename-file" => &["path", "to"],
        "ast-replace" => &["path", "symbol", "content"],
        _ => return None,
    })
}

fn field<'a>(e: &'a EditEntry, name: &str) -> Option<&'a String> {
    match name {
        "path" => e.path.as_ref(),
        "search" => e.search.as_ref(),
        "replace" => e.replace.as_ref(),
        "patch" => e.patch.as_ref(),
        "pattern" => e.pattern.as_ref(),
        "content" => e.content.as_ref(),
        "to" => e.to.as_ref(),
        "symbol" => e.symbol.as_ref(),
        _ => None,
    }
}

/// Parses and checks raw entries: each must be an edit entry, name a strategy `editor` knows,
/// and carry the fields a built-in strategy needs. Every problem is reported, each naming the
/// entry index (`edits[2]`) and the field.
///
/// # Errors
/// The list of problems.
pub fn parse_entries(values: &[Value], editor: &Editor) -> Result<Vec<EditEntry>, Vec<String>> {
    let mut out = Vec::with_capacity(values.len());
    let mut problems = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let Some(obj) = v.as_object() else {
            problems.push(format!(
                "edits[{i}]: expected a mapping with a `strategy` field, found {}",
                kind_of(v)
            ));
            continue;
        };
        match obj.get("strategy") {
            Some(Value::String(_)) => {}
            Some(other) => {
                problems.push(format!(
                    "edits[{i}].strategy: expected a string, found {}",
                    kind_of(other)
                ));
                continue;
            }
            None => {
                problems.push(format!(
                    "edits[{i}].strategy: missing; use one of: {}",
                    editor.strategy_names().join(", ")
                ));
                continue;
            }
        }
        let entry: EditEntry = match serde_json::from_value(v.clone()) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("edits[{i}]: {e}"));
                continue;
            }
        };
        if editor.strategy(&entry.strategy).is_none() {
            problems.push(format!(
                "edits[{i}].strategy: unknown strategy `{}`; use one of: {}",
                entry.strategy,
                editor.strategy_names().join(", ")
            ));
            continue;
        }
        if let Some(fields) = required_fields(&entry.strategy) {
            for f in fields {
                if field(&entry, f).is_none() {
                    problems.push(format!(
                        "edits[{i}].{f}: missing; a `{}` edit needs {}",
                        entry.strategy,
                        fields
                            .iter()
                            .map(|f| format!("`{f}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        out.push(entry);
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The paths a unified diff names in its `---`/`+++` headers (without `a/`/`b/`).
pub(crate) fn patch_paths(patch: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in patch.lines() {
        let Some(rest) = line
            .strip_prefix("+++ ")
            .or_else(|| line.strip_prefix("--- "))
        else {
            continue;
        };
        let name = rest.split('\t').next().unwrap_or(rest).trim();
        if name == "/dev/null" || name.is_empty() {
            continue;
        }
        let name = name
            .strip_prefix("a/")
            .or_else(|| name.strip_prefix("b/"))
            .unwrap_or(name);
        if !out.iter().any(|p| p == name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// Why an edit step without `edits` or `instructions` is rejected.
const NEEDS_EDITS: &str =
    "an edit step needs `config.edits` (a list of edit entries) or `config.instructions`";

/// The `edit` module: runs a step's `edits` as one validated, all-or-nothing batch.
///
/// Config (see [`EditStepConfig`]): `edits: [...]` in the edit-entry schema,
/// `block_on_secrets: bool`, `format: bool`, `max_file_size: bytes`. In a dry run it returns
/// [`StepOutput::EditPreview`]; otherwise [`StepOutput::Edit`]. A rejected batch is a
/// recoverable [`ErrorCategory::EditRejected`] failure carrying every reason as evidence. Written
/// files are journaled under the run id, so the engine can undo a failed or cancelled run with
/// [`nuvira_workspace::Journal::rollback_run`].
#[derive(Clone, Default)]
pub struct EditModule {
    editor: Editor,
    instructions: Option<Arc<dyn InstructionEditor>>,
    sandbox: Option<Arc<dyn Sandbox>>,
}

impl std::fmt::Debug for EditModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EditModule")
            .field("editor", &self.editor)
            .field("instructions", &self.instructions.is_some())
            .field(
                "sandbox",
                &self.sandbox.as_ref().map(|s| s.kind().to_owned()),
            )
            .finish()
    }
}

impl EditModule {
    /// A module that applies batches with this editor (its strategies, checker and default
    /// options; a step's config overrides the options).
    pub fn new(editor: Editor) -> Self {
        Self {
            editor,
            instructions: None,
            sandbox: None,
        }
    }

    /// The module with [`Editor::standard`]: built-in strategies and tree-sitter checks.
    #[cfg(feature = "standard")]
    pub fn standard() -> Self {
        Self::new(Editor::standard())
    }

    /// Builder-style: sets the hook that turns `instructions` into entries when a model is
    /// configured.
    #[must_use]
    pub fn with_instructions(mut self, hook: Arc<dyn InstructionEditor>) -> Self {
        self.instructions = Some(hook);
        self
    }

    /// Builder-style: runs the formatters of `format: true` steps in this sandbox (the
    /// temporary folder holding the text and the project's data configs is its workspace;
    /// no network). Without one they run on the host in that folder.
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// The editor.
    pub fn editor(&self) -> &Editor {
        &self.editor
    }

    fn config(step: &PlanStep) -> Result<EditStepConfig, ConfigError> {
        if step.config.is_null() {
            return Err(ConfigError::new(&step.id, NEEDS_EDITS));
        }
        step.config_as()
            .map_err(|e| e.map_message(|m| format!("config: {m}")))
    }
}

#[async_trait]
impl Module for EditModule {
    fn name(&self) -> &str {
        "edit"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Edit
    }

    /// The batch waits for the run's records once it is validated and formatted, right
    /// before the journal (see [`Editor::edit_after`]).
    fn calls_before_changes(&self) -> bool {
        true
    }

    fn write_set(&self, step: &PlanStep) -> WriteSet {
        let Ok(cfg) = Self::config(step) else {
            return WriteSet::Exclusive;
        };
        let Some(values) = cfg.edits else {
            return WriteSet::Exclusive;
        };
        let mut paths: Vec<String> = step.writes.clone();
        for v in &values {
            let Ok(entry) = serde_json::from_value::<EditEntry>(v.clone()) else {
                return WriteSet::Exclusive;
            };
            let mut p = match self.editor.strategy(&entry.strategy) {
                Some(s) => s.paths(&entry),
                None => entry.path.iter().chain(entry.to.iter()).cloned().collect(),
            };
            if p.is_empty()
                && let Some(patch) = &entry.patch
            {
                p = patch_paths(patch);
            }
            if p.is_empty() {
                return WriteSet::Exclusive;
            }
            paths.extend(p);
        }
        WriteSet::paths(paths)
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        /// Why `path` cannot be written, judged lexically (the workspace checks symlinks when
        /// the step runs): absolute, `..` above the root, or a `.git`/`.nuvira` component.
        fn outside(path: &str) -> Option<&'static str> {
            let mut depth = 0usize;
            for c in std::path::Path::new(path).components() {
                match c {
                    std::path::Component::Prefix(_) | std::path::Component::RootDir => {
                        return Some("it is absolute");
                    }
                    std::path::Component::CurDir => {}
                    std::path::Component::ParentDir => match depth.checked_sub(1) {
                        Some(d) => depth = d,
                        None => return Some("`..` leads outside the workspace"),
                    },
                    std::path::Component::Normal(s) => {
                        if s == ".git" || s == ".nuvira" {
                            return Some("edits never write inside `.git/` or `.nuvira/`");
                        }
                        depth += 1;
                    }
                }
            }
            None
        }
        let cfg = Self::config(step)?;
        match (&cfg.edits, &cfg.instructions) {
            (Some(values), _) => {
                let entries = parse_entries(values, &self.editor)
                    .map_err(|p| ConfigError::new(&step.id, p.join("; ")))?;
                let mut problems = Vec::new();
                for (i, entry) in entries.iter().enumerate() {
                    let named = [("path", &entry.path), ("to", &entry.to)];
                    let mut paths: Vec<(&str, String)> = named
                        .iter()
                        .filter_map(|(f, p)| p.as_ref().map(|p| (*f, p.clone())))
                        .collect();
                    if let Some(patch) = &entry.patch {
                        paths.extend(patch_paths(patch).into_iter().map(|p| ("patch", p)));
                    }
                    for (field, path) in paths {
                        if let Some(why) = outside(&path) {
                            problems.push((format!("edits[{i}].{field}"), format!(
                                "edits[{i}].{field}: `{path}` is rejected: {why}; edit paths must be relative to the repository root and stay inside it, e.g. `src/lib.rs`"
                            )));
                        }
                    }
                }
                match problems.first() {
                    None => Ok(()),
                    Some((field, _)) => Err(ConfigError::new(
                        &step.id,
                        problems
                            .iter()
                            .map(|(_, m)| m.as_str())
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                    .at(field.clone())),
                }
            }
            (None, Some(_)) => Ok(()),
            (None, None) => Err(ConfigError::new(&step.id, NEEDS_EDITS)),
        }
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let cfg = Self::config(step)?;
        let entries = match (&cfg.edits, &cfg.instructions) {
            (Some(values), _) => parse_entries(values, &self.editor).map_err(|p| {
                ModuleError::invalid_config(format!("step `{}`: {}", step.id, p.join("; ")))
            })?,
            (None, Some(text)) => match (&self.instructions, &ctx.llm()) {
                (Some(hook), Some(_)) => hook.edits_for(text, ctx).await?,
                (_, None) => {
                    return Err(ModuleError::invalid_config(format!(
                        "step `{}`: `instructions` need a model to write the edits; configure one (NUVIRA_MODEL) or give `edits` instead",
                        step.id
                    )));
                }
                (None, Some(_)) => {
                    return Err(ModuleError::invalid_config(format!(
                        "step `{}`: model-written edits (`instructions`) are not available in this build; give `edits` instead",
                        step.id
                    )));
                }
            },
            (None, None) => {
                return Err(ModuleError::invalid_config(format!(
                    "step `{}`: an edit step needs `config.edits` or `config.instructions`",
                    step.id
                )));
            }
        };
        let defaults = self.editor.options();
        let mut editor = self.editor.clone().with_options(EditOptions {
            block_on_secrets: cfg.block_on_secrets.unwrap_or(defaults.block_on_secrets),
            format: cfg.format.unwrap_or(defaults.format),
        });
        if let Some(sandbox) = &self.sandbox {
            // The batch runs in `spawn_blocking` below, where blocking on the runtime is fine.
            editor = editor.with_format_sandbox(crate::format::FormatSandbox {
                sandbox: Arc::clone(sandbox),
                handle: tokio::runtime::Handle::current(),
                cancel: Arc::clone(ctx.cancel()),
            });
        }
        let mut ws = Workspace::open(ctx.workspace_root()).map_err(|e| {
            ModuleError::fatal(ErrorCategory::Io, format!("step `{}`: {e}", step.id))
        })?;
        if let Some(cap) = cfg.max_file_size {
            ws = ws.with_max_file_size(cap);
        }
        if ctx.cancel().is_cancelled() {
            return Err(ModuleError::Cancelled);
        }
        let events = Arc::clone(ctx.events());
        let step_id = ctx.step_id().clone();
        let run_id = ctx.run_id().clone();
        let dry_run = ctx.dry_run();
        let stopped_by = Arc::clone(ctx.cancel());
        let deadline = ctx.deadline();
        // Waits for the run's records (or the cancellation), then says whether the step may
        // still write: the scheduler no longer awaits this thread once the step was cancelled
        // or timed out, so the batch is not started after that (one that started before still
        // finishes, as any batch on this thread always did).
        let gate = crate::before_write_gate(ctx);
        let may_write = move || gate() && deadline.is_none_or(|d| std::time::Instant::now() < d);
        let work = tokio::task::spawn_blocking(move || {
            let emit = Emit::to(events.as_ref(), Some(&step_id));
            if dry_run {
                let preview = editor.dry_run(&ws, &entries, &emit);
                if preview.is_valid() {
                    Ok(StepOutput::EditPreview(preview))
                } else {
                    let reasons = rejection_reasons(&preview);
                    Err(rejected(reasons, StepOutput::EditPreview(preview)))
                }
            } else {
                // On a thread of the blocking pool, where waiting on the runtime is fine.
                match editor.edit_after(&ws, &entries, &run_id, &emit, may_write) {
                    Ok(result) => Ok(StepOutput::Edit(result)),
                    Err(EditFailure::Rejected(result)) => {
                        let reasons = result.skipped_changes.clone();
                        Err(rejected(reasons, StepOutput::Edit(*result)))
                    }
                    Err(EditFailure::Stopped) if stopped_by.is_cancelled() => {
                        Err(ModuleError::Cancelled)
                    }
                    // As the scheduler reports a timeout: recoverable (retried, rolled back).
                    Err(EditFailure::Stopped) => Err(ModuleError::recoverable(
                        ErrorCategory::Timeout,
                        format!(
                            "step `{step_id}` reached its timeout before its edit batch was written; nothing was written"
                        ),
                    )),
                    Err(EditFailure::Write(e)) => Err(ModuleError::fatal(
                        ErrorCategory::Io,
                        format!("write the edits: {e}"),
                    )),
                }
            }
        });
        work.await.map_err(|e| {
            ModuleError::fatal(ErrorCategory::Unknown, format!("run the edit batch: {e}"))
        })?
    }
}

fn rejected(reasons: Vec<nuvira_api::SkippedChange>, output: StepOutput) -> ModuleError {
    let evidence = reasons.iter().map(|r| match (r.path.is_empty(), r.line) {
        (true, _) => r.reason.clone(),
        (false, Some(l)) => format!("{}:{l}: {}", r.path, r.reason),
        (false, None) => format!("{}: {}", r.path, r.reason),
    });
    ModuleError::Recoverable(
        Failure::new(
            ErrorCategory::EditRejected,
            format!(
                "edit batch rejected ({} problem(s)); nothing was written",
                reasons.len()
            ),
        )
        .with_evidence(evidence)
        .with_output(output),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn patch_paths_reads_git_and_plain_headers() {
        let patch = "--- a/src/x.rs\n+++ b/src/x.rs\n@@ -1 +1 @@\n-a\n+b\n--- /dev/null\n+++ b/new.txt\t2024\n";
        assert_eq!(patch_paths(patch), vec!["src/x.rs", "new.txt"]);
    }
}
