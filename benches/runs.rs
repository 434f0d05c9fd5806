//! The cost of the run history (issue 14), side by side with the same run unrecorded:
//!
//! - `recording/noop/*`: the scheduler bench's 1,000 no-op steps (10 layers of 100), with the
//!   history off (a bare bus), `on` (what `nuvira run` does: one group-commit writer for
//!   `events.jsonl` and `steps.jsonl`, which also writes `run.json` and `plan.json`, with a
//!   sync thread beside it that fsyncs both at step boundaries; see `nuvira::runs::writer`),
//!   and `on-two-writers` (the way before: the
//!   engine's JSONL writer and the steps log on two threads, `plan.json` and `run.json`
//!   written before the run starts, `report.json` and `run.json` one after the other);
//! - `recording/sleep_1ms/*`: 1,000 steps of 1 ms (100 layers of 10, 10 at a time), the same
//!   three;
//! - `recording/sleep_1ms_writes/*`: the same steps declaring a write set, each shaped like an
//!   edit step: 1 ms of its own work, then [`StepContext::before_changes`] (it waits there
//!   until the records of the steps that ended before it are written: what resume relies on),
//!   then its change;
//! - `recording/sleep_1ms_writes_first/*`: the same, from a module that does not wait itself
//!   ([`Module::calls_before_changes`] `false`), so the engine makes each step wait before it
//!   runs: the wait does not overlap the step's work;
//! - `runs_list/1000`: `RunStore::list` over 1,000 stored runs (what `nuvira runs` reads).
//!
//! `cargo bench --bench runs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use criterion::{Criterion, criterion_group, criterion_main};
use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::{
    ExecutionPlan, Module, ModuleError, PlanStep, RunStatus, StepContext, StepOutput, WriteSet,
    async_trait,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod common;

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

/// A step that declares it writes a file of its own and, like the edit module, does 1 ms of
/// work, then waits for the run's records (durability) right before its change.
struct SleepWrites;

#[async_trait]
impl Module for SleepWrites {
    fn name(&self) -> &str {
        "sleep-writes"
    }
    fn write_set(&self, s: &PlanStep) -> WriteSet {
        WriteSet::paths([format!("out/{}", s.id)])
    }
    fn calls_before_changes(&self) -> bool {
        true
    }
    async fn run(&self, _s: &PlanStep, c: &StepContext) -> Result<StepOutput, ModuleError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        c.before_changes().await;
        Ok(StepOutput::Empty)
    }
}

/// A 1 ms step that declares it writes a file of its own, from a module that leaves the wait
/// for durability to the engine (before it runs).
struct SleepWritesFirst;

#[async_trait]
impl Module for SleepWritesFirst {
    fn name(&self) -> &str {
        "sleep-writes-first"
    }
    fn write_set(&self, s: &PlanStep) -> WriteSet {
        WriteSet::paths([format!("out/{}", s.id)])
    }
    async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(StepOutput::Empty)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
}

static RUN: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy, PartialEq)]
enum Record {
    Off,
    On,
    TwoWriters,
}

/// One run of `plan`, recorded into `ws`'s history as `nuvira run` records it, or not.
async fn one_run(
    engine: &Engine,
    plan: &ExecutionPlan,
    ws: &nuvira_workspace::Workspace,
    record: Record,
) {
    use nuvira::runs::record::RunRecorder;
    let id = format!("run-bench-{}", RUN.fetch_add(1, Ordering::Relaxed));
    let bus = EventBus::new(id.as_str());
    let mut settings = RunSettings::default();
    let mut writer = None;
    let mut two = None;
    let rec = match record {
        Record::Off => None,
        Record::On => {
            let rec = RunRecorder::prepare(ws, &id, plan, false).unwrap();
            let w = rec.start_writer(&bus).unwrap();
            let hooks = nuvira::runs::resume::RunHooks {
                durable: Some(w.durable()),
                ..Default::default()
            };
            settings.hooks = Some(Arc::new(hooks));
            writer = Some(w);
            Some(rec)
        }
        Record::TwoWriters => {
            let rec = RunRecorder::create(ws, &id, plan, false).unwrap();
            let (file, path) = rec.events_file().unwrap();
            let events = nuvira::events::JsonlStore::spawn_file(&bus, file, &path, true);
            let steps = rec.steps_log(&bus).unwrap();
            two = Some((events, steps));
            Some(rec)
        }
    };
    let summary = engine
        .run(plan.clone(), bus.clone(), settings)
        .await
        .unwrap();
    assert_eq!(summary.status, RunStatus::Succeeded);
    bus.close();
    if let Some(w) = writer {
        w.finish().await.unwrap();
    }
    if let Some((events, steps)) = two {
        events.finish().await.unwrap();
        steps.await.unwrap().unwrap();
    }
    if let Some(rec) = rec {
        let report = nuvira_api::ExecutionReport::default();
        if record == Record::TwoWriters {
            // The way before: report.json, then run.json, each with its own syncs.
            let bytes = serde_json::to_vec_pretty(&report).unwrap();
            nuvira_workspace::atomic_write(&rec.dir().join("report.json"), &bytes, Some(0o600))
                .unwrap();
            let meta = std::fs::read(rec.dir().join("run.json")).unwrap();
            nuvira_workspace::atomic_write(&rec.dir().join("run.json"), &meta, Some(0o600))
                .unwrap();
        } else {
            rec.finish(&report, "succeeded", 0).unwrap();
        }
    }
}

fn recording(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let ws = nuvira_workspace::Workspace::open(dir.path()).unwrap();
    let mut group = c.benchmark_group("recording");
    group.sample_size(10);
    for (name, module, layers, width, parallel) in [
        ("noop", "noop", 10, 100, 128),
        ("sleep_1ms", "sleep", 100, 10, 10),
        ("sleep_1ms_writes", "sleep-writes", 100, 10, 10),
        ("sleep_1ms_writes_first", "sleep-writes-first", 100, 10, 10),
    ] {
        let plan = common::layered(layers, width, module, 7);
        let engine = Engine::builder()
            .module(Arc::new(Noop))
            .module(Arc::new(Sleep))
            .module(Arc::new(SleepWrites))
            .module(Arc::new(SleepWritesFirst))
            .max_parallel(parallel)
            .build();
        for (variant, record) in [
            ("off", Record::Off),
            ("on", Record::On),
            ("on-two-writers", Record::TwoWriters),
        ] {
            group.bench_function(format!("{name}/{variant}"), |b| {
                b.iter(|| rt.block_on(one_run(&engine, &plan, &ws, record)));
            });
        }
        // Keep the folder from growing between groups.
        let _ = std::fs::remove_dir_all(dir.path().join(".nuvira/runs"));
    }
    group.finish();
}

fn runs_list(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join(".nuvira/runs");
    for i in 0..1000u64 {
        let id = format!("run-{}-{i:04x}", 1_764_580_000 + i);
        let d = runs.join(&id);
        std::fs::create_dir_all(&d).unwrap();
        let meta = serde_json::json!({
            "format": 1, "id": id, "goal": "fix the parser", "status": "succeeded",
            "started_ms": 1_764_580_000_000u64 + i * 1000, "ended_ms": 1_764_580_000_500u64 + i * 1000,
            "duration_ms": 500, "pid": 1, "exit_code": 0, "steps": 5,
            "usage": { "calls": 3, "input_tokens": 1000, "output_tokens": 100, "cost_usd": 0.01 }
        });
        std::fs::write(d.join("run.json"), meta.to_string()).unwrap();
    }
    let store = nuvira::runs::RunStore::open(dir.path()).unwrap();
    let mut group = c.benchmark_group("runs_list");
    group.sample_size(20);
    group.bench_function("1000", |b| {
        b.iter(|| assert_eq!(store.list().unwrap().len(), 1000));
    });
    group.finish();
}

criterion_group!(benches, recording, runs_list);
criterion_main!(benches);
