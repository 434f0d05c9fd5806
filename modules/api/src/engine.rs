//! For engines and tests: how a [`StepContext`] is built.
//!
//! A module author never needs this module: a module reads its context through
//! [`StepContext`]'s accessors, and runs itself in its own tests with
//! [`StepContext::standalone`]. An engine (the scheduler of `nuvira-engine`, or another one)
//! builds a context for every step it runs with [`StepContext::builder`], or, to hand out
//! contexts without an allocation per step, with [`StepContextBuilder::in_scope`] over its own
//! per-run state that implements [`RunScope`].
//!
//! What an engine must guarantee around [`Module::run`](crate::Module::run):
//! - it polls the future on a tokio runtime and stops it at the step's
//!   [deadline](StepContext::deadline) and at cancellation, by dropping it;
//! - it may poll the future the first time on its own dispatcher with a waker that wakes
//!   nothing, before it moves the future to a task of its own; every later poll has the task's
//!   waker. Futures built from tokio's and the standard library's primitives re-register their
//!   waker on every poll, as the `Future` contract asks, and are unaffected; a hand-written
//!   future must do the same rather than keep the waker of its first poll;
//! - it does not call a [`Test`](crate::ModuleKind::Test) or
//!   [`Execute`](crate::ModuleKind::Execute) module in a dry run (see [`ModuleKind`](crate::ModuleKind)).
//!
//! ```
//! use nuvira_api::StepContext;
//!
//! let ctx = StepContext::builder("/work/repo")
//!     .run_id("run-7")
//!     .step_id("edit")
//!     .goal("rename parse_config")
//!     .attempt(2)
//!     .feedback(Some("the search text was not found".into()))
//!     .build();
//! assert_eq!((&**ctx.run_id(), &**ctx.step_id(), ctx.attempt()), ("run-7", "edit", 2));
//! assert_eq!(ctx.feedback(), Some("the search text was not found"));
//! ```

use crate::module::{NoInputs, StepName};
use crate::{
    CancelSignal, EventSink, ExecutionPlan, LlmClient, NeverCancelled, StepContext, StepInputs,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// What every step of a run shares: the run's identity, the workspace, the inputs, the event
/// sink, the model and the cancel signal.
///
/// An engine builds one per run and every [`StepContext`] of the run points at it, so
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
///
/// ```
/// use nuvira_api::engine::{RunInfo, RunScope, StepContextBuilder};
/// use nuvira_api::StepContext;
/// use std::sync::Arc;
///
/// /// An engine's per-run state: the run's info and the ids of its steps, by number.
/// struct MyRun {
///     info: RunInfo,
///     ids: Vec<Arc<str>>,
/// }
///
/// impl RunScope for MyRun {
///     fn run_info(&self) -> &RunInfo { &self.info }
///     fn step_id(&self, index: usize) -> Option<&Arc<str>> { self.ids.get(index) }
/// }
///
/// let info = StepContext::builder("/ws").run_id("r1").build_run();
/// let run = Arc::new(MyRun { info, ids: vec!["inspect".into(), "edit".into()] });
/// let ctx = StepContextBuilder::in_scope(run, 1).build();
/// assert_eq!((&**ctx.run_id(), &**ctx.step_id()), ("r1", "edit"));
/// ```
///
/// A context a wrapper changed ([`StepContext::with_llm`] and the other `with_*` builders)
/// keeps the engine's scope behind the changed run-wide part, and forwards every method but
/// [`run_info`](Self::run_info) to it: a method added here needs forwarding there too.
pub trait RunScope: Send + Sync {
    /// The run's shared information.
    fn run_info(&self) -> &RunInfo;

    /// The id of the run's step number `index`, for contexts made with
    /// [`StepContextBuilder::in_scope`]. Scopes that do not number their steps return `None`.
    fn step_id(&self, index: usize) -> Option<&Arc<str>> {
        let _ = index;
        None
    }

    /// What step number `index` waits for before its module first changes the workspace
    /// ([`StepContext::before_changes`]): an engine that records its runs for resume makes
    /// it wait until the records of the steps that ended before are written. `None` (the
    /// default) when there is nothing to wait for.
    fn before_changes(&self, index: usize) -> Option<ChangesWait> {
        let _ = index;
        None
    }
}

/// What [`RunScope::before_changes`] gives a step to wait for.
pub type ChangesWait = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

impl RunScope for RunInfo {
    fn run_info(&self) -> &RunInfo {
        self
    }
}

/// Builds a [`StepContext`] with every field settable: for engines and tests (made by
/// [`StepContext::builder`], [`in_scope`](Self::in_scope) or [`from_context`](Self::from_context)).
///
/// Setting a run-wide field (run id, goal, events, ...) on a builder made from a scope copies
/// the scope's [`RunInfo`] for this one context; the per-step fields (step id, attempt, deadline,
/// feedback, inputs) never copy.
#[derive(Clone)]
#[must_use]
pub struct StepContextBuilder {
    ctx: StepContext,
}

impl std::fmt::Debug for StepContextBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StepContextBuilder")
            .field(&self.ctx)
            .finish()
    }
}

impl StepContextBuilder {
    /// A standalone run on `workspace_root`: run and step id `standalone`, no goal, no
    /// dependencies, events dropped, never cancelled, first attempt.
    pub(crate) fn new(workspace_root: PathBuf) -> Self {
        let run = RunInfo::new(
            "standalone".into(),
            "".into(),
            Arc::from(workspace_root),
            Arc::new(NoInputs),
            Arc::new(crate::NullSink),
            Arc::new(NeverCancelled),
        );
        Self::from_context(StepContext::with_name(
            Arc::new(run),
            StepName::Id("standalone".into()),
        ))
    }

    /// The context of the run's step number `index`, whose id the scope gives
    /// ([`RunScope::step_id`]; `?` when it gives none). First attempt, no deadline. This is what
    /// an engine uses for each step: one reference count, no allocation.
    pub fn in_scope(scope: Arc<dyn RunScope>, index: usize) -> Self {
        Self::from_context(StepContext::with_name(scope, StepName::Index(index)))
    }

    /// A builder that starts from an existing context (e.g. the context of a step that a
    /// repair splits, for its sub-steps).
    pub fn from_context(ctx: StepContext) -> Self {
        Self { ctx }
    }

    /// Sets the run id.
    pub fn run_id(mut self, run_id: impl Into<Arc<str>>) -> Self {
        let run_id = run_id.into();
        self.ctx = self.ctx.edit_run(|r| r.run_id = run_id);
        self
    }

    /// Sets the step id.
    pub fn step_id(mut self, step_id: impl Into<Arc<str>>) -> Self {
        self.ctx.step = StepName::Id(step_id.into());
        self
    }

    /// Sets the plan's goal.
    pub fn goal(mut self, goal: impl Into<Arc<str>>) -> Self {
        let goal = goal.into();
        self.ctx = self.ctx.edit_run(|r| r.goal = goal);
        self
    }

    /// Sets the workspace root.
    pub fn workspace_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.ctx = self.ctx.with_workspace_root(root);
        self
    }

    /// Sets the run's inputs (the outputs of its steps, keyed by the asking step).
    pub fn run_inputs(mut self, inputs: Arc<dyn StepInputs>) -> Self {
        self.ctx = self.ctx.edit_run(|r| r.inputs = inputs);
        self
    }

    /// Sets this step's inputs, in place of the run's.
    pub fn inputs(mut self, inputs: Arc<dyn StepInputs>) -> Self {
        self.ctx.inputs = Some(inputs);
        self
    }

    /// Sets the event sink.
    pub fn events(mut self, events: Arc<dyn EventSink>) -> Self {
        self.ctx = self.ctx.with_events(events);
        self
    }

    /// Sets the cancel signal.
    pub fn cancel(mut self, cancel: Arc<dyn CancelSignal>) -> Self {
        self.ctx = self.ctx.with_cancel(cancel);
        self
    }

    /// Sets the model.
    pub fn llm(mut self, llm: Option<Arc<dyn LlmClient>>) -> Self {
        self.ctx = self.ctx.with_llm(llm);
        self
    }

    /// Sets the plan being run.
    pub fn plan(mut self, plan: Option<Arc<ExecutionPlan>>) -> Self {
        self.ctx = self.ctx.with_plan(plan);
        self
    }

    /// Sets dry-run.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.ctx = self.ctx.with_dry_run(dry_run);
        self
    }

    /// Sets the attempt number (from 1).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.ctx.attempt = attempt;
        self
    }

    /// Sets the deadline.
    pub fn deadline(mut self, deadline: Option<Instant>) -> Self {
        self.ctx.deadline = deadline;
        self
    }

    /// Sets the feedback for a retried attempt.
    pub fn feedback(mut self, feedback: Option<String>) -> Self {
        self.ctx.feedback = feedback;
        self
    }

    /// The context.
    #[must_use]
    pub fn build(self) -> StepContext {
        self.ctx
    }

    /// The run-wide part only, e.g. to put in an engine's own [`RunScope`].
    #[must_use]
    pub fn build_run(self) -> RunInfo {
        self.ctx.run().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scope that numbers its steps, as the engine's per-run state does.
    struct Numbered {
        info: RunInfo,
        ids: Vec<Arc<str>>,
        /// The step numbers whose wait before changes was asked for and awaited.
        waited: Arc<std::sync::Mutex<Vec<usize>>>,
    }

    impl RunScope for Numbered {
        fn run_info(&self) -> &RunInfo {
            &self.info
        }
        fn step_id(&self, index: usize) -> Option<&Arc<str>> {
            self.ids.get(index)
        }
        fn before_changes(&self, index: usize) -> Option<ChangesWait> {
            let waited = self.waited.clone();
            Some(Box::pin(async move {
                waited.lock().unwrap().push(index);
            }))
        }
    }

    fn numbered() -> Arc<Numbered> {
        Arc::new(Numbered {
            info: StepContext::builder("/ws").build_run(),
            ids: vec!["a".into(), "b".into()],
            waited: Arc::default(),
        })
    }

    fn finish(f: impl std::future::Future<Output = ()>) {
        let mut f = std::pin::pin!(f);
        let waker = std::task::Waker::noop();
        assert!(
            f.as_mut()
                .poll(&mut std::task::Context::from_waker(waker))
                .is_ready()
        );
    }

    /// A context whose run-wide part a wrapper changed (a model of its own, events, dry run)
    /// still asks the engine's scope what to wait for before its changes, under its number;
    /// a context outside an engine waits for nothing.
    #[test]
    fn a_changed_context_still_waits_for_its_scope_before_changes() {
        let scope = numbered();
        let ctx = StepContextBuilder::in_scope(scope.clone(), 1).build();
        finish(ctx.before_changes());
        let changed = ctx
            .clone()
            .with_llm(None)
            .with_dry_run(false)
            .with_events(Arc::new(crate::NullSink));
        assert_eq!(&**changed.step_id(), "b");
        finish(changed.before_changes());
        assert_eq!(*scope.waited.lock().unwrap(), [1, 1]);
        finish(
            StepContext::standalone("/ws")
                .with_llm(None)
                .before_changes(),
        );
        assert_eq!(scope.waited.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_context_by_number_reads_its_id_and_the_run_from_the_scope() {
        let scope = numbered();
        let ctx = StepContextBuilder::in_scope(scope.clone(), 1).build();
        assert_eq!(&**ctx.step_id(), "b");
        assert_eq!(&**ctx.workspace_root(), Path::new("/ws"));
        assert_eq!(ctx.attempt(), 1);
        // Contexts share the run: no copy until a builder changes a run-wide field.
        assert!(std::ptr::eq(ctx.run(), scope.run_info()));
        let retried = StepContextBuilder::from_context(ctx.clone())
            .attempt(2)
            .feedback(Some("why".into()))
            .build();
        assert!(std::ptr::eq(retried.run(), scope.run_info()));
        assert_eq!((retried.attempt(), retried.feedback()), (2, Some("why")));
        let dry = ctx.clone().with_dry_run(true);
        assert!(dry.dry_run() && !ctx.dry_run());
        assert!(!std::ptr::eq(dry.run(), scope.run_info()));
        assert_eq!(&**dry.step_id(), "b");
        assert_eq!(&**ctx.with_step_id("sub").step_id(), "sub");
    }

    #[test]
    fn a_number_the_scope_does_not_know_has_a_placeholder_id() {
        let ctx = StepContextBuilder::in_scope(numbered(), 9).build();
        assert_eq!(&**ctx.step_id(), "?");
        let info: Arc<dyn RunScope> = Arc::new(StepContext::builder("/ws").build_run());
        assert_eq!(
            &**StepContextBuilder::in_scope(info, 0).build().step_id(),
            "?"
        );
    }
}
