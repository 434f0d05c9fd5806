//! `nuvira test [--repo DIR] [--framework ..] [--command CMD] [--sandbox auto|local|bwrap|docker]
//! [--image IMAGE] [--mount HOST:CONTAINER[:ro|:rw]]... [--memory SIZE] [--cpus N] [--pids N]
//! [--timeout DURATION] [--network none|host|bridge] [--format text|json|github|junit]`.
//!
//! Runs the `test` module on its own: the same config, detection, sandboxes and parsers as a
//! plan's `test` step. Exit codes: 0 all passed; 1 tests failed, timed out or were OOM-killed;
//! 2 bad arguments; 3 the requested sandbox is unavailable; 130 interrupted (Ctrl-C), 143
//! SIGTERM, 129 SIGHUP: the sandbox is removed first.

use crate::exit;
use clap::ValueEnum;
use nuvira_api::text::escape_control;
use nuvira_api::{
    ErrorCategory, EventKind, EventSink, ModuleError, StepContext, StepOutput, TestResult,
};
use nuvira_report::test_result;
use nuvira_runner::{SANDBOX_SELECTED, TestConfig, TestModule};
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Arguments of `nuvira test`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("run the detected tests in Docker, with no network", "nuvira test --repo . --sandbox docker"),
    ("one command locally, JUnit out, 10 minutes at most", "nuvira test --sandbox local --command \"make check\" --timeout 10m --format junit > junit.xml"),
]))]
pub struct Args {
    /// The repository to test.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The framework to run (auto: every one detected).
    #[arg(long, value_enum, default_value_t = FrameworkArg::Auto)]
    pub framework: FrameworkArg,
    /// A command to run instead of the detected ones (run with `sh -c`).
    #[arg(long, value_name = "CMD")]
    pub command: Option<String>,
    /// Where to run: docker when an engine answers and the image exists, else bwrap when it
    /// works here, else local (auto); a temporary local copy (local), the copy inside
    /// bubblewrap (bwrap), or a container (docker).
    #[arg(long, value_enum, default_value_t = SandboxArg::Auto)]
    pub sandbox: SandboxArg,
    /// The Docker image (default nuvira-host:latest, which runs the host's toolchains).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// An extra bind mount for Docker and bwrap (the local sandbox ignores it, saying so),
    /// read-only unless `:rw` (repeatable).
    #[arg(long = "mount", value_name = "HOST:CONTAINER[:ro|:rw]", value_parser = check_mount)]
    pub mounts: Vec<String>,
    /// Memory limit, e.g. 512m, 1g, 256MiB (default 4g).
    #[arg(long, value_name = "SIZE", value_parser = check_size)]
    pub memory: Option<String>,
    /// CPUs, fractions allowed (default: every core of this machine).
    #[arg(long, value_name = "N", value_parser = check_cpus)]
    pub cpus: Option<f64>,
    /// Maximum number of processes and threads (default 4096).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub pids: Option<u32>,
    /// Wall-clock limit, e.g. 90s, 5m, 1h30m (default 300s).
    #[arg(long, value_name = "DURATION", value_parser = check_duration)]
    pub timeout: Option<String>,
    /// Network inside the sandbox (default none).
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Run cold: without the project's warm build caches and its persistent workspace copy
    /// (see `nuvira cache` and docs/sandbox.md).
    #[arg(long)]
    pub no_cache: bool,
}

/// `--framework` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FrameworkArg {
    /// Every detected framework.
    Auto,
    /// `cargo test`.
    Cargo,
    /// `cargo nextest run`.
    Nextest,
    /// pytest.
    Pytest,
    /// `python -m unittest discover`.
    Unittest,
    /// vitest.
    Vitest,
    /// jest.
    Jest,
    /// `go test`.
    Go,
}

/// `--sandbox` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxArg {
    /// Docker when available, else bwrap when it works here, else local.
    Auto,
    /// A temporary local copy.
    Local,
    /// A Docker container.
    Docker,
    /// A temporary local copy, the command inside bubblewrap (no network, toolchain read-only).
    Bwrap,
}

/// `--network` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    /// No network.
    None,
    /// The host's network.
    Host,
    /// Docker's bridge.
    Bridge,
}

/// `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Failures and a summary line, for people.
    Text,
    /// The test result with its `sandbox` object.
    Json,
    /// `::error file=..,line=..::` workflow commands, one per failure (at most 10, GitHub's
    /// limit per step).
    Github,
    /// JUnit XML.
    Junit,
}

// The four formats are rendered by `nuvira_report::test_result`, beside the run report's
// renderers, so that escaping, the JUnit writer and duration formatting exist once.

fn check_mount(s: &str) -> Result<String, String> {
    let mount = nuvira_sandbox::parse_mount(s).map_err(|e| e.to_string())?;
    if !mount.host.exists() {
        return Err(format!(
            "the host path {} does not exist on this machine",
            mount.host.display()
        ));
    }
    Ok(s.to_owned())
}

fn check_size(s: &str) -> Result<String, String> {
    nuvira_sandbox::parse_size(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

fn check_duration(s: &str) -> Result<String, String> {
    match nuvira_api::duration::parse(s) {
        Ok(d) if d.is_zero() => Err("the timeout must be more than 0".into()),
        Ok(_) => Ok(s.to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

fn check_cpus(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a positive number of CPUs (e.g. 1, 0.5, 2)"
        )),
    }
}

impl Args {
    /// The step config these flags stand for (the same keys a plan's `test` step takes).
    fn config(&self) -> Value {
        let mut c = Map::new();
        let name = |v: &dyn ValueEnumName| v.name();
        c.insert("framework".into(), json!(name(&self.framework)));
        c.insert("sandbox".into(), json!(name(&self.sandbox)));
        if let Some(cmd) = &self.command {
            c.insert("command".into(), json!(cmd));
        }
        if let Some(image) = &self.image {
            c.insert("image".into(), json!(image));
        }
        if !self.mounts.is_empty() {
            c.insert("mounts".into(), json!(self.mounts));
        }
        if let Some(m) = &self.memory {
            c.insert("memory".into(), json!(m));
        }
        if let Some(n) = self.cpus {
            c.insert("cpus".into(), json!(n));
        }
        if let Some(n) = self.pids {
            c.insert("pids".into(), json!(n));
        }
        if let Some(t) = &self.timeout {
            c.insert("timeout".into(), json!(t));
        }
        if let Some(n) = &self.network {
            c.insert("network".into(), json!(name(n)));
        }
        if self.no_cache {
            c.insert("cache".into(), json!(false));
        }
        Value::Object(c)
    }
}

trait ValueEnumName {
    fn name(&self) -> String;
}

impl<T: ValueEnum> ValueEnumName for T {
    fn name(&self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    let format = args.format;
    let fail = |code: u8, kind: &str, message: &str| {
        eprintln!("error: {}", crate::cli::esc_lines(message));
        if format == Format::Json {
            super::print_stdout(&crate::cli::actions::json_for_stdout(&super::json_error(
                kind, message, None,
            )));
        }
        code
    };
    if let Err(e) = super::check_repo(&args.repo) {
        return fail(exit::INVALID, "repository", &e.to_string());
    }
    let repo = std::fs::canonicalize(&args.repo).unwrap_or_else(|_| args.repo.clone());
    let config = match TestConfig::from_value(&args.config()) {
        Ok(c) => c,
        Err(e) => return fail(exit::INVALID, "invalid-input", &e.to_string()),
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                exit::FAILED,
                "failed",
                &format!("failed to start the async runtime: {e}"),
            );
        }
    };
    rt.block_on(async move {
        // Sandbox copies and process groups of nuvira processes that died.
        nuvira_sandbox::remove_stale();
        let token = CancellationToken::new();
        super::signal::sandbox_cleanup_before_exit();
        let interrupt = super::signal::Interrupt::listen(token.clone());
        let ctx = StepContext::standalone(&repo)
            .with_identity("test", "test", "")
            .with_events(Arc::new(Progress {
                verbose: format == Format::Text,
            }))
            .with_execution(
                false,
                1,
                Arc::new(crate::scheduler::TokenSignal(token)),
                None,
                None,
            );
        let outcome = TestModule::new().run_config(&config, &ctx).await;
        // The result first: the removal of a finished run's container (and the measurement
        // of its volumes) is waited for after it is out, not before.
        let code = report(outcome, format);
        super::signal::wait_for_sandbox_cleanup().await;
        match interrupt.code() {
            Some(signal_code) if code == exit::CANCELLED => signal_code,
            _ => code,
        }
    })
}

/// Maps the module's outcome to output and an exit code. A failure without a test result
/// prints `error: ...` on stderr, and with `--format json` `{"ok": false, "error": {...}}` on
/// stdout.
fn report(outcome: Result<TestResult, ModuleError>, format: Format) -> u8 {
    let fail = |code: u8, kind: &str, message: &str| {
        eprintln!("error: {}", crate::cli::esc_lines(message));
        if format == Format::Json {
            super::print_stdout(&crate::cli::actions::json_for_stdout(&super::json_error(
                kind, message, None,
            )));
        }
        code
    };
    let result = match outcome {
        Ok(result) => result,
        Err(ModuleError::Recoverable(failure)) => match failure.output.as_deref() {
            Some(StepOutput::Test(result)) => result.clone(),
            _ => return fail(exit::FAILED, "failed", &failure.message),
        },
        Err(ModuleError::Fatal(failure)) => {
            return if failure.category == ErrorCategory::InvalidConfig {
                fail(exit::INVALID, "invalid-input", &failure.message)
            } else if failure.category.is_environment() {
                fail(exit::ENVIRONMENT, "environment", &failure.message)
            } else {
                fail(exit::FAILED, "failed", &failure.message)
            };
        }
        Err(ModuleError::Cancelled) => {
            return fail(
                exit::CANCELLED,
                "cancelled",
                "interrupted: the test run was cancelled and its sandbox removed",
            );
        }
        Err(other) => return fail(exit::FAILED, "failed", &other.to_string()),
    };
    if let Some(sandbox) = &result.sandbox {
        for name in &sandbox.skipped_special_files {
            eprintln!(
                "warning: left `{}` out of the {} sandbox: it is a FIFO, socket or device, not a file that can be copied; the tests ran without it",
                crate::cli::esc(name),
                sandbox.kind
            );
        }
    }
    let (text, as_report) = match format {
        Format::Text => (test_result::text(&result), nuvira_report::Format::Text),
        Format::Json => (
            super::conventions::with_schema_version(&test_result::json(&result)),
            nuvira_report::Format::Json,
        ),
        Format::Github => (test_result::github(&result), nuvira_report::Format::Github),
        Format::Junit => (test_result::junit(&result), nuvira_report::Format::Junit),
    };
    super::print_stdout(&crate::cli::actions::report_for_stdout(&text, as_report));
    if result.success {
        exit::SUCCESS
    } else {
        exit::FAILED
    }
}

/// Prints which sandbox was picked, and each run's start, on stderr.
struct Progress {
    verbose: bool,
}

impl EventSink for Progress {
    fn emit(&self, _step_id: Option<&str>, kind: EventKind) {
        match kind {
            EventKind::Custom { name, data } if name == SANDBOX_SELECTED => {
                if let Some(reason) = data.get("reason").and_then(Value::as_str) {
                    eprintln!("sandbox: {}", crate::cli::esc(reason));
                }
                for run in data
                    .get("runs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let field = |k: &str| run.get(k).and_then(Value::as_str).unwrap_or_default();
                    let dir = match field("dir") {
                        "" => ".",
                        d => d,
                    };
                    let toolchain = match field("toolchain") {
                        "" => String::new(),
                        t => format!("; {}", escape_control(t)),
                    };
                    eprintln!(
                        "detected: {} in {} ({}){toolchain}",
                        escape_control(field("framework")),
                        escape_control(dir),
                        escape_control(field("reason")),
                    );
                }
            }
            EventKind::TestStarted {
                framework, command, ..
            } if self.verbose => eprintln!("running {framework}: {command}"),
            EventKind::TestSandboxCreated {
                container_id: Some(id),
                ..
            } if self.verbose => eprintln!("container {}", &id[..id.len().min(12)]),
            _ => {}
        }
    }
}
