//! `nuvira graph PLAN [--format dot|mermaid|json]`.

use clap::ValueEnum;
use std::path::PathBuf;

/// Arguments of `nuvira graph`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("draw a plan as SVG with Graphviz", "nuvira graph plan.yaml | dot -Tsvg > plan.svg"),
    ("the steps in order, for a script", "nuvira graph plan.yaml --format json | jq '.order'"),
]))]
pub struct Args {
    /// The plan file (.yaml, .yml, .json or .toml); `-` reads standard input.
    pub plan: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Dot)]
    pub format: Format,
}

/// Output formats of `nuvira graph`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Graphviz DOT (`nuvira graph plan.yaml | dot -Tsvg > plan.svg`).
    Dot,
    /// A Mermaid flowchart.
    Mermaid,
    /// Steps, edges, outputs and a topological order as JSON.
    Json,
}

/// Runs the command: prints the graph of a valid plan, or the plan's problems (exit 2; with
/// `--format json` also `{"ok": false, "error": {...}}` on stdout).
pub fn execute(args: Args) -> u8 {
    match super::validate::check(&args.plan) {
        Ok(plan) => {
            // Step ids and descriptions come from the plan: made safe for a runner's log.
            let text = match args.format {
                Format::Dot => crate::cli::actions::report_for_stdout(
                    &crate::graph::to_dot(&plan),
                    nuvira_report::Format::Text,
                )
                .into_owned(),
                Format::Mermaid => crate::cli::actions::report_for_stdout(
                    &crate::graph::to_mermaid(&plan),
                    nuvira_report::Format::Text,
                )
                .into_owned(),
                Format::Json => crate::cli::actions::json_stdout(&format!(
                    "{:#}\n",
                    crate::graph::to_json(&plan)
                )),
            };
            print!("{text}");
            crate::exit::SUCCESS
        }
        Err((_, problems)) => {
            super::validate::print_problems(&args.plan, &problems);
            if matches!(args.format, Format::Json) {
                super::print_stdout(&super::json_error(
                    "invalid-plan",
                    &format!(
                        "`{}` is not a valid plan: {} problem(s)",
                        args.plan.display(),
                        problems.len()
                    ),
                    Some(super::problems_json(&args.plan, &problems)),
                ));
            }
            crate::exit::INVALID
        }
    }
}
