//! Scheduling overhead per step, against a hand-written tokio baseline in the same run.
//!
//! Graphs of 10,000 no-op steps: a layered random DAG, a chain, and independent steps. The
//! baseline is what DESIGN.md describes: a Kahn driver spawned onto a worker, dependency
//! counters, each ready step spawned into a `JoinSet`, the same in-flight cap. Nuvira runs
//! the same graphs through `Engine::run_validated` with its real event bus (history kept).
//!
//! Nuvira polls each step once in its dispatcher before giving it a task, so no-op steps
//! never spawn. In `chain-yield` every step, in the baseline and in Nuvira, yields once
//! before it finishes (it is not done at its first poll): the baseline's yield goes through
//! the runtime; Nuvira awaits the only runnable step in its dispatcher, polled again at once
//! after a first poll with a no-op waker, so such a step costs it no task and no round trip. `benches/scheduler_icount.rs` runs the same
//! drivers one at a time for callgrind's instruction counts (`scripts/sched-icount.sh`).
//!
//! A second group measures makespan on a layered graph of 1 ms sleep steps against the
//! critical path's own sleeps run back to back in one task (the bound no scheduler can beat),
//! and the baseline's makespan on the same graph (what the 1 ms timer costs any driver), also
//! with its steps polled in its own task (`baseline-one-task`: no task per step, as Nuvira
//! keeps waiting steps resident in its dispatcher).
//! `scheduler_icount makespan DRIVER-stamped RUNS` shows where that time goes natively: the
//! dispatch latency from a step's last dependency waking to the step starting, and the
//! length of the sleeps themselves.
//!
//! A third group runs the baseline and Nuvira (history off) on the same graphs while a
//! competing process spins on one of the machine's cores, started and stopped by the bench.
//!
//! `cargo bench --bench scheduler`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::RunStatus;
use std::sync::Arc;
use std::time::Duration;

mod common;

mod scheduler_drivers;
use scheduler_drivers::{
    CAP, Competitor, Noop, Sleep, YieldOnce, baseline, baseline_one_task, baseline_sleep,
    makespan_plan, runtime,
};

fn overhead(c: &mut Criterion) {
    overhead_in(c, "schedule-10k", false);
}

/// The same graphs while a competing process holds one of the two cores.
fn overhead_loaded(c: &mut Criterion) {
    let _competitor = Competitor::start();
    overhead_in(c, "schedule-10k-one-core-taken", true);
}

fn overhead_in(c: &mut Criterion, group_name: &str, loaded: bool) {
    let rt = runtime();
    let engine = Engine::builder()
        .module(Arc::new(Noop))
        .module(Arc::new(YieldOnce))
        .max_parallel(CAP)
        .build();
    let graphs = [
        ("layered", common::layered(100, 100, "noop", 11)),
        ("chain", common::chain(10_000, "noop")),
        ("independent", common::independent(10_000, "noop")),
        ("chain-yield", common::chain(10_000, "yield")),
    ];
    let mut group = c.benchmark_group(group_name);
    group.sample_size(20);
    for (name, plan) in graphs {
        let validated = Arc::new(engine.validate(&plan).unwrap_or_else(|e| panic!("{e}")));
        let children = Arc::new(validated.children().to_lists());
        let indeg = Arc::new(
            validated
                .parents()
                .iter()
                .map(<[u32]>::len)
                .collect::<Vec<_>>(),
        );
        let n = validated.plan.steps.len();
        let yielding = name.ends_with("-yield");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("baseline-joinset", name), |b| {
            b.to_async(&rt).iter(|| {
                let (ch, ind) = (children.clone(), indeg.clone());
                async move {
                    let done = baseline(ch, ind, CAP, yielding).await;
                    assert_eq!(done, n);
                }
            })
        });
        if !loaded {
            group.bench_function(BenchmarkId::new("nuvira", name), |b| {
                b.to_async(&rt).iter(|| {
                    let (engine, plan) = (&engine, validated.clone());
                    async move {
                        let s = engine
                            .run_validated(plan, EventBus::new("bench"), RunSettings::default())
                            .await;
                        assert_eq!(s.status, RunStatus::Succeeded);
                    }
                })
            });
        }
        group.bench_function(BenchmarkId::new("nuvira-no-history", name), |b| {
            b.to_async(&rt).iter(|| {
                let (engine, plan) = (&engine, validated.clone());
                async move {
                    let s = engine
                        .run_validated(
                            plan,
                            EventBus::with_history("bench", false),
                            RunSettings::default(),
                        )
                        .await;
                    assert_eq!(s.status, RunStatus::Succeeded);
                }
            })
        });
    }
    group.finish();
}

fn makespan(c: &mut Criterion) {
    let rt = runtime();
    let engine = Engine::builder()
        .module(Arc::new(Sleep))
        .max_parallel(CAP)
        .build();
    let plan = makespan_plan("sleep");
    let validated = Arc::new(engine.validate(&plan).unwrap_or_else(|e| panic!("{e}")));
    let path = validated.critical_path_len();
    let children = Arc::new(validated.children().to_lists());
    let indeg = Arc::new(
        validated
            .parents()
            .iter()
            .map(<[u32]>::len)
            .collect::<Vec<_>>(),
    );
    let n = validated.plan.steps.len();
    let mut group = c.benchmark_group("makespan-1ms-steps");
    group.sample_size(20);
    group.bench_function(BenchmarkId::new("critical-path-bound", path), |b| {
        b.to_async(&rt).iter(|| async move {
            for _ in 0..path {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    });
    // The hand-written driver on the same graph and the same 1 ms timer: what part of the
    // makespan over the bound any driver gets (each 1 ms sleep takes ~2.1 ms on tokio's 1 ms
    // wheel, and the graph's parallel timers wake later than one task's).
    group.bench_function(BenchmarkId::new("baseline-joinset", path), |b| {
        b.to_async(&rt).iter(|| {
            let (ch, ind) = (children.clone(), indeg.clone());
            async move {
                let done = baseline_sleep(ch, ind, CAP).await;
                assert_eq!(done, n);
            }
        })
    });
    // The same driver with its steps polled in its own task (no task per step): the
    // makespan of a driver that never wakes another worker.
    group.bench_function(BenchmarkId::new("baseline-one-task", path), |b| {
        b.to_async(&rt).iter(|| {
            let (ch, ind) = (children.clone(), indeg.clone());
            async move {
                let done = baseline_one_task(ch, ind, CAP).await;
                assert_eq!(done, n);
            }
        })
    });
    group.bench_function(BenchmarkId::new("nuvira", path), |b| {
        b.to_async(&rt).iter(|| {
            let (engine, plan) = (&engine, validated.clone());
            async move {
                engine
                    .run_validated(plan, EventBus::new("bench"), RunSettings::default())
                    .await
            }
        })
    });
    group.finish();
}

criterion_group!(benches, overhead, overhead_loaded, makespan);
criterion_main!(benches);
