//! `nuvira report EVENTS [--format text|json|markdown|github|sarif|junit|html] [--output PATH]`.
//!
//! Builds a report from a stored JSONL event file (as written by `nuvira run --events FILE`),
//! streaming it line by line. Inside GitHub Actions (`GITHUB_ACTIONS=true`) the default format
//! is `github` (workflow-command annotations); in that mode the Markdown summary is also
//! appended to `$GITHUB_STEP_SUMMARY` when it is set.

use nuvira_report::{Format, github};
use std::path::PathBuf;

/// Arguments of `nuvira report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The JSONL event file (one event per line, as `nuvira run --events` writes it).
    pub events: PathBuf,
    /// Output format [default: text, or github when GITHUB_ACTIONS=true].
    #[arg(long, value_parser = ["text", "json", "markdown", "github", "sarif", "junit", "html"])]
    pub format: Option<String>,
    /// Write the report to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The repository folder the run worked in: paths are made relative to its checkout
    /// (`GITHUB_WORKSPACE`, else its git top level), as `nuvira run` does.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The code-scanning category written into a SARIF report (`automationDetails.id`).
    #[arg(long, value_name = "CATEGORY")]
    pub sarif_category: Option<String>,
}

/// Runs the command: 0 when the report was produced, 2 when the events file is unreadable
/// or malformed or the output cannot be written.
pub fn execute(args: Args) -> u8 {
    let format = match args.format.as_deref().map(str::parse::<Format>) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            eprintln!("error: failed to {}", crate::cli::esc_lines(&e.to_string()));
            return crate::exit::INVALID;
        }
        None if github::is_actions() => Format::Github,
        None => Format::Text,
    };
    let mut report = match nuvira_report::read_jsonl_file(&args.events) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: failed to {}", crate::cli::esc_lines(&e.to_string()));
            return crate::exit::INVALID;
        }
    };
    if report.events == 0 && report.unknown_event_types.is_empty() {
        eprintln!(
            "error: {} holds no events: pass the file a run wrote with `nuvira run --events FILE`",
            args.events.display()
        );
        return crate::exit::INVALID;
    }
    if !report.unknown_event_types.is_empty() {
        eprintln!(
            "warning: {}: skipped events of types this nuvira does not know ({}); a newer nuvira wrote them: upgrade to see them in the report",
            args.events.display(),
            report.unknown_event_types.join(", ")
        );
    }
    let mut sarif = nuvira_report::sarif::Options::from_env();
    sarif.category.clone_from(&args.sarif_category);
    if let Some(repo) = &args.repo {
        nuvira_report::rebase_paths(&mut report, &nuvira_report::checkout_prefix(repo));
        sarif.source_root = Some(nuvira_report::checkout_root(repo));
    }
    let text = nuvira_report::render_with(&report, format, &sarif);
    match &args.output {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!(
                    "error: failed to write report {}: {e} (check that its folder exists and is writable)",
                    path.display()
                );
                return crate::exit::INVALID;
            }
        }
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let text = crate::cli::actions::report_for_stdout(&text, format);
            if out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                // A closed pipe (`| head`) is not an error of ours.
                return crate::exit::SUCCESS;
            }
        }
    }
    if format == Format::Github
        && let Err(e) = github::write_step_summary(&report)
    {
        eprintln!(
            "warning: failed to {}",
            crate::cli::esc_lines(&e.to_string())
        );
    }
    crate::exit::SUCCESS
}
