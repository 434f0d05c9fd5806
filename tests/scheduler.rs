//! Scheduler behaviour with a scripted module: ordering, parallelism, skipping, write sets,
//! timeouts, cancellation, retries and panics. Synchronisation is by barriers and notifications,
//! never by sleeping; clocks are paused where timeouts are involved.

use nuvira::scheduler::{RecoveryDecision, RecoveryPolicy};
use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::{
    ErrorCategory, EventKind, ExecutionPlan, Failure, Module, ModuleError, PlanStep, RunStatus,
    StepContext, StepOutput, WriteSet, async_trait, report::StepStatus,
};
use nuvira_test_support::{Mark, Scripted, scripted_step as step};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{Barrier, Notify};

fn plan(steps: Vec<PlanStep>) -> ExecutionPlan {
    let outputs = steps.iter().map(|s| s.id.clone()).collect();
    ExecutionPlan {
        goal: "test".into(),
        outputs: Some(outputs),
        steps,
        ..Default::default()
    }
}

fn engine(m: &Arc<Scripted>, max_parallel: usize) -> Engine {
    Engine::builder()
        .module(m.clone())
        .max_parallel(max_parallel)
        .build()
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("the run did not finish: the scheduler is stuck")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallelism_is_reached_and_never_exceeded() {
    let m = Arc::new(Scripted::default());
    // 12 independent steps, 3 at a time, each waiting at a barrier of 3: the run can only
    // finish if the scheduler really runs 3 at once.
    *m.barrier.lock().unwrap() = Some(Arc::new(Barrier::new(3)));
    let steps: Vec<_> = (0..12)
        .map(|i| step(&format!("s{i}"), &[], "barrier"))
        .collect();
    let summary =
        within(engine(&m, 3).run(plan(steps), EventBus::new("r"), RunSettings::default()))
            .await
            .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert_eq!(m.max_running.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_never_start_before_their_dependencies_end() {
    let m = Arc::new(Scripted::default());
    // A diamond lattice: layer k depends on two steps of layer k-1.
    let mut steps = vec![];
    for layer in 0..6 {
        for j in 0..4 {
            let id = format!("l{layer}_{j}");
            let deps: Vec<String> = if layer == 0 {
                vec![]
            } else {
                vec![
                    format!("l{}_{}", layer - 1, j),
                    format!("l{}_{}", layer - 1, (j + 1) % 4),
                ]
            };
            steps.push(PlanStep::new(id, "scripted").depends_on(deps));
        }
    }
    let p = plan(steps.clone());
    let summary = within(engine(&m, 4).run(p, EventBus::new("r"), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    let log = m.log.lock().unwrap().clone();
    let pos = |mark: &Mark| log.iter().position(|x| x == mark).unwrap();
    for s in &steps {
        for d in &s.depends_on {
            assert!(
                pos(&Mark::End(d.clone())) < pos(&Mark::Start(s.id.clone())),
                "{} started before {d} ended",
                s.id
            );
        }
    }
    assert!(m.max_running.load(Ordering::SeqCst) <= 4);
}

#[tokio::test]
async fn a_failure_skips_exactly_its_transitive_dependents() {
    let m = Arc::new(Scripted::default());
    let steps = vec![
        step("a", &[], "fail"),
        step("b", &["a"], "ok"),
        step("c", &["b"], "ok"),
        step("d", &["a", "x"], "ok"),
        step("x", &[], "ok"),
        step("y", &["x"], "ok"),
    ];
    let bus = EventBus::new("r");
    let summary = within(engine(&m, 2).run(plan(steps), bus.clone(), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Failed);
    assert_eq!(summary.exit_code(), nuvira::exit::FAILED);
    let status = |id: &str| summary.step(id).unwrap().status;
    assert_eq!(status("a"), StepStatus::Failed);
    for id in ["b", "c", "d"] {
        assert_eq!(status(id), StepStatus::Skipped, "{id}");
        assert!(
            summary
                .step(id)
                .unwrap()
                .skip_reason
                .as_ref()
                .unwrap()
                .contains("`a`")
        );
    }
    assert_eq!(status("x"), StepStatus::Succeeded);
    assert_eq!(status("y"), StepStatus::Succeeded);
    let started: Vec<String> = m
        .log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|mk| match mk {
            Mark::Start(s) => Some(s.clone()),
            Mark::End(_) => None,
        })
        .collect();
    assert!(!started.iter().any(|s| s == "b" || s == "c" || s == "d"));
    // Events: one skipped event per skipped step, naming its cause.
    let skipped: Vec<_> = bus
        .history()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StepSkipped { cause, .. } => Some((
                e.step_id.clone().unwrap().to_string(),
                cause.clone().unwrap(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(skipped.len(), 3);
    assert!(skipped.contains(&("c".into(), "b".into())));
}

#[tokio::test]
async fn fatal_environment_failures_map_to_exit_code_3() {
    let m = Arc::new(Scripted::default());
    let summary = engine(&m, 2)
        .run(
            plan(vec![step("t", &[], "fatal")]),
            EventBus::new("r"),
            RunSettings::default(),
        )
        .await
        .unwrap();
    assert_eq!(summary.exit_code(), nuvira::exit::ENVIRONMENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_with_overlapping_write_sets_never_run_together() {
    let m = Arc::new(Scripted::default());
    let mut steps = vec![];
    for i in 0..8 {
        let mut s = step(&format!("w{i}"), &[], "ok");
        s.writes = vec![if i % 2 == 0 {
            "src/lib.rs".into()
        } else {
            "src".into()
        }];
        steps.push(s);
    }
    for i in 0..8 {
        steps.push(step(&format!("r{i}"), &[], "ok"));
    }
    let summary =
        within(engine(&m, 8).run(plan(steps), EventBus::new("r"), RunSettings::default()))
            .await
            .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert_eq!(m.write_overlap.load(Ordering::SeqCst), 0);
    // Writers ran one at a time: each writer's end precedes the next writer's start.
    let log = m.log.lock().unwrap().clone();
    let mut open = 0i32;
    for mark in &log {
        match mark {
            Mark::Start(s) if s.starts_with('w') => {
                open += 1;
                assert_eq!(open, 1, "two writers overlapped: {log:?}");
            }
            Mark::End(s) if s.starts_with('w') => open -= 1,
            _ => {}
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_step_that_hangs_fails_at_its_timeout_and_others_go_on() {
    let m = Arc::new(Scripted::default());
    let slow = step("slow", &[], "hang").with_timeout(Duration::from_secs(30));
    let after = step("after", &["slow"], "ok");
    let other = step("other", &[], "ok");
    let summary = engine(&m, 2)
        .run(
            plan(vec![slow, after, other]),
            EventBus::new("r"),
            RunSettings::default(),
        )
        .await
        .unwrap();
    let s = summary.step("slow").unwrap();
    assert_eq!(s.status, StepStatus::Failed);
    let err = s.error.as_ref().unwrap();
    assert_eq!(err.category(), ErrorCategory::Timeout);
    assert!(err.to_string().contains("30s"), "{err}");
    assert_eq!(summary.step("after").unwrap().status, StepStatus::Skipped);
    assert_eq!(summary.step("other").unwrap().status, StepStatus::Succeeded);
    // The hanging future was dropped, not leaked.
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_every_running_step_before_run_returns() {
    let m = Arc::new(Scripted::default());
    let mut steps: Vec<_> = (0..4)
        .map(|i| step(&format!("h{i}"), &[], "hang"))
        .collect();
    steps.push(step("later", &["h0"], "ok"));
    let settings = RunSettings::default();
    let cancel = settings.cancel.clone();
    let eng = engine(&m, 4);
    let bus = EventBus::new("r");
    let m2 = m.clone();
    let trigger = tokio::spawn(async move {
        m2.until_started(4).await;
        cancel.cancel();
    });
    let summary = within(eng.run(plan(steps), bus.clone(), settings))
        .await
        .unwrap();
    trigger.await.unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    assert_eq!(summary.exit_code(), nuvira::exit::CANCELLED);
    // Every hanging step's future was dropped by the time run() returned.
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
    assert_eq!(m.dropped.load(Ordering::SeqCst), 4);
    assert_eq!(summary.step("later").unwrap().status, StepStatus::Skipped);
    let history = bus.history();
    let names: Vec<&str> = history.iter().map(|e| e.kind.name()).collect();
    assert!(names.contains(&"run:cancelled"));
    assert_eq!(names.last(), Some(&"run:completed"));
    // The steps cut short say so: category `cancelled`, not `unknown`.
    let cut: Vec<_> = history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StepFailed { category, .. } => Some(*category),
            _ => None,
        })
        .collect();
    assert_eq!(cut, vec![ErrorCategory::Cancelled; 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependents_of_a_step_stopped_by_cancellation_are_skipped_as_cancelled() {
    let m = Arc::new(Scripted::default());
    let steps = vec![
        step("slow", &[], "until-cancelled"),
        step("report", &["slow"], "ok"),
    ];
    let settings = RunSettings::default();
    let cancel = settings.cancel.clone();
    let bus = EventBus::new("r");
    let m2 = m.clone();
    let trigger = tokio::spawn(async move {
        m2.until_started(1).await;
        // Not synchronisation: the step must run for a measurable time before it is cut short.
        tokio::time::sleep(Duration::from_millis(30)).await;
        cancel.cancel();
    });
    let summary = within(engine(&m, 2).run(plan(steps), bus.clone(), settings))
        .await
        .unwrap();
    trigger.await.unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    let reason = bus
        .history()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::StepSkipped { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(reason, "the run was cancelled");
    // The stopped step's failure carries how long it ran.
    let ran = bus
        .history()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::StepFailed { duration_ms, .. } => Some(*duration_ms),
            _ => None,
        })
        .unwrap();
    assert!(ran >= 25, "ran {ran} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_future_cancels_the_run_but_not_the_callers_token() {
    let m = Arc::new(Scripted::default());
    let steps = vec![
        step("h0", &[], "hang"),
        step("h1", &[], "hang"),
        step("after", &["h0"], "ok"),
    ];
    let settings = RunSettings::default();
    let callers = settings.cancel.clone();
    let eng = engine(&m, 4);
    let bus = EventBus::new("r");
    let mut events = bus.subscribe();
    let run = eng.run(plan(steps), bus.clone(), settings);
    // Drop the run as soon as both hanging steps are running, like a `select!` would.
    let m2 = m.clone();
    let both_started = async move {
        m2.until_started(2).await;
    };
    tokio::select! {
        _ = run => panic!("a run of hanging steps finished"),
        () = both_started => {}
    }
    // The dispatcher goes on in its task just long enough to stop the steps and say so.
    within(async {
        while let Some(ev) = events.recv().await {
            if matches!(ev.kind, EventKind::RunCompleted { .. }) {
                break;
            }
        }
    })
    .await;
    assert_eq!(m.running.load(Ordering::SeqCst), 0, "a step survived");
    assert_eq!(m.dropped.load(Ordering::SeqCst), 2);
    let log = m.log.lock().unwrap().clone();
    assert!(!log.contains(&Mark::Start("after".into())), "{log:?}");
    let names: Vec<&str> = bus.history().iter().map(|e| e.kind.name()).collect();
    assert!(names.contains(&"run:cancelled"), "{names:?}");
    assert!(
        !callers.is_cancelled(),
        "the caller's token is the caller's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_cancelled_before_the_run_starts_no_step() {
    for _ in 0..50 {
        let m = Arc::new(Scripted::default());
        let steps = vec![
            step("a", &[], "ok"),
            step("b", &[], "ok"),
            step("c", &["a"], "ok"),
        ];
        let settings = RunSettings::default();
        settings.cancel.cancel();
        let summary = within(engine(&m, 4).run(plan(steps), EventBus::new("r"), settings))
            .await
            .unwrap();
        assert_eq!(summary.status, RunStatus::Cancelled);
        assert_eq!(m.started.load(Ordering::SeqCst), 0, "a step ran");
    }
}

struct RetryTwice;

#[async_trait]
impl RecoveryPolicy for RetryTwice {
    async fn on_failure(
        &self,
        _s: &PlanStep,
        _c: &StepContext,
        attempt: u32,
        _f: &Failure,
    ) -> RecoveryDecision {
        if attempt < 3 {
            RecoveryDecision::Retry {
                delay: Duration::ZERO,
                feedback: None,
                step: None,
            }
        } else {
            RecoveryDecision::GiveUp
        }
    }
}

#[tokio::test]
async fn recoverable_failures_are_retried_under_the_policy_and_fatal_ones_are_not() {
    let m = Arc::new(Scripted::default());
    let mut flaky = step("flaky", &[], "flaky");
    flaky.config = json!({"do": "flaky", "fails": 2});
    let mut hopeless = step("hopeless", &[], "flaky");
    hopeless.config = json!({"do": "flaky", "fails": 10});
    let fatal = step("fatal", &[], "fatal");
    let eng = Engine::builder()
        .module(m.clone())
        .recovery(Arc::new(RetryTwice))
        .build();
    let bus = EventBus::new("r");
    let summary = eng
        .run(
            plan(vec![flaky, hopeless, fatal]),
            bus.clone(),
            RunSettings::default(),
        )
        .await
        .unwrap();
    assert_eq!(summary.step("flaky").unwrap().status, StepStatus::Succeeded);
    assert_eq!(summary.step("flaky").unwrap().attempts, 3);
    assert_eq!(summary.step("hopeless").unwrap().status, StepStatus::Failed);
    assert_eq!(summary.step("hopeless").unwrap().attempts, 3);
    assert_eq!(summary.step("fatal").unwrap().attempts, 1);
    let retries = bus
        .history()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::StepRetrying { .. }))
        .count();
    assert_eq!(retries, 4);
}

#[tokio::test]
async fn a_panicking_module_fails_its_step_without_taking_the_run_down() {
    let m = Arc::new(Scripted::default());
    let summary = engine(&m, 2)
        .run(
            plan(vec![step("boom", &[], "panic"), step("fine", &[], "ok")]),
            EventBus::new("r"),
            RunSettings::default(),
        )
        .await
        .unwrap();
    let boom = summary.step("boom").unwrap();
    assert_eq!(boom.status, StepStatus::Failed);
    assert!(
        boom.error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("panicked")
    );
    assert_eq!(summary.step("fine").unwrap().status, StepStatus::Succeeded);
}

#[tokio::test]
async fn events_follow_the_lifecycle_and_carry_outputs() {
    let m = Arc::new(Scripted::default());
    let bus = EventBus::new("run-7");
    engine(&m, 1)
        .run(
            plan(vec![step("a", &[], "ok"), step("b", &["a"], "ok")]),
            bus.clone(),
            RunSettings::default(),
        )
        .await
        .unwrap();
    let h = bus.history();
    let seq: Vec<(Option<&str>, &str)> = h
        .iter()
        .map(|e| (e.step_id.as_deref(), e.kind.name()))
        .collect();
    assert_eq!(
        seq,
        vec![
            (None, "run:started"),
            (Some("a"), "step:ready"),
            (Some("a"), "step:started"),
            (Some("a"), "step:succeeded"),
            (Some("b"), "step:ready"),
            (Some("b"), "step:started"),
            (Some("b"), "step:succeeded"),
            (None, "run:completed"),
        ]
    );
    assert!(
        h.iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 && &*e.run_id == "run-7")
    );
    match &h[3].kind {
        EventKind::StepSucceeded { output, .. } => {
            assert_eq!(**output, StepOutput::Value(json!("a")))
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Dependencies' outputs reach dependents through the context.
struct Summer;

#[async_trait]
impl Module for Summer {
    fn name(&self) -> &str {
        "sum"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let own = step.config_value("n").and_then(|v| v.as_i64()).unwrap_or(0);
        let upstream: i64 = ctx
            .upstream()
            .iter()
            .filter_map(|(_, o)| match &**o {
                StepOutput::Value(v) => v.get("own").and_then(|x| x.as_i64()),
                _ => None,
            })
            .sum();
        let direct = step
            .depends_on
            .iter()
            .filter(|d| ctx.dependency(d).is_some())
            .count();
        Ok(StepOutput::Value(
            json!({"own": own, "upstream": upstream, "direct": direct}),
        ))
    }
}

#[tokio::test]
async fn steps_see_direct_and_transitive_upstream_outputs() {
    let eng = Engine::builder().module(Arc::new(Summer)).build();
    let s = |id: &str, n: i64, deps: &[&str]| {
        PlanStep::new(id, "sum")
            .depends_on(deps.iter().copied())
            .with_config(json!({"n": n}))
    };
    let p = ExecutionPlan {
        outputs: Some(vec!["d".into()]),
        steps: vec![
            s("a", 1, &[]),
            s("b", 10, &["a"]),
            s("c", 100, &["a"]),
            s("d", 0, &["b", "c"]),
        ],
        ..Default::default()
    };
    let summary = eng
        .run(p, EventBus::new("r"), RunSettings::default())
        .await
        .unwrap();
    let out = summary.step("d").unwrap().output.clone().unwrap();
    assert_eq!(
        *out,
        StepOutput::Value(json!({"own": 0, "upstream": 111, "direct": 2}))
    );
}

/// Splits a failing step into two scripted sub-steps, or bypasses it, by its config.
struct SplitOrBypass;

#[async_trait]
impl RecoveryPolicy for SplitOrBypass {
    async fn on_failure(
        &self,
        s: &PlanStep,
        _c: &StepContext,
        _attempt: u32,
        _f: &Failure,
    ) -> RecoveryDecision {
        match s.config_str("then") {
            Some("split") => RecoveryDecision::Split {
                steps: vec![
                    step(&format!("{}.part1", s.id), &[], "ok"),
                    step(
                        &format!("{}.part2", s.id),
                        &[&format!("{}.part1", s.id)],
                        "ok",
                    ),
                ],
            },
            // One sub-step that never ends, with a timeout.
            Some("split-hang") => RecoveryDecision::Split {
                steps: vec![
                    step(&format!("{}.slow", s.id), &[], "hang")
                        .with_timeout(Duration::from_secs(5)),
                ],
            },
            // A sub-step that runs until the run is cancelled, and one that never ends.
            Some("split-until-cancelled") => RecoveryDecision::Split {
                steps: vec![
                    step(&format!("{}.wait", s.id), &[], "until-cancelled"),
                    step(&format!("{}.hang", s.id), &[], "hang"),
                ],
            },
            // Two writers of one file and two readers, all meeting a barrier of two: `w1`
            // can only pass it with `r1` running beside it, `w2` with `r2`, which waits for
            // `r1`.
            Some("split-writers") => {
                let id = |n: &str| format!("{}.{n}", s.id);
                let writer = |n: &str| {
                    let mut w = step(&id(n), &[], "barrier");
                    w.writes = vec!["src/lib.rs".into()];
                    w
                };
                RecoveryDecision::Split {
                    steps: vec![
                        writer("w1"),
                        step(&id("r1"), &[], "barrier"),
                        writer("w2"),
                        step(&id("r2"), &[&id("r1")], "barrier"),
                    ],
                }
            }
            Some("bad-split") => RecoveryDecision::Split {
                steps: vec![step("a", &["nowhere"], "ok")],
            },
            _ => RecoveryDecision::Bypass {
                reason: "optional step".into(),
            },
        }
    }
}

#[tokio::test]
async fn split_task_runs_validated_sub_steps_in_place_and_bypass_lets_dependents_run() {
    let m = Arc::new(Scripted::default());
    let mut big = step("big", &[], "fail");
    big.config = json!({"do": "fail", "then": "split"});
    let mut optional = step("optional", &[], "fail");
    optional.config = json!({"do": "fail", "then": "bypass"});
    let mut broken = step("broken", &[], "fail");
    broken.config = json!({"do": "fail", "then": "bad-split"});
    let steps = vec![
        big,
        step("after_big", &["big"], "ok"),
        optional,
        step("after_optional", &["optional"], "ok"),
        broken,
        step("after_broken", &["broken"], "ok"),
    ];
    let eng = Engine::builder()
        .module(m.clone())
        .recovery(Arc::new(SplitOrBypass))
        .build();
    let bus = EventBus::new("r");
    let summary = eng
        .run(plan(steps), bus.clone(), RunSettings::default())
        .await
        .unwrap();
    let st = |id: &str| summary.step(id).unwrap().status;
    // Split: the sub-steps ran in order, the step took the last one's output, dependents ran.
    assert_eq!(st("big"), StepStatus::Succeeded);
    assert_eq!(
        *summary.step("big").unwrap().output.clone().unwrap(),
        StepOutput::Value(json!("big.part2"))
    );
    assert_eq!(st("after_big"), StepStatus::Succeeded);
    let created: Vec<String> = bus
        .history()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::PlanStepCreated { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created, vec!["big.part1", "big.part2"]);
    // Bypass: reported as failed (never as success), yet its dependents ran.
    assert_eq!(st("optional"), StepStatus::Failed);
    assert!(
        summary
            .step("optional")
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("bypassed")
    );
    assert_eq!(st("after_optional"), StepStatus::Succeeded);
    // An invalid split fails the step with the reason; dependents are skipped.
    assert_eq!(st("broken"), StepStatus::Failed);
    assert!(
        summary
            .step("broken")
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("nowhere")
    );
    assert_eq!(st("after_broken"), StepStatus::Skipped);
    assert_eq!(summary.status, RunStatus::Failed);
}

/// Regression: split-task sub-steps ran outside the scheduler, by calling the module
/// directly, so a hanging sub-step hung the run past its timeout.
#[tokio::test(start_paused = true)]
async fn split_sub_step_that_exceeds_its_timeout_is_stopped_at_the_timeout() {
    let m = Arc::new(Scripted::default());
    let mut big = step("big", &[], "fail");
    big.config = json!({"do": "fail", "then": "split-hang"});
    let eng = Engine::builder()
        .module(m.clone())
        .recovery(Arc::new(SplitOrBypass))
        .build();
    let bus = EventBus::new("r");
    let began = tokio::time::Instant::now();
    let summary = within(eng.run(
        plan(vec![big, step("after", &["big"], "ok")]),
        bus.clone(),
        RunSettings::default(),
    ))
    .await
    .unwrap();
    let big = summary.step("big").unwrap();
    assert_eq!(big.status, StepStatus::Failed);
    let err = big.error.as_ref().unwrap();
    assert_eq!(err.category(), ErrorCategory::Timeout);
    assert!(
        err.to_string().contains("`big.slow` timed out after 5s"),
        "{err}"
    );
    assert_eq!(summary.step("after").unwrap().status, StepStatus::Skipped);
    // Stopped at its deadline (the paused clock only moves to the next timer), and dropped.
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
    // The sub-step's failure was reported as a step's.
    assert!(bus.history().iter().any(|e| {
        e.step_id.as_deref() == Some("big.slow")
            && matches!(
                e.kind,
                EventKind::StepFailed {
                    category: ErrorCategory::Timeout,
                    ..
                }
            )
    }));
}

/// Regression: split-task sub-steps skipped the write-set checks. They now run in parallel
/// (the barriers only open with two running at once), yet two writers of one file never
/// overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_sub_steps_writing_the_same_file_never_run_at_the_same_time() {
    let m = Arc::new(Scripted::default());
    *m.barrier.lock().unwrap() = Some(Arc::new(Barrier::new(2)));
    let mut big = step("big", &[], "fail");
    big.config = json!({"do": "fail", "then": "split-writers"});
    let eng = Engine::builder()
        .module(m.clone())
        .recovery(Arc::new(SplitOrBypass))
        .max_parallel(4)
        .build();
    let summary = within(eng.run(plan(vec![big]), EventBus::new("r"), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded, "{summary:?}");
    assert_eq!(m.write_overlap.load(Ordering::SeqCst), 0);
    let log = m.log.lock().unwrap().clone();
    let at = |mark: Mark| log.iter().position(|m| *m == mark).unwrap();
    assert!(
        at(Mark::End("big.w1".into())) < at(Mark::Start("big.w2".into())),
        "{log:?}"
    );
}

/// Cancelling the run reaches running sub-steps (through their context's cancel signal, or by
/// dropping them) before `run` returns, and ends the run as cancelled, with the split step
/// failed as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_run_stops_a_running_split_sub_step() {
    let m = Arc::new(Scripted::default());
    let mut big = step("big", &[], "fail");
    big.config = json!({"do": "fail", "then": "split-until-cancelled"});
    let eng = Engine::builder()
        .module(m.clone())
        .recovery(Arc::new(SplitOrBypass))
        .build();
    let settings = RunSettings::default();
    let cancel = settings.cancel.clone();
    let m2 = m.clone();
    let trigger = tokio::spawn(async move {
        // `big` itself, then its two sub-steps.
        m2.until_started(3).await;
        cancel.cancel();
    });
    let summary = within(eng.run(
        plan(vec![big, step("after", &["big"], "ok")]),
        EventBus::new("r"),
        settings,
    ))
    .await
    .unwrap();
    trigger.await.unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    let big = summary.step("big").unwrap();
    assert_eq!(big.status, StepStatus::Failed);
    assert_eq!(
        big.error.as_deref().map(ModuleError::category),
        Some(ErrorCategory::Cancelled)
    );
    assert_eq!(summary.step("after").unwrap().status, StepStatus::Skipped);
    // No sub-step outlived the run.
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
    assert_eq!(m.dropped.load(Ordering::SeqCst), 3);
}

/// A module for the dispatcher's inline path: `{"do": "cancel" | "notify" | "check"}` cancels
/// the run, wakes a waiting task, or fails unless that task has run.
struct Probe {
    cancel: tokio_util::sync::CancellationToken,
    notify: Arc<Notify>,
    side_ran: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl Module for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        match step.config_value("do").and_then(|v| v.as_str()) {
            Some("cancel") => self.cancel.cancel(),
            Some("notify") => self.notify.notify_one(),
            Some("check") if !self.side_ran.load(Ordering::SeqCst) => {
                return Err(ModuleError::fatal(
                    ErrorCategory::Unknown,
                    "the waiting task never ran during the chain",
                ));
            }
            _ => {}
        }
        Ok(StepOutput::Empty)
    }
}

fn probe_chain(n: usize, special: &[(usize, &str)]) -> ExecutionPlan {
    let steps = (0..n)
        .map(|i| {
            let what = special
                .iter()
                .find(|(at, _)| *at == i)
                .map_or("ok", |(_, w)| *w);
            let s = PlanStep::new(format!("p{i}"), "probe").with_config(json!({ "do": what }));
            if i == 0 {
                s
            } else {
                s.depends_on([format!("p{}", i - 1)])
            }
        })
        .collect();
    ExecutionPlan {
        goal: "test".into(),
        outputs: Some(vec![format!("p{}", n - 1)]),
        steps,
        ..Default::default()
    }
}

fn probe_engine(
    settings: &RunSettings,
) -> (Engine, Arc<Notify>, Arc<std::sync::atomic::AtomicBool>) {
    let notify = Arc::new(Notify::new());
    let side_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let engine = Engine::builder()
        .module(Arc::new(Probe {
            cancel: settings.cancel.clone(),
            notify: notify.clone(),
            side_ran: side_ran.clone(),
        }))
        .max_parallel(4)
        .build();
    (engine, notify, side_ran)
}

/// A chain of steps that finish on their first poll runs in the dispatcher without tasks; a
/// cancellation in the middle of it still stops the chain at once.
#[tokio::test]
async fn cancelling_inside_a_chain_of_instant_steps_stops_it() {
    let settings = RunSettings::default();
    let (engine, _, _) = probe_engine(&settings);
    let summary = within(engine.run(
        probe_chain(200, &[(50, "cancel")]),
        EventBus::new("r"),
        settings,
    ))
    .await
    .unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    assert_eq!(summary.step("p50").unwrap().status, StepStatus::Succeeded);
    assert_eq!(summary.step("p51").unwrap().status, StepStatus::Skipped);
    assert_eq!(summary.count(StepStatus::Succeeded), 51);
}

/// The dispatcher gives the worker back while it runs a long chain inline: on a one-thread
/// runtime, a task woken early in the chain runs before the chain ends.
#[tokio::test(flavor = "current_thread")]
async fn a_long_inline_chain_lets_other_tasks_run() {
    let settings = RunSettings::default();
    let (engine, notify, side_ran) = probe_engine(&settings);
    let side = {
        let (notify, side_ran) = (notify.clone(), side_ran.clone());
        tokio::spawn(async move {
            notify.notified().await;
            side_ran.store(true, Ordering::SeqCst);
        })
    };
    let summary = within(engine.run(
        probe_chain(2000, &[(10, "notify"), (1999, "check")]),
        EventBus::new("r"),
        settings,
    ))
    .await
    .unwrap();
    side.await.unwrap();
    assert_eq!(
        summary.status,
        RunStatus::Succeeded,
        "{:?}",
        summary.step("p1999")
    );
}

/// A step that is not done at its first poll is polled again with a real waker (here in the
/// dispatcher's own task, as the only runnable step; beside others, in a task of its own):
/// its timer still ends it, and the failure and skips are exact.
#[tokio::test(start_paused = true)]
async fn a_chain_step_that_waits_moves_to_a_task_and_its_timeout_still_fires() {
    let m = Arc::new(Scripted::default());
    let mut slow = step("slow", &["first"], "hang");
    slow.timeout = Some(Duration::from_secs(5));
    let steps = vec![
        step("first", &[], "ok"),
        slow,
        step("after", &["slow"], "ok"),
    ];
    let summary =
        within(engine(&m, 4).run(plan(steps), EventBus::new("r"), RunSettings::default()))
            .await
            .unwrap();
    assert_eq!(summary.step("first").unwrap().status, StepStatus::Succeeded);
    let slow = summary.step("slow").unwrap();
    assert_eq!(slow.status, StepStatus::Failed);
    assert!(
        slow.error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("timed out"),
        "{:?}",
        slow.error
    );
    assert_eq!(summary.step("after").unwrap().status, StepStatus::Skipped);
    assert_eq!(m.dropped.load(Ordering::SeqCst), 2);
}

/// A module that panics while the dispatcher polls it inline fails its step like any panic.
#[tokio::test]
async fn a_panic_in_an_inline_step_fails_the_step_and_skips_its_dependents() {
    let m = Arc::new(Scripted::default());
    let steps = vec![
        step("a", &[], "ok"),
        step("boom", &["a"], "panic"),
        step("c", &["boom"], "ok"),
    ];
    let summary = engine(&m, 4)
        .run(plan(steps), EventBus::new("r"), RunSettings::default())
        .await
        .unwrap();
    let boom = summary.step("boom").unwrap();
    assert_eq!(boom.status, StepStatus::Failed);
    assert!(
        boom.error
            .as_ref()
            .unwrap()
            .to_string()
            .contains("panicked")
    );
    assert_eq!(summary.step("c").unwrap().status, StepStatus::Skipped);
    assert_eq!(summary.status, RunStatus::Failed);
}

/// A module that reports one event of its own while it runs, after yielding once, so it runs
/// in a task even when it is the only runnable step.
struct Emitter;

#[async_trait]
impl Module for Emitter {
    fn name(&self) -> &str {
        "emitter"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        ctx.emit(EventKind::InspectScanning {
            path: step.id.clone(),
        });
        tokio::task::yield_now().await;
        Ok(StepOutput::Value(json!(step.id)))
    }
}

/// Checks the order a consumer must be able to rely on: numbered from 0 without gaps, the run
/// framed by run:started and run:completed, and for every step ready < started < its own
/// events < succeeded, with a dependency's success before its dependent is ready.
fn assert_causal_order(events: &[Arc<nuvira_api::Event>], plan: &ExecutionPlan) {
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
    assert_eq!(events.first().unwrap().kind.name(), "run:started");
    assert_eq!(events.last().unwrap().kind.name(), "run:completed");
    let at = |step: &str, name: &str| {
        events
            .iter()
            .position(|e| e.step_id.as_deref() == Some(step) && e.kind.name() == name)
            .unwrap_or_else(|| panic!("no {name} for {step}"))
    };
    for s in &plan.steps {
        let (ready, started) = (at(&s.id, "step:ready"), at(&s.id, "step:started"));
        let (own, done) = (at(&s.id, "inspect:scanning"), at(&s.id, "step:succeeded"));
        assert!(ready < started && started < own && own < done, "{}", s.id);
        for d in &s.depends_on {
            assert!(at(d, "step:succeeded") < ready, "{d} before {}", s.id);
        }
    }
}

/// Lifecycle events are published in bursts and, without subscribers, kept compactly: the
/// history and a subscriber both see the causal order, and the history rebuilds exactly the
/// events a subscriber received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_keep_causal_order_in_history_and_for_subscribers() {
    let mut steps = vec![PlanStep::new("root", "emitter")];
    for i in 0..40 {
        steps.push(PlanStep::new(format!("mid{i}"), "emitter").depends_on(["root"]));
    }
    let mids: Vec<String> = (0..40).map(|i| format!("mid{i}")).collect();
    steps.push(PlanStep::new("sink", "emitter").depends_on(mids));
    let p = ExecutionPlan {
        goal: "order".into(),
        outputs: Some(vec!["sink".into()]),
        steps,
        ..Default::default()
    };
    let engine = Engine::builder()
        .module(Arc::new(Emitter))
        .max_parallel(8)
        .build();

    let quiet = EventBus::new("quiet");
    let s = within(engine.run(p.clone(), quiet.clone(), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(s.status, RunStatus::Succeeded);
    let kept = quiet.history();
    assert_causal_order(&kept, &p);
    assert!(kept.iter().all(|e| &*e.run_id == "quiet"));
    match &kept
        .iter()
        .find(|e| e.kind.name() == "step:succeeded")
        .unwrap()
        .kind
    {
        EventKind::StepSucceeded { output, .. } => {
            assert_eq!(**output, StepOutput::Value(json!("root")))
        }
        other => panic!("unexpected {other:?}"),
    }

    let watched = EventBus::new("watched");
    let mut rx = watched.subscribe();
    let s = within(engine.run(p.clone(), watched.clone(), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(s.status, RunStatus::Succeeded);
    watched.close();
    let mut seen = Vec::new();
    while let Some(e) = rx.recv().await {
        seen.push(e);
    }
    assert_causal_order(&seen, &p);
    let history = watched.history();
    assert_eq!(history.len(), seen.len());
    assert!(history.iter().zip(&seen).all(|(h, s)| Arc::ptr_eq(h, s)));
}

/// The history a quiet bus keeps compactly rebuilds, event for event, what a subscriber of a
/// watched bus receives in the same run: kinds (module names, outputs, durations aside),
/// step ids, sequence numbers and the run id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_history_rebuilds_what_a_subscriber_receives() {
    let mut steps = vec![PlanStep::new("s0", "emitter")];
    for i in 1..20 {
        steps.push(PlanStep::new(format!("s{i}"), "emitter").depends_on([format!("s{}", i - 1)]));
    }
    let p = ExecutionPlan {
        goal: "same".into(),
        outputs: Some(vec!["s19".into()]),
        steps,
        ..Default::default()
    };
    let engine = Engine::builder().module(Arc::new(Emitter)).build();
    let run = |bus: EventBus| {
        let (engine, p) = (&engine, p.clone());
        async move {
            let s = within(engine.run(p, bus, RunSettings::default()))
                .await
                .unwrap();
            assert_eq!(s.status, RunStatus::Succeeded);
        }
    };
    let quiet = EventBus::new("r");
    run(quiet.clone()).await;
    let watched = EventBus::with_history("r", false);
    let mut rx = watched.subscribe();
    run(watched.clone()).await;
    watched.close();
    let mut seen = Vec::new();
    while let Some(e) = rx.recv().await {
        seen.push(e);
    }
    // Durations (and the run's) are timings: compare everything else.
    let strip = |e: &nuvira_api::Event| {
        let kind = match &e.kind {
            EventKind::StepSucceeded { output, .. } => EventKind::StepSucceeded {
                duration_ms: 0,
                output: output.clone(),
            },
            EventKind::RunCompleted {
                status,
                succeeded,
                failed,
                skipped,
                ..
            } => EventKind::RunCompleted {
                status: *status,
                succeeded: *succeeded,
                failed: *failed,
                skipped: *skipped,
                duration_ms: 0,
            },
            other => other.clone(),
        };
        (e.seq, e.run_id.clone(), e.step_id.clone(), kind)
    };
    let kept: Vec<_> = quiet.history().iter().map(|e| strip(e)).collect();
    let received: Vec<_> = seen.iter().map(|e| strip(e)).collect();
    assert_eq!(kept.len(), 1 + 20 * 4 + 1);
    assert_eq!(kept, received);
}

/// Every step sees the plan being run.
struct PlanSize;

#[async_trait]
impl Module for PlanSize {
    fn name(&self) -> &str {
        "plan-size"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _s: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let plan = ctx.plan().map(|p| (p.goal.clone(), p.steps.len()));
        Ok(StepOutput::Value(json!(plan)))
    }
}

#[tokio::test]
async fn steps_see_the_plan_being_run() {
    let p = ExecutionPlan {
        goal: "see the plan".into(),
        outputs: Some(vec!["b".into()]),
        steps: vec![
            PlanStep::new("a", "plan-size"),
            PlanStep::new("b", "plan-size").depends_on(["a"]),
        ],
        ..Default::default()
    };
    let engine = Engine::builder().module(Arc::new(PlanSize)).build();
    let s = engine
        .run(p, EventBus::new("r"), RunSettings::default())
        .await
        .unwrap();
    for id in ["a", "b"] {
        let out = s.step(id).unwrap().output.clone().unwrap();
        assert_eq!(*out, StepOutput::Value(json!(["see the plan", 2])), "{id}");
    }
}

/// A module that answers with its own label.
struct Labelled(&'static str);

#[async_trait]
impl Module for Labelled {
    fn name(&self) -> &str {
        "labelled"
    }
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        Ok(StepOutput::Value(json!(self.0)))
    }
}

#[tokio::test]
async fn a_name_registered_twice_is_an_error_for_try_build_and_the_last_wins_for_build() {
    let Err(err) = Engine::builder()
        .module(Arc::new(Labelled("first")))
        .module(Arc::new(Labelled("second")))
        .try_build()
    else {
        panic!("a taken name is an error");
    };
    assert!(err.to_string().contains("labelled"), "{err}");

    let eng = Engine::builder()
        .module(Arc::new(Labelled("first")))
        .module(Arc::new(Labelled("second")))
        .build();
    let bus = EventBus::new("r");
    let p = plan(vec![PlanStep::new("only", "labelled")]);
    let summary = eng
        .run(p, bus.clone(), RunSettings::default())
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    let output = bus
        .history()
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::StepSucceeded { output, .. } => Some(output.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(*output, StepOutput::Value(json!("second")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_parallelism_starts_every_ready_step_at_once() {
    let m = Arc::new(Scripted::default());
    // 300 independent steps at a barrier of 300 on a 2-worker runtime: only a scheduler that
    // starts all of them together finishes (a cap of the CPU count would wait for ever).
    *m.barrier.lock().unwrap() = Some(Arc::new(Barrier::new(300)));
    let steps: Vec<_> = (0..300)
        .map(|i| step(&format!("s{i}"), &[], "barrier"))
        .collect();
    let engine = Engine::builder()
        .module(m.clone())
        .parallelism(nuvira::MaxParallel::Unbounded)
        .build();
    let bus = EventBus::new("unbounded");
    let summary = within(engine.run(plan(steps), bus.clone(), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert_eq!(m.max_running.load(Ordering::SeqCst), 300);
    // The announced cap is the number of steps, not usize::MAX.
    let announced = bus.history().into_iter().find_map(|e| match &e.kind {
        EventKind::RunStarted { max_parallel, .. } => Some(*max_parallel),
        _ => None,
    });
    assert_eq!(announced, Some(300));
}

#[tokio::test]
async fn a_run_shares_the_callers_plan_instead_of_copying_it() {
    let m = Arc::new(Scripted::default());
    let shared = Arc::new(plan(vec![step("a", &[], "ok"), step("b", &["a"], "ok")]));
    let bus = EventBus::new("shared");
    let summary = engine(&m, 2)
        .run(shared.clone(), bus.clone(), RunSettings::default())
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    let announced = bus.history().into_iter().find_map(|e| match &e.kind {
        EventKind::RunStarted { plan, .. } => Some(plan.clone()),
        _ => None,
    });
    assert!(
        Arc::ptr_eq(&announced.expect("run:started"), &shared),
        "the run announced a copy of the plan, not the caller's"
    );
}

#[test]
fn max_parallel_parses_its_names_and_numbers_and_rejects_zero() {
    use nuvira::MaxParallel;
    assert_eq!("cpus".parse(), Ok(MaxParallel::Cpus));
    assert_eq!("unbounded".parse(), Ok(MaxParallel::Unbounded));
    assert_eq!("3".parse(), Ok(MaxParallel::N(3)));
    let err = "0".parse::<MaxParallel>().unwrap_err().to_string();
    assert!(err.contains("`0`") && err.contains("unbounded"), "{err}");
    assert_eq!(MaxParallel::default(), MaxParallel::Cpus);
    assert_eq!(MaxParallel::Unbounded.get(), usize::MAX);
}

/// The resume hook: a step for which `prior_outcome` has an output is not run (its module is
/// never called) and succeeds with that output, which its dependents see; the others run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prior_outcome_replaces_running_the_step_and_feeds_its_dependents() {
    struct Reuse;
    impl nuvira::hooks::StepHooks for Reuse {
        fn prior_outcome(&self, step: &PlanStep, ctx: &StepContext) -> Option<StepOutput> {
            if step.id != "a" {
                return None;
            }
            ctx.emit(EventKind::Custom {
                name: "replayed".into(),
                data: json!(null),
            });
            Some(StepOutput::Value(json!("recorded")))
        }
    }
    let m = Arc::new(Scripted::default());
    let steps = vec![step("a", &[], "ok"), step("b", &["a"], "ok")];
    let bus = EventBus::with_history("r", true);
    let settings = RunSettings {
        hooks: Some(Arc::new(Reuse)),
        ..RunSettings::default()
    };
    let summary = within(engine(&m, 2).run(plan(steps), bus.clone(), settings))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    let started: Vec<String> = m
        .log()
        .iter()
        .filter_map(|mark| match mark {
            Mark::Start(id) => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["b"], "only b's module ran");
    let a = summary.step("a").unwrap();
    assert_eq!(
        a.output.as_deref(),
        Some(&StepOutput::Value(json!("recorded")))
    );
    let names: Vec<String> = bus
        .history()
        .iter()
        .filter(|e| e.step_id.as_deref() == Some("a"))
        .map(|e| e.kind.name().to_owned())
        .collect();
    assert_eq!(
        names,
        ["step:ready", "step:started", "custom", "step:succeeded"]
    );
}

/// The model hook: each attempt of each step gets the model the hook gives for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_llm_scopes_the_model_to_the_step_and_attempt() {
    struct Named(String);
    #[async_trait]
    impl nuvira_api::LlmClient for Named {
        fn model(&self) -> &str {
            &self.0
        }
        async fn complete(
            &self,
            _: &nuvira_api::LlmRequest,
        ) -> Result<nuvira_api::LlmResponse, nuvira_api::LlmError> {
            Err(nuvira_api::LlmError::Timeout)
        }
    }
    struct Scope;
    impl nuvira::hooks::StepHooks for Scope {
        fn step_llm(
            &self,
            _llm: &Arc<dyn nuvira_api::LlmClient>,
            step_id: &str,
            attempt: u32,
        ) -> Option<Arc<dyn nuvira_api::LlmClient>> {
            Some(Arc::new(Named(format!("{step_id}#{attempt}"))))
        }
    }
    struct Report;
    #[async_trait]
    impl Module for Report {
        fn name(&self) -> &str {
            "model"
        }
        async fn run(&self, _: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
            let name = ctx.llm().map(|l| l.model().to_owned()).unwrap_or_default();
            Ok(StepOutput::Value(json!(name)))
        }
    }
    let engine = Engine::builder()
        .module(Arc::new(Report))
        .llm(Arc::new(Named("run".into())))
        .build();
    let steps = vec![PlanStep::new("x", "model"), PlanStep::new("y", "model")];
    let settings = RunSettings {
        hooks: Some(Arc::new(Scope)),
        ..RunSettings::default()
    };
    let summary = within(engine.run(plan(steps), EventBus::new("r"), settings))
        .await
        .unwrap();
    for id in ["x", "y"] {
        assert_eq!(
            summary.step(id).unwrap().output.as_deref(),
            Some(&StepOutput::Value(json!(format!("{id}#1"))))
        );
    }
}

/// Independent steps of the probe module (`{"do": ...}` as in [`probe_chain`]).
fn probe_independent(n: usize, special: &[(usize, &str)]) -> ExecutionPlan {
    let mut p = probe_chain(n, special);
    for s in &mut p.steps {
        s.depends_on.clear();
    }
    p.outputs = Some(p.steps.iter().map(|s| s.id.clone()).collect());
    p
}

/// Independent steps that finish on their first poll are polled in the dispatcher, a wake-up's
/// worth at a time; one of them cancelling the run stops the rest at once (they are not all
/// run in place first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_inside_a_batch_of_instant_independent_steps_stops_it() {
    let settings = RunSettings::default();
    let (engine, _, _) = probe_engine(&settings);
    let summary = within(engine.run(
        probe_independent(200, &[(50, "cancel")]),
        EventBus::new("r"),
        settings,
    ))
    .await
    .unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    assert_eq!(summary.step("p50").unwrap().status, StepStatus::Succeeded);
    // The cap is 4: at most the three after p50 in its wake-up had started.
    assert!(summary.count(StepStatus::Succeeded) <= 54, "{summary:?}");
    assert!(summary.count(StepStatus::Skipped) >= 146);
}

/// A module whose steps block their thread for a while on the first poll (synchronous work):
/// each waits, up to 5 ms, for another of its steps to be inside at the same time, and
/// records the most that were.
#[derive(Default)]
struct Blocking {
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Module for Blocking {
    fn name(&self) -> &str {
        "blocking"
    }
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let until = std::time::Instant::now() + Duration::from_millis(5);
        while self.inside.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
        self.most
            .fetch_max(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(StepOutput::Empty)
    }
}

/// Like [`Blocking`], and counts the steps that waited their whole 5 ms alone.
#[derive(Default)]
struct BlockingAlone {
    inside: std::sync::atomic::AtomicUsize,
    alone: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Module for BlockingAlone {
    fn name(&self) -> &str {
        "blocking-alone"
    }
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        self.inside.fetch_add(1, Ordering::SeqCst);
        let until = std::time::Instant::now() + Duration::from_millis(5);
        let mut company = false;
        while std::time::Instant::now() < until {
            if self.inside.load(Ordering::SeqCst) >= 2 {
                company = true;
                break;
            }
            std::thread::yield_now();
        }
        if !company {
            self.alone.fetch_add(1, Ordering::SeqCst);
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(StepOutput::Empty)
    }
}

/// All 40 slow steps start in one wake-up of the dispatcher: once their module proved slow
/// (a few first polls), the rest of that same wake-up's steps get tasks instead of being
/// polled one after another in the dispatcher (where each would wait its 5 ms alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_first_polls_within_one_wake_up_stop_after_a_few() {
    let m = Arc::new(BlockingAlone::default());
    let engine = Engine::builder().module(m.clone()).max_parallel(64).build();
    let steps: Vec<_> = (0..40)
        .map(|i| PlanStep::new(format!("b{i}"), "blocking-alone"))
        .collect();
    let summary = within(engine.run(plan(steps), EventBus::new("r"), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    let alone = m.alone.load(Ordering::SeqCst);
    assert!(
        alone <= 12,
        "{alone} of 40 slow steps ran alone, one after another"
    );
}

/// Steps whose first poll is slow are not kept in the dispatcher, where they would run one
/// after another: after a few, their module's steps get tasks and run side by side on the
/// runtime's two workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_that_block_on_their_first_poll_get_tasks_and_run_side_by_side() {
    let m = Arc::new(Blocking::default());
    let engine = Engine::builder().module(m.clone()).max_parallel(4).build();
    let steps: Vec<_> = (0..40)
        .map(|i| PlanStep::new(format!("b{i}"), "blocking"))
        .collect();
    let summary = within(engine.run(plan(steps), EventBus::new("r"), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert!(m.most.load(Ordering::SeqCst) >= 2);
}

/// Steps that wait (here for the cancellation) stay in the dispatcher, polled there with
/// their own wakers: eight of them waiting at once cost no task each (the runtime counts the
/// dispatcher, the cancellation sentinel and this test's trigger), and the cancellation still
/// stops every one of them before `run` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_steps_cost_no_task_each_and_stop_at_the_cancellation() {
    let m = Arc::new(Scripted::default());
    let steps: Vec<_> = (0..8)
        .map(|i| step(&format!("w{i}"), &[], "until-cancelled"))
        .collect();
    let settings = RunSettings::default();
    let cancel = settings.cancel.clone();
    let m2 = m.clone();
    let trigger = tokio::spawn(async move {
        m2.until_started(8).await;
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        cancel.cancel();
        alive
    });
    let summary = within(engine(&m, 8).run(plan(steps), EventBus::new("r"), settings))
        .await
        .unwrap();
    let alive = trigger.await.unwrap();
    assert!(alive < 8, "{alive} tasks alive while 8 steps waited");
    assert_eq!(summary.status, RunStatus::Cancelled);
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
    assert_eq!(m.dropped.load(Ordering::SeqCst), 8);
}

/// Like [`Blocking`], after waiting once: the step is not done at its first poll, and its
/// second poll blocks its thread.
#[derive(Default)]
struct BlockingAfterWait(Blocking);

#[async_trait]
impl Module for BlockingAfterWait {
    fn name(&self) -> &str {
        "blocking-after-wait"
    }
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        tokio::task::yield_now().await;
        self.0.run(step, ctx).await
    }
}

/// Steps not done at their first poll stay in the dispatcher while their polls are quick;
/// when later polls prove slow (synchronous work after an await), the steps move to tasks
/// and run side by side on the runtime's two workers instead of one after another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_that_block_after_waiting_get_tasks_and_run_side_by_side() {
    let m = Arc::new(BlockingAfterWait::default());
    let engine = Engine::builder().module(m.clone()).max_parallel(4).build();
    let steps: Vec<_> = (0..40)
        .map(|i| PlanStep::new(format!("b{i}"), "blocking-after-wait"))
        .collect();
    let summary = within(engine.run(plan(steps), EventBus::new("r"), RunSettings::default()))
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert!(m.0.most.load(Ordering::SeqCst) >= 2);
}

/// The only runnable step runs in the dispatcher's own task (no task of its own): a
/// cancellation still stops it at its next await, and its future is dropped before `run`
/// returns, as an aborted task's would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_only_running_step_drops_it_before_run_returns() {
    let m = Arc::new(Scripted::default());
    let steps = vec![
        step("first", &[], "ok"),
        step("hang", &["first"], "hang"),
        step("after", &["hang"], "ok"),
    ];
    let settings = RunSettings::default();
    let cancel = settings.cancel.clone();
    let m2 = m.clone();
    let trigger = tokio::spawn(async move {
        m2.until_started(2).await;
        cancel.cancel();
    });
    let summary = within(engine(&m, 4).run(plan(steps), EventBus::new("r"), settings))
        .await
        .unwrap();
    trigger.await.unwrap();
    assert_eq!(summary.status, RunStatus::Cancelled);
    assert_eq!(m.running.load(Ordering::SeqCst), 0);
    assert_eq!(m.dropped.load(Ordering::SeqCst), 2);
    let hang = summary.step("hang").unwrap();
    assert_eq!(hang.status, StepStatus::Failed);
    assert!(matches!(
        hang.error.as_deref(),
        Some(ModuleError::Cancelled)
    ));
    assert_eq!(summary.step("after").unwrap().status, StepStatus::Skipped);
}

/// A hook that holds the wait of every step that may change files until the test opens it,
/// and counts how often a wait was asked for.
struct HeldChanges {
    open: tokio::sync::watch::Sender<bool>,
    asked: std::sync::atomic::AtomicUsize,
    asked_note: Notify,
}

impl nuvira::hooks::StepHooks for HeldChanges {
    /// Each step's model is its own (as the run history's call log makes it), so each step's
    /// context is changed by the scheduler (`with_llm`).
    fn step_llm(
        &self,
        llm: &Arc<dyn nuvira_api::LlmClient>,
        _step_id: &str,
        _attempt: u32,
    ) -> Option<Arc<dyn nuvira_api::LlmClient>> {
        Some(llm.clone())
    }

    fn before_run(&self, _step: &PlanStep, writes: &WriteSet) -> Option<nuvira::hooks::Wait> {
        if matches!(writes, WriteSet::ReadOnly) {
            return None;
        }
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.asked_note.notify_one();
        let mut rx = self.open.subscribe();
        Some(Box::pin(async move {
            let _ = rx.wait_for(|open| *open).await;
        }))
    }
}

/// A module that may change files: it notes when it starts and when it goes on to change
/// them, waiting for [`StepContext::before_changes`] itself in between when it says so.
struct Changer {
    waits_itself: bool,
    /// Declares a read-only write set (as a test step whose repair edits does).
    read_only: bool,
    log: std::sync::Mutex<Vec<&'static str>>,
    started: Notify,
}

#[async_trait]
impl Module for Changer {
    fn name(&self) -> &str {
        "changer"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        if self.read_only {
            WriteSet::ReadOnly
        } else {
            WriteSet::Exclusive
        }
    }
    fn calls_before_changes(&self) -> bool {
        self.waits_itself
    }
    async fn run(&self, _s: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        self.log.lock().unwrap().push("started");
        self.started.notify_one();
        if self.waits_itself {
            ctx.before_changes().await;
        }
        self.log.lock().unwrap().push("changing");
        Ok(StepOutput::Empty)
    }
}

/// One step of a [`Changer`] under a [`HeldChanges`] hook: what the module had done once the
/// hook was asked for the wait (and the module started, when it waits itself), and how often
/// the hook was asked.
/// A model that is never asked anything.
struct Unused;

#[async_trait]
impl nuvira_api::LlmClient for Unused {
    fn model(&self) -> &str {
        "unused:v1"
    }
    async fn complete(
        &self,
        _request: &nuvira_api::LlmRequest,
    ) -> Result<nuvira_api::LlmResponse, nuvira_api::LlmError> {
        unreachable!("the changer asks no model")
    }
}

async fn changer_under_held_wait(
    waits_itself: bool,
    read_only: bool,
    with_model: bool,
) -> (Vec<&'static str>, usize) {
    let module = Arc::new(Changer {
        waits_itself,
        read_only,
        log: std::sync::Mutex::new(Vec::new()),
        started: Notify::new(),
    });
    let hooks = Arc::new(HeldChanges {
        open: tokio::sync::watch::channel(false).0,
        asked: 0.into(),
        asked_note: Notify::new(),
    });
    let mut engine = Engine::builder().module(module.clone());
    if with_model {
        engine = engine.llm(Arc::new(Unused));
    }
    let engine = engine.build();
    let settings = RunSettings {
        hooks: Some(hooks.clone()),
        ..RunSettings::default()
    };
    let run = tokio::spawn(async move {
        engine
            .run(
                plan(vec![PlanStep::new("c", "changer")]),
                EventBus::new("r"),
                settings,
            )
            .await
    });
    within(hooks.asked_note.notified()).await;
    if waits_itself {
        within(module.started.notified()).await;
    }
    let before = module.log.lock().unwrap().clone();
    hooks.open.send_replace(true);
    let summary = within(run).await.unwrap().unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    assert_eq!(*module.log.lock().unwrap(), ["started", "changing"]);
    (before, hooks.asked.load(Ordering::SeqCst))
}

/// A module that waits for `before_changes` itself starts while the hook's wait is held (the
/// wait overlaps its own work), changes nothing until the wait ends, and the hook is asked
/// once (by the module, not also by the scheduler up front).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_waits_itself_starts_at_once_and_changes_only_after_the_wait() {
    let (before, asked) = changer_under_held_wait(true, false, false).await;
    assert_eq!(before, ["started"]);
    assert_eq!(asked, 1);
}

/// The same when the scheduler gives the step a model of its own (what a recorded run with a
/// model does to every step): the changed context still waits in the engine's scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_waits_itself_still_waits_with_a_model_of_its_own() {
    let (before, asked) = changer_under_held_wait(true, false, true).await;
    assert_eq!(before, ["started"]);
    assert_eq!(asked, 1);
}

/// A module that calls `before_changes` under a read-only step (a repair editing under a test
/// step) waits as a writing step does: the hook, which holds only writing steps, is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_changes_waits_as_for_a_writing_step_even_under_a_read_only_write_set() {
    let (before, asked) = changer_under_held_wait(true, true, false).await;
    assert_eq!(before, ["started"]);
    assert_eq!(asked, 1);
}

/// Any other module that may change files starts only once the hook's wait ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_does_not_wait_itself_starts_only_after_the_wait() {
    let (before, asked) = changer_under_held_wait(false, false, false).await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(asked, 1);
}

/// Notes the bus's `settled_len` and `len` when it runs.
struct SettledProbe {
    bus: EventBus,
    seen: std::sync::Mutex<Option<(u64, u64)>>,
}

#[async_trait]
impl Module for SettledProbe {
    fn name(&self) -> &str {
        "probe"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        *self.seen.lock().unwrap() = Some((self.bus.settled_len(), self.bus.len()));
        Ok(StepOutput::Empty)
    }
}

/// What the scheduler publishes moves `settled_len` to its newest step end: when a step runs,
/// it counts its dependency's `step:succeeded` and everything before, not its own start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bus_is_settled_up_to_the_newest_step_end_when_a_step_runs() {
    for subscribed in [false, true] {
        let bus = EventBus::new("r");
        let _rx = subscribed.then(|| bus.subscribe());
        let probe = Arc::new(SettledProbe {
            bus: bus.clone(),
            seen: std::sync::Mutex::new(None),
        });
        let m = Arc::new(Scripted::default());
        let engine = Engine::builder().module(m).module(probe.clone()).build();
        let steps = vec![
            step("a", &[], "ok"),
            PlanStep::new("b", "probe").depends_on(["a"]),
        ];
        let summary = within(engine.run(plan(steps), bus.clone(), RunSettings::default()))
            .await
            .unwrap();
        assert_eq!(summary.status, RunStatus::Succeeded);
        let (settled, len) = probe.seen.lock().unwrap().unwrap();
        let history = bus.history();
        let a_end = history
            .iter()
            .find(|e| e.step_id.as_deref() == Some("a") && e.kind.name() == "step:succeeded")
            .unwrap()
            .seq;
        let b_start = history
            .iter()
            .find(|e| e.step_id.as_deref() == Some("b") && e.kind.name() == "step:started")
            .unwrap()
            .seq;
        assert_eq!(settled, a_end + 1, "subscribed: {subscribed}");
        assert!(
            len > b_start && b_start >= settled,
            "{len} {b_start} {settled}"
        );
    }
}

/// `scheduler::run` given one module for steps that name it differently (two names registered
/// for one module): each step's `step:started` names its own step's module, live and in the
/// history alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_module_under_two_names_gives_each_step_its_own_name() {
    let steps = vec![
        PlanStep::new("a", "first-name"),
        PlanStep::new("b", "second-name").depends_on(["a"]),
        PlanStep::new("c", "first-name").depends_on(["b"]),
    ];
    let validated = nuvira::validate::validate(&plan(steps), None).unwrap();
    let module: Arc<dyn Module> = Arc::new(Changer {
        waits_itself: false,
        read_only: true,
        log: std::sync::Mutex::new(Vec::new()),
        started: Notify::new(),
    });
    let bus = EventBus::new("r");
    let mut rx = bus.subscribe();
    let summary = within(nuvira::scheduler::run(
        Arc::new(validated),
        vec![module.clone(), module.clone(), module],
        vec![WriteSet::ReadOnly; 3],
        bus.clone(),
        nuvira::RunOptions {
            max_parallel: 2,
            ..nuvira::RunOptions::new(".")
        },
    ))
    .await;
    assert_eq!(summary.status, RunStatus::Succeeded);
    bus.close();
    let mut live = Vec::new();
    while let Some(ev) = rx.recv().await {
        if let EventKind::StepStarted { module, .. } = &ev.kind {
            live.push(module.to_string());
        }
    }
    let kept: Vec<String> = (bus.history().iter())
        .filter_map(|ev| match &ev.kind {
            EventKind::StepStarted { module, .. } => Some(module.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(live, ["first-name", "second-name", "first-name"]);
    assert_eq!(kept, live);
}
