//! Validation of large layered plans: linear in steps + edges.
//!
//! Baseline in the same run: building the same petgraph graph from the ids and running
//! petgraph's own `toposort` (what any validator must at least do).
//!
//! `nuvira-shared` is `validate_shared`, what `Engine::run` does: the validated plan keeps the
//! caller's `Arc` (issue 17's target: ≤ 2× the baseline). `nuvira` is `validate(&plan)`, which
//! also copies the plan for the validated plan to own.
//!
//! `cargo bench --bench validate`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::HashMap;
use std::hint::black_box;

mod common;

fn baseline_toposort(plan: &nuvira_api::ExecutionPlan) -> usize {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(plan.steps.len());
    for (i, s) in plan.steps.iter().enumerate() {
        index.insert(s.id.as_str(), i);
    }
    let mut g: DiGraph<(), ()> = DiGraph::with_capacity(plan.steps.len(), plan.steps.len() * 2);
    for _ in &plan.steps {
        g.add_node(());
    }
    for (i, s) in plan.steps.iter().enumerate() {
        for d in &s.depends_on {
            if let Some(&j) = index.get(d.as_str()) {
                g.add_edge(NodeIndex::new(j), NodeIndex::new(i), ());
            }
        }
    }
    petgraph::algo::toposort(&g, None).map_or(0, |o| o.len())
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    group.sample_size(20);
    for steps in [25_000usize, 50_000, 100_000] {
        let plan = common::layered(steps / 100, 100, "m", 7);
        assert!(nuvira::validate::validate(&plan, None).is_ok());
        let edges: usize = plan.steps.iter().map(|s| s.depends_on.len()).sum();
        group.throughput(Throughput::Elements((plan.steps.len() + edges) as u64));
        group.bench_with_input(BenchmarkId::new("nuvira", steps), &plan, |b, p| {
            b.iter(|| nuvira::validate::validate(black_box(p), None).map(|v| v.outputs.len()))
        });
        let shared = std::sync::Arc::new(plan.clone());
        group.bench_with_input(BenchmarkId::new("nuvira-shared", steps), &shared, |b, p| {
            b.iter(|| {
                nuvira::validate::validate_shared(black_box(p.clone()), None)
                    .map(|v| v.outputs.len())
            })
        });
        group.bench_with_input(
            BenchmarkId::new("petgraph-toposort", steps),
            &plan,
            |b, p| b.iter(|| baseline_toposort(black_box(p))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
