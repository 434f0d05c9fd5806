//! `nuvira rollback`: restores the files changed by the last apply or run.

use crate::exit;
use anyhow::anyhow;
use nuvira_edit::nuvira_workspace::{Journal, Workspace};
use std::path::PathBuf;

/// Arguments of `nuvira rollback`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The repository (workspace root) whose last change to undo.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
}

/// Runs the command: first a batch a crash left half-written (that is the last apply), else
/// every batch of the newest run that is not rolled back yet.
pub fn execute(args: Args) -> u8 {
    let ws = match Workspace::open(&args.repo) {
        Ok(ws) => ws,
        Err(e) => {
            crate::cli::print_error(&anyhow!(e).context("open the repository"));
            return exit::INVALID;
        }
    };
    match super::apply::recover(&ws) {
        Ok(0) => {}
        Ok(_) => return exit::SUCCESS,
        Err(code) => return code,
    }
    match Journal::new(&ws).rollback_last() {
        Ok(Some((run, done))) => {
            let mut paths: Vec<&str> = done
                .iter()
                .flat_map(|r| r.paths.iter().map(String::as_str))
                .collect();
            paths.sort_unstable();
            paths.dedup();
            println!(
                "rolled back `{run}`: restored {} file(s) to their contents before it",
                paths.len()
            );
            for p in paths {
                println!("  {p}");
            }
            exit::SUCCESS
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
