//! The scheduler bench's graphs and drivers, one at a time, for instruction counts: wall time
//! on a shared machine is noise, instructions are not.
//!
//! ```sh
//! cargo bench --bench scheduler_icount --no-run
//! B=$(ls -t target/release/deps/scheduler_icount-* | grep -v '\.d$' | head -1)
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null $B layered nuvira 1
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null $B layered nuvira 6
//! ```
//!
//! Arguments: the graph (`layered`, `chain`, `independent`, `chain-yield`: the 10,000-step
//! graphs of `benches/scheduler.rs`), the driver (`baseline` for the hand-written JoinSet
//! driver, `nuvira` for the engine with history, `nuvira-no-history`), and how many runs after
//! one warm-up run. The graph `makespan` (the 1 ms-step graph of the bench's makespan group)
//! prints the mean and median wall time per run instead, natively; its drivers are those
//! three, `one-task` (the baseline's driver polling its steps in its own task, no task per
//! step) and `bound` (the critical path's sleeps back to back in one task). The difference
//! between two counts divided by the difference in runs and by the steps is the cost of one
//! step; `scripts/sched-icount.sh` does that for every pair.
//! Without arguments (as `cargo bench` runs every bench) it runs each pair once, as a check.

use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::{
    Module, ModuleError, PlanStep, RunStatus, StepContext, StepOutput, WriteSet, async_trait,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod common;
mod scheduler_drivers;
use scheduler_drivers::{
    CAP, Noop, Sleep, YieldOnce, baseline, baseline_one_task, baseline_sleep, baseline_steps,
    makespan_plan, runtime,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`: run everything once.
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.as_slice() {
        [graph, driver, runs] => {
            let runs = runs
                .parse()
                .unwrap_or_else(|e| panic!("runs `{runs}`: {e}"));
            drive(graph, driver, runs);
        }
        [] => {
            for graph in ["layered", "chain", "independent", "chain-yield"] {
                for driver in ["baseline", "nuvira", "nuvira-no-history"] {
                    drive(graph, driver, 1);
                }
            }
        }
        _ => panic!("usage: scheduler_icount GRAPH DRIVER RUNS"),
    }
}

/// When each step of the current `-stamped` run started and ended (its sleep), by index.
static STAMPS: Mutex<Vec<(Option<Instant>, Option<Instant>)>> = Mutex::new(Vec::new());
/// Step id -> index, for the stamping module.
static INDEX: OnceLock<HashMap<String, usize>> = OnceLock::new();

fn stamp(i: usize, start: Instant, end: Instant) {
    if let Ok(mut s) = STAMPS.lock()
        && let Some(slot) = s.get_mut(i)
    {
        *slot = (Some(start), Some(end));
    }
}

/// The `Sleep` module, stamping when each step started (its first poll) and woke.
struct StampSleep;

#[async_trait]
impl Module for StampSleep {
    fn name(&self) -> &str {
        "stamp"
    }
    fn write_set(&self, _s: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }
    async fn run(&self, s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let i = INDEX
            .get()
            .and_then(|m| m.get(&s.id))
            .copied()
            .unwrap_or(usize::MAX);
        stamp(i, start, Instant::now());
        Ok(StepOutput::Empty)
    }
}

/// Per run of a `-stamped` driver: the mean time from a step's last dependency waking to
/// the step starting (the dispatch latency), and the mean sleep (start to wake-up).
fn latencies(parents: &[Vec<usize>], lat: &mut Vec<Duration>, slept: &mut Vec<Duration>) {
    let s = STAMPS.lock().map(|s| s.clone()).unwrap_or_default();
    for (i, ps) in parents.iter().enumerate() {
        let (Some(start), Some(end)) = s[i] else {
            continue;
        };
        slept.push(end - start);
        let last = ps.iter().filter_map(|&p| s[p].1).max();
        if let Some(last) = last {
            lat.push(start.saturating_duration_since(last));
        }
    }
}

fn drive(graph: &str, driver: &str, runs: usize) {
    let rt = runtime();
    let engine = Engine::builder()
        .module(Arc::new(Noop))
        .module(Arc::new(YieldOnce))
        .module(Arc::new(Sleep))
        .module(Arc::new(StampSleep))
        .max_parallel(CAP)
        .build();
    let stamped = driver.ends_with("-stamped");
    let driver = driver.trim_end_matches("-stamped");
    let plan = match graph {
        "makespan" if stamped => makespan_plan("stamp"),
        "makespan" => makespan_plan("sleep"),
        "layered" => common::layered(100, 100, "noop", 11),
        "chain" => common::chain(10_000, "noop"),
        "independent" => common::independent(10_000, "noop"),
        "chain-yield" => common::chain(10_000, "yield"),
        other => panic!("no graph `{other}`"),
    };
    let yielding = graph.ends_with("-yield");
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
    let path = validated.critical_path_len();
    let mut times = Vec::with_capacity(runs + 1);
    let parents: Vec<Vec<usize>> = validated
        .parents()
        .iter()
        .map(|p| p.iter().map(|&q| q as usize).collect())
        .collect();
    if stamped {
        let _ = INDEX.set(
            validated
                .ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.to_string(), i))
                .collect(),
        );
    }
    let (mut lat, mut slept) = (Vec::new(), Vec::new());
    for run in 0..=runs {
        if let Ok(mut s) = STAMPS.lock() {
            *s = vec![(None, None); n];
        }
        let start = std::time::Instant::now();
        rt.block_on(async {
            match driver {
                "bound" => {
                    for _ in 0..path {
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    }
                }
                "baseline" if graph == "makespan" && stamped => {
                    let done =
                        baseline_steps(children.clone(), indeg.clone(), CAP, |i| async move {
                            let start = Instant::now();
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            stamp(i, start, Instant::now());
                            i
                        })
                        .await;
                    assert_eq!(done, n);
                }
                "one-task" if graph == "makespan" => {
                    let done = baseline_one_task(children.clone(), indeg.clone(), CAP).await;
                    assert_eq!(done, n);
                }
                "baseline" if graph == "makespan" => {
                    let done = baseline_sleep(children.clone(), indeg.clone(), CAP).await;
                    assert_eq!(done, n);
                }
                "baseline" => {
                    let done = baseline(children.clone(), indeg.clone(), CAP, yielding).await;
                    assert_eq!(done, n);
                }
                "nuvira" | "nuvira-no-history" => {
                    let bus = EventBus::with_history("bench", driver == "nuvira");
                    let s = engine
                        .run_validated(validated.clone(), bus, RunSettings::default())
                        .await;
                    assert_eq!(s.status, RunStatus::Succeeded);
                }
                other => panic!("no driver `{other}`"),
            }
        });
        times.push(start.elapsed());
        if stamped && run > 0 {
            latencies(&parents, &mut lat, &mut slept);
        }
    }
    if graph == "makespan" {
        // The wall time of each run after the first, for the makespan (not an instruction
        // count): mean and median.
        times.remove(0);
        times.sort();
        let mean = times.iter().sum::<std::time::Duration>() / times.len().max(1) as u32;
        let median = times.get(times.len() / 2).copied().unwrap_or_default();
        let tag = if stamped { "-stamped" } else { "" };
        println!("makespan {driver}{tag}: mean {mean:.2?}, median {median:.2?} over {runs} runs");
        if stamped {
            let avg = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
            lat.sort();
            println!(
                "  dispatch latency: mean {:.1?}, median {:.1?}, p90 {:.1?}; sleep: mean {:.2?}",
                avg(&lat),
                lat.get(lat.len() / 2).copied().unwrap_or_default(),
                lat.get(lat.len() * 9 / 10).copied().unwrap_or_default(),
                avg(&slept)
            );
        }
    }
}
