//! Step hooks: the places where a caller may step into the scheduler's handling of one step,
//! for durable runs (`nuvira::runs`): resuming a run without repeating finished steps,
//! recording each model call under the step and attempt that made it, and holding a step that
//! may change files until what the run recorded before it is written.
//!
//! Both are optional ([`RunOptions::hooks`](crate::RunOptions::hooks), `None` by default) and
//! cost nothing when unset: the scheduler checks one `Option` per step.

use nuvira_api::{LlmClient, PlanStep, StepContext, StepOutput, WriteSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What [`StepHooks::before_run`] hands the scheduler to wait for.
pub type Wait = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Hooks the scheduler consults for each step (see the module docs). Every method has a default
/// that changes nothing, so an implementation overrides only what it needs.
///
/// ```
/// use nuvira_engine::hooks::StepHooks;
/// use nuvira_api::{PlanStep, StepContext, StepOutput};
///
/// /// Reuses a recorded output for step `cached`.
/// struct Cached;
/// impl StepHooks for Cached {
///     fn prior_outcome(&self, step: &PlanStep, _ctx: &StepContext) -> Option<StepOutput> {
///         (step.id == "cached").then(|| StepOutput::Value(serde_json::json!("from before")))
///     }
/// }
/// let ctx = StepContext::standalone(".");
/// assert!(Cached.prior_outcome(&PlanStep::new("cached", "m"), &ctx).is_some());
/// assert!(Cached.prior_outcome(&PlanStep::new("other", "m"), &ctx).is_none());
/// ```
pub trait StepHooks: Send + Sync {
    /// Before step `step` first runs (after `step:started`): an output recorded earlier to use
    /// instead of running it. `Some` makes the step succeed with that output at once, without
    /// calling its module; the hook may emit, through `ctx`, the events the step emitted when
    /// it ran. The default runs every step.
    fn prior_outcome(&self, step: &PlanStep, ctx: &StepContext) -> Option<StepOutput> {
        let _ = (step, ctx);
        None
    }

    /// The model attempt `attempt` of step `step_id` uses, in place of the run's `llm`
    /// (e.g. `llm` wrapped to record each call under the step). The default keeps `llm`.
    fn step_llm(
        &self,
        llm: &Arc<dyn LlmClient>,
        step_id: &str,
        attempt: u32,
    ) -> Option<Arc<dyn LlmClient>> {
        let _ = (llm, step_id, attempt);
        None
    }

    /// Before step `step` runs its module for the first time (not when
    /// [`prior_outcome`](Self::prior_outcome) gave its output): a future the scheduler awaits
    /// first. `writes` is the step's write set, so a hook can hold only the steps that change
    /// files (a run history waits there until the records of the steps before it are written,
    /// so resume never finds a step's edits without the end record of the steps it built on).
    /// Only this step waits; the others go on. The default holds nothing.
    ///
    /// For a module that waits itself ([`Module::calls_before_changes`](nuvira_api::Module::calls_before_changes)),
    /// the scheduler does not await this before the module runs; it is asked instead each
    /// time the module calls [`StepContext::before_changes`] (right before its first change,
    /// in every attempt), with the plan's step, so the wait overlaps the module's own work.
    fn before_run(&self, step: &PlanStep, writes: &WriteSet) -> Option<Wait> {
        let _ = (step, writes);
        None
    }
}
