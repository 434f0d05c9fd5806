//! `nuvira run PLAN | --goal TEXT [--repo DIR] [--planner template] [--model ..]
//! [--sandbox auto|local|bwrap|docker] [--image IMAGE] [--allow-host-exec] [--allow-mount]
//! [--max-parallel N] [--dry-run] [--events FILE] [--allow-dirty] [--branch NAME [--base REF]]
//! [--commit [--sign] [--author "Name <email>"]]
//! [--format text|json|markdown|github] [--report FORMAT=PATH]... [--scratch] [--wait]
//! [--resume RUN [--rerun-tests]] [--max-tokens N] [--max-cost USD] [--no-history]
//! [--keep-runs N] [--keep-days D] [--no-cache]`.
//!
//! Every run is recorded in `.nuvira/runs/<run-id>/` (see [`super::history`] and
//! docs/runs.md); `--max-tokens` / `--max-cost` stop it with exit 1 when its model calls use
//! more.
//!
//! The whole pipeline: load (or plan) and validate, run every step on the scheduler with the
//! built-in modules, follow progress on stderr, print the report on stdout, write report files.
//! Ctrl-C, SIGTERM and SIGHUP cancel: running steps are stopped and the run's edits are rolled
//! back (see [`super::signal`]).
//!
//! `--goal` plans with the template planner, or with `--planner llm` asks the configured model
//! for the plan. The model comes from `--model` / `NUVIRA_MODEL`; `NUVIRA_SCRIPTED_LLM=FILE`
//! replays a recorded transcript instead (offline demos and tests).
//!
//! A model's plan runs in the run's sandbox (`--sandbox`, default: Docker when an engine answers,
//! else local; stderr says which), with no network and no host mounts: [`crate::model_plan`]
//! narrows it, and stderr shows one line per step it narrowed. `--allow-host-exec` and
//! `--allow-mount` keep what the model asked for. Plan files are run as written.
//!
//! Exit codes: 0 success, 1 the pipeline failed, 2 invalid plan or arguments, 3 the
//! environment lacks something (Docker engine, model key), 130 cancelled (Ctrl-C), 143
//! SIGTERM, 129 SIGHUP.

use crate::exit;
use clap::ValueEnum;
use nuvira_api::{EventKind, EventSink, ExecutionPlan, PlanRequest, Planner, RunStatus};
use nuvira_edit::nuvira_workspace::{Journal, OnChanged, Workspace};
use nuvira_report::{Format, ReportBuilder, github};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `nuvira run`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("run a plan, an HTML report and the events kept", "nuvira run plan.yaml --repo . -o report.html --events run.jsonl"),
    ("preview a goal's work on a scratch copy", "nuvira run --goal \"fix the failing test\" --scratch --dry-run"),
]))]
pub struct Args {
    /// The plan file (.yaml, .yml, .json or .toml; `-` reads standard input). Give this or
    /// --goal.
    #[arg(required_unless_present_any = ["goal", "resume"], conflicts_with_all = ["goal", "resume"])]
    pub plan: Option<PathBuf>,
    /// Plan the run from a goal in words instead of a file.
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    pub goal: Option<String>,
    /// The repository to work on.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// How a --goal becomes a plan.
    #[arg(long, value_enum, default_value_t = PlannerArg::Template)]
    pub planner: PlannerArg,
    /// The model (`provider:model`, e.g. `openai:gpt-4.1`); default from NUVIRA_MODEL.
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// Where test and execute steps run; overrides the plan's `sandbox` settings.
    #[arg(long, value_enum)]
    pub sandbox: Option<SandboxArg>,
    /// The Docker image for test and execute steps; overrides the plan's `image` settings.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Let a model's plan (--planner llm) run commands on this machine (`sandbox: local`), with
    /// the network it asks for, and format files with the project's formatters.
    #[arg(long)]
    pub allow_host_exec: bool,
    /// Let a model's plan (--planner llm) keep its host mounts and `include_ignored`.
    #[arg(long)]
    pub allow_mount: bool,
    /// At most this many steps at once: a number, `cpus` (the default: one per CPU) or
    /// `unbounded` (every ready step at once; for steps that mostly wait).
    #[arg(long, value_name = "N|cpus|unbounded")]
    pub max_parallel: Option<crate::MaxParallel>,
    /// Preview: edits are shown, not written; tests and commands are not run.
    #[arg(long)]
    pub dry_run: bool,
    /// Write every event of the run to this JSONL file (`nuvira report FILE` rebuilds the
    /// report). `-` writes them to standard output, in place of the report.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// The report printed on stdout [default: text, or github when GITHUB_ACTIONS=true].
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Also write the report to PATH, in the format its extension names (.md, .html, .json,
    /// .sarif, .xml for JUnit, .txt) or in FORMAT for `FORMAT=PATH` (formats: text, json,
    /// markdown, github, sarif, junit, html). `-` is standard output, in place of the report
    /// printed there. Repeatable.
    #[arg(
        long = "output",
        short = 'o',
        visible_alias = "report",
        value_name = "[FORMAT=]PATH",
        value_parser = parse_report_target
    )]
    pub reports: Vec<(Option<Format>, PathBuf)>,
    /// The code-scanning category written into the SARIF report (`automationDetails.id`);
    /// left out by default, so the upload's own `category:` decides.
    #[arg(long, value_name = "CATEGORY")]
    pub sarif_category: Option<String>,
    /// Work on a temporary copy of the repository (printed), leaving the original untouched.
    #[arg(long)]
    pub scratch: bool,
    /// Timeout for steps whose plan sets none (e.g. 10m, 1h30m, 90s).
    #[arg(
        long = "timeout",
        visible_alias = "step-timeout",
        value_name = "DURATION",
        value_parser = parse_duration
    )]
    pub step_timeout: Option<std::time::Duration>,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// When another nuvira process is changing the repository, wait for it instead of
    /// failing (exit 3).
    #[arg(long)]
    pub wait: bool,
    /// Git: --allow-dirty, --branch, --base, --commit, --sign, --author.
    #[command(flatten)]
    pub git: super::git_run::GitArgs,
    /// Resume run RUN of the history (`nuvira resume RUN`): only steps that did not succeed, or
    /// whose inputs changed, run again.
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    /// With --resume: rerun test and execute steps even when their inputs are unchanged.
    #[arg(long, requires = "resume")]
    pub rerun_tests: bool,
    /// With --resume: keep the files you changed since the run's finished steps wrote them
    /// (else resume refuses, exit 3); the steps that read them run again.
    #[arg(long, requires = "resume")]
    pub accept_changes: bool,
    /// Stop the run (exit 1) once its model calls used more than N tokens (input + output).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Stop the run (exit 1) once its model calls cost more than USD (prices from
    /// `~/.config/nuvira/config.toml`, raised by the repository's `.nuvira/config.toml`; calls
    /// to models without a price count 0).
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Keep no run folder in `.nuvira/runs` for this run (also NUVIRA_HISTORY=0).
    #[arg(long)]
    pub no_history: bool,
    /// Run every test and execute step cold: without the project's warm build caches and its
    /// persistent workspace copy (as `cache: false` on each; see docs/sandbox.md).
    #[arg(long)]
    pub no_cache: bool,
    /// Keep at most N runs in the history (default 100, or `[runs] keep` in the config).
    #[arg(long, value_name = "N")]
    pub keep_runs: Option<usize>,
    /// Remove runs older than D days from the history (default 30, or `[runs] keep_days`).
    #[arg(long, value_name = "D")]
    pub keep_days: Option<u64>,
    /// MCP servers a model's plan (--planner llm) may call: a YAML or JSON file with an
    /// `mcp_servers:` map; the model is shown their tools (see docs/mcp.md).
    #[arg(long, value_name = "FILE")]
    pub mcp_servers: Option<PathBuf>,
    /// How the run's steps and model calls come from a record (resume, replay); not a flag.
    #[arg(skip)]
    pub replay: Option<Replay>,
}

impl Args {
    /// The arguments of a run of `repo` with every default (for `resume` and `replay`).
    pub(crate) fn defaults(repo: PathBuf) -> Self {
        Self {
            plan: None,
            goal: None,
            repo,
            planner: PlannerArg::Template,
            model: None,
            sandbox: None,
            image: None,
            allow_host_exec: false,
            allow_mount: false,
            max_parallel: None,
            dry_run: false,
            events: None,
            format: None,
            reports: Vec::new(),
            scratch: false,
            step_timeout: None,
            quiet: false,
            wait: false,
            resume: None,
            rerun_tests: false,
            accept_changes: false,
            max_tokens: None,
            max_cost: None,
            no_history: false,
            no_cache: false,
            keep_runs: None,
            keep_days: None,
            replay: None,
            // A resumed or replayed run goes on from the tree the recorded run left, which
            // that run's own edits made dirty.
            git: super::git_run::GitArgs {
                allow_dirty: true,
                ..Default::default()
            },
            sarif_category: None,
            mcp_servers: None,
        }
    }
}

/// `nuvira replay`: re-execute run `of` with its recorded model answers.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The recorded run's folder.
    pub from: crate::runs::StoredRun,
    /// Record a divergence and go on with the recorded answer.
    pub continue_on_divergence: bool,
}

/// Planners for `--goal`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlannerArg {
    /// inspect → edit (from the goal, by the model) → test → verify → report.
    Template,
    /// Ask the model for a plan.
    Llm,
}

/// Sandboxes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SandboxArg {
    /// Docker when an engine answers and the image exists, else bwrap when it works here, else
    /// local.
    Auto,
    /// A temporary local copy.
    Local,
    /// A Docker container.
    Docker,
    /// A temporary local copy, the command inside bubblewrap.
    Bwrap,
}

/// Formats of the report on stdout.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// For people.
    Text,
    /// The ExecutionReport as JSON.
    Json,
    /// GitHub-flavoured Markdown.
    Markdown,
    /// GitHub Actions annotations (and the job summary when GITHUB_STEP_SUMMARY is set).
    Github,
}

/// `[FORMAT=]PATH`: the format named, else the one the extension names; `-` alone (standard
/// output) keeps `None`, the format of the report on stdout (--format).
fn parse_report_target(s: &str) -> Result<(Option<Format>, PathBuf), String> {
    let (format, path) = super::conventions::parse_target(s)?;
    let format = match format {
        Some(f) => Some(f),
        None if super::conventions::is_stdio(&path) => None,
        None => Some(super::conventions::format_from_extension(&path)?),
    };
    Ok((format, path))
}

fn parse_duration(s: &str) -> Result<std::time::Duration, nuvira_api::duration::DurationError> {
    nuvira_api::duration::parse(s)
}

pub(crate) fn new_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "run-{}-{:04x}",
        now.as_secs(),
        (now.subsec_nanos() ^ std::process::id()) & 0xffff
    )
}

/// Why a run stopped before it started: the exit code, a kind for `--format json`
/// (see [`super::json_error`]), the message, and the validation problems of an invalid plan
/// (already printed on stderr, one line each).
pub(crate) struct Fail {
    pub(crate) code: u8,
    kind: &'static str,
    pub(crate) message: String,
    problems: Option<Value>,
}

impl Fail {
    fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            kind,
            message: message.into(),
            problems: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(exit::INVALID, "invalid-input", message)
    }

    pub(crate) fn environment(message: impl Into<String>) -> Self {
        Self::new(exit::ENVIRONMENT, "environment", message)
    }
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let json = matches!(args.format, Some(FormatArg::Json));
    let outcome = match crate::cli::runtime() {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => Err(Fail::environment(format!(
            "failed to start the async runtime: {e}"
        ))),
    };
    match outcome {
        Ok(code) => code,
        Err(fail) => {
            match &fail.problems {
                Some(_) => {} // printed with their locations
                None => eprintln!("error: {}", crate::cli::esc_lines(&fail.message)),
            }
            if json {
                print_stdout(&crate::cli::actions::json_for_stdout(&super::json_error(
                    fail.kind,
                    &fail.message,
                    fail.problems,
                )));
            }
            fail.code
        }
    }
}

/// Checks a `--report` target before anything runs: it must not be a folder, and the nearest
/// existing ancestor must be a folder (missing parent folders are created when the report is
/// written).
fn check_report_target(format: Format, path: &Path) -> Result<(), Fail> {
    let bad = |why: String| {
        Fail::invalid(format!(
            "cannot write the {format} report to `{}`: {why}",
            path.display()
        ))
    };
    if path.is_dir() {
        return Err(bad(
            "it is a folder; give a file path, e.g. `--report html=out/report.html`".into(),
        ));
    }
    let mut ancestor = path.parent();
    while let Some(dir) = ancestor.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(bad(format!(
                    "`{}` is a file, so no folder can be created there; choose another path",
                    dir.display()
                )));
            }
            Err(_) => ancestor = dir.parent(),
        }
    }
    Ok(())
}

/// The `test` and `execute` steps that will use Docker (`sandbox: docker`, from the plan or
/// `--sandbox`), by image. `auto` falls back to the local sandbox, so it needs no engine.
fn docker_steps(plan: &ExecutionPlan) -> Vec<(Option<String>, Vec<String>)> {
    let mut by_image: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for step in &plan.steps {
        if !matches!(step.module.as_str(), "test" | "execute") {
            continue;
        }
        let Ok(config) = nuvira_runner::TestConfig::from_value(&step.config) else {
            continue; // validation reported it
        };
        if config.sandbox.sandbox != nuvira_sandbox::SandboxKind::Docker {
            continue;
        }
        let image = config.sandbox.image.clone();
        match by_image.iter_mut().find(|(i, _)| *i == image) {
            Some((_, ids)) => ids.push(step.id.clone()),
            None => by_image.push((image, vec![step.id.clone()])),
        }
    }
    by_image
}

/// Asks the Docker engine (and for the image) before any step runs, so a run that needs Docker
/// and has none changes nothing.
async fn check_docker(plan: &ExecutionPlan) -> Result<(), Fail> {
    for (image, steps) in docker_steps(plan) {
        match nuvira_sandbox::select(nuvira_sandbox::SandboxKind::Docker, image.as_deref()).await {
            Ok(_) => {}
            Err(nuvira_api::SandboxError::Unavailable(msg)) => {
                let ids: Vec<String> = steps.iter().map(|s| format!("`{s}`")).collect();
                return Err(Fail::environment(format!(
                    "{msg}; step(s) {} need it (sandbox: docker), so nothing was run (pass --sandbox local or auto to run without Docker)",
                    ids.join(", ")
                )));
            }
            Err(_) => {} // the step reports anything else when it runs
        }
    }
    Ok(())
}

/// The edit steps that need a model (`instructions` without `edits`).
fn steps_needing_a_model(plan: &ExecutionPlan) -> Vec<String> {
    plan.steps
        .iter()
        .filter(|s| s.module == "edit")
        .filter(|s| s.config.get("instructions").is_some() && s.config.get("edits").is_none())
        .map(|s| s.id.clone())
        .collect()
}

async fn run(args: Args) -> Result<u8, Fail> {
    // A resumed run: the stored run, and its plan instead of planning again.
    let resumed = match &args.resume {
        Some(id) => Some(
            crate::runs::RunStore::open(&args.repo)
                .and_then(|s| s.get(id))
                .map_err(|e| Fail::invalid(format!("cannot resume: {e}")))?,
        ),
        None => None,
    };
    // Its folder's lock before anything else: a run still going on in another process is
    // refused (exit 3) before this one touches any of its files.
    let resume_lock = match &resumed {
        Some(run) => Some(super::history::lock_resumed(run)?),
        None => None,
    };
    let recorded_from = resumed
        .clone()
        .or(args.replay.as_ref().map(|r| r.from.clone()));
    // The repository, and the report targets.
    super::check_repo(&args.repo)
        .map_err(|e| Fail::new(exit::INVALID, "repository", e.to_string()))?;
    for (format, path) in &args.reports {
        if let Some(format) = format
            && !super::conventions::is_stdio(path)
        {
            check_report_target(*format, path)?;
        }
    }
    let repo = if args.scratch {
        match crate::scratch::copy_to_temp(&args.repo) {
            Ok(dir) => {
                eprintln!(
                    "working on a scratch copy of {}: {}",
                    args.repo.display(),
                    dir.display()
                );
                dir
            }
            Err(e) => {
                return Err(Fail::environment(format!(
                    "failed to make a scratch copy: {e}"
                )));
            }
        }
    } else {
        args.repo.clone()
    };

    // The model, when one is configured (a replay has none: recorded answers only).
    let llm = match &args.replay {
        Some(r) => Some(super::replay::offline_model(&r.from)),
        None => model_client(args.model.as_deref())?,
    };

    // The plan.
    // Planning happens before the run's event bus exists; its events are held and replayed
    // onto the bus, with their own times, before the run starts.
    let held = Arc::new(HeldEvents::default());
    let settings = crate::RunSettings {
        dry_run: args.dry_run,
        ..Default::default()
    };
    // The planner's model calls are recorded too, under no step (before the run folder
    // exists, they are kept and written into it once it does).
    // The configuration (the user's file and the repository's), read once for the command.
    let config = super::history::load_config(&repo);
    let planner_log = super::history::planner_log(&config, &args, held.clone(), &settings);
    let (mut plan, loaded) = match (&args.plan, &args.goal) {
        _ if recorded_from.is_some() => {
            let from = recorded_from.as_ref().map(crate::runs::StoredRun::plan);
            match from {
                Some(Ok(p)) => (p, None),
                Some(Err(e)) => {
                    return Err(Fail::invalid(format!("cannot use the recorded run: {e}")));
                }
                None => return Err(Fail::invalid("no recorded run")),
            }
        }
        (Some(path), _) => match super::conventions::load_plan(path) {
            Ok(l) => (l.plan.clone(), Some(l)),
            Err(e) => {
                eprintln!("error[parse]: {}", crate::cli::esc_lines(&e.to_string()));
                let problems: Vec<_> = e
                    .all()
                    .map(|e| crate::validate::Problem {
                        kind: crate::validate::ProblemKind::Parse,
                        steps: vec![],
                        message: e.message.clone(),
                        line: e.line,
                        column: e.column,
                        step_index: None,
                    })
                    .collect();
                let mut fail = Fail::new(exit::INVALID, "invalid-plan", e.to_string());
                fail.problems = Some(super::problems_json(path, &problems));
                return Err(fail);
            }
        },
        (None, Some(goal)) => (
            plan_from_goal(
                goal,
                args.planner,
                llm.as_ref().map(|l| planner_log.client(l.clone(), None, 1)),
                held.clone(),
                args.mcp_servers.as_deref(),
            )
            .await?,
            None,
        ),
        (None, None) => return Err(Fail::invalid("give a plan file or --goal TEXT")),
    };
    apply_overrides(&mut plan, &args);
    // Inspect ranks the branch's changed files higher and skips generated ones.
    super::git_run::hint_inspect(&mut plan, &repo, args.git.base.as_deref());
    if args.plan.is_none() && recorded_from.is_none() && matches!(args.planner, PlannerArg::Llm) {
        plan = narrow_model_plan(plan, &args).await;
    }

    // The engine and validation.
    let mut builder = crate::defaults::engine().workspace(&repo);
    if let Some(p) = args.max_parallel {
        builder = builder.parallelism(p);
    }
    if let Some(t) = args.step_timeout {
        builder = builder.default_timeout(t);
    }
    if let Some(llm) = &llm {
        builder = builder.llm(llm.clone());
    }
    // The recover stage (repair strategies, budget, debugger loop) and model-written edits.
    let stage = crate::agent::recover_stage();
    builder = crate::agent::configure(builder, llm.as_ref(), Some(stage.clone()));
    // Lint commands run in the run's sandbox (else verify's own local copy).
    if let Some(sandbox) = lint_sandbox(&plan, &args).await? {
        let verify = nuvira_verify::VerifyModule::default().with_sandbox(sandbox);
        builder = builder.replace_module(stage.wrap(Arc::new(verify)));
    }
    // Formatters of `format: true` edit steps run in the run's sandbox too (else a local copy).
    if let Some(sandbox) = format_sandbox(&plan, &args).await? {
        let edit = crate::agent::edit_module(llm.as_ref()).with_sandbox(sandbox);
        builder = builder.replace_module(stage.wrap(Arc::new(edit)));
    }
    let engine = builder.build();
    // `mcp` steps name declared servers on allowed hosts (as `nuvira validate` checks),
    // before any server starts.
    let mcp = super::validate::mcp_problems(&plan, nuvira_mcp::client::check_plan(&plan));
    let validated = match (engine.validate(&plan), mcp.is_empty()) {
        (Ok(v), true) => Ok(v),
        (Ok(_), false) => Err(crate::ValidationErrors { problems: mcp }),
        (Err(mut errs), _) => {
            errs.problems.extend(mcp);
            Err(errs)
        }
    };
    let validated = match validated {
        Ok(v) => Arc::new(v),
        Err(errs) => {
            let name = args
                .plan
                .clone()
                .unwrap_or_else(|| PathBuf::from("<planned from --goal>"));
            let problems: Vec<_> = errs
                .problems
                .into_iter()
                .map(|mut p| {
                    if let (None, Some(l)) = (p.line, &loaded) {
                        p.line = super::validate::line_of(l, &p);
                    }
                    p
                })
                .collect();
            super::validate::print_problems(&name, &problems);
            let mut fail = Fail::new(
                exit::INVALID,
                "invalid-plan",
                format!(
                    "`{}` is not a valid plan: {} problem(s)",
                    name.display(),
                    problems.len()
                ),
            );
            fail.problems = Some(super::problems_json(&name, &problems));
            return Err(fail);
        }
    };

    // What the run needs from the environment, before anything runs.
    if llm.is_none() {
        let needing = steps_needing_a_model(&plan);
        if !needing.is_empty() {
            let ids: Vec<String> = needing.iter().map(|s| format!("`{s}`")).collect();
            return Err(Fail::environment(format!(
                "no model is configured, and edit step(s) {} have the model write their edits (`instructions`): set NUVIRA_MODEL=provider:model (e.g. openai:gpt-4.1) and the key in NUVIRA_LLM_API_KEY, or pass --model; or give the steps `edits`",
                ids.join(", ")
            )));
        }
    }
    if !args.dry_run {
        check_docker(&plan).await?;
    }

    // Finish any transaction a crashed earlier run left half-done.
    let ws = match Workspace::open(&repo) {
        Ok(ws) => Some(ws),
        Err(e) => {
            eprintln!(
                "warning: failed to open the workspace journal: {}",
                crate::cli::esc_lines(&e.to_string())
            );
            None
        }
    };
    // One writer per repository: a run holds the lock from here to its end (its edit steps,
    // its recovery's rollbacks and the rollback of a cancelled run). A dry run writes nothing.
    let _lock = match &ws {
        Some(ws) if !args.dry_run => {
            Some(super::lock_repo(ws, args.wait).map_err(|e| Fail::environment(e.to_string()))?)
        }
        _ => None,
    };
    // Git: a dirty tree is refused before anything is written, and --branch is checked out.
    let writes = !args.dry_run && !args.scratch && plan.steps.iter().any(|s| s.module == "edit");
    let git = super::git_run::prepare(&args.git, &repo, writes)
        .map_err(|r| Fail::new(r.code, r.kind, r.message))?;
    let journal = ws.as_ref().map(Journal::new);
    // The journal is read once for the run's start: its untrusted folders, the recovery, the
    // interrupted run named below and a resumed run's committed steps come from this read.
    let mut snapshot = None;
    if let Some(j) = &journal {
        let (read, recovered) = super::apply::read_and_recover(j);
        snapshot = read;
        match recovered {
            Ok(restored) => {
                for r in restored {
                    eprintln!(
                        "restored {} file(s) of an interrupted earlier run ({}): {}",
                        r.paths.len(),
                        r.run_id,
                        r.paths.join(", ")
                    );
                }
            }
            Err(e) => eprintln!(
                "warning: failed to check for interrupted earlier runs: {}",
                crate::cli::esc_lines(&e.to_string())
            ),
        }
    }
    let run_id = match &resumed {
        Some(r) => r.meta.id.clone(),
        None => new_run_id(),
    };
    // A run killed after its edits is named, and this run marked as going on until it ends.
    let _marker = match &ws {
        Some(ws) => {
            // A resumed run is the interrupted one: no warning about it.
            if resumed.is_none() {
                let last_run = snapshot.as_ref().and_then(|s| s.last_run());
                super::inflight::report_interrupted(ws, &repo, last_run);
            }
            (!args.dry_run).then(|| super::inflight::Marker::record(ws, &run_id))
        }
        None => None,
    };
    // Sandbox copies and process groups of nuvira processes that died.
    nuvira_sandbox::remove_stale();

    // Events and their consumers.
    let bus = crate::EventBus::new(run_id.as_str());
    let mut history = match &ws {
        Some(ws) => {
            super::history::start(
                ws,
                &args,
                &run_id,
                &plan,
                resumed.as_ref(),
                &bus,
                &settings,
                &planner_log,
                super::history::Loaded {
                    config: &config,
                    journal: snapshot.as_ref(),
                    resume_lock,
                },
            )
            .await?
        }
        None => super::history::History::default(),
    };
    let store = match &args.events {
        Some(path) if super::conventions::is_stdio(path) => {
            Some(crate::events::JsonlStore::spawn_stdout(&bus))
        }
        Some(path) => match crate::events::JsonlStore::spawn(&bus, path) {
            Ok(s) => Some(s),
            Err(e) => {
                return Err(Fail::invalid(format!(
                    "failed to create the event file {}: {e}",
                    path.display()
                )));
            }
        },
        None => None,
    };
    // The progress lines say what the event log would (a FAILED line and a WARN line for
    // one failure): the log is for --quiet runs, -v and RUST_LOG.
    let global = super::conventions::global();
    let tracer = (args.quiet || global.verbose > 0 || std::env::var_os("RUST_LOG").is_some())
        .then(|| crate::events::spawn_tracing_consumer(&bus));
    let progress = tokio::spawn(super::progress::follow(
        bus.subscribe(),
        args.quiet,
        repo.clone(),
    ));
    let mut report_rx = bus.subscribe();
    let reporter = tokio::spawn(async move {
        let mut b = ReportBuilder::new();
        while let Some(ev) = report_rx.recv().await {
            b.fold(&ev);
        }
        b.finish()
    });
    held.replay(&bus);

    // Run, with Ctrl-C, SIGTERM and SIGHUP as cancellation.
    let mut settings = settings;
    settings.hooks = history.hooks();
    super::signal::sandbox_cleanup_before_exit();
    let interrupt = super::signal::Interrupt::listen(settings.cancel.clone());
    let summary = engine.run_validated(validated, bus.clone(), settings).await;
    let signalled = interrupt.code();
    drop(interrupt);
    // The containers of cancelled steps, and of finished ones (removed in the background).
    super::signal::wait_for_sandbox_cleanup().await;

    if summary.status == RunStatus::Cancelled
        && let Some(j) = &journal
    {
        // A file the user changed while the run went on keeps the user's version.
        match j.rollback_run_with(&run_id, OnChanged::Keep) {
            Ok(restored) => {
                let kept: Vec<String> = restored.iter().flat_map(|r| r.kept.clone()).collect();
                let paths: Vec<String> = restored.into_iter().flat_map(|r| r.paths).collect();
                if !paths.is_empty() {
                    eprintln!(
                        "rolled back {} file(s) changed by the cancelled run",
                        paths.len()
                    );
                }
                if !kept.is_empty() {
                    eprintln!(
                        "kept {} file(s) changed after the run wrote them: {}",
                        kept.len(),
                        crate::cli::esc(&kept.join(", "))
                    );
                }
                bus.emit(
                    None,
                    EventKind::EditRolledBack {
                        paths,
                        reason: nuvira_edit::with_kept("the run was cancelled", &kept),
                    },
                );
            }
            Err(e) => eprintln!(
                "error: failed to roll back the cancelled run's edits: {e} (run `nuvira rollback --repo {}`)",
                repo.display()
            ),
        }
    }
    bus.close();
    let _ = progress.await;
    if let Some(tracer) = tracer {
        let _ = tracer.await;
    }
    if let Some(store) = store
        && let Err(e) = store.finish().await
    {
        eprintln!(
            "error: failed to write the event file: {}",
            crate::cli::esc_lines(&e.to_string())
        );
    }
    let mut report = match reporter.await {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "error: failed to build the report: {}",
                crate::cli::esc_lines(&e.to_string())
            );
            return Ok(exit::FAILED.max(summary.exit_code()));
        }
    };
    let budget_stop = history.exceeded();

    // Paths relative to the checkout (`GITHUB_WORKSPACE`, else the git top level), so that
    // annotations and SARIF name `sub/src/x.rs` for `--repo sub` in a monorepo.
    nuvira_report::rebase_paths(&mut report, &nuvira_report::checkout_prefix(&repo));
    let mut sarif =
        nuvira_report::sarif::Options::from_env().source_root(nuvira_report::checkout_root(&repo));
    sarif.category.clone_from(&args.sarif_category);

    // Output.
    let format = match args.format {
        Some(FormatArg::Text) => Format::Text,
        Some(FormatArg::Json) => Format::Json,
        Some(FormatArg::Markdown) => Format::Markdown,
        Some(FormatArg::Github) => Format::Github,
        None if github::is_actions() => Format::Github,
        None => Format::Text,
    };
    // Standard output carries one thing: the event stream (`--events -`), or the reports
    // sent there with `-o -`, or the report in --format.
    let events_on_stdout = args
        .events
        .as_deref()
        .is_some_and(super::conventions::is_stdio);
    let to_stdout = args
        .reports
        .iter()
        .any(|(_, p)| super::conventions::is_stdio(p));
    if !events_on_stdout && !to_stdout {
        print_stdout(&crate::cli::actions::report_for_stdout(
            &nuvira_report::render(&report, format),
            format,
        ));
    }
    if format == Format::Github
        && let Err(e) = github::write_step_summary(&report)
    {
        eprintln!(
            "warning: failed to {}",
            crate::cli::esc_lines(&e.to_string())
        );
    }
    let mut code = match signalled {
        _ if budget_stop.is_some() => exit::FAILED,
        Some(signal_code) if summary.status == RunStatus::Cancelled => signal_code,
        _ => summary.exit_code(),
    };
    // --commit: exactly the files a successful run wrote; a failed run never commits.
    if args.git.commit
        && let Some(git) = &git
    {
        if summary.status == RunStatus::Succeeded {
            let state = ws.as_ref().map(Workspace::state_dir);
            code = code.max(super::git_run::commit(
                git,
                &args.git,
                &report,
                state.as_deref(),
            ));
        } else {
            eprintln!("--commit: the run did not succeed, so nothing was committed");
        }
    }
    if let Some(why) = &budget_stop
        && args.replay.is_none()
    {
        eprintln!("the run was stopped: {why}");
    }
    code = history
        .finish(&report, summary.status, code, &run_id)
        .await
        .max(code);
    // What is left behind, and how to undo it.
    // The journal, not the report, knows whether any of the run's writes are still in place
    // (a recovery policy may have rolled them back already).
    let left = journal
        .as_ref()
        .and_then(|j| j.last_run().ok().flatten())
        .is_some_and(|last| last == run_id);
    if summary.status == RunStatus::Failed && left && !args.scratch {
        eprintln!(
            "the run failed; the files it changed stay as they are: undo them with `{}`",
            super::apply::rollback_command(&repo)
        );
    }
    if args.scratch {
        eprintln!(
            "the scratch copy stays at {} (delete it when you are done)",
            repo.display()
        );
    }
    for (f, path) in &args.reports {
        let f = f.unwrap_or(format);
        if super::conventions::is_stdio(path) {
            if !events_on_stdout {
                print_stdout(&crate::cli::actions::report_for_stdout(
                    &nuvira_report::render_with(&report, f, &sarif),
                    f,
                ));
            }
            continue;
        }
        if let Err(e) = write_report(path, &nuvira_report::render_with(&report, f, &sarif)) {
            eprintln!(
                "error: failed to write the {f} report to {}: {}",
                path.display(),
                super::io_reason(&e)
            );
            code = code.max(exit::FAILED);
        }
    }
    Ok(code)
}

fn write_report(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

use super::print_stdout;

/// Points test and execute steps at the sandbox and image given on the command line, and
/// turns their caches off for `--no-cache`.
fn apply_overrides(plan: &mut ExecutionPlan, args: &Args) {
    if args.sandbox.is_none() && args.image.is_none() && !args.no_cache {
        return;
    }
    for step in &mut plan.steps {
        if !matches!(step.module.as_str(), "test" | "execute") {
            continue;
        }
        if step.config.is_null() {
            step.config = Value::Object(serde_json::Map::new());
        }
        if let Some(obj) = step.config.as_object_mut() {
            if let Some(sb) = args.sandbox {
                let name = match sb {
                    SandboxArg::Auto => "auto",
                    SandboxArg::Local => "local",
                    SandboxArg::Docker => "docker",
                    SandboxArg::Bwrap => "bwrap",
                };
                obj.insert("sandbox".into(), Value::from(name));
            }
            if let Some(image) = &args.image {
                obj.insert("image".into(), Value::from(image.clone()));
            }
            if args.no_cache {
                obj.insert("cache".into(), Value::from(false));
            }
        }
    }
}

/// The sandbox `verify` steps run their lint commands in: the run's (`--sandbox`, or what
/// `auto` picks), when a verify step has lint commands and the run is not a dry run. `None`
/// leaves verify's own local sandbox.
async fn lint_sandbox(
    plan: &ExecutionPlan,
    args: &Args,
) -> Result<Option<Arc<dyn nuvira_api::Sandbox>>, Fail> {
    let linted: Vec<&str> = plan
        .steps
        .iter()
        .filter(|s| s.module == "verify")
        .filter(|s| {
            s.config
                .get("lint")
                .and_then(Value::as_array)
                .is_some_and(|l| !l.is_empty())
        })
        .map(|s| s.id.as_str())
        .collect();
    run_sandbox(&linted, "lint commands", args).await
}

/// The sandbox the formatters of `format: true` edit steps run in: the run's, like
/// [`lint_sandbox`], else a local one. `None` when no edit step formats or in a dry run.
async fn format_sandbox(
    plan: &ExecutionPlan,
    args: &Args,
) -> Result<Option<Arc<dyn nuvira_api::Sandbox>>, Fail> {
    let formatted: Vec<&str> = plan
        .steps
        .iter()
        .filter(|s| s.module == "edit")
        .filter(|s| s.config.get("format").and_then(Value::as_bool) == Some(true))
        .map(|s| s.id.as_str())
        .collect();
    if formatted.is_empty() || args.dry_run {
        return Ok(None);
    }
    Ok(Some(
        run_sandbox(&formatted, "formatters", args)
            .await?
            .unwrap_or_else(|| Arc::new(nuvira_sandbox::LocalSandbox::new())),
    ))
}

/// The run's sandbox for what `steps` run (`what`): `None` for `--sandbox local`, when no
/// step needs one, in a dry run, or when selecting failed other than for want of Docker.
async fn run_sandbox(
    steps: &[&str],
    what: &str,
    args: &Args,
) -> Result<Option<Arc<dyn nuvira_api::Sandbox>>, Fail> {
    use nuvira_sandbox::SandboxKind;
    if steps.is_empty() || args.dry_run {
        return Ok(None);
    }
    let kind = match args.sandbox {
        Some(SandboxArg::Local) => return Ok(None),
        Some(SandboxArg::Docker) => SandboxKind::Docker,
        Some(SandboxArg::Bwrap) => SandboxKind::Bwrap,
        Some(SandboxArg::Auto) | None => SandboxKind::Auto,
    };
    match nuvira_sandbox::select(kind, args.image.as_deref()).await {
        Ok(sel) => Ok(Some(Arc::new(sel.sandbox))),
        Err(nuvira_api::SandboxError::Unavailable(msg)) => {
            let ids: Vec<String> = steps.iter().map(|s| format!("`{s}`")).collect();
            Err(Fail::environment(format!(
                "{msg}; the {what} of step(s) {} need it (--sandbox docker), so nothing was run (pass --sandbox local or auto to run without Docker)",
                ids.join(", ")
            )))
        }
        Err(_) => Ok(None),
    }
}

/// Narrows a model's plan to the run's sandbox ([`crate::model_plan::narrow`]), saying on
/// stderr which sandbox its commands get and, one line per step, what it narrowed or kept.
async fn narrow_model_plan(plan: ExecutionPlan, args: &Args) -> ExecutionPlan {
    use nuvira_sandbox::SandboxKind;
    let runs_commands = plan
        .steps
        .iter()
        .any(|s| matches!(s.module.as_str(), "test" | "execute"));
    let kind = match args.sandbox {
        Some(SandboxArg::Local) => SandboxKind::Local,
        Some(SandboxArg::Docker) => SandboxKind::Docker,
        Some(SandboxArg::Bwrap) => SandboxKind::Bwrap,
        Some(SandboxArg::Auto) | None => SandboxKind::Auto,
    };
    let sandbox = if kind == SandboxKind::Auto && runs_commands {
        match nuvira_sandbox::select(SandboxKind::Auto, args.image.as_deref()).await {
            Ok(sel) => {
                let picked = match sel.sandbox {
                    nuvira_sandbox::AnySandbox::Local(_) => SandboxKind::Local,
                    nuvira_sandbox::AnySandbox::Bwrap(_) => SandboxKind::Bwrap,
                    _ => SandboxKind::Docker,
                };
                eprintln!(
                    "model plan: test and execute steps run in the {picked} sandbox ({})",
                    sel.reason
                );
                picked
            }
            Err(_) => SandboxKind::Local,
        }
    } else {
        if runs_commands {
            eprintln!("model plan: test and execute steps run in the {kind} sandbox (--sandbox)");
        }
        kind
    };
    let policy = crate::model_plan::SandboxPolicy {
        sandbox,
        allow_host_exec: args.allow_host_exec,
        allow_mount: args.allow_mount,
    };
    let (plan, narrowed) = crate::model_plan::narrow(plan, &policy);
    for n in narrowed {
        // Step ids and commands a model wrote: untrusted text.
        eprintln!("model plan: {}", crate::cli::esc(&n.to_string()));
    }
    plan
}

/// The configured model client, if a model is configured (flag or NUVIRA_MODEL).
///
/// `NUVIRA_SCRIPTED_LLM=FILE` replays a recorded transcript (YAML or JSONL, see
/// `nuvira_llm::ScriptedLlm`) instead of calling a provider: offline demos and tests.
pub(crate) fn model_client(
    model: Option<&str>,
) -> Result<Option<Arc<dyn nuvira_api::LlmClient>>, Fail> {
    if let Some(path) = std::env::var_os("NUVIRA_SCRIPTED_LLM").filter(|p| !p.is_empty()) {
        return match nuvira_llm::ScriptedLlm::from_file(&path) {
            Ok(mut scripted) => {
                if let Some(m) = model {
                    scripted = scripted.with_model(m);
                }
                // Tests of resumed runs: the script's entries for finished steps are skipped.
                if std::env::var("NUVIRA_SCRIPTED_LLM_SKIP").is_ok_and(|v| v == "1") {
                    scripted = scripted.skipping_unmatched(true);
                }
                Ok(Some(super::history::log_scripted(Arc::new(scripted))))
            }
            Err(e) => Err(Fail::invalid(format!(
                "failed to load the scripted model (NUVIRA_SCRIPTED_LLM={}): {e}",
                PathBuf::from(&path).display()
            ))),
        };
    }
    // An empty NUVIRA_MODEL is no model: a workflow's `NUVIRA_MODEL: ${{ vars.NUVIRA_MODEL }}`
    // sets it to "" when the variable is not defined.
    let configured =
        model.is_some() || std::env::var_os("NUVIRA_MODEL").is_some_and(|v| !v.is_empty());
    if !configured {
        return Ok(None);
    }
    let mut settings = match nuvira_llm::LlmSettings::from_env() {
        Ok(s) => s,
        Err(e) => {
            return Err(Fail::environment(format!(
                "failed to configure the model: {e}"
            )));
        }
    };
    if let Some(m) = model {
        settings.model = Some(m.to_owned());
    }
    match nuvira_llm::client_from_settings(&settings) {
        Ok(c) => Ok(Some(c)),
        Err(e) => Err(Fail::environment(format!(
            "failed to configure the model: {e}"
        ))),
    }
}

/// Events emitted before the run's bus exists (while planning), with the time they happened.
#[derive(Default)]
struct HeldEvents(std::sync::Mutex<Vec<HeldEvent>>);

/// When it happened, the step, what happened.
type HeldEvent = (u64, Option<Arc<str>>, EventKind);

impl EventSink for HeldEvents {
    fn emit(&self, step_id: Option<&str>, kind: EventKind) {
        let at = crate::events::now_ms();
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((at, step_id.map(Arc::from), kind));
    }
}

impl HeldEvents {
    /// Publishes the held events on `bus`, in order, stamped with their own times.
    fn replay(&self, bus: &crate::EventBus) {
        let held = std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (at, step_id, kind) in held {
            bus.publish_at(at, || (step_id, kind));
        }
    }
}

async fn plan_from_goal(
    goal: &str,
    planner: PlannerArg,
    llm: Option<Arc<dyn nuvira_api::LlmClient>>,
    events: Arc<HeldEvents>,
    mcp_servers: Option<&Path>,
) -> Result<ExecutionPlan, Fail> {
    match planner {
        PlannerArg::Template => nuvira_plan::TemplatePlanner::new()
            .plan(&PlanRequest::new(goal))
            .await
            .map_err(|e| Fail::invalid(format!("failed to plan: {e}"))),
        PlannerArg::Llm => {
            let Some(llm) = llm else {
                return Err(Fail::environment(
                    "failed to plan with the model: no model is configured (set NUVIRA_MODEL=provider:model and the key in NUVIRA_LLM_API_KEY, or pass --model)",
                ));
            };
            // The plan must pass the same validation as the engine that will run it.
            let engine = Arc::new(
                crate::agent::configure(crate::defaults::engine(), Some(&llm), None).build(),
            );
            let mut planner = crate::agent::llm_planner(llm, engine, events);
            if let Some(path) = mcp_servers {
                let tools = super::mcp::planner_tools(path)
                    .await
                    .map_err(Fail::invalid)?;
                planner = planner.with_mcp_tools(tools);
            }
            planner.plan(&PlanRequest::new(goal)).await.map_err(|e| {
                let message = format!("failed to plan: {e}");
                match e {
                    nuvira_api::PlanError::Llm(nuvira_api::LlmError::Config(_)) => {
                        Fail::environment(message)
                    }
                    nuvira_api::PlanError::Llm(_) => Fail::new(exit::FAILED, "failed", message),
                    _ => Fail::invalid(message),
                }
            })
        }
    }
}
