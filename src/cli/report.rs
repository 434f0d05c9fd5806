//! `nuvira report EVENTS [--format text|json|markdown|github|sarif|junit|html] [-o [FORMAT=]PATH]...`.
//!
//! Builds a report from a stored JSONL event file (as written by `nuvira run --events FILE`),
//! streaming it line by line. Inside GitHub Actions (`GITHUB_ACTIONS=true`) the default format
//! is `github` (workflow-command annotations); in that mode the Markdown summary is also
//! appended to `$GITHUB_STEP_SUMMARY` when it is set.

use nuvira_report::{Format, github};
use std::path::PathBuf;

/// Arguments of `nuvira report`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("the report of a stored run, as HTML (the format from the extension)", "nuvira report events.jsonl -o report.html"),
    ("SARIF for code scanning and JUnit for the test tab, from one read", "nuvira report events.jsonl -o sarif=nuvira.sarif -o results.xml"),
]))]
pub struct Args {
    /// The JSONL event file (one event per line, as `nuvira run --events` writes it); `-`
    /// reads standard input.
    pub events: PathBuf,
    /// Output format [default: from the output file's extension, else text, or github when
    /// GITHUB_ACTIONS=true]. Given, it wins over the extension.
    #[arg(long, value_parser = ["text", "json", "markdown", "github", "sarif", "junit", "html"])]
    pub format: Option<String>,
    /// Write the report to this file instead of standard output (`-`: standard output). The
    /// format comes from --format, else from the extension (.md, .html, .json, .sarif, .xml for
    /// JUnit, .txt); `FORMAT=PATH` names it. Repeatable.
    #[arg(
        long,
        short,
        visible_alias = "report",
        value_name = "[FORMAT=]PATH",
        value_parser = super::conventions::parse_target
    )]
    pub output: Vec<(Option<Format>, PathBuf)>,
    /// The repository folder the run worked in: paths are made relative to its checkout
    /// (`GITHUB_WORKSPACE`, else its git top level), as `nuvira run` does.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The code-scanning category written into a SARIF report (`automationDetails.id`).
    #[arg(long, value_name = "CATEGORY")]
    pub sarif_category: Option<String>,
}

/// Runs the command: 0 when the report was produced, 2 when the events file is unreadable
/// or malformed, an output's format cannot be told, or an output cannot be written.
pub fn execute(args: Args) -> u8 {
    let explicit = match args.format.as_deref().map(str::parse::<Format>) {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("error: failed to {}", crate::cli::esc_lines(&e.to_string()));
            return crate::exit::INVALID;
        }
        None => None,
    };
    let fallback = match explicit {
        Some(f) => f,
        None if github::is_actions() => Format::Github,
        None => Format::Text,
    };
    // Every output's format, known before the events are read.
    let mut targets = Vec::new();
    for (named, path) in &args.output {
        let format = match named.or(explicit) {
            Some(f) => f,
            None if super::conventions::is_stdio(path) => fallback,
            None => match super::conventions::format_from_extension(path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("error: {}", super::esc(&e));
                    return crate::exit::INVALID;
                }
            },
        };
        targets.push((format, path.clone()));
    }
    if targets.is_empty() {
        targets.push((fallback, PathBuf::from("-")));
    }
    let mut report = match super::conventions::read_events(&args.events) {
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
    for (format, path) in &targets {
        let text = nuvira_report::render_with(&report, *format, &sarif);
        if super::conventions::is_stdio(path) {
            super::print_stdout(&crate::cli::actions::report_for_stdout(&text, *format));
        } else if let Err(e) = super::conventions::write_output(path, &text) {
            eprintln!(
                "error: failed to write report {}: {} (check that its folder exists and is writable)",
                path.display(),
                super::io_reason(&e)
            );
            return crate::exit::INVALID;
        }
    }
    if targets.iter().any(|(f, _)| *f == Format::Github)
        && let Err(e) = github::write_step_summary(&report)
    {
        eprintln!(
            "warning: failed to {}",
            crate::cli::esc_lines(&e.to_string())
        );
    }
    crate::exit::SUCCESS
}
