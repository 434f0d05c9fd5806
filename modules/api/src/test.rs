//! Tests and sandboxes: [`TestResult`], the [`Sandbox`] trait and its request/outcome types.

use crate::{CancelSignal, async_trait};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// One failing test (or a compile/collection error standing in for the tests it prevented).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct TestFailure {
    /// The test's name (`module::test`, `test_file.py::test_x`, ...).
    pub name: String,
    /// The source file, workspace-relative where it can be made so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The assertion or error message.
    pub message: String,
    /// The test's captured output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
}

impl TestFailure {
    /// A failure with a name and a message.
    pub fn new(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            message: message.into(),
            ..Self::default()
        }
    }

    /// Builder-style: sets the location.
    #[must_use]
    pub fn at(mut self, file: impl Into<String>, line: Option<u32>) -> Self {
        self.file = Some(file.into());
        self.line = line;
        self
    }

    /// Builder-style: sets the captured output.
    #[must_use]
    pub fn with_output(mut self, output: impl Into<String>) -> Self {
        self.output = output.into();
        self
    }
}

/// What a sandbox run looked like, as reported with a test result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxInfo {
    /// `local`, `bwrap` or `docker`.
    pub kind: String,
    /// The image, for Docker.
    pub image: Option<String>,
    /// The container id, for Docker.
    pub container_id: Option<String>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Killed for exceeding its memory limit.
    pub oom_killed: bool,
    /// The command's exit code, if it exited.
    pub exit_code: Option<i64>,
    /// Special files of the workspace (FIFOs, sockets, devices), workspace-relative, that were
    /// left out of the sandbox's copy: they cannot be copied or uploaded, and a user should
    /// know that the tests ran without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_special_files: Vec<String>,
    /// The process limit refused to start a process or thread (a fork bomb, or a limit too low
    /// for the tests: raise `pids`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pids_limited: bool,
    /// How the memory and process limits were enforced (e.g. `memory 4.0 GiB and 4096
    /// processes/threads enforced by cgroup v1 (...)`), or that they were not and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// The project's build-cache key when the run used Nuvira's warm caches
    /// ([`SandboxRequest::cache`]); `None` for a run without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// How the workspace got into the sandbox when the run used the caches: e.g. `synced: 3
    /// copied, 1 removed, 812 unchanged`, or `fresh copy: the persistent copy is in use by
    /// another run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_copy: Option<String>,
    /// How the files the request collects (reports) came back, when some were asked of a
    /// Docker run: read on this machine through the kept container's root, downloaded from
    /// the engine, or some of each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collected_from: Option<String>,
}

/// How one test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum TestOutcome {
    /// It passed.
    #[default]
    Passed,
    /// It failed (the details are in [`TestResult::failures`], under the same name).
    Failed,
    /// It was skipped or ignored.
    Skipped,
}

/// One test the runner reported, passing ones included: what a JUnit report lists as a
/// `testcase`. Parsers fill this where the runner names its tests (JUnit XML, libtest,
/// nextest, pytest, jest, vitest, go test); a runner that prints only totals leaves it empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct TestCase {
    /// The test's name, as in [`TestFailure::name`].
    pub name: String,
    /// The suite, class or file the test belongs to, where the runner says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classname: Option<String>,
    /// How it ended.
    pub outcome: TestOutcome,
    /// How long it ran, where the runner says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl TestCase {
    /// A test case with a name and an outcome.
    pub fn new(name: impl Into<String>, outcome: TestOutcome) -> Self {
        Self {
            name: name.into(),
            outcome,
            ..Self::default()
        }
    }
}

/// The outcome of a test run.
///
/// Counting: `total = passed + failed`; skipped and ignored tests are in `skipped` only. A run
/// that never reached its summary (killed, crashed, did not compile) is not a success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct TestResult {
    /// Every test passed and the run completed.
    pub success: bool,
    /// Passed tests.
    pub passed: u32,
    /// Failed tests (collection and compile errors count here).
    pub failed: u32,
    /// Skipped or ignored tests.
    #[serde(default)]
    pub skipped: u32,
    /// `passed + failed`.
    pub total: u32,
    /// The failures, with file and line where known.
    pub failures: Vec<TestFailure>,
    /// Every test by name, passing ones included, where the runner names them (empty when
    /// it prints only totals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<TestCase>,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// The runner's combined output (capped).
    #[serde(default)]
    pub log: String,
    /// The framework (`cargo`, `pytest`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// The command run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The sandbox it ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
}

/// The output of a command run as a step (`execute`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct CommandOutput {
    /// The command line.
    pub command: String,
    /// The exit code, if it exited.
    pub exit_code: Option<i64>,
    /// Standard output (capped).
    pub stdout: String,
    /// Standard error (capped).
    pub stderr: String,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// The sandbox it ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
}

/// Network access inside a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No network at all (the default).
    #[default]
    None,
    /// The host's network.
    Host,
    /// Docker's default bridge.
    Bridge,
}

/// Resource limits for a sandboxed command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ResourceLimits {
    /// Memory (and memory + swap) in bytes.
    pub memory_bytes: u64,
    /// CPUs (fractions allowed).
    pub cpus: f64,
    /// Maximum number of processes.
    pub pids: u32,
    /// Wall-clock limit.
    #[serde(with = "duration_secs")]
    #[cfg_attr(feature = "schemars", schemars(with = "f64"))]
    pub timeout: Duration,
}

impl ResourceLimits {
    /// The default memory limit: 4 GiB, what `cargo test` needs to build a crate with a heavy
    /// dependency tree (rustc on a large crate takes well over 1 GiB, and cargo runs one rustc
    /// per core).
    pub const DEFAULT_MEMORY: u64 = 4 << 30;
    /// The default process limit: 4096 processes and threads (a cgroup counts threads), so a
    /// test that spawns hundreds of threads passes while a fork bomb is stopped.
    pub const DEFAULT_PIDS: u32 = 4096;
}

impl Default for ResourceLimits {
    /// [`DEFAULT_MEMORY`](Self::DEFAULT_MEMORY) (4 GiB), every core of this machine,
    /// [`DEFAULT_PIDS`](Self::DEFAULT_PIDS) (4096) processes/threads, 300 s.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Self {
            memory_bytes: Self::DEFAULT_MEMORY,
            cpus: cores as f64,
            pids: Self::DEFAULT_PIDS,
            timeout: Duration::from_secs(300),
        }
    }
}

mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// A bind mount into a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Mount {
    /// Host path.
    pub host: PathBuf,
    /// Path inside the sandbox.
    pub container: String,
    /// Mounted read-only (the default).
    pub read_only: bool,
}

/// What to run in a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxRequest {
    /// The workspace to copy in.
    pub workspace: PathBuf,
    /// The command, as argv.
    pub command: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Limits.
    pub limits: ResourceLimits,
    /// Network access.
    pub network: NetworkMode,
    /// The image (Docker).
    pub image: Option<String>,
    /// Extra mounts (Docker).
    pub mounts: Vec<Mount>,
    /// Make the root file system read-only, with a writable workdir and /tmp (Docker).
    pub read_only_root: bool,
    /// Also copy ignored files and folders such as `target/` and `node_modules/`.
    pub include_ignored: bool,
    /// Workspace-relative files to bring back after the run (e.g. a JUnit report).
    pub collect: Vec<String>,
    /// The workspace-relative folder to run the command in (empty: the workspace root).
    #[serde(default)]
    pub dir: PathBuf,
    /// Use the project's warm build caches and its persistent, synced workspace copy (kept
    /// between runs under the per-user cache folder) instead of a cold, fresh copy. Off in
    /// [`SandboxRequest::new`]; the `test` and `execute` modules turn it on unless the step
    /// says `cache: false` (`--no-cache`).
    #[serde(default)]
    pub cache: bool,
}

impl SandboxRequest {
    /// A request to run `command` in a copy of `workspace` with default limits.
    pub fn new(workspace: impl Into<PathBuf>, command: Vec<String>) -> Self {
        Self {
            workspace: workspace.into(),
            command,
            env: BTreeMap::new(),
            limits: ResourceLimits::default(),
            network: NetworkMode::None,
            image: None,
            mounts: Vec::new(),
            read_only_root: false,
            include_ignored: false,
            collect: Vec::new(),
            dir: PathBuf::new(),
            cache: false,
        }
    }
}

/// How a sandboxed command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct SandboxOutcome {
    /// The exit code, if it exited by itself.
    pub exit_code: Option<i64>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Killed for exceeding memory.
    pub oom_killed: bool,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// What ran it.
    pub info: SandboxInfo,
    /// Files collected after the run, by requested path.
    pub collected: BTreeMap<String, Vec<u8>>,
    /// Where the command ran, as the sandbox saw it (the copy's folder, or the path inside the
    /// container, including [`SandboxRequest::dir`]): absolute paths in the output start with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
}

/// Why a sandbox could not run a command (as opposed to the command failing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The sandbox cannot be used here (no Docker engine, image missing).
    #[error("{0}")]
    Unavailable(String),
    /// Setting up or talking to the sandbox failed.
    #[error("{0}")]
    Failed(String),
    /// The sandbox refused the request's settings (a limit its engine does not take): the
    /// request is to change, not the environment (exit code 2 at the CLI).
    #[error("{0}")]
    Rejected(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// Runs a command in isolation.
///
/// # Errors
/// [`SandboxError::Unavailable`] when the sandbox cannot be used at all (exit code 3 at the
/// CLI), [`SandboxError::Failed`] when it broke; a command that fails, times out or runs out of
/// memory is an `Ok` outcome saying so.
///
/// ```
/// use nuvira_api::{async_trait, CancelSignal, Sandbox, SandboxError, SandboxOutcome, SandboxRequest};
///
/// /// Runs nothing: answers every command with exit code 0 (a stand-in for tests).
/// struct Succeeds;
///
/// #[async_trait]
/// impl Sandbox for Succeeds {
///     fn kind(&self) -> &str { "succeeds" }
///     async fn run(&self, request: &SandboxRequest, cancel: &dyn CancelSignal) -> Result<SandboxOutcome, SandboxError> {
///         if cancel.is_cancelled() {
///             return Err(SandboxError::Cancelled);
///         }
///         let mut out = SandboxOutcome::default();
///         out.exit_code = Some(0);
///         out.stdout = request.command.join(" ");
///         Ok(out)
///     }
/// }
///
/// let request = SandboxRequest::new(".", vec!["cargo".into(), "test".into()]);
/// let mut run = Succeeds.run(&request, &nuvira_api::NeverCancelled);
/// let poll = run.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
/// let std::task::Poll::Ready(Ok(out)) = poll else { panic!("{poll:?}") };
/// assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "cargo test"));
/// ```
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// `local`, `docker`, ...
    fn kind(&self) -> &str;
    /// Runs the request; cleans up everything it created, in every case.
    async fn run(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
    ) -> Result<SandboxOutcome, SandboxError>;
}
