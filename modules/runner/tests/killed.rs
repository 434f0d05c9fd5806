//! Live runs of the real runners, killed at the sandbox's timeout and with `go test -v`
//! (issue 12): the result names the test that was running, counts the ones that passed before
//! it, and locates Go failures relative to the repository although the run happened in a
//! sandbox copy elsewhere. The projects are the `.src/` copies of the fixture cases.

use super::common::docker;
use nuvira_api::{
    ErrorCategory, Module, ModuleError, PlanStep, StepContext, StepOutput, TestResult,
};
use nuvira_runner::TestModule;
use nuvira_test_support::env::{Requirement, pytest_ready, require};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn fixture_src(runner: &str, case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(runner)
        .join(format!("{case}.src"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

fn copy_of(runner: &str, case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture_src(runner, case), dir.path());
    dir
}

async fn run(root: &Path, config: Value) -> Result<StepOutput, ModuleError> {
    let ctx = StepContext::standalone(root);
    let mut step = PlanStep::new("test", "test");
    step.config = config;
    TestModule::new().validate(&step).unwrap();
    TestModule::new().run(&step, &ctx).await
}

fn result_of(r: Result<StepOutput, ModuleError>, category: ErrorCategory) -> TestResult {
    match r {
        Err(ModuleError::Recoverable(f)) => {
            assert_eq!(f.category, category, "{}: {:?}", f.message, f.evidence);
            match f.output.as_deref() {
                Some(StepOutput::Test(t)) => t.clone(),
                other => panic!("no test result attached: {other:?}"),
            }
        }
        other => panic!("expected a recoverable failure, got {other:?}"),
    }
}

#[track_caller]
fn check_killed(t: &TestResult, running: &str) {
    assert_eq!((t.passed, t.failed, t.total), (1, 1, 2), "{t:#?}");
    assert!(!t.success);
    assert!(t.sandbox.as_ref().is_some_and(|s| s.timed_out), "{t:#?}");
    assert_eq!(t.failures.len(), 1, "{:#?}", t.failures);
    let f = &t.failures[0];
    assert_eq!(f.name, running, "{f:?}");
    assert!(
        f.message
            .contains("did not finish: the run was killed at its timeout"),
        "{f:?}"
    );
}

fn go_ready() -> bool {
    let found = std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Go,
        if found {
            Ok(())
        } else {
            Err("go is not installed")
        },
    )
    .is_some()
}

#[tokio::test]
async fn a_pytest_run_killed_at_its_timeout_names_the_running_test() {
    if !pytest_ready() {
        return;
    }
    let ws = copy_of("pytest", "hang-verbose-killed");
    let r = run(ws.path(), json!({"sandbox": "local", "timeout": "4s"})).await;
    check_killed(
        &result_of(r, ErrorCategory::Timeout),
        "test_hang.py::test_hangs_forever",
    );
}

#[tokio::test]
async fn a_pytest_run_killed_in_docker_names_the_running_test() {
    if !pytest_ready() || docker("nuvira-host:latest").await.is_none() {
        return;
    }
    let ws = copy_of("pytest", "hang-verbose-killed");
    let r = run(ws.path(), json!({"sandbox": "docker", "timeout": "6s"})).await;
    check_killed(
        &result_of(r, ErrorCategory::Timeout),
        "test_hang.py::test_hangs_forever",
    );
}

#[tokio::test]
async fn a_unittest_run_killed_at_its_timeout_names_the_running_test() {
    let ws = copy_of("unittest", "hang-verbose-killed");
    let r = run(ws.path(), json!({"sandbox": "local", "timeout": "3s"})).await;
    let t = result_of(r, ErrorCategory::Timeout);
    assert_eq!(t.framework.as_deref(), Some("unittest"));
    check_killed(&t, "tests.test_hang.HangTest.test_b_hangs_forever");
}

#[tokio::test]
async fn go_runs_killed_at_their_timeout_name_the_running_test() {
    if !go_ready() {
        return;
    }
    let ws = copy_of("go", "hang-verbose-killed");
    // The detected `go test -json ./...`, and `go test -v` (whose plain output names the
    // package only at its end), side by side: each waits for its timeout.
    let (json, verbose) = tokio::join!(
        run(ws.path(), json!({"sandbox": "local", "timeout": "12s"})),
        run(
            ws.path(),
            json!({"sandbox": "local", "timeout": "12s", "command": "go test -v ./..."}),
        )
    );
    check_killed(
        &result_of(json, ErrorCategory::Timeout),
        "example.com/fixture_hang/slow.TestHangsForever",
    );
    check_killed(
        &result_of(verbose, ErrorCategory::Timeout),
        "TestHangsForever",
    );
}

#[tokio::test]
async fn go_failures_are_located_in_the_repository_json_and_verbose() {
    if !go_ready() {
        return;
    }
    let ws = copy_of("go", "basic-verbose");
    for config in [
        json!({"sandbox": "local"}),
        json!({"sandbox": "local", "command": "go test -v ./..."}),
        json!({"sandbox": "local", "command": "go test ./..."}),
    ] {
        let t = result_of(
            run(ws.path(), config.clone()).await,
            ErrorCategory::TestFailure,
        );
        let at: Vec<(&str, Option<&str>, Option<u32>)> = t
            .failures
            .iter()
            .map(|f| (f.name.as_str(), f.file.as_deref(), f.line))
            .collect();
        assert_eq!(
            at,
            [
                (
                    "example.com/fixture/alpha.TestAddAssertionFails",
                    Some("alpha/alpha_test.go"),
                    Some(13)
                ),
                (
                    "example.com/fixture/beta.TestParseNumberPanics",
                    Some("beta/beta_test.go"),
                    Some(12)
                ),
            ],
            "{config}: {t:#?}"
        );
        let passed = if config.get("command").is_some_and(|c| c == "go test ./...") {
            0 // without -v nor -json, go does not list passing tests
        } else {
            2
        };
        assert_eq!((t.passed, t.failed), (passed, 2), "{config}");
    }
}

#[tokio::test]
async fn go_failures_are_located_in_the_repository_in_docker() {
    if !go_ready() || docker("nuvira-host:latest").await.is_none() {
        return;
    }
    let ws = copy_of("go", "basic-verbose");
    let t = result_of(
        run(
            ws.path(),
            json!({"sandbox": "docker", "command": "go test -v ./..."}),
        )
        .await,
        ErrorCategory::TestFailure,
    );
    assert_eq!((t.passed, t.failed), (2, 2), "{t:#?}");
    let at: Vec<(Option<&str>, Option<u32>)> = t
        .failures
        .iter()
        .map(|f| (f.file.as_deref(), f.line))
        .collect();
    assert_eq!(
        at,
        [
            (Some("alpha/alpha_test.go"), Some(13)),
            (Some("beta/beta_test.go"), Some(12))
        ],
        "{t:#?}"
    );
}

fn rustup_has(toolchain: &str) -> bool {
    std::process::Command::new("rustup")
        .args(["run", toolchain, "rustc", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A crate that compiles on nightly only, pinned to nightly by its `rust-toolchain.toml`.
fn nightly_crate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"pinned\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rust-toolchain.toml"),
        "[toolchain]\nchannel = \"nightly\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "#![feature(never_type)]\n\npub fn never() -> Option<!> {\n    None\n}\n\n#[test]\nfn runs_on_nightly() {\n    assert!(never().is_none());\n}\n",
    )
    .unwrap();
    dir
}

#[tokio::test]
async fn a_rust_toolchain_file_runs_its_channel_local_and_docker() {
    // Needs rustup with a nightly toolchain (this machine's; not something CI installs).
    if !rustup_has("nightly") {
        eprintln!("SKIPPED: no rustup nightly toolchain");
        return;
    }
    let ws = nightly_crate();
    let mut sandboxes = vec!["local"];
    if docker("nuvira-host:latest").await.is_some() {
        sandboxes.push("docker");
    }
    for sandbox in sandboxes {
        let r = run(
            ws.path(),
            json!({"sandbox": sandbox, "env": {"CARGO_TARGET_DIR": "target"}, "memory": "2g"}),
        )
        .await;
        let t = match r {
            Ok(StepOutput::Test(t)) => t,
            other => panic!("{sandbox}: {other:?}"),
        };
        assert_eq!((t.passed, t.failed), (1, 0), "{sandbox}: {}", t.log);
        assert!(
            t.command
                .as_deref()
                .is_some_and(|c| c.starts_with("cargo +nightly test")),
            "{:?}",
            t.command
        );
    }
}
