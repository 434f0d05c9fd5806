//! Plan validation: every problem of a plan, found before anything runs.
//!
//! The checks, each reported with a [`ProblemKind`] and the step ids involved:
//! - `empty-plan`: no steps;
//! - `invalid-id`: an id that is not `[A-Za-z0-9_.-]+`;
//! - `duplicate-id`: two steps with the same id;
//! - `unknown-module`: a module name that is not registered;
//! - `invalid-config`: a module rejected the step's config;
//! - `dangling`: a `depends_on` names a step that does not exist (`steps` = `[step, missing]`);
//! - `unknown-output`: `outputs` names a step that does not exist;
//! - `cycle`: every elementary cycle, named as a path `a -> b -> a` (`steps` = the path,
//!   ending with its first id repeated; self-loops are `a -> a`). Arrows follow the graph's
//!   edges as `nuvira graph` draws them, from a dependency to its dependent: in `a -> b`, `b`
//!   depends on `a`. Cycles that share steps are each reported. A group of mutually dependent
//!   steps can hold exponentially many cycles, so at most [`MAX_CYCLES_PER_GROUP`] are listed
//!   per group, and the last one listed says that more exist;
//! - `ambiguous-goal`: no `outputs`, no verify/report step, and more than one sink;
//! - `orphan`: a step from which no path leads to an output (not checked while `outputs`
//!   names a missing step: the outputs themselves are wrong then). Without `outputs`, the
//!   outputs are the steps whose module's kind is an output by default (verify and report; see
//!   [`ModuleKind`](nuvira_api::ModuleKind)).
//!
//! A step whose id repeats an earlier one is still checked: its dependencies can dangle, and
//! they join the graph as the first step's, so a cycle through it is found too.
//!
//! Cost is linear in steps + edges for a plan without cycles: one hash map of ids, one pass
//! over the edges, one topological sort (Kahn's; the scheduler reuses it), one reverse
//! breadth-first search from the outputs. Only when the sort leaves steps over (there is a
//! cycle) do Tarjan's strongly connected components run, then Johnson's circuit search per
//! group of mutually dependent steps, O((steps + edges) x cycles listed) with the cap above.
//! Nothing recurses, so a chain or cycle of a million steps does not overflow the stack.

use crate::registry::ModuleRegistry;
use nuvira_api::ExecutionPlan;
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

/// The kind of a validation problem; serialized in kebab-case (`duplicate-id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ProblemKind {
    /// The plan file does not parse.
    Parse,
    /// The plan has no steps.
    EmptyPlan,
    /// Two steps share an id.
    DuplicateId,
    /// An id has characters outside `[A-Za-z0-9_.-]`.
    InvalidId,
    /// No module of that name is registered.
    UnknownModule,
    /// The module rejected the step's config.
    InvalidConfig,
    /// A dependency names a missing step.
    Dangling,
    /// `outputs` names a missing step.
    UnknownOutput,
    /// Steps depend on each other in a cycle.
    Cycle,
    /// No path leads from the step to an output.
    Orphan,
    /// The plan's outputs cannot be determined.
    AmbiguousGoal,
}

impl ProblemKind {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Parse => "parse",
            Self::EmptyPlan => "empty-plan",
            Self::DuplicateId => "duplicate-id",
            Self::InvalidId => "invalid-id",
            Self::UnknownModule => "unknown-module",
            Self::InvalidConfig => "invalid-config",
            Self::Dangling => "dangling",
            Self::UnknownOutput => "unknown-output",
            Self::Cycle => "cycle",
            Self::Orphan => "orphan",
            Self::AmbiguousGoal => "ambiguous-goal",
        }
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What kind.
    pub kind: ProblemKind,
    /// The step ids involved (see [`ProblemKind`] for the order).
    pub steps: Vec<String>,
    /// A sentence saying what is wrong and what to do.
    pub message: String,
    /// The line in the plan file, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The column in the plan file, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// The index in `steps` of the step the problem is about, when it is about one.
    #[serde(skip)]
    pub step_index: Option<usize>,
}

impl Problem {
    fn new(kind: ProblemKind, steps: Vec<String>, message: String) -> Self {
        Self {
            kind,
            steps,
            message,
            line: None,
            column: None,
            step_index: None,
        }
    }

    fn at(mut self, index: usize) -> Self {
        self.step_index = Some(index);
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error[{}]: {}", self.kind, self.message)
    }
}

/// Every problem of a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    /// The problems, in check order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the plan is invalid ({} problem(s))",
            self.problems.len()
        )?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// A plan that passed validation, with its graph precomputed for the scheduler.
#[derive(Debug, Clone)]
pub struct ValidatedPlan {
    /// The plan (shared: announcing it in `run:started` copies nothing).
    pub plan: Arc<ExecutionPlan>,
    /// Step ids, by index, ready to stamp on events.
    pub ids: Vec<Arc<str>>,
    /// Each step's position in [`topological_order`](Self::topological_order).
    pub topo_rank: Vec<usize>,
    /// For each step (by index), the indices of its dependencies.
    parents: Adjacency,
    /// For each step, the indices of the steps that depend on it.
    children: Adjacency,
    /// Indices of the plan's outputs.
    pub outputs: Vec<usize>,
}

/// The lists of every step's neighbours in one array (compressed sparse rows): step `i`'s
/// list is `targets[offsets[i]..offsets[i + 1]]`, as `u32` step indices. Two allocations for
/// the whole graph instead of one per step: a 10,000-step plan's adjacency takes 4 bytes per
/// step and per edge instead of 24 per step and 8 (often 32) per list.
///
/// ```
/// use nuvira_api::{ExecutionPlan, PlanStep};
/// let mut b = PlanStep::new("b", "m");
/// b.depends_on = vec!["a".into()];
/// let plan = ExecutionPlan { goal: "g".into(), steps: vec![PlanStep::new("a", "m"), b], ..Default::default() };
/// let v = nuvira_engine::validate::validate(&plan, None).unwrap();
/// assert_eq!(v.parents()[1], [0]);
/// assert!(v.children()[1].is_empty());
/// assert_eq!(v.children().edges(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adjacency {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Adjacency {
    /// Packs per-step lists.
    ///
    /// # Panics
    /// Never for plans below 2^32 steps and edges (indices are stored as `u32`).
    pub fn from_lists(lists: &[Vec<usize>]) -> Self {
        let mut offsets = Vec::with_capacity(lists.len() + 1);
        let mut targets = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        offsets.push(0);
        for list in lists {
            targets.extend(list.iter().map(|&t| small(t)));
            offsets.push(small(targets.len()));
        }
        Self { offsets, targets }
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether there are no steps.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of edges (of all lists together).
    pub fn edges(&self) -> usize {
        self.targets.len()
    }

    /// Step `i`'s list, or `None` past the last step.
    pub fn get(&self, i: usize) -> Option<&[u32]> {
        let start = *self.offsets.get(i)? as usize;
        let end = *self.offsets.get(i + 1)? as usize;
        self.targets.get(start..end)
    }

    /// Where step `i`'s list lies in [`targets`](Self::targets).
    ///
    /// # Panics
    /// When `i` is not a step.
    pub fn span(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    /// Every list, one after the other.
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }

    /// Every step's list, in step order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u32]> + '_ {
        self.offsets
            .windows(2)
            .map(|w| &self.targets[w[0] as usize..w[1] as usize])
    }

    /// The lists unpacked, one `Vec` per step (what the `parents`/`children` fields were).
    pub fn to_lists(&self) -> Vec<Vec<usize>> {
        self.iter()
            .map(|l| l.iter().map(|&t| t as usize).collect())
            .collect()
    }
}

impl std::ops::Index<usize> for Adjacency {
    type Output = [u32];

    /// Step `i`'s list.
    ///
    /// # Panics
    /// When `i` is not a step.
    fn index(&self, i: usize) -> &[u32] {
        &self.targets[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A step index or count as stored in an [`Adjacency`].
fn small(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl ValidatedPlan {
    /// For each step (by index), the indices of its dependencies.
    pub fn parents(&self) -> &Adjacency {
        &self.parents
    }

    /// For each step, the indices of the steps that depend on it.
    pub fn children(&self) -> &Adjacency {
        &self.children
    }

    /// The index of a step id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.plan.steps.iter().position(|s| s.id == id)
    }

    /// Step indices in a topological order (dependencies first, plan order among equals).
    pub fn topological_order(&self) -> Vec<usize> {
        let mut order = vec![0; self.topo_rank.len()];
        for (i, &r) in self.topo_rank.iter().enumerate() {
            order[r] = i;
        }
        order
    }

    /// The plan as a [`petgraph`] graph, for running graph algorithms of your own on it (cargo
    /// feature `petgraph`). Node `i` is step `i` of the plan (its weight is the step id); an
    /// edge goes from a dependency to its dependent, as `nuvira graph` draws it. The graph is
    /// acyclic: validation refused every cycle.
    ///
    /// ```
    /// use nuvira_api::{ExecutionPlan, PlanStep};
    /// let mut b = PlanStep::new("b", "m");
    /// b.depends_on = vec!["a".into()];
    /// let plan = ExecutionPlan { goal: "g".into(), steps: vec![PlanStep::new("a", "m"), b], ..Default::default() };
    /// let v = nuvira_engine::validate::validate(&plan, None).unwrap();
    /// let g = v.to_petgraph();
    /// let order = petgraph::algo::toposort(&g, None).unwrap();
    /// assert_eq!(order.iter().map(|&n| &*g[n]).collect::<Vec<_>>(), ["a", "b"]);
    /// ```
    #[cfg(feature = "petgraph")]
    pub fn to_petgraph(&self) -> petgraph::graph::DiGraph<Arc<str>, ()> {
        let edges = self.parents.edges();
        let mut g = petgraph::graph::DiGraph::with_capacity(self.ids.len(), edges);
        let nodes: Vec<_> = self.ids.iter().map(|id| g.add_node(id.clone())).collect();
        for (child, parents) in self.parents.iter().enumerate() {
            for &parent in parents {
                g.add_edge(nodes[parent as usize], nodes[child], ());
            }
        }
        g
    }

    /// The length (in steps) of the longest dependency chain.
    pub fn critical_path_len(&self) -> usize {
        let mut depth = vec![0usize; self.parents.len()];
        for i in self.topological_order() {
            depth[i] = 1 + self.parents[i]
                .iter()
                .map(|&p| depth[p as usize])
                .max()
                .unwrap_or(0);
        }
        depth.into_iter().max().unwrap_or(0)
    }
}

/// The most cycles listed for one group of mutually dependent steps (one strongly connected
/// component of the dependency graph).
pub const MAX_CYCLES_PER_GROUP: usize = 50;

/// Whether an id is made of `[A-Za-z0-9_.-]` only (and is not empty).
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// At most this many step ids are named in one message; the rest are counted.
pub const MAX_NAMED_STEPS: usize = 20;

/// `a, b, c`, or for more than [`MAX_NAMED_STEPS`] ids the first ones and `and N more`.
fn name_some<'a>(ids: impl Iterator<Item = &'a str>, total: usize) -> String {
    let mut out = ids.take(MAX_NAMED_STEPS).collect::<Vec<_>>().join(", ");
    if total > MAX_NAMED_STEPS {
        out.push_str(&format!(" and {} more", total - MAX_NAMED_STEPS));
    }
    out
}

/// A cycle's path `a -> b -> a`; a path of more than [`MAX_NAMED_STEPS`] steps names its first
/// and last ones and counts those between.
fn cycle_path(ids: &[String]) -> String {
    let steps = ids.len().saturating_sub(1);
    if steps <= MAX_NAMED_STEPS {
        return ids.join(" -> ");
    }
    let half = MAX_NAMED_STEPS / 2;
    format!(
        "{} -> ... ({} more) -> {}",
        ids[..half].join(" -> "),
        steps - MAX_NAMED_STEPS,
        ids[ids.len() - half..].join(" -> ")
    )
}

/// Validates a plan against a registry, reporting every problem.
///
/// `registry: None` skips the module checks (`unknown-module`, `invalid-config`) and
/// treats steps named `verify`/`report` as outputs by name (with a registry, a step's module's
/// [`ModuleKind::is_default_output`](nuvira_api::ModuleKind::is_default_output) decides).
///
/// # Errors
/// [`ValidationErrors`] listing every problem found.
pub fn validate(
    plan: &ExecutionPlan,
    registry: Option<&ModuleRegistry>,
) -> Result<ValidatedPlan, ValidationErrors> {
    validate_with(plan, registry, || Arc::new(plan.clone()))
}

/// [`validate`] for a plan the caller already shares: the validated plan keeps this `Arc`
/// instead of a deep copy of the plan (for 10,000 steps the copy was most of validation's time
/// and ~800 bytes per step held for the whole run). [`Engine::run`](crate::Engine::run) moves
/// the caller's plan in here.
///
/// # Errors
/// [`ValidationErrors`] listing every problem found.
pub fn validate_shared(
    plan: Arc<ExecutionPlan>,
    registry: Option<&ModuleRegistry>,
) -> Result<ValidatedPlan, ValidationErrors> {
    let shared = plan.clone();
    validate_with(&plan, registry, move || shared)
}

fn validate_with(
    plan: &ExecutionPlan,
    registry: Option<&ModuleRegistry>,
    share: impl FnOnce() -> Arc<ExecutionPlan>,
) -> Result<ValidatedPlan, ValidationErrors> {
    let mut problems = Vec::new();
    let steps = &plan.steps;
    if steps.is_empty() {
        problems.push(Problem::new(
            ProblemKind::EmptyPlan,
            vec![],
            "the plan has no steps: add at least one under `steps:`".into(),
        ));
        return Err(ValidationErrors { problems });
    }

    // Ids: invalid and duplicate. The first step with an id owns it.
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(steps.len());
    let mut reported_dup: HashSet<&str> = HashSet::new();
    for (i, step) in steps.iter().enumerate() {
        if !is_valid_id(&step.id) {
            problems.push(
                Problem::new(
                    ProblemKind::InvalidId,
                    vec![step.id.clone()],
                    format!(
                        "step id `{}` is invalid: use only letters, digits, `_`, `.` and `-`",
                        step.id
                    ),
                )
                .at(i),
            );
        }
        if index.contains_key(step.id.as_str()) {
            if reported_dup.insert(step.id.as_str()) {
                let count = steps.iter().filter(|s| s.id == step.id).count();
                problems.push(
                    Problem::new(
                        ProblemKind::DuplicateId,
                        vec![step.id.clone()],
                        format!(
                            "step id `{}` is used by {count} steps: give each step its own id",
                            step.id
                        ),
                    )
                    .at(i),
                );
            }
        } else {
            index.insert(step.id.as_str(), i);
        }
    }

    // Modules.
    let mut output_by_kind: Vec<bool> = vec![false; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        match registry {
            Some(reg) => match reg.get(&step.module) {
                Some(module) => {
                    output_by_kind[i] = module.kind().is_default_output();
                    if let Err(e) = module.validate(step) {
                        // The error's message, without its step: the problem names the step
                        // and its module itself.
                        problems.push(
                            Problem::new(
                                ProblemKind::InvalidConfig,
                                vec![step.id.clone()],
                                format!("step `{}` ({}): {}", step.id, step.module, e.message),
                            )
                            .at(i),
                        );
                    }
                }
                None => {
                    let known = reg.names().join(", ");
                    problems.push(Problem::new(
                        ProblemKind::UnknownModule,
                        vec![step.id.clone()],
                        format!(
                            "step `{}` uses module `{}`, which is not registered (known: {known})",
                            step.id, step.module
                        ),
                    ).at(i));
                }
            },
            None => {
                output_by_kind[i] = matches!(step.module.as_str(), "verify" | "report");
            }
        }
    }

    // Edges: dangling references; build the graph over first-occurrence ids.
    let n = steps.len();
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, step) in steps.iter().enumerate() {
        // A duplicate (already reported) joins the graph as the step that owns its id, so its
        // dependencies are checked too.
        let node = index.get(step.id.as_str()).copied().unwrap_or(i);
        let mut seen: HashSet<usize> = parents[node].iter().copied().collect();
        for dep in &step.depends_on {
            match index.get(dep.as_str()) {
                Some(&d) => {
                    if seen.insert(d) {
                        parents[node].push(d);
                        children[d].push(node);
                    }
                }
                None => problems.push(
                    Problem::new(
                        ProblemKind::Dangling,
                        vec![step.id.clone(), dep.clone()],
                        format!(
                            "step `{}` depends on `{dep}`, which does not exist{}",
                            step.id,
                            suggestion(dep, index.keys().copied())
                        ),
                    )
                    .at(i),
                ),
            }
        }
    }

    // Cycles: every elementary cycle of each strongly connected component that has one, in
    // the order of the components' first steps.
    let mut in_cycle = vec![false; n];
    let order = topological_order(&parents, &children);
    let groups = if order.len() == n {
        Vec::new()
    } else {
        cyclic_components(&children, &vec![false; n])
    };
    for members in groups {
        for &v in &members {
            in_cycle[v] = true;
        }
        let (cycles, more) = elementary_cycles(&members, &children, MAX_CYCLES_PER_GROUP);
        let last = cycles.len().saturating_sub(1);
        for (k, path) in cycles.into_iter().enumerate() {
            let ids: Vec<String> = path.iter().map(|&i| steps[i].id.clone()).collect();
            let mut message = format!(
                "steps depend on each other in a cycle: {} (each step waits for the one before it; remove one of these dependencies)",
                cycle_path(&ids)
            );
            if more && k == last {
                message.push_str(&format!(
                    "; these {} steps form more cycles than the {MAX_CYCLES_PER_GROUP} listed: break these and validate again",
                    members.len()
                ));
            }
            problems.push(Problem::new(ProblemKind::Cycle, ids, message));
        }
    }

    // Outputs.
    let mut outputs: Vec<usize> = Vec::new();
    let mut outputs_known = true;
    if let Some(named) = &plan.outputs {
        for id in named {
            if id == ExecutionPlan::SINKS {
                outputs.extend((0..n).filter(|&i| {
                    children[i].is_empty() && index.get(steps[i].id.as_str()) == Some(&i)
                }));
                continue;
            }
            match index.get(id.as_str()) {
                Some(&i) => outputs.push(i),
                // The outputs are wrong: which steps are orphans cannot be told yet.
                None => outputs_known = false,
            }
            if !index.contains_key(id.as_str()) {
                problems.push(Problem::new(
                    ProblemKind::UnknownOutput,
                    vec![id.clone()],
                    format!(
                        "`outputs` names `{id}`, which is not a step{}",
                        suggestion(id, index.keys().copied())
                    ),
                ));
            }
        }
        if named.is_empty() {
            problems.push(Problem::new(
                ProblemKind::AmbiguousGoal,
                vec![],
                "`outputs` is empty: name the steps the goal is about, or remove `outputs`".into(),
            ));
            outputs_known = false;
        }
    } else {
        outputs = (0..n)
            .filter(|&i| output_by_kind[i] && index.get(steps[i].id.as_str()) == Some(&i))
            .collect();
        if outputs.is_empty() {
            let sinks: Vec<usize> = (0..n)
                .filter(|&i| children[i].is_empty() && index.get(steps[i].id.as_str()) == Some(&i))
                .collect();
            if sinks.len() == 1 {
                outputs = sinks;
            } else {
                outputs_known = false;
                let ids: Vec<String> = sinks.iter().map(|&i| steps[i].id.clone()).collect();
                problems.push(Problem::new(
                    ProblemKind::AmbiguousGoal,
                    ids.clone(),
                    if ids.is_empty() {
                        "the plan has no final step (every step has a dependent): add `outputs` naming the steps the goal is about".into()
                    } else {
                        format!(
                            "the plan has no verify or report step and {} final steps ({}): add `outputs: sinks` (every final step is an output), `outputs` naming the steps the goal is about, or a report step depending on them",
                            ids.len(),
                            name_some(ids.iter().map(String::as_str), ids.len())
                        )
                    },
                ));
            }
        }
    }

    // Orphans: steps from which no output is reachable (reverse BFS from the outputs).
    if outputs_known {
        let mut reaches = vec![false; n];
        let mut queue: VecDeque<usize> = outputs.iter().copied().collect();
        for &o in &outputs {
            reaches[o] = true;
        }
        while let Some(i) = queue.pop_front() {
            for &p in &parents[i] {
                if !reaches[p] {
                    reaches[p] = true;
                    queue.push_back(p);
                }
            }
        }
        for i in 0..n {
            if !reaches[i] && index.get(steps[i].id.as_str()) == Some(&i) && !in_cycle[i] {
                let out_ids: Vec<&str> = outputs.iter().map(|&o| steps[o].id.as_str()).collect();
                problems.push(Problem::new(
                    ProblemKind::Orphan,
                    vec![steps[i].id.clone()],
                    format!(
                        "step `{}` is orphaned: no output depends on it (outputs: {}); make an output depend on it or remove it",
                        steps[i].id,
                        name_some(out_ids.iter().copied(), out_ids.len())
                    ),
                ).at(i));
            }
        }
    }

    if problems.is_empty() {
        // Packed one at a time, each list freed as soon as it is packed.
        let parents = Adjacency::from_lists(&parents);
        let children = {
            let lists = children;
            Adjacency::from_lists(&lists)
        };
        let mut validated = ValidatedPlan {
            plan: share(),
            ids: steps.iter().map(|s| Arc::from(s.id.as_str())).collect(),
            topo_rank: Vec::new(),
            parents,
            children,
            outputs,
        };
        let mut rank = vec![0; n];
        for (r, i) in order.into_iter().enumerate() {
            rank[i] = r;
        }
        validated.topo_rank = rank;
        Ok(validated)
    } else {
        Err(ValidationErrors { problems })
    }
}

/// The elementary cycles of one strongly connected component (`members`, sorted), at most
/// `cap` of them, each a path along `next` (a dependency -> its dependent) ending with its
/// first step again; and whether more exist.
///
/// Johnson's algorithm: for the least step `s` of each remaining component, every cycle through
/// `s` over steps after it, found by a depth-first search whose blocking keeps it from walking
/// a dead end twice; then `s` is dropped and the components recomputed. Iterative, so a cycle
/// of 100,000 steps does not overflow the stack. Every round finds at least one cycle, so the
/// work is O((steps + edges) x cycles found).
fn elementary_cycles(
    members: &[usize],
    next: &[Vec<usize>],
    cap: usize,
) -> (Vec<Vec<usize>>, bool) {
    // Local numbering: members[k] is local k; edges leave the component's member set out.
    let local: HashMap<usize, usize> = members.iter().enumerate().map(|(k, &v)| (v, k)).collect();
    let adj: Vec<Vec<usize>> = members
        .iter()
        .map(|&v| {
            next[v]
                .iter()
                .filter_map(|w| local.get(w).copied())
                .collect()
        })
        .collect();
    let m = members.len();
    let mut cycles: Vec<Vec<usize>> = Vec::new();
    let mut removed = vec![false; m];
    let mut blocked = vec![false; m];
    let mut block_map: Vec<Vec<usize>> = vec![Vec::new(); m];
    let mut in_comp = vec![false; m];
    loop {
        // The least remaining step that lies on a cycle, and its component.
        let Some(comp) = cyclic_components(&adj, &removed).into_iter().next() else {
            return (cycles, false);
        };
        let s = comp[0];
        for &v in &comp {
            in_comp[v] = true;
            blocked[v] = false;
            block_map[v].clear();
        }
        // Frames: (step, next neighbour to try, found a cycle below).
        let mut frames: Vec<(usize, usize, bool)> = vec![(s, 0, false)];
        let mut path: Vec<usize> = vec![s];
        blocked[s] = true;
        while let Some(frame) = frames.last_mut() {
            let (v, pos) = (frame.0, frame.1);
            if let Some(&w) = adj[v].get(pos) {
                frame.1 += 1;
                if !in_comp[w] {
                    continue;
                }
                if w == s {
                    frame.2 = true;
                    if cycles.len() == cap {
                        return (cycles, true);
                    }
                    let mut cycle: Vec<usize> = path.iter().map(|&k| members[k]).collect();
                    cycle.push(members[s]);
                    cycles.push(cycle);
                } else if !blocked[w] {
                    blocked[w] = true;
                    path.push(w);
                    frames.push((w, 0, false));
                }
                continue;
            }
            let found = frame.2;
            if found {
                unblock(v, &mut blocked, &mut block_map);
            } else {
                for &w in &adj[v] {
                    if in_comp[w] && !block_map[w].contains(&v) {
                        block_map[w].push(v);
                    }
                }
            }
            frames.pop();
            path.pop();
            if let Some(parent) = frames.last_mut() {
                parent.2 |= found;
            }
        }
        for &v in &comp {
            in_comp[v] = false;
        }
        removed[s] = true;
    }
}

/// Johnson's unblock, without recursion.
fn unblock(u: usize, blocked: &mut [bool], block_map: &mut [Vec<usize>]) {
    let mut stack = vec![u];
    while let Some(x) = stack.pop() {
        if blocked[x] {
            blocked[x] = false;
            stack.append(&mut block_map[x]);
        }
    }
}

/// Kahn's topological sort: dependencies first, plan order among equals. Shorter than the
/// plan when there is a cycle (the steps on or after a cycle are left out).
fn topological_order(parents: &[Vec<usize>], children: &[Vec<usize>]) -> Vec<usize> {
    let mut indeg: Vec<usize> = parents.iter().map(Vec::len).collect();
    let mut queue: VecDeque<usize> = (0..indeg.len()).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(indeg.len());
    while let Some(i) = queue.pop_front() {
        order.push(i);
        for &c in &children[i] {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                queue.push_back(c);
            }
        }
    }
    order
}

/// The strongly connected components that hold a cycle (more than one step, or a step that
/// depends on itself), over the steps not `removed`: each sorted, ordered by their least step.
/// Tarjan's algorithm with an explicit stack.
fn cyclic_components(adj: &[Vec<usize>], removed: &[bool]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = adj.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let mut next = 0;
    let mut out: Vec<Vec<usize>> = Vec::new();
    for root in 0..n {
        if removed[root] || index[root] != UNSEEN {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        calls.push((root, 0));
        while let Some(&mut (v, ref mut pos)) = calls.last_mut() {
            if let Some(&w) = adj[v].get(*pos) {
                *pos += 1;
                if removed[w] {
                    continue;
                }
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 || adj[v].contains(&v) {
                    comp.sort_unstable();
                    out.push(comp);
                }
            }
        }
    }
    out.sort_unstable_by_key(|c| c[0]);
    out
}

/// " (did you mean `x`?)" when a known id is close to the unknown one: at most one edit
/// (insertion, deletion, substitution or swap of two neighbours) per three characters, and
/// never an id that shares nothing with it (`x` does not suggest `a`).
fn suggestion<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> String {
    let len = unknown.chars().count();
    known
        .filter_map(|k| {
            let longest = len.max(k.chars().count());
            let d = edit_distance(unknown, k);
            (d <= (longest / 3).max(1) && d < len.min(k.chars().count())).then_some((d, k))
        })
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

/// Optimal string alignment distance: Levenshtein plus the swap of two neighbours.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::Adjacency;

    /// The packed lists give back exactly the per-step lists they were built from, empty
    /// lists and the last step included.
    #[test]
    fn an_adjacency_round_trips_its_lists() {
        let lists = vec![vec![], vec![0], vec![0, 1], vec![], vec![2]];
        let adj = Adjacency::from_lists(&lists);
        assert_eq!(adj.len(), 5);
        assert_eq!(adj.edges(), 4);
        assert_eq!(adj.to_lists(), lists);
        assert_eq!(&adj[2], [0, 1]);
        assert_eq!(adj.get(4), Some(&[2][..]));
        assert_eq!(adj.get(5), None);
        assert_eq!(adj.span(3), 3..3);
        assert_eq!(adj.iter().len(), 5);
    }
}
