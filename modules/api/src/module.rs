//! The [`Module`] trait, what a module is given ([`StepContext`]) and what it returns
//! ([`StepOutput`] or [`ModuleError`]).

use crate::{
    ConfigError, EditPreview, EditResult, EventKind, EventSink, ExecutionPlan, ExecutionReport,
    InspectionResult, LlmClient, PlanStep, RepairResult, TestResult, VerificationResult,
    async_trait, test::CommandOutput,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The broad role of a module. The engine reads it in a few places, all listed here (the one
/// place that says what a kind does; the rest of the docs link to it):
///
/// | kind | plan output by default | run in a dry run |
/// |---|---|---|
/// | [`Verify`](Self::Verify), [`Report`](Self::Report) | yes | yes |
/// | [`Test`](Self::Test), [`Execute`](Self::Execute) | no | no: the step succeeds with a note, its module is not called |
/// | every other kind | no | yes (the module must not change anything: [`StepContext::dry_run`]) |
///
/// - **Plan outputs** ([`is_default_output`](Self::is_default_output)): when a plan names no
///   `outputs`, its outputs are its steps of these kinds (or, when it has none, its single
///   sink); validation reports every step from which no output can be reached as an orphan.
/// - **Dry runs** ([`runs_in_dry_run`](Self::runs_in_dry_run)): tests and commands would only
///   see the unchanged workspace, so the engine does not run them.
/// - **Listing**: the registry lists and filters modules by kind (`nuvira modules`).
///
/// A module that says nothing is [`Custom`](Self::Custom): not an output by default, run in
/// dry runs.
///
/// ```
/// use nuvira_api::ModuleKind;
/// assert!(ModuleKind::Report.is_default_output());
/// assert!(!ModuleKind::Custom.is_default_output());
/// assert!(!ModuleKind::Test.runs_in_dry_run());
/// assert!(ModuleKind::Edit.runs_in_dry_run());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ModuleKind {
    /// Produces plans.
    Plan,
    /// Reads the repository.
    Inspect,
    /// Changes files.
    Edit,
    /// Runs tests; not run in a dry run.
    Test,
    /// Repairs failures.
    Recover,
    /// Checks the result; a plan output by default.
    Verify,
    /// Runs a command; not run in a dry run.
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

    /// Whether steps of this kind are the plan's outputs when it names none (see the
    /// [table](ModuleKind)): [`Verify`](Self::Verify) and [`Report`](Self::Report).
    pub fn is_default_output(self) -> bool {
        matches!(self, Self::Verify | Self::Report)
    }

    /// Whether the engine calls the module in a dry run (see the [table](ModuleKind)): every
    /// kind but [`Test`](Self::Test) and [`Execute`](Self::Execute).
    pub fn runs_in_dry_run(self) -> bool {
        !matches!(self, Self::Test | Self::Execute)
    }
}

/// Which files a step may write. The scheduler never runs two steps whose write sets
/// [conflict](WriteSet::conflicts) at the same time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
///
/// ```
/// use nuvira_api::{async_trait, CancelSignal};
/// use std::sync::atomic::{AtomicBool, Ordering};
///
/// /// Cancelled once its flag is set (an engine would also wake `cancelled` waiters).
/// struct Flag(AtomicBool);
///
/// #[async_trait]
/// impl CancelSignal for Flag {
///     fn is_cancelled(&self) -> bool { self.0.load(Ordering::SeqCst) }
///     async fn cancelled(&self) {
///         if !self.is_cancelled() {
///             std::future::pending::<()>().await;
///         }
///     }
/// }
///
/// let flag = Flag(AtomicBool::new(false));
/// // A module checks between units of work:
/// let files = ["a.rs", "b.rs", "c.rs"];
/// let mut done = 0;
/// for _file in files {
///     if flag.is_cancelled() { break; }
///     done += 1;
///     if done == 2 { flag.0.store(true, Ordering::SeqCst); }
/// }
/// assert_eq!(done, 2);
/// ```
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
///
/// ```
/// use nuvira_api::{StepContext, StepInputs, StepOutput};
/// use std::sync::Arc;
///
/// /// Every step sees one `inspect` output (a stand-in for tests).
/// struct OneInspect(Arc<StepOutput>);
///
/// impl StepInputs for OneInspect {
///     fn dependency(&self, _step: &str, id: &str) -> Option<Arc<StepOutput>> {
///         (id == "inspect").then(|| self.0.clone())
///     }
///     fn upstream(&self, _step: &str) -> Vec<(String, Arc<StepOutput>)> {
///         vec![("inspect".into(), self.0.clone())]
///     }
/// }
///
/// let inputs = Arc::new(OneInspect(Arc::new(StepOutput::Empty)));
/// let ctx = StepContext::standalone(".").with_inputs(inputs);
/// assert_eq!(ctx.dependency("inspect").as_deref(), Some(&StepOutput::Empty));
/// assert_eq!(ctx.upstream().len(), 1);
/// ```
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

/// How a context names its step: by id, or by number in its run's scope (which saves the
/// engine touching the id's reference count from every worker).
#[derive(Clone)]
pub(crate) enum StepName {
    Id(Arc<str>),
    Index(usize),
}

/// The id of a step whose scope could not name it (a scope that numbers no steps).
pub(crate) static UNNAMED: std::sync::LazyLock<Arc<str>> =
    std::sync::LazyLock::new(|| Arc::from("?"));

/// Everything a module gets besides its step: who it is in which run, the workspace, the
/// outputs of its dependencies, where to send events, the model (if any), cancellation and the
/// deadline.
///
/// A module reads its context through the accessors below: [`workspace_root`](Self::workspace_root)
/// for every path it touches, [`dependency`](Self::dependency) and [`upstream`](Self::upstream)
/// for what earlier steps produced, [`emit`](Self::emit) for events, [`llm`](Self::llm) for the
/// model, [`cancel`](Self::cancel) and [`deadline`](Self::deadline) to stop in time, and
/// [`dry_run`](Self::dry_run) to know whether it may change anything.
///
/// To run a module outside the engine (in its own tests, or embedded), make a context with
/// [`standalone`](Self::standalone) and adjust it with the `with_*` builders, which change a
/// copy. Engines build theirs with [`StepContext::builder`] (see [`crate::engine`]).
///
/// ```
/// use nuvira_api::StepContext;
///
/// let ctx = StepContext::standalone("/work/repo").with_dry_run(true);
/// assert!(ctx.dry_run());
/// assert_eq!(ctx.attempt(), 1);
/// assert!(ctx.dependency("inspect").is_none());
/// ```
#[derive(Clone)]
pub struct StepContext {
    pub(crate) run: Arc<dyn crate::engine::RunScope>,
    pub(crate) step: StepName,
    /// Replaces the run's inputs for this step (sub-steps of a split see their parent's).
    pub(crate) inputs: Option<Arc<dyn StepInputs>>,
    pub(crate) attempt: u32,
    pub(crate) deadline: Option<Instant>,
    pub(crate) feedback: Option<String>,
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
    /// cancelled, not a dry run, first attempt.
    pub fn standalone(workspace_root: impl Into<PathBuf>) -> Self {
        Self::builder(workspace_root).build()
    }

    /// For engines and tests: a builder of a context with every field settable, starting from
    /// what [`standalone`](Self::standalone) gives. See [`crate::engine`].
    pub fn builder(workspace_root: impl Into<PathBuf>) -> crate::engine::StepContextBuilder {
        crate::engine::StepContextBuilder::new(workspace_root.into())
    }

    pub(crate) fn with_name(run: Arc<dyn crate::engine::RunScope>, step: StepName) -> Self {
        Self {
            run,
            step,
            inputs: None,
            attempt: 1,
            deadline: None,
            feedback: None,
        }
    }

    /// The run-wide part, shared by every step of the run.
    pub(crate) fn run(&self) -> &crate::engine::RunInfo {
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

    /// Resolves once the step may change the workspace: the engine's records of every step
    /// that ended before this call are written (what resuming a killed run relies on: it
    /// never finds this step's changes without the records of the steps before it). At once
    /// when nothing records the run, and outside an engine. Call it only right before a
    /// change: it waits as for a writing step even when the step's [`Module::write_set`] is
    /// read-only (a repair that edits under a test step calls it too).
    ///
    /// A module that declares [`Module::calls_before_changes`] awaits this itself, right
    /// before its first change (an edit batch: once it is validated and formatted, before the
    /// journal), so the wait overlaps the step's own work; for any other module the engine
    /// waits before the module runs.
    pub fn before_changes(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let wait = match self.step {
            StepName::Index(i) => self.run.before_changes(i),
            StepName::Id(_) => None,
        };
        async move {
            if let Some(w) = wait {
                w.await;
            }
        }
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

/// A run-wide part changed for one context ([`StepContext::edit_run`]), in the scope of the
/// engine's run: the step's id and its wait before changes are the scope's.
struct Rescoped {
    base: Arc<dyn crate::engine::RunScope>,
    info: crate::engine::RunInfo,
}

impl crate::engine::RunScope for Rescoped {
    fn run_info(&self) -> &crate::engine::RunInfo {
        &self.info
    }

    fn step_id(&self, index: usize) -> Option<&Arc<str>> {
        self.base.step_id(index)
    }

    fn before_changes(&self, index: usize) -> Option<crate::engine::ChangesWait> {
        self.base.before_changes(index)
    }
}

/// Changing a context: the builders change a copy, for module wrappers (a module that runs
/// another with a different model or event sink) and for running a module in tests.
impl StepContext {
    /// Changes a copy of the run-wide part for this context only.
    pub(crate) fn edit_run(mut self, edit: impl FnOnce(&mut crate::engine::RunInfo)) -> Self {
        let mut run = self.run().clone();
        edit(&mut run);
        self.run = match self.step {
            // The step keeps its number in the engine's scope: its id, and what it waits for
            // before its changes ([`before_changes`](Self::before_changes)), come from there.
            StepName::Index(_) => Arc::new(Rescoped {
                base: self.run,
                info: run,
            }),
            StepName::Id(_) => Arc::new(run),
        };
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
}

/// What a step produced. Typed variants for the built-in modules, [`StepOutput::Value`] for
/// anything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
/// the engine's defaults (see [`ModuleKind`]), and [`validate`](Module::validate) to reject bad
/// config before anything runs.
///
/// Read the step's config into one type of your own with
/// [`PlanStep::config_as`](crate::PlanStep::config_as), in `validate` and in `run` alike: what
/// validation accepts is then what the run reads.
///
/// # Errors
/// [`validate`](Module::validate) returns a [`ConfigError`]; [`run`](Module::run) returns
/// [`ModuleError`] (a `ConfigError` converts into it with `?`); see its variants for what the
/// engine does with each.
///
/// ```
/// use nuvira_api::{async_trait, ConfigError, Module, ModuleError, PlanStep, StepContext, StepOutput, WriteSet};
/// use serde::Deserialize;
///
/// /// A `greet` step's config.
/// #[derive(Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct GreetConfig {
///     #[serde(default = "world")]
///     name: String,
/// }
/// fn world() -> String { "world".into() }
///
/// impl GreetConfig {
///     /// Reads and checks a step's config: used by `validate` and `run` alike.
///     fn of(step: &PlanStep) -> Result<Self, ConfigError> {
///         let config: Self = step.config_as()?;
///         if config.name.trim().is_empty() {
///             return Err(ConfigError::new(&step.id, "`name` is empty: give a name").at("name"));
///         }
///         Ok(config)
///     }
/// }
///
/// struct Greet;
///
/// #[async_trait]
/// impl Module for Greet {
///     fn name(&self) -> &str { "greet" }
///     fn write_set(&self, _step: &PlanStep) -> WriteSet { WriteSet::ReadOnly }
///     fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
///         GreetConfig::of(step).map(|_| ())
///     }
///     async fn run(&self, step: &PlanStep, _ctx: &StepContext) -> Result<StepOutput, ModuleError> {
///         let config = GreetConfig::of(step)?;
///         Ok(StepOutput::Value(format!("hello, {}", config.name).into()))
///     }
/// }
///
/// let step = PlanStep::new("hi", "greet").with_config(serde_json::json!({ "name": " " }));
/// assert_eq!(
///     Greet.validate(&step).unwrap_err().to_string(),
///     "step `hi`: `name` is empty: give a name"
/// );
///
/// // `run` awaits nothing here, so one poll finishes it (an engine drives it on tokio).
/// let ctx = StepContext::standalone(".");
/// let step = PlanStep::new("hi", "greet");
/// let mut run = Greet.run(&step, &ctx);
/// let waker = std::task::Waker::noop();
/// let out = run.as_mut().poll(&mut std::task::Context::from_waker(waker));
/// assert_eq!(out, std::task::Poll::Ready(Ok(StepOutput::Value("hello, world".into()))));
/// ```
#[async_trait]
pub trait Module: Send + Sync {
    /// The name plans use in `module:`.
    fn name(&self) -> &str;

    /// The module's role, which decides the engine's defaults for its steps (see
    /// [`ModuleKind`]). Defaults to [`ModuleKind::Custom`].
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

    /// Whether the module awaits [`StepContext::before_changes`] itself before it first
    /// changes the workspace, in every step and attempt, and changes nothing before. `false`
    /// (the default): the engine waits for it before the module runs, which is always right
    /// and costs a step that writes the wait up front. A module that wraps another must
    /// forward this.
    fn calls_before_changes(&self) -> bool {
        false
    }

    /// Checks a step's config before the run starts. Defaults to accepting anything.
    ///
    /// `nuvira validate` prints the error as `` step `<id>` (<module>): <message> ``.
    ///
    /// # Errors
    /// A [`ConfigError`] whose message says which config key is wrong and what is expected.
    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        let _ = step;
        Ok(())
    }

    /// Runs the step.
    ///
    /// The future runs on the caller's tokio runtime, so:
    /// - do not block in it: a blocking call holds a worker thread and no timeout can interrupt
    ///   it (the step's timeout is checked when the future yields). Use
    ///   `tokio::task::spawn_blocking` or async I/O;
    /// - it may be dropped at any `.await` (cancellation, a timeout): keep the workspace
    ///   consistent across drops, e.g. by writing through the edit module's journal.
    ///
    /// Engines: see [`crate::engine`] for what an engine must do around this call.
    ///
    /// # Errors
    /// A [`ModuleError`]: recoverable failures may be retried by the recover stage, fatal ones
    /// and cancellation end the step.
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError>;
}
