//! `nuvira mcp`: Nuvira's validated edits, sandboxed tests and plan runs as MCP tools.
//!
//! The server is fixed to one repository and one [`SandboxPolicy`] when it starts; every tool
//! works inside them. The edit, test, inspect and report tools call the same library code the
//! CLI's `apply`, `rollback`, `test`, `inspect` and `report` commands call. The plan tools
//! (`validate_plan`, `graph`, `run_plan`) need the engine and the built-in module registry,
//! which live above this crate: the binary hands them in as a [`PlanHost`].
//!
//! Failures a user can cause are *tool errors* (`isError: true`, the CLI's message as text), so
//! an agent reads them like a person reads `nuvira`'s stderr; a request that does not match a
//! tool's schema is a protocol error (`invalid params`), and nothing a client sends crashes
//! the server.

use crate::policy::{self, SandboxPolicy};
use nuvira_api::{EventKind, EventSink, ModuleError, StepContext, StepOutput};
use nuvira_edit::{EditFailure, EditOptions, Editor, Emit, parse_entries};
use nuvira_workspace::{Journal, JournalError, LockWait, OnChanged, RepoLock, Workspace};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    Implementation, ListResourcesResult, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Json, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A plan given to a plan tool: a file in the repository, or the plan's text.
#[derive(Debug, Clone)]
pub enum PlanSource {
    /// A plan file, already confined to the repository.
    File(PathBuf),
    /// The plan's text and its format (`yaml`, `json` or `toml`).
    Text {
        /// The plan.
        text: String,
        /// `yaml`, `json` or `toml`.
        format: String,
    },
}

/// A failure of a tool, with the message the CLI prints after `error: ` and the kind its
/// `--format json` error object carries (`invalid-plan`, `invalid-input`, `repository`,
/// `environment`, `failed`, `cancelled`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// The error kind.
    pub kind: String,
    /// The message.
    pub message: String,
    /// Validation problems, for `invalid-plan`.
    pub problems: Option<Value>,
}

impl ToolError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        Self {
            kind: kind.to_owned(),
            message: message.into(),
            problems: None,
        }
    }

    /// The text a client sees: the message, then the problems one per line.
    fn into_text(self) -> String {
        let mut text = self.message;
        if let Some(Value::Array(problems)) = &self.problems {
            for p in problems {
                let msg = p.get("message").and_then(Value::as_str).unwrap_or_default();
                match p.get("line").and_then(Value::as_u64) {
                    Some(l) => text.push_str(&format!("\n  line {l}: {msg}")),
                    None => text.push_str(&format!("\n  {msg}")),
                }
            }
        }
        text
    }
}

/// What `run_plan` is given besides the plan.
#[derive(Clone)]
pub struct RunContext {
    /// The repository.
    pub repo: PathBuf,
    /// The widest sandbox the run's steps may use.
    pub policy: Arc<SandboxPolicy>,
    /// Cancelled when the client cancels the call or goes away: the run stops and rolls back
    /// like a `nuvira run` interrupted with Ctrl-C.
    pub cancel: CancellationToken,
    /// Receives the run's events (the server turns them into progress notifications).
    pub events: Arc<dyn EventSink>,
    /// Preview only.
    pub dry_run: bool,
}

/// The engine side of the plan tools, implemented by the `nuvira` crate with the registry and
/// engine `nuvira validate`, `graph` and `run` use.
#[async_trait::async_trait]
pub trait PlanHost: Send + Sync + 'static {
    /// Loads and validates a plan: `{"valid", "steps", "errors": [...]}` as
    /// `nuvira validate --format json` prints it.
    fn validate(&self, plan: &PlanSource) -> Value;

    /// The plan's graph in `format` (`dot`, `mermaid` or `json`).
    ///
    /// # Errors
    /// An `invalid-plan` [`ToolError`] with the problems.
    fn graph(&self, plan: &PlanSource, format: &str) -> Result<Value, ToolError>;

    /// Runs a plan to its end and returns `{"run_id", "status", "exit_code", "report"}`.
    ///
    /// # Errors
    /// A [`ToolError`] when the run cannot start (invalid plan, a sandbox the policy refuses,
    /// the repository lock held by another process).
    async fn run(&self, plan: &PlanSource, ctx: RunContext) -> Result<Value, ToolError>;
}

/// How the server was started.
#[derive(Clone)]
pub struct ServerOptions {
    /// The repository every tool works in (made absolute and resolved when the server starts).
    pub repo: PathBuf,
    /// The widest sandbox clients may ask for.
    pub policy: SandboxPolicy,
    /// The plan tools' engine.
    pub host: Arc<dyn PlanHost>,
}

/// The MCP server. Cheap to clone: one per HTTP session shares the repository and the
/// in-flight work.
#[derive(Clone)]
pub struct NuviraServer {
    repo: Arc<Path>,
    policy: Arc<SandboxPolicy>,
    host: Arc<dyn PlanHost>,
    work: TaskTracker,
    tool_router: ToolRouter<Self>,
}

// Tool arguments. Unknown keys are refused (a typo must not silently mean the default).

/// A plan: a file in the repository, or its text.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanArgs {
    /// The plan file, relative to the repository (.yaml, .yml, .json or .toml).
    #[serde(default)]
    pub plan: Option<String>,
    /// The plan's text, instead of a file.
    #[serde(default)]
    pub plan_text: Option<String>,
    /// The format of `plan_text`: yaml (the default), json or toml.
    #[serde(default)]
    pub plan_format: Option<String>,
}

/// `graph`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphArgs {
    /// The plan.
    #[serde(flatten)]
    pub plan: PlanArgs,
    /// dot (the default), mermaid or json.
    #[serde(default)]
    pub format: Option<String>,
}

/// `run_plan`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPlanArgs {
    /// The plan.
    #[serde(flatten)]
    pub plan: PlanArgs,
    /// Preview: edits are shown, not written; tests and commands are not run.
    #[serde(default)]
    pub dry_run: bool,
}

/// `inspect`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InspectArgs {
    /// What the work is about; its identifiers and words are matched against the files.
    pub goal: String,
    /// How many of the most relevant files to describe (default 20).
    #[serde(default)]
    pub max_files: Option<u32>,
}

/// An edit batch, as the `edits:` list of a `nuvira apply` file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditsArgs {
    /// The edits, e.g. `{"strategy": "search-replace", "path": "src/lib.rs", "search": "a",
    /// "replace": "b"}`; strategies: search-replace, unified-diff, whole-file, ast-replace,
    /// create, delete, rename.
    pub edits: Vec<Value>,
    /// Refuse the batch when an added line holds a credential (otherwise a warning).
    #[serde(default)]
    pub block_on_secrets: bool,
    /// Run the file type's formatter on the written files.
    #[serde(default)]
    pub format: bool,
}

/// `rollback`'s arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackArgs {
    /// The transaction to undo (what `apply_edits` or `run_plan` returned); default the last.
    #[serde(default)]
    pub transaction_id: Option<String>,
    /// Restore files changed after the edit too, losing those later changes.
    #[serde(default)]
    pub force: bool,
    /// Restore every other file and leave the changed ones as they are.
    #[serde(default)]
    pub keep_changed: bool,
}

/// `run_tests`'s arguments: the keys of a plan's `test` step. The server's start flags are the
/// most a client may ask for.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTestsArgs {
    /// auto (every detected one, the default), cargo, nextest, pytest, vitest, jest or go.
    #[serde(default)]
    pub framework: Option<String>,
    /// A command to run instead of the detected ones (run with `sh -c`).
    #[serde(default)]
    pub command: Option<String>,
    /// auto, local, bwrap or docker; never wider than the server's `--sandbox` (local is the
    /// widest, then auto, bwrap, docker).
    #[serde(default)]
    pub sandbox: Option<String>,
    /// Memory limit, e.g. 256m; at most the server's.
    #[serde(default)]
    pub memory: Option<String>,
    /// CPUs; at most the server's.
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Processes; at most the server's.
    #[serde(default)]
    pub pids: Option<u32>,
    /// Wall-clock limit, e.g. 60s; at most the server's.
    #[serde(default)]
    pub timeout: Option<String>,
    /// none, bridge or host; at most the server's `--network`.
    #[serde(default)]
    pub network: Option<String>,
}

/// `report`'s arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportArgs {
    /// A JSONL event file in the repository (as `nuvira run --events FILE` writes it).
    pub events: String,
    /// text, json (the default), markdown, github, sarif, junit or html.
    #[serde(default)]
    pub format: Option<String>,
}

// Tool results (structured output).

/// The result of `validate_plan`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ValidateOutput {
    /// Whether the plan is valid.
    pub valid: bool,
    /// Steps parsed.
    pub steps: u64,
    /// Every problem: `{"kind", "steps", "message", "line"?, "column"?}`.
    pub errors: Vec<Value>,
}

/// The result of `graph`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphOutput {
    /// dot, mermaid or json.
    pub format: String,
    /// The DOT or Mermaid text, or the graph object for json.
    pub graph: Value,
}

/// The result of `inspect`: the `InspectionResult` of `nuvira inspect --format json`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InspectOutput {
    /// Relevant files, most relevant first, with scores and symbols.
    #[schemars(with = "nuvira_api::InspectionResult")]
    pub result: Value,
}

/// The result of `preview_edits`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PreviewOutput {
    /// Whether the batch would be applied.
    pub valid: bool,
    /// The `EditPreview`: changes with unified diffs, validation, impact.
    #[schemars(with = "nuvira_api::EditPreview")]
    pub preview: Value,
    /// Why the batch would be refused (`{"path", "line"?, "reason"}`), empty when valid.
    pub rejections: Vec<Value>,
}

/// The result of `apply_edits`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ApplyOutput {
    /// The transaction: pass it to `rollback` to undo the batch.
    pub transaction_id: String,
    /// Changes written.
    pub applied_count: u64,
    /// The `EditResult`.
    #[schemars(with = "nuvira_api::EditResult")]
    pub result: Value,
}

/// The result of `rollback`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RollbackOutput {
    /// The transaction (run) rolled back.
    pub transaction_id: String,
    /// Files restored to their contents before it.
    pub restored: Vec<String>,
    /// Files removed because it had created them.
    pub removed: Vec<String>,
    /// Files left as they are because they changed after it.
    pub kept: Vec<String>,
}

/// The result of `run_tests`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TestsOutput {
    /// Whether every test passed.
    pub success: bool,
    /// Passed, failed and skipped counts.
    pub passed: u64,
    /// Failed tests.
    pub failed: u64,
    /// Skipped tests.
    pub skipped: u64,
    /// Each failure: test name, file, line, message.
    #[schemars(with = "Vec<nuvira_api::TestFailure>")]
    pub failures: Vec<Value>,
    /// The whole `TestResult` (with its `sandbox` object).
    #[schemars(with = "nuvira_api::TestResult")]
    pub result: Value,
}

/// The result of `run_plan`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct RunOutput {
    /// The run's id, also its transaction id for `rollback`.
    pub run_id: String,
    /// succeeded, failed or cancelled.
    pub status: String,
    /// The exit code `nuvira run` would have.
    pub exit_code: u64,
    /// The `ExecutionReport` (null when the run ended before it had one).
    #[schemars(with = "Option<nuvira_api::ExecutionReport>")]
    pub report: Value,
}

/// The result of `report`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReportOutput {
    /// The format.
    pub format: String,
    /// The report: an object for json, text for the other formats.
    pub report: Value,
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl NuviraServer {
    /// A server for `options.repo`.
    ///
    /// # Errors
    /// The CLI's message when the repository does not exist or is not a folder.
    pub fn new(options: ServerOptions) -> Result<Self, ToolError> {
        let repo = match std::fs::metadata(&options.repo) {
            Ok(m) if m.is_dir() => std::fs::canonicalize(&options.repo).map_err(|e| {
                ToolError::new(
                    "repository",
                    format!(
                        "repository `{}` cannot be read: {}",
                        options.repo.display(),
                        policy::io_reason(&e)
                    ),
                )
            })?,
            Ok(_) => {
                return Err(ToolError::new(
                    "repository",
                    format!(
                        "repository `{}` is a file, not a folder; pass the repository folder with --repo DIR",
                        options.repo.display()
                    ),
                ));
            }
            Err(_) => {
                return Err(ToolError::new(
                    "repository",
                    format!(
                        "repository `{}` does not exist; pass the repository folder with --repo DIR",
                        options.repo.display()
                    ),
                ));
            }
        };
        Ok(Self {
            repo: repo.into(),
            policy: Arc::new(options.policy),
            host: options.host,
            work: TaskTracker::new(),
            tool_router: Self::tool_router(),
        })
    }

    /// The repository the server works in.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// Waits for every tool call still running (a cancelled run rolling back) to end. Call it
    /// after the transport closed, before the process exits.
    pub async fn drain(&self) {
        self.work.close();
        self.work.wait().await;
    }

    fn plan_source(&self, args: &PlanArgs) -> Result<PlanSource, String> {
        match (&args.plan, &args.plan_text) {
            (Some(_), Some(_)) => Err("give `plan` (a file) or `plan_text`, not both".into()),
            (None, None) => {
                Err("give `plan` (a plan file in the repository) or `plan_text`".into())
            }
            (Some(p), None) => Ok(PlanSource::File(policy::confine_path(
                &self.repo, p, "plan",
            )?)),
            (None, Some(text)) => {
                let format = args.plan_format.clone().unwrap_or_else(|| "yaml".into());
                if !matches!(format.as_str(), "yaml" | "json" | "toml") {
                    return Err(format!(
                        "`plan_format: {format}` is not a plan format: use yaml, json or toml"
                    ));
                }
                Ok(PlanSource::Text {
                    text: text.clone(),
                    format,
                })
            }
        }
    }

    fn workspace(&self) -> Result<Workspace, String> {
        Workspace::open(&self.repo).map_err(|e| format!("failed to open the repository: {e}"))
    }

    fn editor(args: &EditsArgs) -> Editor {
        Editor::standard().with_options(EditOptions {
            block_on_secrets: args.block_on_secrets,
            format: args.format,
        })
    }

    fn lock(&self, ws: &Workspace) -> Result<RepoLock, String> {
        RepoLock::acquire(ws, "nuvira mcp", LockWait::Fail, |_| {}).map_err(|e| e.to_string())
    }

    /// What every tool that reads files or runs the library's blocking code shares: `job` on
    /// the blocking pool, its error (or a task that panicked) as the tool's error text,
    /// `failed to {what}: …` for the latter.
    async fn blocking<T: Send + 'static>(
        what: &str,
        job: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| format!("failed to {what}: {e}"))?
    }

    /// [`blocking`](Self::blocking) for the tools that write the repository: tracked, so
    /// [`drain`](Self::drain) waits for it before the server exits.
    async fn writing<T: Send + 'static>(
        &self,
        what: &str,
        job: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        self.work
            .track_future(tokio::task::spawn_blocking(job))
            .await
            .map_err(|e| format!("failed to {what}: {e}"))?
    }
}

impl From<policy::PolicyError> for String {
    fn from(e: policy::PolicyError) -> Self {
        e.0
    }
}

/// The edits of a batch, or every invalid one in one message.
fn parse_batch(args: &EditsArgs, editor: &Editor) -> Result<Vec<nuvira_api::EditEntry>, String> {
    parse_entries(&args.edits, editor).map_err(|problems| {
        format!(
            "the batch has {} invalid edit(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    })
}

/// Undoes batches a crash left half-written before a tool touches the workspace.
fn recover(ws: &Workspace) -> Result<(), String> {
    match Journal::new(ws).recover_incomplete() {
        Ok(_) | Err(JournalError::Locked(_)) => Ok(()),
        Err(e) => Err(format!(
            "failed to roll back the batch an earlier crash interrupted: {e}"
        )),
    }
}

#[tool_router(router = tool_router)]
impl NuviraServer {
    /// Validates a plan and lists every problem.
    #[tool(
        name = "validate_plan",
        description = "Validate a Nuvira plan (a file in the repository or its text) and list every problem, with lines. The same checks as `nuvira validate`."
    )]
    async fn validate_plan(
        &self,
        Parameters(args): Parameters<PlanArgs>,
    ) -> Result<Json<ValidateOutput>, String> {
        let source = self.plan_source(&args)?;
        let host = self.host.clone();
        let v = Self::blocking("validate", move || Ok(host.validate(&source))).await?;
        Ok(Json(ValidateOutput {
            valid: v.get("valid").and_then(Value::as_bool).unwrap_or(false),
            steps: v.get("steps").and_then(Value::as_u64).unwrap_or(0),
            errors: v
                .get("errors")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }))
    }

    /// Renders a plan's dependency graph.
    #[tool(
        name = "graph",
        description = "Render a valid plan's dependency graph as DOT, Mermaid or JSON (steps, edges, outputs, a topological order), like `nuvira graph`."
    )]
    async fn graph(
        &self,
        Parameters(args): Parameters<GraphArgs>,
    ) -> Result<Json<GraphOutput>, String> {
        let source = self.plan_source(&args.plan)?;
        let format = args.format.unwrap_or_else(|| "dot".into());
        if !matches!(format.as_str(), "dot" | "mermaid" | "json") {
            return Err(format!(
                "`format: {format}` is not a graph format: use dot, mermaid or json"
            ));
        }
        let host = self.host.clone();
        let f = format.clone();
        let graph = Self::blocking("render the graph", move || {
            host.graph(&source, &f).map_err(ToolError::into_text)
        })
        .await?;
        Ok(Json(GraphOutput { format, graph }))
    }

    /// Finds the files relevant to a goal.
    #[tool(
        name = "inspect",
        description = "Find the files of the repository that matter for a goal, most relevant first, with scores and symbols (`nuvira inspect`)."
    )]
    async fn inspect(
        &self,
        Parameters(args): Parameters<InspectArgs>,
    ) -> Result<Json<InspectOutput>, String> {
        if args.goal.trim().is_empty() {
            return Err("failed to inspect: `goal` is empty; say what the work is about".into());
        }
        if args.max_files == Some(0) {
            return Err("`max_files` must be at least 1".into());
        }
        let repo = self.repo.to_path_buf();
        let options = nuvira_inspect::InspectOptions::default().with_max_files(
            args.max_files
                .map_or(20, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        );
        let result = Self::blocking("inspect", move || {
            nuvira_inspect::inspect(&repo, &args.goal, &options, &nuvira_inspect::Hooks::none())
                .map_err(|e| format!("failed to {e}"))
        })
        .await?;
        Ok(Json(InspectOutput {
            result: to_value(&result),
        }))
    }

    /// Previews an edit batch: diffs and validation, nothing written.
    #[tool(
        name = "preview_edits",
        description = "Dry-run an edit batch: validate it (syntax, conflicts, secrets) and return the unified diff of every change. Nothing is written (`nuvira apply --dry-run`)."
    )]
    async fn preview_edits(
        &self,
        Parameters(args): Parameters<EditsArgs>,
    ) -> Result<Json<PreviewOutput>, String> {
        let ws = self.workspace()?;
        Self::blocking("preview the edits", move || {
            let editor = Self::editor(&args);
            let entries = parse_batch(&args, &editor)?;
            let preview = editor.dry_run(&ws, &entries, &Emit::none());
            let rejections = nuvira_edit::rejection_reasons(&preview);
            Ok(Json(PreviewOutput {
                valid: preview.is_valid(),
                rejections: rejections.iter().map(to_value).collect(),
                preview: to_value(&preview),
            }))
        })
        .await
    }

    /// Applies an edit batch all-or-nothing.
    #[tool(
        name = "apply_edits",
        description = "Apply an edit batch all-or-nothing, journaled: every change is validated first and either all are written or none. Returns the transaction id that `rollback` undoes (`nuvira apply`)."
    )]
    async fn apply_edits(
        &self,
        Parameters(args): Parameters<EditsArgs>,
    ) -> Result<Json<ApplyOutput>, String> {
        let ws = self.workspace()?;
        let this = self.clone();
        self.writing("apply the edits", move || {
            let editor = Self::editor(&args);
            let entries = parse_batch(&args, &editor)?;
            // One writer per repository, as `nuvira apply` holds it.
            let _lock = this.lock(&ws)?;
            recover(&ws)?;
            let run_id = format!("apply-{}", nuvira_api::now_ms());
            match editor.edit(&ws, &entries, &run_id, &Emit::none()) {
                Ok(result) => Ok(Json(ApplyOutput {
                    transaction_id: run_id,
                    applied_count: result.applied_count as u64,
                    result: to_value(&result),
                })),
                Err(EditFailure::Rejected(result)) => {
                    let reasons: Vec<String> = result
                        .skipped_changes
                        .iter()
                        .map(|r| match (r.path.is_empty(), r.line) {
                            (true, _) => r.reason.clone(),
                            (false, Some(l)) => format!("{}:{l}: {}", r.path, r.reason),
                            (false, None) => format!("{}: {}", r.path, r.reason),
                        })
                        .collect();
                    Err(format!(
                        "edits rejected ({} problem(s)); nothing was written\n  {}",
                        reasons.len(),
                        reasons.join("\n  ")
                    ))
                }
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// Undoes a transaction.
    #[tool(
        name = "rollback",
        description = "Restore the files changed by a transaction (`apply_edits` or `run_plan`), by default the last one. A file changed since is never overwritten unless `force` (`nuvira rollback`)."
    )]
    async fn rollback(
        &self,
        Parameters(args): Parameters<RollbackArgs>,
    ) -> Result<Json<RollbackOutput>, String> {
        if args.force && args.keep_changed {
            return Err("give `force` or `keep_changed`, not both".into());
        }
        let ws = self.workspace()?;
        let this = self.clone();
        self.writing("roll back", move || {
            let on_changed = if args.force {
                OnChanged::Overwrite
            } else if args.keep_changed {
                OnChanged::Keep
            } else {
                OnChanged::Refuse
            };
            let nothing = || {
                format!(
                    "nothing to roll back in `{}`: no `nuvira apply` or `nuvira run` has changed files here, or their changes were already rolled back",
                    this.repo.display()
                )
            };
            if !ws.state_dir().join("journal").exists() {
                return Err(nothing());
            }
            let _lock = this.lock(&ws)?;
            recover(&ws)?;
            let journal = Journal::new(&ws);
            let done = match &args.transaction_id {
                Some(id) => journal.rollback_run_with(id, on_changed).map(|d| {
                    if d.is_empty() {
                        None
                    } else {
                        Some((id.clone(), d))
                    }
                }),
                None => journal.rollback_last_with(on_changed),
            };
            match done {
                Ok(Some((run, done))) => {
                    let mut restored = Vec::new();
                    let mut removed = Vec::new();
                    let mut kept = Vec::new();
                    for r in done {
                        for p in r.paths {
                            if r.removed.contains(&p) {
                                removed.push(p);
                            } else {
                                restored.push(p);
                            }
                        }
                        kept.extend(r.kept);
                    }
                    for v in [&mut restored, &mut removed, &mut kept] {
                        v.sort();
                        v.dedup();
                    }
                    restored.retain(|p| !removed.contains(p));
                    Ok(Json(RollbackOutput {
                        transaction_id: run,
                        restored,
                        removed,
                        kept,
                    }))
                }
                Ok(None) => Err(match &args.transaction_id {
                    Some(id) => format!(
                        "nothing to roll back for `{id}`: no such transaction, or it was already rolled back"
                    ),
                    None => nothing(),
                }),
                Err(JournalError::Changed { run_id, files }) => Err(format!(
                    "rollback of `{run_id}` refused: {} file(s) changed after the run wrote them, and restoring would overwrite those changes: {}. Nothing was restored; pass keep_changed to restore only the other files, or force to overwrite them",
                    files.len(),
                    files
                        .iter()
                        .map(|f| f.path.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Err(e) => Err(format!("failed to roll back: {e}")),
            }
        })
        .await
    }

    /// Runs the repository's tests in a sandbox.
    #[tool(
        name = "run_tests",
        description = "Run the repository's tests in a sandbox (a temporary copy or a Docker container, never the repository itself) and return structured failures (`nuvira test`). The server's start flags are the widest sandbox and limits a call may ask for. Cancel the call to stop the tests."
    )]
    async fn run_tests(
        &self,
        Parameters(args): Parameters<RunTestsArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<TestsOutput>, String> {
        let mut config = serde_json::Map::new();
        let fields = [
            ("framework", args.framework.map(Value::from)),
            ("command", args.command.map(Value::from)),
            ("sandbox", args.sandbox.map(Value::from)),
            ("memory", args.memory.map(Value::from)),
            ("cpus", args.cpus.map(Value::from)),
            ("pids", args.pids.map(Value::from)),
            ("timeout", args.timeout.map(Value::from)),
            ("network", args.network.map(Value::from)),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                config.insert(k.into(), v);
            }
        }
        self.policy.confine(&mut config, "run_tests")?;
        let config = nuvira_runner::TestConfig::from_value(&Value::Object(config))
            .map_err(|e| e.to_string())?;
        let repo = self.repo.to_path_buf();
        let cancel = ctx.ct.clone();
        let job = async move {
            nuvira_sandbox::remove_stale();
            let ctx = StepContext::standalone(&repo)
                .with_identity("test", "test", "")
                .with_execution(false, 1, Arc::new(TokenSignal(cancel)), None, None);
            nuvira_runner::TestModule::new()
                .run_config(&config, &ctx)
                .await
        };
        let outcome = self.work.track_future(job).await;
        let result = match outcome {
            Ok(r) => r,
            Err(ModuleError::Recoverable(failure)) => match failure.output.as_deref() {
                Some(StepOutput::Test(result)) => result.clone(),
                _ => return Err(failure.message.clone()),
            },
            Err(ModuleError::Fatal(failure)) => return Err(failure.message.clone()),
            Err(ModuleError::Cancelled) => {
                return Err(
                    "interrupted: the test run was cancelled and its sandbox removed".into(),
                );
            }
            Err(other) => return Err(other.to_string()),
        };
        Ok(Json(TestsOutput {
            success: result.success,
            passed: u64::from(result.passed),
            failed: u64::from(result.failed),
            skipped: u64::from(result.skipped),
            failures: result.failures.iter().map(to_value).collect(),
            result: to_value(&result),
        }))
    }

    /// Runs a plan through the whole pipeline.
    #[tool(
        name = "run_plan",
        description = "Run a plan (inspect, edit, test, recover, verify, report) and return its report. Progress comes as MCP progress notifications when the call has a progress token. Cancelling the call stops the run and rolls back its edits, like Ctrl-C on `nuvira run`."
    )]
    async fn run_plan(
        &self,
        Parameters(args): Parameters<RunPlanArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Json<RunOutput>, String> {
        let source = self.plan_source(&args.plan)?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let progress = ctx.meta.get_progress_token().map(|token| {
            let peer = ctx.peer.clone();
            tokio::spawn(forward_progress(rx, peer, token, ctx.ct.clone()))
        });
        let run_ctx = RunContext {
            repo: self.repo.to_path_buf(),
            policy: self.policy.clone(),
            cancel: ctx.ct.clone(),
            events: Arc::new(ChannelSink(tx)),
            dry_run: args.dry_run,
        };
        let host = self.host.clone();
        let job = async move { host.run(&source, run_ctx).await };
        let out = self.work.track_future(job).await;
        // Every notification goes out before the result; a cancelled call (or a closed
        // session) has no one to send them to.
        if let Some(mut p) = progress {
            tokio::select! {
                _ = &mut p => {}
                () = ctx.ct.cancelled() => p.abort(),
            }
        }
        let v = out.map_err(ToolError::into_text)?;
        Ok(Json(RunOutput {
            run_id: v["run_id"].as_str().unwrap_or_default().to_owned(),
            status: v["status"].as_str().unwrap_or_default().to_owned(),
            exit_code: v["exit_code"].as_u64().unwrap_or(1),
            report: v.get("report").cloned().unwrap_or(Value::Null),
        }))
    }

    /// Builds a report from a stored event file.
    #[tool(
        name = "report",
        description = "Build a run's report from its JSONL event file in the repository (`nuvira report`): json (the default), text, markdown, github, sarif, junit or html."
    )]
    async fn report(
        &self,
        Parameters(args): Parameters<ReportArgs>,
    ) -> Result<Json<ReportOutput>, String> {
        let path = policy::confine_path(&self.repo, &args.events, "events")?;
        let name = args.format.unwrap_or_else(|| "json".into());
        let format: nuvira_report::Format = name.parse().map_err(|e| format!("failed to {e}"))?;
        let shown = args.events.clone();
        Self::blocking("build the report", move || {
            let report = nuvira_report::read_jsonl_file(&path).map_err(|e| format!("failed to {e}"))?;
            if report.events == 0 && report.unknown_event_types.is_empty() {
                return Err(format!(
                    "{shown} holds no events: pass the file a run wrote with `nuvira run --events FILE`"
                ));
            }
            let text = nuvira_report::render(&report, format);
            let report = if name == "json" {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            } else {
                Value::String(text)
            };
            Ok(Json(ReportOutput {
                format: name,
                report,
            }))
        })
        .await
    }
}

/// A tokio token as the API's cancel signal.
struct TokenSignal(CancellationToken);

#[async_trait::async_trait]
impl nuvira_api::CancelSignal for TokenSignal {
    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
    async fn cancelled(&self) {
        self.0.cancelled().await;
    }
}

/// Events into a channel, for the progress forwarder.
struct ChannelSink(tokio::sync::mpsc::UnboundedSender<(Option<String>, EventKind)>);

impl EventSink for ChannelSink {
    fn emit(&self, step_id: Option<&str>, kind: EventKind) {
        let _ = self.0.send((step_id.map(str::to_owned), kind));
    }
}

/// Turns a run's events into `notifications/progress`: one per step that starts or ends,
/// counting finished steps against the plan's.
async fn forward_progress(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(Option<String>, EventKind)>,
    peer: rmcp::Peer<RoleServer>,
    token: rmcp::model::ProgressToken,
    cancel: CancellationToken,
) {
    let mut done = 0u32;
    let mut total = None;
    while let Some((step, kind)) = rx.recv().await {
        let step = step.unwrap_or_default();
        let message = match &kind {
            EventKind::RunStarted { plan, .. } => {
                total = Some(f64::from(
                    u32::try_from(plan.steps.len()).unwrap_or(u32::MAX),
                ));
                format!("run started: {} step(s)", plan.steps.len())
            }
            EventKind::StepStarted { .. } => format!("step `{step}` started"),
            EventKind::StepSucceeded { .. } => {
                done += 1;
                format!("step `{step}` succeeded")
            }
            EventKind::StepFailed { .. } => {
                done += 1;
                format!("step `{step}` failed")
            }
            EventKind::StepSkipped { .. } => {
                done += 1;
                format!("step `{step}` skipped")
            }
            EventKind::EditWritten { .. } => format!("step `{step}` wrote its edits"),
            EventKind::EditRolledBack { paths, .. } => {
                format!("rolled back {} file(s)", paths.len())
            }
            EventKind::RunCompleted { .. } => "run completed".into(),
            EventKind::RunCancelled { .. } => "run cancelled".into(),
            _ => continue,
        };
        let mut param =
            ProgressNotificationParam::new(token.clone(), f64::from(done)).with_message(message);
        if let Some(t) = total {
            param = param.with_total(t);
        }
        // A send waits for the transport; once the call is cancelled or the session closed
        // nothing is sent any more (the channel is unbounded, so the run never waits on it).
        tokio::select! {
            _ = peer.notify_progress(param) => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// The URI of the report of the event file at `rel` (relative to the repository).
fn report_uri(rel: &str) -> String {
    format!("nuvira://reports/{rel}")
}

/// The run id of a run history event file (`.nuvira/runs/<id>/events.jsonl`), when `rel` is one.
fn run_of(rel: &str) -> Option<&str> {
    let id = rel
        .strip_prefix(".nuvira/runs/")?
        .strip_suffix("/events.jsonl")?;
    nuvira_workspace::is_run_id(id).then_some(id)
}

impl NuviraServer {
    /// The event files under `.nuvira/` (JSONL files a run wrote with `--events`, and the run
    /// history's when it exists), relative to the repository.
    fn event_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        let state = self.repo.join(".nuvira");
        let mut stack = vec![state];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                let path = e.path();
                if ft.is_dir() && !path.ends_with("journal") {
                    stack.push(path);
                } else if ft.is_file()
                    && path.extension().is_some_and(|x| x == "jsonl")
                    && let Ok(rel) = path.strip_prefix(&*self.repo)
                {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        out
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for NuviraServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("nuvira", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "Nuvira works on the repository {}: preview_edits then apply_edits (all-or-nothing, undone with rollback), run_tests in a sandbox, run_plan for a whole validated plan. Paths are relative to the repository.",
            self.repo.display()
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources: Vec<Resource> = self
            .event_files()
            .into_iter()
            .map(|rel| {
                let mut r = Resource::new(report_uri(&rel), format!("report of {rel}"))
                    .with_description(format!(
                        "The report (ExecutionReport JSON) of the run whose events are in `{rel}`"
                    ));
                r.mime_type = Some("application/json".into());
                r
            })
            .collect();
        let mut resources = resources;
        // The run history under its own names: nuvira://runs/<id>.
        for rel in self.event_files() {
            if let Some(id) = run_of(&rel) {
                let mut r = Resource::new(format!("nuvira://runs/{id}"), format!("run {id}"))
                    .with_description(format!(
                        "The report (ExecutionReport JSON) of recorded run `{id}`"
                    ));
                r.mime_type = Some("application/json".into());
                resources.push(r);
            }
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let run_file;
        let rel = if let Some(id) = request.uri.strip_prefix("nuvira://runs/") {
            if !nuvira_workspace::is_run_id(id) {
                return Err(ErrorData::resource_not_found(
                    format!(
                        "`{}` is not a run id (run ids look like `run-1764580000-0a1f`; list the resources)",
                        nuvira_api::text::escape_control(id)
                    ),
                    None,
                ));
            }
            run_file = format!(".nuvira/runs/{id}/events.jsonl");
            run_file.as_str()
        } else if let Some(rel) = request.uri.strip_prefix("nuvira://reports/") {
            rel
        } else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource `{}`: this server has nuvira://reports/<event file> and nuvira://runs/<run id>",
                    nuvira_api::text::escape_control(&request.uri)
                ),
                None,
            ));
        };
        if !self.event_files().iter().any(|f| f == rel) {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no event file `{}` under .nuvira/ in the repository",
                    nuvira_api::text::escape_control(rel)
                ),
                None,
            ));
        }
        let path = self.repo.join(rel);
        let report = Self::blocking("read the report", move || {
            nuvira_report::read_jsonl_file(&path).map_err(|e| format!("failed to {e}"))
        })
        .await
        .map_err(|message| ErrorData::internal_error(message, None))?;
        let text = nuvira_report::render(&report, nuvira_report::Format::Json);
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }
}

/// The JSON object of a failed plan load or validation, for hosts: `{"valid": false, ...}`.
pub fn invalid_plan(steps: usize, problems: Vec<Value>) -> Value {
    json!({ "valid": false, "steps": steps, "errors": problems })
}
