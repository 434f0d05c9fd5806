//! `nuvira resume RUN [--repo DIR] [--rerun-tests] [...]`: `nuvira run --resume RUN`. The run
//! goes on under its own id, from its recorded plan: a step that succeeded and whose input
//! fingerprint (definition, dependencies' outputs, files it read or wrote) is unchanged is not
//! run again — its recorded output and events are reused, so its model is not called and its
//! edits are not applied twice; a step that wrote files but did not finish has its batch undone
//! (the journal knows it) and runs again; test steps with unchanged inputs are not rerun unless
//! `--rerun-tests`. A file a finished step wrote that was changed since (by you, an editor, a
//! formatter) makes resume refuse before anything runs (exit 3, naming the file and the step),
//! unless `--accept-changes`: then the file is kept, the steps that wrote it are not run again
//! and the steps that read it are. Exit codes as `nuvira run`.

use std::path::PathBuf;

/// Arguments of `nuvira resume`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("finish a run that was interrupted (what finished is not repeated)", "nuvira resume run-1764580000-0a1f"),
    ("keep a file you changed after a finished step wrote it (else resume refuses, exit 3)", "nuvira resume run-1764580000-0a1f --accept-changes"),
]))]
pub struct Args {
    /// The run to resume (`nuvira runs` lists them).
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The repository.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Rerun test and execute steps even when their inputs are unchanged.
    #[arg(long)]
    pub rerun_tests: bool,
    /// Keep the files you changed since the run's finished steps wrote them: without it,
    /// resume refuses (exit 3) naming each file and step. With it, the steps that wrote them
    /// are not run again (no edit is applied twice) and the steps that read them are.
    #[arg(long)]
    pub accept_changes: bool,
    /// The model (`provider:model`); default from NUVIRA_MODEL.
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// The report printed on stdout.
    #[arg(long, value_enum)]
    pub format: Option<super::run::FormatArg>,
    /// Stop once the model calls used more than N tokens.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Stop once the model calls cost more than USD.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Where test and execute steps run.
    #[arg(long, value_enum)]
    pub sandbox: Option<super::run::SandboxArg>,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// When another nuvira process is changing the repository, wait for it.
    #[arg(long)]
    pub wait: bool,
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let mut run = super::run::Args::defaults(args.repo);
    run.resume = Some(args.run);
    run.rerun_tests = args.rerun_tests;
    run.accept_changes = args.accept_changes;
    run.model = args.model;
    run.format = args.format;
    run.max_tokens = args.max_tokens;
    run.max_cost = args.max_cost;
    run.sandbox = args.sandbox;
    run.quiet = args.quiet;
    run.wait = args.wait;
    super::run::execute(run)
}
