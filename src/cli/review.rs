//! `nuvira review --base REF [--repo DIR] [--format ..] [--report FORMAT=PATH]..
//! [--title TEXT] [--body TEXT | --body-file FILE] [--no-tests] [--sandbox ..] [--model ..]`.
//!
//! Review mode, the CI step for a pull request: the files changed from the merge base of
//! `REF` and `HEAD` to `HEAD` (what `git diff --name-only REF...HEAD` lists, minus deleted
//! files and those `.gitattributes` marks `linguist-generated` or `-diff`) go through a plan of
//! four steps, run by the engine like any other:
//!
//! `changes` (the branch's diffs, as an edit's changes would be) → `inspect` (only the changed
//! files) → `test` (in a sandbox, unless `--no-tests`) → `verify` (`syntax`, `security`,
//! `tests`, and with a model `goal-alignment` against the pull request's title and body).
//!
//! Nothing is written to the repository. No model is needed; with one (`--model`,
//! `NUVIRA_MODEL`, `NUVIRA_SCRIPTED_LLM`), the goal is the pull request's title and body: from
//! `--title` and `--body`/`--body-file`, else from `GITHUB_EVENT_PATH`'s `pull_request`. The
//! report is printed in every format; in the `github` format only findings on lines the branch
//! added or changed are annotated (findings without a line are kept).
//!
//! Exit codes: 0 no blockers, 1 verification or tests failed, 2 bad arguments or an unknown
//! base, 3 the environment lacks something (no repository, no Docker for `--sandbox docker`).

use crate::cli::{esc, esc_lines, print_stdout};
use crate::exit;
use nuvira_api::{
    ChangeKind, EditPreview, EditResult, ExecutionPlan, FileChange, Module, ModuleError, PlanStep,
    StepContext, StepOutput, WriteSet, async_trait,
};
use nuvira_report::{Format, ReportBuilder, github};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `nuvira review`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("check the branch's changes since it left main, as GitHub annotations", "nuvira review --base origin/main --format github"),
    ("syntax and security only, without running the tests", "nuvira review --base main --no-tests"),
]))]
pub struct Args {
    /// The branch, tag or commit the pull request merges into (`origin/main`)
    /// [default: GITHUB_EVENT_PATH's pull_request.base.sha].
    #[arg(long, value_name = "REF")]
    pub base: Option<String>,
    /// The repository (its working tree must be at the pull request's head).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The report on stdout [default: text, or github when GITHUB_ACTIONS=true].
    #[arg(long, value_parser = ["text", "json", "markdown", "github", "sarif", "junit", "html"])]
    pub format: Option<String>,
    /// Also write the report in FORMAT to PATH (repeatable).
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = parse_target)]
    pub reports: Vec<(Format, PathBuf)>,
    /// The pull request's title (the goal the change is checked against, with a model).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// The pull request's body.
    #[arg(long, value_name = "TEXT", conflicts_with = "body_file")]
    pub body: Option<String>,
    /// The pull request's body, from a file.
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<PathBuf>,
    /// Do not run the tests.
    #[arg(long)]
    pub no_tests: bool,
    /// Where the tests run.
    #[arg(long, value_parser = ["auto", "local", "docker"], default_value = "auto")]
    pub sandbox: String,
    /// The model for goal alignment (`provider:model`); default from NUVIRA_MODEL.
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_target(s: &str) -> Result<(Format, PathBuf), String> {
    let (format, path) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not FORMAT=PATH (e.g. sarif=review.sarif)"))?;
    let format: Format = format
        .parse()
        .map_err(|e: nuvira_report::UnknownFormat| e.to_string())?;
    if path.is_empty() {
        return Err(format!("`{s}` has no path after `=`"));
    }
    Ok((format, PathBuf::from(path)))
}

/// The `changes` step: the branch's diffs as an edit step's output, so `verify` checks them as
/// it checks a run's edits. Reads nothing, writes nothing.
struct Changes(Vec<FileChange>);

#[async_trait]
impl Module for Changes {
    fn name(&self) -> &str {
        "git-changes"
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    async fn run(&self, _step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let mut preview = EditPreview::default();
        preview.changes.clone_from(&self.0);
        preview.validation.syntax_valid = true;
        let mut result = EditResult::default();
        result.preview = preview;
        Ok(StepOutput::Edit(result))
    }
}

/// What is known of the pull request: title, body, base commit.
struct PullRequestText {
    title: Option<String>,
    body: Option<String>,
    base_sha: Option<String>,
}

/// The pull request's title and body: the flags, else `GITHUB_EVENT_PATH`'s `pull_request`.
fn pull_request_text(args: &Args) -> Result<PullRequestText, String> {
    let event: Option<Value> = std::env::var_os("GITHUB_EVENT_PATH")
        .filter(|p| !p.is_empty())
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str(&t).ok());
    let pr = event.as_ref().and_then(|e| e.get("pull_request"));
    let field = |k: &str| {
        pr.and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let body = match (&args.body, &args.body_file) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(f).map_err(|e| {
            format!(
                "failed to read --body-file `{}`: {}",
                f.display(),
                super::io_reason(&e)
            )
        })?),
        (None, None) => field("body"),
    };
    let base_sha = pr
        .and_then(|p| p.pointer("/base/sha"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(PullRequestText {
        title: args.title.clone().or_else(|| field("title")),
        body,
        base_sha,
    })
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    match crate::cli::runtime() {
        Ok(rt) => rt.block_on(review(args)),
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            exit::ENVIRONMENT
        }
    }
}

async fn review(args: Args) -> u8 {
    if let Err(e) = super::check_repo(&args.repo) {
        eprintln!("error: {}", esc_lines(&e.to_string()));
        return exit::INVALID;
    }
    let format = match args.format.as_deref().map(str::parse::<Format>) {
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            eprintln!("error: failed to {e}");
            return exit::INVALID;
        }
        None if github::is_actions() => Format::Github,
        None => Format::Text,
    };
    let PullRequestText {
        title,
        body,
        base_sha: event_base,
    } = match pull_request_text(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e));
            return exit::INVALID;
        }
    };
    let Some(base) = args.base.clone().or(event_base) else {
        eprintln!(
            "error: give the branch the pull request merges into with --base REF (e.g. --base origin/main)"
        );
        return exit::INVALID;
    };
    let repo = match nuvira_git::Repo::open(&args.repo) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e.to_string()));
            return exit::ENVIRONMENT;
        }
    };
    let changed = match repo.changed_since(&base) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", esc_lines(&e.to_string()));
            return exit::INVALID;
        }
    };
    // Paths relative to the folder reviewed (--repo may be a subfolder of the repository).
    let prefix = prefix_of(repo.root(), &args.repo);
    let strip = |p: &str| -> Option<String> {
        if prefix.is_empty() {
            Some(p.to_owned())
        } else {
            p.strip_prefix(&format!("{prefix}/")).map(str::to_owned)
        }
    };
    let names: Vec<String> = changed.iter().map(|c| c.path.clone()).collect();
    let generated: BTreeSet<String> = repo.generated(&names).into_iter().collect();
    let mut changes = Vec::new();
    let mut added: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for c in &changed {
        let Some(rel) = strip(&c.path) else { continue };
        if c.deleted || c.binary || generated.contains(&c.path) {
            continue;
        }
        added.insert(rel.clone(), c.added_lines.clone());
        changes.push(FileChange::new(
            rel,
            ChangeKind::Modify,
            c.diff.clone(),
            c.additions,
            c.deletions,
        ));
    }
    if !args.quiet {
        eprintln!(
            "reviewing {} changed file(s) since the merge base with `{}`{}",
            changes.len(),
            esc(&base),
            if generated.is_empty() {
                String::new()
            } else {
                format!(" ({} generated file(s) skipped)", generated.len())
            }
        );
    }

    let llm = match super::run::model_client(args.model.as_deref()) {
        Ok(l) => l,
        Err(fail) => {
            eprintln!("error: {}", esc_lines(&fail.message));
            return fail.code;
        }
    };
    let goal = match (&title, &body) {
        (Some(t), Some(b)) if !b.trim().is_empty() => format!("{t}\n\n{b}"),
        (Some(t), _) => t.clone(),
        (None, _) => format!("Review the changes since `{base}`"),
    };
    let plan = review_plan(&goal, &changes, &args, llm.is_some(), title.is_some());
    let mut builder = crate::defaults::engine()
        .workspace(&args.repo)
        .module(Arc::new(Changes(changes)));
    if let Some(llm) = &llm {
        builder = builder.llm(llm.clone());
    }
    let engine = builder.build();
    let validated = match engine.validate(&plan) {
        Ok(v) => Arc::new(v),
        Err(errs) => {
            for p in errs.problems {
                eprintln!(
                    "error: the review plan is invalid: {}",
                    esc_lines(&p.message)
                );
            }
            return exit::INVALID;
        }
    };
    let bus = crate::EventBus::new(format!("review-{}", short_id()));
    let progress = tokio::spawn(super::progress::follow(
        bus.subscribe(),
        args.quiet,
        args.repo.clone(),
    ));
    let mut rx = bus.subscribe();
    let reporter = tokio::spawn(async move {
        let mut b = ReportBuilder::new();
        while let Some(ev) = rx.recv().await {
            b.fold(&ev);
        }
        b.finish()
    });
    let settings = crate::RunSettings::default();
    super::signal::sandbox_cleanup_before_exit();
    let interrupt = super::signal::Interrupt::listen(settings.cancel.clone());
    let summary = engine.run_validated(validated, bus.clone(), settings).await;
    let signalled = interrupt.code();
    drop(interrupt);
    // Sandbox containers are removed in the background: not left behind.
    super::signal::wait_for_sandbox_cleanup().await;
    bus.close();
    let _ = progress.await;
    let Ok(report) = reporter.await else {
        eprintln!("error: failed to build the report");
        return exit::FAILED;
    };
    let mut code = match signalled {
        Some(c) if summary.status == nuvira_api::RunStatus::Cancelled => c,
        _ => summary.exit_code(),
    };
    let render = |f: Format| {
        if f == Format::Github {
            nuvira_report::render(&only_changed_lines(&report, &added), f)
        } else {
            nuvira_report::render(&report, f)
        }
    };
    print_stdout(&render(format));
    if format == Format::Github
        && let Err(e) = github::write_step_summary(&report)
    {
        eprintln!("warning: failed to {e}");
    }
    for (f, path) in &args.reports {
        let written = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, render(*f)));
        if let Err(e) = written {
            eprintln!(
                "error: failed to write the {f} report to {}: {}",
                path.display(),
                super::io_reason(&e)
            );
            code = code.max(exit::FAILED);
        }
    }
    code
}

/// changes → inspect → test → verify.
fn review_plan(
    goal: &str,
    changes: &[FileChange],
    args: &Args,
    model: bool,
    has_title: bool,
) -> ExecutionPlan {
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    let keywords: Vec<String> = changes
        .iter()
        .filter_map(|c| {
            std::path::Path::new(&c.path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .filter(|s| s.len() > 2)
        .collect();
    let mut steps = vec![
        PlanStep::new("changes", "git-changes"),
        PlanStep::new("inspect", "inspect")
            .depends_on(["changes"])
            .with_config(json!({ "paths": paths, "keywords": keywords })),
    ];
    let mut checks = vec!["syntax", "security"];
    // verify waits for inspect too: the plan's output must depend on every step.
    let mut verify_deps = vec!["changes", "inspect"];
    if !args.no_tests {
        steps.push(
            PlanStep::new("test", "test")
                .depends_on(["changes"])
                .with_config(json!({ "sandbox": args.sandbox })),
        );
        checks.push("tests");
        verify_deps.push("test");
    }
    if model && has_title {
        checks.push("goal-alignment");
    }
    if paths.is_empty() {
        // Nothing to inspect: an empty `paths` would walk the whole repository.
        steps.retain(|s| s.id != "inspect");
        verify_deps.retain(|d| *d != "inspect");
    }
    steps.push(
        PlanStep::new("verify", "verify")
            .depends_on(verify_deps)
            .with_config(json!({ "checks": checks })),
    );
    ExecutionPlan {
        goal: goal.to_owned(),
        outputs: None,
        steps,
        ..ExecutionPlan::default()
    }
}

/// The report with only the findings on added or changed lines of changed files (and those
/// with no line at all).
fn only_changed_lines(
    report: &nuvira_api::ExecutionReport,
    added: &BTreeMap<String, BTreeSet<u32>>,
) -> nuvira_api::ExecutionReport {
    let mut r = report.clone();
    for s in &mut r.steps {
        s.findings.retain(|f| match (&f.path, f.line) {
            (Some(p), Some(line)) => added.get(p).is_some_and(|lines| lines.contains(&line)),
            _ => true,
        });
    }
    r
}

/// `dir` relative to the repository `root`, `/`-separated (`""` at the root).
fn prefix_of(root: &std::path::Path, dir: &std::path::Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    dir.strip_prefix(&root)
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default()
}

fn short_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}-{:04x}",
        now.as_secs(),
        (now.subsec_nanos() ^ std::process::id()) & 0xffff
    )
}
