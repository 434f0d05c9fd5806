//! The [`Module`] trait, what a module is given ([`StepContext`]) and what it returns
//! ([`StepOutput`] or [`ModuleError`]).

use crate::{
    EditPreview, EditResult, EventKind, EventSink, ExecutionPlan, ExecutionReport,
    InspectionResult, LlmClient, PlanStep, RepairResult, TestResult, VerificationResult,
    async_trait, test::CommandOutput,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The broad role of a module; used for defaults (e.g. which steps are plan outputs) and for
/// listing the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ModuleKind {
    /// Produces plans.
    Plan,
    /// Reads the repository.
    Inspect,
    /// Changes files.
    Edit,
    /// Runs tests.
    Test,
    /// Repairs failures.
    Recover,
    /// Checks the result; a plan output by default.
    Verify,
    /// Runs a command.
    Execute,
    /// Summarises the run; a plan output by default.
    Report,
    /// Anything else.
    Custom,
}

impl ModuleKind {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Inspect => "inspect",
            Self::Edit => "edit",
            Self::Test => "test",
            Self::Recover => "recover",
            Self::Verify => "verify",
            Self::Execute => "execute",
            Self::Report => "report",
            Self::Custom => "custom",
        }
    }
}

/// Which files a step may write. The scheduler never runs two steps whose write sets
/// [conflict](WriteSet::conflicts) at the same time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "paths")]
pub enum WriteSet {
    /// The step writes nothing in the workspace.
    ReadOnly,
    /// The step writes these workspace-relative paths (a directory covers everything below it).
    Paths(BTreeSet<String>),
    /// The step may write anywhere: it runs alone among writers. The safe default.
    Exclusive,
}

impl WriteSet {
    /// A write set of these paths, normalised (`./a//b` and `a/b` are the same path).
    pub fn paths<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::Paths(paths.into_iter().map(|p| normalize(p.as_ref())).collect())
    }

    /// Whether two steps with these write sets must not run at the same time.
    ///
    /// ```
    /// use nuvira_api::WriteSet;
    /// let src = WriteSet::paths(["src"]);
    /// assert!(src.conflicts(&WriteSet::paths(["src/lib.rs"])));
    /// assert!(!src.conflicts(&WriteSet::paths(["srcs/lib.rs"])));
    /// assert!(!src.conflicts(&WriteSet::ReadOnly));
    /// assert!(WriteSet::Exclusive.conflicts(&src));
    /// ```
    pub fn conflicts(&self, other: &WriteSet) -> bool {
        match (self, other) {
            (Self::ReadOnly, _) | (_, Self::ReadOnly) => false,
            (Self::Exclusive, _) | (_, Self::Exclusive) => true,
            (Self::Paths(a), Self::Paths(b)) => a
                .iter()
                .any(|x| b.iter().any(|y| covers(x, y) || covers(y, x))),
        }
    }
}

fn normalize(p: &str) -> String {
    let parts: Vec<String> = Path::new(p)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    parts.join("/")
}

fn covers(dir: &str, path: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

/// A run-wide cancellation signal, as seen by a module.
///
/// The engine hands every step one; a long-running module should check
/// [`is_cancelled`](CancelSignal::is_cancelled) between units of work or race its work against
/// [`cancelled`](CancelSignal::cancelled). The engine also drops the step's future when the run
/// is cancelled, so a module that only awaits is stopped at its next await point.
#[async_trait]
pub trait CancelSignal: Send + Sync {
    /// Whether cancellation was requested.
    fn is_cancelled(&self) -> bool;
    /// Completes once cancellation is requested.
    async fn cancelled(&self);
}

/// A [`CancelSignal`] that never fires, for running a module outside the engine.
#[derive(Debug, Default, Clone, Copy)]
pub struct NeverCancelled;

#[async_trait]
impl CancelSignal for NeverCancelled {
    fn is_cancelled(&self) -> bool {
        false
    }
    async fn cancelled(&self) {
        std::future::pending::<()>().await;
    }
}

/// Read access to the outputs of the steps a step depends on.
///
/// Keyed by the asking step's id, so one object can serve every step of a run (the engine
/// hands all steps the same one). Modules usually call [`StepContext::dependency`] and
/// [`StepContext::upstream`], which pass their own step id.
pub trait StepInputs: Send + Sync {
    /// The output of `step`'s direct dependency `id`.
    fn dependency(&self, step: &str, id: &str) -> Option<Arc<StepOutput>>;
    /// The outputs of every step `step` transitively depends on, dependencies before
    /// dependents, each with its step id.
    fn upstream(&self, step: &str) -> Vec<(String, Arc<StepOutput>)>;
}

/// Inputs for a step with no dependencies.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoInputs;

impl StepInputs for NoInputs {
    fn dependency(&self, _step: &str, _id: &str) -> Option<Arc<StepOutput>> {
        None
    }
    fn upstream(&self, _step: &str) -> Vec<(String, Arc<StepOutput>)> {
        Vec::new()
    }
}

/// What every step of a run shares: the run's identity, the workspace, the inputs, the event
/// sink, the model and the cancel signal.
///
/// The engine builds one per run and every [`StepContext`] of the run points at it, so
/// handing a step its context costs one reference count, however many fields there are.
#[derive(Clone)]
#[non_exhaustive]
pub struct RunInfo {
    /// The run.
    pub run_id: Arc<str>,
    /// The plan's goal.
    pub goal: Arc<str>,
    /// The workspace root; every path a module touches must resolve inside it.
    pub workspace_root: Arc<Path>,
    /// Whether the run is a dry run: modules must not change anything.
    pub dry_run: bool,
    /// Outputs of the run's steps, keyed by the asking step (see [`StepInputs`]).
    pub inputs: Arc<dyn StepInputs>,
    /// Where events go.
    pub events: Arc<dyn EventSink>,
    /// The model, when one is configured.
    pub llm: Option<Arc<dyn LlmClient>>,
    /// Run-wide cancellation.
    pub cancel: Arc<dyn CancelSignal>,
    /// The plan being run, when the run has one (the engine sets it; a standalone context
    /// has none).
    pub plan: Option<Arc<ExecutionPlan>>,
}

impl RunInfo {
    /// A run with these fields, not a dry run, without a model.
    pub fn new(
        run_id: Arc<str>,
        goal: Arc<str>,
        workspace_root: Arc<Path>,
        inputs: Arc<dyn StepInputs>,
        events: Arc<dyn EventSink>,
        cancel: Arc<dyn CancelSignal>,
    ) -> Self {
        Self {
            run_id,
            goal,
            workspace_root,
            dry_run: false,
            inputs,
            events,
            llm: None,
            cancel,
            plan: None,
        }
    }

    /// Builder-style: sets the plan being run.
    #[must_use]
    pub fn with_plan(mut self, plan: Option<Arc<ExecutionPlan>>) -> Self {
        self.plan = plan;
        self
    }

    /// Builder-style: sets dry-run.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Builder-style: sets the model.
    #[must_use]
    pub fn with_llm(mut self, llm: Option<Arc<dyn LlmClient>>) -> Self {
        self.llm = llm;
        self
    }
}

impl std::fmt::Debug for RunInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunInfo")
            .field("run_id", &self.run_id)
            .field("workspace_root", &self.workspace_root)
            .field("dry_run", &self.dry_run)
            .field("llm", &self.llm.as_ref().map(|l| l.model().to_owned()))
            .finish_non_exhaustive()
    }
}

/// Something that holds a run's [`RunInfo`]. A [`StepContext`] points at its run through
/// this, so an engine can hand out its own per-run state (which contains the `RunInfo`)
/// without a second allocation or reference count.
pub trait RunScope: Send + Sync {
    /// The run's shared information.
    fn run_info(&self) -> &RunInfo;

    /// The id of the run's step number `index`, for contexts made with
    /// [`StepContext::for_step`]. Scopes that do not number their steps return `None`.
    fn step_id(&self, index: usize) -> Option<&Arc<str>> {
        let _ = index;
        None
    }
}

/// How a context names its step: by id, or by number in its run's scope (which saves the
/// engine touching the id's reference count from every worker).
#[derive(Clone)]
enum StepName {
    Id(Arc<str>),
    Index(usize),
}

/// The id of a step whose scope could not name it (a scope that numbers no steps).
static UNNAMED: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from("?"));

impl RunScope for RunInfo {
    fn run_info(&self) -> &RunInfo {
        self
    }
}

/// Everything a module gets besides its step: who it is in which run, the workspace, the
/// outputs of its dependencies, where to send events, the model (if any), cancellation and the
/// deadline.
///
/// Run-wide parts live in the run's shared [`RunInfo`]; the context adds the step's id, the
/// attempt, the deadline and feedback. Read everything through the accessors; the `with_*`
/// builders change a copy.
#[derive(Clone)]
pub struct StepContext {
    run: Arc<dyn RunScope>,
    step: StepName,
    /// Replaces the run's inputs for this step (sub-steps of a split see their parent's).
    inputs: Option<Arc<dyn StepInputs>>,
    attempt: u32,
    deadline: Option<Instant>,
    feedback: Option<String>,
}

impl std::fmt::Debug for StepContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let run = self.run();
        f.debug_struct("StepContext")
            .field("run_id", &run.run_id)
            .field("step_id", self.step_id())
            .field("workspace_root", &run.workspace_root)
            .field("dry_run", &run.dry_run)
            .field("attempt", &self.attempt)
            .field("llm", &run.llm.as_ref().map(|l| l.model().to_owned()))
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl StepContext {
    /// A context for running one module by itself on a workspace (tests, embedding, the CLI's
    /// single-purpose commands): no dependencies, events dropped unless a sink is set, never
    /// cancelled.
    pub fn standalone(workspace_root: impl Into<PathBuf>) -> Self {
        let run = RunInfo::new(
            "standalone".into(),
            "".into(),
            Arc::from(workspace_root.into()),
            Arc::new(NoInputs),
            Arc::new(crate::NullSink),
            Arc::new(NeverCancelled),
        );
        Self::for_run(Arc::new(run), "standalone".into())
    }

    /// A context with every field given (first attempt, no deadline, not a dry run).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run_id: Arc<str>,
        step_id: Arc<str>,
        goal: Arc<str>,
        workspace_root: Arc<Path>,
        inputs: Arc<dyn StepInputs>,
        events: Arc<dyn EventSink>,
        cancel: Arc<dyn CancelSignal>,
    ) -> Self {
        let run = RunInfo::new(run_id, goal, workspace_root, inputs, events, cancel);
        Self::for_run(Arc::new(run), step_id)
    }

    /// The context of step `step_id` in a run (first attempt, no deadline). This is what the
    /// engine uses for each step: one reference count and the step id, no allocation.
    pub fn for_run(run: Arc<dyn RunScope>, step_id: Arc<str>) -> Self {
        Self::with_name(run, StepName::Id(step_id))
    }

    /// The context of the run's step number `index`, whose id the scope gives
    /// ([`RunScope::step_id`]). This is what the engine uses for each step: one reference
    /// count, no allocation.
    pub fn for_step(run: Arc<dyn RunScope>, index: usize) -> Self {
        Self::with_name(run, StepName::Index(index))
    }

    fn with_name(run: Arc<dyn RunScope>, step: StepName) -> Self {
        Self {
            run,
            step,
            inputs: None,
            attempt: 1,
            deadline: None,
            feedback: None,
        }
    }

    /// What the run's steps share.
    pub fn run(&self) -> &RunInfo {
        self.run.run_info()
    }

    /// The run this step belongs to.
    pub fn run_id(&self) -> &Arc<str> {
        &self.run().run_id
    }

    /// The step's id.
    pub fn step_id(&self) -> &Arc<str> {
        match &self.step {
            StepName::Id(id) => id,
            StepName::Index(i) => self.run.step_id(*i).unwrap_or(&UNNAMED),
        }
    }

    /// The plan's goal.
    pub fn goal(&self) -> &Arc<str> {
        &self.run().goal
    }

    /// The workspace root; every path a module touches must resolve inside it.
    pub fn workspace_root(&self) -> &Arc<Path> {
        &self.run().workspace_root
    }

    /// Whether the run is a dry run: modules must not change anything.
    pub fn dry_run(&self) -> bool {
        self.run().dry_run
    }

    /// The attempt number, from 1; greater when the recover stage retries the step.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Outputs of the dependencies (prefer [`dependency`](Self::dependency) and
    /// [`upstream`](Self::upstream), which pass this step's id).
    pub fn inputs(&self) -> &Arc<dyn StepInputs> {
        self.inputs.as_ref().unwrap_or(&self.run().inputs)
    }

    /// Where events go (prefer [`emit`](Self::emit), which names this step).
    pub fn events(&self) -> &Arc<dyn EventSink> {
        &self.run().events
    }

    /// The model, when one is configured.
    pub fn llm(&self) -> Option<&Arc<dyn LlmClient>> {
        self.run().llm.as_ref()
    }

    /// Run-wide cancellation.
    pub fn cancel(&self) -> &Arc<dyn CancelSignal> {
        &self.run().cancel
    }

    /// The plan being run, when there is one: a step can see the whole graph (a report step
    /// draws its edges from it).
    pub fn plan(&self) -> Option<&Arc<ExecutionPlan>> {
        self.run().plan.as_ref()
    }

    /// When the step must be done; the engine stops it at this instant.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Feedback for a retried attempt (e.g. the errors of the previous one).
    pub fn feedback(&self) -> Option<&str> {
        self.feedback.as_deref()
    }

    /// Changes a copy of the run-wide part for this context only.
    fn edit_run(mut self, edit: impl FnOnce(&mut RunInfo)) -> Self {
        // The new run is a plain `RunInfo` that numbers no steps: name the step by its id.
        if let StepName::Index(_) = self.step {
            self.step = StepName::Id(self.step_id().clone());
        }
        let mut run = self.run().clone();
        edit(&mut run);
        self.run = Arc::new(run);
        self
    }

    /// Builder-style: sets the event sink.
    #[must_use]
    pub fn with_events(self, events: Arc<dyn EventSink>) -> Self {
        self.edit_run(|r| r.events = events)
    }

    /// Builder-style: sets the inputs of this step.
    #[must_use]
    pub fn with_inputs(mut self, inputs: Arc<dyn StepInputs>) -> Self {
        self.inputs = Some(inputs);
        self
    }

    /// Builder-style: sets the model.
    #[must_use]
    pub fn with_llm(self, llm: Option<Arc<dyn LlmClient>>) -> Self {
        self.edit_run(|r| r.llm = llm)
    }

    /// Builder-style: sets the plan being run.
    #[must_use]
    pub fn with_plan(self, plan: Option<Arc<ExecutionPlan>>) -> Self {
        self.edit_run(|r| r.plan = plan)
    }

    /// Builder-style: sets dry-run.
    #[must_use]
    pub fn with_dry_run(self, dry_run: bool) -> Self {
        self.edit_run(|r| r.dry_run = dry_run)
    }

    /// Builder-style: sets the workspace root.
    #[must_use]
    pub fn with_workspace_root(self, root: impl Into<PathBuf>) -> Self {
        let root: Arc<Path> = Arc::from(root.into());
        self.edit_run(|r| r.workspace_root = root)
    }

    /// Builder-style: sets the cancel signal.
    #[must_use]
    pub fn with_cancel(self, cancel: Arc<dyn CancelSignal>) -> Self {
        self.edit_run(|r| r.cancel = cancel)
    }

    /// Builder-style: sets the run identity, step id and goal.
    #[must_use]
    pub fn with_identity(
        mut self,
        run_id: impl Into<Arc<str>>,
        step_id: impl Into<Arc<str>>,
        goal: impl Into<Arc<str>>,
    ) -> Self {
        let (run_id, goal) = (run_id.into(), goal.into());
        self.step = StepName::Id(step_id.into());
        if *self.run().run_id == *run_id && *self.run().goal == *goal {
            return self;
        }
        self.edit_run(|r| {
            r.run_id = run_id;
            r.goal = goal;
        })
    }

    /// Builder-style: sets the step id.
    #[must_use]
    pub fn with_step_id(mut self, step_id: impl Into<Arc<str>>) -> Self {
        self.step = StepName::Id(step_id.into());
        self
    }

    /// Builder-style: sets the attempt number (from 1).
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Builder-style: sets the deadline.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Builder-style: sets the feedback for a retried attempt.
    #[must_use]
    pub fn with_feedback(mut self, feedback: Option<String>) -> Self {
        self.feedback = feedback;
        self
    }

    /// Builder-style: sets dry-run, attempt, cancellation, deadline and feedback.
    #[must_use]
    pub fn with_execution(
        self,
        dry_run: bool,
        attempt: u32,
        cancel: Arc<dyn CancelSignal>,
        deadline: Option<Instant>,
        feedback: Option<String>,
    ) -> Self {
        self.edit_run(|r| {
            r.dry_run = dry_run;
            r.cancel = cancel;
        })
        .with_attempt(attempt)
        .with_deadline(deadline)
        .with_feedback(feedback)
    }

    /// Emits an event for this step.
    pub fn emit(&self, kind: EventKind) {
        self.events().emit(Some(self.step_id()), kind);
    }

    /// The output of this step's direct dependency `id`.
    pub fn dependency(&self, id: &str) -> Option<Arc<StepOutput>> {
        self.inputs().dependency(self.step_id(), id)
    }

    /// The outputs of every step this one transitively depends on, dependencies before
    /// dependents, each with its step id.
    pub fn upstream(&self) -> Vec<(String, Arc<StepOutput>)> {
        self.inputs().upstream(self.step_id())
    }

    /// The first upstream output (nearest dependencies first) that `pick` accepts.
    pub fn find_upstream<T>(&self, mut pick: impl FnMut(&StepOutput) -> Option<T>) -> Option<T> {
        self.upstream().iter().rev().find_map(|(_, out)| pick(out))
    }
}

/// What a step produced. Typed variants for the built-in modules, [`StepOutput::Value`] for
/// anything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum StepOutput {
    /// Nothing worth keeping.
    Empty,
    /// From `inspect`.
    Inspection(InspectionResult),
    /// From `edit`.
    Edit(EditResult),
    /// From `edit` in a dry run.
    EditPreview(EditPreview),
    /// From `test`.
    Test(TestResult),
    /// From `verify`.
    Verification(VerificationResult),
    /// From `execute`.
    Command(CommandOutput),
    /// From `report`.
    Report(Box<ExecutionReport>),
    /// From the recover stage.
    Repair(RepairResult),
    /// From a custom module.
    Value(serde_json::Value),
}

impl StepOutput {
    /// One line saying what the output holds, for progress displays and reports.
    pub fn summary(&self) -> String {
        match self {
            Self::Empty => "done".into(),
            Self::Inspection(r) => format!(
                "{} relevant of {} files",
                r.relevant_paths.len(),
                r.stats.total_files
            ),
            Self::Edit(r) => format!(
                "{} change(s) applied to {} file(s)",
                r.applied_count,
                r.preview.changes.len()
            ),
            Self::EditPreview(p) => format!("{} change(s) previewed", p.changes.len()),
            Self::Test(t) => format!(
                "{} passed, {} failed, {} skipped",
                t.passed, t.failed, t.skipped
            ),
            Self::Verification(v) => format!(
                "{} ({} check(s), score {:.2})",
                if v.passed { "passed" } else { "failed" },
                v.checks.len(),
                v.overall_score
            ),
            Self::Command(c) => match c.exit_code {
                Some(code) => format!("exit code {code}"),
                None => "no exit code".into(),
            },
            Self::Report(r) => format!("report {}", r.run_id),
            Self::Repair(r) => format!(
                "{} after {} attempt(s)",
                if r.success {
                    "repaired"
                } else {
                    "not repaired"
                },
                r.attempts.len()
            ),
            Self::Value(_) => "value".into(),
        }
    }
}

/// Why a step failed, in categories the recover stage and the exit code understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ErrorCategory {
    /// The code does not compile.
    CompileError,
    /// Tests ran and some failed.
    TestFailure,
    /// The step or its command ran out of time.
    Timeout,
    /// The command was killed for using too much memory.
    OutOfMemory,
    /// The requested sandbox (e.g. a Docker engine) is not there.
    SandboxUnavailable,
    /// Something else the step needs is missing from the environment (a model key, a tool).
    EnvironmentUnavailable,
    /// The model's provider is rate limiting us.
    LlmRateLimit,
    /// The model answered something unusable.
    LlmInvalidOutput,
    /// An edit was rejected (does not apply, breaks syntax, escapes the workspace).
    EditRejected,
    /// Verification found blockers.
    VerificationFailed,
    /// The step's configuration is wrong.
    InvalidConfig,
    /// A file system or process error.
    Io,
    /// A dependency failed or was skipped.
    DependencyFailed,
    /// The run was cancelled while the step ran.
    Cancelled,
    /// None of the above.
    Unknown,
}

impl ErrorCategory {
    /// Every category, in declaration order: for listing the valid names in a message and for
    /// config that maps categories to something. A test fails to compile when a variant is
    /// missing here.
    pub const ALL: &'static [ErrorCategory] = &[
        Self::CompileError,
        Self::TestFailure,
        Self::Timeout,
        Self::OutOfMemory,
        Self::SandboxUnavailable,
        Self::EnvironmentUnavailable,
        Self::LlmRateLimit,
        Self::LlmInvalidOutput,
        Self::EditRejected,
        Self::VerificationFailed,
        Self::InvalidConfig,
        Self::Io,
        Self::DependencyFailed,
        Self::Cancelled,
        Self::Unknown,
    ];

    /// Whether this category means the environment lacks something (exit code 3).
    pub fn is_environment(self) -> bool {
        matches!(
            self,
            Self::SandboxUnavailable | Self::EnvironmentUnavailable
        )
    }

    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CompileError => "compile-error",
            Self::TestFailure => "test-failure",
            Self::Timeout => "timeout",
            Self::OutOfMemory => "out-of-memory",
            Self::SandboxUnavailable => "sandbox-unavailable",
            Self::EnvironmentUnavailable => "environment-unavailable",
            Self::LlmRateLimit => "llm-rate-limit",
            Self::LlmInvalidOutput => "llm-invalid-output",
            Self::EditRejected => "edit-rejected",
            Self::VerificationFailed => "verification-failed",
            Self::InvalidConfig => "invalid-config",
            Self::Io => "io",
            Self::DependencyFailed => "dependency-failed",
            Self::Cancelled => "cancelled",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod category_tests {
    #![allow(clippy::unwrap_used)]
    use super::ErrorCategory;

    #[test]
    fn all_lists_every_category_once_in_order() {
        // Exhaustive on purpose: a new variant does not compile until it has a position here
        // and in `ALL`.
        fn position(c: ErrorCategory) -> usize {
            use ErrorCategory::*;
            match c {
                CompileError => 0,
                TestFailure => 1,
                Timeout => 2,
                OutOfMemory => 3,
                SandboxUnavailable => 4,
                EnvironmentUnavailable => 5,
                LlmRateLimit => 6,
                LlmInvalidOutput => 7,
                EditRejected => 8,
                VerificationFailed => 9,
                InvalidConfig => 10,
                Io => 11,
                DependencyFailed => 12,
                Cancelled => 13,
                Unknown => 14,
            }
        }
        let positions: Vec<usize> = ErrorCategory::ALL.iter().map(|&c| position(c)).collect();
        assert_eq!(positions, (0..=14).collect::<Vec<_>>());
    }

    #[test]
    fn every_category_round_trips_through_its_name() {
        for &c in ErrorCategory::ALL {
            let name = serde_json::to_value(c).unwrap();
            assert_eq!(name, c.as_str(), "serde and as_str agree");
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(serde_json::from_value::<ErrorCategory>(name).unwrap(), c);
        }
    }
}

/// The details of a failed step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Failure {
    /// What kind of failure.
    pub category: ErrorCategory,
    /// A lowercase sentence fragment naming what failed and what to do.
    pub message: String,
    /// Evidence: compiler lines, failing test names, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// What the step produced before failing (e.g. the failing [`TestResult`]), kept for reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Box<StepOutput>>,
}

impl Failure {
    /// A failure of a category with a message.
    pub fn new(category: ErrorCategory, message: impl Into<String>) -> Self {
        Self {
            category,
            message: message.into(),
            evidence: Vec::new(),
            output: None,
        }
    }

    /// Builder-style: attaches evidence.
    #[must_use]
    pub fn with_evidence<I, S>(mut self, evidence: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.evidence.extend(evidence.into_iter().map(Into::into));
        self
    }

    /// Builder-style: attaches the partial output.
    #[must_use]
    pub fn with_output(mut self, output: StepOutput) -> Self {
        self.output = Some(Box::new(output));
        self
    }
}

/// How a module failed.
///
/// The engine hands only [`Recoverable`](ModuleError::Recoverable) failures to the recover
/// stage (which may retry the step under its budget); [`Fatal`](ModuleError::Fatal) failures
/// and [`Cancelled`](ModuleError::Cancelled) end the step at once.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// A failure another attempt might fix (tests failed, the model timed out).
    #[error("{}", .0.message)]
    Recoverable(Failure),
    /// A failure no retry can fix (bad config, no Docker engine).
    #[error("{}", .0.message)]
    Fatal(Failure),
    /// The run was cancelled while the step ran.
    #[error("cancelled")]
    Cancelled,
}

impl ModuleError {
    /// A recoverable failure.
    pub fn recoverable(category: ErrorCategory, message: impl Into<String>) -> Self {
        Self::Recoverable(Failure::new(category, message))
    }

    /// A fatal failure.
    pub fn fatal(category: ErrorCategory, message: impl Into<String>) -> Self {
        Self::Fatal(Failure::new(category, message))
    }

    /// A fatal [`ErrorCategory::InvalidConfig`] failure.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::fatal(ErrorCategory::InvalidConfig, message)
    }

    /// The failure details, if not cancelled.
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Self::Recoverable(f) | Self::Fatal(f) => Some(f),
            Self::Cancelled => None,
        }
    }

    /// The category ([`ErrorCategory::Cancelled`] for a cancellation).
    pub fn category(&self) -> ErrorCategory {
        self.failure()
            .map_or(ErrorCategory::Cancelled, |f| f.category)
    }

    /// Whether the recover stage may retry.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, Self::Recoverable(_))
    }
}

/// A pluggable unit of work: the thing that runs a step.
///
/// Implement [`name`](Module::name) and [`run`](Module::run); override
/// [`write_set`](Module::write_set) when the module writes less than "anything" (the default, so
/// that an unknown module never runs beside a writer), [`kind`](Module::kind) to take part in
/// plan defaults, and [`validate`](Module::validate) to reject bad config before anything runs.
///
/// # Errors
/// [`run`](Module::run) returns [`ModuleError`]; see its variants for what the engine does
/// with each.
///
/// ```
/// use nuvira_api::{async_trait, Module, ModuleError, PlanStep, StepContext, StepOutput};
///
/// struct Hello;
///
/// #[async_trait]
/// impl Module for Hello {
///     fn name(&self) -> &str { "hello" }
///     async fn run(&self, _step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
///         Ok(StepOutput::Value("hello".into()))
///     }
/// }
/// ```
#[async_trait]
pub trait Module: Send + Sync {
    /// The name plans use in `module:`.
    fn name(&self) -> &str;

    /// The module's role. Defaults to [`ModuleKind::Custom`].
    fn kind(&self) -> ModuleKind {
        ModuleKind::Custom
    }

    /// What a step of this module writes. Defaults to the step's declared `writes`, or
    /// [`WriteSet::Exclusive`] when it declares none — a module that does not say is assumed to
    /// write anywhere.
    fn write_set(&self, step: &PlanStep) -> WriteSet {
        if step.writes.is_empty() {
            WriteSet::Exclusive
        } else {
            WriteSet::paths(&step.writes)
        }
    }

    /// Checks a step's config before the run starts. Defaults to accepting anything.
    ///
    /// # Errors
    /// A message saying which config key is wrong and what is expected.
    fn validate(&self, _step: &PlanStep) -> Result<(), String> {
        Ok(())
    }

    /// Runs the step.
    ///
    /// The future runs on the tokio runtime of the caller of `Engine::run`, so:
    /// - do not block in it: a blocking call holds a worker thread and no timeout can interrupt
    ///   it (the step's timeout is checked when the future yields). Use
    ///   `tokio::task::spawn_blocking` or async I/O;
    /// - its first poll may happen on the engine's dispatcher, with a waker that wakes nothing,
    ///   before it moves to a task of its own; every later poll has the task's waker. Futures
    ///   built from tokio's and the standard library's primitives re-register their waker on
    ///   every poll, as the `Future` contract asks, and are unaffected; a hand-written future
    ///   must do the same rather than keep the waker of its first poll;
    /// - it may be dropped at any `.await` (cancellation, a timeout): keep the workspace
    ///   consistent across drops, e.g. by writing through the edit module's journal.
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scope that numbers its steps, as the engine's per-run state does.
    struct Numbered {
        info: RunInfo,
        ids: Vec<Arc<str>>,
    }

    impl RunScope for Numbered {
        fn run_info(&self) -> &RunInfo {
            &self.info
        }
        fn step_id(&self, index: usize) -> Option<&Arc<str>> {
            self.ids.get(index)
        }
    }

    fn numbered() -> Arc<Numbered> {
        let base = StepContext::standalone("/ws");
        Arc::new(Numbered {
            info: base.run().clone(),
            ids: vec!["a".into(), "b".into()],
        })
    }

    #[test]
    fn a_context_by_number_reads_its_id_and_the_run_from_the_scope() {
        let scope = numbered();
        let ctx = StepContext::for_step(scope.clone(), 1);
        assert_eq!(&**ctx.step_id(), "b");
        assert_eq!(&**ctx.workspace_root(), Path::new("/ws"));
        assert_eq!(ctx.attempt(), 1);
        // Contexts share the run: no copy until a builder changes a run-wide field.
        assert!(std::ptr::eq(ctx.run(), scope.run_info()));
        let retried = ctx
            .clone()
            .with_attempt(2)
            .with_feedback(Some("why".into()));
        assert!(std::ptr::eq(retried.run(), scope.run_info()));
        assert_eq!((retried.attempt(), retried.feedback()), (2, Some("why")));
        let dry = ctx.clone().with_dry_run(true);
        assert!(dry.dry_run() && !ctx.dry_run());
        assert_eq!(&**dry.step_id(), "b");
        assert_eq!(&**ctx.with_step_id("sub").step_id(), "sub");
    }

    #[test]
    fn a_number_the_scope_does_not_know_has_a_placeholder_id() {
        let ctx = StepContext::for_step(numbered(), 9);
        assert_eq!(&**ctx.step_id(), "?");
        let plain = StepContext::standalone("/ws");
        let info: Arc<dyn RunScope> = Arc::new(plain.run().clone());
        assert_eq!(&**StepContext::for_step(info, 0).step_id(), "?");
    }
}
