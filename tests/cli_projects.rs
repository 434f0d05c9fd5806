//! `nuvira test` on the real projects of `tests/projects/` (issue 12): for each, the counts
//! Nuvira reports equal the runner's own summary run in place, in the local sandbox, in
//! bubblewrap and in Docker (`nuvira-host`, which runs this machine's toolchains through
//! read-only mounts).
//!
//! Each test works on a fresh copy of its project in a temporary folder, so nothing the runs
//! write (caches, `target/`, a virtualenv) lands in the repository.

use assert_cmd::Command;
use nuvira_test_support::env::{Requirement, pytest_ready, require};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn project(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/projects")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "node_modules" || name == "target" || name == "__pycache__" {
            continue;
        }
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            copy_dir(&entry.path(), &to.join(&name));
        } else if ty.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// A fresh copy of `tests/projects/<name>`.
fn fresh(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    copy_dir(&project(name), &dir);
    (tmp, dir)
}

/// Whether the Docker sandbox with the nuvira images can run here (see `cli_test.rs`).
fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "nuvira-host:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Docker,
        if ok {
            Ok(())
        } else {
            Err("no Docker engine with the nuvira-host image answers")
        },
    )
    .is_some()
}

/// Whether the bubblewrap sandbox works here (skipped with a note otherwise, a failure under
/// NUVIRA_REQUIRE_BWRAP=1).
fn bwrap_ready() -> bool {
    require(
        Requirement::Bwrap,
        nuvira_sandbox::BwrapSandbox::check().map_err(|e| format!("the bwrap sandbox: {e}")),
    )
    .is_some()
}

/// `(passed, failed, skipped)`.
type Counts = (u64, u64, u64);

/// Runs `nuvira test --format json` on `dir` in `sandbox`; the JSON result and stderr.
fn nuvira_test(dir: &Path, sandbox: &str, extra: &[&str]) -> (Value, String) {
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env("CARGO_TARGET_DIR", "target")
        .args(["test", "--sandbox", sandbox, "--format", "json"])
        .args(extra)
        .arg("--repo")
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (v, stderr)
}

fn counts_of(v: &Value) -> Counts {
    let n = |k: &str| v[k].as_u64().unwrap_or(u64::MAX);
    (n("passed"), n("failed"), n("skipped"))
}

/// Runs the project's own runner in place and returns its output.
fn in_place(dir: &Path, argv: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = std::process::Command::new(argv[0]);
    c.args(&argv[1..]).current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The number just before `word` in `line` (`2 passed` → 2), 0 when absent.
fn number_before(line: &str, word: &str) -> u64 {
    let tokens: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '|' | '(' | ')' | ';' | '.'))
        .filter(|t| !t.is_empty())
        .collect();
    tokens
        .windows(2)
        .filter(|w| w[1] == word)
        .filter_map(|w| w[0].parse::<u64>().ok())
        .sum()
}

/// The number after `key=` in `text` (`failures=1` → 1), 0 when absent.
fn number_after(text: &str, key: &str) -> u64 {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')'))
        .filter_map(|t| t.strip_prefix(key))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// pytest's final line: `1 failed, 2 passed, 1 skipped in 0.01s`.
fn pytest_summary(out: &Output) -> Counts {
    let text = text(out);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(" in ") && l.starts_with('='))
        .unwrap_or_else(|| panic!("no pytest summary in {text}"));
    let n = |what: &str| number_before(line, what);
    (
        n("passed"),
        n("failed") + n("error") + n("errors"),
        n("skipped"),
    )
}

/// unittest's `Ran N tests` and `FAILED (failures=1, errors=1, skipped=1)`.
fn unittest_summary(out: &Output) -> Counts {
    let text = text(out);
    let ran = text
        .lines()
        .find_map(|l| l.strip_prefix("Ran "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no `Ran N tests` in {text}"));
    let failed = number_after(&text, "failures=") + number_after(&text, "errors=");
    let skipped = number_after(&text, "skipped=");
    (ran - failed - skipped, failed, skipped)
}

/// The sum of cargo's `test result:` lines.
fn cargo_summary(out: &Output) -> Counts {
    let text = text(out);
    let mut c = (0, 0, 0);
    for line in text.lines().filter(|l| l.starts_with("test result: ")) {
        c.0 += number_before(line, "passed");
        c.1 += number_before(line, "failed");
        c.2 += number_before(line, "ignored");
    }
    assert!(c != (0, 0, 0), "no cargo summary in {text}");
    c
}

/// vitest's `Tests  1 failed | 2 passed | 1 skipped (4)`.
fn vitest_summary(out: &Output) -> Counts {
    let text = text(out);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Tests "))
        .unwrap_or_else(|| panic!("no vitest summary in {text}"));
    let n = |what: &str| number_before(line, what);
    (n("passed"), n("failed"), n("skipped"))
}

/// Runs `nuvira test` in the local sandbox, in bubblewrap (when it works here) and in Docker
/// (when it is up), and checks the counts against `expected` (the runner's own summary);
/// returns the local run's JSON and stderr.
fn check_everywhere(dir: &Path, expected: Counts, extra: &[&str]) -> (Value, String) {
    let (local, stderr) = nuvira_test(dir, "local", extra);
    assert_eq!(counts_of(&local), expected, "local: {local}\n{stderr}");
    assert_eq!(local["sandbox"]["kind"], "local");
    if bwrap_ready() {
        let (bwrap, stderr) = nuvira_test(dir, "bwrap", extra);
        assert_eq!(counts_of(&bwrap), expected, "bwrap: {bwrap}\n{stderr}");
        assert_eq!(bwrap["sandbox"]["kind"], "bwrap");
    }
    if docker_ready() {
        let mut args = vec!["--memory", "2g", "--cpus", "2"];
        args.extend_from_slice(extra);
        let (docker, stderr) = nuvira_test(dir, "docker", &args);
        assert_eq!(counts_of(&docker), expected, "docker: {docker}\n{stderr}");
        assert_eq!(docker["sandbox"]["kind"], "docker");
        assert_eq!(docker["sandbox"]["image"], "nuvira-host:latest");
    }
    (local, stderr)
}

#[test]
fn a_flat_layout_pytest_project_imports_its_module() {
    if !pytest_ready() {
        return;
    }
    let (_tmp, dir) = fresh("flat-pytest");
    let own = pytest_summary(&in_place(
        &dir,
        &["python3", "-m", "pytest", "-p", "no:cacheprovider"],
        &[("PYTHONDONTWRITEBYTECODE", "1")],
    ));
    assert_eq!(own, (2, 1, 0));
    let (v, stderr) = check_everywhere(&dir, own, &[]);
    // Bare `pytest` would fail collection here (ModuleNotFoundError: calc).
    assert_eq!(v["failures"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["failures"][0]["file"], "tests/test_calc.py");
    assert_eq!(v["failures"][0]["line"], 13);
    assert!(
        stderr.contains(
            "detected: pytest in . (tests/test_calc.py: test file (pytest style)); python: python3"
        ),
        "{stderr}"
    );
}

#[test]
fn a_src_layout_project_runs_with_its_own_virtualenv() {
    if !pytest_ready() {
        return;
    }
    let (_tmp, dir) = fresh("src-venv");
    let made = in_place(
        &dir,
        &["python3", "-m", "venv", "--system-site-packages", ".venv"],
        &[],
    );
    assert!(made.status.success(), "{}", text(&made));
    // A module only the venv has: the tests import it, so they run only with its python.
    let purelib = in_place(
        &dir,
        &[
            ".venv/bin/python",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        &[],
    );
    let purelib = String::from_utf8_lossy(&purelib.stdout).trim().to_owned();
    std::fs::write(
        Path::new(&purelib).join("venv_marker.py"),
        "WHERE = \"project venv\"\n",
    )
    .unwrap();
    let own = pytest_summary(&in_place(
        &dir,
        &[".venv/bin/python", "-m", "pytest", "-p", "no:cacheprovider"],
        &[("PYTHONDONTWRITEBYTECODE", "1")],
    ));
    assert_eq!(own, (2, 1, 0));
    // The system python cannot import the marker: the venv is what makes the difference.
    let without = pytest_summary(&in_place(
        &dir,
        &["python3", "-m", "pytest", "-p", "no:cacheprovider"],
        &[("PYTHONDONTWRITEBYTECODE", "1")],
    ));
    assert_ne!(without, own);
    // As Python 3.11's venv makes it, with no ignore file: the environment is still left out
    // of the sandbox copy (its pyvenv.cfg says what it is), and run from the workspace.
    let copied = |v: &Value| -> u64 {
        let note = v["sandbox"]["workspace_copy"].as_str().unwrap_or_default();
        note.split(" copied")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{note}"))
    };
    let (local, _) = check_everywhere(&dir, own, &[]);
    assert!(copied(&local) < 20, "the environment was copied: {local}");
    // As uv (and Python 3.13's venv) do: the environment ignores itself, and the project's own
    // `.gitignore` lists it too.
    std::fs::write(dir.join(".venv/.gitignore"), "*\n").unwrap();
    std::fs::write(dir.join(".gitignore"), ".venv/\n").unwrap();
    let (_, stderr) = check_everywhere(&dir, own, &[]);
    assert!(
        stderr.contains(&format!(
            "python: {}/.venv/bin/python (the project's environment .venv/",
            dir.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_tox_project_running_py_test_is_detected() {
    if !pytest_ready() {
        return;
    }
    let (_tmp, dir) = fresh("tox-pytest");
    let own = pytest_summary(&in_place(
        &dir,
        &["python3", "-m", "pytest", "-p", "no:cacheprovider"],
        &[("PYTHONDONTWRITEBYTECODE", "1")],
    ));
    assert_eq!(own, (1, 1, 1));
    let (v, stderr) = check_everywhere(&dir, own, &[]);
    assert_eq!(v["failures"][0]["file"], "tests/test_slug.py", "{v}");
    assert!(
        stderr.contains("detected: pytest in . (tox.ini: commands run py.test)"),
        "{stderr}"
    );
}

#[test]
fn a_unittest_only_project_runs_with_unittest() {
    let (_tmp, dir) = fresh("unittest-only");
    let own = unittest_summary(&in_place(
        &dir,
        &["python3", "-m", "unittest", "discover", "-v"],
        &[("PYTHONDONTWRITEBYTECODE", "1")],
    ));
    assert_eq!(own, (2, 2, 1));
    let (v, stderr) = check_everywhere(&dir, own, &[]);
    assert_eq!(v["framework"], "unittest");
    let located: Vec<(String, u64)> = v["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap_or_default().to_owned(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        located.contains(&("tests/test_inventory.py".to_owned(), 24)),
        "{located:?}"
    );
    assert!(stderr.contains("detected: unittest in ."), "{stderr}");
    // And by name, as `--framework unittest`.
    let (v, _) = nuvira_test(&dir, "local", &["--framework", "unittest"]);
    assert_eq!(counts_of(&v), own);
}

// Before issue 12's limits both sandboxes broke this crate: the local sandbox's RLIMIT_DATA made
// the thread stacks fail to allocate ("memory allocation of 6144 bytes failed") and the run hung
// to its timeout, and Docker's old pids limit of 256 failed `thread::spawn` (EAGAIN).
#[test]
fn a_crate_whose_tests_spawn_hundreds_of_threads() {
    let (tmp, dir) = fresh("thread-crate");
    let target = tmp.path().join("in-place-target");
    let own = cargo_summary(&in_place(
        &dir,
        &["cargo", "test", "--no-fail-fast"],
        &[("CARGO_TARGET_DIR", target.to_str().unwrap())],
    ));
    // 2 + 1 failing in the lib, 1 + 1 ignored in tests/stress.rs, 0 doctests.
    assert_eq!(own, (3, 1, 1));
    let (v, _) = check_everywhere(&dir, own, &["--timeout", "60s"]);
    assert_eq!(v["failures"][0]["file"], "src/lib.rs", "{v}");
}

/// pnpm, or `None` after printing why (a failure under NUVIRA_REQUIRE_PNPM=1).
fn pnpm_project() -> Option<(tempfile::TempDir, PathBuf)> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("pnpm").is_file()));
    require(
        Requirement::Pnpm,
        if found {
            Ok(())
        } else {
            Err("pnpm is not on PATH")
        },
    )?;
    let (tmp, dir) = fresh("pnpm-vitest");
    // From the npm registry through pnpm's store (offline after the first time).
    let out = in_place(
        &dir,
        &["pnpm", "install", "--frozen-lockfile", "--prefer-offline"],
        &[],
    );
    assert!(out.status.success(), "pnpm install: {}", text(&out));
    Some((tmp, dir))
}

#[test]
fn a_pnpm_project_runs_through_pnpm() {
    let Some((_tmp, dir)) = pnpm_project() else {
        return;
    };
    let own = vitest_summary(&in_place(
        &dir,
        &["pnpm", "exec", "vitest", "run"],
        &[("NO_COLOR", "1")],
    ));
    assert_eq!(own, (2, 1, 1));
    let (v, stderr) = check_everywhere(&dir, own, &[]);
    assert_eq!(v["failures"][0]["file"], "math.test.js", "{v}");
    assert!(
        stderr.contains("node: pnpm, from pnpm-lock.yaml; the existing node_modules/"),
        "{stderr}"
    );
    assert!(
        v["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("pnpm exec vitest run")),
        "{v}"
    );
}

#[test]
fn a_hostile_test_file_name_reaches_the_detected_line_escaped() {
    if !pytest_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The reason names the file: an OSC title sequence and a colour in its name.
    let hostile = "test_\x1b]0;pwned\x07\x1b[31mred.py";
    std::fs::create_dir_all(tmp.path().join("tests")).unwrap();
    std::fs::write(
        tmp.path().join("tests").join(hostile),
        "def test_ok():\n    assert True\n",
    )
    .unwrap();
    let (v, stderr) = nuvira_test(tmp.path(), "local", &[]);
    assert_eq!(counts_of(&v), (1, 0, 0), "{v}\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("detected: pytest"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(!line.contains('\x1b') && !line.contains('\x07'), "{line:?}");
    assert!(line.contains("pwned"), "{line:?}");
}
