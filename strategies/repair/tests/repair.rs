//! Classification on real runner output, and each strategy's decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nuvira_api::{
    ErrorCategory, EventKind, Failure, LlmClient, LlmError, LlmRequest, LlmResponse, PlanStep,
    RecoveryDecision, StepContext, StepOutput, TestFailure, TestResult, async_trait,
};
use nuvira_repair_strategies::*;
use nuvira_test_support::Recorder;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn rustc_compile_error_output_is_a_compile_error_with_file_line_evidence() {
    let f = Failure::new(
        ErrorCategory::Unknown,
        fixture("cargo-build-compile-error.stderr"),
    );
    let c = classify_error(&f);
    assert_eq!(c.category, ErrorCategory::CompileError);
    assert_eq!(
        c.evidence,
        vec![
            "src/lib.rs:7:22: error[E0308]: mismatched types",
            "src/lib.rs:8:5: error[E0308]: mismatched types",
            "src/lib.rs:12:5: error[E0425]: cannot find function `undefined_function` in this scope",
        ]
    );
    assert_eq!(
        evidence_location(&c.evidence[2]),
        Some(("src/lib.rs".into(), 12))
    );
}

#[test]
fn a_test_failure_whose_log_is_a_compiler_error_is_a_compile_error() {
    let mut t = TestResult::default();
    t.log = fixture("cargo-build-compile-error.stderr");
    let f = Failure::new(ErrorCategory::TestFailure, "pass the tests: 1 of 1 failed")
        .with_output(StepOutput::Test(t));
    assert_eq!(classify_error(&f).category, ErrorCategory::CompileError);
}

#[test]
fn libtest_failure_output_is_a_test_failure_naming_the_panic_location() {
    let f = Failure::new(
        ErrorCategory::Unknown,
        fixture("cargo-basic-default.stdout"),
    );
    let c = classify_error(&f);
    assert_eq!(c.category, ErrorCategory::TestFailure);
    assert_eq!(
        c.evidence,
        vec![
            "tests::add_assertion_fails (src/lib.rs:16): assertion `left == right` failed: 2 + 2 should equal 5"
        ]
    );
}

#[test]
fn parsed_test_failures_are_the_evidence_when_present() {
    let mut t = TestResult::default();
    t.failures.push(
        TestFailure::new("tests::avg", "assertion failed\nleft: 1").at("src/lib.rs", Some(9)),
    );
    let f = Failure::new(ErrorCategory::TestFailure, "pass the tests: 1 of 2 failed")
        .with_output(StepOutput::Test(t));
    let c = classify_error(&f);
    assert_eq!(c.category, ErrorCategory::TestFailure);
    assert_eq!(
        c.evidence,
        vec!["tests::avg (src/lib.rs:9): assertion failed"]
    );
}

#[test]
fn messages_of_other_failures_are_classified_by_their_text() {
    let cases = [
        (
            "the model provider failed: rate limited by the provider (retry after 2s)",
            ErrorCategory::LlmRateLimit,
        ),
        (
            "the model's answer was invalid: not valid JSON",
            ErrorCategory::LlmInvalidOutput,
        ),
        (
            "edit batch rejected (1 problem(s)); nothing was written",
            ErrorCategory::EditRejected,
        ),
        (
            "failed to create container: Cannot connect to the Docker daemon at unix:///var/run/docker.sock",
            ErrorCategory::SandboxUnavailable,
        ),
        ("the command was oom-killed", ErrorCategory::OutOfMemory),
        ("step `t` timed out after 5s", ErrorCategory::Timeout),
        ("something odd", ErrorCategory::Unknown),
    ];
    for (msg, want) in cases {
        assert_eq!(
            classify_error(&Failure::new(ErrorCategory::Unknown, msg)).category,
            want,
            "{msg}"
        );
    }
    // A specific category from the module wins over the text.
    let f = Failure::new(ErrorCategory::Timeout, "rate limited");
    assert_eq!(classify_error(&f).category, ErrorCategory::Timeout);
}

#[test]
fn hang_output_killed_by_a_timeout_is_classified_from_the_module_category() {
    let f = Failure::new(
        ErrorCategory::Timeout,
        "run the tests: they were killed at the timeout",
    )
    .with_evidence([fixture("cargo-hang-killed.stdout")
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()]);
    let c = classify_error(&f);
    assert_eq!(c.category, ErrorCategory::Timeout);
    assert!(!c.evidence.is_empty());
}

#[test]
fn secrets_are_redacted_from_evidence_and_feedback() {
    let f = Failure::new(
        ErrorCategory::Unknown,
        "request failed: Authorization: Bearer abcdefghijklmnop1234 with sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
    );
    let c = classify_error(&f);
    let text = c.evidence.join("\n");
    assert!(!text.contains("abcdefghijklmnop1234"), "{text}");
    assert!(!text.contains("ABCDEFGHIJKLMNOPQRSTUV"), "{text}");
    let fb = feedback_text(&f, &c);
    assert!(
        fb.contains(nuvira_secrets::REDACTED) && !fb.contains("sk-proj-"),
        "{fb}"
    );
}

// ---- strategies ----

struct Models {
    models: Vec<String>,
    open: Vec<String>,
}
#[async_trait]
impl LlmClient for Models {
    fn model(&self) -> &str {
        &self.models[0]
    }
    async fn complete(&self, _r: &LlmRequest) -> Result<LlmResponse, LlmError> {
        Err(LlmError::Timeout)
    }
    fn models(&self) -> Vec<String> {
        self.models.clone()
    }
    fn open_circuits(&self) -> Vec<String> {
        self.open.clone()
    }
}

fn edit_step() -> PlanStep {
    PlanStep::new("fix", "edit")
        .depends_on(["inspect"])
        .with_config(json!({"instructions": "Fix average. Also document it.", "format": false}))
}

async fn decide(
    s: &dyn RepairStrategy,
    step: &PlanStep,
    ctx: &StepContext,
    failure: &Failure,
    uses: u32,
) -> (bool, Option<RecoveryDecision>) {
    let c = classify_error(failure);
    let input = RepairInput::new(step, ctx, 1, failure, &c).with_uses(uses);
    (s.applies(&input), s.decide(&input).await)
}

fn rejected() -> Failure {
    Failure::new(
        ErrorCategory::EditRejected,
        "edit batch rejected (1 problem(s)); nothing was written",
    )
    .with_evidence(["src/lib.rs: search text not found"])
}

#[tokio::test]
async fn retry_same_retries_unchanged_with_the_evidence_as_feedback() {
    let ctx = StepContext::standalone(".");
    let (ok, d) = decide(&RetrySame, &edit_step(), &ctx, &rejected(), 5).await;
    assert!(ok);
    let Some(RecoveryDecision::Retry {
        delay,
        feedback,
        step,
    }) = d
    else {
        panic!("{d:?}")
    };
    assert_eq!(delay, Duration::ZERO);
    assert!(step.is_none());
    assert!(
        feedback
            .unwrap()
            .contains("src/lib.rs: search text not found")
    );
}

#[tokio::test]
async fn backoff_doubles_caps_and_honours_retry_after() {
    let b = RetryWithBackoff {
        base: Duration::from_millis(100),
        max: Duration::from_secs(1),
    };
    assert_eq!(b.delay(0, "x"), Duration::from_millis(100));
    assert_eq!(b.delay(2, "x"), Duration::from_millis(400));
    assert_eq!(b.delay(10, "x"), Duration::from_secs(1));
    assert_eq!(
        b.delay(0, "rate limited by the provider (retry after 1s)"),
        Duration::from_secs(1)
    );
    let ctx = StepContext::standalone(".");
    let f = Failure::new(ErrorCategory::Timeout, "timed out");
    let (_, d) = decide(&b, &edit_step(), &ctx, &f, 1).await;
    assert!(
        matches!(d, Some(RecoveryDecision::Retry { delay, .. }) if delay == Duration::from_millis(200))
    );
}

#[tokio::test]
async fn rephrase_rewrites_the_instructions_once() {
    let ctx = StepContext::standalone(".");
    let (ok, d) = decide(&RephrasePrompt, &edit_step(), &ctx, &rejected(), 0).await;
    assert!(ok);
    let Some(RecoveryDecision::Retry {
        step: Some(step), ..
    }) = d
    else {
        panic!("{d:?}")
    };
    let text = step.config_str("instructions").unwrap();
    assert!(text.starts_with("Fix average. Also document it."));
    assert!(
        text.contains("search text not found") && text.contains("copy every `search` text exactly")
    );
    assert_eq!(
        step.config_value("format"),
        Some(&json!(false)),
        "other config is kept"
    );
    let (again, _) = decide(&RephrasePrompt, &edit_step(), &ctx, &rejected(), 1).await;
    assert!(!again, "only once per step");
    let plain = PlanStep::new("t", "test");
    assert!(
        !decide(&RephrasePrompt, &plain, &ctx, &rejected(), 0)
            .await
            .0
    );
}

#[tokio::test]
async fn simplify_keeps_the_first_sentence() {
    let ctx = StepContext::standalone(".");
    let (_, d) = decide(&SimplifyGoal, &edit_step(), &ctx, &rejected(), 0).await;
    let Some(RecoveryDecision::Retry {
        step: Some(step), ..
    }) = d
    else {
        panic!("{d:?}")
    };
    let text = step.config_str("instructions").unwrap();
    assert!(text.starts_with("Fix average.\n"), "{text}");
    assert!(!text.contains("document"));
}

#[tokio::test]
async fn split_makes_chained_sub_steps_from_sentences_or_edits() {
    let ctx = StepContext::standalone(".");
    let (ok, d) = decide(&SplitTask, &edit_step(), &ctx, &rejected(), 0).await;
    assert!(ok);
    let Some(RecoveryDecision::Split { steps }) = d else {
        panic!("{d:?}")
    };
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].id, "fix-part-1");
    assert_eq!(steps[0].depends_on, vec!["inspect"]);
    assert_eq!(steps[1].depends_on, vec!["fix-part-1"]);
    assert_eq!(
        steps[1].config_str("instructions"),
        Some("Also document it.")
    );

    let explicit = PlanStep::new("e", "edit").with_config(json!({"edits": [
        {"strategy": "whole-file", "path": "a", "content": "1"},
        {"strategy": "whole-file", "path": "b", "content": "2"}]}));
    let steps = SplitTask::split(&explicit).unwrap();
    assert_eq!(steps[1].config_value("edits").unwrap()[0]["path"], "b");
    // An explicit batch stays all-or-nothing unless the step asks for splitting.
    assert!(!decide(&SplitTask, &explicit, &ctx, &rejected(), 0).await.0);
    let mut asking = explicit.clone();
    asking.config["recover"] = json!({"strategies": {"edit-rejected": ["split-task"]}});
    let (ok, d) = decide(&SplitTask, &asking, &ctx, &rejected(), 0).await;
    assert!(ok);
    let Some(RecoveryDecision::Split { steps }) = d else {
        panic!("{d:?}")
    };
    assert!(
        steps[0].config_value("recover").is_none(),
        "sub-steps do not inherit recover"
    );
    let single = PlanStep::new("e", "edit").with_config(json!({"instructions": "one thing"}));
    assert!(!decide(&SplitTask, &single, &ctx, &rejected(), 0).await.0);
}

#[tokio::test]
async fn switch_model_skips_open_circuits_and_tried_models_and_announces_the_switch() {
    let sink = Arc::new(Recorder::default());
    let llm = Arc::new(Models {
        models: vec!["openai:a".into(), "openai:b".into(), "anthropic:c".into()],
        open: vec!["openai:b".into()],
    });
    let ctx = StepContext::standalone(".")
        .with_llm(Some(llm))
        .with_events(sink.clone());
    let f = Failure::new(ErrorCategory::LlmRateLimit, "rate limited by the provider");
    let (ok, d) = decide(&SwitchModel, &edit_step(), &ctx, &f, 0).await;
    assert!(ok);
    let Some(RecoveryDecision::Retry {
        step: Some(step), ..
    }) = d
    else {
        panic!("{d:?}")
    };
    assert_eq!(preferred_model(&step), Some("anthropic:c"));
    assert_eq!(
        sink.kinds().as_slice(),
        [EventKind::RecoverModelSwitch {
            from: "openai:a".into(),
            to: "anthropic:c".into()
        }]
    );
    // From c, a was tried and b is open: nothing left.
    let (again, d) = decide(&SwitchModel, &step, &ctx, &f, 1).await;
    assert!(!again && d.is_none());
    // Without a model there is nothing to switch.
    assert!(
        !decide(
            &SwitchModel,
            &edit_step(),
            &StepContext::standalone("."),
            &f,
            0
        )
        .await
        .0
    );
}

#[tokio::test]
async fn bypass_degrades_and_says_why() {
    let ctx = StepContext::standalone(".");
    let (_, d) = decide(&Bypass, &edit_step(), &ctx, &rejected(), 0).await;
    let Some(RecoveryDecision::Bypass { reason }) = d else {
        panic!("{d:?}")
    };
    assert!(
        reason.contains("`fix`") && reason.contains("edit-rejected"),
        "{reason}"
    );
}

#[test]
fn defaults_never_retry_environment_or_config_failures() {
    for c in [
        ErrorCategory::SandboxUnavailable,
        ErrorCategory::EnvironmentUnavailable,
        ErrorCategory::InvalidConfig,
        ErrorCategory::OutOfMemory,
    ] {
        assert!(default_strategies(c).is_empty(), "{c}");
    }
    let names: Vec<String> = builtin().iter().map(|s| s.name().to_owned()).collect();
    for c in [
        ErrorCategory::LlmRateLimit,
        ErrorCategory::EditRejected,
        ErrorCategory::Unknown,
    ] {
        for s in default_strategies(c) {
            assert!(names.iter().any(|n| n == s), "{s}");
        }
    }
}

#[test]
fn tsc_and_pytest_output_are_classified_with_their_locations() {
    let c = classify_error(&Failure::new(
        ErrorCategory::Unknown,
        fixture("tsc-type-error.stdout"),
    ));
    assert_eq!(c.category, ErrorCategory::CompileError);
    assert_eq!(
        c.evidence[0],
        "src/math.ts:5: TS2345: Argument of type 'string' is not assignable to parameter of type 'number'."
    );
    assert_eq!(c.evidence.len(), 3);

    let c = classify_error(&Failure::new(
        ErrorCategory::Unknown,
        fixture("pytest-basic-default.stdout"),
    ));
    assert_eq!(c.category, ErrorCategory::TestFailure);
    assert_eq!(
        c.evidence[0],
        "test_add_assertion_fails (test_alpha.py): AssertionError: 2 + 2 should..."
    );

    let c = classify_error(&Failure::new(
        ErrorCategory::Unknown,
        fixture("pytest-syntax-error.stdout"),
    ));
    assert_eq!(c.category, ErrorCategory::CompileError);
}
