//! Plan validation: every problem kind, and property tests on random graphs.

use nuvira::validate::{ProblemKind, validate};
use nuvira_api::{ExecutionPlan, PlanStep};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

fn s(id: &str, module: &str, deps: &[&str]) -> PlanStep {
    PlanStep::new(id, module).depends_on(deps.iter().copied())
}

fn plan(steps: Vec<PlanStep>) -> ExecutionPlan {
    ExecutionPlan {
        goal: "g".into(),
        steps,
        ..Default::default()
    }
}

fn kinds(p: &ExecutionPlan) -> Vec<(ProblemKind, Vec<String>)> {
    match validate(p, None) {
        Ok(_) => vec![],
        Err(e) => e.problems.into_iter().map(|p| (p.kind, p.steps)).collect(),
    }
}

fn v(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_well_formed_pipeline_is_valid_and_ordered() {
    let p = plan(vec![
        s("report", "report", &["verify"]),
        s("inspect", "inspect", &[]),
        s("edit", "edit", &["inspect"]),
        s("test", "test", &["edit"]),
        s("verify", "verify", &["test"]),
    ]);
    let ok = validate(&p, None).unwrap();
    let order: Vec<&str> = ok
        .topological_order()
        .into_iter()
        .map(|i| p.steps[i].id.as_str())
        .collect();
    assert_eq!(order, ["inspect", "edit", "test", "verify", "report"]);
    assert_eq!(ok.critical_path_len(), 5);
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let p = plan(vec![
        s("a", "m", &["ghost"]),
        s("a", "m", &[]),
        s("bad id!", "m", &[]),
        s("c1", "m", &["c2"]),
        s("c2", "m", &["c1"]),
        s("self", "m", &["self"]),
        s("report", "report", &["a"]),
    ]);
    let found = kinds(&p);
    let has = |k: ProblemKind, steps: &[&str]| found.contains(&(k, v(steps)));
    assert!(has(ProblemKind::Dangling, &["a", "ghost"]), "{found:?}");
    assert!(has(ProblemKind::DuplicateId, &["a"]), "{found:?}");
    assert!(has(ProblemKind::InvalidId, &["bad id!"]), "{found:?}");
    assert!(has(ProblemKind::Cycle, &["c1", "c2", "c1"]), "{found:?}");
    assert!(has(ProblemKind::Cycle, &["self", "self"]), "{found:?}");
    assert!(has(ProblemKind::Orphan, &["bad id!"]), "{found:?}");
}

#[test]
fn cycle_paths_follow_graph_edges_from_dependency_to_dependent() {
    // b depends on a, c on b, a on c: edges a->b->c->a.
    let p = plan(vec![
        s("a", "m", &["c"]),
        s("b", "m", &["a"]),
        s("c", "m", &["b"]),
        s("report", "report", &[]),
    ]);
    let found = kinds(&p);
    assert!(
        found.contains(&(ProblemKind::Cycle, v(&["a", "b", "c", "a"]))),
        "{found:?}"
    );
}

#[test]
fn outputs_default_to_verify_and_report_steps_then_the_single_sink() {
    // No verify/report: the single sink is the output, and everything leads to it.
    assert!(kinds(&plan(vec![s("a", "m", &[]), s("b", "m", &["a"])])).is_empty());
    // Two sinks and no verify/report: ambiguous.
    let found = kinds(&plan(vec![
        s("a", "m", &[]),
        s("b", "m", &["a"]),
        s("c", "m", &["a"]),
    ]));
    assert_eq!(found, vec![(ProblemKind::AmbiguousGoal, v(&["b", "c"]))]);
    // A report step makes the other branch an orphan.
    let found = kinds(&plan(vec![
        s("a", "m", &[]),
        s("b", "m", &["a"]),
        s("report", "report", &["a"]),
    ]));
    assert_eq!(found, vec![(ProblemKind::Orphan, v(&["b"]))]);
    // Explicit outputs win, and unknown ones are named.
    let mut p = plan(vec![
        s("a", "m", &[]),
        s("b", "m", &["a"]),
        s("report", "report", &["a"]),
    ]);
    p.outputs = Some(v(&["b", "report", "nope"]));
    assert_eq!(kinds(&p), vec![(ProblemKind::UnknownOutput, v(&["nope"]))]);
}

#[test]
fn unknown_modules_and_empty_plans_are_errors_with_the_registry() {
    let reg = nuvira::ModuleRegistry::new();
    let err = validate(&plan(vec![s("a", "nosuch", &[])]), Some(&reg)).unwrap_err();
    assert_eq!(err.problems[0].kind, ProblemKind::UnknownModule);
    assert!(err.problems[0].message.contains("nosuch"));
    let err = validate(&plan(vec![]), Some(&reg)).unwrap_err();
    assert_eq!(err.problems[0].kind, ProblemKind::EmptyPlan);
}

#[test]
fn dangling_references_suggest_the_closest_id() {
    let err = validate(
        &plan(vec![s("inspect", "m", &[]), s("edit", "m", &["inspekt"])]),
        None,
    )
    .unwrap_err();
    let d = err
        .problems
        .iter()
        .find(|p| p.kind == ProblemKind::Dangling)
        .unwrap();
    assert!(
        d.message.contains("did you mean `inspect`"),
        "{}",
        d.message
    );
}

/// A random graph: `n` steps, edges (dependency, dependent) as given.
fn random_plan(n: usize, edges: &[(usize, usize)], outputs: Option<Vec<usize>>) -> ExecutionPlan {
    let mut steps: Vec<PlanStep> = (0..n)
        .map(|i| PlanStep::new(format!("s{i}"), "m"))
        .collect();
    for &(from, to) in edges {
        let dep = format!("s{from}");
        if !steps[to].depends_on.contains(&dep) {
            steps[to].depends_on.push(dep);
        }
    }
    ExecutionPlan {
        steps,
        outputs: outputs.map(|o| o.into_iter().map(|i| format!("s{i}")).collect()),
        ..Default::default()
    }
}

fn is_acyclic(n: usize, edges: &[(usize, usize)]) -> bool {
    let mut indeg = vec![0; n];
    let mut out: HashMap<usize, Vec<usize>> = HashMap::new();
    let uniq: HashSet<_> = edges.iter().copied().collect();
    for &(a, b) in &uniq {
        indeg[b] += 1;
        out.entry(a).or_default().push(b);
    }
    let mut stack: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = stack.pop() {
        seen += 1;
        for &c in out.get(&i).map(Vec::as_slice).unwrap_or(&[]) {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                stack.push(c);
            }
        }
    }
    seen == n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reported_cycles_are_real_cycles_and_valid_plans_are_acyclic_and_orphan_free(
        n in 1usize..24,
        raw_edges in proptest::collection::vec((0usize..24, 0usize..24), 0..60),
        out_pick in proptest::collection::vec(0usize..24, 1..4),
        explicit in any::<bool>(),
    ) {
        let edges: Vec<(usize, usize)> = raw_edges.into_iter().map(|(a, b)| (a % n, b % n)).collect();
        let outputs = explicit.then(|| {
            let mut o: Vec<usize> = out_pick.iter().map(|x| x % n).collect();
            o.sort_unstable();
            o.dedup();
            o
        });
        let p = random_plan(n, &edges, outputs.clone());
        let edge_set: HashSet<(String, String)> =
            edges.iter().map(|&(a, b)| (format!("s{a}"), format!("s{b}"))).collect();
        match validate(&p, None) {
            Ok(valid) => {
                prop_assert!(is_acyclic(n, &edges));
                // Orphan-free: every step reaches an output along dependency edges.
                let outs: HashSet<usize> = valid.outputs.iter().copied().collect();
                for start in 0..n {
                    let mut stack = vec![start];
                    let mut seen = HashSet::new();
                    let mut reaches = false;
                    while let Some(i) = stack.pop() {
                        if outs.contains(&i) { reaches = true; break; }
                        if seen.insert(i) { stack.extend(valid.children[i].iter().copied()); }
                    }
                    prop_assert!(reaches, "s{start} reaches no output");
                }
                prop_assert_eq!(valid.topological_order().len(), n);
            }
            Err(errs) => {
                let cycles: Vec<_> = errs.problems.iter().filter(|p| p.kind == ProblemKind::Cycle).collect();
                prop_assert_eq!(cycles.is_empty(), is_acyclic(n, &edges));
                for c in cycles {
                    prop_assert!(c.steps.len() >= 2);
                    prop_assert_eq!(c.steps.first(), c.steps.last());
                    for pair in c.steps.windows(2) {
                        prop_assert!(edge_set.contains(&(pair[0].clone(), pair[1].clone())),
                            "{} -> {} is not an edge", pair[0], pair[1]);
                    }
                }
            }
        }
    }
}
