//! What the scheduler benches share: the no-op, sleeping and yielding modules, the
//! hand-written JoinSet baseline, the runtime, and the competing process. Used by
//! `benches/scheduler.rs` (wall time, criterion) and `benches/scheduler_icount.rs`
//! (instruction counts under callgrind), so both measure the same baseline.
#![allow(dead_code)]

use nuvira_api::{Module, ModuleError, PlanStep, StepContext, StepOutput, WriteSet, async_trait};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

pub const CAP: usize = 128;

pub struct Noop;

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

pub struct Sleep;

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
pub struct YieldOnce;

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
pub async fn baseline(
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

/// The baseline's driver with steps that each sleep 1 ms, as the `Sleep` module does: the
/// makespan a hand-written driver gets on the same graph under the same 1 ms timer.
pub async fn baseline_sleep(
    children: Arc<Vec<Vec<usize>>>,
    indeg: Arc<Vec<usize>>,
    cap: usize,
) -> usize {
    baseline_steps(children, indeg, cap, |i| async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        i
    })
    .await
}

/// The baseline's Kahn + JoinSet driver with any step: `step(i)` runs step `i` and returns `i`.
pub async fn baseline_steps<F, Fut>(
    children: Arc<Vec<Vec<usize>>>,
    indeg: Arc<Vec<usize>>,
    cap: usize,
    step: F,
) -> usize
where
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = usize> + Send + 'static,
{
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
                set.spawn(step(i));
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

/// The baseline's Kahn driver with its steps polled in its own task (`FuturesUnordered`), no
/// task per step: what a driver that never crosses threads gets on the same graph.
pub async fn baseline_one_task(
    children: Arc<Vec<Vec<usize>>>,
    indeg: Arc<Vec<usize>>,
    cap: usize,
) -> usize {
    use futures::StreamExt;
    tokio::spawn(async move {
        let mut remaining = (*indeg).clone();
        let mut ready: VecDeque<usize> = (0..remaining.len())
            .filter(|&i| remaining[i] == 0)
            .collect();
        let mut set = futures::stream::FuturesUnordered::new();
        let mut in_flight = 0;
        let mut done = 0;
        loop {
            while in_flight < cap {
                let Some(i) = ready.pop_front() else { break };
                set.push(Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    i
                }));
                in_flight += 1;
            }
            match set.next().await {
                Some(i) => {
                    in_flight -= 1;
                    done += 1;
                    for &c in &children[i] {
                        remaining[c] -= 1;
                        if remaining[c] == 0 {
                            ready.push_back(c);
                        }
                    }
                }
                None => break,
            }
        }
        done
    })
    .await
    .unwrap_or(0)
}

/// The makespan graph of `benches/scheduler.rs`: 20 layers of 10 steps that each sleep 1 ms
/// (`module`), 1–3 dependencies in the layer before, one sink (critical path 21 steps).
pub fn makespan_plan(module: &str) -> nuvira_api::ExecutionPlan {
    crate::common::layered(20, 10, module, 5)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
}

/// A process that keeps one core busy while it lives (`sh` spinning in a loop): the "one core
/// taken by another process" condition of issue 17, in the same bench run as the quiet one.
pub struct Competitor(std::process::Child);

impl Competitor {
    pub fn start() -> Self {
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
