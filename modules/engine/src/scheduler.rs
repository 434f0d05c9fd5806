//! The scheduler: runs a validated plan's steps as soon as their dependencies succeed.
//!
//! Shape (after nextest's dispatcher/executor split): one **dispatcher** task owns all graph
//! state — dependency counters, statuses, the ready queue, the write-set table — and runs the
//! steps' futures, polling them itself while their polls are quick and giving them tasks in a
//! `JoinSet` when not (see below). Step futures never touch graph state; they run their module
//! (with retries under the recovery policy), store their output in a write-once cell, and hand
//! their result back. Nothing is shared behind a mutex.
//!
//! Guarantees:
//! - a step starts only after every dependency **succeeded**;
//! - at most `max_parallel` steps run at once, and that many do run whenever enough are ready;
//! - two steps whose [`WriteSet`]s conflict never run at the same time;
//! - a step that fails (after any retries) marks exactly its transitive dependents `skipped`,
//!   with the reason; independent branches go on;
//! - a per-step timeout stops the step's future at its deadline;
//! - the sub-steps a recovery policy splits a step into run under a dispatcher of their own,
//!   nested in the step's task, with the same guarantees (they may use up to `max_parallel`
//!   slots besides the one of the step they replace);
//! - in a dry run, steps of kind `test` and `execute` are not run (they succeed with a note):
//!   edits are only previewed, so they would test the unchanged workspace (see
//!   [`ModuleKind::runs_in_dry_run`](nuvira_api::ModuleKind::runs_in_dry_run));
//! - on cancellation every running step task is aborted and awaited, and every step the
//!   dispatcher polls itself is dropped, before [`run`] returns, so no step outlives the run
//!   (work a module moved to a blocking thread cannot be interrupted: modules must do
//!   blocking work in bounded pieces or check the cancel signal).
//!
//! The dispatcher runs as a spawned task, not inside the caller's future: polled by
//! `block_on`, the same loop was measured 5–46× slower on a 10,000-step chain.
//!
//! The dispatcher polls a step once itself before giving it a task. A step that finishes on
//! that poll (a no-op, a step whose work is done, a resumed step) costs no task at all: less
//! than spawning and joining one, which is most of what a hand-written JoinSet driver spends
//! per step. One that does not finish (it waits on a timer, I/O, another task) stays
//! **resident**: the dispatcher keeps polling it in its own task, each resident step with a
//! waker of its own (a `FuturesUnordered`), so a wake-up handles every step woken by then,
//! and waiting steps cost no task, no spawn and no wake-up of another worker: on a graph of
//! 1 ms sleeps the time from a layer's timers firing to the next layer's timers being set,
//! which adds to each layer's makespan, is one thread's work. A resident step whose poll
//! takes longer than 50 µs moves to a task at once. So that slow polls do not run one after
//! another in the dispatcher, a module with polls slower than 50 µs (more than two, and more
//! than one in sixteen), has its steps given tasks at once for the rest of the run, before
//! the dispatcher polls the quick ones. The only runnable step (nothing else
//! running or ready) gets no task at all: the dispatcher would only wait for it, so it awaits
//! the step in its own task, watching for cancellation between polls. Its first poll is
//! with a no-op waker, and a step not done then is polled again at once with the
//! dispatcher's waker: a chain of steps that each yield once costs no spawn, join or trip
//! through the runtime's queues per step.
//! While it runs quick steps the dispatcher still handles finished tasks, checks for
//! cancellation after every wake-up's worth and yields to the runtime when tokio's cooperative
//! budget runs out.
//!
//! A module must not block its thread in `run` (the async rule): a first poll that blocks
//! runs on the dispatcher, and one that blocks until another step of the run does something
//! would stall the run, since that other step may be waiting for the dispatcher. Blocking
//! work belongs in `tokio::task::spawn_blocking`.

use crate::events::{EMPTY_OUTPUT, EventBus, Planned};
use crate::validate::ValidatedPlan;
use futures::FutureExt;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use nuvira_api::engine::{RunInfo, RunScope, StepContextBuilder};
use nuvira_api::{
    CancelSignal, ErrorCategory, EventKind, Failure, LlmClient, Module, ModuleError, PlanStep,
    RunStatus, StepContext, StepInputs, StepOutput, WriteSet, async_trait, report::StepStatus,
};
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use nuvira_api::{RecoveryDecision, RecoveryPolicy};

/// Options of one run.
#[derive(Clone)]
pub struct RunOptions {
    /// At most this many steps at once (at least 1; `usize::MAX` is unbounded, see
    /// [`MaxParallel`](crate::MaxParallel)).
    pub max_parallel: usize,
    /// Timeout for steps that do not set one.
    pub default_timeout: Option<Duration>,
    /// The workspace root handed to modules.
    pub workspace_root: Arc<Path>,
    /// Whether modules must not change anything.
    pub dry_run: bool,
    /// Cancels the run when triggered.
    pub cancel: CancellationToken,
    /// The model, if any.
    pub llm: Option<Arc<dyn LlmClient>>,
    /// Retries for recoverable failures; `None` never retries.
    pub recovery: Option<Arc<dyn RecoveryPolicy>>,
    /// Modules for steps a recovery policy adds at run time (split-task).
    pub registry: Option<crate::registry::ModuleRegistry>,
    /// Resume and model-call hooks ([`crate::hooks`]); `None` changes nothing.
    pub hooks: Option<Arc<dyn crate::hooks::StepHooks>>,
}

impl RunOptions {
    /// Defaults: as many steps at once as there are CPUs, no default timeout, the current
    /// directory as workspace, no model, no retries.
    pub fn new(workspace_root: impl AsRef<Path>) -> Self {
        Self {
            max_parallel: std::thread::available_parallelism().map_or(2, usize::from),
            default_timeout: None,
            workspace_root: Arc::from(workspace_root.as_ref()),
            dry_run: false,
            cancel: CancellationToken::new(),
            llm: None,
            recovery: None,
            registry: None,
            hooks: None,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("max_parallel", &self.max_parallel)
            .field("default_timeout", &self.default_timeout)
            .field("workspace_root", &self.workspace_root)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// How one step ended.
#[derive(Debug, Clone)]
pub struct StepOutcome {
    /// The step id.
    pub id: Arc<str>,
    /// How it ended.
    pub status: StepStatus,
    /// Its output (on success; on failure, what the failure carried).
    pub output: Option<Arc<StepOutput>>,
    /// Its error, if it failed (boxed: few steps fail, and the box keeps every outcome of a
    /// 10,000-step summary small; `error.as_ref()` and method calls read it as before).
    pub error: Option<Box<ModuleError>>,
    /// Why it was skipped (a boxed `str`: `as_deref()` reads it as before).
    pub skip_reason: Option<Box<str>>,
    /// Attempts made.
    pub attempts: u32,
    /// Time spent running (all attempts).
    pub duration: Duration,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The run.
    pub run_id: Arc<str>,
    /// How it ended.
    pub status: RunStatus,
    /// Every step, in plan order.
    pub steps: Vec<StepOutcome>,
    /// Wall-clock duration.
    pub duration: Duration,
}

impl RunSummary {
    /// Number of steps with this status.
    pub fn count(&self, status: StepStatus) -> usize {
        self.steps.iter().filter(|s| s.status == status).count()
    }

    /// The outcome of a step by id.
    pub fn step(&self, id: &str) -> Option<&StepOutcome> {
        self.steps.iter().find(|s| &*s.id == id)
    }

    /// The process exit code for this run (see [`crate::exit`]): 0 success, 130 cancelled,
    /// 3 when a step failed because the environment lacks something, else 1.
    pub fn exit_code(&self) -> u8 {
        match self.status {
            RunStatus::Succeeded => crate::exit::SUCCESS,
            RunStatus::Cancelled => crate::exit::CANCELLED,
            RunStatus::Failed => {
                let env = self.steps.iter().any(|s| {
                    s.error
                        .as_ref()
                        .is_some_and(|e| e.category().is_environment())
                });
                if env {
                    crate::exit::ENVIRONMENT
                } else {
                    crate::exit::FAILED
                }
            }
        }
    }
}

/// A [`CancellationToken`] as the contract's [`CancelSignal`]: how modules (and sandboxes) see
/// the run's cancel token. The one adapter; anything holding a token and calling a module or a
/// sandbox uses it.
///
/// ```
/// use nuvira_api::CancelSignal;
/// use nuvira_engine::TokenSignal;
/// use tokio_util::sync::CancellationToken;
///
/// let token = CancellationToken::new();
/// let signal = TokenSignal::from(token.clone());
/// assert!(!signal.is_cancelled());
/// token.cancel();
/// assert!(signal.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct TokenSignal(pub CancellationToken);

impl From<CancellationToken> for TokenSignal {
    fn from(token: CancellationToken) -> Self {
        Self(token)
    }
}

#[async_trait]
impl CancelSignal for TokenSignal {
    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
    async fn cancelled(&self) {
        self.0.cancelled().await;
    }
}

/// The outputs of a run's steps: one write-once cell per step, read by modules through
/// [`StepInputs`]. Holds no reference back to the run, so the run can own it.
struct Outputs {
    plan: Arc<ValidatedPlan>,
    /// Step id -> index, built the first time a module asks for its inputs.
    index: OnceLock<std::collections::HashMap<Arc<str>, usize>>,
    /// Each step's output, unless it was [`StepOutput::Empty`].
    cells: Box<[OnceLock<Arc<StepOutput>>]>,
    /// The steps whose output was [`StepOutput::Empty`]: a flag, neither a reference count
    /// nor a `OnceLock` (setting one costs over a hundred instructions, a flag one store).
    empty: Box<[AtomicBool]>,
}

impl Outputs {
    fn new(plan: Arc<ValidatedPlan>) -> Self {
        let n = plan.plan.steps.len();
        Self {
            plan,
            index: OnceLock::new(),
            cells: (0..n).map(|_| OnceLock::new()).collect(),
            empty: (0..n).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    fn get(&self, idx: usize) -> Option<Arc<StepOutput>> {
        match self.cells[idx].get() {
            Some(output) => Some(output.clone()),
            None => self.is_empty(idx).then(|| EMPTY_OUTPUT.clone()),
        }
    }

    /// Step `idx`'s output as events carry it: `None` when it is empty (or not set).
    fn get_non_empty(&self, idx: usize) -> Option<Arc<StepOutput>> {
        self.cells[idx].get().cloned()
    }

    fn is_empty(&self, idx: usize) -> bool {
        // Release/Acquire: a dependent reads the flag its dependency's task set.
        self.empty[idx].load(Ordering::Acquire)
    }

    /// Sets step `idx`'s output; the first one set stays (as a `OnceLock` would keep it).
    fn set(&self, idx: usize, output: StepOutput) {
        match output {
            StepOutput::Empty => {
                if self.cells[idx].get().is_none() {
                    self.empty[idx].store(true, Ordering::Release);
                }
            }
            other => self.set_shared(idx, Arc::new(other)),
        }
    }

    fn set_shared(&self, idx: usize, output: Arc<StepOutput>) {
        if !self.is_empty(idx) {
            let _ = self.cells[idx].set(output);
        }
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.index
            .get_or_init(|| {
                self.plan
                    .ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (id.clone(), i))
                    .collect()
            })
            .get(id)
            .copied()
    }

    fn dependency_of(&self, idx: usize, id: &str) -> Option<Arc<StepOutput>> {
        self.plan.parents()[idx]
            .iter()
            .find(|&&p| &*self.plan.ids[p as usize] == id)
            .and_then(|&p| self.get(p as usize))
    }

    fn upstream_of(&self, idx: usize) -> Vec<(String, Arc<StepOutput>)> {
        let parents = self.plan.parents();
        let mut seen = vec![false; parents.len()];
        let mut stack: Vec<usize> = parents[idx].iter().map(|&p| p as usize).collect();
        let mut found = Vec::new();
        while let Some(p) = stack.pop() {
            if std::mem::replace(&mut seen[p], true) {
                continue;
            }
            found.push(p);
            stack.extend(parents[p].iter().map(|&q| q as usize).filter(|&q| !seen[q]));
        }
        found.sort_by_key(|&p| self.plan.topo_rank[p]);
        found
            .into_iter()
            .filter_map(|p| self.get(p).map(|o| (self.plan.ids[p].to_string(), o)))
            .collect()
    }
}

/// Every step of a run reads its inputs through the run's one `Outputs`: no per-step object.
impl StepInputs for Outputs {
    fn dependency(&self, step: &str, id: &str) -> Option<Arc<StepOutput>> {
        self.index_of(step).and_then(|i| self.dependency_of(i, id))
    }

    fn upstream(&self, step: &str) -> Vec<(String, Arc<StepOutput>)> {
        self.index_of(step)
            .map(|i| self.upstream_of(i))
            .unwrap_or_default()
    }
}

/// What step tasks share (read-only, or write-once cells). It is also every step context's
/// [`RunScope`], so handing a step its context costs one reference count.
struct Shared {
    info: RunInfo,
    plan: Arc<ValidatedPlan>,
    outputs: Arc<Outputs>,
    modules: Vec<Arc<dyn Module>>,
    opts: RunOptions,
    /// The run's bus, for the sub-steps of a split step.
    bus: EventBus,
    /// The tasks of split steps' sub-steps. A cancelled run aborts a split step's task, which
    /// aborts its sub-steps' tasks without waiting for them: the run waits for them here.
    sub_steps: TaskTracker,
}

impl RunScope for Shared {
    fn run_info(&self) -> &RunInfo {
        &self.info
    }

    fn step_id(&self, index: usize) -> Option<&Arc<str>> {
        self.plan.ids.get(index)
    }

    fn before_changes(&self, index: usize) -> Option<nuvira_api::engine::ChangesWait> {
        let hooks = self.opts.hooks.as_ref()?;
        let step = self.plan.plan.steps.get(index)?;
        // Asked by a module about to change the workspace: whatever the step's write set says
        // (a repair strategy edits under a read-only test step), it waits as a writing step.
        let writes = match self.modules.get(index)?.write_set(step) {
            WriteSet::ReadOnly => WriteSet::Exclusive,
            w => w,
        };
        hooks.before_run(step, &writes)
    }
}

impl Shared {
    fn step(&self, idx: usize) -> &PlanStep {
        &self.plan.plan.steps[idx]
    }
}

/// The inputs of sub-steps added by a split: those of the step they replace.
struct SplitInputs {
    outputs: Arc<Outputs>,
    idx: usize,
}

impl StepInputs for SplitInputs {
    fn dependency(&self, _step: &str, id: &str) -> Option<Arc<StepOutput>> {
        self.outputs.dependency_of(self.idx, id)
    }

    fn upstream(&self, _step: &str) -> Vec<(String, Arc<StepOutput>)> {
        self.outputs.upstream_of(self.idx)
    }
}

/// The `idx` of the cancellation sentinel's result.
const CANCELLED: usize = usize::MAX;

/// What a step task reports back. Small on purpose: tokio moves it by value several times.
struct Done {
    idx: usize,
    attempts: u32,
    duration: Duration,
    /// `None` on success (the output is already in the step's cell).
    failure: Option<Box<StepFailure>>,
}

/// How a step task failed.
struct StepFailure {
    error: ModuleError,
    /// Failed, but a recovery policy chose graceful degradation: dependents still run.
    bypassed: Option<String>,
}

/// Runs a validated plan. `modules[i]` and `write_sets[i]` belong to `plan.plan.steps[i]`.
///
/// Emits `run:started`, `step:*` and `run:completed` (after `run:cancelled` when cancelled) on
/// the bus.
///
/// Dropping the returned future before it completes (a `tokio::time::timeout`, a `select!`)
/// cancels the run as `opts.cancel` would: no step starts after the drop and the running ones
/// are stopped, though the drop itself does not wait for them. `opts.cancel` itself is not
/// cancelled by a drop (the run uses a child token), so other runs sharing it go on.
pub async fn run(
    plan: Arc<ValidatedPlan>,
    modules: Vec<Arc<dyn Module>>,
    write_sets: Vec<WriteSet>,
    bus: EventBus,
    mut opts: RunOptions,
) -> RunSummary {
    // The run's own token: cancelled by the caller's, or by dropping this future.
    opts.cancel = opts.cancel.child_token();
    let cancel_on_drop = opts.cancel.clone().drop_guard();
    let run_id = bus.run_id().clone();
    let started = Instant::now();
    let outputs = Arc::new(Outputs::new(plan.clone()));
    let info = RunInfo::new(
        run_id.clone(),
        Arc::from(plan.plan.goal.as_str()),
        opts.workspace_root.clone(),
        outputs.clone(),
        Arc::new(bus.clone()),
        Arc::new(TokenSignal(opts.cancel.clone())),
    )
    .with_dry_run(opts.dry_run)
    .with_llm(opts.llm.clone())
    .with_plan(Some(plan.plan.clone()));
    let shared = Arc::new(Shared {
        info,
        plan,
        outputs,
        modules,
        opts,
        bus: bus.clone(),
        sub_steps: TaskTracker::new(),
    });
    let dispatcher = Dispatcher::new(shared, write_sets, bus.clone(), false);
    let joined = tokio::spawn(dispatcher.run()).await;
    cancel_on_drop.disarm();
    match joined {
        Ok(summary) => summary,
        Err(e) => {
            // The dispatcher itself panicked: report the run as failed rather than unwinding
            // into the caller.
            #[cfg(feature = "tracing")]
            tracing::error!("the scheduler's dispatcher failed: {e}");
            #[cfg(not(feature = "tracing"))]
            let _ = e;
            bus.publish(
                None,
                EventKind::RunCompleted {
                    status: RunStatus::Failed,
                    succeeded: 0,
                    failed: 0,
                    skipped: 0,
                    duration_ms: millis(started.elapsed()),
                },
            );
            RunSummary {
                run_id,
                status: RunStatus::Failed,
                steps: Vec::new(),
                duration: started.elapsed(),
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Event stamps (milliseconds since the Unix epoch, as [`now_ms`](crate::events::now_ms)
/// gives) for instants the dispatcher reads: the monotonic clock is read once per burst, and
/// that reading also starts the step run alone after it (see `run_alone`). The wall clock is
/// read again only once the millisecond it last gave is over, by the monotonic clock: a
/// stamp is the one `now_ms` would have given (but for the two clocks' drift within that
/// millisecond, and a wall-clock step showing up to a millisecond late), for a comparison,
/// not a second clock read and a conversion per burst.
struct WallClock {
    /// The stamp of the current millisecond, and the instant it ends.
    ms: u64,
    until: Instant,
}

impl WallClock {
    fn new() -> Self {
        let mut clock = Self {
            ms: 0,
            until: Instant::now(),
        };
        clock.resync(clock.until);
        clock
    }

    /// The stamp of `at`, read just now.
    fn ms(&mut self, at: Instant) -> u64 {
        if at >= self.until {
            self.resync(at);
        }
        self.ms
    }

    /// Reads the wall clock (just after `at`): its millisecond, and when it ends.
    fn resync(&mut self, at: Instant) {
        let wall = since_epoch();
        self.ms = wall
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(wall.subsec_millis()));
        let left = 1_000_000 - wall.subsec_nanos() % 1_000_000;
        self.until = at
            .checked_add(Duration::from_nanos(u64::from(left)))
            .unwrap_or(at);
    }
}

/// The wall clock since the Unix epoch (zero before it, as [`now_ms`](crate::events::now_ms)).
fn since_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

struct Dispatcher {
    shared: Arc<Shared>,
    write_sets: Vec<WriteSet>,
    bus: EventBus,
    /// Runs the sub-steps of a split step inside a run (see [`run_split`]): no run-level
    /// events, since the run goes on around it.
    nested: bool,
    /// Unfinished dependencies per step.
    remaining: Vec<u32>,
    /// Per-step state the hot path touches, compact; `RunSummary` entries are built at the end.
    status: Vec<StepStatus>,
    attempts: Vec<u32>,
    durations: Vec<Duration>,
    /// When each step's `step:started` was stamped (ms since the epoch; 0 while unobserved),
    /// for the duration of a step cut short by cancellation.
    started_ms: Vec<u64>,
    /// Stamps the lifecycle events of each burst.
    clock: WallClock,
    /// What failed and skipped steps add (few, so kept aside).
    details: std::collections::HashMap<usize, Detail>,
    ready: VecDeque<usize>,
    deferred: Vec<usize>,
    running_writers: Vec<usize>,
    in_flight: usize,
    tasks: JoinSet<Done>,
    /// Module names handed to `step:started` events, by module address.
    module_names: Vec<(usize, Arc<str>)>,
    /// Lifecycle events noted while handling one wake-up, published together by `flush`.
    pending: Vec<(u32, Planned)>,
    /// Steps `launch` is starting (kept to reuse its buffer).
    to_start: Vec<usize>,
    /// Steps that finished on their first poll, in the dispatcher (see `run_inline_first`).
    inline_done: Vec<Done>,
    /// Steps of this wake-up whose first poll happens in the dispatcher (kept for its buffer).
    to_poll: Vec<usize>,
    /// Modules (by address) whose steps are given a task at once: their polls in the
    /// dispatcher proved slow (see [`SlowPolls`]).
    spawn_first: Vec<usize>,
    /// Modules (by address) with polls in the dispatcher that took longer than
    /// [`INLINE_POLL_LIMIT`].
    slow_polls: Vec<(usize, SlowPolls)>,
    /// The only runnable step `launch` started (nothing else running or ready): `run` awaits
    /// it in the dispatcher's own task instead of giving it one (see `run_alone`), with the
    /// instant that stamped its `step:started`, if any.
    alone: Option<(usize, Option<Instant>)>,
    /// Steps not done at their first poll that the dispatcher goes on polling in its own task,
    /// each woken by its own waker (see [`Resident`]).
    resident: FuturesUnordered<Resident>,
    /// What the resident steps' polls of one wake-up gave (kept for its buffer).
    polled: Vec<Polled>,
}

/// A step's future, boxed so it can move from the dispatcher to a task between two polls.
type StepFuture = Pin<Box<dyn Future<Output = Done> + Send>>;

/// A step the dispatcher polls in its own task after its first poll, when that poll was
/// quick and not the end: waiting on a timer, I/O or another task costs it no task, no spawn
/// and no wake-up of another worker, and a wake-up of the dispatcher handles every resident
/// step woken by then. A poll slower than [`INLINE_POLL_LIMIT`] moves the step to a task (and
/// counts against its module, see [`SlowPolls`]), so slow synchronous work does not hold up
/// the dispatcher more than once per step.
struct Resident {
    idx: usize,
    /// `None` once the step has moved on (it is never polled again then).
    step: Option<StepFuture>,
}

/// What polling a resident step gave.
enum Polled {
    /// It ended; `bool`: its last poll was slow.
    Done(Done, bool),
    /// A poll was slow and it is not done: it moves to a task.
    Slow(usize, StepFuture),
}

impl Future for Resident {
    type Output = Polled;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Polled> {
        let idx = self.idx;
        let Some(step) = self.step.as_mut() else {
            return Poll::Pending;
        };
        let started = Instant::now();
        match poll_step(step.as_mut(), cx, idx) {
            Some(done) => Poll::Ready(Polled::Done(done, started.elapsed() > INLINE_POLL_LIMIT)),
            None if started.elapsed() > INLINE_POLL_LIMIT => match self.step.take() {
                Some(step) => Poll::Ready(Polled::Slow(idx, step)),
                None => Poll::Pending,
            },
            None => Poll::Pending,
        }
    }
}

/// Polls the resident steps that were woken, with the dispatcher's context, into `polled`.
fn poll_resident(
    resident: &mut FuturesUnordered<Resident>,
    cx: &mut Context<'_>,
    polled: &mut Vec<Polled>,
) {
    if resident.is_empty() {
        return;
    }
    while let Poll::Ready(Some(p)) = resident.poll_next_unpin(cx) {
        polled.push(p);
    }
}

/// The most events of a burst whose clock reading a step run alone after it starts from
/// (`flush_pending`).
const SHARED_CLOCK_BURST: usize = 8;

/// How long a step's first poll may take in the dispatcher and still count as quick. A step
/// this quick costs less run in place than a task costs to spawn and join (about a
/// microsecond per step); a slower one holds up the steps behind it.
const INLINE_POLL_LIMIT: Duration = Duration::from_micros(50);

/// The first polls in the dispatcher of one module's steps: when more than
/// [`SlowPolls::STRIKES`] were slow, and more than one in [`SlowPolls::RATIO`], the module's
/// steps get tasks at once. A single slow poll (the thread was preempted) does not count; a
/// module whose steps are slow holds up the dispatcher for at most a few of them.
#[derive(Clone, Copy, Default)]
struct SlowPolls {
    quick: u32,
    slow: u32,
}

impl SlowPolls {
    const STRIKES: u32 = 2;
    const RATIO: u32 = 16;

    fn too_slow(self) -> bool {
        self.slow > Self::STRIKES && self.slow.saturating_mul(Self::RATIO) > self.quick
    }
}

/// What a failed or skipped step adds to its outcome.
#[derive(Default)]
struct Detail {
    output: Option<Arc<StepOutput>>,
    error: Option<Box<ModuleError>>,
    skip_reason: Option<Box<str>>,
}

/// A count or index that fits the dispatcher's compact arrays (plans are far below 2^32
/// steps and edges).
fn small(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The module name of step `idx`, shared: a run uses few modules (each registered under one
/// name, the one its steps give), so events reuse one name per module, found in `names` by the
/// module's address and the name (a caller of [`run`] may give one module to steps that name it
/// differently: each step's event carries its own step's name). Only events a consumer
/// receives need it: the history takes the name from the plan.
fn module_name(names: &mut Vec<(usize, Arc<str>)>, shared: &Shared, idx: usize) -> Arc<str> {
    let addr = Arc::as_ptr(&shared.modules[idx]).cast::<()>() as usize;
    let name = shared.step(idx).module.as_str();
    if let Some((_, known)) = names.iter().find(|(a, n)| *a == addr && **n == *name) {
        return known.clone();
    }
    let known: Arc<str> = Arc::from(name);
    names.push((addr, known.clone()));
    known
}

impl Dispatcher {
    fn new(shared: Arc<Shared>, write_sets: Vec<WriteSet>, bus: EventBus, nested: bool) -> Self {
        let n = shared.plan.ids.len();
        let remaining = shared
            .plan
            .parents()
            .iter()
            .map(|p| small(p.len()))
            .collect();
        Self {
            shared,
            write_sets,
            bus,
            nested,
            remaining,
            status: vec![StepStatus::Pending; n],
            attempts: vec![0; n],
            durations: vec![Duration::ZERO; n],
            started_ms: vec![0; n],
            clock: WallClock::new(),
            details: std::collections::HashMap::new(),
            ready: VecDeque::with_capacity(n.min(1024)),
            deferred: Vec::new(),
            running_writers: Vec::new(),
            in_flight: 0,
            tasks: JoinSet::new(),
            module_names: Vec::new(),
            pending: Vec::new(),
            to_start: Vec::new(),
            inline_done: Vec::new(),
            to_poll: Vec::new(),
            spawn_first: Vec::new(),
            slow_polls: Vec::new(),
            alone: None,
            resident: FuturesUnordered::new(),
            polled: Vec::new(),
        }
    }

    async fn run(mut self) -> RunSummary {
        let started = Instant::now();
        let max_parallel = self.shared.opts.max_parallel.max(1);
        if !self.nested {
            self.publish(
                None,
                EventKind::RunStarted {
                    plan: self.shared.plan.plan.clone(),
                    // Unbounded is announced as the most that can run: every step.
                    max_parallel: if max_parallel == usize::MAX {
                        self.remaining.len().max(1)
                    } else {
                        max_parallel
                    },
                    dry_run: self.shared.opts.dry_run,
                },
            );
        }
        // Each step emits ready, started and an end event; the run emits one more.
        self.bus.reserve(3 * self.remaining.len() + 1);
        for i in 0..self.remaining.len() {
            if self.remaining[i] == 0 {
                self.make_ready(i);
            }
        }
        // Cancellation arrives through the same JoinSet as step results: a sentinel task that
        // finishes when the token fires. The loop then awaits one future, not a `select!` over
        // two, which is measurably cheaper per step.
        let token = self.shared.opts.cancel.clone();
        let sentinel = self.tasks.spawn(async move {
            token.cancelled().await;
            Done {
                idx: CANCELLED,
                attempts: 0,
                duration: Duration::ZERO,
                failure: None,
            }
        });
        // A token cancelled before the run starts nothing.
        let mut was_cancelled = self.shared.opts.cancel.is_cancelled();
        while !was_cancelled {
            self.launch(max_parallel);
            if let Some((idx, started)) = self.alone.take() {
                match self.run_alone(idx, started).await {
                    Some(done) => self.inline_done.push(done),
                    None => {
                        was_cancelled = true;
                        break;
                    }
                }
            }
            if !self.inline_done.is_empty() {
                let mut inline = std::mem::take(&mut self.inline_done);
                for done in inline.drain(..) {
                    self.finish(done);
                }
                self.inline_done = inline;
                // Steps that finish on their first poll never reach `join_next`: handle the
                // tasks that finished meanwhile, notice cancellation here, and give the worker
                // back when tokio's budget says so.
                while let Some(joined) = self.tasks.try_join_next() {
                    match joined {
                        Ok(done) if done.idx == CANCELLED => was_cancelled = true,
                        Ok(done) => self.finish(done),
                        Err(_) => {}
                    }
                }
                if !self.resident.is_empty() {
                    let (resident, polled) = (&mut self.resident, &mut self.polled);
                    std::future::poll_fn(|cx| {
                        poll_resident(resident, cx, polled);
                        Poll::Ready(())
                    })
                    .await;
                    self.handle_polled();
                }
                if was_cancelled || self.shared.opts.cancel.is_cancelled() {
                    was_cancelled = true;
                    break;
                }
                tokio::task::consume_budget().await;
                continue;
            }
            if self.in_flight == 0 {
                break;
            }
            // Every step that has finished by now, resident or in a task, is handled before the
            // next launch, so one wake-up starts their dependents together and publishes their
            // events at once.
            let (tasks, resident, polled) = (&mut self.tasks, &mut self.resident, &mut self.polled);
            let mut joined = std::future::poll_fn(|cx| {
                poll_resident(resident, cx, polled);
                match tasks.poll_join_next(cx) {
                    Poll::Pending if polled.is_empty() => Poll::Pending,
                    Poll::Pending => Poll::Ready(None),
                    Poll::Ready(joined) => Poll::Ready(joined),
                }
            })
            .await;
            self.handle_polled();
            let mut ended = false;
            while let Some(result) = joined {
                match result {
                    Ok(done) if done.idx == CANCELLED => {
                        was_cancelled = true;
                        ended = true;
                        break;
                    }
                    Ok(done) => self.finish(done),
                    // Tasks are only aborted on cancellation, which leaves this loop first.
                    Err(_) => {}
                }
                joined = self.tasks.try_join_next();
            }
            if ended || (self.tasks.is_empty() && self.resident.is_empty()) {
                break;
            }
        }
        if !was_cancelled {
            sentinel.abort();
            // Reap the sentinel (and catch a cancellation that raced the last step).
            while let Some(joined) = self.tasks.join_next().await {
                match joined {
                    Ok(done) if done.idx == CANCELLED => was_cancelled = true,
                    Ok(done) => self.finish(done),
                    Err(_) => {}
                }
            }
        }
        // A step that noticed the cancellation itself and failed may end the run before the
        // sentinel is reaped: the run was still cancelled, unless every step got done anyway.
        if !was_cancelled
            && self.shared.opts.cancel.is_cancelled()
            && self.status.iter().any(|s| *s != StepStatus::Succeeded)
        {
            was_cancelled = true;
        }
        if was_cancelled {
            self.cancel_all().await;
        }
        let status = if was_cancelled {
            RunStatus::Cancelled
        } else if self.status.iter().all(|s| *s == StepStatus::Succeeded) {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        };
        let duration = started.elapsed();
        if !self.nested {
            self.publish(
                None,
                EventKind::RunCompleted {
                    status,
                    succeeded: self.count(StepStatus::Succeeded),
                    failed: self.count(StepStatus::Failed),
                    skipped: self.count(StepStatus::Skipped) + self.count(StepStatus::Pending),
                    duration_ms: millis(duration),
                },
            );
        }
        RunSummary {
            run_id: self.shared.info.run_id.clone(),
            status,
            steps: self.outcomes(),
            duration,
        }
    }

    /// Handles what the resident steps' polls gave: ended steps finish, slow ones get tasks.
    fn handle_polled(&mut self) {
        if self.polled.is_empty() {
            return;
        }
        let mut polled = std::mem::take(&mut self.polled);
        for p in polled.drain(..) {
            match p {
                Polled::Done(done, slow) => {
                    self.count_poll(done.idx, slow);
                    self.finish(done);
                }
                Polled::Slow(idx, step) => {
                    self.count_poll(idx, true);
                    self.spawn_step_future(idx, step);
                }
            }
        }
        self.polled = polled;
    }

    /// Every step's outcome, in plan order. Outputs stayed in their cells while the run went
    /// on (a success cost the dispatcher no reference count); the summary gets them now.
    ///
    /// The run's own tables (dependency counters, the dependents' lists, write sets, start
    /// stamps) are freed first: the summary is the run's peak of memory, and they are not
    /// needed for it.
    fn outcomes(&mut self) -> Vec<StepOutcome> {
        self.remaining = Vec::new();
        self.write_sets = Vec::new();
        self.started_ms = Vec::new();
        self.ready = VecDeque::new();
        self.deferred = Vec::new();
        self.pending = Vec::new();
        self.to_start = Vec::new();
        let mut steps: Vec<StepOutcome> = (0..self.status.len())
            .map(|i| StepOutcome {
                id: self.shared.plan.ids[i].clone(),
                status: self.status[i],
                output: if self.status[i] == StepStatus::Succeeded {
                    self.shared.outputs.get(i)
                } else {
                    None
                },
                error: None,
                skip_reason: None,
                attempts: self.attempts[i],
                duration: self.durations[i],
            })
            .collect();
        for (i, d) in self.details.drain() {
            let step = &mut steps[i];
            if d.output.is_some() {
                step.output = d.output;
            }
            step.error = d.error;
            step.skip_reason = d.skip_reason;
        }
        steps
    }

    fn count(&self, status: StepStatus) -> usize {
        self.status.iter().filter(|s| **s == status).count()
    }

    /// Where the dependents of step `idx` lie in [`child`](Self::child)'s numbering (the
    /// validated plan's packed lists, so the hot loop reads contiguous memory).
    fn children(&self, idx: usize) -> std::ops::Range<usize> {
        self.shared.plan.children().span(idx)
    }

    /// The dependent at position `e` of the packed lists.
    fn child(&self, e: usize) -> usize {
        self.shared.plan.children().targets()[e] as usize
    }

    fn make_ready(&mut self, i: usize) {
        if self.bus.is_observed() {
            self.note(i, Planned::Ready);
        }
        self.ready.push_back(i);
    }

    fn conflicts(&self, i: usize) -> bool {
        let ws = &self.write_sets[i];
        !matches!(ws, WriteSet::ReadOnly)
            && self
                .running_writers
                .iter()
                .any(|&r| self.write_sets[r].conflicts(ws))
    }

    /// Starts ready steps up to the cap. Their `step:started` events, with whatever else this
    /// wake-up noted, are published before any of them can run.
    fn launch(&mut self, max_parallel: usize) {
        if self.in_flight == 0 && self.ready.is_empty() && !self.deferred.is_empty() {
            // Nothing runs, so nothing can conflict any more.
            self.ready.extend(self.deferred.drain(..));
        }
        let mut start = std::mem::take(&mut self.to_start);
        while self.in_flight + start.len() < max_parallel {
            let Some(i) = self.ready.pop_front() else {
                break;
            };
            if self.conflicts(i) {
                self.deferred.push(i);
                continue;
            }
            if !matches!(self.write_sets[i], WriteSet::ReadOnly) {
                self.running_writers.push(i);
            }
            self.status[i] = StepStatus::Running;
            if self.bus.is_observed() {
                self.note(i, Planned::Started { attempt: 1 });
            }
            start.push(i);
        }
        let stamped = self.flush();
        let alone = self.in_flight == 0 && start.len() == 1 && self.ready.is_empty();
        if alone {
            // The dispatcher would only wait for it: `run` awaits it in place (`run_alone`),
            // from the instant its `step:started` was stamped with.
            self.alone = start.pop().map(|i| (i, stamped));
        } else {
            // Steps of modules known to be slow get tasks first, so they run on other workers
            // while the dispatcher polls the quick ones.
            let mut poll = std::mem::take(&mut self.to_poll);
            for i in start.drain(..) {
                if self.polls_in_place(i) {
                    poll.push(i);
                } else {
                    self.spawn(i, false);
                }
            }
            for i in poll.drain(..) {
                // A step polled here may cancel the run: the rest get tasks, which the
                // cancellation aborts, as it would have had they been spawned. A module that
                // proved slow during this loop gets tasks for the rest of it too, so one
                // wake-up runs at most a few slow first polls in a row.
                let in_place = !self.shared.opts.cancel.is_cancelled() && self.polls_in_place(i);
                self.spawn(i, in_place);
            }
            self.to_poll = poll;
        }
        self.to_start = start;
    }

    /// Whether step `idx`'s first poll happens in the dispatcher: unless its module's steps
    /// proved slow (see `run_inline_first`).
    fn polls_in_place(&self, idx: usize) -> bool {
        self.spawn_first.is_empty() || !self.spawn_first.contains(&self.module_addr(idx))
    }

    fn module_addr(&self, idx: usize) -> usize {
        Arc::as_ptr(&self.shared.modules[idx]).cast::<()>() as usize
    }

    /// Counts a first poll of step `idx` in the dispatcher, quick or slow. Only modules with
    /// a slow poll are tracked, so a run of quick steps costs a check of an empty list.
    fn count_poll(&mut self, idx: usize, slow: bool) {
        if !slow && self.slow_polls.is_empty() {
            return;
        }
        let addr = self.module_addr(idx);
        let pos = match self.slow_polls.iter().position(|(a, _)| *a == addr) {
            Some(pos) => pos,
            None if slow => {
                self.slow_polls.push((addr, SlowPolls::default()));
                self.slow_polls.len() - 1
            }
            None => return,
        };
        let polls = &mut self.slow_polls[pos].1;
        if slow {
            polls.slow += 1;
        } else {
            polls.quick = polls.quick.saturating_add(1);
        }
        if polls.too_slow() {
            self.spawn_module_first(idx);
        }
    }

    /// From now on, step `idx`'s module gets tasks at once.
    fn spawn_module_first(&mut self, idx: usize) {
        let addr = self.module_addr(idx);
        if !self.spawn_first.contains(&addr) {
            self.spawn_first.push(addr);
        }
    }

    /// Notes a lifecycle event of step `idx`, published with the wake-up's others.
    fn note(&mut self, idx: usize, what: Planned) {
        self.pending.push((small(idx), what));
    }

    /// Publishes the noted lifecycle events, stamped with one clock read (returned), under
    /// one lock.
    #[inline]
    fn flush(&mut self) -> Option<Instant> {
        // Inlined, so a run nobody observes (nothing noted) pays a test, not a call.
        if self.pending.is_empty() {
            return None;
        }
        self.flush_pending()
    }

    fn flush_pending(&mut self) -> Option<Instant> {
        let at = Instant::now();
        let now = self.clock.ms(at);
        // The reading is shared with a step run alone right after only when the burst is a
        // few events (a chain's end, ready and start): publishing a long one (a fan-in's
        // thousands of ends, to subscribers) would count in the step's duration and in its
        // slow-poll check.
        let share = self.pending.len() <= SHARED_CLOCK_BURST;
        for (idx, what) in &self.pending {
            if let Planned::Started { .. } = what {
                self.started_ms[*idx as usize] = now;
            }
        }
        let (names, shared) = (&mut self.module_names, &self.shared);
        self.bus
            .publish_plan_steps(now, &shared.plan, &mut self.pending, |idx| {
                module_name(names, shared, idx as usize)
            });
        share.then_some(at)
    }

    /// Publishes any other event, after the noted ones, so the order stays what happened.
    fn publish(&mut self, step: Option<Arc<str>>, kind: EventKind) {
        self.flush();
        self.bus.publish(step, kind);
    }

    /// Gives step `idx` a task; `in_place`: its first poll happens here (see
    /// `run_inline_first`).
    fn spawn(&mut self, idx: usize, in_place: bool) {
        let shared = self.shared.clone();
        self.in_flight += 1;
        if in_place {
            self.run_inline_first(shared, idx);
            return;
        }
        // A panicking module must not take the run down: the panic becomes the step's failure.
        //
        // The task's own future is tiny (an `Arc` and an index): tokio moves it by value
        // several times while spawning. The step's state machine is boxed on the worker, at the
        // first poll, where it is also freed.
        self.spawn_task(async move {
            AssertUnwindSafe(Box::pin(run_step(shared, idx, None)))
                .catch_unwind()
                .await
                .unwrap_or_else(|payload| panicked(idx, &*payload))
        });
    }

    /// Spawns a step task; a sub-step's is tracked, so a cancelled run can wait for it.
    fn spawn_task<F: Future<Output = Done> + Send + 'static>(&mut self, task: F) {
        if self.nested {
            self.tasks.spawn(self.shared.sub_steps.track_future(task));
        } else {
            self.tasks.spawn(task);
        }
    }

    /// Runs step `idx`, the only runnable one, in the dispatcher's own task: the dispatcher
    /// would only wait for it, so a task of its own would only add a spawn, a join and a
    /// wake-up. The step's future lives in the dispatcher's (no allocation) and is polled with
    /// the dispatcher's waker; between polls the dispatcher watches for cancellation through
    /// the sentinel, the only other task. `None`: the run was cancelled, and the step's future
    /// is dropped here, as an aborted task's would be (the step stays `Running` for
    /// `cancel_all`).
    ///
    /// `started`: the instant that stamped the step's `step:started` (the burst was published
    /// just before), its start: nothing ran in between, and a step of a chain costs one clock
    /// read fewer.
    async fn run_alone(&mut self, idx: usize, started: Option<Instant>) -> Option<Done> {
        self.in_flight += 1;
        let mut step = std::pin::pin!(run_step(self.shared.clone(), idx, started));
        let mut polls = 0u32;
        let (tasks, finished) = (&mut self.tasks, &mut self.inline_done);
        let done = std::future::poll_fn(|cx| {
            // The first poll, as `run_inline_first`'s, is with a no-op waker; a step not done
            // then is polled again at once with the dispatcher's waker (which it registers, as
            // every poll must). A step that only yields once (`yield_now`) is then done
            // without a round trip through the runtime's queues: that round trip made the
            // worker search for work and wake the idle one, a context switch every few steps.
            if polls == 0 {
                polls += 1;
                let mut noop = Context::from_waker(Waker::noop());
                if let Some(done) = poll_step(step.as_mut(), &mut noop, idx) {
                    return Poll::Ready(Some(done));
                }
            }
            polls += 1;
            if let Some(done) = poll_step(step.as_mut(), cx, idx) {
                return Poll::Ready(Some(done));
            }
            // Nothing else runs: the only other task is the cancellation sentinel (anything
            // else that ends is handled with the inline results).
            loop {
                match tasks.poll_join_next(cx) {
                    Poll::Ready(Some(Ok(d))) if d.idx == CANCELLED => return Poll::Ready(None),
                    Poll::Ready(Some(Ok(d))) => finished.push(d),
                    Poll::Ready(Some(Err(_))) => {}
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        if let Some(d) = &done
            && polls == 1
        {
            self.count_poll(idx, d.duration > INLINE_POLL_LIMIT);
        }
        done
    }

    /// Polls step `idx` once here, in the dispatcher, before giving it a task. A step that
    /// completes at once (a no-op, a step whose work is already done, a resumed step) then
    /// costs no task: spawning and joining one costs more than such a step. One that is not
    /// done yet stays [`Resident`] (the next poll, in the resident set, registers its own
    /// waker).
    ///
    /// The dispatcher does this for the steps of a wake-up after those of slow modules got
    /// their tasks (the only runnable step is awaited in place, see `run_alone`). A module
    /// whose polls prove slow (see [`SlowPolls`]) has its steps spawned at once from then on
    /// (unless alone), so slow polls hold up the steps behind them a few times per module
    /// and run at most.
    fn run_inline_first(&mut self, shared: Arc<Shared>, idx: usize) {
        let mut step: StepFuture = Box::pin(run_step(shared, idx, None));
        let mut cx = Context::from_waker(Waker::noop());
        let polled_at = Instant::now();
        match std::panic::catch_unwind(AssertUnwindSafe(|| step.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(done)) => {
                self.count_poll(idx, done.duration > INLINE_POLL_LIMIT);
                self.inline_done.push(done);
            }
            Err(payload) => self.inline_done.push(panicked(idx, &*payload)),
            // A slow first poll that did not end: the step's next polls may be as slow.
            Ok(Poll::Pending) if polled_at.elapsed() > INLINE_POLL_LIMIT => {
                self.count_poll(idx, true);
                self.spawn_step_future(idx, step);
            }
            Ok(Poll::Pending) => self.resident.push(Resident {
                idx,
                step: Some(step),
            }),
        }
    }

    /// Gives a step future that was polled in the dispatcher a task of its own.
    fn spawn_step_future(&mut self, idx: usize, step: StepFuture) {
        self.spawn_task(async move {
            AssertUnwindSafe(step)
                .catch_unwind()
                .await
                .unwrap_or_else(|payload| panicked(idx, &*payload))
        });
    }

    fn finish(&mut self, done: Done) {
        let idx = done.idx;
        self.in_flight -= 1;
        if let Some(pos) = self.running_writers.iter().position(|&r| r == idx) {
            self.running_writers.swap_remove(pos);
            // A writer finished: deferred steps may run now, ahead of newer ready steps.
            for d in self.deferred.drain(..).rev() {
                self.ready.push_front(d);
            }
        }
        self.attempts[idx] = done.attempts;
        self.durations[idx] = done.duration;
        match done.failure {
            None => {
                self.status[idx] = StepStatus::Succeeded;
                if self.bus.is_observed() {
                    let output = self.shared.outputs.get_non_empty(idx);
                    self.note(
                        idx,
                        Planned::Succeeded {
                            duration_ms: millis(done.duration),
                            output,
                        },
                    );
                }
                self.release_children(idx);
            }
            Some(failure) => {
                let StepFailure { error, bypassed } = *failure;
                let bypassed = bypassed.is_some();
                self.fail(idx, error, done.duration, !bypassed);
                if bypassed {
                    self.release_children(idx);
                }
            }
        }
    }

    /// Counts a succeeded (or bypassed) step off its dependents; those with nothing left to
    /// wait for become ready.
    fn release_children(&mut self, idx: usize) {
        for e in self.children(idx) {
            let child = self.child(e);
            self.remaining[child] -= 1;
            if self.remaining[child] == 0 && self.status[child] == StepStatus::Pending {
                self.make_ready(child);
            }
        }
    }

    fn fail(&mut self, idx: usize, err: ModuleError, duration: Duration, skip_dependents: bool) {
        let id = self.shared.plan.ids[idx].clone();
        self.status[idx] = StepStatus::Failed;
        let (category, message, evidence, output) = match err.failure() {
            Some(f) => (
                f.category,
                f.message.clone(),
                f.evidence.clone(),
                f.output.as_deref().cloned().map(Arc::new),
            ),
            None => (
                ErrorCategory::Cancelled,
                "cancelled while running".to_owned(),
                Vec::new(),
                None,
            ),
        };
        let recoverable = err.is_recoverable();
        let detail = self.details.entry(idx).or_default();
        detail.output.clone_from(&output);
        detail.error = Some(Box::new(err));
        self.publish(
            Some(id.clone()),
            EventKind::StepFailed {
                category,
                message,
                recoverable,
                evidence,
                duration_ms: millis(duration),
                output,
            },
        );
        if skip_dependents {
            self.skip_dependents(idx);
        }
    }

    /// Marks every transitive dependent of a failed step as skipped.
    fn skip_dependents(&mut self, failed: usize) {
        let root = self.shared.plan.ids[failed].clone();
        let mut queue: VecDeque<usize> = VecDeque::from([failed]);
        while let Some(i) = queue.pop_front() {
            for e in self.children(i) {
                let child = self.child(e);
                if self.status[child] != StepStatus::Pending {
                    continue;
                }
                let via = &self.shared.plan.ids[i];
                let reason = if self.shared.opts.cancel.is_cancelled() {
                    // A step that stopped because of the cancellation did not fail on its own.
                    "the run was cancelled".to_owned()
                } else if i == failed {
                    format!("dependency `{root}` failed")
                } else {
                    format!("dependency `{via}` was skipped because `{root}` failed")
                };
                self.status[child] = StepStatus::Skipped;
                self.details.entry(child).or_default().skip_reason = Some(reason.as_str().into());
                self.publish(
                    Some(self.shared.plan.ids[child].clone()),
                    EventKind::StepSkipped {
                        reason,
                        cause: Some(via.to_string()),
                    },
                );
                queue.push_back(child);
            }
        }
        // Steps that were ready but not started are Pending too, and were skipped above only
        // if they depend on the failure; nothing else to do.
    }

    async fn cancel_all(&mut self) {
        if !self.nested {
            self.publish(
                None,
                EventKind::RunCancelled {
                    reason: "the run was cancelled".into(),
                },
            );
        }
        // Resident steps are dropped here, as aborted tasks are (they stay `Running` below).
        self.resident.clear();
        self.polled.clear();
        self.tasks.abort_all();
        while let Some(joined) = self.tasks.join_next().await {
            if let Ok(done) = joined
                && done.idx != CANCELLED
            {
                self.finish(done);
            }
        }
        if !self.nested {
            // Aborting a split step's task aborted its sub-steps' tasks, which end later.
            self.shared.sub_steps.close();
            self.shared.sub_steps.wait().await;
        }
        // Every task has ended; those that were aborted are still marked running.
        for i in 0..self.status.len() {
            if self.status[i] == StepStatus::Running {
                self.in_flight -= 1;
                self.status[i] = StepStatus::Failed;
                self.details.entry(i).or_default().error = Some(Box::new(ModuleError::Cancelled));
                // How long it ran: from its `step:started` stamp (kept while events are observed).
                let ran_ms = match self.started_ms[i] {
                    0 => 0,
                    at => crate::events::now_ms().saturating_sub(at),
                };
                self.durations[i] = Duration::from_millis(ran_ms);
                self.publish(
                    Some(self.shared.plan.ids[i].clone()),
                    EventKind::StepFailed {
                        category: ErrorCategory::Cancelled,
                        message: "cancelled while running".into(),
                        recoverable: false,
                        evidence: Vec::new(),
                        duration_ms: ran_ms,
                        output: None,
                    },
                );
            }
        }
        for i in 0..self.status.len() {
            if self.status[i] == StepStatus::Pending {
                self.status[i] = StepStatus::Skipped;
                self.details.entry(i).or_default().skip_reason =
                    Some("the run was cancelled".into());
                self.publish(
                    Some(self.shared.plan.ids[i].clone()),
                    EventKind::StepSkipped {
                        reason: "the run was cancelled".into(),
                        cause: None,
                    },
                );
            }
        }
    }
}

/// Runs one step. The common path (first attempt succeeds or fails for good) keeps the future
/// small, because tokio moves a task's future by value; timeouts and recovery are boxed.
/// `started`: when the step started, if the dispatcher just read it (see `run_alone`); else
/// the first poll reads it.
async fn run_step(shared: Arc<Shared>, idx: usize, started: Option<Instant>) -> Done {
    let started = started.unwrap_or_else(Instant::now);
    let module = &shared.modules[idx];
    if shared.opts.dry_run && !module.kind().runs_in_dry_run() {
        // A dry run changes nothing and runs nothing: tests and commands would only see the
        // unchanged workspace (see `ModuleKind`).
        shared.outputs.set(
            idx,
            StepOutput::Value(serde_json::json!({
                "dry_run": true,
                "note": format!("`{}` steps are not run in a dry run", shared.step(idx).module),
            })),
        );
        return done(idx, Ok(()), 0, started, None);
    }
    let ctx = step_context(&shared, idx, 1, None);
    if let Some(hooks) = &shared.opts.hooks
        && let Some(output) = hooks.prior_outcome(shared.step(idx), &ctx)
    {
        shared.outputs.set(idx, output);
        return done(idx, Ok(()), 1, started, None);
    }
    if let Some(wait) = before_run(&shared, idx) {
        wait.await;
    }
    // The result is consumed inside this match, so only the boxed recovery future (a pointer)
    // is alive across the next await: the step future stays small.
    let recovery = match run_once(&shared, idx, shared.step(idx), &ctx).await {
        Ok(output) => {
            shared.outputs.set(idx, output);
            return done(idx, Ok(()), 1, started, None);
        }
        Err(ModuleError::Recoverable(failure)) if shared.opts.recovery.is_some() => {
            recover_boxed(&shared, idx, ctx, failure, started)
        }
        Err(err) => return done(idx, Err(err), 1, started, None),
    };
    recovery.await
}

/// What the hooks want step `idx` to wait for before its module runs (only asked with hooks):
/// nothing for a module that waits for it itself before its first change
/// ([`Module::calls_before_changes`], through [`StepContext::before_changes`]).
fn before_run(shared: &Shared, idx: usize) -> Option<crate::hooks::Wait> {
    let hooks = shared.opts.hooks.as_ref()?;
    let module = &shared.modules[idx];
    if module.calls_before_changes() {
        return None;
    }
    let step = shared.step(idx);
    hooks.before_run(step, &module.write_set(step))
}

/// [`recover`], boxed: it is rare and large, so the common step future does not carry it.
fn recover_boxed(
    shared: &Arc<Shared>,
    idx: usize,
    ctx: StepContext,
    failure: Failure,
    started: Instant,
) -> Pin<Box<dyn Future<Output = Done> + Send + '_>> {
    Box::pin(recover(shared, idx, ctx, failure, started))
}

/// The context of one attempt of a step: the run's shared part (one reference count), the
/// step id, the attempt and the deadline.
fn step_context(
    shared: &Arc<Shared>,
    idx: usize,
    attempt: u32,
    feedback: Option<String>,
) -> StepContext {
    let deadline = shared
        .step(idx)
        .timeout
        .or(shared.opts.default_timeout)
        .map(|t| Instant::now() + t);
    // Only what differs from a first attempt is set: each builder call moves the whole
    // context (a call into the contract crate, not inlined), and most steps need none.
    let mut builder = StepContextBuilder::in_scope(shared.clone(), idx);
    if deadline.is_some() {
        builder = builder.deadline(deadline);
    }
    if attempt != 1 {
        builder = builder.attempt(attempt);
    }
    if feedback.is_some() {
        builder = builder.feedback(feedback);
    }
    let ctx = builder.build();
    // A model scoped to the step's attempt, when a hook asks for one.
    match (&shared.opts.hooks, &shared.opts.llm) {
        (Some(hooks), Some(llm)) => match hooks.step_llm(llm, &shared.plan.ids[idx], attempt) {
            Some(scoped) => ctx.with_llm(Some(scoped)),
            None => ctx,
        },
        _ => ctx,
    }
}

/// A module's future, as `async_trait` boxes it.
type Attempt<'a> = Pin<Box<dyn Future<Output = Result<StepOutput, ModuleError>> + Send + 'a>>;

/// One attempt: the module's future, stopped at the step's timeout.
///
/// A plain function returning the module's own boxed future (wrapped only when there is a
/// timeout), so the step task holds one pointer across the await, not a state machine.
fn run_once<'a>(
    shared: &'a Shared,
    idx: usize,
    step: &'a PlanStep,
    ctx: &'a StepContext,
) -> Attempt<'a> {
    let module = &shared.modules[idx];
    match step.timeout.or(shared.opts.default_timeout) {
        None => module.run(step, ctx),
        Some(t) => Box::pin(async move {
            match tokio::time::timeout(t, module.run(step, ctx)).await {
                Ok(r) => r,
                Err(_) => Err(ModuleError::recoverable(
                    ErrorCategory::Timeout,
                    format!(
                        "step `{}` timed out after {}: raise its `timeout` or make it faster",
                        step.id,
                        nuvira_api::duration::format(t)
                    ),
                )),
            }
        }),
    }
}

/// The recovery loop after a recoverable failure: asks the policy, then retries, splits,
/// bypasses or gives up.
async fn recover(
    shared: &Arc<Shared>,
    idx: usize,
    mut ctx: StepContext,
    mut failure: Failure,
    started: Instant,
) -> Done {
    let mut attempt = 1u32;
    // The plan's step, unless the policy replaced it for a retry.
    let mut changed: Option<PlanStep> = None;
    loop {
        let step: &PlanStep = changed.as_ref().unwrap_or_else(|| shared.step(idx));
        let decision = match &shared.opts.recovery {
            Some(policy) => policy.on_failure(step, &ctx, attempt, &failure).await,
            None => RecoveryDecision::GiveUp,
        };
        match decision {
            RecoveryDecision::Retry {
                delay,
                feedback,
                step: new_step,
            } => {
                attempt += 1;
                shared.info.events.emit(
                    Some(&shared.plan.ids[idx]),
                    EventKind::StepRetrying {
                        attempt,
                        reason: failure.message.clone(),
                        delay_ms: millis(delay),
                    },
                );
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if let Some(new_step) = new_step {
                    changed = Some(PlanStep {
                        id: step.id.clone(),
                        ..*new_step
                    });
                }
                let feedback = feedback.or(Some(failure.message.clone()));
                ctx = step_context(shared, idx, attempt, feedback);
                let step: &PlanStep = changed.as_ref().unwrap_or_else(|| shared.step(idx));
                match run_once(shared, idx, step, &ctx).await {
                    Ok(output) => {
                        shared.outputs.set(idx, output);
                        return done(idx, Ok(()), attempt, started, None);
                    }
                    Err(ModuleError::Recoverable(next)) => failure = next,
                    Err(err) => return done(idx, Err(err), attempt, started, None),
                }
            }
            RecoveryDecision::Split { steps } => {
                let result = Box::pin(run_split(shared, idx, &ctx, steps)).await;
                if let Some(policy) = &shared.opts.recovery {
                    policy.on_split_finished(step, &ctx, result.is_ok()).await;
                }
                let result = result.map(|output| shared.outputs.set_shared(idx, output));
                return done(idx, result, attempt + 1, started, None);
            }
            RecoveryDecision::Bypass { reason } => {
                failure.message = format!("bypassed: {reason} (after: {})", failure.message);
                return done(
                    idx,
                    Err(ModuleError::Recoverable(failure)),
                    attempt,
                    started,
                    Some(reason),
                );
            }
            _ => {
                return done(
                    idx,
                    Err(ModuleError::Recoverable(failure)),
                    attempt,
                    started,
                    None,
                );
            }
        }
    }
}

fn done(
    idx: usize,
    result: Result<(), ModuleError>,
    attempts: u32,
    started: Instant,
    bypassed: Option<String>,
) -> Done {
    Done {
        idx,
        attempts,
        duration: started.elapsed(),
        failure: result
            .err()
            .map(|error| Box::new(StepFailure { error, bypassed })),
    }
}

/// Runs the sub-steps a split-task decision put in place of step `idx`, after validating
/// them, through the same dispatcher as the run's own steps: dependency order, per-step
/// timeouts, write-set serialisation, `step:*` events and cancellation apply to them as to any
/// step (recovery does not: a sub-step's failure is the split step's). Their inputs are those
/// of step `idx`. Returns the output of the last sub-step in dependency order.
async fn run_split(
    shared: &Arc<Shared>,
    idx: usize,
    parent_ctx: &StepContext,
    steps: Vec<PlanStep>,
) -> Result<Arc<StepOutput>, ModuleError> {
    let parent = shared.step(idx);
    let invalid = |msg: String| {
        ModuleError::fatal(
            ErrorCategory::InvalidConfig,
            format!("step `{}` could not be split: {msg}", parent.id),
        )
    };
    if steps.is_empty() {
        return Err(invalid("no sub-steps were given".into()));
    }
    let Some(registry) = &shared.opts.registry else {
        return Err(invalid(
            "the engine has no module registry for new steps".into(),
        ));
    };
    // Validate the sub-steps as a plan of their own, whose only outside dependencies may be the
    // parent's own dependencies.
    let mut sub_ids: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for s in &steps {
        if !crate::validate::is_valid_id(&s.id) {
            return Err(invalid(format!("sub-step id `{}` is invalid", s.id)));
        }
        if shared.plan.ids.iter().any(|id| **id == *s.id) || !sub_ids.insert(s.id.as_str()) {
            return Err(invalid(format!("sub-step id `{}` is already used", s.id)));
        }
    }
    let mut sub_plan = steps.clone();
    for s in &mut sub_plan {
        s.depends_on.retain(|d| !parent.depends_on.contains(d));
        if let Some(d) = s.depends_on.iter().find(|d| !sub_ids.contains(d.as_str())) {
            return Err(invalid(format!(
                "sub-step `{}` depends on `{d}`, which is neither a sub-step nor a dependency of `{}`",
                s.id, parent.id
            )));
        }
    }
    let plan = nuvira_api::ExecutionPlan {
        goal: shared.info.goal.to_string(),
        outputs: Some(sub_plan.iter().map(|s| s.id.clone()).collect()),
        steps: sub_plan,
        ..Default::default()
    };
    let validated =
        crate::validate::validate(&plan, Some(registry)).map_err(|e| invalid(e.to_string()))?;
    for s in &plan.steps {
        shared.info.events.emit(
            Some(&s.id),
            EventKind::PlanStepCreated {
                step: s.id.clone(),
                module: s.module.clone(),
            },
        );
    }
    // The sub-steps run as steps of their own, under a dispatcher nested in this step's
    // task: each gets its timeout, steps whose write sets conflict never run together, and
    // they emit the usual step events. A failed sub-step is not recovered again (it already
    // is a repair): its failure is the split step's failure.
    let mut modules = Vec::with_capacity(validated.plan.steps.len());
    let mut write_sets = Vec::with_capacity(validated.plan.steps.len());
    for sub in &validated.plan.steps {
        let Some(module) = registry.get(&sub.module) else {
            return Err(invalid(format!("no module `{}`", sub.module)));
        };
        write_sets.push(module.write_set(sub));
        modules.push(module.clone());
    }
    let order = validated.topological_order();
    let validated = Arc::new(validated);
    // Stopped with the run, and when this step's task is dropped (a timeout of the split
    // step, an aborted task).
    let cancel = shared.opts.cancel.child_token();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let outputs = Arc::new(Outputs::new(validated.clone()));
    let parent_info = &shared.info;
    let info = RunInfo::new(
        parent_info.run_id.clone(),
        parent_info.goal.clone(),
        parent_info.workspace_root.clone(),
        Arc::new(SplitInputs {
            outputs: shared.outputs.clone(),
            idx,
        }),
        parent_info.events.clone(),
        Arc::new(TokenSignal(cancel.clone())),
    )
    .with_dry_run(parent_info.dry_run)
    .with_llm(parent_ctx.llm().cloned())
    .with_plan(parent_info.plan.clone());
    let mut opts = shared.opts.clone();
    opts.cancel = cancel;
    opts.recovery = None;
    let sub = Arc::new(Shared {
        info,
        plan: validated,
        outputs,
        modules,
        opts,
        bus: shared.bus.clone(),
        sub_steps: shared.sub_steps.clone(),
    });
    let summary = Box::pin(Dispatcher::new(sub, write_sets, shared.bus.clone(), true).run()).await;
    match summary.status {
        RunStatus::Succeeded => order
            .last()
            .and_then(|&i| summary.steps[i].output.clone())
            .ok_or_else(|| invalid("no sub-step ran".into())),
        RunStatus::Cancelled => Err(ModuleError::Cancelled),
        RunStatus::Failed => Err(order
            .iter()
            .find_map(|&i| summary.steps[i].error.as_deref().cloned())
            .unwrap_or_else(|| invalid("a sub-step failed".into()))),
    }
}

/// Polls a step's future once; a panic is the step's failure.
fn poll_step<F: Future<Output = Done> + ?Sized>(
    step: Pin<&mut F>,
    cx: &mut Context<'_>,
    idx: usize,
) -> Option<Done> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| step.poll(cx))) {
        Ok(Poll::Ready(done)) => Some(done),
        Ok(Poll::Pending) => None,
        Err(payload) => Some(panicked(idx, &*payload)),
    }
}

/// The result of a step whose module panicked.
fn panicked(idx: usize, payload: &(dyn std::any::Any + Send)) -> Done {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let error = ModuleError::fatal(
        ErrorCategory::Unknown,
        format!("the module panicked: {what} (this is a bug in the module)"),
    );
    Done {
        idx,
        attempts: 1,
        duration: Duration::ZERO,
        failure: Some(Box::new(StepFailure {
            error,
            bypassed: None,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::{Outputs, SlowPolls, StepOutcome};
    use nuvira_api::{ExecutionPlan, PlanStep, StepOutput};
    use std::sync::Arc;

    /// An empty output is a flag, not a cell: it still reads as `Empty`, a step with no
    /// output yet reads as none, and the first output set stays, as with a `OnceLock`.
    #[test]
    fn empty_outputs_read_back_and_the_first_output_set_stays() {
        let plan = ExecutionPlan {
            goal: "g".into(),
            outputs: Some(vec!["a".into(), "b".into(), "c".into()]),
            steps: vec![
                PlanStep::new("a", "m"),
                PlanStep::new("b", "m"),
                PlanStep::new("c", "m"),
            ],
            ..Default::default()
        };
        let outputs = Outputs::new(Arc::new(crate::validate::validate(&plan, None).unwrap()));
        let value = || StepOutput::Value(serde_json::json!(1));
        assert!(outputs.get(0).is_none());
        outputs.set(0, StepOutput::Empty);
        outputs.set(0, value());
        assert!(matches!(outputs.get(0).as_deref(), Some(StepOutput::Empty)));
        assert!(outputs.get_non_empty(0).is_none());
        outputs.set(1, value());
        outputs.set(1, StepOutput::Empty);
        assert!(matches!(
            outputs.get(1).as_deref(),
            Some(StepOutput::Value(_))
        ));
        assert!(outputs.get_non_empty(1).is_some());
        assert!(outputs.get(2).is_none());
    }

    /// One slow first poll (a preempted thread) keeps a module's steps in the dispatcher; a
    /// few slow ones, or slow ones often enough, give them tasks.
    #[test]
    fn a_module_gets_tasks_after_a_few_slow_first_polls_not_after_one() {
        let polls = |quick, slow| SlowPolls { quick, slow }.too_slow();
        assert!(!polls(0, 1));
        assert!(!polls(0, 2));
        assert!(polls(0, 3));
        assert!(!polls(1000, 3));
        assert!(polls(1000, 63));
    }

    /// A 10,000-step summary holds one outcome per step: the rare parts (error, skip reason)
    /// stay boxed so the common outcome is small (it was 144 bytes; issue 17's memory target).
    #[test]
    fn a_step_outcome_stays_small() {
        assert!(
            std::mem::size_of::<StepOutcome>() <= 72,
            "{}",
            std::mem::size_of::<StepOutcome>()
        );
    }
}
