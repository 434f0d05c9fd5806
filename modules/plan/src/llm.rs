//! [`LlmPlanner`]: asks a model for an [`ExecutionPlan`] as JSON under a JSON Schema.

use nuvira_api::ExecutionPlan;
#[cfg(feature = "llm")]
use nuvira_api::{
    ChatMessage, EventKind, EventSink, LlmClient, LlmRequest, NullSink, PlanError, PlanRequest,
    Planner, async_trait,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The request name of a plan.
pub const EXECUTION_PLAN: &str = "execution_plan";

/// Extra validation of a parsed plan (e.g. the engine's, with its module registry): the
/// problems, empty when the plan is fine.
pub type PlanValidator = Arc<dyn Fn(&ExecutionPlan) -> Vec<String> + Send + Sync>;

/// The JSON Schema of an [`ExecutionPlan`], derived from the type (`schemars`), so that it
/// accepts the shape `nuvira validate` accepts: `goal` optional, `timeout` as `"1h30m"`,
/// `"90s"`, `"500ms"` or seconds, the `dependsOn`, `estimatedComplexity` and
/// `suggestedProvider` spellings, no unknown keys, at least one step. What needs the module
/// registry or the whole graph (unknown modules, module config, dangling references, cycles)
/// is checked after parsing ([`check_plan`], the engine's validation). Subschemas are inlined
/// (no `$ref`), which every model provider's structured output reads.
pub fn plan_schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.into_root_schema_for::<ExecutionPlan>().to_value()
}

/// The graph problems of a plan: empty or invalid ids, duplicate ids, dependencies on unknown
/// steps or on the step itself, and cycles (naming the steps on them).
pub fn check_plan(plan: &ExecutionPlan) -> Vec<String> {
    let mut problems = Vec::new();
    if plan.steps.is_empty() {
        problems.push("the plan has no steps".to_owned());
    }
    let mut seen = HashSet::new();
    for (i, s) in plan.steps.iter().enumerate() {
        if s.id.is_empty()
            || !s
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            problems.push(format!(
                "steps[{i}].id `{}` is invalid: use letters, digits, `_`, `.` and `-`",
                s.id
            ));
        }
        if !seen.insert(s.id.as_str()) {
            problems.push(format!("steps[{i}].id `{}` is used twice", s.id));
        }
    }
    let ids: HashSet<&str> = plan.steps.iter().map(|s| s.id.as_str()).collect();
    for s in &plan.steps {
        for d in &s.depends_on {
            if d == &s.id {
                problems.push(format!("step `{}` depends on itself", s.id));
            } else if !ids.contains(d.as_str()) {
                problems.push(format!(
                    "step `{}` depends on `{d}`, which is not a step",
                    s.id
                ));
            }
        }
    }
    if let Some(outputs) = &plan.outputs {
        for o in outputs {
            if !ids.contains(o.as_str()) {
                problems.push(format!("output `{o}` is not a step"));
            }
        }
    }
    // Kahn's algorithm over the known edges; what is left is on or behind a cycle.
    let mut indegree: HashMap<&str, usize> = HashMap::new();
    for s in &plan.steps {
        let n = s
            .depends_on
            .iter()
            .filter(|d| ids.contains(d.as_str()) && **d != s.id)
            .count();
        indegree.insert(s.id.as_str(), n);
    }
    let mut ready: Vec<&str> = indegree
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| *id)
        .collect();
    while let Some(id) = ready.pop() {
        indegree.remove(id);
        for s in &plan.steps {
            if s.depends_on.iter().any(|d| d == id)
                && let Some(n) = indegree.get_mut(s.id.as_str())
            {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    ready.push(s.id.as_str());
                }
            }
        }
    }
    if !indegree.is_empty() {
        let mut left: Vec<&str> = indegree.into_keys().collect();
        left.sort_unstable();
        problems.push(format!(
            "the steps {} form a dependency cycle",
            left.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    problems
}

#[cfg(feature = "llm")]
const PLAN_SYSTEM: &str = "You plan coding work for Nuvira, which runs a plan as a dependency graph of steps. \
Answer only with a JSON object following the execution_plan schema: {\"goal\", \"steps\": [{\"id\", \"module\", \
\"description\", \"depends_on\": [ids], \"config\": {...}}], \"estimated_complexity\"}. Modules: \
`inspect` (config {\"keywords\": [words from the goal]}) finds the relevant files; \
`edit` (config {\"instructions\": \"what to change\"}) has a model write validated edits, and must depend on an inspect step; \
`test` (config {}) runs the project's tests in the run's sandbox (no network, no host mounts); \
`verify` checks the result; `report` writes the report and comes last. \
Typical shape: inspect → edit → test → verify → report. Ids use letters, digits, `_`, `.`, `-` and are unique; \
every dependency names an earlier step; no cycles.";

#[cfg(feature = "llm")]
/// Plans a goal with a model.
///
/// Sends the goal (and the file tree and context, as untrusted data) asking for JSON under the
/// [`plan_schema`] (request name `execution_plan`), parses the answer, and checks it with
/// [`check_plan`] and the validator given with [`with_validator`](Self::with_validator) (the
/// engine's validation). On problems it shows the model the list and asks once more; a second
/// invalid answer fails with [`PlanError::Invalid`] listing them. Emits `plan:started`,
/// `plan:step-created` for each step and `plan:completed` to the sink given with
/// [`with_events`](Self::with_events).
///
/// The plan is model output, as untrusted as the goal and files that steered it: a caller that
/// runs it should first narrow what its steps may do on the machine (`nuvira::model_plan::narrow`
/// in the `nuvira` crate, which `nuvira run --planner llm` calls): the run's sandbox, no
/// network, no host mounts.
#[derive(Clone)]
pub struct LlmPlanner {
    llm: Arc<dyn LlmClient>,
    events: Arc<dyn EventSink>,
    validator: Option<PlanValidator>,
    mcp: Option<Arc<McpTools>>,
}

#[cfg(feature = "llm")]
/// The MCP servers a model's plan may call and their tools ([`LlmPlanner::with_mcp_tools`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpTools {
    /// The servers, as a plan's `mcp_servers:` declares them: they become the plan's servers,
    /// whatever servers the model's answer names (a model cannot start a program of its own).
    pub servers: std::collections::BTreeMap<String, Value>,
    /// Their tools.
    pub tools: Vec<McpToolHint>,
}

#[cfg(feature = "llm")]
/// One tool of an MCP server, as the model is shown it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolHint {
    /// The server's name in `mcp_servers:`.
    pub server: String,
    /// The tool's name.
    pub name: String,
    /// What the server says it does (untrusted text).
    pub description: String,
    /// The tool's input schema.
    pub input_schema: Value,
}

#[cfg(feature = "llm")]
/// The most bytes of tool descriptions and schemas put in a planning prompt.
const MCP_TOOLS_PROMPT_BYTES: usize = 32 * 1024;

#[cfg(feature = "llm")]
impl std::fmt::Debug for LlmPlanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmPlanner")
            .field("model", &self.llm.model())
            .field("validator", &self.validator.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "llm")]
impl LlmPlanner {
    /// A planner asking `llm`.
    pub fn new(llm: Arc<dyn LlmClient>) -> Self {
        Self {
            llm,
            events: Arc::new(NullSink),
            validator: None,
            mcp: None,
        }
    }

    /// Builder-style: the MCP tools the model may plan `mcp` steps for. Their names,
    /// descriptions and input schemas go into the prompt as untrusted data (at most 32 KiB),
    /// and the planned plan gets `tools.servers` as its `mcp_servers`.
    #[must_use]
    pub fn with_mcp_tools(mut self, tools: McpTools) -> Self {
        self.mcp = Some(Arc::new(tools));
        self
    }

    /// Builder-style: where `plan:*` events go.
    #[must_use]
    pub fn with_events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.events = events;
        self
    }

    /// Builder-style: extra validation (e.g. the engine's, which knows the modules).
    #[must_use]
    pub fn with_validator(mut self, validator: PlanValidator) -> Self {
        self.validator = Some(validator);
        self
    }

    fn messages(&self, request: &PlanRequest) -> Vec<ChatMessage> {
        let mut user = format!("Goal: {}\n", request.goal);
        if let Some(mcp) = self.mcp.as_deref().filter(|m| !m.tools.is_empty()) {
            let mut listed = String::new();
            for t in &mcp.tools {
                let line = serde_json::json!({
                    "server": t.server, "tool": t.name,
                    "description": t.description, "input_schema": t.input_schema,
                })
                .to_string();
                if listed.len() + line.len() > MCP_TOOLS_PROMPT_BYTES {
                    listed.push_str("(more tools left out)\n");
                    break;
                }
                listed.push_str(&line);
                listed.push('\n');
            }
            user.push_str(
                "\nModule `mcp` calls a tool of an MCP server: config {\"server\": name, \"tool\": name, \"arguments\": {...}} (arguments follow the tool's input_schema); its result is the step's output. The servers and tools available:\n",
            );
            user.push_str(&nuvira_llm::guard::untrusted("mcp-tools", &listed));
            user.push('\n');
        }
        if let Some(tree) = &request.file_tree {
            user.push_str("\nThe repository's files:\n");
            user.push_str(&nuvira_llm::guard::untrusted("file-tree", tree));
            user.push('\n');
        }
        if let Some(c) = &request.context {
            user.push_str("\nContext:\n");
            user.push_str(&nuvira_llm::guard::untrusted("context", c));
            user.push('\n');
        }
        vec![
            ChatMessage::system(nuvira_llm::guard::with_notice(PLAN_SYSTEM)),
            ChatMessage::user(user),
        ]
    }

    fn problems(&self, json: Option<&Value>, text: &str) -> Result<ExecutionPlan, Vec<String>> {
        let value = match json {
            Some(v) => v.clone(),
            None => serde_json::from_str(nuvira_llm::guard::strip_fence(text))
                .map_err(|e| vec![format!("the answer is not JSON: {e}")])?,
        };
        let plan: ExecutionPlan = serde_json::from_value(value)
            .map_err(|e| vec![format!("the answer does not follow the plan format: {e}")])?;
        let mut problems = check_plan(&plan);
        if problems.is_empty()
            && let Some(v) = &self.validator
        {
            problems = v(&plan);
        }
        if problems.is_empty() {
            Ok(plan)
        } else {
            Err(problems)
        }
    }
}

#[cfg(feature = "llm")]
#[async_trait]
impl Planner for LlmPlanner {
    fn name(&self) -> &str {
        "llm"
    }

    async fn plan(&self, request: &PlanRequest) -> Result<ExecutionPlan, PlanError> {
        if request.goal.trim().is_empty() {
            return Err(PlanError::Invalid(
                "the goal is empty: say what should change".into(),
            ));
        }
        self.events.emit(
            None,
            EventKind::PlanStarted {
                goal: request.goal.clone(),
                planner: "llm".into(),
            },
        );
        let mut messages = self.messages(request);
        let mut problems = Vec::new();
        for round in 0..2 {
            let req = LlmRequest::new(messages.clone()).with_schema(EXECUTION_PLAN, plan_schema());
            // An answer the transport could not read as JSON is an invalid plan too.
            let (answer, parsed) = match self.llm.complete(&req).await {
                Ok(r) => {
                    let parsed = self.problems(r.json.as_ref(), &r.text);
                    (r.text, parsed)
                }
                Err(nuvira_api::LlmError::InvalidOutput(m)) => (
                    String::new(),
                    Err(vec![format!("the answer is not valid JSON: {m}")]),
                ),
                Err(e) => return Err(e.into()),
            };
            match parsed {
                Ok(mut plan) => {
                    if plan.goal.trim().is_empty() {
                        plan.goal.clone_from(&request.goal);
                    }
                    // The servers are the caller's, never the model's.
                    plan.mcp_servers = self
                        .mcp
                        .as_ref()
                        .map(|m| m.servers.clone())
                        .unwrap_or_default();
                    for s in &plan.steps {
                        self.events.emit(
                            Some(&s.id),
                            EventKind::PlanStepCreated {
                                step: s.id.clone(),
                                module: s.module.clone(),
                            },
                        );
                    }
                    self.events.emit(
                        None,
                        EventKind::PlanCompleted {
                            steps: plan.steps.len(),
                            complexity: plan.estimated_complexity,
                        },
                    );
                    return Ok(plan);
                }
                Err(p) => {
                    if round == 0 {
                        messages.push(ChatMessage::assistant(answer));
                        messages.push(ChatMessage::user(format!(
                            "That plan is invalid:\n- {}\nAnswer again with only the corrected JSON plan.",
                            p.join("\n- ")
                        )));
                    }
                    problems = p;
                }
            }
        }
        Err(PlanError::Invalid(format!(
            "the model's plan was still invalid after one correction: {}",
            problems.join("; ")
        )))
    }
}
