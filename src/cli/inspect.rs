//! `nuvira inspect`: find the files of a repository that matter for a goal.
//!
//! Exit codes: 0 when the inspection ran (even if nothing matched), 2 for a bad repository
//! path or bad arguments.

use crate::exit;
use nuvira_api::InspectionResult;
use nuvira_inspect::{Hooks, InspectOptions, inspect};
use std::path::PathBuf;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Ranked files with scores and top symbols, then stats.
    Text,
    /// The `InspectionResult` as JSON.
    Json,
}

/// Arguments of `nuvira inspect`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("the files that matter for a goal", "nuvira inspect --repo . --goal \"fix the date parser\""),
    ("the top 5 as JSON, for a script", "nuvira inspect --goal parser --max-files 5 --format json"),
]))]
pub struct Args {
    /// The repository to inspect.
    #[arg(long, value_name = "DIR", default_value = ".")]
    repo: PathBuf,
    /// What the work is about; its identifiers and words are matched against the files.
    #[arg(long, value_name = "TEXT")]
    goal: String,
    /// How many of the most relevant files to describe.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    max_files: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Symbols shown per file in text output.
const TOP_SYMBOLS: usize = 5;

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    if args.goal.trim().is_empty() {
        eprintln!("error: failed to inspect: `--goal` is empty; say what the work is about");
        return exit::INVALID;
    }
    if let Err(e) = super::check_repo(&args.repo) {
        eprintln!("error: {}", crate::cli::esc_lines(&e.to_string()));
        return exit::INVALID;
    }
    let options = InspectOptions::default()
        .with_max_files(usize::try_from(args.max_files).unwrap_or(usize::MAX));
    let result = match inspect(&args.repo, &args.goal, &options, &Hooks::none()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: failed to {}", crate::cli::esc_lines(&e.to_string()));
            return exit::INVALID;
        }
    };
    let text = match args.format {
        Format::Json => match serde_json::to_string_pretty(&result) {
            Ok(t) => super::conventions::with_schema_version(&t) + "\n",
            Err(e) => {
                eprintln!(
                    "error: failed to write the result as JSON: {}",
                    crate::cli::esc_lines(&e.to_string())
                );
                return exit::FAILED;
            }
        },
        Format::Text => render_text(&result, &args.goal),
    };
    // Untrusted text (file names, symbols, snippets) for a runner's log in Actions mode.
    let text = match args.format {
        Format::Json => crate::cli::actions::json_for_stdout(&text).into_owned(),
        Format::Text => {
            crate::cli::actions::report_for_stdout(&text, nuvira_report::Format::Text).into_owned()
        }
    };
    // A closed pipe (`| head`) is not an error worth reporting; a full disk is (exit 3).
    super::print_stdout(&text);
    exit::SUCCESS
}

/// Symbols the goal names first (identifiers, then words, then partial matches), then the
/// rest in source order.
fn top_symbols<'a>(symbols: &'a [nuvira_api::Symbol], goal: &str) -> Vec<&'a nuvira_api::Symbol> {
    let keywords = nuvira_inspect::keywords::keywords(goal, &[]);
    let rank = |s: &nuvira_api::Symbol| {
        let name = s.name.to_lowercase();
        let last = name.rsplit("::").next().unwrap_or(&name).to_owned();
        let exact = keywords
            .iter()
            .filter(|k| k.text == last || k.text == name)
            .map(|k| k.weight)
            .fold(0.0, f64::max);
        if exact >= nuvira_inspect::keywords::IDENT_WEIGHT {
            0
        } else if exact > 0.0 {
            1
        } else if keywords.iter().any(|k| name.contains(k.text.as_str())) {
            2
        } else {
            3
        }
    };
    let mut sorted: Vec<&nuvira_api::Symbol> = symbols.iter().collect();
    sorted.sort_by_key(|s| rank(s));
    sorted.truncate(TOP_SYMBOLS);
    sorted
}

use crate::cli::esc;

fn render_text(r: &InspectionResult, goal: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if r.artifacts.is_empty() {
        out.push_str("no relevant files found for the goal\n");
    } else {
        let _ = writeln!(out, "relevant files (most relevant first):");
        let width = r
            .artifacts
            .iter()
            .map(|a| esc(&a.path).len())
            .max()
            .unwrap_or(0);
        for (i, a) in r.artifacts.iter().enumerate() {
            let _ = writeln!(
                out,
                "{:>3}. {:<width$}  score {:>6.2}",
                i + 1,
                esc(&a.path),
                a.score
            );
            if !a.symbols.is_empty() {
                let shown: Vec<String> = top_symbols(&a.symbols, goal)
                    .into_iter()
                    .map(|s| format!("{} {} (line {})", s.kind, esc(&s.name), s.line))
                    .collect();
                let more = a.symbols.len().saturating_sub(TOP_SYMBOLS);
                let _ = write!(out, "       symbols: {}", shown.join(", "));
                if more > 0 {
                    let _ = write!(out, ", +{more} more");
                }
                out.push('\n');
            }
            if !a.test_files.is_empty() {
                let _ = writeln!(out, "       tests: {}", esc(&a.test_files.join(", ")));
            }
        }
    }
    let s = &r.stats;
    let _ = writeln!(
        out,
        "\n{} files walked, {} inspected, {} unreadable; ranked by keywords{}",
        s.total_files,
        s.inspected_files,
        s.errors,
        if s.llm_fallback_used {
            " (no model used)"
        } else {
            ""
        }
    );
    out
}
