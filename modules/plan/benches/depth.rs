//! The nesting-depth scan that runs before every plan parse, against the parse itself.
//!
//! `cargo bench -p nuvira-plan --bench depth`. The scan must cost a small fraction of parsing a
//! normal plan (it is one pass without allocation), and refuse 400 KB of `[` in microseconds
//! where the YAML parser took over a minute.

use criterion::{Criterion, criterion_group, criterion_main};
use nuvira_plan::{MAX_NESTING_DEPTH, PlanFormat, check_depth, parse_str};
use std::hint::black_box;

/// A normal plan of `n` steps, each with a flow list of dependencies and a config mapping.
fn plan(n: usize) -> String {
    let mut s = String::from("goal: fix the failing test\nsteps:\n");
    for i in 0..n {
        s.push_str(&format!(
            "  - id: step{i}\n    module: inspect\n    depends_on: [{}]\n    config: {{goal: \"fix [x] in #{i}\", max_files: 20}}\n    # a comment with [brackets]\n",
            if i == 0 { String::new() } else { format!("step{}", i - 1) }
        ));
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("depth");
    for n in [10usize, 200] {
        let text = plan(n);
        g.bench_function(format!("scan {n}-step plan ({} bytes)", text.len()), |b| {
            b.iter(|| check_depth(black_box(&text), PlanFormat::Yaml, MAX_NESTING_DEPTH))
        });
        g.bench_function(format!("parse {n}-step plan ({} bytes)", text.len()), |b| {
            b.iter(|| {
                parse_str(black_box(&text), PlanFormat::Yaml, "p.yaml").map(|p| p.plan.steps.len())
            })
        });
    }
    let deep = format!("goal: g\nsteps: {}", "[".repeat(400_000));
    g.bench_function("refuse 400 KB of [ (scan + error)", |b| {
        b.iter(|| parse_str(black_box(&deep), PlanFormat::Yaml, "p.yaml").is_err())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
