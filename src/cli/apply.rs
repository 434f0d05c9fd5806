//! `nuvira apply EDITS_FILE`: a validated, all-or-nothing edit batch (or its preview).

use crate::cli::{esc, esc_lines};
use crate::exit;
use anyhow::anyhow;
use nuvira_api::{ChangeKind, EditPreview, EditResult, Severity};
use nuvira_edit::nuvira_workspace::{
    Journal, JournalError, JournalSnapshot, RolledBack, Untrusted, Workspace,
};
use nuvira_edit::{EditFailure, EditOptions, EditStepConfig, Editor, Emit, parse_entries};
use nuvira_plan::{LoadError, LoadedEdits};
use std::path::{Path, PathBuf};

/// Arguments of `nuvira apply`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("preview a batch of edits: the diffs, nothing written", "nuvira apply edits.yaml --repo . --dry-run"),
    ("apply edits piped in as JSON, all or nothing", "cat edits.json | nuvira apply - --repo ."),
]))]
pub struct Args {
    /// The edits file (YAML, JSON or TOML, by extension) with an `edits:` list; `-` reads
    /// standard input (the format told from the text).
    pub edits_file: PathBuf,
    /// The repository (workspace root) to edit.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Validate and show the diffs; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// When another nuvira process is changing the repository, wait for it instead of
    /// failing (exit 3).
    #[arg(long)]
    pub wait: bool,
}

/// Output formats of `nuvira apply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Readable text.
    Text,
    /// The `EditResult` (or `EditPreview` with `--dry-run`) as JSON on stdout.
    Json,
}

/// Runs the command. With `--format json`, a failure before there is a preview or result
/// also prints `{"ok": false, "error": {"kind", "message"}}` on stdout (see
/// [`crate::cli::json_error`]).
pub fn execute(args: Args) -> u8 {
    let json = args.format == Format::Json;
    let json_error = |kind: &str, message: &str, problems: Option<serde_json::Value>| {
        if json {
            super::print_stdout(&crate::cli::actions::json_for_stdout(
                &crate::cli::json_error(kind, message, problems),
            ));
        }
    };
    let (loaded, entries) = match load(&args.edits_file) {
        Ok(v) => v,
        Err(e) => {
            let msg = e.to_string();
            eprintln!("error: {}", esc_lines(&msg));
            json_error("invalid-input", &msg, None);
            return exit::INVALID;
        }
    };
    if let Err(e) = crate::cli::check_repo(&args.repo) {
        let msg = e.to_string();
        eprintln!("error: {}", esc_lines(&msg));
        json_error("repository", &msg, None);
        return exit::INVALID;
    }
    let ws = match Workspace::open(&args.repo) {
        Ok(ws) => ws,
        Err(e) => {
            json_error("repository", &e.to_string(), None);
            crate::cli::print_error(&anyhow!(e).context("open the repository"));
            return exit::INVALID;
        }
    };
    let cfg = &loaded.config;
    let ws = match cfg.max_file_size {
        Some(cap) => ws.with_max_file_size(cap),
        None => ws,
    };
    // One writer per repository, from before the batch reads anything until it is written
    // (a dry run writes nothing and takes no lock).
    let _lock = if args.dry_run {
        None
    } else {
        match crate::cli::lock_repo(&ws, args.wait) {
            Ok(lock) => Some(lock),
            Err(e) => {
                let msg = e.to_string();
                eprintln!("error: {}", crate::cli::esc_lines(&msg.to_string()));
                json_error("environment", &msg, None);
                return exit::ENVIRONMENT;
            }
        }
    };
    // A batch a crash interrupted is undone before anything else touches the workspace.
    let snapshot = match recover_reading(&ws) {
        Ok((_, snapshot)) => snapshot,
        Err(code) => {
            json_error(
                "failed",
                "rolling back the batch an earlier crash interrupted failed (see stderr)",
                None,
            );
            return code;
        }
    };
    let last_run = snapshot.as_ref().and_then(JournalSnapshot::last_run);
    super::inflight::report_interrupted(&ws, &args.repo, last_run);
    let editor = Editor::standard().with_options(EditOptions {
        block_on_secrets: cfg.block_on_secrets.unwrap_or(false),
        format: cfg.format.unwrap_or(false),
    });
    let entries = match parse_entries(&entries, &editor) {
        Ok(e) => e,
        Err(problems) => {
            let message = format!(
                "`{}` has {} invalid edit(s)",
                args.edits_file.display(),
                problems.len()
            );
            json_error(
                "invalid-input",
                &message,
                Some(serde_json::Value::from(problems.clone())),
            );
            eprintln!("error: {}:", esc(&message));
            for p in problems {
                match loaded.line_of_problem(&p) {
                    Some(line) => eprintln!(
                        "  {}:{line}: {}",
                        esc(&args.edits_file.display().to_string()),
                        esc_lines(&p)
                    ),
                    None => eprintln!("  {}", esc_lines(&p)),
                }
            }
            return exit::INVALID;
        }
    };

    if args.dry_run {
        let preview = editor.dry_run(&ws, &entries, &Emit::none());
        let valid = preview.is_valid();
        match args.format {
            Format::Json => print_json(&preview),
            Format::Text => print_preview(&preview),
        }
        if !valid {
            print_reasons(&nuvira_edit::rejection_reasons(&preview), true);
            return exit::FAILED;
        }
        return exit::SUCCESS;
    }

    let run_id = format!("apply-{}", nuvira_api::now_ms());
    match editor.edit(&ws, &entries, &run_id, &Emit::none()) {
        Ok(result) => {
            match args.format {
                Format::Json => print_json(&result),
                Format::Text => print_result(&result, &args.repo),
            }
            exit::SUCCESS
        }
        Err(EditFailure::Rejected(result)) => {
            if args.format == Format::Json {
                print_json(&result);
            }
            print_reasons(&result.skipped_changes, false);
            exit::FAILED
        }
        Err(e) => {
            json_error("failed", &e.to_string(), None);
            crate::cli::print_error(&anyhow!(e));
            exit::FAILED
        }
    }
}

/// Rolls back batches a crash left half-written and prints what it did: how many, and the
/// journal as it stands after it (read once for the command's start: `None` when it could not
/// be read).
pub(crate) fn recover_reading(ws: &Workspace) -> Result<(usize, Option<JournalSnapshot>), u8> {
    let journal = Journal::new(ws);
    let (snapshot, recovered) = read_and_recover(&journal);
    let n = recovered_or_exit(recovered)?;
    Ok((n, snapshot))
}

/// Reads the journal once, names the transactions it does not trust and rolls back what a
/// crash left pending; the snapshot (brought up to date by the recovery) serves the rest of a
/// command's start, so the journal is not read again for it.
pub(crate) fn read_and_recover(
    journal: &Journal,
) -> (
    Option<JournalSnapshot>,
    Result<Vec<RolledBack>, JournalError>,
) {
    match journal.read() {
        Ok(mut snapshot) => {
            warn_untrusted_in(snapshot.untrusted());
            let recovered = journal.recover_incomplete_in(&mut snapshot);
            (Some(snapshot), recovered)
        }
        Err(e) => (None, Err(e)),
    }
}

fn recovered_or_exit(recovered: Result<Vec<RolledBack>, JournalError>) -> Result<usize, u8> {
    match recovered {
        // Only a dry run gets here without the lock: the holder, alive, recovers for itself.
        Err(JournalError::Locked(e)) => {
            eprintln!(
                "note: {}; the preview may not show its changes",
                crate::cli::esc_lines(&e.to_string())
            );
            Ok(0)
        }
        Ok(done) => {
            for r in &done {
                eprintln!(
                    "note: rolled back an interrupted batch of run `{}` ({} file(s): {})",
                    esc(&r.run_id),
                    r.paths.len(),
                    esc(&r.paths.join(", "))
                );
                if !r.kept.is_empty() {
                    eprintln!(
                        "note: kept {} file(s) edited after that crash, as they are: {}",
                        r.kept.len(),
                        esc(&r.kept.join(", "))
                    );
                }
            }
            Ok(done.len())
        }
        Err(e) => {
            crate::cli::print_error(
                &anyhow!(e).context("roll back the batch an earlier crash interrupted"),
            );
            Err(exit::FAILED)
        }
    }
}

/// Names every journal transaction this machine did not write (planted by a checkout, say):
/// they are never recovered or rolled back, and the user should know they are there.
pub(crate) fn warn_untrusted_in(untrusted: &[Untrusted]) {
    for u in untrusted {
        eprintln!(
            "warning: left the journal transaction {u}; Nuvira only recovers or rolls back transactions this machine wrote: remove the folder if you do not know where it came from"
        );
    }
}

/// Reads and parses the edits file with nuvira-plan's loader (the plan files' formats, errors
/// and byte order mark handling), and checks that it has `edits`.
fn load(path: &Path) -> Result<(LoadedEdits<EditStepConfig>, Vec<serde_json::Value>), FileError> {
    let loaded = super::conventions::load_edits::<EditStepConfig>(path)?;
    let file = path.to_owned();
    if loaded.config.instructions.is_some() && loaded.config.edits.is_none() {
        return Err(FileError::InstructionsOnly(file));
    }
    let Some(edits) = loaded.config.edits.clone() else {
        return Err(FileError::NoEdits(file));
    };
    Ok((loaded, edits))
}

/// Why the edits file cannot be applied. Names the file, and the line and column where the
/// parser knows them.
#[derive(Debug, thiserror::Error)]
enum FileError {
    /// It cannot be read or parsed.
    #[error("{}", describe(.0))]
    Load(#[from] LoadError),
    /// It has `instructions` for a model and no `edits`.
    #[error(
        "`{}`: `nuvira apply` applies `edits`; `instructions` for a model need `nuvira run`",
        .0.display()
    )]
    InstructionsOnly(PathBuf),
    /// It has no `edits` list.
    #[error(
        "`{}`: no `edits` list; write `edits: [{{ strategy: search-replace, path: ..., search: ..., replace: ... }}]`",
        .0.display()
    )]
    NoEdits(PathBuf),
}

/// `parse `FILE` at line L, column C: ...` for an error the parser located, else
/// `` `FILE`: ... ``.
fn describe(e: &LoadError) -> String {
    match (e.line, e.column) {
        (Some(line), Some(column)) => format!(
            "parse `{}` at line {line}, column {column}: {}",
            e.file, e.message
        ),
        (Some(line), None) => format!("parse `{}` at line {line}: {}", e.file, e.message),
        _ => format!("`{}`: {}", e.file, e.message),
    }
}

fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{}", crate::cli::actions::json_stdout(&s)),
        Err(e) => eprintln!("error: serialize the output: {e}"),
    }
}

fn kind_word(kind: &ChangeKind) -> String {
    match kind {
        ChangeKind::Create => "create".into(),
        ChangeKind::Modify => "modify".into(),
        ChangeKind::Delete => "delete".into(),
        ChangeKind::Rename { from } => format!("rename from {} to", esc(from)),
    }
}

fn print_changes(preview: &EditPreview) {
    for c in &preview.changes {
        println!(
            "  {} {} (+{} -{})",
            kind_word(&c.kind),
            esc(&c.path),
            c.additions,
            c.deletions
        );
    }
}

fn print_notes(preview: &EditPreview) {
    for w in &preview.warnings {
        println!("warning: {}", esc_lines(w));
    }
    for w in &preview.validation.security_warnings {
        if w.severity != Severity::Error {
            println!(
                "warning: {}:{}: {} [{}]",
                esc(&w.path),
                w.line,
                esc_lines(&w.message),
                w.rule
            );
        }
    }
}

fn print_result(result: &EditResult, repo: &Path) {
    let p = &result.preview;
    println!(
        "applied {} change(s): +{} -{} line(s) ({} impact)",
        result.applied_count,
        p.estimated_impact.lines_added,
        p.estimated_impact.lines_removed,
        p.estimated_impact.level
    );
    print_changes(p);
    print_notes(p);
    // An empty batch records nothing in the journal, so there is nothing of it to undo.
    if result.applied_count > 0 {
        println!("undo with `{}`", rollback_command(repo));
    }
}

/// `nuvira rollback`, with `--repo DIR` unless the repository is the current folder (quoted
/// for a POSIX shell when it needs it).
pub(crate) fn rollback_command(repo: &Path) -> String {
    let shown = repo.display().to_string();
    if shown.is_empty() || repo.components().eq(Path::new(".").components()) {
        return "nuvira rollback".into();
    }
    let plain = shown
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    let quoted = if plain {
        shown
    } else {
        format!("'{}'", shown.replace('\'', "'\\''"))
    };
    format!("nuvira rollback --repo {quoted}")
}

fn print_preview(preview: &EditPreview) {
    for c in &preview.changes {
        // The diff's headers name the file: a name with a newline must not split them.
        let diff = if esc(&c.path) == c.path.as_str() {
            esc_lines(&c.diff)
        } else {
            std::borrow::Cow::Owned(esc_lines(&c.diff.replace(&c.path, &esc(&c.path))).into_owned())
        };
        print!("{diff}");
        if !c.diff.ends_with('\n') {
            println!();
        }
    }
    println!(
        "dry run: {} change(s), +{} -{} line(s) ({} impact); nothing was written",
        preview.changes.len(),
        preview.estimated_impact.lines_added,
        preview.estimated_impact.lines_removed,
        preview.estimated_impact.level
    );
    print_changes(preview);
    print_notes(preview);
}

fn print_reasons(reasons: &[nuvira_api::SkippedChange], dry_run: bool) {
    eprintln!(
        "error: edits rejected ({} problem(s)); {}",
        reasons.len(),
        if dry_run {
            "they would not be applied"
        } else {
            "nothing was written"
        }
    );
    for r in reasons {
        match (r.path.is_empty(), r.line) {
            (true, _) => eprintln!("  {}", esc_lines(&r.reason)),
            (false, Some(line)) => {
                eprintln!("  {}:{line}: {}", esc(&r.path), esc_lines(&r.reason));
            }
            (false, None) => eprintln!("  {}: {}", esc(&r.path), esc_lines(&r.reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_undo_hint_names_the_repository_unless_it_is_the_current_folder() {
        assert_eq!(rollback_command(Path::new(".")), "nuvira rollback");
        assert_eq!(rollback_command(Path::new("./")), "nuvira rollback");
        assert_eq!(
            rollback_command(Path::new("rs")),
            "nuvira rollback --repo rs"
        );
        assert_eq!(
            rollback_command(Path::new("my repo")),
            "nuvira rollback --repo 'my repo'"
        );
        assert_eq!(
            rollback_command(Path::new("it's")),
            "nuvira rollback --repo 'it'\\''s'"
        );
    }
}
