//! The recover stage with scripted models (offline) on real temporary workspaces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nuvira_api::{
    ErrorCategory, EventKind, Failure, InspectionResult, Module, ModuleError, PlanStep,
    RecoveryDecision, RecoveryPolicy, StepContext, StepInputs, StepOutput, TestFailure, TestResult,
};
use nuvira_edit::{EditModule, Editor};
use nuvira_llm::ScriptedLlm;
use nuvira_recover::*;
use nuvira_test_support::{Recorder, Upstream};
use serde_json::{Value, json};
use std::sync::Arc;

const LIB: &str =
    "pub fn average(xs: &[f64]) -> f64 {\n    xs.iter().sum::<f64>() / (xs.len() - 1) as f64\n}\n";

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), LIB).unwrap();
    dir
}

fn scripted(yaml: &str) -> Arc<ScriptedLlm> {
    Arc::new(ScriptedLlm::from_yaml("script", yaml).unwrap())
}

fn inspected(dir: &std::path::Path) -> Arc<dyn StepInputs> {
    let mut a = nuvira_api::Artifact::default();
    a.path = "src/lib.rs".into();
    a.score = 1.0;
    a.content = Some(std::fs::read_to_string(dir.join("src/lib.rs")).unwrap());
    let mut r = InspectionResult::default();
    r.artifacts.push(a);
    Arc::new(Upstream(vec![(
        "inspect".into(),
        Arc::new(StepOutput::Inspection(r)),
    )]))
}

const GOOD_FIX: &str = r#"{"edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "(xs.len() - 1)", "replace": "xs.len()"}], "explanation": "divide by the count"}"#;
const BAD_FIX: &str = r#"{"edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "xs.len() - 2", "replace": "xs.len()"}]}"#;

// ---- edit_batch ----

#[test]
fn the_edit_batch_schema_accepts_real_batches_and_matches_the_parser() {
    let schema = edit_batch_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let editor = Editor::standard();
    let good: Vec<Value> = vec![
        serde_json::from_str(GOOD_FIX).unwrap(),
        json!({"edits": [{"strategy": "whole-file", "path": "new.txt", "content": "x"},
                          {"strategy": "rename-file", "path": "a", "to": "b"},
                          {"strategy": "unified-diff", "patch": "--- a/x\n+++ b/x\n"}]}),
    ];
    for g in &good {
        assert!(validator.is_valid(g), "{g}");
        parse_edit_batch(Some(g), "", &editor).unwrap();
    }
    let bad = [
        json!({}),
        json!({"edits": []}),
        json!({"edits": [{"path": "x"}]}),
        json!({"edits": [{"strategy": "teleport", "path": "x"}]}),
        json!({"edits": [{"strategy": "search-replace", "path": "x", "serach": "y"}]}),
        json!({"edits": [], "extra": 1}),
    ];
    for b in &bad {
        assert!(!validator.is_valid(b), "schema accepted {b}");
        assert!(
            parse_edit_batch(Some(b), "", &editor).is_err(),
            "parser accepted {b}"
        );
    }
}

#[test]
fn batches_in_fenced_text_parse_and_problems_name_the_entry() {
    let editor = Editor::standard();
    let text = format!("```json\n{GOOD_FIX}\n```");
    let b = parse_edit_batch(None, &text, &editor).unwrap();
    assert_eq!(b.edits.len(), 1);
    assert_eq!(b.explanation.as_deref(), Some("divide by the count"));
    let err = parse_edit_batch(
        Some(&json!({"edits": [{"strategy": "search-replace", "path": "a", "search": "x"}]})),
        "",
        &editor,
    )
    .unwrap_err();
    assert!(
        err.problems[0].starts_with("edits[0].replace: missing"),
        "{err:?}"
    );
}

// ---- model-written edits ----

#[tokio::test]
async fn instructions_become_edits_and_a_rejected_batch_is_fed_back_once() {
    let dir = workspace();
    let llm = scripted(&format!(
        "- match: {{ schema: edit_batch, contains: 'Fix the divisor', last_user_contains: 'untrusted-data source=\"src/lib.rs\"' }}\n  response: {{ json: {BAD_FIX} }}\n\
         - match: {{ schema: edit_batch, last_user_contains: 'The editor rejected those edits' }}\n  response: {{ json: {GOOD_FIX} }}\n"
    ));
    let ctx = StepContext::standalone(dir.path())
        .with_inputs(inspected(dir.path()))
        .with_llm(Some(llm.clone()));
    let module = EditModule::new(Editor::standard())
        .with_instructions(Arc::new(ModelEditor::new(Editor::standard())));
    let step = PlanStep::new("fix", "edit")
        .with_config(json!({"instructions": "Fix the divisor of average"}));
    let out = module.run(&step, &ctx).await.unwrap();
    assert!(
        matches!(out, StepOutput::Edit(ref r) if r.applied_count == 1),
        "{out:?}"
    );
    let lib = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    assert!(lib.contains("/ xs.len() as f64"), "{lib}");
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn feedback_of_a_failed_attempt_is_in_the_prompt_as_untrusted_data() {
    let dir = workspace();
    let llm = scripted(&format!(
        "- match: {{ last_user_contains: 'untrusted-data source=\"previous-attempt\"', contains: 'left: 2' }}\n  response: {{ json: {GOOD_FIX} }}\n"
    ));
    let ctx = StepContext::standalone(dir.path())
        .with_inputs(inspected(dir.path()))
        .with_llm(Some(llm.clone()))
        .with_execution(
            false,
            2,
            Arc::new(nuvira_api::NeverCancelled),
            None,
            Some("assertion failed\nleft: 2".into()),
        );
    let edits = nuvira_edit::InstructionEditor::edits_for(
        &ModelEditor::new(Editor::standard()),
        "Fix average",
        &ctx,
    )
    .await
    .unwrap();
    assert_eq!(edits[0].search.as_deref(), Some("(xs.len() - 1)"));
}

#[tokio::test]
async fn model_failures_map_to_recoverable_categories() {
    let dir = workspace();
    let llm = scripted(
        "- error: { kind: rate_limited, retry_after: 2s }\n- response: { text: 'no json' }\n- response: { text: 'still none' }\n",
    );
    let ctx = StepContext::standalone(dir.path()).with_llm(Some(llm.clone()));
    let editor = ModelEditor::new(Editor::standard());
    let e = nuvira_edit::InstructionEditor::edits_for(&editor, "x", &ctx)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ModuleError::Recoverable(f) if f.category == ErrorCategory::LlmRateLimit),
        "{e:?}"
    );
    let e = nuvira_edit::InstructionEditor::edits_for(&editor, "x", &ctx)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ModuleError::Recoverable(f) if f.category == ErrorCategory::LlmInvalidOutput),
        "{e:?}"
    );
}

// ---- the debugger loop ----

fn test_failure() -> Failure {
    let mut t = TestResult::default();
    t.failed = 1;
    t.total = 1;
    t.failures.push(
        TestFailure::new(
            "tests::average_of_two",
            "assertion `left == right` failed\n  left: 3.0\n right: 1.5",
        )
        .at("src/lib.rs", Some(9)),
    );
    Failure::new(ErrorCategory::TestFailure, "pass the tests: 1 of 1 failed")
        .with_evidence(["tests::average_of_two (src/lib.rs:9): assertion `left == right` failed"])
        .with_output(StepOutput::Test(t))
}

#[tokio::test]
async fn debug_tests_applies_the_models_fix_through_the_editor_and_retries() {
    let dir = workspace();
    let llm = scripted(&format!(
        "- match: {{ schema: edit_batch, contains: 'tests::average_of_two', last_user_contains: 'xs.iter().sum' }}\n  response: {{ json: {GOOD_FIX} }}\n"
    ));
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(dir.path())
        .with_identity("run-1", "test", "fix average")
        .with_llm(Some(llm.clone()))
        .with_events(sink.clone());
    let policy = RecoverStage::standard(Editor::standard());
    let step = PlanStep::new("test", "test");
    let d = policy.on_failure(&step, &ctx, 1, &test_failure()).await;
    let RecoveryDecision::Retry {
        feedback,
        step: None,
        ..
    } = d
    else {
        panic!("{d:?}")
    };
    assert!(
        feedback
            .unwrap()
            .contains("The debugger changed src/lib.rs: divide by the count")
    );
    let lib = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    assert!(lib.contains("/ xs.len() as f64"), "{lib}");
    let names = sink.names();
    assert_eq!(&names[..2], ["recover:classified", "recover:attempt"]);
    assert!(names.contains(&"edit:written"), "{names:?}");
    // The fix is journaled under the run: it can be rolled back.
    let ws = nuvira_edit::nuvira_workspace::Workspace::open(dir.path()).unwrap();
    nuvira_edit::nuvira_workspace::Journal::new(&ws)
        .rollback_run("run-1")
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        LIB
    );
}

#[tokio::test]
async fn debug_tests_declines_after_two_rejected_batches_and_writes_nothing() {
    let dir = workspace();
    let llm = scripted(&format!(
        "- response: {{ json: {BAD_FIX} }}\n- match: {{ last_user_contains: 'search' }}\n  response: {{ json: {BAD_FIX} }}\n"
    ));
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(dir.path())
        .with_llm(Some(llm.clone()))
        .with_events(sink.clone());
    let policy = RecoverStage::standard(Editor::standard());
    let d = policy
        .on_failure(&PlanStep::new("test", "test"), &ctx, 1, &test_failure())
        .await;
    assert_eq!(d, RecoveryDecision::GiveUp);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        LIB
    );
    assert_eq!(sink.names().last(), Some(&"recover:result"));
    assert_eq!(llm.remaining(), 0);
}

// ---- policy and budget ----

fn rejected() -> Failure {
    Failure::new(
        ErrorCategory::EditRejected,
        "edit batch rejected (1 problem(s)); nothing was written",
    )
    .with_evidence(["src/lib.rs: search text not found"])
}

fn instruction_step() -> PlanStep {
    PlanStep::new("fix", "edit")
        .with_config(json!({"instructions": "Fix average. Then document it."}))
}

#[tokio::test]
async fn edit_rejections_go_rephrase_then_simplify_then_the_budget_runs_out() {
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(".").with_events(sink.clone());
    let policy = RecoverStage::new();
    let step = instruction_step();
    let d1 = policy.on_failure(&step, &ctx, 1, &rejected()).await;
    let RecoveryDecision::Retry { step: Some(s1), .. } = d1 else {
        panic!("{d1:?}")
    };
    assert!(
        s1.config_str("instructions")
            .unwrap()
            .contains("copy every `search` text exactly")
    );
    let d2 = policy.on_failure(&s1, &ctx, 2, &rejected()).await;
    let RecoveryDecision::Retry { step: Some(s2), .. } = d2 else {
        panic!("{d2:?}")
    };
    assert!(
        s2.config_str("instructions")
            .unwrap()
            .starts_with("Fix average.\n")
    );
    let d3 = policy.on_failure(&s2, &ctx, 3, &rejected()).await;
    assert_eq!(d3, RecoveryDecision::GiveUp);
    let events = sink.kinds().clone();
    let strategies: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            EventKind::RecoverAttempt { strategy, .. } => Some(strategy.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(strategies, ["rephrase-prompt", "simplify-goal"]);
    assert!(events.iter().any(|e| matches!(e,
        EventKind::RecoverBudgetExhausted { attempts: 3, final_error } if final_error.contains("edit batch rejected"))));
    assert!(matches!(
        events.last(),
        Some(EventKind::RecoverResult {
            success: false,
            attempts: 2,
            ..
        })
    ));
}

#[tokio::test]
async fn the_run_budget_is_shared_by_all_steps_of_a_run() {
    let mut budget = nuvira_api::RepairBudget::default();
    budget.max_attempts = 10;
    budget.max_run_attempts = Some(2);
    let policy = RecoverStage::new().with_budget(budget);
    let f = Failure::new(ErrorCategory::Io, "failed to read src/x.rs: interrupted");
    let ctx = |step: &str| StepContext::standalone(".").with_identity("run-a", step, "g");
    for s in ["a", "b"] {
        let d = policy
            .on_failure(&PlanStep::new(s, "execute"), &ctx(s), 1, &f)
            .await;
        assert!(matches!(d, RecoveryDecision::Retry { .. }), "{d:?}");
    }
    let sink = Arc::new(Recorder::default());
    let d = policy
        .on_failure(
            &PlanStep::new("c", "execute"),
            &ctx("c").with_events(sink.clone()),
            1,
            &f,
        )
        .await;
    assert_eq!(d, RecoveryDecision::GiveUp);
    assert!(sink.names().contains(&"recover:budget-exhausted"));
    // Another run has its own budget.
    let other = StepContext::standalone(".").with_identity("run-b", "a", "g");
    assert!(matches!(
        policy
            .on_failure(&PlanStep::new("a", "execute"), &other, 1, &f)
            .await,
        RecoveryDecision::Retry { .. }
    ));
}

#[tokio::test]
async fn config_recover_selects_strategies_and_bypass_is_never_success() {
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(".").with_events(sink.clone());
    let policy = RecoverStage::new();
    let step = PlanStep::new("lint", "execute").with_config(json!({
        "command": "cargo clippy",
        "recover": {"strategies": {"unknown": ["bypass"]}, "max_attempts": 5}
    }));
    policy.config(&step).unwrap();
    let d = policy
        .on_failure(
            &step,
            &ctx,
            1,
            &Failure::new(ErrorCategory::Unknown, "clippy crashed"),
        )
        .await;
    assert!(
        matches!(d, RecoveryDecision::Bypass { ref reason } if reason.contains("`lint`")),
        "{d:?}"
    );
    assert!(
        sink.kinds()
            .iter()
            .any(|e| matches!(e, EventKind::RecoverResult { success: false, .. }))
    );

    // Categories without strategies fail at once, saying none applied.
    let sink = Arc::new(Recorder::default());
    let d = policy
        .on_failure(
            &PlanStep::new("t", "test"),
            &StepContext::standalone(".").with_events(sink.clone()),
            1,
            &Failure::new(ErrorCategory::OutOfMemory, "killed"),
        )
        .await;
    assert_eq!(d, RecoveryDecision::GiveUp);
    assert!(
        matches!(&sink.kinds()[0], EventKind::RecoverClassified { strategy, .. } if strategy == "none")
    );
}

#[test]
fn bad_recover_config_is_rejected_naming_the_step_and_the_value() {
    let policy = RecoverStage::new();
    let bad = [
        (
            json!({"recover": {"strategies": ["retry-twice"]}}),
            "unknown strategy `retry-twice`",
        ),
        (
            json!({"recover": {"strategies": {"flaky": ["retry-same"]}}}),
            "unknown category `flaky`",
        ),
        (json!({"recover": {"max_attempts": 0}}), "at least 1"),
        (json!({"recover": {"max_attempt": 2}}), "max_attempt"),
    ];
    for (config, want) in bad {
        let step = PlanStep::new("s", "edit").with_config(config);
        let e = policy.config(&step).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("recover"));
        let e = e.to_string();
        assert!(e.contains("step `s`") && e.contains(want), "{e}");
        assert_eq!(e.matches("step `s`").count(), 1, "{e}");
    }
}

#[tokio::test]
async fn the_wrapper_hides_config_recover_from_strict_modules_and_prefers_the_switched_model() {
    let dir = workspace();
    let policy = Arc::new(RecoverStage::new());
    let inner: Arc<dyn Module> = Arc::new(EditModule::new(Editor::standard()));
    let edit = policy.wrap(inner.clone());
    let step = PlanStep::new("fix", "edit").with_config(json!({
        "edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "(xs.len() - 1)", "replace": "xs.len()"}],
        "recover": {"max_attempts": 2}
    }));
    assert!(
        inner.validate(&step).is_err(),
        "the edit module rejects unknown keys"
    );
    edit.validate(&step).unwrap();
    let out = edit
        .run(&step, &StepContext::standalone(dir.path()))
        .await
        .unwrap();
    assert!(matches!(out, StepOutput::Edit(_)));

    // A model chosen by switch-model is asked for by name.
    let llm = scripted(&format!(
        "- match: {{ model: 'backup:m2', schema: edit_batch }}\n  response: {{ json: {GOOD_FIX} }}\n"
    ));
    std::fs::write(dir.path().join("src/lib.rs"), LIB).unwrap();
    let modeled = policy.wrap(Arc::new(
        EditModule::new(Editor::standard())
            .with_instructions(Arc::new(ModelEditor::new(Editor::standard()))),
    ));
    let step = PlanStep::new("fix", "edit").with_config(json!({
        "instructions": "Fix average", "recover": {"model": "backup:m2"}
    }));
    let ctx = StepContext::standalone(dir.path()).with_llm(Some(llm.clone()));
    modeled.run(&step, &ctx).await.unwrap();
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn switch_model_moves_an_edit_step_to_the_fallback_model_of_a_router() {
    let dir = workspace();
    let primary = Arc::new(
        ScriptedLlm::from_yaml(
            "primary",
            "- response: { text: 'I cannot answer in JSON' }\n- response: { text: 'still no JSON' }\n",
        )
        .unwrap()
        .with_model("primary:m1"),
    );
    let backup = Arc::new(
        ScriptedLlm::from_yaml(
            "backup",
            &format!("- match: {{ model: 'backup:m2' }}\n  response: {{ json: {GOOD_FIX} }}\n"),
        )
        .unwrap()
        .with_model("backup:m2"),
    );
    let router: Arc<dyn nuvira_api::LlmClient> = Arc::new(
        nuvira_llm::FallbackClient::new(
            vec![primary.clone(), backup.clone()],
            nuvira_llm::BreakerPolicy::default(),
        )
        .unwrap(),
    );
    let policy = Arc::new(RecoverStage::new());
    let edit = policy.wrap(Arc::new(
        EditModule::new(Editor::standard())
            .with_instructions(Arc::new(ModelEditor::new(Editor::standard()))),
    ));
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(dir.path())
        .with_identity("run-s", "fix", "fix average")
        .with_inputs(inspected(dir.path()))
        .with_llm(Some(router))
        .with_events(sink.clone());
    let step = PlanStep::new("fix", "edit").with_config(json!({
        "instructions": "Fix the divisor", "recover": {"strategies": ["switch-model"]}
    }));
    let Err(ModuleError::Recoverable(failure)) = edit.run(&step, &ctx).await else {
        panic!("the primary's answers are unusable")
    };
    assert_eq!(failure.category, ErrorCategory::LlmInvalidOutput);
    let d = policy.on_failure(&step, &ctx, 1, &failure).await;
    let RecoveryDecision::Retry {
        step: Some(next), ..
    } = d
    else {
        panic!("{d:?}")
    };
    let retry_ctx =
        ctx.clone()
            .with_execution(false, 2, Arc::new(nuvira_api::NeverCancelled), None, None);
    edit.run(&next, &retry_ctx).await.unwrap();
    assert!(
        std::fs::read_to_string(dir.path().join("src/lib.rs"))
            .unwrap()
            .contains("/ xs.len() as f64")
    );
    assert_eq!((primary.remaining(), backup.remaining()), (0, 0));
    let events = sink.kinds().clone();
    assert!(events.contains(&EventKind::RecoverModelSwitch {
        from: "primary:m1".into(),
        to: "backup:m2".into()
    }));
    assert!(
        matches!(
            events.last(),
            Some(EventKind::RecoverResult {
                success: true,
                attempts: 1,
                ..
            })
        ),
        "{events:?}"
    );
}

/// Fails recoverably on the first attempt and fatally after.
struct Flaky;
#[nuvira_api::async_trait]
impl Module for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    async fn run(&self, _s: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        if ctx.attempt() == 1 {
            Err(ModuleError::recoverable(
                ErrorCategory::Io,
                "read failed: interrupted",
            ))
        } else {
            Err(ModuleError::invalid_config("the file is gone"))
        }
    }
}

#[tokio::test]
async fn a_retried_step_that_fails_fatally_ends_its_recovery_unsuccessfully() {
    let policy = Arc::new(RecoverStage::new());
    let module = policy.wrap(Arc::new(Flaky));
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(".")
        .with_identity("run-f", "s", "g")
        .with_events(sink.clone());
    let step = PlanStep::new("s", "flaky");
    let Err(ModuleError::Recoverable(f)) = module.run(&step, &ctx).await else {
        panic!()
    };
    assert!(matches!(
        policy.on_failure(&step, &ctx, 1, &f).await,
        RecoveryDecision::Retry { .. }
    ));
    let retry =
        ctx.clone()
            .with_execution(false, 2, Arc::new(nuvira_api::NeverCancelled), None, None);
    assert!(module.run(&step, &retry).await.is_err());
    assert!(matches!(
        sink.kinds().last(),
        Some(EventKind::RecoverResult {
            success: false,
            attempts: 1,
            ..
        })
    ));
}

#[tokio::test]
async fn a_rollback_that_fails_when_recovery_gives_up_is_said_not_swallowed() {
    let dir = workspace();
    // A journal the rollback cannot read: a file where its folder should be. (An unreadable
    // manifest is no longer an error: such a transaction is untrusted and left alone.)
    std::fs::create_dir_all(dir.path().join(".nuvira")).unwrap();
    std::fs::write(dir.path().join(".nuvira/journal"), "not a folder").unwrap();
    let sink = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(dir.path()).with_events(sink.clone());
    let policy = RecoverStage::standard(Editor::standard()).rollback_on_failure(true);
    let failure = Failure::new(ErrorCategory::OutOfMemory, "killed: out of memory");
    let d = policy
        .on_failure(&PlanStep::new("test", "test"), &ctx, 1, &failure)
        .await;
    assert_eq!(d, RecoveryDecision::GiveUp);
    let reason = sink
        .kinds()
        .iter()
        .find_map(|k| match k {
            EventKind::EditRolledBack { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .expect("an edit:rolled-back event names the failure");
    assert!(reason.contains("still in place"), "{reason}");
    assert!(reason.contains("nuvira rollback"), "{reason}");
}
