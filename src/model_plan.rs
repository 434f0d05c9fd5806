//! What a plan the model wrote may do on this machine: [`narrow`].
//!
//! A plan from `nuvira run --goal .. --planner llm` is model output, so it is data from
//! whoever could steer the model (the goal, the repository's files, an injected prompt). Such a
//! plan must not widen the sandbox the run gives its commands. [`narrow`] takes the model's
//! plan and the run's [`SandboxPolicy`] and returns the plan as it will run, with one
//! [`StepNarrowing`] per step whose config asked for more than the policy grants:
//!
//! | the step asks for | becomes | kept with |
//! |---|---|---|
//! | `sandbox: local` (or `auto`) on a `test`/`execute` step | the run's sandbox, `docker` pinned when the run has Docker (so a missing `image` cannot fall back to the local sandbox) | `--allow-host-exec` (for `local`) |
//! | `network: host` or `bridge` | `none` | `--allow-host-exec` |
//! | `mounts` (any, read-only too: they show host files) | none | `--allow-mount` |
//! | `include_ignored: true` (copies `.gitignore`d files such as `.env` into the sandbox) | `false` | `--allow-mount` |
//! | `format: true` on an `edit` step (runs rustfmt/ruff/prettier, whose config can be code, on the host) | `false` | `--allow-host-exec` |
//!
//! Not widening, so kept as written: `env` (values are the model's own text, set only inside
//! the sandbox; the Docker sandbox passes nothing else from the host), `read_only_root: false`
//! (the default of every plan; only `true` changes anything, and it narrows), `image` (a local
//! image; with `docker` pinned a missing one fails the run instead of leaving Docker), and the
//! resource limits (`memory`, `cpus`, `pids`, `timeout`: they bound time and resources, not
//! what the command can reach). `verify` lint commands run in the run's sandbox whoever wrote
//! the plan.
//!
//! Plan files are the user's choice and are not narrowed; only plans the model made are.

use nuvira_api::ExecutionPlan;
use nuvira_sandbox::SandboxKind;
use serde_json::Value;

/// What the run grants a model's plan: its sandbox and the flags that widen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The run's sandbox (`--sandbox`, or what `auto` picked): the one every `test` and
    /// `execute` step of the model's plan gets.
    pub sandbox: SandboxKind,
    /// `--allow-host-exec`: keep the plan's `sandbox: local`, its network and `format: true`.
    pub allow_host_exec: bool,
    /// `--allow-mount`: keep the plan's `mounts` and `include_ignored`.
    pub allow_mount: bool,
}

impl SandboxPolicy {
    /// The policy of a run in `sandbox` with no widening flag.
    pub fn new(sandbox: SandboxKind) -> Self {
        Self {
            sandbox,
            allow_host_exec: false,
            allow_mount: false,
        }
    }
}

/// The flag that keeps a widening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// `--allow-host-exec`.
    HostExec,
    /// `--allow-mount`.
    Mount,
}

impl Allowance {
    /// The flag, e.g. `--allow-mount`.
    pub fn flag(self) -> &'static str {
        match self {
            Self::HostExec => "--allow-host-exec",
            Self::Mount => "--allow-mount",
        }
    }
}

/// One setting of a step that asked for more than the policy grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    /// The config key, e.g. `network`.
    pub key: &'static str,
    /// What the model asked for, e.g. `host`, or a mount `/data:/data:rw`.
    pub asked: String,
    /// What the step gets instead (`None` when it is kept, or dropped without a replacement).
    pub given: Option<String>,
    /// The flag that keeps it.
    pub allowance: Allowance,
    /// Whether the flag was given, so the step keeps what it asked for.
    pub kept: bool,
}

impl std::fmt::Display for Widening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let flag = self.allowance.flag();
        match (self.kept, &self.given) {
            (true, _) => write!(f, "{} {} kept ({flag})", self.key, self.asked),
            (false, Some(given)) => write!(
                f,
                "{} {} -> {given} (pass {flag} to keep it)",
                self.key, self.asked
            ),
            (false, None) => write!(
                f,
                "{} {} dropped (pass {flag} to keep it)",
                self.key, self.asked
            ),
        }
    }
}

/// The settings of one step that widen the sandbox, narrowed or kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepNarrowing {
    /// The step's id.
    pub step: String,
    /// Each setting, in config order (sandbox, network, mounts, include_ignored, format).
    pub widenings: Vec<Widening>,
}

impl std::fmt::Display for StepNarrowing {
    /// `step `run` widens the sandbox: network host -> none (pass --allow-host-exec to keep
    /// it); mounts /data:/data:rw kept (--allow-mount)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.widenings.iter().map(ToString::to_string).collect();
        write!(
            f,
            "step `{}` widens the sandbox: {}",
            self.step,
            parts.join("; ")
        )
    }
}

/// Narrows a plan the model made to `policy` (see the module docs for what widens and what
/// becomes of it). Returns the plan as it will run and, for each step that asked for more than
/// the policy grants, what it asked for and what it gets; steps whose config is not an object
/// are left as they are (validation reports them).
///
/// ```
/// use nuvira::model_plan::{SandboxPolicy, narrow};
/// let plan: nuvira::api::ExecutionPlan = serde_json::from_value(serde_json::json!({
///     "goal": "g",
///     "steps": [{ "id": "run", "module": "execute",
///                 "config": { "command": "make", "sandbox": "local", "network": "host" } }]
/// })).unwrap();
/// let (plan, narrowed) = narrow(plan, &SandboxPolicy::new(nuvira_sandbox::SandboxKind::Docker));
/// assert_eq!(plan.steps[0].config["sandbox"], "docker");
/// assert_eq!(plan.steps[0].config["network"], "none");
/// assert_eq!(narrowed[0].widenings.len(), 2);
/// ```
pub fn narrow(
    mut plan: ExecutionPlan,
    policy: &SandboxPolicy,
) -> (ExecutionPlan, Vec<StepNarrowing>) {
    let mut report = Vec::new();
    for step in &mut plan.steps {
        let widenings = match step.module.as_str() {
            "test" | "execute" => {
                if step.config.is_null() {
                    step.config = Value::Object(serde_json::Map::new());
                }
                match step.config.as_object_mut() {
                    Some(config) => narrow_sandboxed(config, policy),
                    None => continue,
                }
            }
            "edit" => match step.config.as_object_mut() {
                Some(config) => narrow_edit(config, policy),
                None => continue,
            },
            _ => continue,
        };
        if !widenings.is_empty() {
            report.push(StepNarrowing {
                step: step.id.clone(),
                widenings,
            });
        }
    }
    (plan, report)
}

type Config = serde_json::Map<String, Value>;

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn narrow_sandboxed(config: &mut Config, policy: &SandboxPolicy) -> Vec<Widening> {
    let mut out = Vec::new();
    let host = policy.allow_host_exec;

    // The sandbox: the run's, pinned, unless the model asked for local and may have it.
    let asked = config
        .get("sandbox")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<SandboxKind>().ok());
    let wider = match asked {
        // local runs on this machine; auto may fall back to it (a missing image).
        Some(SandboxKind::Local) => policy.sandbox != SandboxKind::Local,
        _ => false,
    };
    if wider {
        out.push(Widening {
            key: "sandbox",
            asked: SandboxKind::Local.as_str().to_owned(),
            given: Some(policy.sandbox.as_str().to_owned()),
            allowance: Allowance::HostExec,
            kept: host,
        });
    }
    if !(wider && host) {
        config.insert("sandbox".into(), Value::from(policy.sandbox.as_str()));
    }

    // The network: none.
    if let Some(n) = config.get("network")
        && !n
            .as_str()
            .is_some_and(|s| s.trim().eq_ignore_ascii_case("none"))
    {
        out.push(Widening {
            key: "network",
            asked: text(n),
            given: Some("none".into()),
            allowance: Allowance::HostExec,
            kept: host,
        });
        if !host {
            config.insert("network".into(), Value::from("none"));
        }
    }

    // Mounts: none.
    let mounts: Vec<String> = match config.get("mounts") {
        Some(Value::Array(items)) => items.iter().map(text).collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![text(other)],
    };
    if !mounts.is_empty() {
        out.push(Widening {
            key: "mounts",
            asked: mounts.join(", "),
            given: None,
            allowance: Allowance::Mount,
            kept: policy.allow_mount,
        });
        if !policy.allow_mount {
            config.remove("mounts");
        }
    }

    // Ignored files (`.env` and the like): not copied.
    if config.get("include_ignored").and_then(Value::as_bool) == Some(true) {
        out.push(Widening {
            key: "include_ignored",
            asked: "true".into(),
            given: Some("false".into()),
            allowance: Allowance::Mount,
            kept: policy.allow_mount,
        });
        if !policy.allow_mount {
            config.insert("include_ignored".into(), Value::from(false));
        }
    }
    out
}

fn narrow_edit(config: &mut Config, policy: &SandboxPolicy) -> Vec<Widening> {
    if config.get("format").and_then(Value::as_bool) != Some(true) {
        return Vec::new();
    }
    if !policy.allow_host_exec {
        config.insert("format".into(), Value::from(false));
    }
    vec![Widening {
        key: "format",
        asked: "true".into(),
        given: Some("false".into()),
        allowance: Allowance::HostExec,
        kept: policy.allow_host_exec,
    }]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn plan(steps: Value) -> ExecutionPlan {
        serde_json::from_value(json!({ "goal": "g", "steps": steps })).unwrap()
    }

    fn hostile() -> ExecutionPlan {
        plan(json!([
            { "id": "run", "module": "execute", "config": {
                "command": "touch /data/x", "sandbox": "local", "network": "host",
                "mounts": ["/tmp/sentinel:/data:rw"], "include_ignored": true,
                "env": { "A": "1" }, "read_only_root": false, "image": "nuvira-host:latest" } },
            { "id": "fix", "module": "edit", "config": { "instructions": "x", "format": true } },
            { "id": "check", "module": "verify", "config": { "lint": ["make lint"] } },
        ]))
    }

    #[test]
    fn without_flags_a_model_plan_gets_the_runs_sandbox_no_network_no_mounts() {
        let (plan, narrowed) = narrow(hostile(), &SandboxPolicy::new(SandboxKind::Docker));
        let c = &plan.steps[0].config;
        assert_eq!(c["sandbox"], "docker");
        assert_eq!(c["network"], "none");
        assert!(c.get("mounts").is_none(), "{c}");
        assert_eq!(c["include_ignored"], false);
        // Not widening: kept as written.
        assert_eq!(c["env"], json!({ "A": "1" }));
        assert_eq!(c["read_only_root"], false);
        assert_eq!(c["image"], "nuvira-host:latest");
        assert_eq!(plan.steps[1].config["format"], false);
        assert_eq!(plan.steps[2].config, json!({ "lint": ["make lint"] }));
        // The narrowed config still parses.
        nuvira_runner::TestConfig::from_value(c).unwrap();

        assert_eq!(narrowed.len(), 2);
        assert_eq!(narrowed[0].step, "run");
        let keys: Vec<_> = narrowed[0].widenings.iter().map(|w| w.key).collect();
        assert_eq!(keys, ["sandbox", "network", "mounts", "include_ignored"]);
        assert!(narrowed[0].widenings.iter().all(|w| !w.kept));
        assert_eq!(
            narrowed[0].to_string(),
            "step `run` widens the sandbox: sandbox local -> docker (pass --allow-host-exec to keep it); \
             network host -> none (pass --allow-host-exec to keep it); \
             mounts /tmp/sentinel:/data:rw dropped (pass --allow-mount to keep it); \
             include_ignored true -> false (pass --allow-mount to keep it)"
        );
        assert_eq!(narrowed[1].step, "fix");
        assert_eq!(narrowed[1].widenings[0].key, "format");
    }

    #[test]
    fn allow_mount_keeps_the_mounts_only() {
        let policy = SandboxPolicy {
            allow_mount: true,
            ..SandboxPolicy::new(SandboxKind::Docker)
        };
        let (plan, narrowed) = narrow(hostile(), &policy);
        let c = &plan.steps[0].config;
        assert_eq!(c["mounts"], json!(["/tmp/sentinel:/data:rw"]));
        assert_eq!(c["include_ignored"], true);
        assert_eq!(c["sandbox"], "docker");
        assert_eq!(c["network"], "none");
        let line = narrowed[0].to_string();
        assert!(
            line.contains("mounts /tmp/sentinel:/data:rw kept (--allow-mount)"),
            "{line}"
        );
        assert!(line.contains("network host -> none"), "{line}");
    }

    #[test]
    fn allow_host_exec_keeps_the_local_sandbox_the_network_and_formatting() {
        let policy = SandboxPolicy {
            allow_host_exec: true,
            ..SandboxPolicy::new(SandboxKind::Docker)
        };
        let (plan, narrowed) = narrow(hostile(), &policy);
        let c = &plan.steps[0].config;
        assert_eq!(c["sandbox"], "local");
        assert_eq!(c["network"], "host");
        assert!(c.get("mounts").is_none());
        assert_eq!(plan.steps[1].config["format"], true);
        assert!(
            narrowed[0]
                .to_string()
                .contains("sandbox local kept (--allow-host-exec)")
        );
    }

    #[test]
    fn auto_and_missing_sandboxes_are_pinned_to_the_runs_without_a_report() {
        let p = plan(json!([
            { "id": "t", "module": "test" },
            { "id": "e", "module": "execute", "config": { "command": "x", "sandbox": "auto", "image": "missing:1" } },
            { "id": "n", "module": "execute", "config": { "command": "x", "network": "none" } },
        ]));
        let (plan, narrowed) = narrow(p, &SandboxPolicy::new(SandboxKind::Docker));
        assert!(narrowed.is_empty(), "{narrowed:?}");
        for s in &plan.steps {
            assert_eq!(s.config["sandbox"], "docker", "{}", s.id);
        }
    }

    #[test]
    fn a_local_run_keeps_local_steps_but_still_drops_network_and_mounts() {
        let (plan, narrowed) = narrow(hostile(), &SandboxPolicy::new(SandboxKind::Local));
        assert_eq!(plan.steps[0].config["sandbox"], "local");
        let keys: Vec<_> = narrowed[0].widenings.iter().map(|w| w.key).collect();
        assert_eq!(keys, ["network", "mounts", "include_ignored"]);
    }
}
