//! Result parsers: turn what a test runner printed (and the report files it wrote) into a
//! [`TestResult`].
//!
//! [`parse_output`] is the entry point: it prefers the machine-readable report (JUnit XML, jest /
//! vitest JSON, `go test -json`, libtest JSON) and falls back to the runner's human output, so a
//! run whose report is missing (the runner crashed, the user gave their own command) is still
//! understood. The individual parsers are public too: [`junit`], [`libtest`], [`nextest`],
//! [`pytest`], [`unittest`], [`js`] (jest and vitest), [`gotest`] and [`diagnostics`] (rustc,
//! go and tsc compiler errors).
//!
//! Counting follows DESIGN.md: `total = passed + failed`; skipped, ignored, xfailed and todo tests
//! only go to `skipped`; doctests count like other tests; pytest errors count as failed and
//! xpassed as passed. A file that could not be collected or compiled (a pytest collection error,
//! a vitest "Failed Suite", a jest "Test suite failed to run", a rustc or go build error) is a
//! failure of its own, counted in `failed`, with file and line where the runner gave them. A run
//! that never reached its summary (killed at a timeout, crashed) is never a success: the tests
//! that were running become failures when their names are known, otherwise one `test run`
//! failure says what happened. A non-zero exit code without any failing test is a failure too.
//!
//! Paths are made workspace-relative when a root is given, ANSI colour codes are stripped, and
//! the combined log is capped at [`LOG_CAP`] bytes.

pub mod diagnostics;
pub mod gotest;
pub mod js;
pub mod junit;
pub mod libtest;
pub mod nextest;
pub mod pytest;
pub mod unittest;

use crate::detect::{Detected, Framework};
use nuvira_api::{SandboxOutcome, TestFailure, TestResult};
use regex::Regex;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

/// The combined log kept in [`TestResult::log`] is capped at this many bytes (head and tail
/// are kept).
pub const LOG_CAP: usize = 64 * 1024;

/// Everything a finished runner left behind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RunnerOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit code, `None` when it was killed without one.
    pub exit_code: Option<i64>,
    /// A JUnit XML report the run wrote (pytest `--junitxml`, nextest's JUnit profile, jest-junit).
    pub junit_xml: Option<String>,
    /// A JSON report the run wrote to a file (jest `--outputFile`, vitest `--outputFile.json`).
    pub json_report: Option<String>,
    /// The sandbox killed it at its wall-clock timeout.
    pub timed_out: bool,
    /// The sandbox killed it for exceeding its memory limit (kept apart from `timed_out`, so
    /// an OOM kill is never reported as a timeout).
    pub oom_killed: bool,
}

impl RunnerOutput {
    /// Output with just stdout, stderr and an exit code.
    pub fn new(
        stdout: impl Into<String>,
        stderr: impl Into<String>,
        exit_code: Option<i64>,
    ) -> Self {
        Self {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code,
            ..Self::default()
        }
    }

    /// Builder-style: sets the JUnit report.
    #[must_use]
    pub fn with_junit(mut self, xml: impl Into<String>) -> Self {
        self.junit_xml = Some(xml.into());
        self
    }

    /// Builder-style: sets the JSON report.
    #[must_use]
    pub fn with_json_report(mut self, json: impl Into<String>) -> Self {
        self.json_report = Some(json.into());
        self
    }

    /// Builder-style: marks the run as killed at the sandbox's timeout.
    #[must_use]
    pub fn timed_out(mut self, yes: bool) -> Self {
        self.timed_out = yes;
        self
    }

    /// Builder-style: marks the run as killed for exceeding its memory limit.
    #[must_use]
    pub fn oom_killed(mut self, yes: bool) -> Self {
        self.oom_killed = yes;
        self
    }

    /// Builds the parser input from a sandbox outcome: stdout, stderr, exit code, the timeout
    /// and OOM flags, and the collected files (`*.xml` as JUnit, `*.json` as the JSON report).
    pub fn from_outcome(outcome: &SandboxOutcome) -> Self {
        Self::from_parts(
            &outcome.stdout,
            &outcome.stderr,
            outcome.exit_code,
            outcome.timed_out,
            &outcome.collected,
        )
        .oom_killed(outcome.oom_killed)
    }

    /// Like [`from_outcome`](Self::from_outcome), from the pieces.
    pub fn from_parts(
        stdout: &str,
        stderr: &str,
        exit_code: Option<i64>,
        timed_out: bool,
        collected: &BTreeMap<String, Vec<u8>>,
    ) -> Self {
        let mut out = Self::new(stdout, stderr, exit_code).timed_out(timed_out);
        for (path, bytes) in collected {
            if bytes.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(bytes).into_owned();
            if path.ends_with(".xml") {
                out.junit_xml = Some(text);
            } else if path.ends_with(".json") {
                out.json_report = Some(text);
            }
        }
        out
    }

    fn killed(&self) -> Option<&'static str> {
        if self.oom_killed {
            Some("killed for exceeding its memory limit")
        } else if self.timed_out {
            Some("killed at its timeout")
        } else {
            match self.exit_code {
                Some(137) => Some("killed (SIGKILL, exit 137)"),
                Some(143) => Some("killed (SIGTERM, exit 143)"),
                Some(130) => Some("interrupted (SIGINT, exit 130)"),
                None => Some("killed by a signal (no exit code)"),
                _ => None,
            }
        }
    }
}

/// Parses a runner's output into a [`TestResult`] (never fails: output that cannot be
/// understood becomes a failed result that says so).
///
/// ```
/// use nuvira_runner::detect::Framework;
/// use nuvira_runner::parse::{RunnerOutput, parse_output};
/// use std::path::Path;
///
/// // Real `cargo test --no-fail-fast` output (see tests/fixtures/README.md).
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cargo");
/// let read = |ext: &str| std::fs::read_to_string(format!("{dir}/basic-no-fail-fast.{ext}")).unwrap();
/// let output = RunnerOutput::new(read("stdout"), read("stderr"), Some(101));
/// let result = parse_output(Framework::Cargo, &output, Some(Path::new("/home/dev/projects/cargo/basic")));
/// assert_eq!((result.passed, result.failed, result.total), (2, 2, 4));
/// assert!(!result.success);
/// let first = &result.failures[0];
/// assert_eq!((first.file.as_deref(), first.line), (Some("src/lib.rs"), Some(16)));
/// ```
///
/// `root` is the folder the runner ran in (the workspace root or the detected sub-folder, on the
/// machine that ran it); absolute paths under it become relative. `framework` and the command
/// line are recorded in the result; [`TestResult::duration_ms`] is the runner's own figure where
/// it printed one — callers that measured wall-clock time may overwrite it.
pub fn parse_output(
    framework: Framework,
    output: &RunnerOutput,
    root: Option<&Path>,
) -> TestResult {
    parse_output_with(framework, output, root, root.and_then(go_module_of))
}

/// [`parse_output`] with the Go module path given (`go.mod`'s `module` line), for when `root`
/// is no longer readable (a sandbox copy that was removed).
pub fn parse_output_with(
    framework: Framework,
    output: &RunnerOutput,
    root: Option<&Path>,
    go_module: Option<String>,
) -> TestResult {
    let ctx = Ctx::new(root);
    let tally = match framework {
        Framework::Cargo => libtest::parse_cargo(output, &ctx),
        Framework::Nextest => nextest::parse(output, &ctx),
        Framework::Pytest => pytest::parse(output, &ctx),
        Framework::Unittest => unittest::parse(output, &ctx),
        Framework::Vitest => js::parse_vitest(output, &ctx),
        Framework::Jest => js::parse_jest(output, &ctx),
        Framework::Go => gotest::parse(output, &ctx, go_module),
    };
    let mut result = tally.finish(output);
    result.framework = Some(framework.as_str().to_owned());
    result
}

/// The failure of a run the sandbox killed for exceeding its memory limit.
pub const OOM_MESSAGE: &str = "the test run was killed for exceeding its memory limit (OOM): raise the limit with `--memory` (e.g. `--memory 2g`) or `memory` in the test step's config";

/// The failure of a failed run during which the sandbox's process limit refused to start a
/// process or thread.
pub const PIDS_MESSAGE: &str = "the sandbox's process limit refused to start a process or thread (a fork bomb, or tests that need more): raise the limit with `--pids` (e.g. `--pids 8192`) or `pids` in the test step's config";

/// Appended to the failure of a run killed at its timeout.
pub const TIMEOUT_HINT: &str = "raise the limit with `--timeout` (e.g. `--timeout 10m`) or `timeout` in the test step's config, or fix the hanging test";

/// Parses what a sandbox run of a [`Detected`] command left behind — the one call the test
/// module needs after `Sandbox::run`.
///
/// Paths are made relative to `outcome.workdir` (where the command ran) and then prefixed with
/// [`Detected::dir`], so they are workspace-relative; `workspace` is the host workspace root,
/// read only for the `go.mod` of Go projects (the sandbox copy may be gone by now). An OOM kill
/// is a failure. The result carries the framework, the command line, the sandbox info and the
/// wall-clock duration of the run.
pub fn parse_outcome(
    detected: &Detected,
    outcome: &SandboxOutcome,
    workspace: Option<&Path>,
) -> TestResult {
    let output = RunnerOutput::from_outcome(outcome);
    let root = outcome.workdir.as_deref();
    let mut result = match detected.framework {
        Some(framework) => {
            let module = workspace
                .map(|w| w.join(&detected.dir))
                .and_then(|d| go_module_of(&d))
                .or_else(|| root.and_then(go_module_of));
            parse_output_with(framework, &output, root, module)
        }
        None => match guess_framework(&output) {
            // Read go.mod from the host workspace: the sandbox copy may be gone by now.
            Some(framework) => {
                let module = workspace
                    .map(|w| w.join(&detected.dir))
                    .and_then(|d| go_module_of(&d))
                    .or_else(|| root.and_then(go_module_of));
                parse_output_with(framework, &output, root, module)
            }
            None => parse_any(&output, root),
        },
    };
    if outcome.oom_killed {
        // One cause, the right one: the whole-run failures the parser derived from the kill
        // (its exit code, the missing summary) give way to the one that names the memory limit.
        result.failures.retain(|f| f.name != "test run");
        // A test the kill cut short (named by a verbose runner) carries the cause, as at a
        // timeout: one failure per failed test, not an extra whole-run one beside it.
        let mut named = false;
        for f in &mut result.failures {
            if f.message.starts_with("did not finish: ")
                && f.message.contains("killed for exceeding its memory limit")
            {
                f.message = format!("did not finish: {OOM_MESSAGE}");
                named = true;
            }
        }
        if !named {
            result
                .failures
                .insert(0, TestFailure::new("test run", OOM_MESSAGE));
            if result.failed == 0 {
                result.failed = 1;
            }
        }
        result.total = result.passed + result.failed;
        result.success = false;
    }
    // Name the limit that stopped the run, and how to raise it.
    if outcome.timed_out {
        for f in &mut result.failures {
            if f.message.contains("killed at its timeout") && !f.message.contains("--timeout") {
                f.message = format!("{} ({TIMEOUT_HINT})", f.message);
            }
        }
    }
    if outcome.info.pids_limited && !outcome.oom_killed && outcome.exit_code != Some(0) {
        // As for OOM: the generic whole-run failures give way to the one naming the limit;
        // failures of named tests stay.
        result.failures.retain(|f| f.name != "test run");
        result
            .failures
            .insert(0, TestFailure::new("test run", PIDS_MESSAGE));
        if result.failed == 0 {
            result.failed = 1;
        }
        result.total = result.passed + result.failed;
        result.success = false;
    }
    // Parsers give paths relative to where the runner ran; make them workspace-relative.
    if !detected.dir.as_os_str().is_empty() {
        let prefix = detected.dir.to_string_lossy().replace('\\', "/");
        let prefix = prefix.trim_end_matches('/');
        for f in &mut result.failures {
            if let Some(file) = &f.file
                && !file.starts_with('/')
                && !file.starts_with(&format!("{prefix}/"))
            {
                f.file = Some(format!("{prefix}/{file}"));
            }
        }
    }
    // A workspace-relative location must name a file or folder of the workspace: a test
    // file's name with a newline in it reads as another file on the next line
    // (`test_a\nforged.py:3:`), and pytest's JUnit report spells control characters as
    // `#x1B`. For pytest such a location becomes the file the test's node id names
    // (`tests/test_a\nforged.py::test_x`) when that one is a file there; else it is dropped
    // (the message and output stay): never an annotation put on a file that is not there.
    if let Some(ws) = workspace {
        let pytest = result.framework.as_deref() == Some(Framework::Pytest.as_str());
        let prefix = detected.dir.to_string_lossy().replace('\\', "/");
        let prefix = prefix.trim_end_matches('/');
        for f in &mut result.failures {
            if let Some(file) = &f.file
                && !file.starts_with('/')
                && !is_workspace_entry(ws, file, false)
            {
                let named = f
                    .name
                    .split_once("::")
                    .filter(|_| pytest)
                    .map(|(file, _)| {
                        if prefix.is_empty() {
                            file.to_owned()
                        } else {
                            format!("{prefix}/{file}")
                        }
                    })
                    .filter(|named| is_workspace_entry(ws, named, true));
                match named {
                    Some(named) => f.file = Some(named),
                    None => {
                        f.file = None;
                        f.line = None;
                    }
                }
            }
        }
    }
    if outcome.timed_out || outcome.exit_code != Some(0) {
        result.success = false;
    }
    result.command = Some(detected.command_line());
    result.sandbox = Some(outcome.info.clone());
    if outcome.duration_ms > 0 {
        result.duration_ms = outcome.duration_ms;
    }
    result
}

/// Whether `file`, relative, is an entry of the workspace `ws` (a regular file when
/// `file_only`; the last component's link not followed): its `..` are resolved by name and
/// must not leave the workspace.
fn is_workspace_entry(ws: &Path, file: &str, file_only: bool) -> bool {
    let mut clean = std::path::PathBuf::new();
    for c in Path::new(file).components() {
        match c {
            std::path::Component::Normal(n) => clean.push(n),
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !clean.pop() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    if clean.as_os_str().is_empty() {
        return false;
    }
    std::fs::symlink_metadata(ws.join(clean)).is_ok_and(|m| !file_only || m.is_file())
}

/// Parses the output of a command whose framework is unknown (an explicit command): guesses the
/// framework from the output, else reports just the exit code and any compiler diagnostics.
pub fn parse_any(output: &RunnerOutput, root: Option<&Path>) -> TestResult {
    if let Some(framework) = guess_framework(output) {
        return parse_output(framework, output, root);
    }
    let ctx = Ctx::new(root);
    let mut tally = Tally::default();
    if let Some(xml) = &output.junit_xml
        && let Ok(t) = junit::parse(xml, &ctx)
    {
        tally = t;
    } else {
        tally.add_diagnostics(diagnostics::parse_all(&output.stdout, &output.stderr, &ctx));
        tally.completed = output.exit_code == Some(0);
    }
    tally.finish(output)
}

/// Guesses which runner printed `output` from its tell-tale lines.
pub fn guess_framework(output: &RunnerOutput) -> Option<Framework> {
    let both = [output.stdout.as_str(), output.stderr.as_str()];
    let any = |needle: &str| both.iter().any(|s| s.contains(needle));
    if any("Nextest run ID") || any("cargo nextest") {
        Some(Framework::Nextest)
    } else if any("test session starts") || any("short test summary info") {
        Some(Framework::Pytest)
    } else if any("\"Action\":\"") || any("\n--- FAIL: ") || any("\nok  \t") {
        Some(Framework::Go)
    } else if any(" RUN  v") || any("numTotalTestSuites") && any("\"meta\"") {
        Some(Framework::Vitest)
    } else if any("Test Suites:") || any("numRuntimeErrorTestSuites") {
        Some(Framework::Jest)
    } else if (any("\nRan ") || any("Ran 1 test") || any(") ... "))
        && any("----------------------------------------------------------------------")
    {
        Some(Framework::Unittest)
    } else if any("test result: ") || any("     Running ") {
        Some(Framework::Cargo)
    } else {
        None
    }
}

fn go_module_of(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join("go.mod")).ok()?;
    crate::detect::go_module_path(&text)
}

/// Shared parsing context: the root for relative paths.
#[derive(Debug, Clone, Default)]
pub struct Ctx {
    root: Option<String>,
}

impl Ctx {
    /// A context that makes paths under `root` relative.
    pub fn new(root: Option<&Path>) -> Self {
        Self {
            root: root.map(|r| {
                let mut s = r.to_string_lossy().replace('\\', "/");
                while s.len() > 1 && s.ends_with('/') {
                    s.pop();
                }
                s
            }),
        }
    }

    /// Makes `path` workspace-relative: strips `file://`, the root and a leading `./`.
    pub fn relative(&self, path: &str) -> String {
        let path = path.strip_prefix("file://").unwrap_or(path);
        if let Some(root) = &self.root
            && let Some(rest) = path.strip_prefix(root.as_str())
            && let Some(rest) = rest.strip_prefix('/')
        {
            return rest.to_owned();
        }
        path.strip_prefix("./").unwrap_or(path).to_owned()
    }
}

/// The running count a parser builds; [`Tally::finish`] turns it into a [`TestResult`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Passed tests.
    pub passed: u32,
    /// Failed tests and errors.
    pub failed: u32,
    /// Skipped tests.
    pub skipped: u32,
    /// Failures with details.
    pub failures: Vec<TestFailure>,
    /// Tests that started but never finished (known by name).
    pub unfinished: Vec<String>,
    /// Tests that started but never finished whose names are unknown.
    pub unfinished_unnamed: u32,
    /// The run reached its summary.
    pub completed: bool,
    /// The runner's own duration.
    pub duration_ms: u64,
    /// Every test by name, where the runner names them (passing ones included).
    pub cases: Vec<nuvira_api::TestCase>,
}

impl Tally {
    /// Records one named test's outcome as a case (counting is left to the parser).
    pub fn case(
        &mut self,
        name: impl Into<String>,
        classname: Option<String>,
        outcome: nuvira_api::TestOutcome,
        duration_ms: Option<u64>,
    ) {
        let mut c = nuvira_api::TestCase::new(name, outcome);
        c.classname = classname;
        c.duration_ms = duration_ms;
        self.cases.push(c);
    }

    /// Records a failure (and counts it).
    pub fn fail(&mut self, failure: TestFailure) {
        self.failed += 1;
        self.failures.push(failure);
    }

    /// Records compiler or collection diagnostics as failures.
    pub fn add_diagnostics(&mut self, diags: Vec<TestFailure>) {
        for d in diags {
            self.fail(d);
        }
    }

    /// Finishes the count: interrupted runs, unexplained exit codes, totals, log.
    pub fn finish(mut self, output: &RunnerOutput) -> TestResult {
        let killed = output.killed();
        let code = output
            .exit_code
            .map_or_else(|| "no exit code".to_owned(), |c| format!("exit code {c}"));
        let how = killed.map_or_else(|| format!("stopped ({code})"), str::to_owned);
        let named = std::mem::take(&mut self.unfinished);
        let had_named = !named.is_empty();
        for name in named {
            self.fail(TestFailure::new(
                name,
                format!("did not finish: the run was {how} before this test ended"),
            ));
        }
        let unnamed = self.unfinished_unnamed;
        let unnamed_note = match unnamed {
            0 => String::new(),
            1 => "; 1 test had not finished".to_owned(),
            n => format!("; {n} tests had not finished"),
        };
        if let Some(killed) = killed
            && !had_named
        {
            let summary = if self.completed {
                ""
            } else {
                " before it reported a summary"
            };
            self.failures.push(TestFailure::new(
                "test run",
                format!("the test run was {killed}{summary}{unnamed_note}"),
            ));
            self.failed += unnamed.max(1);
        } else if unnamed > 0 && !had_named {
            self.failures.push(TestFailure::new(
                "test run",
                format!("the test process stopped before its summary ({code}){unnamed_note}; see the log"),
            ));
            self.failed += unnamed;
        } else if !self.completed && self.failures.is_empty() {
            self.fail(TestFailure::new(
                "test run",
                format!("the runner reported no test results ({code}); see the log"),
            ));
        } else if self.failed == 0 && output.exit_code.is_some_and(|c| c != 0) {
            self.fail(TestFailure::new(
                "test run",
                format!("the runner exited with {code} although no test failed; see the log"),
            ));
        }
        let success =
            self.completed && self.failed == 0 && output.exit_code == Some(0) && !output.timed_out;
        let mut result = TestResult::default();
        result.success = success;
        result.passed = self.passed;
        result.failed = self.failed;
        result.skipped = self.skipped;
        result.total = self.passed + self.failed;
        result.failures = self.failures;
        result.cases = self.cases;
        result.duration_ms = self.duration_ms;
        result.log = cap_log(&output.stdout, &output.stderr);
        result
    }
}

/// Removes ANSI escape sequences (colours, cursor movement, OSC hyperlinks, DCS), with
/// `console`'s parser; every other character (tabs, carriage returns) stays.
pub fn strip_ansi(s: &str) -> Cow<'_, str> {
    console::strip_ansi_codes(s)
}

fn cap_log(stdout: &str, stderr: &str) -> String {
    let stdout = strip_ansi(stdout);
    let stderr = strip_ansi(stderr);
    let mut log = String::with_capacity(stdout.len() + stderr.len() + 1);
    log.push_str(&stdout);
    if !stdout.is_empty() && !stderr.is_empty() && !stdout.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(&stderr);
    if log.len() <= LOG_CAP {
        return log;
    }
    let head_end = floor_char_boundary(&log, LOG_CAP / 4);
    let tail_start = ceil_char_boundary(&log, log.len() - (LOG_CAP - LOG_CAP / 4));
    format!(
        "{}\n[... {} bytes elided ...]\n{}",
        &log[..head_end],
        tail_start - head_end,
        &log[tail_start..]
    )
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Parses a decimal seconds figure (`0.046`, `2.006s`) into milliseconds.
pub(crate) fn secs_to_ms(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches('s');
    let secs: f64 = s.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).round() as u64)
}

static RUST_PANIC: LazyLock<Regex> =
    LazyLock::new(|| re(r"panicked at ([^\s:][^:\n]*):(\d+):\d+:?"));
static JS_FRAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?m)^\s*(?:❯|at)\s+(?:[^\n(]*?\(|\S+\s+)?((?:file://)?[^\s():]+(?::[^\s():]+)*?):(\d+):(\d+)\)?\s*$",
    )
});

/// Compiles a literal pattern.
#[expect(
    clippy::expect_used,
    reason = "only literal patterns are passed, and every one is exercised by the unit tests"
)]
pub(crate) fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("literal regex compiles")
}

/// Where a Rust panic happened (`panicked at src/lib.rs:16:9`), relative to the root.
pub(crate) fn rust_panic_location(text: &str, ctx: &Ctx) -> Option<(String, u32)> {
    let caps = RUST_PANIC.captures(text)?;
    Some((ctx.relative(&caps[1]), caps[2].parse().ok()?))
}

/// The panic message: the lines after `panicked at ...:` up to the `note:` line.
pub(crate) fn rust_panic_message(text: &str) -> Option<String> {
    let m = RUST_PANIC.find(text)?;
    let rest = &text[m.end()..];
    let msg: Vec<&str> = rest
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| {
            !l.trim_start().starts_with("note: ")
                && !l.trim().is_empty()
                && !l.starts_with("stack backtrace:")
        })
        .map(str::trim_end)
        .collect();
    (!msg.is_empty()).then(|| msg.join("\n"))
}

/// The first JavaScript stack frame (`at f (file:line:col)`, `❯ file:line:col`) outside
/// `node_modules` and Node internals, preferring frames in `prefer` (the test file).
pub(crate) fn js_frame_location(
    text: &str,
    prefer: Option<&str>,
    ctx: &Ctx,
) -> Option<(String, u32)> {
    let mut first = None;
    for caps in JS_FRAME.captures_iter(text) {
        let path = &caps[1];
        if path.contains("node_modules")
            || path.starts_with("node:")
            || path.starts_with("internal/")
        {
            continue;
        }
        let Ok(line) = caps[2].parse::<u32>() else {
            continue;
        };
        let rel = ctx.relative(path);
        if prefer.is_none_or(|p| p == rel) {
            return Some((rel, line));
        }
        if first.is_none() {
            first = Some((rel, line));
        }
    }
    first
}

/// The first non-empty line of `text`, trimmed.
pub(crate) fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Caps a failure's captured output at 16 KiB (keeping the start).
pub(crate) fn cap_output(text: &str) -> String {
    const CAP: usize = 16 * 1024;
    if text.len() <= CAP {
        return text.to_owned();
    }
    let end = floor_char_boundary(text, CAP);
    format!("{}\n[... truncated ...]", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const VITEST_STDERR: &str = include_str!("../../tests/fixtures/vitest/basic-default.stderr");
    const JEST_STDERR: &str = include_str!("../../tests/fixtures/jest/import-error.stderr");

    #[test]
    fn ansi_codes_are_stripped() {
        // vitest colours its diff lines even when not writing to a terminal.
        assert!(VITEST_STDERR.contains("\x1b[32m- Expected"));
        let clean = strip_ansi(VITEST_STDERR);
        assert!(clean.contains("\n- Expected\n+ Received\n") && !clean.contains('\x1b'));
        assert!(matches!(strip_ansi(JEST_STDERR), Cow::Borrowed(_)));
    }

    #[test]
    fn stack_frames_skip_node_modules_and_prefer_the_test_file() {
        let ctx = Ctx::new(Some(Path::new("/home/dev/projects/jest")));
        // `at Resolver._throwModNotFoundError (node_modules/...)` comes first.
        assert_eq!(
            js_frame_location(JEST_STDERR, Some("import-error/missing.test.js"), &ctx),
            Some(("import-error/missing.test.js".into(), 1))
        );
        // `❯ parseConfig basic/parse.test.ts:4:15` (vitest) is a frame too.
        let clean = strip_ansi(VITEST_STDERR);
        let parse_block = &clean[clean.find("basic/parse.test.ts > throws").unwrap_or(0)..];
        assert_eq!(
            js_frame_location(parse_block, Some("basic/parse.test.ts"), &ctx),
            Some(("basic/parse.test.ts".into(), 4))
        );
    }

    #[test]
    fn paths_become_relative_to_the_root() {
        let ctx = Ctx::new(Some(Path::new("/home/dev/projects/jest/")));
        assert_eq!(
            ctx.relative("/home/dev/projects/jest/basic/x.test.js"),
            "basic/x.test.js"
        );
        assert_eq!(ctx.relative("file:///home/dev/projects/jest/a.ts"), "a.ts");
        assert_eq!(
            ctx.relative("/home/dev/projects/jestx/a.ts"),
            "/home/dev/projects/jestx/a.ts"
        );
        assert_eq!(ctx.relative("./b.py"), "b.py");
    }

    #[test]
    fn long_logs_are_capped_on_char_boundaries() {
        let long = "é".repeat(LOG_CAP);
        let log = cap_log(&long, "tail");
        assert!(log.len() < LOG_CAP + 100);
        assert!(log.ends_with("tail"));
        assert!(log.contains("bytes elided"));
    }

    #[test]
    fn a_nonzero_exit_without_failures_is_a_failure() {
        let t = Tally {
            passed: 3,
            completed: true,
            ..Tally::default()
        };
        let r = t.finish(&RunnerOutput::new("", "", Some(1)));
        assert!(!r.success);
        assert_eq!((r.passed, r.failed, r.total), (3, 1, 4));
        assert!(r.failures[0].message.contains("code 1"));
    }
}
