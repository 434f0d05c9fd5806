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
//! one warm-up run. The difference between two counts divided by the difference in runs and
//! by the steps is the cost of one step; `scripts/sched-icount.sh` does that for every pair.
//! Without arguments (as `cargo bench` runs every bench) it runs each pair once, as a check.

use nuvira::{Engine, EventBus, RunSettings};
use nuvira_api::RunStatus;
use std::sync::Arc;

mod common;
mod scheduler_drivers;
use scheduler_drivers::{CAP, Noop, YieldOnce, baseline, runtime};

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

fn drive(graph: &str, driver: &str, runs: usize) {
    let rt = runtime();
    let engine = Engine::builder()
        .module(Arc::new(Noop))
        .module(Arc::new(YieldOnce))
        .max_parallel(CAP)
        .build();
    let plan = match graph {
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
    for _ in 0..=runs {
        rt.block_on(async {
            match driver {
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
    }
}
