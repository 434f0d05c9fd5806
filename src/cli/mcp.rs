//! `nuvira mcp [--repo DIR] [--http 127.0.0.1:PORT] [--sandbox auto|local|bwrap|docker] ...`: Nuvira
//! as an MCP server (see `docs/mcp.md` and [`nuvira_mcp::server`]).
//!
//! The repository and the sandbox flags are fixed here, at start: a client works inside the
//! repository and never gets a wider sandbox than these flags. The plan tools run through
//! [`CliHost`], which uses what `nuvira validate`, `graph` and `run` use.
//!
//! Exit codes: 0 when the client closed the session (or Ctrl-C stopped the HTTP server), 2 for
//! bad arguments or repository, 3 when the address cannot be listened on.

use crate::exit;
use crate::validate::{Problem, ProblemKind};
use nuvira_api::{EventKind, EventSink, ExecutionPlan, RunStatus};
use nuvira_edit::nuvira_workspace::{Journal, OnChanged, Workspace};
use nuvira_mcp::{PlanHost, PlanSource, RunContext, SandboxChoice, SandboxPolicy, ToolError};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `nuvira mcp`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("serve this repository's tools to an agent over stdio", "nuvira mcp --repo ."),
    ("serve streamable HTTP on loopback, tests in Docker only", "nuvira mcp --repo . --http 127.0.0.1:8765 --sandbox docker"),
]))]
pub struct Args {
    /// The repository every tool works in; no path outside it is read or written.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Serve streamable HTTP on this address (path /mcp) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Let --http listen on an address that is not loopback (anyone who can connect edits the
    /// repository and runs its tests).
    #[arg(long, requires = "http")]
    pub allow_remote: bool,
    /// The widest sandbox clients get for tests and commands (local, then auto, bwrap,
    /// docker): docker refuses a client's `local`, bwrap its `local` and `auto`; local
    /// allows every sandbox.
    #[arg(long, value_enum, default_value_t = super::test::SandboxArg::Auto)]
    pub sandbox: super::test::SandboxArg,
    /// The Docker image of tests and commands (clients cannot choose another).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// A bind mount for Docker and bwrap, read-only unless `:rw` (repeatable; clients cannot
    /// add any).
    #[arg(long = "mount", value_name = "HOST:CONTAINER[:ro|:rw]")]
    pub mounts: Vec<String>,
    /// The widest network clients may ask for (default none).
    #[arg(long, value_enum)]
    pub network: Option<super::test::NetworkArg>,
    /// The largest memory limit clients may ask for (default 512m).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// The most CPUs clients may ask for (default 1).
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// The most processes clients may ask for (default 256).
    #[arg(long, value_name = "N")]
    pub pids: Option<u32>,
    /// The longest wall-clock limit of a test run clients may ask for (default 300s).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
}

impl Args {
    fn policy(&self) -> Result<SandboxPolicy, String> {
        let mut p = SandboxPolicy {
            sandbox: match self.sandbox {
                super::test::SandboxArg::Auto => SandboxChoice::Auto,
                super::test::SandboxArg::Local => SandboxChoice::Local,
                super::test::SandboxArg::Docker => SandboxChoice::Docker,
                super::test::SandboxArg::Bwrap => SandboxChoice::Bwrap,
            },
            image: self.image.clone(),
            mounts: self.mounts.clone(),
            ..SandboxPolicy::default()
        };
        for m in &self.mounts {
            nuvira_sandbox::parse_mount(m).map_err(|e| format!("--mount {m}: {e}"))?;
        }
        if let Some(n) = self.network {
            p.network = match n {
                super::test::NetworkArg::None => "none",
                super::test::NetworkArg::Host => "host",
                super::test::NetworkArg::Bridge => "bridge",
            }
            .into();
        }
        if let Some(m) = &self.memory {
            p.memory_bytes = nuvira_sandbox::parse_size(m).map_err(|e| format!("--memory: {e}"))?;
        }
        if let Some(c) = self.cpus {
            if !(c.is_finite() && c > 0.0) {
                return Err(format!("--cpus: `{c}` is not a positive number of CPUs"));
            }
            p.cpus = c;
        }
        if let Some(n) = self.pids {
            p.pids = n;
        }
        if let Some(t) = &self.timeout {
            p.timeout = nuvira_api::duration::parse(t).map_err(|e| format!("--timeout: {e}"))?;
        }
        Ok(p)
    }
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let policy = match args.policy() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let server = match nuvira_mcp::NuviraServer::new(nuvira_mcp::ServerOptions {
        repo: args.repo.clone(),
        policy,
        host: Arc::new(CliHost),
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.message));
            return exit::INVALID;
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return exit::FAILED;
        }
    };
    rt.block_on(async move {
        super::signal::sandbox_cleanup_before_exit();
        let result = match args.http {
            None => nuvira_mcp::serve_stdio(server).await,
            Some(addr) => {
                let shutdown = tokio_util::sync::CancellationToken::new();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    let _ = tokio::signal::ctrl_c().await;
                    stop.cancel();
                });
                nuvira_mcp::serve_http(server, addr, args.allow_remote, shutdown, |bound| {
                    eprintln!("nuvira mcp: listening on http://{bound}/mcp");
                })
                .await
            }
        };
        // Containers of finished runs are removed in the background: not left behind.
        super::signal::wait_for_sandbox_cleanup().await;
        match result {
            Ok(()) => exit::SUCCESS,
            Err(e @ nuvira_mcp::ServeError::NotLoopback(_)) => {
                eprintln!("error: {e}");
                exit::INVALID
            }
            Err(e) => {
                eprintln!("error: {e}");
                exit::ENVIRONMENT
            }
        }
    })
}

/// The plan tools, on the registry and engine of `nuvira validate`, `graph` and `run`.
pub(crate) struct CliHost;

/// A loaded plan, or why not.
type Loaded = Result<(ExecutionPlan, Option<nuvira_plan::LoadedPlan>, PathBuf), ToolError>;

fn parse_problems(e: &nuvira_plan::LoadError) -> Vec<Problem> {
    e.all()
        .map(|e| Problem {
            kind: ProblemKind::Parse,
            steps: vec![],
            message: e.message.clone(),
            line: e.line,
            column: e.column,
            step_index: None,
        })
        .collect()
}

fn invalid(name: &Path, steps: usize, problems: &[Problem]) -> ToolError {
    let mut err = ToolError::new(
        "invalid-plan",
        format!(
            "`{}` is not a valid plan: {} problem(s)",
            name.display(),
            problems.len()
        ),
    );
    let _ = steps;
    err.problems = Some(super::problems_json(name, problems));
    err
}

fn load(source: &PlanSource) -> Loaded {
    let (loaded, name) = match source {
        PlanSource::File(path) => (nuvira_plan::load_file(path), path.clone()),
        PlanSource::Text { text, format } => {
            let f = match format.as_str() {
                "json" => nuvira_plan::PlanFormat::Json,
                "toml" => nuvira_plan::PlanFormat::Toml,
                _ => nuvira_plan::PlanFormat::Yaml,
            };
            (
                nuvira_plan::parse_str(text, f, "<plan_text>"),
                PathBuf::from("<plan_text>"),
            )
        }
    };
    match loaded {
        Ok(l) => Ok((l.plan.clone(), Some(l), name)),
        Err(e) => Err(invalid(&name, 0, &parse_problems(&e))),
    }
}

/// Validates against the registry `nuvira validate` uses, problems located.
fn check(source: &PlanSource) -> Result<(crate::ValidatedPlan, PathBuf), ToolError> {
    let (plan, loaded, name) = load(source)?;
    let registry = crate::agent::registry();
    crate::validate::validate(&plan, Some(&registry))
        .map(|v| (v, name.clone()))
        .map_err(|errs| {
            let problems: Vec<Problem> = errs
                .problems
                .into_iter()
                .map(|mut p| {
                    if let (None, Some(l)) = (p.line, &loaded) {
                        p.line = super::validate::line_of(l, &p);
                    }
                    p
                })
                .collect();
            invalid(&name, plan.steps.len(), &problems)
        })
}

#[async_trait::async_trait]
impl PlanHost for CliHost {
    fn validate(&self, plan: &PlanSource) -> Value {
        match check(plan) {
            Ok((v, _)) => json!({"valid": true, "steps": v.plan.steps.len(), "errors": []}),
            Err(e) => nuvira_mcp::server::invalid_plan(
                0,
                e.problems
                    .and_then(|p| p.as_array().cloned())
                    .unwrap_or_default(),
            ),
        }
    }

    fn graph(&self, plan: &PlanSource, format: &str) -> Result<Value, ToolError> {
        let (plan, _) = check(plan)?;
        Ok(match format {
            "mermaid" => Value::String(crate::graph::to_mermaid(&plan)),
            "json" => crate::graph::to_json(&plan),
            _ => Value::String(crate::graph::to_dot(&plan)),
        })
    }

    async fn run(&self, plan: &PlanSource, ctx: RunContext) -> Result<Value, ToolError> {
        run_plan(plan, ctx).await
    }
}

/// Steps whose commands run in a sandbox the policy must confine: `test` and `execute`.
fn confine_steps(plan: &mut ExecutionPlan, policy: &SandboxPolicy) -> Result<(), ToolError> {
    for step in &mut plan.steps {
        if !matches!(step.module.as_str(), "test" | "execute") {
            continue;
        }
        if step.config.is_null() {
            step.config = Value::Object(serde_json::Map::new());
        }
        let what = format!("step `{}`", step.id);
        match step.config.as_object_mut() {
            Some(obj) => policy
                .confine(obj, &what)
                .map_err(|e| ToolError::new("invalid-input", e.0))?,
            None => {
                return Err(ToolError::new(
                    "invalid-input",
                    format!("{what}: `config` must be a map"),
                ));
            }
        }
    }
    Ok(())
}

/// The sandbox of lint commands and formatters: the policy's, or `None` (their own local
/// copy) when the policy allows local.
async fn side_sandbox(
    policy: &SandboxPolicy,
) -> Result<Option<Arc<dyn nuvira_api::Sandbox>>, ToolError> {
    use nuvira_sandbox::SandboxKind;
    let kind = match policy.sandbox {
        SandboxChoice::Local => return Ok(None),
        SandboxChoice::Auto => SandboxKind::Auto,
        SandboxChoice::Bwrap => SandboxKind::Bwrap,
        SandboxChoice::Docker => SandboxKind::Docker,
    };
    match nuvira_sandbox::select(kind, policy.image.as_deref()).await {
        Ok(sel) => Ok(Some(Arc::new(sel.sandbox))),
        Err(nuvira_api::SandboxError::Unavailable(msg)) if kind != SandboxKind::Auto => Err(
            ToolError::new("environment", format!("{msg}; nothing was run")),
        ),
        Err(_) => Ok(None),
    }
}

/// `nuvira run PLAN` for a client: the same engine, recover stage, lock, journal recovery and
/// rollback on cancellation; the report is returned instead of printed.
async fn run_plan(source: &PlanSource, ctx: RunContext) -> Result<Value, ToolError> {
    let (mut plan, loaded, name) = load(source)?;
    confine_steps(&mut plan, &ctx.policy)?;
    let needing: Vec<String> = plan
        .steps
        .iter()
        .filter(|s| s.module == "edit")
        .filter(|s| s.config.get("instructions").is_some() && s.config.get("edits").is_none())
        .map(|s| format!("`{}`", s.id))
        .collect();
    if !needing.is_empty() {
        return Err(ToolError::new(
            "environment",
            format!(
                "edit step(s) {} have a model write their edits (`instructions`), and `nuvira mcp` runs plans without a model: give the steps `edits`",
                needing.join(", ")
            ),
        ));
    }
    let repo = ctx.repo.clone();
    let stage = crate::agent::recover_stage();
    let mut builder = crate::agent::configure(
        crate::defaults::engine().workspace(&repo),
        None,
        Some(stage.clone()),
    );
    let lints = plan.steps.iter().any(|s| {
        s.module == "verify"
            && s.config
                .get("lint")
                .and_then(Value::as_array)
                .is_some_and(|l| !l.is_empty())
    });
    let formats = plan.steps.iter().any(|s| {
        s.module == "edit" && s.config.get("format").and_then(Value::as_bool) == Some(true)
    });
    if !ctx.dry_run && (lints || formats) {
        let sandbox = side_sandbox(&ctx.policy).await?;
        if let (true, Some(sb)) = (lints, &sandbox) {
            let verify = nuvira_verify::VerifyModule::default().with_sandbox(sb.clone());
            builder = builder.replace_module(stage.wrap(Arc::new(verify)));
        }
        if formats {
            let sb = sandbox.unwrap_or_else(|| Arc::new(nuvira_sandbox::LocalSandbox::new()));
            let edit = crate::agent::edit_module(None).with_sandbox(sb);
            builder = builder.replace_module(stage.wrap(Arc::new(edit)));
        }
    }
    let engine = builder.build();
    let validated = match engine.validate(&plan) {
        Ok(v) => Arc::new(v),
        Err(errs) => {
            let problems: Vec<Problem> = errs
                .problems
                .into_iter()
                .map(|mut p| {
                    if let (None, Some(l)) = (p.line, &loaded) {
                        p.line = super::validate::line_of(l, &p);
                    }
                    p
                })
                .collect();
            return Err(invalid(&name, plan.steps.len(), &problems));
        }
    };
    let ws = Workspace::open(&repo)
        .map_err(|e| ToolError::new("repository", format!("failed to open the repository: {e}")))?;
    // One writer per repository, from here to the rollback of a cancelled run.
    let _lock = if ctx.dry_run {
        None
    } else {
        Some(
            super::lock_repo(&ws, false)
                .map_err(|e| ToolError::new("environment", e.to_string()))?,
        )
    };
    let journal = Journal::new(&ws);
    let _ = journal.recover_incomplete();
    let run_id = format!("mcp-{}", nuvira_api::now_ms());
    nuvira_sandbox::remove_stale();

    let bus = crate::EventBus::new(run_id.as_str());
    let mut events = bus.subscribe();
    let sink = ctx.events.clone();
    let reporter = tokio::spawn(async move {
        let mut b = nuvira_report::ReportBuilder::new();
        while let Some(ev) = events.recv().await {
            sink.emit(ev.step_id.as_deref(), ev.kind.clone());
            b.fold(&ev);
        }
        b.finish()
    });
    let settings = crate::RunSettings {
        dry_run: ctx.dry_run,
        cancel: ctx.cancel.clone(),
        ..Default::default()
    };
    let summary = engine.run_validated(validated, bus.clone(), settings).await;
    if summary.status == RunStatus::Cancelled {
        super::signal::wait_for_sandbox_cleanup().await;
        // A file the user changed while the run went on keeps the user's version.
        if let Ok(restored) = journal.rollback_run_with(&run_id, OnChanged::Keep) {
            let kept: Vec<String> = restored.iter().flat_map(|r| r.kept.clone()).collect();
            let paths: Vec<String> = restored.into_iter().flat_map(|r| r.paths).collect();
            bus.emit(
                None,
                EventKind::EditRolledBack {
                    paths,
                    reason: nuvira_edit::with_kept("the run was cancelled", &kept),
                },
            );
        }
    }
    bus.close();
    let report = reporter
        .await
        .map_err(|e| ToolError::new("failed", format!("failed to build the report: {e}")))?;
    let status = match summary.status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Cancelled => "cancelled",
    };
    Ok(json!({
        "run_id": run_id,
        "status": status,
        "exit_code": summary.exit_code(),
        "report": serde_json::to_value(&report).unwrap_or(Value::Null),
    }))
}

/// `nuvira run --mcp-servers FILE`: the servers of FILE (`mcp_servers:`) and their tools, for
/// the model planner. Each server is started to list its tools, then stopped.
///
/// # Errors
/// The message for `error: ` when the file or a server cannot be read.
pub(crate) async fn planner_tools(path: &Path) -> Result<nuvira_plan::McpTools, String> {
    // The plan loader reads it: YAML, JSON or TOML by extension, errors with lines.
    let loaded = nuvira_plan::load_file(path).map_err(|e| e.to_string())?;
    let servers = &loaded.plan.mcp_servers;
    if servers.is_empty() {
        return Err(format!(
            "{}: no `mcp_servers:` map; write `mcp_servers: {{ NAME: {{ command: PROGRAM, args: [...] }} }}`",
            path.display()
        ));
    }
    let mut out = nuvira_plan::McpTools::default();
    for (name, spec) in servers {
        let parsed = nuvira_mcp::client::ServerSpec::parse(spec, &format!("mcp_servers.{name}"))?;
        for t in nuvira_mcp::client::list_tools(&parsed, name).await? {
            out.tools.push(nuvira_plan::McpToolHint {
                server: t.server,
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
            });
        }
        out.servers.insert(name.clone(), spec.clone());
    }
    Ok(out)
}
