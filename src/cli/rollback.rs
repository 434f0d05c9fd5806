//! `nuvira rollback`: restores the files changed by the last apply or run.

use crate::cli::esc;
use crate::exit;
use anyhow::anyhow;
use nuvira_edit::nuvira_workspace::{Journal, JournalError, OnChanged, Workspace};
use std::path::PathBuf;

/// Arguments of `nuvira rollback`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("undo the last apply or run", "nuvira rollback --repo ."),
    ("undo it but keep files changed since", "nuvira rollback --repo . --keep-changed"),
]))]
pub struct Args {
    /// The repository (workspace root) whose last change to undo.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,

    /// Restore files that changed after the run wrote them too, losing those later changes.
    /// Without it (or --keep-changed), such a file makes the rollback restore nothing.
    #[arg(long, conflicts_with = "keep_changed")]
    pub force: bool,

    /// Restore every other file and leave the ones changed after the run as they are.
    #[arg(long)]
    pub keep_changed: bool,

    /// When another nuvira process is changing the repository, wait for it instead of
    /// failing (exit 3).
    #[arg(long)]
    pub wait: bool,
}

/// Runs the command: first a batch a crash left half-written (that is the last apply), else
/// every batch of the newest run that is not rolled back yet. A file changed since the run
/// wrote it is never overwritten without `--force`. A run that committed its files
/// (`nuvira run --commit`) is not rolled back: the message says to `git revert` the commit.
pub fn execute(args: Args) -> u8 {
    let on_changed = if args.force {
        OnChanged::Overwrite
    } else if args.keep_changed {
        OnChanged::Keep
    } else {
        OnChanged::Refuse
    };
    if let Err(e) = crate::cli::check_repo(&args.repo) {
        eprintln!("error: {}", crate::cli::esc_lines(&e.to_string()));
        return exit::INVALID;
    }
    let ws = match Workspace::open(&args.repo) {
        Ok(ws) => ws,
        Err(e) => {
            crate::cli::print_error(&anyhow!(e).context("open the repository"));
            return exit::INVALID;
        }
    };
    // One writer per repository. Without a journal there is nothing to roll back, and no
    // state is created just to say so.
    let has_journal = ws.state_dir().join("journal").exists();
    let _lock = match has_journal.then(|| crate::cli::lock_repo(&ws, args.wait)) {
        Some(Err(e)) => {
            eprintln!("error: {}", crate::cli::esc_lines(&e.to_string()));
            return exit::ENVIRONMENT;
        }
        lock => lock,
    };
    let snapshot = match super::apply::recover_reading(&ws) {
        Ok((0, snapshot)) => snapshot,
        Ok(_) => return exit::SUCCESS,
        Err(code) => return code,
    };
    // A run that committed (`nuvira run --commit`) is undone with git, not by restoring files
    // under its commit: rollback never touches commits.
    if let Some(run) = snapshot.as_ref().and_then(|s| s.last_run())
        && let Some(sha) = super::git_run::recorded_commit(&ws.state_dir(), run)
    {
        eprintln!(
            "error: `{}` committed its changes as {sha} (--commit), and rollback never touches commits: undo it with `git revert {sha}`",
            esc(run)
        );
        return exit::FAILED;
    }
    match Journal::new(&ws).rollback_last_with(on_changed) {
        Ok(Some((run, done))) => {
            // Batches come newest first, so the last word on a path is its oldest batch's: a
            // file created by the run is removed, any other restored.
            let mut fate: std::collections::BTreeMap<&str, bool> = Default::default();
            for r in &done {
                for p in &r.paths {
                    fate.insert(p, r.removed.contains(p));
                }
            }
            let removed = fate.values().filter(|r| **r).count();
            let mut kept: Vec<&str> = done
                .iter()
                .flat_map(|r| r.kept.iter().map(String::as_str))
                .collect();
            kept.sort_unstable();
            kept.dedup();
            let restored = fate.len() - removed;
            let run = esc(&run);
            let mut line = format!(
                "rolled back `{run}`: restored {restored} file(s) to their contents before it"
            );
            if removed > 0 {
                line.push_str(&format!(" and removed {removed} file(s) it had created"));
            }
            println!("{line}");
            for (p, gone) in fate {
                println!("  {}{}", esc(p), if gone { " (removed)" } else { "" });
            }
            if !kept.is_empty() {
                println!(
                    "kept {} file(s) as they are: they changed after the run wrote them",
                    kept.len()
                );
                for p in kept {
                    println!("  {}", esc(p));
                }
            }
            exit::SUCCESS
        }
        Err(JournalError::Changed { run_id, files }) => {
            eprintln!(
                "error: rollback of `{run_id}` refused: {} file(s) changed after the run wrote them, and restoring would overwrite those changes",
                files.len()
            );
            for f in &files {
                eprintln!("  {} ({})", esc(&f.path), esc(&f.what));
            }
            eprintln!(
                "nothing was restored. Save those changes elsewhere and retry, or pass --keep-changed to restore only the other files, or --force to overwrite them"
            );
            exit::FAILED
        }
        Err(JournalError::RestoreIncomplete {
            run_id,
            restored,
            failed,
        }) => {
            eprintln!(
                "error: rollback of `{run_id}` is incomplete: {} file(s) could not be restored",
                failed.len()
            );
            for f in &failed {
                eprintln!("  {}", f.cause);
            }
            eprintln!(
                "{} other file(s) were restored. The journal keeps the rest: fix the cause and run `nuvira rollback` again to finish",
                restored.len()
            );
            exit::FAILED
        }
        Ok(None) => {
            eprintln!(
                "error: nothing to roll back in `{}`: no `nuvira apply` or `nuvira run` has changed files here, or their changes were already rolled back",
                args.repo.display()
            );
            exit::FAILED
        }
        Err(e) => {
            crate::cli::print_error(&anyhow!(e).context("roll back the last run"));
            exit::FAILED
        }
    }
}
