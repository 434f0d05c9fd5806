//! Python: which framework (pytest, else unittest) and which interpreter (the project's own
//! environment, else `python3` from `PATH`), each with the reason.
//!
//! The interpreter is always run as `python -m pytest` / `python -m unittest`, never as the
//! `pytest` script: `-m` puts the working directory on `sys.path`, so a flat layout (`calc.py`
//! next to `tests/`) imports, and a virtualenv copied into a sandbox still works (its scripts'
//! `#!` lines name the folder it was made in; its `bin/python` link does not).

use super::{Framework, PYTEST_JUNIT, read_small, rel_file};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreter chosen for a Python project, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Interpreter {
    /// The program: an absolute path (the project's environment), or a name looked up on
    /// `PATH` (`python3`).
    pub program: String,
    /// Why this one.
    pub why: String,
    /// The environment's folder when it is one (mounted read-only at the same path in a
    /// container).
    pub env: Option<PathBuf>,
}

/// Why a folder is a Python test project, and with which framework.
pub(super) fn framework_reason(dir: &Path, rel: &Path) -> Option<(Framework, String)> {
    if let Some(reason) = super::pytest_reason(dir, rel) {
        return Some((Framework::Pytest, reason));
    }
    if let Some(reason) = pytest_command_reason(dir, rel) {
        return Some((Framework::Pytest, reason));
    }
    test_files_reason(dir, rel)
}

/// A word `pytest` or `py.test` (also `python -m pytest`, `pytest-3`) in a command line.
fn runs_pytest(line: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '(' | ')' | '[' | ']'))
        .any(|w| {
            let w = w.rsplit('/').next().unwrap_or(w);
            w == "pytest" || w == "py.test" || w == "pytest-3"
        })
}

/// pytest named by the commands of tox.ini, setup.cfg, noxfile.py or a Makefile.
fn pytest_command_reason(dir: &Path, rel: &Path) -> Option<String> {
    if let Some(text) = read_small(&dir.join("tox.ini")) {
        // `commands =` and its continuation lines, in any [testenv*] section.
        let mut in_commands = false;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                in_commands = false;
                continue;
            }
            if let Some((key, value)) = trimmed.split_once('=')
                && !line.starts_with(char::is_whitespace)
            {
                in_commands = key.trim() == "commands";
                if in_commands && runs_pytest(value) {
                    return Some(format!("{}: commands run pytest", rel_file(rel, "tox.ini")));
                }
                continue;
            }
            if in_commands && runs_pytest(trimmed) {
                let word = if trimmed.contains("py.test") {
                    "py.test"
                } else {
                    "pytest"
                };
                return Some(format!("{}: commands run {word}", rel_file(rel, "tox.ini")));
            }
        }
    }
    if let Some(text) = read_small(&dir.join("setup.cfg"))
        && text.lines().any(|l| {
            let l = l.trim();
            !l.starts_with('#') && !l.starts_with(';') && runs_pytest(l)
        })
    {
        return Some(format!("{}: names pytest", rel_file(rel, "setup.cfg")));
    }
    if let Some(text) = read_small(&dir.join("noxfile.py"))
        && text.lines().any(|l| {
            !l.trim_start().starts_with('#') && l.contains("session.run") && runs_pytest(l)
        })
    {
        return Some(format!(
            "{}: session.run runs pytest",
            rel_file(rel, "noxfile.py")
        ));
    }
    for name in ["Makefile", "makefile", "GNUmakefile"] {
        if let Some(text) = read_small(&dir.join(name))
            && text.lines().any(|l| l.starts_with('\t') && runs_pytest(l))
        {
            return Some(format!("{}: a recipe runs pytest", rel_file(rel, name)));
        }
    }
    None
}

/// `test_*.py` / `*_test.py` files in the folder or its `tests/` / `test/`: pytest when one
/// imports pytest or is written as plain functions, unittest when they use only unittest.
fn test_files_reason(dir: &Path, rel: &Path) -> Option<(Framework, String)> {
    let mut files: Vec<String> = Vec::new();
    for sub in ["", "tests", "test"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".py") && (n.starts_with("test_") || n.ends_with("_test.py")))
            .map(|n| {
                if sub.is_empty() {
                    n
                } else {
                    format!("{sub}/{n}")
                }
            })
            .collect();
        names.sort();
        files.extend(names);
    }
    let first = files.first()?.clone();
    let mut unittest_file = None;
    for file in files.iter().take(50) {
        let text = read_small(&dir.join(file)).unwrap_or_default();
        let imports = |module: &str| {
            text.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with(&format!("import {module}"))
                    || l.starts_with(&format!("from {module} "))
                    || l.starts_with(&format!("from {module}."))
            })
        };
        if imports("pytest") {
            return Some((
                Framework::Pytest,
                format!("{}: imports pytest", rel_file(rel, file)),
            ));
        }
        if unittest_file.is_none() && (imports("unittest") || text.contains("unittest.TestCase")) {
            unittest_file = Some(file.clone());
        }
    }
    match unittest_file {
        Some(file) => Some((
            Framework::Unittest,
            format!(
                "{}: unittest test cases, and nothing names pytest",
                rel_file(rel, &file)
            ),
        )),
        None => Some((
            Framework::Pytest,
            format!("{}: test file (pytest style)", rel_file(rel, &first)),
        )),
    }
}

/// The argv for `framework` run with `python`, in `dir`.
pub(super) fn command(framework: Framework, python: &str, dir: &Path) -> Vec<String> {
    let mut argv = vec![python.to_owned(), "-m".to_owned()];
    if framework == Framework::Unittest {
        argv.extend(["unittest", "discover", "-v"].map(str::to_owned));
        // Since Python 3.11 discovery only enters packages: a `tests/` folder without an
        // `__init__.py` is searched as the start folder itself.
        for sub in ["tests", "test"] {
            if dir.join(sub).is_dir() && !dir.join(sub).join("__init__.py").is_file() {
                argv.extend(["-s".to_owned(), sub.to_owned()]);
                break;
            }
        }
    } else {
        // -v: a run killed at its timeout shows which test was running.
        argv.extend([
            "pytest".to_owned(),
            "-v".to_owned(),
            format!("--junitxml={PYTEST_JUNIT}"),
            "--color=no".to_owned(),
        ]);
    }
    argv
}

/// The project's interpreter: its `.venv` / `venv`, the environment its tool (poetry, hatch,
/// pipenv) made outside it when that tool is installed, else `python3` from `PATH`.
pub(super) fn interpreter(dir: &Path, rel: &Path) -> Interpreter {
    let mut notes: Vec<String> = Vec::new();
    // The project folder first, then each folder above it up to the workspace root (a
    // monorepo's one environment at its root).
    for (base, up) in super::toolchain::up_to_root(dir, rel) {
        for env in [".venv", "venv"] {
            if let Some(found) = venv_in(&base, &up, env, &mut notes) {
                return found;
            }
        }
    }
    interpreter_of_tool(dir, notes)
}

/// The virtualenv `env` in `base` (`up` is the way there from the project folder, `../`).
fn venv_in(base: &Path, up: &str, env: &str, notes: &mut Vec<String>) -> Option<Interpreter> {
    let label = format!("{up}{env}");
    let python = base.join(env).join("bin/python");
    if python.is_file() {
        // By its absolute path in the workspace, never through the sandbox copy: a
        // virtualenv is ignored (`.gitignore`, or the `*` that uv and Python 3.13 write
        // into it), so the copy does not have it. `absolute`, not `canonicalize`: bin/python
        // is a link to the base interpreter, and resolving it would leave the venv.
        let root = std::path::absolute(base.join(env)).unwrap_or_else(|_| base.join(env));
        return Some(Interpreter {
            program: root.join("bin/python").to_string_lossy().into_owned(),
            why: format!(
                "the project's environment {label}/, run from the workspace (a sandbox copy leaves ignored files such as the environment out)"
            ),
            env: Some(root),
        });
    }
    if std::fs::symlink_metadata(&python).is_ok() {
        notes.push(format!(
            "{label}/bin/python is a broken link (the environment was made on another machine; recreate it)"
        ));
    }
    None
}

fn interpreter_of_tool(dir: &Path, mut notes: Vec<String>) -> Interpreter {
    let tool = managing_tool(dir);
    if let Some(tool) = tool {
        match tool {
            // uv and pdm keep their environment in the project's .venv by default.
            Tool::Uv | Tool::Pdm => notes.push(format!(
                "a {} project without its .venv (run `{} sync` to create it)",
                tool.name(),
                tool.name()
            )),
            Tool::Poetry | Tool::Hatch | Tool::Pipenv => match ask_tool(tool, dir) {
                Ok(env) => {
                    let python = env.join("bin/python");
                    if python.is_file() {
                        return Interpreter {
                            env: Some(env.clone()),
                            program: python.to_string_lossy().into_owned(),
                            why: format!(
                                "the {} environment {} (from `{}`)",
                                tool.name(),
                                env.display(),
                                tool.query().join(" ")
                            ),
                        };
                    }
                    notes.push(format!(
                        "`{}` named {}, which has no bin/python",
                        tool.query().join(" "),
                        env.display()
                    ));
                }
                Err(why) => notes.push(why),
            },
        }
    }
    let program = if on_path("python3") || !on_path("python") {
        "python3"
    } else {
        "python"
    };
    let mut why = format!("no project environment (.venv/, venv/) found: {program} from PATH");
    if !notes.is_empty() {
        why = format!("{why}; {}", notes.join("; "));
    }
    Interpreter {
        program: program.to_owned(),
        why,
        env: None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Uv,
    Pdm,
    Poetry,
    Hatch,
    Pipenv,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Uv => "uv",
            Tool::Pdm => "pdm",
            Tool::Poetry => "poetry",
            Tool::Hatch => "hatch",
            Tool::Pipenv => "pipenv",
        }
    }

    /// The command that prints the environment's folder.
    fn query(self) -> &'static [&'static str] {
        match self {
            Tool::Poetry => &["poetry", "env", "info", "--path"],
            Tool::Hatch => &["hatch", "env", "find"],
            Tool::Pipenv => &["pipenv", "--venv"],
            Tool::Uv => &["uv", "python", "find"],
            Tool::Pdm => &["pdm", "venv", "--path", "in-project"],
        }
    }
}

fn managing_tool(dir: &Path) -> Option<Tool> {
    if dir.join("uv.lock").is_file() {
        return Some(Tool::Uv);
    }
    if dir.join("poetry.lock").is_file() {
        return Some(Tool::Poetry);
    }
    if dir.join("pdm.lock").is_file() {
        return Some(Tool::Pdm);
    }
    if dir.join("Pipfile").is_file() {
        return Some(Tool::Pipenv);
    }
    if dir.join("hatch.toml").is_file() {
        return Some(Tool::Hatch);
    }
    let doc: toml::Table = toml::from_str(&read_small(&dir.join("pyproject.toml"))?).ok()?;
    let tool = doc.get("tool")?;
    [
        ("poetry", Tool::Poetry),
        ("hatch", Tool::Hatch),
        ("pdm", Tool::Pdm),
        ("uv", Tool::Uv),
    ]
    .into_iter()
    .find(|(key, _)| tool.get(key).is_some())
    .map(|(_, t)| t)
}

/// Asks an installed tool where its environment is (bounded at 15 s).
fn ask_tool(tool: Tool, dir: &Path) -> Result<PathBuf, String> {
    let argv = tool.query();
    if !on_path(argv[0]) {
        return Err(format!(
            "a {} project whose environment lives outside it, and {} is not on PATH",
            tool.name(),
            argv[0]
        ));
    }
    let failed = |what: String| format!("`{}` {what}", argv.join(" "));
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("could not start: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed("did not answer within 15 s".to_owned()));
            }
            Err(e) => return Err(failed(format!("failed: {e}"))),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| failed(format!("failed: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let path = text.lines().map(str::trim).find(|l| !l.is_empty());
    match path {
        Some(p) if out.status.success() && Path::new(p).is_absolute() => Ok(PathBuf::from(p)),
        _ => Err(failed(format!(
            "found no environment ({}); create it with `{} install`",
            out.status,
            tool.name()
        ))),
    }
}

/// Whether `program` is a file in a `PATH` folder (no process is started).
pub(super) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_words_are_found_in_command_lines() {
        assert!(runs_pytest("py.test --cov"));
        assert!(runs_pytest("{envpython} -m pytest {posargs}"));
        assert!(runs_pytest("session.run(\"pytest\", \"-q\")"));
        assert!(runs_pytest("\t.venv/bin/pytest tests"));
        assert!(!runs_pytest("pytest-cov"));
        assert!(!runs_pytest("pip install pytests"));
    }
}
