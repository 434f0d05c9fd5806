//! `nuvira validate PLAN [--format text|json]`.

use crate::validate::{Problem, ProblemKind};
use clap::ValueEnum;
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `nuvira validate`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("check a plan, every problem with its line", "nuvira validate plan.yaml"),
    ("check a plan piped in, as JSON for a script", "generate-plan | nuvira validate - --format json"),
]))]
pub struct Args {
    /// The plan file (.yaml, .yml, .json or .toml); `-` reads standard input (JSON, TOML or
    /// YAML, told from the text).
    pub plan: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also start the plan's MCP servers (`mcp_servers:`), list their tools and check that
    /// every `mcp` step's tool exists.
    #[arg(long)]
    pub check_mcp: bool,
}

/// Output formats of `nuvira validate`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// `error[KIND]: message` lines on stderr.
    Text,
    /// `{"valid", "steps", "errors": [{"kind", "steps", "message"}]}` on stdout.
    Json,
}

/// Loads and validates a plan file against the built-in modules. On failure returns the
/// number of steps parsed (0 when the file does not parse) and every problem, located.
pub(crate) fn check(path: &std::path::Path) -> Result<crate::ValidatedPlan, (usize, Vec<Problem>)> {
    let loaded = match super::conventions::load_plan(path) {
        Ok(l) => l,
        Err(e) => {
            let problems = e
                .all()
                .map(|e| Problem {
                    kind: ProblemKind::Parse,
                    steps: vec![],
                    message: e.message.clone(),
                    line: e.line,
                    column: e.column,
                    step_index: None,
                })
                .collect();
            return Err((0, problems));
        }
    };
    // The registry `nuvira run` uses: built-ins wrapped by the recover stage, so
    // `config.recover` is checked the same way.
    let registry = crate::agent::registry();
    let mcp = mcp_problems(&loaded.plan, nuvira_mcp::client::check_plan(&loaded.plan));
    let validated = crate::validate::validate(&loaded.plan, Some(&registry));
    let validated = match (validated, mcp.is_empty()) {
        (Ok(v), true) => Ok(v),
        (Ok(_), false) => Err(crate::ValidationErrors { problems: mcp }),
        (Err(mut errs), _) => {
            errs.problems.extend(mcp);
            Err(errs)
        }
    };
    validated.map_err(|errs| {
        let problems = errs
            .problems
            .into_iter()
            .map(|mut p| {
                if p.line.is_none() {
                    p.line = line_of(&loaded, &p);
                }
                p
            })
            .collect();
        (loaded.plan.steps.len(), problems)
    })
}

/// Where a validation problem is in the file. Every lookup is a constant-time read of an
/// index built once per file, so locating n problems is linear in n.
pub(crate) fn line_of(loaded: &nuvira_plan::LoadedPlan, p: &Problem) -> Option<u32> {
    if let Some(i) = p.step_index {
        return loaded.line_of_step_index(i);
    }
    match p.kind {
        ProblemKind::EmptyPlan => Some(loaded.line_of_key("steps").unwrap_or(1)),
        ProblemKind::UnknownOutput => p
            .steps
            .first()
            .and_then(|id| loaded.line_of_output(id))
            .or_else(|| loaded.line_of_key("outputs")),
        ProblemKind::AmbiguousGoal if p.steps.is_empty() => loaded
            .plan
            .outputs
            .is_some()
            .then(|| loaded.line_of_key("outputs"))
            .flatten()
            .or_else(|| loaded.line_of_key("steps")),
        _ => p.steps.first().and_then(|id| loaded.line_of_step(id)),
    }
}

/// The problems of a plan's MCP servers and steps, as validation problems.
pub(crate) fn mcp_problems(
    plan: &nuvira_api::ExecutionPlan,
    found: Vec<nuvira_mcp::client::McpProblem>,
) -> Vec<Problem> {
    found
        .into_iter()
        .map(|(step, message)| Problem {
            kind: ProblemKind::InvalidConfig,
            step_index: step
                .as_ref()
                .and_then(|id| plan.steps.iter().position(|s| &s.id == id)),
            steps: step.into_iter().collect(),
            message,
            line: None,
            column: None,
        })
        .collect()
}

/// `--check-mcp`: starts the servers and checks the steps' tools; the problems, located.
fn check_servers(path: &std::path::Path) -> Vec<Problem> {
    let Ok(loaded) = nuvira_plan::load_file(path) else {
        return Vec::new();
    };
    let found = match super::runtime() {
        Ok(rt) => {
            rt.block_on(nuvira_mcp::client::check_servers(&loaded.plan))
                .1
        }
        Err(e) => vec![(None, format!("failed to start the async runtime: {e}"))],
    };
    mcp_problems(&loaded.plan, found)
        .into_iter()
        .map(|mut p| {
            p.line = line_of(&loaded, &p).or_else(|| loaded.line_of_key("mcp_servers"));
            p
        })
        .collect()
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let mut result = check(&args.plan);
    if args.check_mcp
        && let Ok(plan) = &result
    {
        let problems = check_servers(&args.plan);
        if !problems.is_empty() {
            result = Err((plan.plan.steps.len(), problems));
        }
    }
    match (args.format, result) {
        (Format::Text, Ok(plan)) => {
            let name = if super::conventions::is_stdio(&args.plan) {
                super::conventions::STDIN_NAME.to_owned()
            } else {
                args.plan.display().to_string()
            };
            println!("{name}: valid, {} step(s)", plan.plan.steps.len());
            crate::exit::SUCCESS
        }
        (Format::Text, Err((_, problems))) => {
            print_problems(&args.plan, &problems);
            crate::exit::INVALID
        }
        (Format::Json, Ok(plan)) => {
            println!(
                "{}",
                crate::cli::actions::json_stdout(
                    &json!({ "valid": true, "steps": plan.plan.steps.len(), "errors": [] })
                        .to_string()
                )
            );
            crate::exit::SUCCESS
        }
        (Format::Json, Err((steps, problems))) => {
            let file = args.plan.display().to_string();
            let errors: Vec<_> = problems
                .iter()
                .map(|p| {
                    let mut v = json!({ "kind": p.kind, "steps": p.steps, "message": p.message, "file": file });
                    if let Some(l) = p.line {
                        v["line"] = json!(l);
                    }
                    if let Some(c) = p.column {
                        v["column"] = json!(c);
                    }
                    v
                })
                .collect();
            println!(
                "{}",
                crate::cli::actions::json_stdout(
                    &json!({ "valid": false, "steps": steps, "errors": errors }).to_string()
                )
            );
            crate::exit::INVALID
        }
    }
}

/// One `error[KIND]: FILE:LINE[:COL]: message` line per problem on stderr.
pub(crate) fn print_problems(file: &std::path::Path, problems: &[Problem]) {
    for p in problems {
        let mut location = if super::conventions::is_stdio(file) {
            super::conventions::STDIN_NAME.to_owned()
        } else {
            file.display().to_string()
        };
        if let Some(l) = p.line {
            location.push_str(&format!(":{l}"));
            if let Some(c) = p.column {
                location.push_str(&format!(":{c}"));
            }
        }
        eprintln!(
            "error[{}]: {}: {}",
            p.kind,
            crate::cli::esc(&location),
            crate::cli::esc_lines(&p.message)
        );
    }
}
