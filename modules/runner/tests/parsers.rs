//! Parser tests on real runner output (copied from /work/shared/fixtures, see
//! tests/fixtures/README.md for how each case was captured and what it must report).

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns: a missing fixture must fail the test loudly"
)]

use nuvira_api::TestResult;
use nuvira_runner::detect::Framework;
use nuvira_runner::parse::{self, RunnerOutput};
use std::path::{Path, PathBuf};

#[path = "parsers/toolchains.rs"]
mod toolchains;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The captured run: stdout, stderr, exit code and the JUnit file when the case wrote one.
fn output(runner: &str, case: &str) -> RunnerOutput {
    let dir = fixtures().join(runner);
    let stdout = read(&dir.join(format!("{case}.stdout")))
        .unwrap_or_else(|| panic!("missing fixture {runner}/{case}.stdout"));
    let stderr = read(&dir.join(format!("{case}.stderr"))).unwrap_or_default();
    let exit: i64 = read(&dir.join(format!("{case}.exit")))
        .expect("exit file")
        .trim()
        .parse()
        .expect("exit code");
    let mut out = RunnerOutput::new(stdout, stderr, Some(exit));
    if let Some(xml) = read(&dir.join(format!("{case}.junit.xml"))) {
        out = out.with_junit(xml);
    }
    out
}

/// The working directory the case ran in (from captures.tsv).
fn cwd(runner: &str, case: &str) -> PathBuf {
    let tsv = read(&fixtures().join("captures.tsv")).expect("captures.tsv");
    let line = tsv
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|f| f[0] == runner && f[1] == case)
        .unwrap_or_else(|| panic!("{runner}/{case} not in captures.tsv"));
    PathBuf::from(line[3])
}

fn run(framework: Framework, runner: &str, case: &str) -> TestResult {
    let root = cwd(runner, case);
    parse::parse_output(framework, &output(runner, case), Some(&root))
}

/// The text of `line` (1-based) of `file` in the case's `.src/` copy of the project.
fn src_line(runner: &str, case: &str, file: &str, line: u32) -> String {
    let path = fixtures()
        .join(runner)
        .join(format!("{case}.src"))
        .join(file);
    let text = read(&path).unwrap_or_else(|| panic!("missing source {}", path.display()));
    text.lines()
        .nth(line as usize - 1)
        .unwrap_or_default()
        .to_owned()
}

/// Asserts the counts (total = passed + failed) and that the run is not a success unless told.
#[track_caller]
fn counts(r: &TestResult, passed: u32, failed: u32, skipped: u32) {
    assert_eq!(
        (r.passed, r.failed, r.skipped),
        (passed, failed, skipped),
        "counts of {r:#?}"
    );
    assert_eq!(r.total, passed + failed);
    assert!(!r.success, "a failing run must not be a success");
}

/// Finds the failure whose name contains `name` and checks its file, line and message.
#[track_caller]
fn failure<'a>(
    r: &'a TestResult,
    name: &str,
    file: Option<&str>,
    line: Option<u32>,
    message: &str,
) -> &'a nuvira_api::TestFailure {
    let f = r
        .failures
        .iter()
        .find(|f| f.name.contains(name))
        .unwrap_or_else(|| panic!("no failure named like {name:?} in {:#?}", r.failures));
    assert_eq!(f.file.as_deref(), file, "file of {name}");
    assert_eq!(f.line, line, "line of {name}");
    assert!(
        f.message.contains(message),
        "message of {name}: {:?} lacks {message:?}",
        f.message
    );
    f
}

/// The source line a failure points at contains `needle`.
#[track_caller]
fn points_at(runner: &str, case: &str, f: &nuvira_api::TestFailure, needle: &str) {
    let (Some(file), Some(line)) = (&f.file, f.line) else {
        panic!("{} has no location", f.name)
    };
    let text = src_line(runner, case, file, line);
    assert!(
        text.contains(needle),
        "{file}:{line} is {text:?}, expected {needle:?}"
    );
}

// ---------------------------------------------------------------- cargo (libtest)

fn check_cargo_basic(r: &TestResult, runner: &str, case: &str, lib_name: &str, int_name: &str) {
    let f = failure(
        r,
        lib_name,
        Some("src/lib.rs"),
        Some(16),
        "2 + 2 should equal 5",
    );
    points_at(runner, case, f, "assert_eq!(add(2, 2), 5");
    let f = failure(
        r,
        int_name,
        Some("tests/integration.rs"),
        Some(10),
        "ParseIntError",
    );
    points_at(runner, case, f, "\"not a number\".parse()");
}

#[test]
fn cargo_default_stops_after_the_lib_suite() {
    let r = run(Framework::Cargo, "cargo", "basic-default");
    counts(&r, 1, 1, 0);
    let f = failure(
        &r,
        "tests::add_assertion_fails",
        Some("src/lib.rs"),
        Some(16),
        "2 + 2 should equal 5",
    );
    assert!(f.output.contains("left: 4"), "{}", f.output);
    assert_eq!(r.framework.as_deref(), Some("cargo"));
}

#[test]
fn cargo_no_fail_fast_counts_every_suite_including_doctests() {
    let r = run(Framework::Cargo, "cargo", "basic-no-fail-fast");
    // lib 1/1 + tests/integration.rs 1/1 + doctests 0/0.
    counts(&r, 2, 2, 0);
    assert_eq!(r.failures.len(), 2);
    check_cargo_basic(
        &r,
        "cargo",
        "basic-no-fail-fast",
        "tests::add_assertion_fails",
        "integration_panics",
    );
}

#[test]
fn cargo_libtest_json() {
    let r = run(Framework::Cargo, "cargo", "basic-json");
    counts(&r, 2, 2, 0);
    check_cargo_basic(
        &r,
        "cargo",
        "basic-json",
        "tests::add_assertion_fails",
        "integration_panics",
    );
    assert!(r.duration_ms > 0, "exec_time is summed");
}

#[test]
fn cargo_compile_error_is_a_failure_with_its_location() {
    let r = run(Framework::Cargo, "cargo", "compile-error");
    counts(&r, 0, 1, 0);
    let f = failure(
        &r,
        "compile error",
        Some("tests/integration.rs"),
        Some(10),
        "error[E0308]: mismatched types",
    );
    points_at("cargo", "compile-error", f, "add(1, \"two\")");
}

#[test]
fn cargo_killed_run_is_not_a_success() {
    let r = run(Framework::Cargo, "cargo", "hang-killed");
    // quick_passes passed; hangs_forever never reported.
    counts(&r, 1, 1, 0);
    failure(&r, "test run", None, None, "killed (SIGTERM, exit 143)");
}

#[test]
fn cargo_killed_json_run_names_the_unfinished_test() {
    let r = run(Framework::Cargo, "cargo", "hang-json-killed");
    counts(&r, 1, 1, 0);
    failure(&r, "hangs_forever", None, None, "did not finish");
}

#[test]
fn cargo_build_errors_plain_and_json() {
    let ctx = parse::Ctx::new(Some(Path::new(
        "/home/dev/projects/cargo-build/compile-error",
    )));
    let plain =
        parse::diagnostics::parse_rustc(&output("cargo-build", "compile-error").stderr, &ctx);
    let json = parse::diagnostics::parse_cargo_json(
        &output("cargo-build", "compile-error-json").stdout,
        &ctx,
    );
    for diags in [plain, json] {
        let found: Vec<_> = diags
            .iter()
            .map(|d| (d.file.as_deref(), d.line, d.message.as_str()))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    Some("src/lib.rs"),
                    Some(7),
                    "error[E0308]: mismatched types"
                ),
                (
                    Some("src/lib.rs"),
                    Some(8),
                    "error[E0308]: mismatched types"
                ),
                (
                    Some("src/lib.rs"),
                    Some(12),
                    "error[E0425]: cannot find function `undefined_function` in this scope"
                ),
            ],
            "the warning is not an error"
        );
        assert_eq!(
            src_line("cargo-build", "compile-error", "src/lib.rs", 12).trim(),
            "undefined_function(1)"
        );
    }
}

// ---------------------------------------------------------------- nextest

#[test]
fn nextest_default_fail_fast_run() {
    let r = run(Framework::Nextest, "nextest", "basic-default");
    // Summary: 3/4 tests run: 1 passed, 2 failed (1 not run because of fail-fast).
    counts(&r, 1, 2, 0);
    check_cargo_basic(
        &r,
        "nextest",
        "basic-default",
        "fixture_nextest_basic tests::add_assertion_fails",
        "fixture_nextest_basic::integration integration_panics",
    );
}

#[test]
fn nextest_no_fail_fast_human_output() {
    let r = run(Framework::Nextest, "nextest", "basic-no-fail-fast");
    counts(&r, 2, 2, 0);
    check_cargo_basic(
        &r,
        "nextest",
        "basic-no-fail-fast",
        "fixture_nextest_basic tests::add_assertion_fails",
        "fixture_nextest_basic::integration integration_panics",
    );
    assert_eq!(r.duration_ms, 28);
}

#[test]
fn nextest_junit_report() {
    let r = run(Framework::Nextest, "nextest", "basic-junit");
    counts(&r, 2, 2, 0);
    check_cargo_basic(
        &r,
        "nextest",
        "basic-junit",
        "fixture_nextest_basic tests::add_assertion_fails",
        "fixture_nextest_basic::integration integration_panics",
    );
    assert_eq!(r.duration_ms, 46, "testsuites time=0.046");
}

#[test]
fn nextest_libtest_json() {
    let out = output("nextest", "basic-libtest-json");
    let ctx = parse::Ctx::new(Some(&cwd("nextest", "basic-libtest-json")));
    let json = parse::libtest::parse_json(&out.stdout, &ctx);
    assert_eq!((json.passed, json.failed), (2, 2));
    assert!(
        json.failures
            .iter()
            .any(|f| f.name == "fixture_nextest_basic::integration integration_panics")
    );
    let r = run(Framework::Nextest, "nextest", "basic-libtest-json");
    counts(&r, 2, 2, 0);
    check_cargo_basic(
        &r,
        "nextest",
        "basic-libtest-json",
        "fixture_nextest_basic tests::add_assertion_fails",
        "fixture_nextest_basic::integration integration_panics",
    );
}

#[test]
fn nextest_compile_error() {
    let r = run(Framework::Nextest, "nextest", "compile-error");
    counts(&r, 0, 1, 0);
    failure(
        &r,
        "compile error",
        Some("tests/integration.rs"),
        Some(10),
        "E0308",
    );
}

#[test]
fn nextest_catching_sigterm_reports_the_killed_test() {
    let r = run(Framework::Nextest, "nextest", "hang-killed");
    counts(&r, 1, 1, 0);
    failure(
        &r,
        "fixture_hang::hang hangs_forever",
        None,
        None,
        "SIGTERM",
    );
}

#[test]
fn nextest_own_timeout_human_and_junit() {
    let mut out = output("nextest", "hang-nextest-timeout");
    let root = Path::new("/home/dev/projects/nextest/hang");
    let r = parse::parse_output(Framework::Nextest, &out, Some(root));
    // Summary: 2 tests run: 1 passed, 1 timed out.
    counts(&r, 1, 1, 0);
    failure(
        &r,
        "fixture_hang::hang hangs_forever",
        None,
        None,
        "timeout",
    );
    out.junit_xml = None;
    let r = parse::parse_output(Framework::Nextest, &out, Some(root));
    counts(&r, 1, 1, 0);
    failure(
        &r,
        "fixture_hang::hang hangs_forever",
        None,
        None,
        "timed out",
    );
}

// ---------------------------------------------------------------- pytest

fn check_pytest_basic(r: &TestResult, case: &str) {
    counts(r, 2, 2, 0);
    let f = failure(
        r,
        "test_alpha.py::test_add_assertion_fails",
        Some("test_alpha.py"),
        Some(11),
        "AssertionError: 2 + 2 should equal 5",
    );
    points_at("pytest", case, f, "assert result == 5");
    let f = failure(
        r,
        "test_beta.py::test_raises_exception",
        Some("test_beta.py"),
        Some(13),
        "JSONDecodeError",
    );
    points_at("pytest", case, f, "parse_config(\"{not valid json\")");
}

#[test]
fn pytest_default_output() {
    let r = run(Framework::Pytest, "pytest", "basic-default");
    check_pytest_basic(&r, "basic-default");
    assert_eq!(r.duration_ms, 60);
}

#[test]
fn pytest_quiet_output() {
    check_pytest_basic(&run(Framework::Pytest, "pytest", "basic-q"), "basic-q");
}

#[test]
fn pytest_junit_report_and_its_terminal_output_agree() {
    let with_junit = run(Framework::Pytest, "pytest", "basic-junitxml");
    check_pytest_basic(&with_junit, "basic-junitxml");
    let mut out = output("pytest", "basic-junitxml");
    out.junit_xml = None;
    let terminal = parse::parse_output(
        Framework::Pytest,
        &out,
        Some(&cwd("pytest", "basic-junitxml")),
    );
    check_pytest_basic(&terminal, "basic-junitxml");
}

#[test]
fn pytest_collection_errors_count_as_failed() {
    for case in ["import-error", "import-error-q"] {
        let r = run(Framework::Pytest, "pytest", case);
        counts(&r, 0, 1, 0);
        let f = failure(
            &r,
            "test_beta.py",
            Some("test_beta.py"),
            Some(2),
            "ModuleNotFoundError: No module named 'nonexistent_module'",
        );
        points_at("pytest", case, f, "from nonexistent_module import helper");
    }
    let r = run(Framework::Pytest, "pytest", "syntax-error");
    counts(&r, 0, 1, 0);
    let f = failure(
        &r,
        "test_beta.py",
        Some("test_beta.py"),
        Some(2),
        "SyntaxError: '[' was never closed",
    );
    points_at("pytest", "syntax-error", f, "value = [1, 2, 3");
}

#[test]
fn pytest_killed_run() {
    let r = run(Framework::Pytest, "pytest", "hang-killed");
    // collected 2 items, progress shows one pass; the other never finished.
    counts(&r, 1, 1, 0);
    failure(&r, "test run", None, None, "before it reported a summary");
}

// ---------------------------------------------------------------- vitest

fn check_vitest_basic(r: &TestResult, case: &str) {
    counts(r, 2, 2, 0);
    let f = failure(
        r,
        "basic/math.test.ts > math > fails an assertion",
        Some("basic/math.test.ts"),
        Some(13),
        "expected 4 to be 5",
    );
    points_at("vitest", case, f, "expect(add(2, 2)).toBe(5)");
    let f = failure(
        r,
        "basic/parse.test.ts > throws an exception",
        Some("basic/parse.test.ts"),
        Some(4),
        "Expected property name",
    );
    points_at("vitest", case, f, "JSON.parse(text)");
}

#[test]
fn vitest_default_json_and_junit() {
    let r = run(Framework::Vitest, "vitest", "basic-default");
    check_vitest_basic(&r, "basic-default");
    assert!(
        !r.log.contains('\x1b'),
        "ANSI codes are stripped from the log"
    );
    check_vitest_basic(
        &run(Framework::Vitest, "vitest", "basic-json"),
        "basic-json",
    );
    check_vitest_basic(
        &run(Framework::Vitest, "vitest", "basic-junit"),
        "basic-junit",
    );
    // The same JSON report collected from a file instead of stdout.
    let out = output("vitest", "basic-json");
    let from_file = RunnerOutput::new("", out.stderr.clone(), out.exit_code)
        .with_json_report(out.stdout.clone());
    check_vitest_basic(
        &parse::parse_output(
            Framework::Vitest,
            &from_file,
            Some(&cwd("vitest", "basic-json")),
        ),
        "basic-json",
    );
}

#[test]
fn vitest_failed_suites_are_failures() {
    // Runner: Tests 1 failed | 1 passed (2), plus one file that failed to run.
    for case in ["syntax-error", "syntax-error-json"] {
        let r = run(Framework::Vitest, "vitest", case);
        counts(&r, 1, 2, 0);
        let f = failure(
            &r,
            "syntax-error/broken.test.ts",
            Some("syntax-error/broken.test.ts"),
            Some(4),
            "Expected \"]\" but found \";\"",
        );
        points_at("vitest", case, f, "const value = [1, 2, 3;");
        failure(
            &r,
            "syntax-error/math.test.ts > math > fails an assertion",
            Some("syntax-error/math.test.ts"),
            Some(13),
            "expected 4 to be 5",
        );
    }
    let r = run(Framework::Vitest, "vitest", "import-error");
    counts(&r, 1, 2, 0);
    let f = failure(
        &r,
        "import-error/missing.test.ts",
        Some("import-error/missing.test.ts"),
        Some(2),
        "Cannot find module './does-not-exist'",
    );
    points_at("vitest", "import-error", f, "./does-not-exist");
    let r = run(Framework::Vitest, "vitest", "import-error-json");
    counts(&r, 1, 2, 0);
    // The JSON report gives no line for a suite that failed to import.
    failure(
        &r,
        "import-error/missing.test.ts",
        Some("import-error/missing.test.ts"),
        None,
        "Cannot find module './does-not-exist'",
    );
}

#[test]
fn vitest_own_timeout() {
    for (case, message) in [
        ("runner-timeout", "Test timed out in 5000ms"),
        ("runner-timeout-json", "Error"),
    ] {
        let r = run(Framework::Vitest, "vitest", case);
        counts(&r, 1, 1, 0);
        let f = failure(
            &r,
            "runner-timeout/timeout.test.ts > never resolves",
            Some("runner-timeout/timeout.test.ts"),
            Some(7),
            message,
        );
        points_at("vitest", case, f, "test('never resolves'");
    }
}

#[test]
fn vitest_killed_runs() {
    let r = run(Framework::Vitest, "vitest", "hang-killed");
    counts(&r, 0, 1, 0);
    failure(&r, "test run", None, None, "killed (SIGTERM, exit 143)");
    let r = run(Framework::Vitest, "vitest", "hang-multi-file-killed");
    // parse.test.ts (2 tests | 1 failed) finished; the hanging file never did.
    counts(&r, 1, 2, 0);
    failure(
        &r,
        "hang-multi-file/parse.test.ts > throws an exception",
        Some("hang-multi-file/parse.test.ts"),
        None,
        "Expected property name",
    );
    failure(&r, "test run", None, None, "killed");
}

// ---------------------------------------------------------------- jest

fn check_jest_basic(r: &TestResult, case: &str, named: bool) {
    counts(r, 2, 2, 0);
    let (math, parse) = if named {
        (
            "basic/math.test.js > math > fails an assertion",
            "basic/parse.test.js > throws an exception",
        )
    } else {
        // jest-junit names carry no file.
        ("math fails an assertion", "throws an exception")
    };
    let f = failure(
        r,
        math,
        Some("basic/math.test.js"),
        Some(11),
        "expect(received).toBe(expected)",
    );
    points_at("jest", case, f, "expect(add(2, 2)).toBe(5)");
    let f = failure(
        r,
        parse,
        Some("basic/parse.test.js"),
        Some(2),
        "Expected property name",
    );
    points_at("jest", case, f, "JSON.parse(text)");
}

#[test]
fn jest_default_json_and_junit() {
    check_jest_basic(
        &run(Framework::Jest, "jest", "basic-default"),
        "basic-default",
        true,
    );
    check_jest_basic(
        &run(Framework::Jest, "jest", "basic-json"),
        "basic-json",
        true,
    );
    check_jest_basic(
        &run(Framework::Jest, "jest", "basic-junit"),
        "basic-junit",
        false,
    );
}

#[test]
fn jest_suites_that_failed_to_run_are_failures() {
    // Runner: Tests 1 failed, 1 passed, 2 total; the broken file is one more failure
    // (numRuntimeErrorTestSuites 1 in the JSON), counted in `failed` like a pytest error.
    for case in ["syntax-error", "syntax-error-json"] {
        let r = run(Framework::Jest, "jest", case);
        counts(&r, 1, 2, 0);
        let f = failure(
            &r,
            "syntax-error/broken.test.js",
            Some("syntax-error/broken.test.js"),
            Some(2),
            "Unexpected token",
        );
        points_at("jest", case, f, "const value = [1, 2, 3;");
    }
    for case in ["import-error", "import-error-json"] {
        let r = run(Framework::Jest, "jest", case);
        counts(&r, 1, 2, 0);
        let f = failure(
            &r,
            "import-error/missing.test.js",
            Some("import-error/missing.test.js"),
            Some(1),
            "Cannot find module './does-not-exist'",
        );
        points_at("jest", case, f, "require('./does-not-exist')");
    }
}

#[test]
fn jest_own_timeout() {
    for case in ["runner-timeout", "runner-timeout-json"] {
        let r = run(Framework::Jest, "jest", case);
        counts(&r, 1, 1, 0);
        let f = failure(
            &r,
            "runner-timeout/timeout.test.js > never resolves",
            Some("runner-timeout/timeout.test.js"),
            Some(5),
            "Exceeded timeout of 5000 ms",
        );
        points_at("jest", case, f, "test('never resolves'");
    }
}

#[test]
fn jest_killed_runs() {
    let r = run(Framework::Jest, "jest", "hang-killed");
    counts(&r, 0, 1, 0);
    failure(&r, "test run", None, None, "killed (SIGTERM, exit 143)");
    let r = run(Framework::Jest, "jest", "hang-multi-file-killed");
    // Only the FAIL block of parse.test.js was printed (passing tests are not listed).
    counts(&r, 0, 2, 0);
    failure(
        &r,
        "hang-multi-file/parse.test.js > throws an exception",
        Some("hang-multi-file/parse.test.js"),
        Some(2),
        "Expected property name",
    );
    failure(&r, "test run", None, None, "killed");
}

// ---------------------------------------------------------------- go

/// Go runs resolve package-relative file names through the module path in go.mod.
fn run_go(case: &str) -> TestResult {
    let go_mod = read(&fixtures().join("go").join(format!("{case}.src/go.mod"))).expect("go.mod");
    let module = nuvira_runner::detect::go_module_path(&go_mod);
    let out = output("go", case);
    let ctx = parse::Ctx::new(Some(&cwd("go", case)));
    parse::gotest::parse(&out, &ctx, module).finish(&out)
}

fn check_go_basic(r: &TestResult, case: &str) {
    let f = failure(
        r,
        "example.com/fixture/alpha.TestAddAssertionFails",
        Some("alpha/alpha_test.go"),
        Some(13),
        "Add(2, 2) = 4, want 5",
    );
    points_at("go", case, f, "t.Errorf(\"Add(2, 2) = %d, want 5\"");
    let f = failure(
        r,
        "example.com/fixture/beta.TestParseNumberPanics",
        Some("beta/beta_test.go"),
        Some(12),
        "panic: strconv.Atoi",
    );
    points_at("go", case, f, "ParseNumber(\"not a number\")");
}

#[test]
fn go_json_and_plain() {
    let r = run_go("basic-json");
    counts(&r, 2, 2, 0);
    check_go_basic(&r, "basic-json");
    // Plain output does not list passing tests without -v.
    let r = run_go("basic-default");
    counts(&r, 0, 2, 0);
    check_go_basic(&r, "basic-default");
}

#[test]
fn go_build_failures_are_failures() {
    for (case, passed) in [("compile-error", 0), ("compile-error-json", 1)] {
        let r = run_go(case);
        // alpha: 1 failing test; beta: 2 compiler errors.
        counts(&r, passed, 3, 0);
        let lines: Vec<_> = r
            .failures
            .iter()
            .filter(|f| f.name == "compile error")
            .map(|f| (f.file.as_deref(), f.line))
            .collect();
        assert_eq!(
            lines,
            vec![
                (Some("beta/beta_test.go"), Some(12)),
                (Some("beta/beta_test.go"), Some(14))
            ]
        );
        assert!(src_line("go", case, "beta/beta_test.go", 14).contains("undefinedVariable"));
        failure(
            &r,
            "alpha.TestAddAssertionFails",
            Some("alpha/alpha_test.go"),
            Some(13),
            "want 5",
        );
    }
}

#[test]
fn go_killed_and_timed_out_runs() {
    let r = run_go("hang-killed");
    counts(&r, 0, 1, 0);
    failure(&r, "test run", None, None, "killed (SIGTERM, exit 143)");
    let r = run_go("hang-json-killed");
    counts(&r, 1, 1, 0);
    failure(
        &r,
        "example.com/fixture_hang/slow.TestHangsForever",
        None,
        None,
        "did not finish",
    );
    for case in ["runner-timeout", "runner-timeout-json"] {
        let r = run_go(case);
        counts(&r, if case.ends_with("json") { 1 } else { 0 }, 1, 0);
        let f = failure(
            &r,
            "example.com/fixture_hang/slow.TestHangsForever",
            Some("slow/slow_test.go"),
            Some(16),
            "panic: test timed out after 2s",
        );
        points_at("go", case, f, "time.Sleep");
    }
}

// ---------------------------------------------------------------- tsc

#[test]
fn tsc_errors_plain_and_pretty() {
    let ctx = parse::Ctx::new(Some(Path::new("/home/dev/projects/tsc/type-error")));
    for case in ["type-error", "type-error-pretty"] {
        let diags = parse::diagnostics::parse_tsc(&output("tsc", case).stdout, &ctx);
        let found: Vec<_> = diags
            .iter()
            .map(|d| {
                (
                    d.file.as_deref().unwrap_or_default(),
                    d.line.unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![("src/math.ts", 5), ("src/user.ts", 7), ("src/user.ts", 10)],
            "{case}"
        );
        assert!(
            diags[1]
                .message
                .contains("TS2339: Property 'nmae' does not exist"),
            "{}",
            diags[1].message
        );
        assert!(src_line("tsc", case, "src/user.ts", 7).contains("user.nmae"));
    }
    assert!(parse::diagnostics::parse_tsc(&output("tsc", "ok").stdout, &ctx).is_empty());
    // As an explicit command of unknown framework: a failed run with the 3 errors.
    let r = parse::parse_any(
        &output("tsc", "type-error"),
        Some(Path::new("/home/dev/projects/tsc/type-error")),
    );
    counts(&r, 0, 3, 0);
    let ok = parse::parse_any(&output("tsc", "ok"), None);
    assert!(ok.success && ok.failures.is_empty(), "{ok:#?}");
}

// ---------------------------------------------------------------- generic guarantees

#[test]
fn guessing_the_framework_from_output() {
    let cases = [
        ("cargo", "basic-no-fail-fast", Framework::Cargo),
        ("nextest", "basic-no-fail-fast", Framework::Nextest),
        ("pytest", "basic-default", Framework::Pytest),
        ("vitest", "basic-default", Framework::Vitest),
        ("jest", "basic-default", Framework::Jest),
        ("go", "basic-json", Framework::Go),
        ("go", "basic-default", Framework::Go),
    ];
    for (runner, case, framework) in cases {
        assert_eq!(
            parse::guess_framework(&output(runner, case)),
            Some(framework),
            "{runner}/{case}"
        );
    }
}

#[test]
fn every_fixture_case_with_a_nonzero_exit_is_a_failed_run() {
    let tsv = read(&fixtures().join("captures.tsv")).expect("captures.tsv");
    for fields in tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect::<Vec<_>>())
    {
        let (runner, case) = (fields[0], fields[1]);
        let Ok(framework) = runner.parse::<Framework>() else {
            continue;
        };
        if fields[2] == "0" {
            continue;
        }
        let r = run(framework, runner, case);
        assert!(!r.success, "{runner}/{case}");
        assert!(
            r.failed > 0 && !r.failures.is_empty(),
            "{runner}/{case}: {r:#?}"
        );
        assert_eq!(r.total, r.passed + r.failed);
        assert!(
            r.failures.iter().all(|f| f
                .file
                .as_deref()
                .is_none_or(|p| !p.starts_with("/home/dev/projects/")
                    && !p.starts_with("/tmp/nuvira-capture/"))),
            "{runner}/{case}: paths are relative: {:#?}",
            r.failures
        );
    }
}

// ---------------------------------------------------------------- detection

mod detection {
    use super::fixtures;
    use nuvira_api::{SandboxInfo, SandboxOutcome};
    use nuvira_runner::detect::{self, DetectOptions, Detected, Framework, NextestPolicy};
    use nuvira_runner::parse;
    use std::fs;
    use std::path::{Path, PathBuf};

    fn copy_dir(from: &Path, to: &Path) {
        fs::create_dir_all(to).expect("mkdir");
        for entry in fs::read_dir(from).expect("read_dir") {
            let entry = entry.expect("entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("type").is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), &target).expect("copy");
            }
        }
    }

    /// A monorepo made of the fixture projects: Rust at the root, Go, jest, vitest and a
    /// pytest project in sub-folders, plus decoys that must be skipped.
    fn monorepo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        copy_dir(&fixtures().join("cargo/basic-default.src"), root);
        copy_dir(
            &fixtures().join("go/basic-default.src"),
            &root.join("services/api"),
        );
        copy_dir(
            &fixtures().join("jest/basic-default.src"),
            &root.join("web/legacy"),
        );
        copy_dir(
            &fixtures().join("vitest/basic-default.src"),
            &root.join("web/app"),
        );
        copy_dir(
            &fixtures().join("pytest/basic-default.src"),
            &root.join("py"),
        );
        fs::write(root.join("py/pytest.ini"), "[pytest]\n").expect("write");
        // Decoys: dependencies and build output are never projects of their own.
        copy_dir(
            &fixtures().join("jest/basic-default.src"),
            &root.join("web/app/node_modules/jest"),
        );
        copy_dir(
            &fixtures().join("go/basic-default.src"),
            &root.join("target/debug/go"),
        );
        dir
    }

    #[test]
    fn a_monorepo_yields_every_framework_with_its_reason_and_command() {
        let repo = monorepo();
        let found = detect::available_frameworks(repo.path()).expect("detect");
        let summary: Vec<(Option<Framework>, PathBuf)> =
            found.iter().map(|d| (d.framework, d.dir.clone())).collect();
        assert_eq!(
            summary,
            vec![
                (Some(Framework::Cargo), PathBuf::new()),
                (Some(Framework::Pytest), PathBuf::from("py")),
                (Some(Framework::Go), PathBuf::from("services/api")),
                (Some(Framework::Vitest), PathBuf::from("web/app")),
                (Some(Framework::Jest), PathBuf::from("web/legacy")),
            ]
        );
        let by = |f: Framework| {
            found
                .iter()
                .find(|d| d.framework == Some(f))
                .expect("detected")
        };
        let cargo = by(Framework::Cargo);
        assert_eq!(
            cargo.reason,
            "Cargo.toml: [package] name = \"fixture_basic\""
        );
        assert_eq!(cargo.command, ["cargo", "test", "--no-fail-fast"]);
        let go = by(Framework::Go);
        assert_eq!(go.reason, "services/api/go.mod: module example.com/fixture");
        assert_eq!(go.command, ["go", "test", "-json", "./..."]);
        let py = by(Framework::Pytest);
        assert_eq!(py.reason, "py/pytest.ini");
        assert_eq!(py.collect, ["py/.nuvira-pytest-junit.xml"]);
        assert!(
            py.command
                .iter()
                .any(|a| a == "--junitxml=.nuvira-pytest-junit.xml")
        );
        let vitest = by(Framework::Vitest);
        assert!(
            vitest.reason.starts_with("web/app/package.json: "),
            "{}",
            vitest.reason
        );
        // Exactly the command captured in tests/fixtures/live/js (vit.*).
        assert_eq!(
            vitest.command,
            [
                "npx",
                "--no",
                "--",
                "vitest",
                "run",
                "--reporter=default",
                "--reporter=json",
                "--outputFile.json=.nuvira-vitest-report.json"
            ]
        );
        assert_eq!(vitest.env.get("NO_COLOR").map(String::as_str), Some("1"));
        assert_eq!(vitest.collect, ["web/app/.nuvira-vitest-report.json"]);
        let jest = by(Framework::Jest);
        assert_eq!(jest.reason, "web/legacy/package.json: dependencies.jest");
        assert_eq!(
            jest.command,
            [
                "npx",
                "--no",
                "--",
                "jest",
                "--ci",
                "--json",
                "--outputFile=.nuvira-jest-report.json"
            ]
        );
    }

    #[test]
    fn depth_limit_and_nextest_policy() {
        let repo = monorepo();
        let shallow =
            detect::available_frameworks_with(repo.path(), &DetectOptions::default().max_depth(1))
                .expect("detect");
        let dirs: Vec<_> = shallow
            .iter()
            .map(|d| d.dir.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            dirs,
            ["", "py"],
            "services/api and web/* are two levels down"
        );
        let nextest = detect::available_frameworks_with(
            repo.path(),
            &DetectOptions::default()
                .max_depth(0)
                .nextest(NextestPolicy::Always),
        )
        .expect("detect");
        assert_eq!(nextest.len(), 1);
        assert_eq!(nextest[0].framework, Some(Framework::Nextest));
        assert_eq!(
            nextest[0].command[..4],
            ["cargo", "nextest", "run", "--no-fail-fast"]
        );
        assert_eq!(
            nextest[0]
                .env
                .get("NEXTEST_EXPERIMENTAL_LIBTEST_JSON")
                .map(String::as_str),
            Some("1")
        );
    }

    #[test]
    fn pyproject_and_scripts_reasons() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(
            dir.path().join("pyproject.toml"),
            "[project]\nname = \"x\"\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
        )
        .expect("write");
        fs::create_dir_all(dir.path().join("ui")).expect("mkdir");
        fs::write(
            dir.path().join("ui/package.json"),
            r#"{"scripts":{"test":"vitest run"},"devDependencies":{"jest":"29"}}"#,
        )
        .expect("write");
        let found = detect::available_frameworks(dir.path()).expect("detect");
        let reasons: Vec<_> = found.iter().map(|d| d.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "pyproject.toml: [tool.pytest.ini_options]",
                "ui/package.json: scripts.test runs vitest"
            ]
        );
    }

    #[test]
    fn an_unreadable_root_is_a_clear_error() {
        let err = detect::available_frameworks(Path::new("/nonexistent/nuvira-repo")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/nuvira-repo")
                && text.contains("pass an existing project folder"),
            "{text}"
        );
    }

    /// An out-of-memory kill while a named test ran (pytest -v printed it with no result):
    /// that test's failure says which limit and how to raise it, and no whole-run failure is
    /// added beside it (as many failures as failed tests).
    #[test]
    fn an_oom_kill_mid_test_is_that_tests_failure() {
        let d = Detected::explicit(
            ["python3", "-m", "pytest", "-v"].map(String::from).to_vec(),
            None,
            "",
        );
        let out = super::output("pytest", "hang-verbose-killed");
        let mut outcome = SandboxOutcome::default();
        outcome.stdout = out.stdout;
        outcome.stderr = out.stderr;
        outcome.exit_code = Some(137);
        outcome.oom_killed = true;
        let r = parse::parse_outcome(&d, &outcome, None);
        assert_eq!((r.passed, r.failed), (1, 1), "{r:#?}");
        assert_eq!(r.failures.len(), 1, "{:#?}", r.failures);
        let f = &r.failures[0];
        assert!(f.name.ends_with("test_hangs_forever"), "{f:?}");
        assert!(
            f.message.contains("memory limit") && f.message.contains("--memory"),
            "{f:?}"
        );
    }

    #[test]
    fn explicit_commands_win_and_parse_through_parse_outcome() {
        let d = Detected::explicit(vec!["npx".into(), "jest".into(), "basic/".into()], None, "");
        assert_eq!(d.framework, Some(Framework::Jest));
        assert_eq!(d.reason, "explicit command");
        let out = super::output("jest", "basic-default");
        let mut outcome = SandboxOutcome::default();
        outcome.stdout = out.stdout;
        outcome.stderr = out.stderr;
        outcome.exit_code = out.exit_code;
        outcome.duration_ms = 1234;
        outcome.workdir = Some(PathBuf::from("/home/dev/projects/jest"));
        outcome.info = SandboxInfo::default();
        let r = parse::parse_outcome(&d, &outcome, None);
        assert_eq!((r.passed, r.failed), (2, 2));
        assert_eq!(r.command.as_deref(), Some("npx jest basic/"));
        assert_eq!(r.duration_ms, 1234, "the sandbox's wall-clock time wins");
        assert!(r.sandbox.is_some());
        // A collected JSON report is used in place of the terminal output.
        let json = super::output("jest", "basic-json");
        outcome.collected.insert(
            "web/.nuvira-jest-report.json".into(),
            json.stdout.into_bytes(),
        );
        outcome.stderr.clear();
        let r = parse::parse_outcome(&d, &outcome, None);
        assert_eq!((r.passed, r.failed), (2, 2));
        assert!(
            r.failures[0].message.starts_with("SyntaxError"),
            "from the JSON report: {:?}",
            r.failures[0]
        );

        // Go in a sub-folder: package-relative names resolve through the host's go.mod, and
        // every path becomes workspace-relative.
        let repo = monorepo();
        let go = detect::available_frameworks(repo.path())
            .expect("detect")
            .into_iter()
            .find(|d| d.framework == Some(Framework::Go))
            .expect("go detected");
        let json = super::output("go", "basic-json");
        let mut outcome = SandboxOutcome::default();
        outcome.stdout = json.stdout;
        outcome.exit_code = json.exit_code;
        outcome.workdir = Some(PathBuf::from("/home/dev/projects/go/basic"));
        outcome.oom_killed = true;
        let r = parse::parse_outcome(&go, &outcome, Some(repo.path()));
        let files: Vec<_> = r
            .failures
            .iter()
            .filter_map(|f| f.file.as_deref())
            .collect();
        assert_eq!(
            files,
            [
                "services/api/alpha/alpha_test.go",
                "services/api/beta/beta_test.go"
            ]
        );
        assert!(
            r.failures
                .iter()
                .any(|f| f.message.contains("memory limit")),
            "OOM is reported"
        );
    }
}

// ---------------------------------------------------------------- real runners, end to end

/// Runs the detected command for real (in its folder, with its env) and parses what it left.
mod live {
    use super::fixtures;
    use nuvira_api::TestResult;
    use nuvira_runner::detect::{self, DetectOptions, Detected, Framework, NextestPolicy};
    use nuvira_runner::parse::{self, RunnerOutput};
    use std::collections::BTreeMap;
    use std::fs;
    use std::path::Path;
    use std::process::Command;

    fn on_path(program: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
    }

    /// Runs `d` under `root` and returns what the sandbox would have handed back.
    fn execute(root: &Path, d: &Detected) -> (RunnerOutput, BTreeMap<String, Vec<u8>>) {
        let out = Command::new(&d.command[0])
            .args(&d.command[1..])
            .current_dir(root.join(&d.dir))
            .envs(&d.env)
            .env("CARGO_TARGET_DIR", root.join("target"))
            .output()
            .expect("runner starts");
        let mut collected = BTreeMap::new();
        for path in &d.collect {
            if let Ok(bytes) = fs::read(root.join(path)) {
                collected.insert(path.clone(), bytes);
            }
        }
        let output = RunnerOutput::from_parts(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
            out.status.code().map(i64::from),
            false,
            &collected,
        );
        (output, collected)
    }

    fn parse_in(root: &Path, d: &Detected, output: &RunnerOutput) -> TestResult {
        parse::parse_output(
            d.framework.expect("framework"),
            output,
            Some(&root.join(&d.dir)),
        )
    }

    #[test]
    fn pytest_skips_xfails_xpasses_and_fixture_errors_are_counted_per_design() {
        if !on_path("pytest") {
            eprintln!("pytest is not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::create_dir_all(root.join("py")).expect("mkdir");
        fs::write(root.join("py/pytest.ini"), "[pytest]\n").expect("write");
        fs::write(
            root.join("py/test_mix.py"),
            include_str!("fixtures/live/test_mix.py"),
        )
        .expect("write");
        let found = detect::available_frameworks(root).expect("detect");
        assert_eq!(found.len(), 1);
        let d = &found[0];
        let (output, collected) = execute(root, d);
        assert!(
            collected.contains_key("py/.nuvira-pytest-junit.xml"),
            "the JUnit report was written where collect says"
        );
        // passed: test_ok + xpassed; failed: test_fails + the fixture error;
        // skipped: skip + xfail.
        let with_junit = parse_in(root, d, &output);
        // Every case by its node id, whatever its outcome (as its failure is named).
        assert_eq!(with_junit.cases.len(), 6, "{:#?}", with_junit.cases);
        for case in &with_junit.cases {
            assert!(case.name.starts_with("test_mix.py::test_"), "{case:?}");
        }
        let mut terminal_only = output.clone();
        terminal_only.junit_xml = None;
        let terminal = parse_in(root, d, &terminal_only);
        for r in [&with_junit, &terminal] {
            assert_eq!(
                (r.passed, r.failed, r.skipped, r.total),
                (2, 2, 2, 4),
                "{r:#?}"
            );
            assert!(!r.success);
            let fails = r
                .failures
                .iter()
                .find(|f| f.name.ends_with("test_fails"))
                .expect("test_fails");
            assert_eq!(
                (fails.file.as_deref(), fails.line),
                (Some("test_mix.py"), Some(24))
            );
            assert!(
                r.failures
                    .iter()
                    .any(|f| f.name.contains("test_fixture_error")
                        && f.message.contains("fixture broke")),
                "{:#?}",
                r.failures
            );
        }
    }

    /// A file pytest cannot collect: the detected command (with its JUnit report) says which
    /// error, as the terminal output does, not pytest's fixed "collection failure" alone.
    #[test]
    fn pytest_junit_collection_errors_name_the_error() {
        if !on_path("pytest") {
            eprintln!("pytest is not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let src = fixtures().join("pytest/import-error.src");
        for file in ["test_alpha.py", "test_beta.py"] {
            fs::copy(src.join(file), root.join(file)).expect("copy");
        }
        let found = detect::available_frameworks(root).expect("detect");
        let d = &found[0];
        assert_eq!(d.framework, Some(Framework::Pytest));
        let (output, collected) = execute(root, d);
        assert!(!collected.is_empty(), "the JUnit report was collected");
        let with_junit = parse_in(root, d, &output);
        assert!(output.junit_xml.is_some());
        let broken = with_junit
            .failures
            .iter()
            .find(|f| f.name.contains("test_beta"))
            .unwrap_or_else(|| panic!("{:#?}", with_junit.failures));
        assert_eq!(
            broken.message,
            "collection failure: ModuleNotFoundError: No module named 'nonexistent_module'"
        );
        assert_eq!(
            (broken.file.as_deref(), broken.line),
            (Some("test_beta.py"), Some(2))
        );
    }

    /// A `t.Errorf` message of several lines (a diff) is the failure's message whole, in the
    /// detected `go test -json` and in `go test -v`'s plain output; the next `t.Errorf` is not
    /// part of it.
    #[test]
    fn go_multi_line_errorf_messages_are_kept_whole() {
        let found = Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if nuvira_test_support::env::require(
            nuvira_test_support::env::Requirement::Go,
            if found {
                Ok(())
            } else {
                Err("go is not installed")
            },
        )
        .is_none()
        {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        fs::write(root.join("go.mod"), "module example.com/diff\n\ngo 1.19\n").expect("write");
        fs::write(
            root.join("diff_test.go"),
            "package diff\n\nimport \"testing\"\n\nfunc TestDiff(t *testing.T) {\n\tt.Errorf(\"mismatch (-want +got):\\n  -apple\\n  +banana\")\n\tt.Errorf(\"second\")\n}\n\nfunc TestOK(t *testing.T) {}\n",
        )
        .expect("write");
        let found = detect::available_frameworks(root).expect("detect");
        let d = &found[0];
        assert_eq!(d.framework, Some(Framework::Go));
        let mut plain = d.clone();
        plain.command = ["go", "test", "-v", "./..."].map(String::from).to_vec();
        for d in [d, &plain] {
            let (output, _) = execute(root, d);
            let r = parse_in(root, d, &output);
            assert_eq!((r.passed, r.failed), (1, 1), "{:?}: {r:#?}", d.command);
            let f = &r.failures[0];
            assert_eq!(
                f.message, "mismatch (-want +got):\n  -apple\n  +banana",
                "{:?}",
                d.command
            );
            assert_eq!((f.file.as_deref(), f.line), (Some("diff_test.go"), Some(6)));
        }
    }

    /// cargo test and nextest on a tiny crate with an ignored test and doctests (a few
    /// seconds: it compiles; `NUVIRA_SKIP_CARGO_LIVE=1` skips it).
    #[test]
    fn cargo_and_nextest_count_ignored_tests_and_doctests() {
        if std::env::var_os("NUVIRA_SKIP_CARGO_LIVE").is_some() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let src = fixtures().join("live/crate");
        for file in ["Cargo.toml", "src/lib.rs", "tests/it.rs"] {
            fs::create_dir_all(root.join(file).parent().expect("parent")).expect("mkdir");
            fs::copy(
                src.join(file.replace("Cargo.toml", "Cargo.toml.txt")),
                root.join(file),
            )
            .expect("copy");
        }
        let found = detect::available_frameworks(root).expect("detect");
        let (output, _) = execute(root, &found[0]);
        let r = parse_in(root, &found[0], &output);
        // lib: 1 pass, 1 fail, 1 ignored; it.rs: 1 pass; doctests: 1 pass, 1 fail.
        assert_eq!(
            (r.passed, r.failed, r.skipped),
            (3, 2, 1),
            "{r:#?}\n{}",
            r.log
        );
        let f = r
            .failures
            .iter()
            .find(|f| f.name == "tests::fails")
            .expect("tests::fails");
        assert_eq!((f.file.as_deref(), f.line), (Some("src/lib.rs"), Some(18)));
        assert!(
            r.failures
                .iter()
                .any(|f| f.name.contains("src/lib.rs - double (line")),
            "{:#?}",
            r.failures
        );
        if on_path("cargo-nextest") {
            let opts = DetectOptions::default().nextest(NextestPolicy::IfInstalled);
            let found = detect::available_frameworks_with(root, &opts).expect("detect");
            assert_eq!(found[0].framework, Some(Framework::Nextest));
            let (output, _) = execute(root, &found[0]);
            let r = parse_in(root, &found[0], &output);
            // nextest does not run doctests.
            assert_eq!(
                (r.passed, r.failed, r.skipped),
                (2, 1, 1),
                "{r:#?}\n{}",
                r.log
            );
        }
    }
}

/// The detected vitest/jest commands, run for real (see tests/fixtures/live/README.md): their
/// report files and their terminal output agree.
#[test]
fn detected_js_commands_output_parses_from_report_and_terminal() {
    for (name, framework, root) in [
        ("vit", Framework::Vitest, "/tmp/jsverify/vit"),
        ("jst", Framework::Jest, "/tmp/jsverify/jst"),
    ] {
        let dir = fixtures().join("live/js");
        let stdout = read(&dir.join(format!("{name}.stdout"))).expect("stdout");
        let stderr = read(&dir.join(format!("{name}.stderr"))).expect("stderr");
        let report = read(&dir.join(format!("{name}.report.json"))).expect("report");
        let terminal = RunnerOutput::new(stdout, stderr, Some(1));
        let with_report = terminal.clone().with_json_report(report);
        for out in [&terminal, &with_report] {
            let r = parse::parse_output(framework, out, Some(Path::new(root)));
            counts(&r, 2, 2, 0);
            let ext = if name == "vit" { "ts" } else { "js" };
            let line = if name == "vit" { 13 } else { 11 };
            let f = failure(
                &r,
                &format!("basic/math.test.{ext} > math > fails an assertion"),
                Some(&format!("basic/math.test.{ext}")),
                Some(line),
                "expect",
            );
            let case_runner = if name == "vit" { "vitest" } else { "jest" };
            points_at(case_runner, "basic-default", f, "expect(add(2, 2)).toBe(5)");
        }
    }
}

/// Every named test becomes a case, passing and skipped ones included, so that a JUnit report
/// can list one `testcase` per real test (issue 13).
#[test]
fn parsers_name_every_test_as_a_case_with_its_outcome() {
    use nuvira_api::TestOutcome;
    for (framework, runner, case) in [
        (Framework::Cargo, "cargo", "basic-no-fail-fast"),
        (Framework::Cargo, "cargo", "basic-json"),
        (Framework::Nextest, "nextest", "basic-junit"),
        (Framework::Nextest, "nextest", "basic-no-fail-fast"),
        (Framework::Pytest, "pytest", "basic-junitxml"),
        (Framework::Vitest, "vitest", "basic-json"),
        (Framework::Vitest, "vitest", "basic-junit"),
        (Framework::Jest, "jest", "basic-json"),
        (Framework::Jest, "jest", "basic-junit"),
    ] {
        let r = run(framework, runner, case);
        let count = |o: TestOutcome| r.cases.iter().filter(|c| c.outcome == o).count() as u32;
        assert_eq!(
            count(TestOutcome::Passed),
            r.passed,
            "{runner}/{case}: {:?}",
            r.cases
        );
        assert_eq!(count(TestOutcome::Skipped), r.skipped, "{runner}/{case}");
        assert_eq!(count(TestOutcome::Failed), r.failed, "{runner}/{case}");
        assert!(r.passed > 0, "{runner}/{case} has passing tests");
        // Each failure has a failed case of the same name.
        for f in &r.failures {
            assert!(
                r.cases
                    .iter()
                    .any(|c| c.name == f.name && c.outcome == TestOutcome::Failed),
                "{runner}/{case}: no case for {}",
                f.name
            );
        }
    }
}

#[test]
fn go_test_json_names_every_test_as_a_case_with_its_time() {
    use nuvira_api::TestOutcome;
    let r = run_go("basic-json");
    let count = |o: TestOutcome| r.cases.iter().filter(|c| c.outcome == o).count() as u32;
    assert_eq!(
        (
            count(TestOutcome::Passed),
            count(TestOutcome::Failed),
            count(TestOutcome::Skipped)
        ),
        (r.passed, r.failed, r.skipped),
        "{:?}",
        r.cases
    );
    assert!(r.passed > 0);
    assert!(
        r.cases
            .iter()
            .all(|c| c.duration_ms.is_some() && c.classname.is_some())
    );
}
