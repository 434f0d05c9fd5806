//! The event bus: stamps events, keeps a history, and fans them out to independent consumers.
//!
//! Emitting never blocks the run: each consumer reads from its own unbounded channel, so a slow
//! JSONL writer delays nothing but itself. Events are shared as `Arc<Event>`, so ten consumers
//! cost ten pointer copies, not ten deep copies. Sequence numbers are assigned under the same
//! lock that appends to the history and sends to consumers, so every consumer sees the same
//! order without gaps.

use crate::validate::ValidatedPlan;
#[cfg(feature = "tracing")]
use nuvira_api::RunStatus;
use nuvira_api::{Event, EventKind, EventSink, StepOutput};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

/// The bus of one run. Cheap to clone (all clones are the same bus).
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<Inner>,
}

struct Inner {
    run_id: Arc<str>,
    /// Whether anyone sees events (history kept or a consumer subscribed): when not, events
    /// are not even built.
    observed: AtomicBool,
    state: Mutex<State>,
}

struct State {
    seq: u64,
    /// One past the newest event that started the run or ended a step or the run (see
    /// [`EventBus::settled_len`]).
    settled: u64,
    history: Option<History>,
    consumers: Vec<UnboundedSender<Arc<Event>>>,
}

/// The kept history: one [`Entry`] per event, in order (an entry's position is its sequence
/// number), and beside the entries what they cannot hold.
///
/// While nobody subscribes, the three events every step emits (ready, started, succeeded
/// without output) are kept in an entry alone: 16 bytes of plain data, no allocation and no
/// reference count, so keeping them costs a copy and freeing a history of any length costs
/// one deallocation (no walk over the entries). The run id and sequence number are implied
/// (the bus's run, the entry's position); the step's id and module name are those of step
/// `index` of `plans[plan]`; the stamp is kept once for a run of entries that share it (a
/// millisecond holds hundreds of steps). [`EventBus::history`] rebuilds whole events.
#[derive(Default)]
struct History {
    entries: Vec<Entry>,
    /// (position in `entries`, stamp): the stamp of the entries from there to the next.
    stamps: Vec<(u64, u64)>,
    /// Events consumers received, shared with them ([`What::Shared`] entries).
    shared: Vec<Arc<Event>>,
    /// Other events nobody received ([`What::Kept`] entries).
    kept: Vec<Kept>,
    /// Plans whose steps entries name by number.
    plans: Vec<Arc<ValidatedPlan>>,
}

/// One event of the history; see [`History`].
#[derive(Clone, Copy)]
struct Entry {
    /// [`What::Started`]: the attempt; [`What::Succeeded`]: the duration in milliseconds;
    /// [`What::Shared`], [`What::Kept`]: the position in `shared` or `kept`.
    data: u64,
    /// The step's number in `plans[plan]` (lifecycle entries and [`Kept::Output`]).
    index: u32,
    plan: u16,
    what: What,
}

/// What an [`Entry`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum What {
    /// `step:ready` of a planned step.
    Ready,
    /// `step:started` of a planned step.
    Started,
    /// `step:succeeded` of a planned step that produced nothing.
    Succeeded,
    /// Any event consumers received, in `shared`.
    Shared,
    /// Any other event nobody received, in `kept` (a planned step's `step:succeeded` with
    /// an output among them).
    Kept,
}

/// What an [`Entry`] cannot hold.
enum Kept {
    /// The output and duration of a planned step's `step:succeeded` (the entry names the
    /// step).
    Output {
        duration_ms: u64,
        output: Arc<StepOutput>,
    },
    /// A lifecycle event published by step id (no allocation).
    Step { step: Arc<str>, what: Lifecycle },
    /// Any other event.
    Other(Box<(Option<Arc<str>>, EventKind)>),
}

/// The events every step emits on its way: `step:ready`, `step:started` and `step:succeeded`.
///
/// [`EventBus::publish_step`] and [`EventBus::publish_steps`] take these: while nobody
/// subscribes the history keeps them without an allocation. An empty output is `None`, so
/// noting one touches no reference count.
#[derive(Debug, Clone)]
pub enum Lifecycle {
    /// `step:ready`.
    Ready,
    /// `step:started`.
    Started {
        /// The module running the step.
        module: Arc<str>,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// `step:succeeded`.
    Succeeded {
        /// How long the step ran.
        duration_ms: u64,
        /// What it produced; `None` for [`StepOutput::Empty`].
        output: Option<Arc<StepOutput>>,
    },
}

impl Lifecycle {
    fn into_kind(self) -> EventKind {
        match self {
            Self::Ready => EventKind::StepReady,
            Self::Started { module, attempt } => EventKind::StepStarted { module, attempt },
            Self::Succeeded {
                duration_ms,
                output,
            } => EventKind::StepSucceeded {
                duration_ms,
                output: output.unwrap_or_else(|| EMPTY_OUTPUT.clone()),
            },
        }
    }
}

/// A lifecycle event the scheduler notes for a step of its plan, by number: unlike
/// [`Lifecycle`], `Started` carries no module name (the history takes it from the plan, a
/// subscriber's event gets the scheduler's shared one), so noting it costs no reference count.
#[derive(Debug)]
pub(crate) enum Planned {
    /// `step:ready`.
    Ready,
    /// `step:started`.
    Started { attempt: u32 },
    /// `step:succeeded`; `output`: `None` for [`StepOutput::Empty`].
    Succeeded {
        duration_ms: u64,
        output: Option<Arc<StepOutput>>,
    },
}

impl Planned {
    fn into_kind(self, module: impl FnOnce() -> Arc<str>) -> EventKind {
        match self {
            Self::Ready => EventKind::StepReady,
            Self::Started { attempt } => EventKind::StepStarted {
                module: module(),
                attempt,
            },
            Self::Succeeded {
                duration_ms,
                output,
            } => EventKind::StepSucceeded {
                duration_ms,
                output: output.unwrap_or_else(|| EMPTY_OUTPUT.clone()),
            },
        }
    }
}

/// The output of steps that produced nothing, shared.
pub(crate) static EMPTY_OUTPUT: std::sync::LazyLock<Arc<StepOutput>> =
    std::sync::LazyLock::new(|| Arc::new(StepOutput::Empty));

impl Kept {
    fn new(step_id: Option<Arc<str>>, kind: EventKind) -> Self {
        let (step, what) = match (step_id, kind) {
            (Some(step), EventKind::StepReady) => (step, Lifecycle::Ready),
            (Some(step), EventKind::StepStarted { module, attempt }) => {
                (step, Lifecycle::Started { module, attempt })
            }
            (
                Some(step),
                EventKind::StepSucceeded {
                    duration_ms,
                    output,
                },
            ) => (
                step,
                Lifecycle::Succeeded {
                    duration_ms,
                    output: Some(output),
                },
            ),
            (step_id, kind) => return Self::Other(Box::new((step_id, kind))),
        };
        Self::Step { step, what }
    }
}

impl History {
    /// Stamps the entries appended from now on with `ts`.
    fn stamp(&mut self, ts: u64) {
        if self.stamps.last().is_none_or(|&(_, last)| last != ts) {
            self.stamps.push((self.entries.len() as u64, ts));
        }
    }

    /// Appends an entry for an event nobody received.
    fn keep(&mut self, ts: u64, kept: Kept) {
        let data = self.kept.len() as u64;
        self.kept.push(kept);
        self.aside(ts, data, What::Kept);
    }

    /// Appends an entry for an event consumers received.
    fn share(&mut self, event: Arc<Event>) {
        let (ts, data) = (event.ts, self.shared.len() as u64);
        self.shared.push(event);
        self.aside(ts, data, What::Shared);
    }

    /// Appends the entry of an event kept aside (`data`: its place in the side list `what`).
    fn aside(&mut self, ts: u64, data: u64, what: What) {
        self.stamp(ts);
        self.entries.push(Entry {
            data,
            index: 0,
            plan: 0,
            what,
        });
    }

    /// The number entries give `plan`, added if new; `None` past the numbers an entry holds.
    fn plan_no(&mut self, plan: &Arc<ValidatedPlan>) -> Option<u16> {
        let no = match self.plans.iter().rposition(|p| Arc::ptr_eq(p, plan)) {
            Some(no) => no,
            // Past the numbers an entry holds, a plan is not kept (its entries are kept by id).
            None if self.plans.len() > usize::from(u16::MAX) => return None,
            None => {
                self.plans.push(plan.clone());
                self.plans.len() - 1
            }
        };
        u16::try_from(no).ok()
    }

    /// Appends the scheduler's burst for steps of `plan`, nobody subscribed (see
    /// [`EventBus::publish_plan_steps`]).
    fn push_plan_steps(
        &mut self,
        ts: u64,
        plan: &Arc<ValidatedPlan>,
        events: &mut Vec<(u32, Planned)>,
        module: impl FnMut(u32) -> Arc<str>,
    ) {
        let Some(plan_no) = self.plan_no(plan) else {
            return self.keep_by_id(ts, plan, events, module);
        };
        self.stamp(ts);
        for (index, what) in events.drain(..) {
            self.push_planned(plan_no, index, what);
        }
    }

    /// [`push_plan_steps`](Self::push_plan_steps) past the plans an entry can number: the
    /// events are kept by step id.
    #[inline(never)]
    fn keep_by_id(
        &mut self,
        ts: u64,
        plan: &Arc<ValidatedPlan>,
        events: &mut Vec<(u32, Planned)>,
        mut module: impl FnMut(u32) -> Arc<str>,
    ) {
        for (index, what) in events.drain(..) {
            let step = plan.ids[index as usize].clone();
            let what = match what {
                Planned::Ready => Lifecycle::Ready,
                Planned::Started { attempt } => Lifecycle::Started {
                    module: module(index),
                    attempt,
                },
                Planned::Succeeded {
                    duration_ms,
                    output,
                } => Lifecycle::Succeeded {
                    duration_ms,
                    output,
                },
            };
            self.keep(ts, Kept::Step { step, what });
        }
    }

    /// Appends a lifecycle event of step `index` of `plans[plan]`, stamped as the last
    /// [`stamp`](Self::stamp) said.
    fn push_planned(&mut self, plan: u16, index: u32, what: Planned) {
        let (what, data) = match what {
            Planned::Ready => (What::Ready, 0),
            Planned::Started { attempt } => (What::Started, u64::from(attempt)),
            Planned::Succeeded {
                duration_ms,
                output: None,
            } => (What::Succeeded, duration_ms),
            Planned::Succeeded {
                duration_ms,
                output: Some(output),
            } => {
                let data = self.kept.len() as u64;
                self.kept.push(Kept::Output {
                    duration_ms,
                    output,
                });
                (What::Kept, data)
            }
        };
        self.entries.push(Entry {
            data,
            index,
            plan,
            what,
        });
    }

    /// The whole event at position `seq` of the history of run `run_id`; `names` interns the
    /// module names of rebuilt `step:started` events (a run uses a few).
    fn event(
        &self,
        seq: u64,
        ts: u64,
        e: &Entry,
        run_id: &Arc<str>,
        names: &mut Vec<Arc<str>>,
    ) -> Arc<Event> {
        let at = |i: u64| usize::try_from(i).unwrap_or(usize::MAX);
        let (plan, index) = (usize::from(e.plan), e.index as usize);
        let id = || Some(self.plans[plan].ids[index].clone());
        let (step_id, kind) = match e.what {
            What::Shared => return self.shared[at(e.data)].clone(),
            What::Ready => (id(), EventKind::StepReady),
            What::Started => {
                let name = self.plans[plan].plan.steps[index].module.as_str();
                let module = match names.iter().find(|n| &***n == name) {
                    Some(n) => n.clone(),
                    None => {
                        let n: Arc<str> = Arc::from(name);
                        names.push(n.clone());
                        n
                    }
                };
                let attempt = u32::try_from(e.data).unwrap_or(u32::MAX);
                (id(), EventKind::StepStarted { module, attempt })
            }
            What::Succeeded => (
                id(),
                EventKind::StepSucceeded {
                    duration_ms: e.data,
                    output: EMPTY_OUTPUT.clone(),
                },
            ),
            What::Kept => match &self.kept[at(e.data)] {
                Kept::Output {
                    duration_ms,
                    output,
                } => (
                    id(),
                    EventKind::StepSucceeded {
                        duration_ms: *duration_ms,
                        output: output.clone(),
                    },
                ),
                Kept::Step { step, what } => (Some(step.clone()), what.clone().into_kind()),
                Kept::Other(o) => (o.0.clone(), o.1.clone()),
            },
        };
        Arc::new(Event {
            seq,
            ts,
            run_id: run_id.clone(),
            step_id,
            kind,
        })
    }
}

/// [`EventBus::publish_plan_steps`] with consumers: each event is built whole, sent, and
/// shared with the history (out of line, so the path without consumers stays small).
#[inline(never)]
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of the locked state and the burst, borrowed apart"
)]
fn send_plan_steps(
    seq: &mut u64,
    consumers: &mut Vec<UnboundedSender<Arc<Event>>>,
    history: &mut Option<History>,
    run_id: &Arc<str>,
    ts: u64,
    plan: &Arc<ValidatedPlan>,
    events: &mut Vec<(u32, Planned)>,
    mut module: impl FnMut(u32) -> Arc<str>,
) {
    for (index, what) in events.drain(..) {
        let event = Arc::new(Event {
            seq: *seq,
            ts,
            run_id: run_id.clone(),
            step_id: Some(plan.ids[index as usize].clone()),
            kind: what.into_kind(|| module(index)),
        });
        consumers.retain(|c| c.send(event.clone()).is_ok());
        if let Some(h) = history.as_mut() {
            h.share(event);
        }
        *seq += 1;
    }
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("run_id", &self.inner.run_id)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch, as events are stamped (the contract's
/// [`nuvira_api::now_ms`], re-exported here for callers of the bus).
pub use nuvira_api::now_ms;

impl EventBus {
    /// A bus for a run that keeps its history in memory.
    pub fn new(run_id: impl Into<Arc<str>>) -> Self {
        Self::with_history(run_id, true)
    }

    /// A bus that keeps (or does not keep) the history. Without history, only subscribers see
    /// events.
    pub fn with_history(run_id: impl Into<Arc<str>>, keep_history: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                run_id: run_id.into(),
                observed: AtomicBool::new(keep_history),
                state: Mutex::new(State {
                    seq: 0,
                    settled: 0,
                    history: keep_history.then(History::default),
                    consumers: Vec::new(),
                }),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A consumer cannot panic while holding the lock (we only push and send under it), so
        // a poisoned lock still holds consistent data.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The run id stamped on every event.
    pub fn run_id(&self) -> &Arc<str> {
        &self.inner.run_id
    }

    /// A new consumer: receives every event emitted from now on, in order. The channel closes
    /// when the bus is [closed](Self::close) or dropped.
    pub fn subscribe(&self) -> UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = unbounded_channel();
        self.state().consumers.push(tx);
        self.inner.observed.store(true, Ordering::Release);
        rx
    }

    /// Whether anything sees the events (a history is kept or a consumer subscribed).
    pub fn is_observed(&self) -> bool {
        self.inner.observed.load(Ordering::Acquire)
    }

    /// Emits an event for a step (or the run, with `None`) and returns its sequence number,
    /// or `None` when nothing observes the bus (then the event is dropped unnumbered).
    pub fn publish(&self, step_id: Option<Arc<str>>, kind: EventKind) -> Option<u64> {
        self.publish_with(|| (step_id, kind))
    }

    /// Like [`publish`](Self::publish), but builds the event only when something observes the
    /// bus, so an unobserved run pays nothing for its events.
    pub fn publish_with(
        &self,
        make: impl FnOnce() -> (Option<Arc<str>>, EventKind),
    ) -> Option<u64> {
        if !self.is_observed() {
            return None;
        }
        self.publish_at(now_ms(), make)
    }

    /// Like [`publish_with`](Self::publish_with), stamped with `ts` (milliseconds since the
    /// Unix epoch, see [`now_ms`]) that the caller read once for a burst of events: the
    /// scheduler stamps everything it emits while handling one finished step with one clock
    /// read.
    pub fn publish_at(
        &self,
        ts: u64,
        make: impl FnOnce() -> (Option<Arc<str>>, EventKind),
    ) -> Option<u64> {
        if !self.is_observed() {
            return None;
        }
        let (step_id, kind) = make();
        let mut st = self.state();
        let seq = st.seq;
        st.seq += 1;
        if settles(&kind) {
            st.settled = seq + 1;
        }
        let State {
            consumers, history, ..
        } = &mut *st;
        if consumers.is_empty() {
            if let Some(h) = history.as_mut() {
                h.keep(ts, Kept::new(step_id, kind));
            }
        } else {
            let event = Arc::new(Event {
                seq,
                ts,
                run_id: self.inner.run_id.clone(),
                step_id,
                kind,
            });
            consumers.retain(|c| c.send(event.clone()).is_ok());
            if let Some(h) = history.as_mut() {
                h.share(event);
            }
        }
        Some(seq)
    }

    /// Emits a step's lifecycle event (see [`publish_at`](Self::publish_at) for `ts`). The
    /// same as publishing the matching [`EventKind`], only cheaper: the scheduler emits three
    /// of these per step, and while nobody subscribes the history keeps them in a few words.
    pub fn publish_step(
        &self,
        ts: u64,
        step: &Arc<str>,
        what: impl FnOnce() -> Lifecycle,
    ) -> Option<u64> {
        if !self.is_observed() {
            return None;
        }
        let what = what();
        let mut st = self.state();
        let seq = st.seq;
        st.seq += 1;
        if matches!(what, Lifecycle::Succeeded { .. }) {
            st.settled = seq + 1;
        }
        let State {
            consumers, history, ..
        } = &mut *st;
        if consumers.is_empty() {
            if let Some(h) = history.as_mut() {
                h.keep(
                    ts,
                    Kept::Step {
                        step: step.clone(),
                        what,
                    },
                );
            }
        } else {
            let event = Arc::new(Event {
                seq,
                ts,
                run_id: self.inner.run_id.clone(),
                step_id: Some(step.clone()),
                kind: what.into_kind(),
            });
            consumers.retain(|c| c.send(event.clone()).is_ok());
            if let Some(h) = history.as_mut() {
                h.share(event);
            }
        }
        Some(seq)
    }

    /// Emits a burst of lifecycle events in order, all stamped `ts`, under one lock (see
    /// [`publish_step`](Self::publish_step)); `events` is left empty. The scheduler collects
    /// what it emits while handling one wake-up and publishes it here before any step it
    /// starts can run, so the order consumers see is the order of what happened.
    pub fn publish_steps(&self, ts: u64, events: &mut Vec<(Arc<str>, Lifecycle)>) {
        if !self.is_observed() {
            events.clear();
            return;
        }
        let mut st = self.state();
        let State {
            seq,
            settled,
            consumers,
            history,
        } = &mut *st;
        for (step, what) in events.drain(..) {
            if matches!(what, Lifecycle::Succeeded { .. }) {
                *settled = *seq + 1;
            }
            if consumers.is_empty() {
                if let Some(h) = history.as_mut() {
                    h.keep(ts, Kept::Step { step, what });
                }
            } else {
                let event = Arc::new(Event {
                    seq: *seq,
                    ts,
                    run_id: self.inner.run_id.clone(),
                    step_id: Some(step),
                    kind: what.into_kind(),
                });
                consumers.retain(|c| c.send(event.clone()).is_ok());
                if let Some(h) = history.as_mut() {
                    h.share(event);
                }
            }
            *seq += 1;
        }
    }

    /// The scheduler's burst of lifecycle events for steps of `plan`, by step number (see
    /// [`publish_steps`](Self::publish_steps)); `events` is left empty. `module` names the
    /// module of a step whose `step:started` a consumer receives (the history takes the name
    /// from the plan).
    pub(crate) fn publish_plan_steps(
        &self,
        ts: u64,
        plan: &Arc<ValidatedPlan>,
        events: &mut Vec<(u32, Planned)>,
        module: impl FnMut(u32) -> Arc<str>,
    ) {
        if !self.is_observed() {
            events.clear();
            return;
        }
        let mut st = self.state();
        let State {
            seq,
            settled,
            consumers,
            history,
        } = &mut *st;
        if let Some(last) = events
            .iter()
            .rposition(|(_, what)| matches!(what, Planned::Succeeded { .. }))
        {
            *settled = *seq + last as u64 + 1;
        }
        if consumers.is_empty() {
            *seq += events.len() as u64;
            match history.as_mut() {
                Some(h) => h.push_plan_steps(ts, plan, events, module),
                None => events.clear(),
            }
        } else {
            let run_id = &self.inner.run_id;
            send_plan_steps(seq, consumers, history, run_id, ts, plan, events, module);
        }
    }

    /// Makes room in the history for `additional` more events, so a run that knows how many
    /// it will emit (the scheduler: about three per step) does not grow the history by copying.
    pub fn reserve(&self, additional: usize) {
        if let Some(h) = self.state().history.as_mut() {
            h.entries.reserve(additional);
        }
    }

    /// The events emitted so far (empty without history).
    pub fn history(&self) -> Vec<Arc<Event>> {
        let st = self.state();
        let Some(h) = st.history.as_ref() else {
            return Vec::new();
        };
        let mut names = Vec::new();
        let mut stamps = h.stamps.iter().peekable();
        let mut ts = 0;
        (0u64..)
            .zip(&h.entries)
            .map(|(seq, e)| {
                while let Some(&&(from, stamp)) = stamps.peek()
                    && from <= seq
                {
                    ts = stamp;
                    stamps.next();
                }
                h.event(seq, ts, e, &self.inner.run_id, &mut names)
            })
            .collect()
    }

    /// Number of events emitted (and numbered) so far.
    pub fn len(&self) -> u64 {
        self.state().seq
    }

    /// One past the newest event emitted so far that started the run or ended a step or the
    /// run (`run:started`, a step's `step:succeeded`, `step:failed` or `step:skipped`,
    /// `run:completed`, `run:cancelled`); 0 when there is none yet. A consumer that must have
    /// recorded every step that ended before some moment (the run history, before a step that
    /// may change files runs) waits for this many events, not for [`len`](Self::len): what
    /// was emitted since, such as the starts of the steps starting at that moment, need not
    /// hold it up.
    pub fn settled_len(&self) -> u64 {
        self.state().settled
    }

    /// Whether nothing was emitted yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every consumer channel (consumers finish after draining what they have).
    pub fn close(&self) {
        let mut st = self.state();
        st.consumers.clear();
        if st.history.is_none() {
            self.inner.observed.store(false, Ordering::Release);
        }
    }
}

impl EventSink for EventBus {
    fn emit(&self, step_id: Option<&str>, kind: EventKind) {
        self.publish(step_id.map(Arc::from), kind);
    }
}

/// Writes every event of a bus as one JSON line to a file, coalescing writes: it flushes
/// when its channel is momentarily empty, so a burst of events costs one write.
///
/// Such a file is read back with `nuvira_report::EventReader` (or `read_jsonl_file`), the one
/// JSONL event reader: it names the line of a malformed event and skips, with a warning, event
/// types it does not know.
#[derive(Debug)]
pub struct JsonlStore {
    handle: JoinHandle<std::io::Result<u64>>,
    path: PathBuf,
}

impl JsonlStore {
    /// Creates (truncates) the file and starts writing events to it, on a thread of tokio's
    /// blocking pool (file writes never hold up the runtime's workers).
    ///
    /// # Errors
    /// When the file cannot be created.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::task::spawn_blocking`.
    pub fn spawn(bus: &EventBus, path: &Path) -> std::io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::File::create(path)?;
        Ok(Self::spawn_with(bus, path, Sink::File(file), false))
    }

    /// Starts writing events to standard output (`nuvira run --events -`), the same lines as
    /// [`spawn`](Self::spawn) writes to a file. A closed pipe ends the stream without an error.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::task::spawn_blocking`.
    pub fn spawn_stdout(bus: &EventBus) -> Self {
        Self::spawn_with(bus, Path::new("<stdout>"), Sink::Stdout, false)
    }

    /// Like [`spawn`](Self::spawn), into a file the caller opened (a run folder's
    /// `events.jsonl`), and with `sync_at_step_ends` also durable at step boundaries: after a
    /// burst that holds a step's end (`step:succeeded`, `step:failed`, `step:skipped`) or the
    /// run's, the file is `fsync`ed before the next event is read, so a crash loses no finished
    /// step's record.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::task::spawn_blocking`.
    pub fn spawn_file(
        bus: &EventBus,
        file: std::fs::File,
        path: &Path,
        sync_at_step_ends: bool,
    ) -> Self {
        Self::spawn_with(bus, path, Sink::File(file), sync_at_step_ends)
    }

    fn spawn_with(bus: &EventBus, path: &Path, sink: Sink, sync_at_step_ends: bool) -> Self {
        let mut rx = bus.subscribe();
        let handle = tokio::task::spawn_blocking(move || {
            let mut written = 0u64;
            let result = match sink {
                Sink::File(file) => {
                    let mut out = std::io::BufWriter::new(file);
                    drain(&mut rx, &mut out, &mut written, |out, boundary| {
                        if sync_at_step_ends && boundary {
                            out.get_ref().sync_data()
                        } else {
                            Ok(())
                        }
                    })
                    .and_then(|()| out.flush())
                    .and_then(|()| out.get_ref().sync_data())
                }
                Sink::Stdout => {
                    let mut out = std::io::BufWriter::new(std::io::stdout());
                    match drain(&mut rx, &mut out, &mut written, |_, _| Ok(()))
                        .and_then(|()| out.flush())
                    {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                        other => other,
                    }
                }
            };
            result.map(|()| written)
        });
        Self {
            handle,
            path: path.to_owned(),
        }
    }

    /// Waits until every event has been written (call after [`EventBus::close`]); returns the
    /// number of events written.
    ///
    /// # Errors
    /// When writing failed.
    pub async fn finish(self) -> std::io::Result<u64> {
        match self.handle.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(format!(
                "the event writer for {} stopped: {e}",
                self.path.display()
            ))),
        }
    }
}

/// Where a [`JsonlStore`] writes.
enum Sink {
    File(std::fs::File),
    Stdout,
}

/// Writes every event of `rx` until the bus closes, flushing when the channel is momentarily
/// empty; `after_burst` runs after each flush, told whether the burst ended a step or the run.
fn drain<W: Write>(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Arc<Event>>,
    out: &mut W,
    written: &mut u64,
    mut after_burst: impl FnMut(&mut W, bool) -> std::io::Result<()>,
) -> std::io::Result<()> {
    while let Some(ev) = rx.blocking_recv() {
        let mut boundary = is_boundary(&ev);
        write_line(out, &ev)?;
        *written += 1;
        while let Ok(ev) = rx.try_recv() {
            boundary |= is_boundary(&ev);
            write_line(out, &ev)?;
            *written += 1;
        }
        out.flush()?;
        after_burst(out, boundary)?;
    }
    Ok(())
}

/// The version of the JSONL event format, written as `schema_version` in every line (the
/// first key). Readers ignore the key, so files written before it existed read the same; it
/// changes only when an existing field changes meaning (new event types and fields do not).
pub const EVENTS_SCHEMA_VERSION: u32 = 1;

/// Whether an event kind moves [`EventBus::settled_len`]: it starts the run, or ends a step or
/// the run.
fn settles(kind: &EventKind) -> bool {
    kind.step_status().is_some()
        || matches!(
            kind,
            EventKind::RunStarted { .. }
                | EventKind::RunCompleted { .. }
                | EventKind::RunCancelled { .. }
        )
}

/// Whether an event ends a step or the run (where a durable event file is synced).
pub fn is_boundary(ev: &Event) -> bool {
    ev.kind.step_status().is_some()
        || matches!(
            ev.kind,
            EventKind::RunCompleted { .. } | EventKind::RunCancelled { .. }
        )
}

/// Writes `ev` as one line of a JSONL event file, exactly as [`JsonlStore`] does (with
/// `schema_version` as its first key), for a writer of its own (the run history's).
///
/// # Errors
/// When `out` fails.
pub fn write_line(out: &mut impl Write, ev: &Event) -> std::io::Result<()> {
    let json = serde_json::to_vec(ev).map_err(std::io::Error::other)?;
    // An event serializes as a non-empty object: the version goes in as its first key.
    match json.strip_prefix(b"{") {
        Some(rest) => {
            write!(out, "{{\"schema_version\":{EVENTS_SCHEMA_VERSION},")?;
            out.write_all(rest)?;
        }
        None => out.write_all(&json)?,
    }
    out.write_all(b"\n")
}

/// Logs every event of a bus through `tracing` (failures at warn, the rest of the run and step
/// lifecycle at info, module events at debug) until the bus closes.
///
/// # Panics
/// Outside a tokio runtime, like `tokio::spawn`.
#[cfg(feature = "tracing")]
pub fn spawn_tracing_consumer(bus: &EventBus) -> JoinHandle<()> {
    let mut rx = bus.subscribe();
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            log_event(&ev);
        }
    })
}

/// One event as one `tracing` record (target `nuvira::events`): what went wrong at `warn` with
/// its message, the rest of the run and step lifecycle at `info`, module detail at `debug`.
#[cfg(feature = "tracing")]
fn log_event(ev: &Event) {
    const T: &str = "nuvira::events";
    let name = ev.kind.name();
    let seq = ev.seq;
    let step = ev.step_id.as_deref().unwrap_or("-");
    match &ev.kind {
        EventKind::StepFailed {
            category,
            message,
            recoverable,
            ..
        } => tracing::warn!(
            target: T, seq, step, category = category.as_str(), recoverable = *recoverable,
            "{name}: {}", message.lines().next().unwrap_or_default()
        ),
        EventKind::StepSkipped { reason, .. } => {
            tracing::info!(target: T, seq, step, "{name}: {reason}");
        }
        EventKind::StepRetrying {
            attempt,
            reason,
            delay_ms,
        } => tracing::info!(
            target: T, seq, step, attempt = *attempt, delay_ms = *delay_ms,
            "{name}: {}", reason.lines().next().unwrap_or_default()
        ),
        EventKind::RunCancelled { reason } => {
            tracing::warn!(target: T, seq, "{name}: {reason}");
        }
        EventKind::RunCompleted {
            status,
            succeeded,
            failed,
            skipped,
            duration_ms,
        } => {
            let status = match status {
                RunStatus::Succeeded => "succeeded",
                RunStatus::Failed => "failed",
                RunStatus::Cancelled => "cancelled",
            };
            if status == "succeeded" {
                tracing::info!(
                    target: T, seq, succeeded = *succeeded, duration_ms = *duration_ms,
                    "{name}: {status}"
                );
            } else {
                tracing::warn!(
                    target: T, seq, succeeded = *succeeded, failed = *failed,
                    skipped = *skipped, duration_ms = *duration_ms, "{name}: {status}"
                );
            }
        }
        EventKind::EditRolledBack { paths, reason } => tracing::warn!(
            target: T, seq, step, files = paths.len(), "{name}: {reason}"
        ),
        EventKind::RecoverBudgetExhausted {
            attempts,
            final_error,
        } => tracing::warn!(
            target: T, seq, step, attempts = *attempts,
            "{name}: {}", final_error.lines().next().unwrap_or_default()
        ),
        _ if name.starts_with("run:") || name.starts_with("step:") => {
            tracing::info!(target: T, seq, step, "{name}");
        }
        _ => tracing::debug!(target: T, seq, step, "{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `settled_len` follows the run's start and every step's or the run's end, however they
    /// are published, and not the events in between.
    #[test]
    fn settled_len_counts_up_to_the_newest_start_of_the_run_or_end() {
        for subscribed in [false, true] {
            let bus = EventBus::new("r");
            let _rx = subscribed.then(|| bus.subscribe());
            assert_eq!(bus.settled_len(), 0);
            let a: Arc<str> = Arc::from("a");
            bus.publish_step(1, &a, || Lifecycle::Ready);
            assert_eq!(bus.settled_len(), 0, "a step:ready settles nothing");
            bus.publish(None, EventKind::RunCancelled { reason: "x".into() });
            assert_eq!(bus.settled_len(), 2);
            let started = || Lifecycle::Started {
                module: Arc::from("m"),
                attempt: 1,
            };
            bus.publish_step(1, &a, started);
            assert_eq!((bus.settled_len(), bus.len()), (2, 3));
            bus.publish_step(1, &a, || Lifecycle::Succeeded {
                duration_ms: 1,
                output: None,
            });
            assert_eq!(bus.settled_len(), 4);
            let mut burst = vec![
                (a.clone(), started()),
                (
                    a.clone(),
                    Lifecycle::Succeeded {
                        duration_ms: 1,
                        output: None,
                    },
                ),
                (a.clone(), started()),
            ];
            bus.publish_steps(1, &mut burst);
            assert_eq!(
                (bus.settled_len(), bus.len()),
                (6, 7),
                "subscribed: {subscribed}"
            );
            bus.publish(
                Some(a.clone()),
                EventKind::StepFailed {
                    category: nuvira_api::ErrorCategory::Unknown,
                    message: "e".into(),
                    recoverable: false,
                    evidence: Vec::new(),
                    duration_ms: 1,
                    output: None,
                },
            );
            assert_eq!(bus.settled_len(), 8);
        }
    }

    /// A `tracing` writer into a shared buffer.
    #[cfg(feature = "tracing")]
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    #[cfg(feature = "tracing")]
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[cfg(feature = "tracing")]
    #[tokio::test(flavor = "current_thread")]
    async fn the_tracing_consumer_logs_failures_as_warnings_with_their_message() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        let bus = EventBus::new("r");
        let consumer = spawn_tracing_consumer(&bus);
        bus.emit(Some("build"), EventKind::StepReady);
        bus.emit(
            Some("build"),
            EventKind::StepFailed {
                category: nuvira_api::ErrorCategory::CompileError,
                message: "src/lib.rs:3: expected `;`\nmore detail".into(),
                recoverable: true,
                evidence: vec![],
                output: None,
                duration_ms: 1,
            },
        );
        bus.emit(
            Some("ship"),
            EventKind::StepSkipped {
                reason: "dependency `build` failed".into(),
                cause: Some("build".into()),
            },
        );
        bus.emit(
            None,
            EventKind::RunCompleted {
                status: RunStatus::Failed,
                succeeded: 0,
                failed: 1,
                skipped: 1,
                duration_ms: 5,
            },
        );
        bus.close();
        consumer.await.unwrap_or_default();
        let text = String::from_utf8_lossy(&out.0.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle} in:\n{text}"))
                .to_owned()
        };
        let failed = line("step:failed");
        assert!(failed.contains("WARN"), "{failed}");
        assert!(failed.contains("src/lib.rs:3: expected `;`"), "{failed}");
        assert!(!failed.contains("more detail"), "{failed}");
        assert!(failed.contains("compile-error"), "{failed}");
        let skipped = line("step:skipped");
        assert!(
            skipped.contains("INFO") && skipped.contains("dependency `build` failed"),
            "{skipped}"
        );
        let done = line("run:completed");
        assert!(done.contains("WARN") && done.contains("failed"), "{done}");
        assert!(line("step:ready").contains("INFO"));
    }

    #[tokio::test]
    async fn every_consumer_sees_every_event_in_order_and_history_matches() {
        let bus = EventBus::new("r1");
        let mut a = bus.subscribe();
        let mut b = bus.subscribe();
        for i in 0..100 {
            bus.publish(Some(Arc::from(format!("s{i}"))), EventKind::StepReady);
        }
        bus.close();
        let mut seen_a = vec![];
        while let Some(e) = a.recv().await {
            seen_a.push(e.seq);
        }
        let mut seen_b = vec![];
        while let Some(e) = b.recv().await {
            seen_b.push(e.seq);
        }
        let expected: Vec<u64> = (0..100).collect();
        assert_eq!(seen_a, expected);
        assert_eq!(seen_b, expected);
        let hist: Vec<u64> = bus.history().iter().map(|e| e.seq).collect();
        assert_eq!(hist, expected);
        assert_eq!(bus.history()[7].step_id.as_deref(), Some("s7"));
    }

    #[tokio::test]
    async fn history_spans_events_before_and_after_a_consumer_subscribes() {
        let bus = EventBus::new("r");
        bus.emit(Some("before"), EventKind::StepReady);
        let mut rx = bus.subscribe();
        bus.emit(Some("after"), EventKind::StepReady);
        bus.close();
        let hist = bus.history();
        let steps: Vec<_> = hist.iter().map(|e| (e.seq, e.step_id.as_deref())).collect();
        assert_eq!(steps, vec![(0, Some("before")), (1, Some("after"))]);
        // The consumer saw only what came after it subscribed, as the same shared event.
        let got = rx.recv().await.unwrap();
        assert!(Arc::ptr_eq(&got, &hist[1]));
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_consumer_does_not_stop_the_others() {
        let bus = EventBus::with_history("r", false);
        let a = bus.subscribe();
        let mut b = bus.subscribe();
        drop(a);
        bus.emit(None, EventKind::StepReady);
        bus.close();
        assert!(b.recv().await.is_some());
        assert!(b.recv().await.is_none());
        assert!(bus.history().is_empty());
    }

    #[tokio::test]
    async fn jsonl_store_writes_every_event_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/events.jsonl");
        let bus = EventBus::new("r");
        let store = JsonlStore::spawn(&bus, &path).unwrap();
        for _ in 0..50 {
            bus.emit(Some("x"), EventKind::StepReady);
        }
        bus.close();
        assert_eq!(store.finish().await.unwrap(), 50);
        // Reading a stored file back (with line numbers in errors, unknown event types skipped)
        // is nuvira-report's `EventReader`; here each line only has to be one event.
        let back: Vec<Event> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back.len(), 50);
        assert_eq!(back[49].seq, 49);
        assert_eq!(back[0].run_id.as_ref(), "r");
    }
}

#[cfg(test)]
mod compact_history_tests {
    use super::*;

    /// Lifecycle events kept compactly come back from `history` exactly as published, in order,
    /// mixed with other events, however they were published.
    #[test]
    fn compact_history_rebuilds_every_event_exactly() {
        let bus = EventBus::new("r9");
        let a: Arc<str> = Arc::from("a");
        let output = Arc::new(StepOutput::Value(serde_json::json!({"n": 1})));
        bus.publish(None, EventKind::RunCancelled { reason: "x".into() });
        bus.publish_step(10, &a, || Lifecycle::Ready);
        let mut burst = vec![
            (
                a.clone(),
                Lifecycle::Started {
                    module: "m".into(),
                    attempt: 2,
                },
            ),
            (
                a.clone(),
                Lifecycle::Succeeded {
                    duration_ms: 7,
                    output: Some(output.clone()),
                },
            ),
        ];
        bus.publish_steps(11, &mut burst);
        assert!(burst.is_empty());
        bus.publish(Some(a.clone()), EventKind::StepReady);
        let h = bus.history();
        let got: Vec<(u64, Option<&str>, &EventKind)> = h
            .iter()
            .map(|e| (e.seq, e.step_id.as_deref(), &e.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, None, &EventKind::RunCancelled { reason: "x".into() }),
                (1, Some("a"), &EventKind::StepReady),
                (
                    2,
                    Some("a"),
                    &EventKind::StepStarted {
                        module: "m".into(),
                        attempt: 2
                    }
                ),
                (
                    3,
                    Some("a"),
                    &EventKind::StepSucceeded {
                        duration_ms: 7,
                        output: output.clone(),
                    }
                ),
                (4, Some("a"), &EventKind::StepReady),
            ]
        );
        assert_eq!((h[1].ts, h[2].ts, h[3].ts), (10, 11, 11));
        assert!(h.iter().all(|e| &*e.run_id == "r9"));
        assert_eq!(bus.len(), 5);
    }

    /// The scheduler's bursts, kept by step number while nobody subscribes and shared once
    /// someone does: `history` rebuilds every event in order, with the step ids and module
    /// names of the plan, and the events after the subscription are the very ones the late
    /// subscriber received.
    #[tokio::test]
    async fn planned_bursts_rebuild_in_order_around_a_late_subscriber() {
        let plan = nuvira_api::ExecutionPlan {
            goal: "g".into(),
            steps: vec![
                nuvira_api::PlanStep::new("a", "build"),
                nuvira_api::PlanStep::new("b", "test").depends_on(["a"]),
            ],
            ..Default::default()
        };
        let plan = Arc::new(crate::validate::validate(&plan, None).unwrap());
        let output = Arc::new(StepOutput::Value(serde_json::json!({"n": 1})));
        let bus = EventBus::new("r");
        let name = |i: u32| -> Arc<str> { Arc::from(["build", "test"][i as usize]) };
        bus.publish(None, EventKind::RunCancelled { reason: "x".into() });
        let mut burst = vec![(0, Planned::Ready), (0, Planned::Started { attempt: 1 })];
        bus.publish_plan_steps(5, &plan, &mut burst, name);
        assert!(burst.is_empty());
        let mut burst = vec![
            (
                0,
                Planned::Succeeded {
                    duration_ms: 3,
                    output: Some(output.clone()),
                },
            ),
            (1, Planned::Ready),
            (1, Planned::Started { attempt: 2 }),
        ];
        bus.publish_plan_steps(6, &plan, &mut burst, name);
        let mut rx = bus.subscribe();
        let mut burst = vec![(
            1,
            Planned::Succeeded {
                duration_ms: 4,
                output: None,
            },
        )];
        bus.publish_plan_steps(7, &plan, &mut burst, name);
        bus.close();
        let started = |module: &str, attempt| EventKind::StepStarted {
            module: module.into(),
            attempt,
        };
        let succeeded = |duration_ms, output: &Arc<StepOutput>| EventKind::StepSucceeded {
            duration_ms,
            output: output.clone(),
        };
        let h = bus.history();
        let got: Vec<(u64, u64, Option<&str>, &EventKind)> = h
            .iter()
            .map(|e| (e.seq, e.ts, e.step_id.as_deref(), &e.kind))
            .collect();
        let cancelled = EventKind::RunCancelled { reason: "x".into() };
        assert_eq!(
            got,
            vec![
                (0, h[0].ts, None, &cancelled),
                (1, 5, Some("a"), &EventKind::StepReady),
                (2, 5, Some("a"), &started("build", 1)),
                (3, 6, Some("a"), &succeeded(3, &output)),
                (4, 6, Some("b"), &EventKind::StepReady),
                (5, 6, Some("b"), &started("test", 2)),
                (6, 7, Some("b"), &succeeded(4, &EMPTY_OUTPUT)),
            ]
        );
        assert!(h.iter().all(|e| &*e.run_id == "r"));
        let late = rx.recv().await.unwrap();
        assert!(Arc::ptr_eq(&late, &h[6]));
        assert!(rx.recv().await.is_none());
        assert_eq!(bus.len(), 7);
    }

    /// A stamp is kept once for a run of entries that share it: stamps that repeat, go back
    /// and return still come back per event, whichever way the events were kept.
    #[test]
    fn stamps_shared_by_runs_of_entries_come_back_per_event() {
        let bus = EventBus::new("r");
        let a: Arc<str> = Arc::from("a");
        bus.publish_at(7, || (None, EventKind::RunCancelled { reason: "x".into() }));
        bus.publish_step(7, &a, || Lifecycle::Ready);
        bus.publish_step(3, &a, || Lifecycle::Ready);
        bus.publish_at(3, || (Some(a.clone()), EventKind::StepReady));
        let _rx = bus.subscribe();
        bus.publish_step(3, &a, || Lifecycle::Ready);
        bus.publish_step(9, &a, || Lifecycle::Ready);
        bus.publish_at(7, || (None, EventKind::StepReady));
        let ts: Vec<u64> = bus.history().iter().map(|e| e.ts).collect();
        assert_eq!(ts, [7, 7, 3, 3, 3, 9, 7]);
    }

    #[test]
    fn an_unobserved_bus_numbers_nothing_and_empties_the_burst() {
        let bus = EventBus::with_history("r", false);
        let mut burst = vec![(Arc::from("a"), Lifecycle::Ready)];
        bus.publish_steps(1, &mut burst);
        assert!(burst.is_empty());
        assert_eq!(
            bus.publish_step(1, &Arc::from("a"), || Lifecycle::Ready),
            None
        );
        assert!(bus.is_empty());
    }
}

#[cfg(test)]
mod size_tests {
    /// The README promises that the history keeps a lifecycle event in 16 bytes.
    #[test]
    fn a_kept_lifecycle_event_fits_in_16_bytes() {
        assert!(std::mem::size_of::<super::Entry>() <= 16);
    }
}
