//! The `test` and `execute` modules on the small real projects, in both sandboxes.

use super::common::{docker, project};
use nuvira_api::{
    ErrorCategory, EventKind, Module, ModuleError, PlanStep, StepContext, StepOutput, TestResult,
};
use nuvira_runner::{ExecuteModule, TestModule};
use nuvira_test_support::Recorder;
use nuvira_test_support::env::{Requirement, pytest_ready, require};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

async fn run_test_step(
    root: &std::path::Path,
    config: Value,
) -> (Result<StepOutput, ModuleError>, Arc<Recorder>) {
    let events = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(root).with_events(events.clone());
    let mut step = PlanStep::new("test", "test");
    step.config = config;
    TestModule::new().validate(&step).unwrap();
    (TestModule::new().run(&step, &ctx).await, events)
}

fn failed_result(r: Result<StepOutput, ModuleError>, category: ErrorCategory) -> TestResult {
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

fn check_cargo_result(t: &TestResult) {
    assert_eq!((t.passed, t.failed, t.total), (1, 1, 2), "{}", t.log);
    assert!(!t.success);
    assert_eq!(t.framework.as_deref(), Some("cargo"));
    let f = &t.failures[0];
    assert!(f.name.ends_with("fails_on_purpose"), "{f:?}");
    assert_eq!(f.file.as_deref(), Some("src/lib.rs"), "{f:?}");
    assert_eq!(f.line, Some(18), "{f:?}");
}

fn check_pytest_result(t: &TestResult) {
    assert_eq!((t.passed, t.failed, t.total), (1, 1, 2), "{}", t.log);
    assert_eq!(t.framework.as_deref(), Some("pytest"));
    let f = &t.failures[0];
    assert!(f.name.contains("test_fails_on_purpose"), "{f:?}");
    assert_eq!(f.file.as_deref(), Some("test_math.py"), "{f:?}");
    assert_eq!(f.line, Some(13), "{f:?}");
}

/// Every test event of a run, in order, and the container id of `test:sandbox-created`.
fn check_events(events: &Recorder, failures: usize) -> Option<String> {
    let names = events.names();
    assert_eq!(names.first(), Some(&"custom"), "{names:?}");
    assert_eq!(names.get(1), Some(&"test:started"), "{names:?}");
    assert_eq!(names.get(2), Some(&"test:sandbox-created"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "test:failure").count(),
        failures,
        "{names:?}"
    );
    assert_eq!(names.last(), Some(&"test:completed"), "{names:?}");
    events.kinds().into_iter().find_map(|e| match e {
        EventKind::TestSandboxCreated { container_id, .. } => container_id,
        _ => None,
    })
}

const LOCAL_CARGO_ENV: &str = "target";

#[tokio::test]
async fn cargo_project_in_the_local_sandbox() {
    let (r, events) = run_test_step(
        &project("cargo-basic"),
        json!({"sandbox": "local", "env": {"CARGO_TARGET_DIR": LOCAL_CARGO_ENV}}),
    )
    .await;
    let t = failed_result(r, ErrorCategory::TestFailure);
    check_cargo_result(&t);
    assert_eq!(t.sandbox.as_ref().unwrap().kind, "local");
    assert_eq!(check_events(&events, 1), None);
    // The project folder got no build output.
    assert!(!project("cargo-basic").join("target").exists());
}

#[tokio::test]
async fn pytest_project_in_the_local_sandbox() {
    if !pytest_ready() {
        return;
    }
    let (r, events) = run_test_step(&project("pytest-basic"), json!({"sandbox": "local"})).await;
    let t = failed_result(r, ErrorCategory::TestFailure);
    check_pytest_result(&t);
    check_events(&events, 1);
    assert!(
        !project("pytest-basic")
            .join(".nuvira-pytest-junit.xml")
            .exists()
    );
}

/// Test files whose names hold a newline or an escape character: no failure is located at a
/// file the workspace does not have (`forged.py`, the part after the newline; pytest's JUnit
/// spelling of the escape, `#x1B`) but at the file its node id names, and the counts are
/// pytest's.
#[tokio::test]
async fn a_test_files_odd_name_never_locates_a_failure_in_a_file_that_is_not_there() {
    if !pytest_ready() {
        return;
    }
    // At the root, and in a project folder of its own (its node ids are relative to it).
    for dir in ["", "py"] {
        let ws = tempfile::tempdir().unwrap();
        let project = ws.path().join(dir);
        let tests = project.join("tests");
        std::fs::create_dir_all(&tests).unwrap();
        std::fs::write(project.join("pytest.ini"), "[pytest]\n").unwrap();
        let body = "def test_fails():\n    assert 1 == 2\n\n\ndef test_passes():\n    pass\n";
        for name in ["test_nl\nforged.py", "test_e\x1b[31mvil.py"] {
            std::fs::write(tests.join(name), body).unwrap();
        }
        let (r, _) = run_test_step(ws.path(), json!({"sandbox": "local"})).await;
        let t = failed_result(r, ErrorCategory::TestFailure);
        assert_eq!((t.passed, t.failed), (2, 2), "{dir}: {}", t.log);
        for f in &t.failures {
            // Located at the file the test's node id names, on the assertion's line.
            let named = Path::new(dir).join(f.name.split_once("::").unwrap().0);
            assert_eq!(
                f.file.as_deref().map(Path::new),
                Some(named.as_path()),
                "{f:?}"
            );
            assert!(ws.path().join(&named).is_file(), "{f:?}");
            assert_eq!(f.line, Some(2), "{f:?}");
        }
    }
}

#[tokio::test]
async fn cargo_project_in_docker() {
    if docker("nuvira-host:latest").await.is_none() {
        return;
    }
    let (r, events) = run_test_step(
        &project("cargo-basic"),
        json!({"sandbox": "docker", "image": "nuvira-host:latest", "memory": "1g", "cpus": 2}),
    )
    .await;
    let t = failed_result(r, ErrorCategory::TestFailure);
    check_cargo_result(&t);
    let info = t.sandbox.clone().unwrap();
    assert_eq!(info.kind, "docker");
    assert_eq!(info.exit_code, Some(101));
    let id = check_events(&events, 1).expect("sandbox-created carries the container id");
    assert_eq!(info.container_id.as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn pytest_project_in_docker_with_a_read_only_root() {
    if !pytest_ready() {
        return;
    }
    if docker("nuvira-host:latest").await.is_none() {
        return;
    }
    let (r, events) = run_test_step(
        &project("pytest-basic"),
        json!({"sandbox": "docker", "read_only_root": true}),
    )
    .await;
    let t = failed_result(r, ErrorCategory::TestFailure);
    check_pytest_result(&t);
    assert!(check_events(&events, 1).is_some());
}

#[tokio::test]
async fn an_explicit_passing_command_wins_and_succeeds() {
    if !pytest_ready() {
        return;
    }
    let (r, events) = run_test_step(
        &project("pytest-basic"),
        json!({"sandbox": "local", "command": "pytest -k adds --color=no"}),
    )
    .await;
    match r {
        Ok(StepOutput::Test(t)) => {
            assert!(t.success, "{}", t.log);
            assert_eq!((t.passed, t.failed), (1, 0));
            assert_eq!(
                t.command.as_deref(),
                Some("sh -c 'pytest -k adds --color=no'")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(events.names().contains(&"test:completed"));
}

#[tokio::test]
async fn a_hanging_command_is_a_timeout_failure() {
    let ws = tempfile::tempdir().unwrap();
    let (r, _) = run_test_step(
        ws.path(),
        json!({"sandbox": "local", "command": "sleep 100", "timeout": "1s"}),
    )
    .await;
    let t = failed_result(r, ErrorCategory::Timeout);
    assert!(t.sandbox.unwrap().timed_out);
}

#[tokio::test]
async fn an_unavailable_docker_sandbox_is_fatal() {
    let ws = tempfile::tempdir().unwrap();
    let (r, _) = run_test_step(
        ws.path(),
        json!({"sandbox": "docker", "image": "nuvira-no-such-image:0", "command": "true"}),
    )
    .await;
    match r {
        Err(ModuleError::Fatal(f)) => {
            assert_eq!(f.category, ErrorCategory::SandboxUnavailable);
            assert!(f.message.contains("docker-up.sh"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nothing_to_test_says_what_to_do() {
    let ws = tempfile::tempdir().unwrap();
    let (r, _) = run_test_step(ws.path(), json!({"sandbox": "local"})).await;
    match r {
        Err(ModuleError::Fatal(f)) => {
            assert_eq!(f.category, ErrorCategory::InvalidConfig);
            assert!(f.message.contains("--command"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
}

async fn execute(config: Value) -> Result<StepOutput, ModuleError> {
    let ws = tempfile::tempdir().unwrap();
    let mut step = PlanStep::new("run", "execute");
    step.config = config;
    ExecuteModule::new().validate(&step).unwrap();
    ExecuteModule::new()
        .run(&step, &StepContext::standalone(ws.path()))
        .await
}

#[tokio::test]
async fn execute_returns_the_command_output() {
    match execute(json!({"sandbox": "local", "command": "echo hi; echo err >&2"})).await {
        Ok(StepOutput::Command(c)) => {
            assert_eq!(c.exit_code, Some(0));
            assert_eq!(c.stdout, "hi\n");
            assert_eq!(c.stderr, "err\n");
            assert_eq!(c.command, "echo hi; echo err >&2");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn execute_failing_is_recoverable_with_the_output() {
    match execute(json!({"sandbox": "local", "command": ["sh", "-c", "echo partial; exit 2"]}))
        .await
    {
        Err(ModuleError::Recoverable(f)) => {
            assert!(f.message.contains("exit code 2"), "{}", f.message);
            match f.output.as_deref() {
                Some(StepOutput::Command(c)) => {
                    assert_eq!(c.exit_code, Some(2));
                    assert_eq!(c.stdout, "partial\n");
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn execute_in_docker_is_oom_aware() {
    if docker("nuvira-busybox:latest").await.is_none() {
        return;
    }
    let r = execute(json!({
        "sandbox": "docker", "image": "nuvira-busybox:latest", "memory": "32m",
        "command": "x=a; while true; do x=\"$x$x\"; done"
    }))
    .await;
    match r {
        Err(ModuleError::Recoverable(f)) => {
            assert_eq!(f.category, ErrorCategory::OutOfMemory, "{}", f.message);
            match f.output.as_deref() {
                Some(StepOutput::Command(c)) => {
                    let s = c.sandbox.as_ref().unwrap();
                    assert!(s.oom_killed);
                    assert_eq!(s.exit_code, Some(137));
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

/// Installs the vitest project's locked dependencies once (`npm ci`, from the npm registry) when
/// they are missing; `None` after printing why the vitest tests are skipped.
fn vitest_project() -> Option<std::path::PathBuf> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let dir = project("vitest-basic");
    let ready = READY.get_or_init(|| {
        if dir.join("node_modules/.bin/vitest").exists() {
            return Ok(());
        }
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("npm is not available: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`npm ci` failed in {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    require(
        Requirement::Node,
        ready
            .as_ref()
            .map(|_| dir)
            .map_err(|e| format!("the vitest project cannot be installed: {e}")),
    )
}

fn check_vitest_result(t: &TestResult) {
    assert_eq!((t.passed, t.failed, t.total), (1, 1, 2), "{}", t.log);
    assert_eq!(t.framework.as_deref(), Some("vitest"));
    let f = &t.failures[0];
    assert!(f.name.ends_with("fails on purpose"), "{f:?}");
    assert_eq!(f.file.as_deref(), Some("math.test.js"), "{f:?}");
    assert_eq!(f.line, Some(10), "{f:?}");
}

#[tokio::test]
async fn vitest_project_in_the_local_sandbox() {
    let Some(dir) = vitest_project() else { return };
    let (r, events) = run_test_step(&dir, json!({"sandbox": "local"})).await;
    check_vitest_result(&failed_result(r, ErrorCategory::TestFailure));
    check_events(&events, 1);
}

#[tokio::test]
async fn vitest_project_in_docker() {
    let Some(dir) = vitest_project() else { return };
    if docker("nuvira-host:latest").await.is_none() {
        return;
    }
    let (r, events) = run_test_step(&dir, json!({"sandbox": "docker", "memory": "1g"})).await;
    let t = failed_result(r, ErrorCategory::TestFailure);
    check_vitest_result(&t);
    assert_eq!(t.sandbox.unwrap().kind, "docker");
    assert!(check_events(&events, 1).is_some());
}

#[tokio::test]
async fn a_compile_error_is_classified_with_its_location() {
    let (r, _) = run_test_step(
        &project("cargo-compile-error"),
        json!({"sandbox": "local", "env": {"CARGO_TARGET_DIR": LOCAL_CARGO_ENV}}),
    )
    .await;
    let t = failed_result(r, ErrorCategory::CompileError);
    assert_eq!(t.passed, 0);
    let f = &t.failures[0];
    assert_eq!(f.file.as_deref(), Some("src/lib.rs"), "{f:?}");
    assert_eq!(f.line, Some(13), "{f:?}");
    assert!(f.message.contains("E0308"), "{f:?}");
}
