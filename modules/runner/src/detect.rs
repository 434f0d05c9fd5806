//! Test framework detection: which runners a repository uses, where, why, and how to run them.
//!
//! [`available_frameworks`] walks the workspace (the root and sub-folders a few levels deep,
//! skipping `node_modules/`, `target/`, `.git/`, virtualenvs and other hidden or generated
//! folders) and returns one [`Detected`] per framework and folder, each with the project file
//! (and field) that gave it away in [`Detected::reason`]. Monorepos get several entries, and every
//! entry is meant to be run.
//!
//! Each entry carries the argv to run in [`Detected::dir`], chosen so that
//! - the run does not stop at the first failing test binary or file (`cargo test
//!   --no-fail-fast`, `cargo nextest run --no-fail-fast`; pytest, jest, vitest and `go test ./...`
//!   go on by default), and
//! - the output is machine-readable where the runner can do it: pytest writes JUnit XML, jest and
//!   vitest write their JSON report to a file next to their human output, `go test -json` streams
//!   JSON, nextest prints libtest JSON. Cargo's stable libtest has no machine format, so its
//!   plain output is parsed.
//!
//! Files the run writes and the parser wants back are listed in [`Detected::collect`]; hand them
//! to the sandbox and then to [`crate::parse::RunnerOutput::from_outcome`].
//!
//! An explicit command always wins: [`Detected::explicit`] wraps a user's argv, guessing the
//! framework from it (see [`framework_for_command`]) so that its output can still be parsed.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod python;
mod toolchain;

/// A test framework Nuvira knows how to run and parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Framework {
    /// `cargo test` (libtest).
    Cargo,
    /// `cargo nextest run`.
    Nextest,
    /// pytest.
    Pytest,
    /// `python -m unittest discover` (for projects without pytest).
    Unittest,
    /// vitest.
    Vitest,
    /// jest.
    Jest,
    /// `go test`.
    Go,
}

impl Framework {
    /// Every framework, in detection order.
    pub const ALL: [Framework; 7] = [
        Framework::Cargo,
        Framework::Nextest,
        Framework::Pytest,
        Framework::Unittest,
        Framework::Vitest,
        Framework::Jest,
        Framework::Go,
    ];

    /// The name used on the command line and in results (`cargo`, `nextest`, `pytest`,
    /// `unittest`, `vitest`, `jest`, `go`).
    pub fn as_str(self) -> &'static str {
        match self {
            Framework::Cargo => "cargo",
            Framework::Nextest => "nextest",
            Framework::Pytest => "pytest",
            Framework::Unittest => "unittest",
            Framework::Vitest => "vitest",
            Framework::Jest => "jest",
            Framework::Go => "go",
        }
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A framework name that is not one of [`Framework::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "recognize test framework `{0}`: use one of cargo, nextest, pytest, unittest, vitest, jest, go"
)]
pub struct UnknownFramework(pub String);

impl FromStr for Framework {
    type Err = UnknownFramework;

    /// Parses a name case-insensitively; also accepts `cargo-test`, `cargo-nextest`,
    /// `go-test`/`gotest`, `py.test` and `python-unittest`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cargo" | "cargo-test" | "rust" => Ok(Framework::Cargo),
            "nextest" | "cargo-nextest" => Ok(Framework::Nextest),
            "pytest" | "py.test" => Ok(Framework::Pytest),
            "unittest" | "python-unittest" => Ok(Framework::Unittest),
            "vitest" => Ok(Framework::Vitest),
            "jest" => Ok(Framework::Jest),
            "go" | "go-test" | "gotest" => Ok(Framework::Go),
            _ => Err(UnknownFramework(s.to_owned())),
        }
    }
}

/// One framework found in one folder, with how to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Detected {
    /// The framework, or `None` for an explicit command whose runner could not be recognized
    /// (its output is then parsed by [`crate::parse::parse_any`]).
    pub framework: Option<Framework>,
    /// The folder to run [`command`](Self::command) in, relative to the workspace root
    /// (empty for the root itself).
    pub dir: PathBuf,
    /// Why it was detected: the file and field, e.g. `package.json: devDependencies.vitest`.
    pub reason: String,
    /// Which interpreter or toolchain runs it, and why: the project's `.venv`, the lockfile's
    /// package manager, the `rust-toolchain.toml` channel, Go's caches (empty for an explicit
    /// command).
    pub toolchain: String,
    /// Host folders the command needs that the workspace copy leaves out (a virtualenv), by
    /// absolute path: a container sandbox mounts each read-only at the same path.
    pub host_paths: Vec<PathBuf>,
    /// The argv to run, with its working directory set to [`dir`](Self::dir).
    pub command: Vec<String>,
    /// Extra environment for the command.
    pub env: BTreeMap<String, String>,
    /// Files the command writes that the parser wants, relative to the workspace ROOT (so they
    /// can go straight into `SandboxRequest::collect`).
    pub collect: Vec<String>,
}

impl Detected {
    /// Wraps an explicit command (which always wins over detection). The framework is taken
    /// from `framework` when given, else guessed with [`framework_for_command`]. Nothing is
    /// collected: the user's command decides its own output.
    pub fn explicit(
        command: Vec<String>,
        framework: Option<Framework>,
        dir: impl Into<PathBuf>,
    ) -> Self {
        let framework = framework.or_else(|| framework_for_command(&command));
        Self {
            framework,
            dir: dir.into(),
            reason: "explicit command".to_owned(),
            toolchain: String::new(),
            host_paths: Vec::new(),
            command,
            env: BTreeMap::new(),
            collect: Vec::new(),
        }
    }

    /// The framework's name, or `command` for an unrecognized explicit command.
    pub fn name(&self) -> &'static str {
        self.framework.map_or("command", Framework::as_str)
    }

    /// The command as one line, for logs and reports.
    pub fn command_line(&self) -> String {
        self.command
            .iter()
            .map(|a| {
                if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                {
                    format!("'{}'", a.replace('\'', r"'\''"))
                } else {
                    a.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Guesses the framework of an explicit command: `cargo nextest ...` → nextest, `cargo test`
/// → cargo, `pytest`/`python -m pytest` → pytest, `python -m unittest` → unittest,
/// `vitest`/`npx vitest` → vitest, `jest` → jest, `go test` → go. Also looks into `npm test`-style wrappers' arguments and `env VAR=x cmd`.
pub fn framework_for_command(argv: &[String]) -> Option<Framework> {
    // `sh -c "go test -v ./..."`: the words of a whole command line given as one argument.
    let words: Vec<&str> = argv
        .iter()
        .flat_map(|a| a.split_whitespace())
        .map(|a| a.rsplit('/').next().unwrap_or(a))
        .filter(|a| !a.contains('=') && !a.starts_with('-'))
        .collect();
    let has = |w: &str| words.contains(&w);
    if has("cargo-nextest") || (has("cargo") && has("nextest")) {
        Some(Framework::Nextest)
    } else if has("cargo") && has("test") {
        Some(Framework::Cargo)
    } else if has("pytest") || has("py.test") {
        Some(Framework::Pytest)
    } else if has("unittest") {
        Some(Framework::Unittest)
    } else if has("vitest") {
        Some(Framework::Vitest)
    } else if has("jest") {
        Some(Framework::Jest)
    } else if has("go") && has("test") {
        Some(Framework::Go)
    } else {
        None
    }
}

/// When to use `cargo nextest` instead of `cargo test` for a Cargo project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NextestPolicy {
    /// Always `cargo test` (the default).
    #[default]
    Never,
    /// `cargo nextest` when `cargo-nextest` is found on `PATH` (or in `$CARGO_HOME/bin`).
    IfInstalled,
    /// Always `cargo nextest` (e.g. the sandbox image has it).
    Always,
}

/// Options for [`available_frameworks_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DetectOptions {
    /// How many folder levels below the root to look (0 = the root only). Default 3.
    pub max_depth: usize,
    /// Cargo: `cargo test` or `cargo nextest`.
    pub nextest: NextestPolicy,
}

impl Default for DetectOptions {
    fn default() -> Self {
        Self {
            max_depth: 3,
            nextest: NextestPolicy::Never,
        }
    }
}

impl DetectOptions {
    /// Builder-style: sets [`DetectOptions::nextest`].
    #[must_use]
    pub fn nextest(mut self, policy: NextestPolicy) -> Self {
        self.nextest = policy;
        self
    }

    /// Builder-style: sets [`DetectOptions::max_depth`].
    #[must_use]
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }
}

/// Why detection could not look at a workspace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DetectError {
    /// The root is missing or not a folder.
    #[error("read workspace {path}: {source}; pass an existing project folder")]
    Root {
        /// The root given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The file name pytest writes its JUnit report to, in the folder it runs in.
pub const PYTEST_JUNIT: &str = ".nuvira-pytest-junit.xml";
/// The file name vitest writes its JSON report to, in the folder it runs in.
pub const VITEST_JSON: &str = ".nuvira-vitest-report.json";
/// The file name jest writes its JSON report to, in the folder it runs in.
pub const JEST_JSON: &str = ".nuvira-jest-report.json";

/// Folders never looked into.
const SKIP_DIRS: &[&str] = &[
    "node_modules",
    "target",
    "vendor",
    "dist",
    "build",
    "venv",
    "env",
    "__pycache__",
    "site-packages",
    "coverage",
];

/// Lists the test frameworks found in `root` and its sub-folders (3 levels deep), each with
/// the reason and the command to run. Same as [`available_frameworks_with`] with default
/// options (`cargo test`, never nextest).
///
/// # Errors
/// [`DetectError::Root`] when `root` cannot be read. Unreadable sub-folders and manifests that
/// do not parse are skipped.
pub fn available_frameworks(root: &Path) -> Result<Vec<Detected>, DetectError> {
    available_frameworks_with(root, &DetectOptions::default())
}

/// Lists the test frameworks found in `root` and its sub-folders.
///
/// Rules, per folder (a folder can yield several frameworks):
/// - **Cargo**: `Cargo.toml` with `[package]` or `[workspace]`. Folders below a detected Cargo
///   project are not searched for Cargo again (the workspace run covers its members).
/// - **pytest**: `pytest.ini`; `pyproject.toml` with `[tool.pytest.ini_options]` or a `pytest`
///   dependency; `setup.cfg` with `[tool:pytest]`; `tox.ini` with `[pytest]`; `conftest.py`;
///   a `requirements*.txt` naming pytest; `pytest`/`py.test` run by tox.ini's `commands`,
///   named in setup.cfg, run by noxfile.py's `session.run` or a Makefile recipe; else
///   `test_*.py` / `*_test.py` files in the folder, `tests/` or `test/` that import pytest or
///   are plain functions. **unittest** when those files use only `unittest`. Run as
///   `PYTHON -m pytest` / `PYTHON -m unittest discover -v`, PYTHON being the project's
///   `.venv/bin/python` or `venv/bin/python` by absolute path (the workspace copy leaves the
///   ignored environment out; see [`Detected::host_paths`]), the environment poetry, hatch or pipenv report
///   (when installed), else `python3` from `PATH` ([`Detected::toolchain`] says which).
///   Not searched again below a detected Python folder.
/// - **vitest / jest**: `package.json` — `scripts.test` naming one wins, then a
///   `vitest.config.*` / `jest.config.*` file or a `jest` key, then `devDependencies` /
///   `dependencies` (vitest before jest), run through the lockfile's package manager
///   (`pnpm exec`, `yarn exec`, `bun run`, else `npx --no --`). Not searched again below a
///   detected JS folder.
/// - **go**: `go.mod` (every module, since `./...` stops at nested modules).
/// - Cargo honours `rust-toolchain.toml` / `rust-toolchain` with `cargo +CHANNEL` when rustup
///   is installed (and says that it is not honoured otherwise).
///
/// # Errors
/// [`DetectError::Root`] when `root` cannot be read.
pub fn available_frameworks_with(
    root: &Path,
    options: &DetectOptions,
) -> Result<Vec<Detected>, DetectError> {
    fs::read_dir(root).map_err(|source| DetectError::Root {
        path: root.to_path_buf(),
        source,
    })?;
    let nextest = match options.nextest {
        NextestPolicy::Never => false,
        NextestPolicy::Always => true,
        NextestPolicy::IfInstalled => nextest_installed(),
    };
    let mut found = Vec::new();
    let mut covered = Covered::default();
    walk(
        root,
        Path::new(""),
        0,
        options,
        nextest,
        &mut covered,
        &mut found,
    );
    Ok(found)
}

#[derive(Default, Clone, Copy)]
struct Covered {
    cargo: bool,
    python: bool,
    js: bool,
}

fn walk(
    root: &Path,
    rel: &Path,
    depth: usize,
    options: &DetectOptions,
    nextest: bool,
    covered: &mut Covered,
    found: &mut Vec<Detected>,
) {
    let dir = root.join(rel);
    let mut here = *covered;
    if !here.cargo
        && let Some(d) = detect_cargo(&dir, rel, nextest)
    {
        found.push(d);
        here.cargo = true;
    }
    if !here.python
        && let Some(d) = detect_python(&dir, rel)
    {
        found.push(d);
        here.python = true;
    }
    if !here.js
        && let Some(d) = detect_js(&dir, rel)
    {
        found.push(d);
        here.js = true;
    }
    if let Some(d) = detect_go(&dir, rel) {
        found.push(d);
    }
    if depth >= options.max_depth {
        return;
    }
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    let mut subdirs: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.') && !SKIP_DIRS.contains(&name.as_str()))
        .collect();
    subdirs.sort();
    for name in subdirs {
        let mut child = here;
        walk(
            root,
            &rel.join(&name),
            depth + 1,
            options,
            nextest,
            &mut child,
            found,
        );
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn rel_file(rel: &Path, file: &str) -> String {
    if rel.as_os_str().is_empty() {
        file.to_owned()
    } else {
        format!("{}/{file}", rel.to_string_lossy().replace('\\', "/"))
    }
}

fn read_small(path: &Path) -> Option<String> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 4 * 1024 * 1024 {
        return None;
    }
    fs::read_to_string(path).ok()
}

fn detect_cargo(dir: &Path, rel: &Path, nextest: bool) -> Option<Detected> {
    let text = read_small(&dir.join("Cargo.toml"))?;
    let manifest: toml::Table = toml::from_str(&text).ok()?;
    let workspace = manifest.contains_key("workspace");
    let reason = if workspace {
        rel_file(rel, "Cargo.toml: [workspace]")
    } else if let Some(name) = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
    {
        format!(
            "{}: [package] name = \"{name}\"",
            rel_file(rel, "Cargo.toml")
        )
    } else {
        return None;
    };
    let (cargo, toolchain) = toolchain::rust(dir);
    let (framework, mut command, env) = if nextest {
        let mut env = BTreeMap::new();
        env.insert(
            "NEXTEST_EXPERIMENTAL_LIBTEST_JSON".to_owned(),
            "1".to_owned(),
        );
        (
            Framework::Nextest,
            strings(&[
                "nextest",
                "run",
                "--no-fail-fast",
                "--message-format",
                "libtest-json",
            ]),
            env,
        )
    } else {
        (
            Framework::Cargo,
            strings(&["test", "--no-fail-fast"]),
            BTreeMap::new(),
        )
    };
    if workspace {
        command.push("--workspace".to_owned());
    }
    let command = cargo.into_iter().chain(command).collect();
    Some(Detected {
        framework: Some(framework),
        dir: rel.to_path_buf(),
        reason,
        toolchain,
        host_paths: Vec::new(),
        command,
        env,
        collect: Vec::new(),
    })
}

fn mentions_pytest(value: &toml::Value) -> bool {
    match value {
        toml::Value::String(s) => {
            let s = s.trim_start().to_ascii_lowercase();
            s == "pytest" || s.starts_with("pytest") && !s.starts_with("pytest-")
        }
        toml::Value::Array(items) => items.iter().any(mentions_pytest),
        toml::Value::Table(t) => t.iter().any(|(k, v)| k == "pytest" || mentions_pytest(v)),
        _ => false,
    }
}

fn pytest_reason(dir: &Path, rel: &Path) -> Option<String> {
    if dir.join("pytest.ini").is_file() {
        return Some(rel_file(rel, "pytest.ini"));
    }
    if let Some(text) = read_small(&dir.join("pyproject.toml"))
        && let Ok(doc) = toml::from_str::<toml::Table>(&text)
    {
        let file = rel_file(rel, "pyproject.toml");
        if doc
            .get("tool")
            .and_then(|t| t.get("pytest"))
            .is_some_and(|p| p.get("ini_options").is_some())
        {
            return Some(format!("{file}: [tool.pytest.ini_options]"));
        }
        let places = [
            (
                "project.dependencies",
                doc.get("project").and_then(|p| p.get("dependencies")),
            ),
            (
                "project.optional-dependencies",
                doc.get("project")
                    .and_then(|p| p.get("optional-dependencies")),
            ),
            ("dependency-groups", doc.get("dependency-groups")),
            (
                "tool.poetry dependencies",
                doc.get("tool").and_then(|t| t.get("poetry")),
            ),
        ];
        for (name, value) in places {
            if value.is_some_and(mentions_pytest) {
                return Some(format!("{file}: pytest in {name}"));
            }
        }
    }
    if let Some(text) = read_small(&dir.join("setup.cfg"))
        && text.lines().any(|l| l.trim() == "[tool:pytest]")
    {
        return Some(rel_file(rel, "setup.cfg: [tool:pytest]"));
    }
    if let Some(text) = read_small(&dir.join("tox.ini"))
        && text.lines().any(|l| l.trim() == "[pytest]")
    {
        return Some(rel_file(rel, "tox.ini: [pytest]"));
    }
    if dir.join("conftest.py").is_file() {
        return Some(rel_file(rel, "conftest.py"));
    }
    for req in [
        "requirements.txt",
        "requirements-dev.txt",
        "requirements-test.txt",
        "dev-requirements.txt",
    ] {
        if let Some(text) = read_small(&dir.join(req))
            && text.lines().any(|l| {
                let l = l.trim().to_ascii_lowercase();
                l.starts_with("pytest") && !l.starts_with("pytest-")
            })
        {
            return Some(format!("{}: pytest", rel_file(rel, req)));
        }
    }
    None
}

fn detect_python(dir: &Path, rel: &Path) -> Option<Detected> {
    let (framework, reason) = python::framework_reason(dir, rel)?;
    let python = python::interpreter(dir, rel);
    let command = python::command(framework, &python.program, dir);
    let collect = if framework == Framework::Pytest {
        vec![rel_file(rel, PYTEST_JUNIT)]
    } else {
        Vec::new()
    };
    Some(Detected {
        framework: Some(framework),
        dir: rel.to_path_buf(),
        reason,
        toolchain: format!("python: {} ({})", python.program, python.why),
        host_paths: python.env.into_iter().collect(),
        command,
        env: BTreeMap::new(),
        collect,
    })
}

fn js_reason(dir: &Path, rel: &Path) -> Option<(Framework, String)> {
    let text = read_small(&dir.join("package.json"))?;
    let pkg: serde_json::Value = serde_json::from_str(&text).ok()?;
    let file = rel_file(rel, "package.json");
    if let Some(test) = pkg.pointer("/scripts/test").and_then(|v| v.as_str()) {
        if test.contains("vitest") {
            return Some((
                Framework::Vitest,
                format!("{file}: scripts.test runs vitest"),
            ));
        }
        if test.contains("jest") {
            return Some((Framework::Jest, format!("{file}: scripts.test runs jest")));
        }
    }
    let config = |stem: &str| {
        ["ts", "mts", "cts", "js", "mjs", "cjs", "json"]
            .iter()
            .map(|ext| format!("{stem}.config.{ext}"))
            .find(|name| dir.join(name).is_file())
    };
    if let Some(name) = config("vitest") {
        return Some((Framework::Vitest, rel_file(rel, &name)));
    }
    if let Some(name) = config("jest") {
        return Some((Framework::Jest, rel_file(rel, &name)));
    }
    if pkg.get("jest").is_some() {
        return Some((Framework::Jest, format!("{file}: \"jest\" config key")));
    }
    for section in ["devDependencies", "dependencies"] {
        for (name, framework) in [("vitest", Framework::Vitest), ("jest", Framework::Jest)] {
            if pkg.get(section).and_then(|d| d.get(name)).is_some() {
                return Some((framework, format!("{file}: {section}.{name}")));
            }
        }
    }
    None
}

fn detect_js(dir: &Path, rel: &Path) -> Option<Detected> {
    let (framework, reason) = js_reason(dir, rel)?;
    let (exec, toolchain) = toolchain::node(dir, rel);
    let (command, report) = match framework {
        Framework::Vitest => (
            vec![
                "vitest".to_owned(),
                "run".to_owned(),
                "--reporter=default".to_owned(),
                "--reporter=json".to_owned(),
                format!("--outputFile.json={VITEST_JSON}"),
            ],
            VITEST_JSON,
        ),
        _ => (
            vec![
                "jest".to_owned(),
                "--ci".to_owned(),
                "--json".to_owned(),
                format!("--outputFile={JEST_JSON}"),
            ],
            JEST_JSON,
        ),
    };
    let command: Vec<String> = exec.into_iter().chain(command).collect();
    // `npx --no --`: never install, and pass every later flag to the runner (npx would
    // otherwise take `--json` for itself). NO_COLOR: vitest treats any FORCE_COLOR as "on".
    let mut env = BTreeMap::new();
    env.insert("NO_COLOR".to_owned(), "1".to_owned());
    if framework == Framework::Jest {
        env.insert("FORCE_COLOR".to_owned(), "0".to_owned());
    }
    Some(Detected {
        framework: Some(framework),
        dir: rel.to_path_buf(),
        reason,
        toolchain: format!("node: {toolchain}"),
        host_paths: Vec::new(),
        command,
        env,
        collect: vec![rel_file(rel, report)],
    })
}

fn detect_go(dir: &Path, rel: &Path) -> Option<Detected> {
    let text = read_small(&dir.join("go.mod"))?;
    let module = go_module_path(&text).unwrap_or_default();
    Some(Detected {
        framework: Some(Framework::Go),
        dir: rel.to_path_buf(),
        reason: if module.is_empty() {
            rel_file(rel, "go.mod")
        } else {
            format!("{}: module {module}", rel_file(rel, "go.mod"))
        },
        toolchain: toolchain::go(&text),
        host_paths: Vec::new(),
        command: strings(&["go", "test", "-json", "./..."]),
        env: BTreeMap::new(),
        collect: Vec::new(),
    })
}

/// The `module` path declared in a `go.mod` text.
pub fn go_module_path(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("module")?;
        if !rest.starts_with(char::is_whitespace) {
            return None;
        }
        let path = rest.trim().trim_matches('"');
        (!path.is_empty()).then(|| path.to_owned())
    })
}

/// Whether `cargo-nextest` is on `PATH` or in `$CARGO_HOME/bin` (no process is started).
pub fn nextest_installed() -> bool {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    } else if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.iter().any(|d| d.join("cargo-nextest").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framework_names_round_trip() {
        for f in Framework::ALL {
            assert_eq!(f.as_str().parse::<Framework>(), Ok(f));
        }
        assert_eq!("Cargo-Nextest".parse::<Framework>(), Ok(Framework::Nextest));
        let err = "mocha".parse::<Framework>().unwrap_err();
        assert!(err.to_string().contains("`mocha`"), "{err}");
    }

    #[test]
    fn explicit_commands_are_recognized() {
        let argv = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            framework_for_command(&argv("cargo nextest run")),
            Some(Framework::Nextest)
        );
        assert_eq!(
            framework_for_command(&argv("cargo test --workspace")),
            Some(Framework::Cargo)
        );
        assert_eq!(
            framework_for_command(&argv("/home/dev/projects/pytest/.venv/bin/pytest -q")),
            Some(Framework::Pytest)
        );
        assert_eq!(
            framework_for_command(&argv("python3 -m pytest")),
            Some(Framework::Pytest)
        );
        assert_eq!(
            framework_for_command(&argv("npx vitest run basic/")),
            Some(Framework::Vitest)
        );
        assert_eq!(
            framework_for_command(&argv("npx jest basic/ --json")),
            Some(Framework::Jest)
        );
        assert_eq!(
            framework_for_command(&argv("go test -json ./...")),
            Some(Framework::Go)
        );
        assert_eq!(
            framework_for_command(&argv("env RUSTC_BOOTSTRAP=1 cargo test")),
            Some(Framework::Cargo)
        );
        assert_eq!(framework_for_command(&argv("make check")), None);
        assert_eq!(
            framework_for_command(&["sh".into(), "-c".into(), "go test -v ./...".into()]),
            Some(Framework::Go)
        );
        assert_eq!(
            framework_for_command(&["sh".into(), "-c".into(), "python3 -m unittest".into()]),
            Some(Framework::Unittest)
        );
    }

    #[test]
    fn go_module_path_is_read() {
        assert_eq!(
            go_module_path("module example.com/fixture\n\ngo 1.19\n").as_deref(),
            Some("example.com/fixture")
        );
        assert_eq!(go_module_path("modules x\n"), None);
    }
}
