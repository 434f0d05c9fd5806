//! The `mcp` module: a plan step that calls a tool of another MCP server.
//!
//! ```yaml
//! mcp_servers:
//!   everything: { command: npx, args: ["-y", "@modelcontextprotocol/server-everything"] }
//!   local: { url: "http://127.0.0.1:8931/mcp" }
//! steps:
//!   - id: echo
//!     module: mcp
//!     config: { server: everything, tool: echo, arguments: { message: hi }, timeout: 30s }
//! ```
//!
//! Servers are declared once per plan (`mcp_servers:`, or inline as `server: {command: ...}`)
//! and started on first use; the steps of a run share one session per server, and a command's
//! server runs in a process group of its own, killed (with whatever the server started) when
//! the run's engine goes away, when the next run starts, when a call times out or is cancelled
//! (a server that does not answer is not trusted with the next call).
//!
//! What a server returns is untrusted data, like a repository's text: its text is capped
//! (`max_output`, default [`DEFAULT_MAX_OUTPUT`] bytes), stripped of terminal control
//! characters and wrapped by the injection guard ([`nuvira_api::llm::guard::untrusted`]) before
//! it becomes the step's output `{"server", "tool", "text", "structured", "truncated"}`.
//!
//! HTTP servers (`url:`, streamable HTTP, see [`crate::http`]) must be on loopback, or on a
//! host listed in `NUVIRA_MCP_ALLOWED_HOSTS` (comma-separated), which the user sets: a plan
//! cannot widen it. The host is checked when the plan is validated and again before the
//! first request; redirects are not followed and no proxy is used. Timeouts, cancellation,
//! the output cap and the injection guard are the same as for a command's server; a
//! cancelled or timed-out call closes the session (`DELETE`), as it kills a command.

use async_trait::async_trait;
use nuvira_api::{
    ConfigError, ErrorCategory, ExecutionPlan, Module, ModuleError, PlanStep, StepContext,
    StepOutput,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// The most text a step keeps from a tool's result unless `max_output` says otherwise.
pub const DEFAULT_MAX_OUTPUT: usize = 256 * 1024;
/// The largest `max_output` a step may set.
pub const MAX_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;
/// How long a call may take unless the step's `timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to start and answer `initialize`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The variable listing the hosts (beyond loopback) HTTP servers may be on.
pub const ALLOWED_HOSTS_ENV: &str = "NUVIRA_MCP_ALLOWED_HOSTS";

/// How to reach a server: a command to start (stdio), or a streamable HTTP URL.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The program to start; it speaks MCP on its stdin and stdout.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP endpoint instead of a command.
    #[serde(default)]
    pub url: Option<String>,
}

impl ServerSpec {
    /// Parses and checks a spec (`what` names it in messages).
    ///
    /// # Errors
    /// A message saying what is wrong and what to write.
    pub fn parse(value: &Value, what: &str) -> Result<Self, String> {
        let spec: Self = serde_json::from_value(value.clone()).map_err(|e| {
            format!("{what}: {e}; write `{{command: PROGRAM, args: [...], env: {{...}}}}` or `{{url: http://127.0.0.1:PORT/mcp}}`")
        })?;
        match (&spec.command, &spec.url) {
            (Some(c), None) if !c.trim().is_empty() => Ok(spec),
            (None, Some(url)) => {
                check_url(url).map_err(|e| format!("{what}: {e}"))?;
                Ok(spec)
            }
            (Some(_), Some(_)) => Err(format!("{what}: give `command` or `url`, not both")),
            _ => Err(format!(
                "{what}: no `command` (a program speaking MCP on stdio) or `url` (streamable HTTP)"
            )),
        }
    }
}

/// Checks that an HTTP server URL is on loopback or an allowed host.
///
/// # Errors
/// What is wrong with the URL.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("`{url}` is not an http:// or https:// URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default().to_owned()
    } else {
        authority.split(':').next().unwrap_or_default().to_owned()
    };
    let host = host.to_ascii_lowercase();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let allowed = std::env::var(ALLOWED_HOSTS_ENV).unwrap_or_default();
    if loopback
        || allowed
            .split(',')
            .map(str::trim)
            .any(|h| !h.is_empty() && h.eq_ignore_ascii_case(&host))
    {
        Ok(())
    } else {
        Err(format!(
            "the MCP server host `{host}` is not allowed: only loopback (127.0.0.1, ::1, localhost) unless the user lists it in {ALLOWED_HOSTS_ENV}"
        ))
    }
}

/// A step's config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepConfig {
    server: Value,
    tool: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default, with = "nuvira_api::duration::serde_opt")]
    timeout: Option<Duration>,
    #[serde(default)]
    max_output: Option<usize>,
}

fn step_config(step: &PlanStep) -> Result<StepConfig, ConfigError> {
    let c: StepConfig = step.config_as().map_err(|e| {
        e.map_message(|m| format!("config: {m}; an mcp step needs `server` and `tool`"))
    })?;
    if c.tool.trim().is_empty() {
        return Err(ConfigError::new(&step.id, "config.tool: the tool name is empty").at("tool"));
    }
    match &c.server {
        Value::String(name) if !name.trim().is_empty() => {}
        Value::Object(_) => {
            ServerSpec::parse(&c.server, "config.server")
                .map_err(|m| ConfigError::new(&step.id, m).at("server"))?;
        }
        _ => {
            return Err(ConfigError::new(
                &step.id,
                "config.server: name a server of `mcp_servers:`, or give `{command: ...}` or `{url: ...}`",
            )
            .at("server"));
        }
    }
    if let Some(n) = c.max_output
        && (n == 0 || n > MAX_OUTPUT_LIMIT)
    {
        return Err(ConfigError::new(
            &step.id,
            format!("config.max_output: {n} bytes; give 1 to {MAX_OUTPUT_LIMIT}"),
        )
        .at("max_output"));
    }
    if c.timeout.is_some_and(|t| t.is_zero()) {
        return Err(ConfigError::new(&step.id, nuvira_api::duration::ZERO_TIMEOUT).at("timeout"));
    }
    Ok(c)
}

/// The servers of `plan` (`mcp_servers:`), parsed.
///
/// # Errors
/// One message per server whose spec is wrong.
pub fn plan_servers(plan: &ExecutionPlan) -> Result<BTreeMap<String, ServerSpec>, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, v) in &plan.mcp_servers {
        match ServerSpec::parse(v, &format!("mcp_servers.{name}")) {
            Ok(s) => {
                out.insert(name.clone(), s);
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// A problem of a plan's MCP steps: the step (if any) and the message.
pub type McpProblem = (Option<String>, String);

/// Checks without starting anything that every `mcp` step names a declared server and that
/// every declared server's spec is valid.
///
/// A server whose spec is wrong (a URL on a host that is not allowed, say) is reported on
/// each step that uses it, naming the step; once, without a step, when no step does.
pub fn check_plan(plan: &ExecutionPlan) -> Vec<McpProblem> {
    let mut out: Vec<McpProblem> = Vec::new();
    let mcp_steps: Vec<&PlanStep> = plan.steps.iter().filter(|s| s.module == "mcp").collect();
    for (name, v) in &plan.mcp_servers {
        let Err(e) = ServerSpec::parse(v, &format!("mcp_servers.{name}")) else {
            continue;
        };
        let users: Vec<&str> = mcp_steps
            .iter()
            .filter(|s| step_server_name(s) == Some(name.as_str()))
            .map(|s| s.id.as_str())
            .collect();
        for id in &users {
            out.push((Some((*id).to_owned()), format!("step `{id}` (mcp): {e}")));
        }
        if users.is_empty() {
            out.push((None, e));
        }
    }
    for step in mcp_steps {
        if let Some(name) = step_server_name(step)
            && !plan.mcp_servers.contains_key(name)
        {
            let known: Vec<&str> = plan.mcp_servers.keys().map(String::as_str).collect();
            out.push((
                Some(step.id.clone()),
                format!(
                    "step `{}` (mcp): server `{name}` is not declared in `mcp_servers:`{}",
                    step.id,
                    if known.is_empty() {
                        " (the plan declares none)".to_owned()
                    } else {
                        format!(" (declared: {})", known.join(", "))
                    }
                ),
            ));
        }
    }
    out
}

/// The server a step names (`server: NAME`), if it names one.
fn step_server_name(step: &PlanStep) -> Option<&str> {
    match step.config.get("server") {
        Some(Value::String(name)) => Some(name),
        _ => None,
    }
}

/// A running session with a server.
type Session = RunningService<RoleClient, ()>;

/// The process group of a command's server (its own, see [`connect`]), killed when this
/// is dropped: the server's children (`npx` starting `node`, a shell script's jobs) go with
/// it, even those that would outlive it.
#[derive(Debug)]
struct ProcessGroup(nix::unistd::Pid);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // The group is ours while any of its members runs (a process id is not reused while
        // a group has it); once all are gone this is a harmless ESRCH.
        let _ = nix::sys::signal::killpg(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

/// A session with a server; for a command's server, also its process group, killed when the
/// connection is dropped or [closed](Connection::close).
#[derive(Debug)]
pub struct Connection {
    session: Session,
    group: Option<ProcessGroup>,
}

impl std::ops::Deref for Connection {
    type Target = Session;
    fn deref(&self) -> &Session {
        &self.session
    }
}

impl Connection {
    /// Ends the session (stdin closed, or the HTTP session deleted), then kills what is left
    /// of the server's process group.
    pub async fn close(self) {
        let Self { session, group } = self;
        let _ = session.cancel().await;
        drop(group);
    }
}

/// Starts a server and completes `initialize`. A command's server runs in a process group of
/// its own, killed with the [`Connection`].
///
/// # Errors
/// Why it did not start.
pub async fn connect(spec: &ServerSpec, name: &str) -> Result<Connection, String> {
    let start = async {
        if let Some(url) = &spec.url {
            let session = connect_http(url, name).await?;
            return Ok(Connection {
                session,
                group: None,
            });
        }
        let program = spec.command.clone().unwrap_or_default();
        let mut cmd = tokio::process::Command::new(&program);
        cmd.args(&spec.args)
            .envs(&spec.env)
            .kill_on_drop(true)
            .process_group(0);
        let (transport, _stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("failed to start MCP server `{name}` (`{program}`): {e}"))?;
        // Held from here on, so a server that fails `initialize` or times out is killed too.
        let group = transport
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(|id| ProcessGroup(nix::unistd::Pid::from_raw(id)));
        let session = ()
            .serve(transport)
            .await
            .map_err(|e| format!("MCP server `{name}` did not complete `initialize`: {e}"))?;
        Ok(Connection { session, group })
    };
    match tokio::time::timeout(START_TIMEOUT, start).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "MCP server `{name}` did not answer `initialize` within {}s",
            START_TIMEOUT.as_secs()
        )),
    }
}

/// Opens a streamable HTTP session with the server at `url` and completes `initialize`. The
/// host is checked again here (the allowed list is the user's, read now), before anything is
/// sent.
async fn connect_http(url: &str, name: &str) -> Result<Session, String> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    check_url(url).map_err(|e| format!("MCP server `{name}`: {e}"))?;
    let client = crate::http::HttpClient::new()
        .map_err(|e| format!("MCP server `{name}`: failed to set up the HTTP client: {e}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    // A server that drops the stream of a call fails the call; it is not waited for to come back.
    config.retry_config = Arc::new(rmcp::transport::common::client_side_sse::NeverRetry::default());
    // A session the server forgot is a server that restarted: the step fails rather than
    // re-running `initialize` behind the plan's back.
    config.reinit_on_expired_session = false;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    ().serve(transport).await.map_err(|e| {
        format!(
            "MCP server `{name}` ({url}) did not complete `initialize`: {}",
            nuvira_api::text::escape_control(&e.to_string())
        )
    })
}

/// A tool as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// The server's name in `mcp_servers:`.
    pub server: String,
    /// The tool.
    pub name: String,
    /// What it does (the server's words, untrusted).
    pub description: String,
    /// Its input schema.
    pub input_schema: Value,
}

impl ToolInfo {
    fn from_tool(server: &str, t: &Tool) -> Self {
        Self {
            server: server.to_owned(),
            name: t.name.to_string(),
            description: t.description.as_deref().unwrap_or_default().to_owned(),
            input_schema: Value::Object((*t.input_schema).clone()),
        }
    }
}

/// Starts every server of the plan, lists their tools and checks that each `mcp` step's tool
/// exists (`nuvira validate --check-mcp`). The servers are stopped before it returns.
pub async fn check_servers(plan: &ExecutionPlan) -> (Vec<ToolInfo>, Vec<McpProblem>) {
    let mut problems = check_plan(plan);
    let Ok(servers) = plan_servers(plan) else {
        return (Vec::new(), problems);
    };
    let mut tools = Vec::new();
    let mut by_server: HashMap<String, Vec<String>> = HashMap::new();
    for (name, spec) in &servers {
        match list_tools(spec, name).await {
            Ok(list) => {
                by_server.insert(name.clone(), list.iter().map(|t| t.name.clone()).collect());
                tools.extend(list);
            }
            Err(e) => problems.push((None, e)),
        }
    }
    for step in plan.steps.iter().filter(|s| s.module == "mcp") {
        let (Some(Value::String(server)), Some(Value::String(tool))) =
            (step.config.get("server"), step.config.get("tool"))
        else {
            continue;
        };
        if let Some(names) = by_server.get(server)
            && !names.contains(tool)
        {
            problems.push((
                Some(step.id.clone()),
                format!(
                    "step `{}` (mcp): server `{server}` has no tool `{tool}` (it has: {})",
                    step.id,
                    names.join(", ")
                ),
            ));
        }
    }
    (tools, problems)
}

/// The tools of one server.
///
/// # Errors
/// Why the server could not be asked.
pub async fn list_tools(spec: &ServerSpec, name: &str) -> Result<Vec<ToolInfo>, String> {
    let session = connect(spec, name).await?;
    let listed = tokio::time::timeout(DEFAULT_TIMEOUT, session.list_all_tools()).await;
    session.close().await;
    match listed {
        Ok(Ok(tools)) => Ok(tools.iter().map(|t| ToolInfo::from_tool(name, t)).collect()),
        Ok(Err(e)) => Err(format!("MCP server `{name}` did not list its tools: {e}")),
        Err(_) => Err(format!(
            "MCP server `{name}` did not list its tools within {}s",
            DEFAULT_TIMEOUT.as_secs()
        )),
    }
}

/// The `mcp` module. One per engine: the sessions it starts live as long as it (or until the
/// next run starts), and each server's process group is killed with them.
#[derive(Default)]
pub struct McpModule {
    sessions: Mutex<HashMap<String, Arc<Connection>>>,
}

impl McpModule {
    /// A module with no sessions yet.
    pub fn new() -> Self {
        Self::default()
    }

    async fn session(
        &self,
        run_id: &str,
        name: &str,
        spec: &ServerSpec,
    ) -> Result<(String, Arc<Connection>), String> {
        let key = format!(
            "{run_id}\u{0}{name}\u{0}{}",
            serde_json::to_string(
                &json!({"c": spec.command, "a": spec.args, "e": spec.env, "u": spec.url})
            )
            .unwrap_or_default()
        );
        let mut sessions = self.sessions.lock().await;
        // A new run: the servers of earlier runs are stopped.
        let prefix = format!("{run_id}\u{0}");
        sessions.retain(|k, _| k.starts_with(&prefix));
        if let Some(s) = sessions.get(&key)
            && !s.is_closed()
        {
            return Ok((key, s.clone()));
        }
        let session = Arc::new(connect(spec, name).await?);
        sessions.insert(key.clone(), session.clone());
        Ok((key, session))
    }

    async fn forget(&self, key: &str) {
        let removed = self.sessions.lock().await.remove(key);
        if let Some(s) = removed {
            // The last reference closes the transport and kills the process group.
            if let Ok(s) = Arc::try_unwrap(s) {
                s.close().await;
            }
        }
    }
}

/// The text blocks of a result, joined.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
fn cap(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (
        format!(
            "{}\n[... {} more bytes cut: the step keeps at most {max} (config.max_output)]",
            &text[..end],
            text.len() - end
        ),
        true,
    )
}

/// The step's output from a tool result: text capped, escaped and guarded; structured
/// content kept only when it fits the cap.
pub fn output_of(server: &str, tool: &str, result: &CallToolResult, max: usize) -> Value {
    let (text, mut truncated) = cap(&text_of(result), max);
    let text = nuvira_api::text::escape_control_keep_lines(&text).into_owned();
    let structured = match &result.structured_content {
        Some(v) if serde_json::to_string(v).map_or(usize::MAX, |s| s.len()) <= max => v.clone(),
        Some(_) => {
            truncated = true;
            Value::Null
        }
        None => Value::Null,
    };
    json!({
        "server": server,
        "tool": tool,
        "is_error": result.is_error.unwrap_or(false),
        "text": nuvira_api::llm::guard::untrusted(&format!("mcp:{server}/{tool}"), &text),
        "structured": structured,
        "truncated": truncated,
    })
}

#[async_trait]
impl Module for McpModule {
    fn name(&self) -> &str {
        "mcp"
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        step_config(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let config = step_config(step).map_err(|e| ModuleError::invalid_config(e.to_string()))?;
        let (name, spec) =
            match &config.server {
                Value::String(name) => {
                    let declared = ctx.plan().and_then(|p| p.mcp_servers.get(name)).ok_or_else(|| {
                    ModuleError::invalid_config(format!(
                        "step `{}` (mcp): server `{name}` is not declared in `mcp_servers:`",
                        step.id
                    ))
                })?;
                    let spec = ServerSpec::parse(declared, &format!("mcp_servers.{name}"))
                        .map_err(ModuleError::invalid_config)?;
                    (name.clone(), spec)
                }
                inline => (
                    "inline".to_owned(),
                    ServerSpec::parse(inline, "config.server")
                        .map_err(ModuleError::invalid_config)?,
                ),
            };
        if ctx.dry_run() {
            return Ok(StepOutput::Value(json!({
                "server": name, "tool": config.tool, "dry_run": true,
                "text": "", "structured": null, "truncated": false,
            })));
        }
        let cancel = ctx.cancel().clone();
        let (key, session) = tokio::select! {
            r = self.session(ctx.run_id(), &name, &spec) => r.map_err(|m| {
                ModuleError::fatal(ErrorCategory::EnvironmentUnavailable, m)
            })?,
            () = cancel.cancelled() => return Err(ModuleError::Cancelled),
        };
        let mut params = CallToolRequestParams::new(config.tool.clone());
        if let Some(args) = config.arguments.clone() {
            params = params.with_arguments(args);
        }
        let timeout = config.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let call = session.call_tool(params);
        let outcome = tokio::select! {
            r = tokio::time::timeout(timeout, call) => r,
            () = cancel.cancelled() => {
                drop(session);
                self.forget(&key).await;
                return Err(ModuleError::Cancelled);
            }
        };
        drop(session);
        let tool = &config.tool;
        let result = match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                // A server that broke the session (it crashed, or spoke nonsense) is started
                // afresh by the next call.
                self.forget(&key).await;
                return Err(ModuleError::recoverable(
                    ErrorCategory::EnvironmentUnavailable,
                    format!(
                        "MCP server `{name}` failed during the call to `{tool}`: {}",
                        match e {
                            rmcp::ServiceError::TransportClosed =>
                                "the server closed the connection (or exited) before it answered"
                                    .to_owned(),
                            e => nuvira_api::text::escape_control(&e.to_string()).into_owned(),
                        }
                    ),
                ));
            }
            Err(_) => {
                self.forget(&key).await;
                return Err(ModuleError::recoverable(
                    ErrorCategory::Timeout,
                    format!(
                        "MCP server `{name}` did not answer the call to `{tool}` within {}s; the server was stopped (raise `timeout` in the step's config if the tool is slow)",
                        timeout.as_secs_f64()
                    ),
                ));
            }
        };
        let output = output_of(
            &name,
            tool,
            &result,
            config.max_output.unwrap_or(DEFAULT_MAX_OUTPUT),
        );
        if result.is_error == Some(true) {
            let (text, _) = cap(&text_of(&result), 2000);
            let mut failure = nuvira_api::Failure::new(
                ErrorCategory::Unknown,
                format!(
                    "MCP tool `{tool}` of server `{name}` returned an error: {}",
                    nuvira_api::text::escape_control_keep_lines(&text)
                ),
            );
            failure.output = Some(Box::new(StepOutput::Value(output)));
            return Err(ModuleError::Recoverable(failure));
        }
        Ok(StepOutput::Value(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_servers_must_be_on_loopback_unless_the_user_allows_the_host() {
        assert!(check_url("http://127.0.0.1:8080/mcp").is_ok());
        assert!(check_url("http://[::1]:8080/mcp").is_ok());
        assert!(check_url("http://localhost/mcp").is_ok());
        assert!(check_url("http://example.com/mcp").is_err());
        // 0.0.0.0 reaches local listeners, but it is not loopback: refused unless listed.
        assert!(check_url("http://0.0.0.0:8080/mcp").is_err());
        // The user part of a URL does not make a host loopback.
        assert!(check_url("http://127.0.0.1@evil.example/mcp").is_err());
        assert!(check_url("ftp://127.0.0.1/").is_err());
    }

    #[test]
    fn a_huge_text_is_capped_on_a_character_boundary() {
        let (t, cut) = cap(&"é".repeat(100), 11);
        assert!(cut);
        assert!(t.starts_with("ééééé\n[... "), "{t}");
    }
}
