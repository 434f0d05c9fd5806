//! Issue 12: killed verbose runs, `go test -v`, unittest, and the project's own toolchain
//! (fixtures captured by `tests/fixtures/capture/capture-2026-12-01.sh`).

use super::{check_go_basic, counts, cwd, failure, output, points_at, run, run_go};
use nuvira_runner::detect::{self, Framework};
use nuvira_runner::parse::{self, RunnerOutput};
use std::fs;
use std::path::Path;

// ---------------------------------------------------------------- killed pytest -v

#[test]
fn a_killed_pytest_v_run_names_the_running_test_and_counts_the_passed_one() {
    for case in ["hang-verbose-killed", "hang-detected-killed"] {
        let r = run(Framework::Pytest, "pytest", case);
        // test_quick_passes PASSED; test_hangs_forever started and never ended; the third
        // test never started, so it is neither passed nor failed.
        counts(&r, 1, 1, 0);
        failure(
            &r,
            "test_hang.py::test_hangs_forever",
            None,
            None,
            "did not finish: the run was killed (SIGTERM, exit 143)",
        );
        assert!(
            r.failures.iter().all(|f| f.name != "test run"),
            "{case}: {:#?}",
            r.failures
        );
        // What the sandbox says when it killed the run itself.
        let out = output("pytest", case).timed_out(true);
        let r = parse::parse_output(Framework::Pytest, &out, Some(&cwd("pytest", case)));
        failure(
            &r,
            "test_hangs_forever",
            None,
            None,
            "killed at its timeout",
        );
    }
}

// ---------------------------------------------------------------- unittest

fn check_unittest_basic(case: &str) {
    let r = run(Framework::Unittest, "unittest", case);
    // Ran 7: 2 ok, 1 FAIL, 1 ERROR, 2 skipped, 1 expected failure.
    counts(&r, 2, 2, 3);
    assert_eq!(r.failures.len(), 2, "{:#?}", r.failures);
    let f = failure(
        &r,
        "tests.test_alpha.AddTest.test_add_assertion_fails",
        Some("tests/test_alpha.py"),
        Some(11),
        "AssertionError: 4 != 5",
    );
    points_at("unittest", case, f, "self.assertEqual(calc.add(2, 2), 5)");
    let f = failure(
        &r,
        "tests.test_beta.ParseTest.test_parse_raises",
        Some("tests/test_beta.py"),
        Some(10),
        "json.decoder.JSONDecodeError: Expecting property name",
    );
    points_at("unittest", case, f, "json.loads(\"{not valid json\")");
    assert!(f.output.contains("Traceback"));
    // `Ran 7 tests in 0.002s`: the runner's own figure.
    assert!(
        r.duration_ms > 0 && r.duration_ms < 1000,
        "{}",
        r.duration_ms
    );
}

#[test]
fn unittest_verbose_and_plain_runs_count_and_locate_failures() {
    check_unittest_basic("basic-verbose");
    check_unittest_basic("basic-default");
}

#[test]
fn a_passing_unittest_run_is_a_success() {
    let r = run(Framework::Unittest, "unittest", "ok-verbose");
    assert!(r.success, "{r:#?}");
    assert_eq!((r.passed, r.failed, r.skipped, r.total), (2, 0, 0, 2));
    assert!(r.failures.is_empty());
}

#[test]
fn a_unittest_module_that_fails_to_import_is_a_located_failure() {
    let r = run(Framework::Unittest, "unittest", "import-error-verbose");
    counts(&r, 1, 1, 0);
    let f = failure(
        &r,
        "tests.test_broken",
        Some("tests/test_broken.py"),
        Some(3),
        "ModuleNotFoundError: No module named 'does_not_exist'",
    );
    points_at(
        "unittest",
        "import-error-verbose",
        f,
        "import does_not_exist",
    );
}

#[test]
fn a_killed_unittest_run_names_the_running_test() {
    for case in ["hang-verbose-killed", "hang-buffered-killed"] {
        let r = run(Framework::Unittest, "unittest", case);
        counts(&r, 1, 1, 0);
        failure(
            &r,
            "tests.test_hang.HangTest.test_b_hangs_forever",
            None,
            None,
            "did not finish",
        );
    }
}

#[test]
fn unittest_output_is_recognized_without_a_framework() {
    for case in ["basic-verbose", "basic-default", "ok-verbose"] {
        assert_eq!(
            parse::guess_framework(&output("unittest", case)),
            Some(Framework::Unittest),
            "{case}"
        );
    }
}

// ---------------------------------------------------------------- go test -v

#[test]
fn go_v_output_counts_passes_and_locates_errorf_failures() {
    let r = run_go("basic-verbose");
    counts(&r, 2, 2, 0);
    // t.Errorf's `alpha_test.go:13:` line comes BEFORE `--- FAIL` in -v output.
    check_go_basic(&r, "basic-verbose");
}

#[test]
fn a_killed_go_v_run_names_the_running_test_and_counts_the_passed_one() {
    let r = run_go("hang-verbose-killed");
    counts(&r, 1, 1, 0);
    failure(&r, "TestHangsForever", None, None, "did not finish");
    assert!(r.failures.iter().all(|f| f.name != "test run"));
    let r = run_go("hang-verbose-json-killed");
    counts(&r, 1, 1, 0);
    failure(
        &r,
        "example.com/fixture_hang/slow.TestHangsForever",
        None,
        None,
        "did not finish",
    );
}

#[test]
fn a_go_panic_built_elsewhere_is_located_relative_to_the_repository() {
    // The stack names /tmp/nuvira-capture/go/basic/beta/beta_test.go; parsed against another
    // root (a sandbox copy, a container path), the frame still maps to the package folder.
    for case in ["basic-verbose", "basic-default", "basic-json"] {
        let go_mod = fs::read_to_string(
            super::fixtures()
                .join("go")
                .join(format!("{case}.src/go.mod")),
        )
        .expect("go.mod");
        let out = output("go", case);
        let ctx = parse::Ctx::new(Some(Path::new("/workspace/elsewhere")));
        let r = parse::gotest::parse(&out, &ctx, detect::go_module_path(&go_mod)).finish(&out);
        failure(
            &r,
            "example.com/fixture/beta.TestParseNumberPanics",
            Some("beta/beta_test.go"),
            Some(12),
            "panic: strconv.Atoi",
        );
    }
}

// ---------------------------------------------------------------- detection

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = root.join(path);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }
}

fn detect_one(files: &[(&str, &str)]) -> detect::Detected {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), files);
    let found = detect::available_frameworks(dir.path()).expect("detect");
    assert_eq!(found.len(), 1, "{found:#?}");
    found.into_iter().next().expect("one")
}

#[test]
fn python_projects_are_found_by_their_commands_and_test_files() {
    type Files<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(Files<'_>, Framework, &str)] = &[
        (
            &[(
                "tox.ini",
                "[tox]\nenvlist = py311\n\n[testenv]\ndeps = pytest\ncommands =\n    py.test {posargs}\n",
            )],
            Framework::Pytest,
            "tox.ini: commands run py.test",
        ),
        (
            &[("tox.ini", "[testenv]\ncommands = pytest -q\n")],
            Framework::Pytest,
            "tox.ini: commands run pytest",
        ),
        (
            &[("setup.cfg", "[aliases]\ntest = pytest\n")],
            Framework::Pytest,
            "setup.cfg: names pytest",
        ),
        (
            &[(
                "noxfile.py",
                "import nox\n\n@nox.session\ndef tests(session):\n    session.install(\"-e\", \".\")\n    session.run(\"pytest\", \"-q\")\n",
            )],
            Framework::Pytest,
            "noxfile.py: session.run runs pytest",
        ),
        (
            &[("Makefile", "test:\n\tpython -m pytest tests\n")],
            Framework::Pytest,
            "Makefile: a recipe runs pytest",
        ),
        (
            &[
                ("calc.py", "def add(a, b):\n    return a + b\n"),
                (
                    "tests/test_calc.py",
                    "import calc\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n",
                ),
            ],
            Framework::Pytest,
            "tests/test_calc.py: test file (pytest style)",
        ),
        (
            &[("tests/test_x.py", "import unittest\nimport pytest\n")],
            Framework::Pytest,
            "tests/test_x.py: imports pytest",
        ),
        (
            &[
                ("tests/__init__.py", ""),
                (
                    "tests/test_x.py",
                    "import unittest\n\nclass T(unittest.TestCase):\n    pass\n",
                ),
            ],
            Framework::Unittest,
            "tests/test_x.py: unittest test cases, and nothing names pytest",
        ),
    ];
    for (files, framework, reason) in cases {
        let d = detect_one(files);
        assert_eq!(d.framework, Some(*framework), "{files:?}");
        assert_eq!(d.reason, *reason);
        // Never the bare `pytest` script: `-m` puts the project folder on sys.path.
        assert_eq!(
            &d.command[1..3],
            ["-m", framework.as_str()],
            "{:?}",
            d.command
        );
        assert!(
            d.toolchain
                .starts_with("python: python3 (no project environment"),
            "{}",
            d.toolchain
        );
    }
    // Not Python: a Makefile that never runs pytest, a file that only looks like a test.
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &[
            ("Makefile", "test:\n\tcargo test\n# pytest\n"),
            ("testing.py", ""),
        ],
    );
    assert!(
        detect::available_frameworks(dir.path())
            .expect("detect")
            .is_empty()
    );
}

#[test]
fn unittest_discovery_starts_in_a_tests_folder_without_init() {
    let d = detect_one(&[("tests/test_x.py", "import unittest\n")]);
    assert_eq!(d.framework, Some(Framework::Unittest));
    assert_eq!(
        d.command[1..],
        ["-m", "unittest", "discover", "-v", "-s", "tests"]
    );
    assert!(d.collect.is_empty());
    let d = detect_one(&[
        ("tests/__init__.py", ""),
        ("tests/test_x.py", "import unittest\n"),
    ]);
    assert_eq!(d.command[1..], ["-m", "unittest", "discover", "-v"]);
}

#[test]
fn the_project_virtualenv_is_the_interpreter() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &[("pytest.ini", "[pytest]\n")]);
    // A link to a missing interpreter (a venv made on another machine) is not used.
    fs::create_dir_all(dir.path().join(".venv/bin")).expect("mkdir");
    std::os::unix::fs::symlink(
        "/nonexistent/python3.99",
        dir.path().join(".venv/bin/python"),
    )
    .expect("link");
    let found = detect::available_frameworks(dir.path()).expect("detect");
    assert_eq!(found[0].command[0], "python3");
    assert!(
        found[0]
            .toolchain
            .contains(".venv/bin/python is a broken link"),
        "{}",
        found[0].toolchain
    );
    write(dir.path(), &[("venv/bin/python", "")]);
    let found = detect::available_frameworks(dir.path()).expect("detect");
    // By absolute path, the link itself (not the base interpreter it points to), and the
    // environment is a host path a container mounts.
    let venv = std::path::absolute(dir.path().join("venv")).expect("absolute");
    let python = venv.join("bin/python").to_string_lossy().into_owned();
    assert_eq!(found[0].command[..3], [python.as_str(), "-m", "pytest"]);
    assert_eq!(
        found[0].toolchain,
        format!(
            "python: {python} (the project's environment venv/, run from the workspace (a sandbox copy leaves ignored files such as the environment out))"
        )
    );
    assert_eq!(found[0].host_paths, [venv]);
    // A uv project without its .venv says how to make one.
    write(dir.path(), &[("uv.lock", "version = 1\n")]);
    fs::remove_dir_all(dir.path().join("venv")).expect("rm");
    let found = detect::available_frameworks(dir.path()).expect("detect");
    assert!(
        found[0].toolchain.contains("run `uv sync`"),
        "{}",
        found[0].toolchain
    );
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[test]
fn the_lockfile_picks_the_package_manager() {
    let pkg = "{\"devDependencies\": {\"vitest\": \"4\"}}";
    for (lock, pm, exec) in [
        ("pnpm-lock.yaml", "pnpm", &["pnpm", "exec"][..]),
        ("yarn.lock", "yarn", &["yarn", "exec"][..]),
        ("bun.lockb", "bun", &["bun", "run"][..]),
        ("bun.lock", "bun", &["bun", "run"][..]),
        ("package-lock.json", "npm", &["npx", "--no", "--"][..]),
    ] {
        let d = detect_one(&[("package.json", pkg), (lock, "")]);
        assert!(
            d.toolchain.starts_with(&format!("node: {pm}, from {lock}")),
            "{}",
            d.toolchain
        );
        let program = if pm == "npm" { "npx" } else { pm };
        if on_path(program) {
            assert_eq!(d.command[..exec.len()], *exec, "{lock}");
        } else {
            assert!(
                d.toolchain.contains("is not on PATH: npx instead"),
                "{}",
                d.toolchain
            );
            assert_eq!(d.command[..3], ["npx", "--no", "--"]);
        }
        let used = if on_path(program) { exec.len() } else { 3 };
        assert_eq!(d.command[used], "vitest", "{:?}", d.command);
        assert!(
            d.toolchain
                .ends_with("no node_modules/ yet: install the dependencies first")
        );
    }
    let d = detect_one(&[("package.json", pkg), ("node_modules/.keep", "")]);
    assert_eq!(
        d.toolchain,
        "node: npm (no pnpm, yarn or bun lockfile); the existing node_modules/"
    );
}

#[test]
fn rust_toolchain_files_pick_the_channel_when_rustup_is_there() {
    let manifest = "[package]\nname = \"pinned\"\nversion = \"0.1.0\"\n";
    let d = detect_one(&[
        ("Cargo.toml", manifest),
        ("rust-toolchain.toml", "[toolchain]\nchannel = \"1.80.0\"\n"),
    ]);
    if on_path("rustup") {
        assert_eq!(d.command[..3], ["cargo", "+1.80.0", "test"]);
        assert!(
            d.toolchain
                .starts_with("rust-toolchain.toml: channel 1.80.0, run as `cargo +1.80.0`"),
            "{}",
            d.toolchain
        );
    } else {
        assert_eq!(d.command[..2], ["cargo", "test"]);
        assert!(d.toolchain.contains("NOT honoured"), "{}", d.toolchain);
    }
    let d = detect_one(&[("Cargo.toml", manifest)]);
    assert_eq!(d.command, ["cargo", "test", "--no-fail-fast"]);
    assert_eq!(d.toolchain, "cargo from PATH (no rust-toolchain.toml)");
}

#[test]
fn go_detection_says_whose_caches_go_uses() {
    let d = detect_one(&[("go.mod", "module example.com/x\n\ngo 1.19\n")]);
    assert!(
        d.toolchain.starts_with("go from PATH (go.mod: go 1.19)"),
        "{}",
        d.toolchain
    );
    assert!(
        d.toolchain
            .contains("module cache: go's own GOMODCACHE; build cache: the sandbox's warm GOCACHE"),
        "{}",
        d.toolchain
    );
}

#[test]
fn unittest_is_a_framework_name() {
    assert_eq!("unittest".parse::<Framework>(), Ok(Framework::Unittest));
    assert_eq!(Framework::Unittest.as_str(), "unittest");
    let argv: Vec<String> = "python3 -m unittest discover -v"
        .split(' ')
        .map(str::to_owned)
        .collect();
    assert_eq!(
        detect::framework_for_command(&argv),
        Some(Framework::Unittest)
    );
    // Parsing a whole RunnerOutput records the framework.
    let r = parse::parse_output(
        Framework::Unittest,
        &RunnerOutput::new("", "", Some(0)),
        None,
    );
    assert_eq!(r.framework.as_deref(), Some("unittest"));
    assert!(!r.success, "no output at all is not a success");
}

// ---------------------------------------------------------------- cargo test, killed late

#[test]
fn a_cargo_run_killed_after_the_60_second_note_names_the_running_test() {
    let r = run(Framework::Cargo, "cargo", "hang-long-killed");
    // `quick_passes ... ok`, then `test hangs_forever has been running for over 60 seconds`.
    counts(&r, 1, 1, 0);
    failure(&r, "hangs_forever", None, None, "did not finish");
    assert!(
        r.failures.iter().all(|f| f.name != "test run"),
        "{:#?}",
        r.failures
    );
    // Without the note (killed after 5 s) the test is unknown: one `test run` failure.
    let r = run(Framework::Cargo, "cargo", "hang-killed");
    failure(&r, "test run", None, None, "killed");
}

#[test]
fn a_poetry_project_without_poetry_says_where_its_environment_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &[
            (
                "pyproject.toml",
                "[tool.poetry]\nname = \"x\"\n\n[tool.pytest.ini_options]\n",
            ),
            ("poetry.lock", ""),
        ],
    );
    // Without poetry installed, its environment cannot be asked for: python3 is the fallback.
    let found = detect::available_frameworks(dir.path()).expect("detect");
    let t = &found[0].toolchain;
    if !on_path("poetry") {
        assert!(
            t.contains(
                "a poetry project whose environment lives outside it, and poetry is not on PATH"
            ),
            "{t}"
        );
    }
}

#[test]
fn a_missing_pytest_in_the_chosen_interpreter_says_how_to_fix_it() {
    if !nuvira_test_support::env::pytest_ready() {
        return;
    }
    // A real run: a virtualenv without system site-packages has no pytest.
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), &[("test_x.py", "def test_x():\n    pass\n")]);
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(dir.path())
        .output()
        .expect("python3");
    assert!(made.status.success(), "{made:?}");
    let d = detect::available_frameworks(dir.path())
        .expect("detect")
        .remove(0);
    let out = std::process::Command::new(&d.command[0])
        .args(&d.command[1..])
        .current_dir(dir.path())
        .output()
        .expect("run");
    let out = RunnerOutput::new(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code().map(i64::from),
    );
    let r = parse::parse_output(Framework::Pytest, &out, Some(dir.path()));
    assert!(!r.success);
    failure(
        &r,
        "pytest",
        None,
        None,
        "No module named pytest: install pytest into the interpreter",
    );
}

#[test]
fn a_monorepo_environment_and_lockfile_at_the_root_serve_its_sub_projects() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &[
            ("services/api/pytest.ini", "[pytest]\n"),
            (".venv/bin/python", ""),
            ("pnpm-lock.yaml", "lockfileVersion: '9.0'\n"),
            ("node_modules/.keep", ""),
            (
                "packages/web/package.json",
                "{\"devDependencies\": {\"vitest\": \"4\"}}",
            ),
        ],
    );
    let found = detect::available_frameworks(dir.path()).expect("detect");
    let py = found
        .iter()
        .find(|d| d.framework == Some(Framework::Pytest))
        .expect("pytest");
    let venv = std::path::absolute(dir.path().join(".venv")).expect("absolute");
    assert_eq!(py.command[0], venv.join("bin/python").to_string_lossy());
    assert!(
        py.toolchain
            .contains("the project's environment ../../.venv/"),
        "{}",
        py.toolchain
    );
    let web = found
        .iter()
        .find(|d| d.framework == Some(Framework::Vitest))
        .expect("vitest");
    assert!(
        web.toolchain
            .starts_with("node: pnpm, from ../../pnpm-lock.yaml"),
        "{}",
        web.toolchain
    );
    assert!(
        web.toolchain.ends_with("the existing ../../node_modules/"),
        "{}",
        web.toolchain
    );
    // A lockfile above the workspace root is not the project's.
    let inner = dir.path().join("packages/web");
    let found = detect::available_frameworks(&inner).expect("detect");
    assert!(
        found[0].toolchain.starts_with("node: npm (no pnpm"),
        "{}",
        found[0].toolchain
    );
}
