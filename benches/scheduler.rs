//! Scheduling overhead per step, against a hand-written tokio baseline in the same run.
//!
//! Graphs of 10,000 no-op steps: a layered random DAG, a chain, and independent steps. The
//! baseline is what DESIGN.md describes: a Kahn driver spawned onto a worker, dependency
//! counters, each ready step spawned into a `JoinSet`, the same in-flight cap. Nuvira runs
//! the same graphs through `Engine::run_validated` with its real event bus (history kept).
//!
//! Nuvira polls a step that is the only runnable work in its dispatcher before giving it a
//! task, so a chain of no-op steps never spawns. `chain-yield` shows the task path on a chain:
//! every step, in the baseline and in Nuvira, yields once before it finishes.
//!
//! A second group measures makespan on a layered graph of 1 ms sleep steps against the
//! critical path's own sleeps run back to back in one task (the bound no scheduler can beat).
//!
//! A third group runs the baseline and Nuvira (history off) on the same graphs while a
//! competing process spins on one of the machine's cores, started and stopped by the bench.
//!
//! `cargo bench --bench scheduler`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::{
    Module, ModuleError, PlanStep, RunStatus, StepContext, StepOutput, WriteSet, async_trait,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

mod common;

const CAP: usize = 128;

struct Noop;

#[async_trait]
impl Module for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        Ok(StepOutput::Empty)
    }
}

struct Sleep;

#[async_trait]
impl Module for Sleep {
    fn name(&self) -> &str {
        "sleep"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(StepOutput::Empty)
    }
}

/// A step that is not done at its first poll.
struct YieldOnce;

#[async_trait]
impl Module for YieldOnce {
    fn name(&self) -> &str {
        "yield"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        tokio::task::yield_now().await;
        Ok(StepOutput::Empty)
    }
}

async fn noop_step(i: usize, yielding: bool) -> usize {
    if yielding {
        tokio::task::yield_now().await;
    }
    std::hint::black_box(i)
}

/// The hand-written baseline: Kahn's algorithm with a JoinSet, driven by a spawned task.
async fn baseline(
    children: Arc<Vec<Vec<usize>>>,
    indeg: Arc<Vec<usize>>,
    cap: usize,
    yielding: bool,
) -> usize {
    tokio::spawn(async move {
        let mut remaining = (*indeg).clone();
        let mut ready: VecDeque<usize> = (0..remaining.len())
            .filter(|&i| remaining[i] == 0)
            .collect();
        let mut set = JoinSet::new();
        let mut in_flight = 0;
        let mut done = 0;
        loop {
            while in_flight < cap {
                let Some(i) = ready.pop_front() else { break };
                set.spawn(noop_step(i, yielding));
                in_flight += 1;
            }
            match set.join_next().await {
                Some(Ok(i)) => {
                    in_flight -= 1;
                    done += 1;
                    for &c in &children[i] {
                        remaining[c] -= 1;
                        if remaining[c] == 0 {
                            ready.push_back(c);
                        }
                    }
                }
                Some(Err(_)) | None => break,
            }
        }
        done
    })
    .await
    .unwrap_or(0)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
}

/// A process that keeps one core busy while it lives (`sh` spinning in a loop): the "one core
/// taken by another process" condition of issue 17, in the same bench run as the quiet one.
struct Competitor(std::process::Child);

impl Competitor {
    fn start() -> Self {
        let child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the competing process: {e}"));
        Self(child)
    }
}

impl Drop for Competitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let plan = common::layered(20, 10, "sleep", 5);
    let validated = Arc::new(engine.validate(&plan).unwrap_or_else(|e| panic!("{e}")));
    let path = validated.critical_path_len();
    let mut group = c.benchmark_group("makespan-1ms-steps");
    group.sample_size(20);
    group.bench_function(BenchmarkId::new("critical-path-bound", path), |b| {
        b.to_async(&rt).iter(|| async move {
            for _ in 0..path {
                tokio::time::sleep(Duration::from_millis(1)).await;
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
