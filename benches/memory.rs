//! Peak heap per step of a 10,000-step run, against the hand-written Kahn + `JoinSet` driver
//! of the scheduler bench, in the same process (issue 17's target: ≤ 300 bytes per step with
//! the event history off).
//!
//! A counting global allocator records the live heap and its peak. Each measurement starts
//! with the plan already built (the caller's data, not counted), resets the peak, and reports
//! the peak minus the heap before, divided by the steps: what running the plan costs beyond
//! holding it. Nuvira is measured through `Engine::run` (validation included, the plan moved
//! in) and through `validate` alone; the baseline builds its adjacency lists from the same
//! plan and runs the same no-op steps.
//!
//! `cargo bench --bench memory` (a plain bench binary: it prints a table, it times nothing).
#![allow(
    unsafe_code,
    reason = "a counting global allocator forwards to the system one: the only unsafe code here"
)]

use nuvira::{Engine, EventBus, MaxParallel, RunSettings};
use nuvira_api::{ExecutionPlan, RunStatus};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::task::JoinSet;

mod common;
mod scheduler_drivers;
use scheduler_drivers::{CAP, Noop, runtime};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only
// observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grow = new_size - layout.size();
                let now = LIVE.fetch_add(grow, Ordering::Relaxed) + grow;
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns the heap it needed at its peak beyond what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(before))
}

/// The scheduler bench's baseline, building its graph from the plan's ids (so the heap it
/// needs for its graph is counted, as Nuvira's validation is) and owning its counters
/// (`scheduler_drivers::baseline` takes prebuilt lists and copies the counters).
async fn baseline(plan: &ExecutionPlan, cap: usize) -> usize {
    let index: HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut children = vec![Vec::new(); plan.steps.len()];
    let mut remaining = vec![0usize; plan.steps.len()];
    for (i, s) in plan.steps.iter().enumerate() {
        for d in &s.depends_on {
            children[index[d.as_str()]].push(i);
            remaining[i] += 1;
        }
    }
    drop(index);
    let children = Arc::new(children);
    tokio::spawn(async move {
        let mut ready: VecDeque<usize> = (0..remaining.len())
            .filter(|&i| remaining[i] == 0)
            .collect();
        let mut set = JoinSet::new();
        let (mut in_flight, mut done) = (0, 0);
        loop {
            while in_flight < cap {
                let Some(i) = ready.pop_front() else { break };
                set.spawn(async move { std::hint::black_box(i) });
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

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let rt = runtime();
    let engine = Engine::builder()
        .module(Arc::new(Noop))
        .max_parallel(CAP)
        .build();
    let n = 10_000;
    let graphs: [(&str, ExecutionPlan); 3] = [
        ("layered", common::layered(100, 100, "noop", 7)),
        ("chain", common::chain(n, "noop")),
        ("independent", common::independent(n, "noop")),
    ];
    println!("| graph | baseline B/step | nuvira run B/step | ratio | validate alone B/step |");
    println!("|---|---|---|---|---|");
    for (name, plan) in graphs {
        let steps = plan.steps.len();
        // Warm the runtime's worker threads and the allocator's arenas.
        rt.block_on(baseline(&plan, CAP));
        let (done, base) = peak_of(|| rt.block_on(baseline(&plan, CAP)));
        assert_eq!(done, steps);
        let shared = Arc::new(plan.clone());
        let (validated, val) = peak_of(|| engine.validate_shared(shared));
        drop(validated);
        // The clone is the caller's copy: made before the measurement starts.
        let mine = plan.clone();
        let (summary, run) = peak_of(|| {
            rt.block_on(engine.run(
                mine,
                EventBus::with_history("memory", false),
                RunSettings {
                    parallelism: Some(MaxParallel::N(CAP)),
                    ..RunSettings::default()
                },
            ))
        });
        let summary = summary.unwrap_or_else(|e| panic!("the {name} plan is valid: {e}"));
        assert_eq!(summary.status, RunStatus::Succeeded);
        drop(summary);
        let per = |b: usize| b as f64 / steps as f64;
        println!(
            "| {name} ({steps}) | {:.0} | {:.0} | {:.2}× | {:.0} |",
            per(base),
            per(run),
            per(run) / per(base).max(1.0),
            per(val),
        );
    }
}
