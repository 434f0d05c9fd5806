//! Agent runs end to end, offline: a scripted model (`ScriptedLlm`) plans, writes an edit,
//! and fixes a failing test through the recover stage's debugger loop, on a real Rust crate
//! (tests/agent_repo) whose tests really run in the local sandbox.

use assert_cmd::Command;
use nuvira::api::{EventKind, ExecutionPlan, PlanRequest, Planner, RunStatus};
use nuvira::{EventBus, RunSettings};
use nuvira_llm::ScriptedLlm;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const GOAL: &str = "Fix the temperature conversions so that the tests pass";
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn transcript() -> PathBuf {
    Path::new(ROOT).join("examples/agent/transcript.yaml")
}

/// A fresh copy of the example repository.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(ROOT).join("tests/agent_repo");
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    for f in ["Cargo.toml", "src/lib.rs"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn original_lib() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("tests/agent_repo/src/lib.rs")).unwrap()
}

fn nuvira() -> Command {
    let mut c = Command::cargo_bin("nuvira").unwrap();
    // The example crate must not build into the shared target folder of this test run.
    c.env("CARGO_TARGET_DIR", "target");
    c.env_remove("NUVIRA_MODEL");
    c
}

/// (step, type) of every event, with the attempt for step:started.
fn trace(events: &[(Option<String>, EventKind)]) -> Vec<String> {
    events
        .iter()
        .map(|(step, kind)| {
            let step = step.as_deref().unwrap_or("-");
            match kind {
                EventKind::StepStarted { attempt, .. } => {
                    format!("{step} step:started#{attempt}")
                }
                EventKind::RecoverResult { success, .. } => {
                    format!("{step} recover:result={success}")
                }
                k => format!("{step} {}", k.name()),
            }
        })
        .collect()
}

/// Asserts `want` occurs in `got` in this order (other events may come between).
fn assert_in_order(got: &[String], want: &[&str]) {
    let mut i = 0;
    for w in want {
        match got[i..].iter().position(|g| g == w) {
            Some(p) => i += p + 1,
            None => panic!("`{w}` missing after position {i} in:\n{}", got.join("\n")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_plans_edits_repairs_the_failing_test_and_verifies() {
    let dir = repo();
    let scripted = Arc::new(ScriptedLlm::from_file(transcript()).unwrap());
    let llm: Arc<dyn nuvira::api::LlmClient> = scripted.clone();
    let engine = Arc::new(
        nuvira::agent::configure(
            nuvira::defaults::engine()
                .workspace(dir.path())
                .llm(llm.clone()),
            Some(&llm),
            None,
        )
        .build(),
    );
    let bus = EventBus::with_history("agent-run", true);
    let planner = nuvira::agent::llm_planner(llm.clone(), engine.clone(), Arc::new(bus.clone()));
    let plan = planner.plan(&PlanRequest::new(GOAL)).await.unwrap();
    let summary = engine
        .run(plan, bus.clone(), RunSettings::default())
        .await
        .unwrap();
    bus.close();
    let events: Vec<(Option<String>, EventKind)> = bus
        .history()
        .iter()
        .map(|e| (e.step_id.as_deref().map(str::to_owned), e.kind.clone()))
        .collect();
    let got = trace(&events);
    assert_eq!(summary.status, RunStatus::Succeeded, "{}", got.join("\n"));
    assert_in_order(
        &got,
        &[
            "- plan:started",
            "- plan:completed",
            "- run:started",
            "inspect step:succeeded",
            "fix step:started#1",
            "fix edit:written",
            "fix step:succeeded",
            "test step:started#1",
            "test test:completed",
            "test recover:classified",
            "test recover:attempt",
            "test edit:written",
            "test step:retrying",
            "test test:started",
            "test test:completed",
            "test recover:result=true",
            "test step:succeeded",
            "verify step:succeeded",
            "report step:succeeded",
            "- run:completed",
        ],
    );
    // The failure was classified from the real cargo output, naming the failing test.
    let classified = events.iter().find_map(|(_, k)| match k {
        EventKind::RecoverClassified {
            category,
            strategy,
            evidence,
        } => Some((*category, strategy.clone(), evidence.clone())),
        _ => None,
    });
    let (category, strategy, evidence) = classified.unwrap();
    assert_eq!(category, nuvira::api::ErrorCategory::TestFailure);
    assert_eq!(strategy, "debug-tests");
    assert!(
        evidence
            .iter()
            .any(|e| e.contains("water_boils_at_100_celsius")),
        "{evidence:?}"
    );
    // The budget was respected: one repair, two attempts of the test step (max 3).
    let repairs = got
        .iter()
        .filter(|g| g.ends_with("recover:attempt"))
        .count();
    assert_eq!(repairs, 1);
    assert!(!got.iter().any(|g| g.contains("budget-exhausted")));
    let lib = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    assert!(lib.contains("celsius * 9.0 / 5.0 + 32.0"), "{lib}");
    assert!(lib.contains("(fahrenheit - 32.0) * 5.0 / 9.0"), "{lib}");
    // The report shows both fixes: the edit step's and the one the repair made during `test`.
    let mut builder = nuvira_report::ReportBuilder::new();
    for e in bus.history() {
        builder.fold(&e);
    }
    let report = builder.finish();
    let diff_of = |step: &str| -> String {
        let rec = report.steps.iter().find(|s| s.id == step).unwrap();
        rec.file_changes.iter().map(|c| c.diff.clone()).collect()
    };
    assert!(diff_of("fix").contains("+ 32.0"), "{}", diff_of("fix"));
    assert!(
        diff_of("test").contains("(fahrenheit - 32.0)"),
        "{}",
        diff_of("test")
    );
    assert!(report.counts.lines_added >= 2, "{:?}", report.counts);
    // Every scripted answer was used, in order.
    assert_eq!(scripted.remaining(), 0);
}

#[test]
fn the_example_plan_is_the_plan_the_scripted_model_answers_with() {
    let text = std::fs::read_to_string(transcript()).unwrap();
    let entries: Vec<Value> = serde_yaml_ng::from_str(&text).unwrap();
    let planned: ExecutionPlan =
        serde_json::from_value(entries[0]["response"]["json"].clone()).unwrap();
    let file = nuvira_plan::load_file(&Path::new(ROOT).join("examples/agent/plan.yaml")).unwrap();
    assert_eq!(planned, file.plan);
}

#[test]
fn cli_goal_with_the_llm_planner_and_a_scripted_model_fixes_the_repo() {
    let dir = repo();
    let events = dir.path().join("events.jsonl");
    let out = nuvira()
        .env("NUVIRA_SCRIPTED_LLM", transcript())
        .args([
            "run",
            "--goal",
            GOAL,
            "--planner",
            "llm",
            "--quiet",
            "--repo",
        ])
        .arg(dir.path())
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The events last: a CI log keeps the end of a long message.
    let events_text = std::fs::read_to_string(&events).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{stderr}\nevents:\n{events_text}"
    );
    assert!(stdout.contains("run succeeded"), "{stdout}");
    let lib = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    assert!(lib.contains("(fahrenheit - 32.0) * 5.0 / 9.0"), "{lib}");
    let types = event_types(&events);
    // Planning happened before the run; its events still lead the event file.
    assert_eq!(types.first().map(String::as_str), Some("- plan:started"));
    assert_in_order(
        &types,
        &[
            "- plan:started",
            "inspect plan:step-created",
            "- plan:completed",
            "- run:started",
            "test step:started",
            "test recover:classified",
            "test recover:attempt",
            "test step:retrying",
            "test test:started",
            "test recover:result",
            "test step:succeeded",
            "verify step:succeeded",
        ],
    );
}

fn event_types(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                v["step_id"].as_str().unwrap_or("-"),
                v["type"].as_str().unwrap()
            )
        })
        .collect()
}

/// A transcript whose debugger fixes are wrong: the test step's budget (2 attempts) runs out.
fn failing_transcript(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(transcript()).unwrap();
    let text = text
        .replace(
            "config: { sandbox: local }",
            "config: { sandbox: local, recover: { strategies: { test-failure: [debug-tests] }, max_attempts: 2, rollback_on_failure: true } }",
        )
        .replace(
            "replace: \"(fahrenheit - 32.0) * 5.0 / 9.0\"",
            "replace: \"fahrenheit * 5.0 / 9.0 - 32.0\"",
        );
    assert!(text.contains("rollback_on_failure"));
    let path = dir.join("transcript.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_exhausted_budget_fails_the_run_says_so_and_restores_every_file() {
    let dir = repo();
    let work = tempfile::tempdir().unwrap();
    let events = work.path().join("events.jsonl");
    let report = work.path().join("report.json");
    let out = nuvira()
        .env("NUVIRA_SCRIPTED_LLM", failing_transcript(work.path()))
        .args([
            "run",
            "--goal",
            GOAL,
            "--planner",
            "llm",
            "--quiet",
            "--repo",
        ])
        .arg(dir.path())
        .arg("--events")
        .arg(&events)
        .arg("--report")
        .arg(format!("json={}", report.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("run failed"), "{stdout}");
    let types = event_types(&events);
    assert_in_order(
        &types,
        &[
            "test recover:classified",
            "test recover:attempt",
            "test step:retrying",
            "test recover:classified",
            "test recover:budget-exhausted",
            "test edit:rolled-back",
            "test recover:result",
            "test step:failed",
            "verify step:skipped",
        ],
    );
    // Both the edit step's and the debugger's changes were rolled back.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        original_lib()
    );
    // The report records the failed step and its repair attempt.
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let steps = r["steps"].as_array().unwrap();
    let test = steps.iter().find(|s| s["id"] == "test").unwrap();
    assert_eq!(test["status"], "failed", "{test}");
    assert_eq!(test["repair_attempts"], 1, "{test}");
    // The report says in words that the budget ran out, in JSON and on stdout.
    let follow_up = r["follow_up"].to_string();
    assert!(
        follow_up.contains("step `test`: the repair budget was exhausted after 2 attempt(s)"),
        "{follow_up}"
    );
    assert!(stdout.contains("repair budget was exhausted"), "{stdout}");
    // The budget-exhausted event says what failed last.
    let text = std::fs::read_to_string(&events).unwrap();
    let exhausted: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "recover:budget-exhausted")
        .unwrap();
    assert_eq!(exhausted["attempts"], 2);
    assert!(
        exhausted["final_error"]
            .as_str()
            .unwrap()
            .contains("pass the tests"),
        "{exhausted}"
    );
}

#[test]
fn a_broken_scripted_model_file_is_a_clear_usage_error() {
    let dir = repo();
    let out = nuvira()
        .env("NUVIRA_SCRIPTED_LLM", dir.path().join("missing.yaml"))
        .args(["run", "--goal", GOAL, "--planner", "llm", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NUVIRA_SCRIPTED_LLM") && stderr.contains("missing.yaml"),
        "{stderr}"
    );
}

#[test]
fn the_agent_registry_accepts_and_checks_config_recover() {
    let registry = nuvira::agent::registry();
    let mut plan = nuvira_plan::load_file(&Path::new(ROOT).join("examples/agent/plan.yaml"))
        .unwrap()
        .plan;
    let test = plan.steps.iter_mut().find(|s| s.id == "test").unwrap();
    test.config["recover"] = serde_json::json!({"strategies": ["retry-same"], "max_attempts": 2});
    nuvira::validate::validate(&plan, Some(&registry)).unwrap();
    let test = plan.steps.iter_mut().find(|s| s.id == "test").unwrap();
    test.config["recover"] = serde_json::json!({"strategies": ["retry-forever"]});
    let errs = nuvira::validate::validate(&plan, Some(&registry)).unwrap_err();
    assert!(
        errs.to_string()
            .contains("unknown strategy `retry-forever`"),
        "{errs}"
    );
}

#[test]
fn cli_llm_planner_needs_a_model_and_fails_clearly_on_invalid_plans() {
    let dir = repo();
    let out = nuvira()
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .args(["run", "--goal", GOAL, "--planner", "llm", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no model is configured"));

    // Two plans naming a module that does not exist: exit 2 with the engine's problem listed.
    let script = dir.path().join("bad-plans.yaml");
    std::fs::write(
        &script,
        "- response: { json: { goal: g, steps: [ { id: a, module: lintr } ] } }\n\
         - match: { last_user_contains: lintr }\n  response: { json: { goal: g, steps: [ { id: a, module: lintr } ] } }\n",
    )
    .unwrap();
    let out = nuvira()
        .env("NUVIRA_SCRIPTED_LLM", &script)
        .args(["run", "--goal", GOAL, "--planner", "llm", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid after one correction") && stderr.contains("lintr"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        original_lib(),
        "nothing ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_instruction_edit_is_split_into_sub_steps_that_the_scheduler_runs() {
    let dir = repo();
    let bad = r#"{"edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "celsius * 9 / 5", "replace": "x"}]}"#;
    let f_fix = r#"{"edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "celsius * 9.0 / 5.0", "replace": "celsius * 9.0 / 5.0 + 32.0"}]}"#;
    let c_fix = r#"{"edits": [{"strategy": "search-replace", "path": "src/lib.rs", "search": "fahrenheit * 5.0 / 9.0", "replace": "(fahrenheit - 32.0) * 5.0 / 9.0"}]}"#;
    let script = format!(
        "- match: {{ schema: relevant_files }}\n  response: {{ json: {{ paths: [src/lib.rs] }} }}\n\
         - match: {{ schema: edit_batch }}\n  response: {{ json: {bad} }}\n\
         - match: {{ last_user_contains: 'The editor rejected those edits' }}\n  response: {{ json: {bad} }}\n\
         - match: {{ last_user_contains: 'in this step: Fix to_fahrenheit: add 32.' }}\n  response: {{ json: {f_fix} }}\n\
         - match: {{ last_user_contains: 'in this step: Fix to_celsius: subtract 32 first.' }}\n  response: {{ json: {c_fix} }}\n"
    );
    let scripted = Arc::new(ScriptedLlm::from_yaml("split", &script).unwrap());
    let llm: Arc<dyn nuvira::api::LlmClient> = scripted.clone();
    let engine = nuvira::agent::configure(
        nuvira::defaults::engine()
            .workspace(dir.path())
            .llm(llm.clone()),
        Some(&llm),
        None,
    )
    .build();
    let plan: ExecutionPlan = serde_json::from_value(serde_json::json!({
        "goal": GOAL,
        "steps": [
            {"id": "inspect", "module": "inspect", "config": {"keywords": ["to_fahrenheit"]}},
            {"id": "fix", "module": "edit", "depends_on": ["inspect"], "config": {
                "instructions": "Fix to_fahrenheit: add 32.\nFix to_celsius: subtract 32 first.",
                "recover": {"strategies": {"edit-rejected": ["split-task"]}}
            }}
        ]
    }))
    .unwrap();
    let bus = EventBus::with_history("split-run", true);
    let summary = engine
        .run(plan, bus.clone(), RunSettings::default())
        .await
        .unwrap();
    bus.close();
    let events: Vec<(Option<String>, EventKind)> = bus
        .history()
        .iter()
        .map(|e| (e.step_id.as_deref().map(str::to_owned), e.kind.clone()))
        .collect();
    let got = trace(&events);
    assert_eq!(summary.status, RunStatus::Succeeded, "{}", got.join("\n"));
    assert_in_order(
        &got,
        &[
            "fix edit:skipped",
            "fix recover:classified",
            "fix recover:attempt",
            "fix-part-1 plan:step-created",
            "fix-part-2 plan:step-created",
            "fix-part-1 step:succeeded",
            "fix-part-2 step:succeeded",
            "fix recover:result=true",
            "fix step:succeeded",
        ],
    );
    let lib = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("celsius * 9.0 / 5.0 + 32.0") && lib.contains("(fahrenheit - 32.0)"),
        "{lib}"
    );
    assert_eq!(scripted.remaining(), 0);
}
