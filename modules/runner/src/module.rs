//! The `test` and `execute` modules.
//!
//! `test` runs detection (an explicit `command` wins), runs every detected framework in the
//! sandbox, parses each run and merges the results. `execute` runs one command in the same kind
//! of sandbox as a plan step. Both only ever touch a copy of the workspace, so their write set is
//! [`WriteSet::ReadOnly`] and they can run beside each other and beside readers.
//!
//! Step config (every key optional; the same sandbox keys for both modules):
//!
//! ```yaml
//! config:
//!   framework: auto          # test only: auto | cargo | nextest | pytest | unittest | vitest | jest | go
//!   command: "cargo test"    # a shell line (run with `sh -c`) or an argv list; required for execute
//!   sandbox: auto            # auto | local | bwrap | docker
//!   image: nuvira-host:latest
//!   memory: 4g               # bytes, or 512m / 1g / 256MiB (default 4g)
//!   cpus: 2.0                # default: every core of this machine
//!   pids: 4096
//!   timeout: 300s            # "90s", "2m", or a number of seconds
//!   network: none            # none | host | bridge
//!   mounts: ["/opt/sdk:/opt/sdk:ro"]
//!   env: { RUST_BACKTRACE: "1" }
//!   read_only_root: false    # docker: read-only root, writable workdir, tmpfs /tmp
//!   include_ignored: false   # also copy .gitignored files, target/ and node_modules/
//!   cache: true              # warm build caches + a synced persistent copy (nuvira_sandbox::cache)
//! ```

use crate::detect::{self, Detected, Framework};
use crate::parse;
use crate::sandbox::{self, SandboxKind, Selection};
use nuvira_api::test::Mount;
use nuvira_api::{
    CommandOutput, ConfigError, ErrorCategory, EventKind, Failure, Module, ModuleError, ModuleKind,
    NetworkMode, PlanStep, ResourceLimits, SandboxError, SandboxOutcome, SandboxRequest,
    StepContext, StepOutput, TestResult, WriteSet, async_trait,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The name of the custom event saying which sandbox `test` picked and why, and what it will
/// run (`data: {"kind", "reason", "runs": [{"framework", "dir", "reason", "toolchain",
/// "command"}]}`: each run's folder, why its framework was detected and which interpreter or
/// toolchain runs it, and why), emitted before `test:started`.
pub const SANDBOX_SELECTED: &str = "test:sandbox-selected";

/// The sandbox part of a step's config (shared by `test` and `execute`).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct SandboxConfig {
    /// Which sandbox.
    pub sandbox: SandboxKind,
    /// The Docker image (default [`sandbox::DEFAULT_IMAGE`]).
    pub image: Option<String>,
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// CPUs.
    pub cpus: Option<f64>,
    /// Process limit.
    pub pids: Option<u32>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Network access.
    pub network: Option<NetworkMode>,
    /// Extra bind mounts.
    pub mounts: Vec<Mount>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Read-only root file system (Docker).
    pub read_only_root: bool,
    /// Copy ignored files, `target/` and `node_modules/` too.
    pub include_ignored: bool,
    /// Run without the project's warm build caches and persistent workspace copy (step config
    /// `cache: false`, `--no-cache`); see `nuvira_sandbox::cache`.
    pub no_cache: bool,
}

impl SandboxConfig {
    /// The resource limits, defaults filled in.
    pub fn limits(&self) -> ResourceLimits {
        let mut limits = ResourceLimits::default();
        if let Some(m) = self.memory {
            limits.memory_bytes = m;
        }
        if let Some(c) = self.cpus {
            limits.cpus = c;
        }
        if let Some(p) = self.pids {
            limits.pids = p;
        }
        if let Some(t) = self.timeout {
            limits.timeout = t;
        }
        limits
    }

    /// A request to run `command` in `workspace` under this config.
    pub fn request(&self, workspace: &Path, command: Vec<String>) -> SandboxRequest {
        let mut req = SandboxRequest::new(workspace, command);
        req.limits = self.limits();
        req.network = self.network.unwrap_or_default();
        req.image.clone_from(&self.image);
        req.mounts.clone_from(&self.mounts);
        req.env.clone_from(&self.env);
        req.read_only_root = self.read_only_root;
        req.include_ignored = self.include_ignored;
        req.cache = !self.no_cache;
        req
    }
}

/// A `test` step's config.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct TestConfig {
    /// A framework to run (`None`: every detected one).
    pub framework: Option<Framework>,
    /// An explicit command (wins over detection).
    pub command: Option<Vec<String>>,
    /// Where and how to run it.
    pub sandbox: SandboxConfig,
}

/// Why a `test` or `execute` config was refused ([`TestConfig::from_value`]): the key and what
/// is expected. A step's config errors are [`ConfigError`]s that carry this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
#[non_exhaustive]
pub struct TestConfigError {
    /// The key, e.g. `config.memory` (`config` for the object as a whole).
    pub key: &'static str,
    /// What is wrong with it and what is expected.
    pub reason: String,
}

impl TestConfigError {
    fn new(key: &'static str, reason: impl std::fmt::Display) -> Self {
        Self {
            key,
            reason: reason.to_string(),
        }
    }
}

impl TestConfig {
    /// Parses a step's config object (see the module docs for the keys).
    ///
    /// # Errors
    /// [`TestConfigError`] naming the key and what is expected.
    pub fn from_value(config: &Value) -> Result<Self, TestConfigError> {
        let raw: RawConfig = if config.is_null() {
            RawConfig::default()
        } else {
            serde_json::from_value(config.clone()).map_err(|e| TestConfigError::new("config", e))?
        };
        raw.into_config()
    }

    /// Reads and checks a step's config with [`PlanStep::config_as`] (what `validate` and `run`
    /// of the `test` and `execute` modules both call).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the step, the key and what is expected.
    pub fn from_step(step: &PlanStep) -> Result<Self, ConfigError> {
        let raw: RawConfig = step
            .config_as()
            .map_err(|e| e.map_message(|m| format!("config: {m}")))?;
        raw.into_config().map_err(|e| {
            let field = e.key.strip_prefix("config.").map(str::to_owned);
            let err = ConfigError::new(&step.id, e.to_string());
            match field {
                Some(f) => err.at(f),
                None => err,
            }
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    framework: Option<String>,
    command: Option<RawCommand>,
    #[serde(default)]
    sandbox: Option<String>,
    image: Option<String>,
    memory: Option<RawSize>,
    cpus: Option<f64>,
    pids: Option<u32>,
    #[serde(default, with = "nuvira_api::duration::serde_opt")]
    timeout: Option<Duration>,
    network: Option<String>,
    #[serde(default)]
    mounts: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    read_only_root: bool,
    #[serde(default)]
    include_ignored: bool,
    cache: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Line(String),
    Argv(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Bytes(u64),
    Text(String),
}

impl RawConfig {
    fn into_config(self) -> Result<TestConfig, TestConfigError> {
        let framework = match self.framework.as_deref().map(str::trim) {
            None | Some("" | "auto") => None,
            Some(name) => Some(
                name.parse::<Framework>()
                    .map_err(|e| TestConfigError::new("config.framework", e))?,
            ),
        };
        let command = match self.command {
            None => None,
            Some(RawCommand::Line(line)) if line.trim().is_empty() => {
                return Err(TestConfigError::new(
                    "config.command",
                    "the command is empty",
                ));
            }
            Some(RawCommand::Line(line)) => Some(vec!["sh".into(), "-c".into(), line]),
            Some(RawCommand::Argv(argv)) if argv.is_empty() => {
                return Err(TestConfigError::new(
                    "config.command",
                    "the command is empty",
                ));
            }
            Some(RawCommand::Argv(argv)) => Some(argv),
        };
        let sandbox_kind = match self.sandbox.as_deref() {
            None => SandboxKind::Auto,
            Some(s) => s
                .parse()
                .map_err(|e| TestConfigError::new("config.sandbox", e))?,
        };
        let memory = match self.memory {
            None => None,
            Some(RawSize::Bytes(0)) => {
                return Err(TestConfigError::new("config.memory", "must be more than 0"));
            }
            Some(RawSize::Bytes(b)) => Some(b),
            Some(RawSize::Text(t)) => Some(
                sandbox::parse_size(&t).map_err(|e| TestConfigError::new("config.memory", e))?,
            ),
        };
        if let Some(c) = self.cpus
            && !(c.is_finite() && c > 0.0)
        {
            return Err(TestConfigError::new(
                "config.cpus",
                format!("{c} is not a positive number of CPUs"),
            ));
        }
        if self.pids == Some(0) {
            return Err(TestConfigError::new("config.pids", "must be at least 1"));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(TestConfigError::new(
                "config.timeout",
                "must be more than 0",
            ));
        }
        let network = match self.network.as_deref() {
            None => None,
            Some(n) => Some(
                sandbox::parse_network(n).map_err(|e| TestConfigError::new("config.network", e))?,
            ),
        };
        let mounts = self
            .mounts
            .iter()
            .map(|m| sandbox::parse_mount(m).map_err(|e| TestConfigError::new("config.mounts", e)))
            .collect::<Result<_, _>>()?;
        Ok(TestConfig {
            framework,
            command,
            sandbox: SandboxConfig {
                sandbox: sandbox_kind,
                image: self.image,
                memory,
                cpus: self.cpus,
                pids: self.pids,
                timeout: self.timeout,
                network,
                mounts,
                env: self.env,
                read_only_root: self.read_only_root,
                include_ignored: self.include_ignored,
                no_cache: self.cache == Some(false),
            },
        })
    }
}

/// The `test` module: detects, runs in a sandbox, parses, merges.
///
/// Returns [`StepOutput::Test`] when every test passed; a
/// [`ModuleError::Recoverable`] failure (category `test-failure`, `compile-error`, `timeout` or
/// `out-of-memory`, with the [`TestResult`] attached) when not; a [`ModuleError::Fatal`]
/// `sandbox-unavailable` failure when the requested sandbox cannot be used.
#[derive(Debug, Default, Clone)]
pub struct TestModule;

impl TestModule {
    /// The module.
    pub fn new() -> Self {
        Self
    }

    /// Runs the tests of `ctx.workspace_root()` under `config` (what [`Module::run`] does after
    /// parsing the step's config; the CLI calls it directly).
    ///
    /// # Errors
    /// As described on [`TestModule`].
    pub async fn run_config(
        &self,
        config: &TestConfig,
        ctx: &StepContext,
    ) -> Result<TestResult, ModuleError> {
        let root = &ctx.workspace_root();
        let runs = plan_runs(root, config)?;
        let selection = select(&config.sandbox, ctx).await?;
        tracing::info!("sandbox {}", selection.reason);
        ctx.emit(EventKind::Custom {
            name: SANDBOX_SELECTED.into(),
            data: serde_json::json!({
                "kind": nuvira_api::Sandbox::kind(&selection.sandbox),
                "reason": selection.reason,
                "runs": runs.iter().map(|run| serde_json::json!({
                    "framework": run.name(),
                    "dir": run.dir.to_string_lossy(),
                    "reason": run.reason,
                    "toolchain": run.toolchain,
                    "command": run.command_line(),
                })).collect::<Vec<_>>(),
            }),
        });

        let started = Instant::now();
        let mut merged: Option<TestResult> = None;
        for run in &runs {
            let result = run_one(run, config, &selection, ctx).await?;
            merged = Some(match merged {
                None => result,
                Some(acc) => merge(acc, result),
            });
        }
        let mut result = merged.unwrap_or_default();
        result.duration_ms = elapsed_ms(started);

        for failure in &result.failures {
            ctx.emit(EventKind::TestFailed {
                failure: failure.clone(),
            });
        }
        ctx.emit(EventKind::TestCompleted {
            success: result.success,
            passed: result.passed,
            failed: result.failed,
            skipped: result.skipped,
            duration_ms: result.duration_ms,
            cases: result.cases.clone(),
        });
        if result.success {
            Ok(result)
        } else {
            Err(ModuleError::Recoverable(test_failure(result)))
        }
    }
}

#[async_trait]
impl Module for TestModule {
    fn name(&self) -> &str {
        "test"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Test
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        TestConfig::from_step(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let config = TestConfig::from_step(step)?;
        self.run_config(&config, ctx).await.map(StepOutput::Test)
    }
}

/// The `execute` module: one command in a sandbox.
///
/// Returns [`StepOutput::Command`] when it exits with 0; a [`ModuleError::Recoverable`] failure
/// with the [`CommandOutput`] attached when it exits otherwise, times out or runs out of memory.
#[derive(Debug, Default, Clone)]
pub struct ExecuteModule;

impl ExecuteModule {
    /// The module.
    pub fn new() -> Self {
        Self
    }

    fn config(step: &PlanStep) -> Result<(Vec<String>, SandboxConfig), ConfigError> {
        let config = TestConfig::from_step(step)?;
        if config.framework.is_some() {
            return Err(ConfigError::new(
                &step.id,
                "config.framework: execute runs a command, not a test framework; use the test module",
            )
            .at("framework"));
        }
        let command = config.command.ok_or_else(|| {
            ConfigError::new(
                &step.id,
                "config.command is required: the command line to run",
            )
            .at("command")
        })?;
        Ok((command, config.sandbox))
    }
}

#[async_trait]
impl Module for ExecuteModule {
    fn name(&self) -> &str {
        "execute"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Execute
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        Self::config(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let (command, config) = Self::config(step)?;
        let selection = select(&config, ctx).await?;
        let mut request = config.request(ctx.workspace_root(), command.clone());
        clamp_to_deadline(&mut request, ctx);
        let outcome = run_sandbox(&selection, &request, ctx).await?;
        let mut output = CommandOutput::default();
        output.command = shell_line(&command);
        output.exit_code = outcome.exit_code;
        output.stdout = outcome.stdout;
        output.stderr = outcome.stderr;
        output.duration_ms = outcome.duration_ms;
        output.sandbox = Some(outcome.info);
        if outcome.exit_code == Some(0) && !outcome.timed_out && !outcome.oom_killed {
            return Ok(StepOutput::Command(output));
        }
        let (category, message) = if outcome.oom_killed {
            (
                ErrorCategory::OutOfMemory,
                format!(
                    "run `{}`: killed for exceeding its memory limit ({})",
                    output.command,
                    format_size(request.limits.memory_bytes)
                ),
            )
        } else if outcome.timed_out {
            (
                ErrorCategory::Timeout,
                format!(
                    "run `{}`: killed at its timeout ({})",
                    output.command,
                    nuvira_api::duration::format(request.limits.timeout)
                ),
            )
        } else {
            let code = output
                .exit_code
                .map_or_else(|| "no exit code".to_owned(), |c| format!("exit code {c}"));
            let pids = if output.sandbox.as_ref().is_some_and(|i| i.pids_limited) {
                format!(
                    " after the sandbox's process limit ({}) refused to start a process or thread (raise `pids` or `--pids`)",
                    request.limits.pids
                )
            } else {
                String::new()
            };
            (
                ErrorCategory::Unknown,
                format!("run `{}`: it failed with {code}{pids}", output.command),
            )
        };
        let evidence: Vec<String> = output
            .stderr
            .lines()
            .rev()
            .take(10)
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Err(ModuleError::Recoverable(
            Failure::new(category, message)
                .with_evidence(evidence)
                .with_output(StepOutput::Command(output)),
        ))
    }
}

/// The runs to make: the explicit command, or the detected frameworks (filtered by the
/// requested one).
fn plan_runs(root: &Path, config: &TestConfig) -> Result<Vec<Detected>, ModuleError> {
    if let Some(command) = &config.command {
        return Ok(vec![Detected::explicit(
            command.clone(),
            config.framework,
            "",
        )]);
    }
    let mut options = detect::DetectOptions::default();
    if config.framework == Some(Framework::Nextest) {
        options = options.nextest(detect::NextestPolicy::Always);
    }
    let found = detect::available_frameworks_with(root, &options)
        .map_err(|e| ModuleError::invalid_config(e.to_string()))?;
    let names: Vec<String> = found
        .iter()
        .map(|d| format!("{} ({})", d.name(), d.reason))
        .collect();
    let runs: Vec<Detected> = match config.framework {
        None => found,
        Some(f) => found
            .into_iter()
            .filter(|d| d.framework == Some(f))
            .collect(),
    };
    if runs.is_empty() {
        let marks = |f: Framework| match f {
            Framework::Cargo | Framework::Nextest => {
                "`Cargo.toml` with [package] or [workspace] (cargo)"
            }
            Framework::Pytest => {
                "`pytest.ini`, `conftest.py`, pytest in `pyproject.toml`, `setup.cfg`, `tox.ini`, `noxfile.py`, a `Makefile` or `requirements*.txt`, or `test_*.py` files (pytest)"
            }
            Framework::Unittest => {
                "`test_*.py` files in the folder, `tests/` or `test/` that use unittest (unittest)"
            }
            Framework::Vitest => {
                "`package.json` naming vitest in scripts.test or its dependencies, or `vitest.config.*` (vitest)"
            }
            Framework::Jest => {
                "`package.json` naming jest in scripts.test, a `jest` key or its dependencies, or `jest.config.*` (jest)"
            }
            Framework::Go => "`go.mod` (go)",
        };
        let (what, looked, example) = match config.framework {
            Some(f) => (
                format!("{f} project"),
                marks(f).to_owned(),
                match f {
                    Framework::Cargo => "cargo test",
                    Framework::Nextest => "cargo nextest run",
                    Framework::Pytest => "python3 -m pytest",
                    Framework::Unittest => "python3 -m unittest discover -v",
                    Framework::Vitest => "npx vitest run",
                    Framework::Jest => "npx jest",
                    Framework::Go => "go test ./...",
                },
            ),
            None => (
                "test framework".to_owned(),
                [
                    Framework::Cargo,
                    Framework::Pytest,
                    Framework::Unittest,
                    Framework::Vitest,
                    Framework::Jest,
                    Framework::Go,
                ]
                .map(marks)
                .join("; "),
                "make test",
            ),
        };
        let seen = if names.is_empty() {
            "found none".to_owned()
        } else {
            format!(
                "found only {} (pick one with --framework, or `framework:` in the step config)",
                names.join(", ")
            )
        };
        return Err(ModuleError::invalid_config(format!(
            "find a {what} in {}: looked there and in its sub-folders for {looked}, and {seen}; to run the tests another way, pass the command: `--command \"{example}\"` (or `command: \"{example}\"` in the step config)",
            root.display()
        )));
    }
    Ok(runs)
}

async fn select(config: &SandboxConfig, ctx: &StepContext) -> Result<Selection, ModuleError> {
    if ctx.cancel().is_cancelled() {
        return Err(ModuleError::Cancelled);
    }
    if let Some(m) = config.mounts.iter().find(|m| !m.host.exists()) {
        return Err(ModuleError::invalid_config(format!(
            "config.mounts: the host path {} does not exist on this machine",
            m.host.display()
        )));
    }
    let selection = sandbox::select(config.sandbox, config.image.as_deref())
        .await
        .map_err(sandbox_error)?;
    if matches!(selection.sandbox, sandbox::AnySandbox::Local(_)) {
        let mut ignored = Vec::new();
        if !config.mounts.is_empty() {
            ignored.push("mounts");
        }
        if config.cpus.is_some() {
            ignored.push("cpus");
        }
        if config.pids.is_some() && !sandbox::limits::detect().enforced() {
            ignored.push("pids");
        }
        if config.network.is_some_and(|n| n != NetworkMode::Host) {
            ignored.push("network (the command shares this machine's network)");
        }
        if config.read_only_root {
            ignored.push("read_only_root");
        }
        if !ignored.is_empty() {
            tracing::warn!(
                "the local sandbox does not apply: {}; use the docker sandbox for them",
                ignored.join(", ")
            );
        }
    }
    Ok(selection)
}

fn sandbox_error(err: SandboxError) -> ModuleError {
    match err {
        SandboxError::Cancelled => ModuleError::Cancelled,
        SandboxError::Unavailable(msg) => {
            ModuleError::fatal(ErrorCategory::SandboxUnavailable, msg)
        }
        SandboxError::Failed(msg) => ModuleError::fatal(ErrorCategory::Io, msg),
        SandboxError::Rejected(msg) => ModuleError::fatal(ErrorCategory::InvalidConfig, msg),
        other => ModuleError::fatal(ErrorCategory::Unknown, other.to_string()),
    }
}

fn clamp_to_deadline(request: &mut SandboxRequest, ctx: &StepContext) {
    if let Some(deadline) = ctx.deadline() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left < request.limits.timeout {
            request.limits.timeout = left.max(Duration::from_millis(1));
        }
    }
}

async fn run_sandbox(
    selection: &Selection,
    request: &SandboxRequest,
    ctx: &StepContext,
) -> Result<SandboxOutcome, ModuleError> {
    let on_created = |info: &nuvira_api::SandboxInfo| {
        ctx.emit(EventKind::TestSandboxCreated {
            kind: info.kind.clone(),
            container_id: info.container_id.clone(),
            image: info.image.clone(),
        });
    };
    selection
        .sandbox
        .run_observed(request, ctx.cancel().as_ref(), &on_created)
        .await
        .map_err(sandbox_error)
}

async fn run_one(
    run: &Detected,
    config: &TestConfig,
    selection: &Selection,
    ctx: &StepContext,
) -> Result<TestResult, ModuleError> {
    let mut request = config
        .sandbox
        .request(ctx.workspace_root(), run.command.clone());
    request.dir.clone_from(&run.dir);
    request.collect.clone_from(&run.collect);
    for path in &run.host_paths {
        // A container sees the host folder (a virtualenv) read-only at the same path; the
        // local sandbox reaches it directly.
        if !request.mounts.iter().any(|m| m.host == *path) {
            request.mounts.push(Mount {
                host: path.clone(),
                container: path.to_string_lossy().into_owned(),
                read_only: true,
            });
        }
    }
    for (k, v) in &run.env {
        request.env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    if matches!(run.framework, Some(Framework::Vitest | Framework::Jest)) {
        // The runner lives in node_modules/.
        request.include_ignored = true;
    }
    clamp_to_deadline(&mut request, ctx);

    let command_line = run.command_line();
    tracing::info!(
        "{} in {}: {}; {}",
        run.name(),
        if run.dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            run.dir.as_path()
        }
        .display(),
        run.reason,
        run.toolchain
    );
    ctx.emit(EventKind::TestStarted {
        framework: run.name().to_owned(),
        sandbox: nuvira_api::Sandbox::kind(&selection.sandbox).to_owned(),
        command: command_line.clone(),
    });
    let outcome = run_sandbox(selection, &request, ctx).await?;

    // Parses, makes paths workspace-relative (reading go.mod from the host workspace, since the
    // sandbox copy may be gone), reports OOM kills, and fills duration, command and sandbox.
    let mut result = parse::parse_outcome(run, &outcome, Some(ctx.workspace_root()));
    result.framework = Some(run.name().to_owned());
    result.command = Some(command_line);
    Ok(result)
}

fn merge(mut a: TestResult, b: TestResult) -> TestResult {
    a.success = a.success && b.success;
    a.passed += b.passed;
    a.failed += b.failed;
    a.skipped += b.skipped;
    a.total += b.total;
    a.failures.extend(b.failures);
    a.cases.extend(b.cases);
    a.duration_ms += b.duration_ms;
    if !b.log.is_empty() {
        if !a.log.is_empty() {
            a.log.push('\n');
        }
        a.log.push_str(&b.log);
    }
    a.framework = match (a.framework.take(), b.framework) {
        (Some(x), Some(y)) if x != y => Some(format!("{x}+{y}")),
        (x, y) => x.or(y),
    };
    a.command = match (a.command.take(), b.command) {
        (Some(x), Some(y)) => Some(format!("{x}; {y}")),
        (x, y) => x.or(y),
    };
    // The sandbox of a failing run is the one worth reporting.
    let b_bad = b
        .sandbox
        .as_ref()
        .is_some_and(|s| s.timed_out || s.oom_killed || s.exit_code != Some(0));
    if a.sandbox.is_none() || b_bad {
        a.sandbox = b.sandbox;
    }
    a
}

/// The failure for a test result that is not a success.
fn test_failure(result: TestResult) -> Failure {
    let info = result.sandbox.clone().unwrap_or_default();
    let (category, message) = if info.oom_killed {
        (
            ErrorCategory::OutOfMemory,
            "run the tests: they were killed for exceeding the sandbox's memory limit (raise `memory`)"
                .to_owned(),
        )
    } else if info.timed_out {
        (
            ErrorCategory::Timeout,
            "run the tests: they were killed at the timeout (raise `timeout` or fix the hanging test)"
                .to_owned(),
        )
    } else if info.pids_limited {
        (
            ErrorCategory::TestFailure,
            "run the tests: the sandbox's process limit refused to start a process or thread (raise `pids`)"
                .to_owned(),
        )
    } else if looks_like_compile_error(&result) {
        (
            ErrorCategory::CompileError,
            format!(
                "build the tests: {} compile or collection error(s)",
                result.failures.len().max(1)
            ),
        )
    } else {
        (
            ErrorCategory::TestFailure,
            format!(
                "pass the tests: {} of {} failed",
                result.failed, result.total
            ),
        )
    };
    let evidence: Vec<String> = result
        .failures
        .iter()
        .take(20)
        .map(|f| match (&f.file, f.line) {
            (Some(file), Some(line)) => {
                format!("{} ({file}:{line}): {}", f.name, first_line(&f.message))
            }
            (Some(file), None) => format!("{} ({file}): {}", f.name, first_line(&f.message)),
            _ => format!("{}: {}", f.name, first_line(&f.message)),
        })
        .collect();
    Failure::new(category, message)
        .with_evidence(evidence)
        .with_output(StepOutput::Test(result))
}

/// No test passed and the failures are compiler or collection errors.
fn looks_like_compile_error(result: &TestResult) -> bool {
    if result.passed > 0 || result.failures.is_empty() {
        return false;
    }
    let log = &result.log;
    log.contains("error[E")
        || log.contains("error: could not compile")
        || log.contains("errors during collection")
        || log.contains("SyntaxError")
        || log.contains("[build failed]")
        || result.failures.iter().all(|f| {
            let m = f.message.to_ascii_lowercase();
            m.contains("compile") || m.contains("syntax error") || m.contains("collection")
        })
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn shell_line(argv: &[String]) -> String {
    match argv {
        [sh, c, line] if sh == "sh" && c == "-c" => line.clone(),
        _ => Detected::explicit(argv.to_vec(), None, "").command_line(),
    }
}

fn format_size(bytes: u64) -> String {
    if bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else if bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unittest_is_a_framework_of_the_config() {
        let c = TestConfig::from_value(&json!({"framework": "unittest"})).unwrap();
        assert_eq!(c.framework, Some(Framework::Unittest));
        let err = TestConfig::from_value(&json!({"framework": "nose"})).unwrap_err();
        assert!(err.to_string().contains("unittest"), "{err}");
    }

    #[test]
    fn config_parses_every_key() {
        let c = TestConfig::from_value(&json!({
            "framework": "pytest", "command": "pytest -x", "sandbox": "docker",
            "image": "nuvira-busybox:latest", "memory": "256m", "cpus": 0.5, "pids": 64,
            "timeout": "90s", "network": "none", "mounts": ["/usr:/usr:ro"],
            "env": {"A": "1"}, "read_only_root": true
        }))
        .unwrap();
        assert_eq!(c.framework, Some(Framework::Pytest));
        assert_eq!(c.command.as_deref().unwrap()[2], "pytest -x");
        assert_eq!(c.sandbox.sandbox, SandboxKind::Docker);
        let limits = c.sandbox.limits();
        assert_eq!(limits.memory_bytes, 256 << 20);
        assert_eq!(limits.pids, 64);
        assert_eq!(limits.timeout, Duration::from_secs(90));
        assert_eq!(c.sandbox.mounts.len(), 1);
        assert!(c.sandbox.read_only_root);
    }

    #[test]
    fn config_defaults_match_the_issue() {
        let c = TestConfig::from_value(&Value::Null).unwrap();
        let l = c.sandbox.limits();
        // 4 GiB (what cargo needs), every core, 4096 processes/threads (see docs/sandbox.md).
        assert_eq!(l.memory_bytes, 4 << 30);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((l.cpus - cores as f64).abs() < f64::EPSILON);
        assert_eq!(l.pids, 4096);
        assert_eq!(l.timeout, Duration::from_secs(300));
        assert_eq!(c.sandbox.network.unwrap_or_default(), NetworkMode::None);
        assert_eq!(c.sandbox.sandbox, SandboxKind::Auto);
    }

    #[test]
    fn config_errors_name_the_key() {
        for (cfg, key) in [
            (json!({"memory": "lots"}), "config.memory"),
            (json!({"sandbox": "vm"}), "config.sandbox"),
            (json!({"framework": "mocha"}), "config.framework"),
            (json!({"network": "wifi"}), "config.network"),
            (json!({"mounts": ["nope"]}), "config.mounts"),
            (json!({"cpus": 0}), "config.cpus"),
            (json!({"command": ""}), "config.command"),
            (json!({"colour": "red"}), "colour"),
        ] {
            let err = TestConfig::from_value(&cfg).unwrap_err().to_string();
            assert!(err.contains(key), "{cfg}: {err}");
        }
    }

    #[test]
    fn execute_requires_a_command() {
        let step = PlanStep::new("run", "execute");
        let err = ExecuteModule::new().validate(&step).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("command"));
        let err = err.to_string();
        assert!(err.contains("config.command is required"), "{err}");
        assert!(err.contains("`run`"), "{err}");
    }

    #[test]
    fn failing_results_are_classified() {
        let mut r = TestResult::default();
        r.failed = 1;
        r.total = 2;
        r.passed = 1;
        r.failures = vec![nuvira_api::TestFailure::new("t", "assertion failed")];
        assert_eq!(test_failure(r.clone()).category, ErrorCategory::TestFailure);
        let mut oom = r.clone();
        let mut info = nuvira_api::SandboxInfo::default();
        info.oom_killed = true;
        oom.sandbox = Some(info);
        assert_eq!(test_failure(oom).category, ErrorCategory::OutOfMemory);
        let mut ce = TestResult::default();
        ce.failed = 1;
        ce.total = 1;
        ce.log = "error[E0308]: mismatched types".into();
        ce.failures = vec![nuvira_api::TestFailure::new("build", "mismatched types")];
        let f = test_failure(ce);
        assert_eq!(f.category, ErrorCategory::CompileError);
        assert!(matches!(f.output.as_deref(), Some(StepOutput::Test(_))));
    }

    #[test]
    fn merge_adds_counts_and_keeps_failures() {
        let mut a = TestResult::default();
        a.success = true;
        a.passed = 2;
        a.total = 2;
        a.framework = Some("cargo".into());
        let mut b = TestResult::default();
        b.passed = 1;
        b.failed = 1;
        b.total = 2;
        b.failures = vec![nuvira_api::TestFailure::new("x", "y")];
        b.framework = Some("pytest".into());
        let m = merge(a, b);
        assert!(!m.success);
        assert_eq!((m.passed, m.failed, m.total), (3, 1, 4));
        assert_eq!(m.framework.as_deref(), Some("cargo+pytest"));
    }
}
