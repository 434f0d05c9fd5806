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

/// A module whose `validate` reads a typed config, the way module authors are told to.
struct Typed(nuvira_api::ModuleKind);

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedConfig {
    #[serde(default)]
    limit: u32,
}

#[nuvira_api::async_trait]
impl nuvira_api::Module for Typed {
    fn name(&self) -> &str {
        "typed"
    }
    fn kind(&self) -> nuvira_api::ModuleKind {
        self.0
    }
    fn validate(&self, step: &PlanStep) -> Result<(), nuvira_api::ConfigError> {
        let c: TypedConfig = step.config_as()?;
        if c.limit == 0 {
            return Err(
                nuvira_api::ConfigError::new(&step.id, "`limit` must be at least 1").at("limit"),
            );
        }
        Ok(())
    }
    async fn run(
        &self,
        _step: &PlanStep,
        _ctx: &nuvira_api::StepContext,
    ) -> Result<nuvira_api::StepOutput, nuvira_api::ModuleError> {
        Ok(nuvira_api::StepOutput::Empty)
    }
}

#[test]
fn a_config_error_is_carried_once_after_the_step_and_its_module() {
    let mut reg = nuvira::ModuleRegistry::new();
    reg.register(std::sync::Arc::new(Typed(nuvira_api::ModuleKind::Report)))
        .unwrap();
    let messages = |config: serde_json::Value| -> Vec<String> {
        let p = plan(vec![s("a", "typed", &[]).with_config(config)]);
        match validate(&p, Some(&reg)) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .problems
                .iter()
                .filter(|p| p.kind == ProblemKind::InvalidConfig)
                .map(|p| p.message.clone())
                .collect(),
        }
    };
    assert_eq!(
        messages(serde_json::json!({ "limit": 0 })),
        ["step `a` (typed): `limit` must be at least 1"]
    );
    assert_eq!(
        messages(serde_json::json!({ "limt": 2 })),
        ["step `a` (typed): unknown field `limt`, expected `limit`"]
    );
    assert!(messages(serde_json::json!({ "limit": 2 })).is_empty());
}

#[test]
fn a_module_kind_decides_which_steps_are_outputs_by_default() {
    // Two independent steps of module `typed`: of a report kind both are outputs; of a custom
    // kind neither is, and with two sinks the goal is ambiguous.
    let fork = plan(vec![
        s("a", "typed", &[]).with_config(serde_json::json!({ "limit": 1 })),
        s("b", "typed", &[]).with_config(serde_json::json!({ "limit": 1 })),
    ]);
    for (kind, ambiguous) in [
        (nuvira_api::ModuleKind::Report, false),
        (nuvira_api::ModuleKind::Custom, true),
    ] {
        let mut reg = nuvira::ModuleRegistry::new();
        reg.register(std::sync::Arc::new(Typed(kind))).unwrap();
        let got = validate(&fork, Some(&reg))
            .err()
            .map(|e| e.problems[0].kind);
        assert_eq!(
            got == Some(ProblemKind::AmbiguousGoal),
            ambiguous,
            "{kind:?}"
        );
    }
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
                        if seen.insert(i) { stack.extend(valid.children()[i].iter().map(|&c| c as usize)); }
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

// ---- every cycle, duplicates, outputs, suggestions ----------------------------------------

fn cycles(p: &ExecutionPlan) -> Vec<Vec<String>> {
    kinds(p)
        .into_iter()
        .filter(|(k, _)| *k == ProblemKind::Cycle)
        .map(|(_, s)| s)
        .collect()
}

#[test]
fn cycles_that_share_steps_are_each_reported() {
    // b depends on a and c, a on b, c on b: two cycles through b.
    let p = plan(vec![
        s("a", "m", &["b"]),
        s("b", "m", &["a", "c"]),
        s("c", "m", &["b"]),
        s("r", "report", &["a"]),
    ]);
    assert_eq!(cycles(&p), vec![v(&["a", "b", "a"]), v(&["b", "c", "b"])]);

    // A figure eight through a, and a self-loop inside a larger cycle.
    let fig8 = plan(vec![
        s("a", "m", &["c", "d"]),
        s("b", "m", &["a"]),
        s("c", "m", &["b"]),
        s("d", "m", &["a"]),
        s("r", "report", &["a"]),
    ]);
    assert_eq!(
        cycles(&fig8),
        vec![v(&["a", "b", "c", "a"]), v(&["a", "d", "a"])]
    );
    let selfloop = plan(vec![
        s("a", "m", &["a", "b"]),
        s("b", "m", &["a"]),
        s("r", "report", &["a"]),
    ]);
    assert_eq!(cycles(&selfloop), vec![v(&["a", "a"]), v(&["a", "b", "a"])]);
}

#[test]
fn every_elementary_cycle_of_a_complete_graph_is_listed_once() {
    // Three steps each depending on the other two: 3 two-cycles and 2 three-cycles.
    let p = plan(vec![
        s("a", "m", &["b", "c"]),
        s("b", "m", &["a", "c"]),
        s("c", "m", &["a", "b"]),
        s("r", "report", &["a"]),
    ]);
    let mut got = cycles(&p);
    got.sort();
    assert_eq!(
        got,
        vec![
            v(&["a", "b", "a"]),
            v(&["a", "b", "c", "a"]),
            v(&["a", "c", "a"]),
            v(&["a", "c", "b", "a"]),
            v(&["b", "c", "b"]),
        ]
    );
}

#[test]
fn a_group_with_too_many_cycles_lists_the_cap_and_says_there_are_more() {
    // Eight steps, each depending on all the others: thousands of elementary cycles.
    let ids: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    let mut steps: Vec<PlanStep> = ids
        .iter()
        .map(|id| {
            PlanStep::new(id.as_str(), "m")
                .depends_on(ids.iter().filter(|o| *o != id).map(String::as_str))
        })
        .collect();
    steps.push(s("r", "report", &["s0"]));
    let err = validate(&plan(steps), None).unwrap_err();
    let listed: Vec<_> = err
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::Cycle)
        .collect();
    assert_eq!(listed.len(), nuvira::validate::MAX_CYCLES_PER_GROUP);
    let distinct: HashSet<&Vec<String>> = listed.iter().map(|p| &p.steps).collect();
    assert_eq!(distinct.len(), listed.len(), "no cycle twice");
    let last = listed.last().unwrap();
    assert!(
        last.message.contains("more cycles than the 50 listed"),
        "{}",
        last.message
    );
    assert!(!listed[0].message.contains("more cycles"));
}

#[test]
fn a_cycle_of_100000_steps_is_one_path_without_overflowing_the_stack() {
    let n = 100_000;
    let mut steps: Vec<PlanStep> = (0..n)
        .map(|i| {
            let dep = format!("s{}", (i + n - 1) % n);
            PlanStep::new(format!("s{i}"), "m").depends_on([dep.as_str()])
        })
        .collect();
    steps.push(s("r", "report", &["s0"]));
    let found = cycles(&plan(steps));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), n + 1);
    assert_eq!(found[0][0], "s0");
    assert_eq!(found[0][1], "s1");
}

#[test]
fn a_duplicate_steps_own_dependencies_are_checked() {
    let dangling = plan(vec![
        s("a", "m", &[]),
        s("a", "m", &["ghost"]),
        s("r", "report", &["a"]),
    ]);
    let got = kinds(&dangling);
    assert!(
        got.contains(&(ProblemKind::DuplicateId, v(&["a"]))),
        "{got:?}"
    );
    assert!(
        got.contains(&(ProblemKind::Dangling, v(&["a", "ghost"]))),
        "{got:?}"
    );

    let cycle = plan(vec![
        s("a", "m", &[]),
        s("b", "m", &["a"]),
        s("a", "m", &["b"]),
        s("r", "report", &["b"]),
    ]);
    assert_eq!(cycles(&cycle), vec![v(&["a", "b", "a"])]);
}

#[test]
fn a_missing_output_does_not_make_every_step_an_orphan() {
    let mut p = plan(vec![s("a", "m", &[]), s("r", "m", &["a"])]);
    p.outputs = Some(vec!["nope".into()]);
    assert_eq!(kinds(&p), vec![(ProblemKind::UnknownOutput, v(&["nope"]))]);
    // One right and one misspelt: still no orphan guesses while the outputs are wrong.
    let mut p = plan(vec![
        s("a", "m", &[]),
        s("b", "m", &[]),
        s("r", "m", &["a"]),
    ]);
    p.outputs = Some(vec!["r".into(), "bb".into()]);
    assert_eq!(kinds(&p), vec![(ProblemKind::UnknownOutput, v(&["bb"]))]);
}

#[test]
fn suggestions_are_close_matches_only() {
    let message = |dep: &str, known: &[&str]| {
        let mut steps: Vec<PlanStep> = known.iter().map(|k| s(k, "m", &[])).collect();
        steps.push(s("zzz-final", "report", &[dep]));
        let err = validate(&plan(steps), None).unwrap_err();
        err.problems
            .into_iter()
            .find(|p| p.kind == ProblemKind::Dangling)
            .unwrap()
            .message
    };
    assert!(message("buid", &["build", "test"]).contains("did you mean `build`"));
    assert!(message("tset", &["build", "test"]).contains("did you mean `test`"));
    // Short ids that share nothing are not suggested.
    assert!(!message("x", &["a", "r"]).contains("did you mean"));
    assert!(!message("zz", &["a"]).contains("did you mean"));
    assert!(!message("deploy", &["build", "test"]).contains("did you mean"));
}

/// Every elementary cycle of a small graph, by brute force, as rotations starting at the
/// least step.
fn brute_force_cycles(n: usize, edges: &HashSet<(usize, usize)>) -> HashSet<Vec<usize>> {
    let mut out = HashSet::new();
    fn walk(
        start: usize,
        path: &mut Vec<usize>,
        n: usize,
        edges: &HashSet<(usize, usize)>,
        out: &mut HashSet<Vec<usize>>,
    ) {
        let last = *path.last().unwrap();
        for next in start..n {
            if !edges.contains(&(last, next)) {
                continue;
            }
            if next == start {
                let mut c = path.clone();
                c.push(start);
                out.insert(c);
            } else if !path.contains(&next) {
                path.push(next);
                walk(start, path, n, edges, out);
                path.pop();
            }
        }
    }
    for start in 0..n {
        walk(start, &mut vec![start], n, edges, &mut out);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_reported_cycles_are_exactly_the_elementary_cycles(
        n in 1usize..7,
        raw_edges in proptest::collection::vec((0usize..7, 0usize..7), 0..16),
    ) {
        let edges: HashSet<(usize, usize)> =
            raw_edges.into_iter().map(|(a, b)| (a % n, b % n)).collect();
        let list: Vec<(usize, usize)> = edges.iter().copied().collect();
        let expected = brute_force_cycles(n, &edges);
        prop_assume!(expected.len() <= nuvira::validate::MAX_CYCLES_PER_GROUP);
        let p = random_plan(n, &list, Some(vec![0]));
        let got: Vec<Vec<usize>> = match validate(&p, None) {
            Ok(_) => vec![],
            Err(e) => e
                .problems
                .into_iter()
                .filter(|p| p.kind == ProblemKind::Cycle)
                .map(|p| {
                    let mut c: Vec<usize> =
                        p.steps.iter().map(|id| id[1..].parse().unwrap()).collect();
                    // Rotate to start at the least step, as the brute force does.
                    c.pop();
                    let k = (0..c.len()).min_by_key(|&k| c[k]).unwrap();
                    c.rotate_left(k);
                    c.push(c[0]);
                    c
                })
                .collect(),
        };
        let got_set: HashSet<Vec<usize>> = got.iter().cloned().collect();
        prop_assert_eq!(got_set.len(), got.len(), "a cycle was listed twice");
        prop_assert_eq!(got_set, expected);
    }
}

#[test]
fn a_chain_of_200000_steps_validates_without_overflowing_the_stack() {
    // Test threads have small stacks; a recursive search would overflow long before this.
    let n = 200_000;
    let mut steps: Vec<PlanStep> = vec![PlanStep::new("s0", "m")];
    for i in 1..n {
        let dep = format!("s{}", i - 1);
        steps.push(PlanStep::new(format!("s{i}"), "m").depends_on([dep.as_str()]));
    }
    let ok = validate(&plan(steps), None).unwrap();
    assert_eq!(ok.critical_path_len(), n);
    assert_eq!(ok.topological_order().len(), n);
}

#[test]
fn outputs_sinks_makes_every_final_step_an_output() {
    let yaml = "goal: g\noutputs: sinks\nsteps:\n  - {id: a, module: m}\n  - {id: b, module: m, depends_on: [a]}\n  - {id: c, module: m, depends_on: [a]}\n";
    let p: ExecutionPlan = serde_yaml_ng::from_str(yaml).unwrap();
    assert_eq!(p.outputs, Some(vec![ExecutionPlan::SINKS.to_owned()]));
    let ok = validate(&p, None).unwrap();
    let outs: Vec<&str> = ok.outputs.iter().map(|&i| p.steps[i].id.as_str()).collect();
    assert_eq!(outs, ["b", "c"]);
    // Without it the same plan is ambiguous; written back it says `sinks` again.
    let mut without = p.clone();
    without.outputs = None;
    assert_eq!(kinds(&without)[0].0, ProblemKind::AmbiguousGoal);
    let back = serde_yaml_ng::to_string(&p).unwrap();
    assert!(back.contains("outputs: sinks"), "{back}");
    let err = serde_yaml_ng::from_str::<ExecutionPlan>("outputs: all\nsteps: []\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`outputs` is `all`") && err.contains("sinks"),
        "{err}"
    );
}

#[test]
fn messages_name_at_most_twenty_steps_and_count_the_rest() {
    let steps: Vec<PlanStep> = (0..10_000).map(|i| s(&format!("s{i}"), "m", &[])).collect();
    let e = validate(&plan(steps), None).unwrap_err();
    let msg = &e.problems[0].message;
    assert_eq!(e.problems[0].kind, ProblemKind::AmbiguousGoal);
    assert!(msg.contains("s19,") || msg.contains("s19 "), "{msg}");
    assert!(
        !msg.contains("s20,") && msg.contains("and 9980 more"),
        "{msg}"
    );
    assert!(msg.len() < 600, "{} bytes", msg.len());
    // The problem still lists every sink for scripts.
    assert_eq!(e.problems[0].steps.len(), 10_000);

    // A cycle through 1,000 steps: its path is shortened the same way.
    let n = 1000;
    let ring: Vec<PlanStep> = (0..n)
        .map(|i| s(&format!("r{i}"), "m", &[&format!("r{}", (i + n - 1) % n)]))
        .chain([s("report", "report", &["r0"])])
        .collect();
    let e = validate(&plan(ring), None).unwrap_err();
    let cycle = e
        .problems
        .iter()
        .find(|p| p.kind == ProblemKind::Cycle)
        .unwrap();
    assert!(cycle.message.contains("(980 more)"), "{}", cycle.message);
    assert!(cycle.message.len() < 600, "{}", cycle.message.len());
}

#[test]
fn validate_shared_keeps_the_callers_plan() {
    let p = std::sync::Arc::new(plan(vec![s("a", "m", &[]), s("report", "report", &["a"])]));
    let ok = nuvira::validate::validate_shared(p.clone(), None).unwrap();
    assert!(std::sync::Arc::ptr_eq(&ok.plan, &p));
    // `validate` of a borrowed plan still works, on its own copy.
    let copy = validate(&p, None).unwrap();
    assert!(!std::sync::Arc::ptr_eq(&copy.plan, &p));
}
