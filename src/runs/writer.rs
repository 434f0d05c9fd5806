//! The one writer of a run folder's streamed files: `events.jsonl` and `steps.jsonl` from one
//! subscription to the run's bus, on one blocking thread, synced by group commit on a second.
//!
//! Why it is shaped so (issue 14, "the cost of recording"): the run's steps never wait for a
//! disk sync. They publish events and go on; the writer takes every event that is there, writes
//! both files and flushes them (publishing [`written`](Durable::written)), and when the batch
//! ends a step (or someone waits for a sync, below) asks the sync thread to sync both files up
//! to what it just flushed. The sync thread syncs both files at once (the two syncs in
//! parallel) and publishes [`synced`](Durable::synced); requests that arrive during a sync are
//! covered by the next one, so one sync covers every step that ended meanwhile. The writer
//! never waits for a sync, so whoever waits for *written* waits at most for the batch being
//! written (a writer that also synced would make the next layer's steps wait behind the sync
//! of the last one's ends: +13.9 % on 1 ms writing steps, BENCHMARKS.md). `plan.json` and
//! `run.json` of a new run are written (and synced) by the writer before its first event, so
//! starting a run waits for no disk either.
//!
//! What resume relies on is kept by [`Durable`]: a step that may change files (its write set
//! is not read-only) waits, before its first change, until every event up to the newest step
//! end published before (the bus's [`settled_len`](EventBus::settled_len)), with the
//! operation records they make, has been written to its file (handed to the operating system,
//! so it outlives the process being killed; `plan.json` and `run.json` are synced before any
//! event is written) — see [`wait_settled`](Durable::wait_settled);
//! [`RunHooks`](crate::runs::resume::RunHooks) gives the scheduler that wait through
//! [`StepHooks::before_run`](crate::hooks::StepHooks::before_run), which the scheduler awaits
//! before the module runs, or the module itself right before its first change
//! ([`StepContext::before_changes`](nuvira_api::StepContext::before_changes), as the edit
//! module does), so the wait overlaps the step's own work. So after a kill, resume
//! never finds a step's committed edits without the end records of the steps it built on, nor
//! edits of a run whose folder has no plan, and the file hashes of a step's end record are
//! taken before any later step can change those files. Read-only steps never wait. Waiting
//! for the sync itself ([`wait_synced`](Durable::wait_synced)) would protect the same order
//! against a machine crash, at one disk sync per such step; instead resume copes with that
//! case (docs/runs.md).

use crate::runs::record::{StepsLog, sync_parent, write_files_durably};
use nuvira_api::Event;
use nuvira_engine::EventBus;
use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use tokio::sync::{Notify, watch};

/// How far a run folder is durable, and a way to wait for it (cheap to clone).
#[derive(Debug, Clone)]
pub struct Durable {
    shared: Arc<Shared>,
    bus: EventBus,
}

#[derive(Debug)]
struct Shared {
    /// Every event numbered below this is written to both files (flushed to the operating
    /// system; `u64::MAX` once the writer stopped, so nobody waits for a writer that is gone).
    /// Published by the writer thread.
    written: watch::Sender<u64>,
    /// Every event numbered below this is durable in both files (synced; `u64::MAX` once the
    /// writer stopped or a sync failed). Published by the sync thread.
    synced: watch::Sender<u64>,
    /// The most any waiter asked for.
    wanted: AtomicU64,
    /// Wakes the writer when a waiter asks for more than is synced (it asks the sync thread).
    wake: Notify,
}

impl Durable {
    /// A future that resolves once every event published on the run's bus before this call
    /// (and the operation records they make) is written to its file, handed to the operating
    /// system (it survives the process being killed, not a machine crash), or the writer
    /// stopped. No disk sync is waited for: the writer flushes after every batch and leaves the
    /// syncs to its sync thread, so this waits at most for the batch being written.
    pub fn wait_written(&self) -> impl Future<Output = ()> + Send + 'static {
        let target = self.bus.len();
        let mut rx = self.shared.written.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s >= target).await;
        }
    }

    /// Like [`wait_written`](Self::wait_written), for every event up to the newest one
    /// published before the future is first polled that started the run or ended a step or
    /// the run ([`EventBus::settled_len`]), with whatever came before it. What a step that may
    /// change files waits for before its first change: the records resume relies on (the
    /// plan's, and the end records, with their file hashes, of every step that ended before)
    /// are written then, and the starts published since (its own, its siblings') need not
    /// hold it up: resume undoes the committed batches of a step without an end record,
    /// whether or not its start was recorded. The target is read at the first poll, not when
    /// the future is made, so a module that makes it early and awaits it right before its
    /// change also covers the steps that ended in between.
    pub fn wait_settled(&self) -> impl Future<Output = ()> + Send + 'static {
        let bus = self.bus.clone();
        let mut rx = self.shared.written.subscribe();
        async move {
            let target = bus.settled_len();
            let _ = rx.wait_for(|s| *s >= target).await;
        }
    }

    /// A future that resolves once every event published on the run's bus before this call
    /// (and the operation records they make) is durable, or the writer stopped (it failed, or
    /// the run ended). Waiting wakes the writer, which asks its sync thread for a sync of what
    /// it wrote, so it resolves after at most the sync going on and one more.
    pub fn wait_synced(&self) -> impl Future<Output = ()> + Send + 'static {
        let target = self.bus.len();
        let shared = self.shared.clone();
        async move {
            let mut rx = shared.synced.subscribe();
            if *rx.borrow_and_update() >= target {
                return;
            }
            shared.wanted.fetch_max(target, Ordering::AcqRel);
            shared.wake.notify_one();
            let _ = rx.wait_for(|s| *s >= target).await;
        }
    }

    /// How many of the run's events are durable (`u64::MAX` once the writer stopped).
    pub fn synced(&self) -> u64 {
        *self.shared.synced.borrow()
    }

    /// How many of the run's events are written (`u64::MAX` once the writer stopped).
    pub fn written(&self) -> u64 {
        *self.shared.written.borrow()
    }
}

/// The writer of a run folder (see the module docs); [`finish`](Self::finish) waits for it.
#[derive(Debug)]
pub struct RunWriter {
    handle: tokio::task::JoinHandle<std::io::Result<u64>>,
    durable: Durable,
}

/// The files the writer needs.
pub(crate) struct Files {
    /// The run folder.
    pub dir: PathBuf,
    /// The repository (for the steps' file hashes).
    pub root: PathBuf,
    /// `events.jsonl`, created.
    pub events: File,
    /// `steps.jsonl`, created.
    pub steps: File,
    /// Files to write atomically before the first event (`plan.json`, `run.json`).
    pub initial: Vec<(&'static str, Vec<u8>)>,
    /// Called before each sync (tests hold a sync back with it).
    #[cfg(test)]
    pub sync_hook: Option<SyncHook>,
}

/// Publishes "the writer stopped" however the thread ends.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.written.send_replace(u64::MAX);
        self.0.synced.send_replace(u64::MAX);
    }
}

enum Next {
    Event(Arc<Event>),
    Wake,
    Closed,
}

/// What the writer asks of the sync thread, and how it went.
#[derive(Default)]
struct SyncState {
    /// Sync the files once events numbered below this are in them (the newest flushed length
    /// asked for; only grows).
    requested: u64,
    /// No more requests: sync what is asked, then stop.
    closed: bool,
    /// The sync that failed (the thread stopped then).
    error: Option<std::io::Error>,
}

/// The sync thread of a writer: `fdatasync`s both files whenever the writer asks for a length
/// not synced yet, and publishes it as `synced`. Requests that arrive during a sync are one
/// sync after it (group commit again). Closed and joined when dropped.
struct SyncThread {
    state: Arc<(Mutex<SyncState>, Condvar)>,
    handle: Option<std::thread::JoinHandle<()>>,
}

/// Called with the length a sync covers, before it (tests script the timing of syncs).
#[cfg(test)]
pub(crate) type SyncHook = Arc<dyn Fn(u64) + Send + Sync>;

impl SyncThread {
    fn spawn(
        shared: Arc<Shared>,
        events: Arc<File>,
        steps: Arc<File>,
        #[cfg(test)] hook: Option<SyncHook>,
    ) -> std::io::Result<Self> {
        let state = Arc::new((Mutex::new(SyncState::default()), Condvar::new()));
        let theirs = state.clone();
        let handle = std::thread::Builder::new()
            .name("nuvira-run-sync".into())
            .spawn(move || {
                let (lock, cond) = &*theirs;
                let mut synced = 0u64;
                loop {
                    let target = {
                        let mut st = lock.lock().unwrap_or_else(PoisonError::into_inner);
                        while st.requested <= synced && !st.closed {
                            st = cond.wait(st).unwrap_or_else(PoisonError::into_inner);
                        }
                        if st.requested <= synced {
                            return;
                        }
                        st.requested
                    };
                    #[cfg(test)]
                    if let Some(hook) = &hook {
                        hook(target);
                    }
                    // Everything below `target` was flushed before it was asked for.
                    if let Err(e) = sync_both(&events, &steps) {
                        lock.lock().unwrap_or_else(PoisonError::into_inner).error = Some(e);
                        // Nobody waits for a sync that will not come.
                        shared.synced.send_replace(u64::MAX);
                        return;
                    }
                    synced = target;
                    shared.synced.send_modify(|s| *s = (*s).max(target));
                }
            })?;
        Ok(Self {
            state,
            handle: Some(handle),
        })
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut SyncState) -> T) -> T {
        let (lock, cond) = &*self.state;
        let out = f(&mut lock.lock().unwrap_or_else(PoisonError::into_inner));
        cond.notify_one();
        out
    }

    /// Asks for a sync once events numbered below `upto` are written (flushed).
    fn request(&self, upto: u64) {
        self.with_state(|st| st.requested = st.requested.max(upto));
    }

    /// The error of a sync that failed, if one did.
    fn failed(&self) -> Option<std::io::Error> {
        self.with_state(|st| st.error.take())
    }

    /// Syncs what is written up to `upto`, waits for the thread, and returns a sync's failure.
    fn finish(mut self, upto: u64) -> std::io::Result<()> {
        self.with_state(|st| {
            st.requested = st.requested.max(upto);
            st.closed = true;
        });
        if let Some(h) = self.handle.take()
            && h.join().is_err()
        {
            return Err(std::io::Error::other(
                "the run folder's sync thread panicked",
            ));
        }
        self.failed().map_or(Ok(()), Err)
    }
}

impl Drop for SyncThread {
    fn drop(&mut self) {
        self.with_state(|st| st.closed = true);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl RunWriter {
    /// Starts writing `bus`'s events into the run folder, on a thread of tokio's blocking pool,
    /// with a thread of its own for the syncs.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::task::spawn_blocking`.
    pub(crate) fn spawn(bus: &EventBus, files: Files) -> Self {
        let mut rx = bus.subscribe();
        let (synced, _) = watch::channel(0u64);
        let (written, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            written,
            synced,
            wanted: AtomicU64::new(0),
            wake: Notify::new(),
        });
        let durable = Durable {
            shared: shared.clone(),
            bus: bus.clone(),
        };
        let rt = tokio::runtime::Handle::current();
        let handle = tokio::task::spawn_blocking(move || {
            let stopped = Stopped(shared);
            let shared = &stopped.0;
            let Files {
                dir,
                root,
                events,
                steps,
                initial,
                #[cfg(test)]
                sync_hook,
            } = files;
            let initial: Vec<(&str, &[u8])> =
                initial.iter().map(|(n, b)| (*n, b.as_slice())).collect();
            if !initial.is_empty() {
                // A new run: its files, then its folder in `.nuvira/runs`.
                write_files_durably(&dir, &initial)?;
                sync_parent(&dir)?;
            }
            let (events, steps) = (Arc::new(events), Arc::new(steps));
            let syncs = SyncThread::spawn(
                shared.clone(),
                events.clone(),
                steps.clone(),
                #[cfg(test)]
                sync_hook,
            )?;
            let mut ev_out = BufWriter::new(&*events);
            let mut st_out = BufWriter::new(&*steps);
            let mut log = StepsLog::new(root);
            // Events numbered below `written` are written (flushed after each batch); a sync
            // of all below `requested` is asked for.
            let (mut written, mut requested) = (0u64, 0u64);
            loop {
                let next = match rx.try_recv() {
                    Ok(ev) => Next::Event(ev),
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => Next::Closed,
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => rt.block_on(async {
                        tokio::select! {
                            biased;
                            ev = rx.recv() => ev.map_or(Next::Closed, Next::Event),
                            () = shared.wake.notified() => Next::Wake,
                        }
                    }),
                };
                let mut boundary = false;
                match next {
                    Next::Closed => break,
                    Next::Wake => {}
                    Next::Event(ev) => {
                        boundary |= write_event(&mut ev_out, &mut st_out, &mut log, &ev)?;
                        written = written.max(ev.seq + 1);
                    }
                }
                while let Ok(ev) = rx.try_recv() {
                    boundary |= write_event(&mut ev_out, &mut st_out, &mut log, &ev)?;
                    written = written.max(ev.seq + 1);
                }
                ev_out.flush()?;
                st_out.flush()?;
                shared.written.send_replace(written);
                if let Some(e) = syncs.failed() {
                    return Err(e);
                }
                let wanted = shared.wanted.load(Ordering::Acquire);
                if written > requested && (boundary || wanted > requested) {
                    syncs.request(written);
                    requested = written;
                }
            }
            ev_out.flush()?;
            st_out.flush()?;
            shared.written.send_replace(written);
            syncs.finish(written)?;
            Ok(written)
        });
        Self { handle, durable }
    }

    /// The run folder's durability, to wait on.
    pub fn durable(&self) -> Durable {
        self.durable.clone()
    }

    /// Waits until every event is written and synced (call after [`EventBus::close`]); returns
    /// the number of events written.
    ///
    /// # Errors
    /// When writing or syncing failed (the run itself went on; its folder is incomplete).
    pub async fn finish(self) -> std::io::Result<u64> {
        match self.handle.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(format!(
                "the run folder's writer stopped: {e}"
            ))),
        }
    }
}

/// One event into both files; `true` when it ends a step or the run.
fn write_event(
    ev_out: &mut impl Write,
    st_out: &mut impl Write,
    log: &mut StepsLog,
    ev: &Event,
) -> std::io::Result<bool> {
    nuvira_engine::events::write_line(ev_out, ev)?;
    let ended = log.fold(ev, st_out)?;
    Ok(ended || nuvira_engine::events::is_boundary(ev))
}

/// `fdatasync` of both files, the second on a scoped thread, so a batch waits for one sync.
fn sync_both(a: &File, b: &File) -> std::io::Result<()> {
    std::thread::scope(|s| {
        let other = s.spawn(|| b.sync_data());
        let first = a.sync_data();
        let second = other
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("a sync thread panicked")));
        first.and(second)
    })
}

#[cfg(test)]
mod tests {
    use crate::runs::record::{RunRecorder, read_steps};
    use nuvira_api::{
        ExecutionPlan, Module, ModuleError, PlanStep, RunStatus, StepContext, StepOutput, WriteSet,
        async_trait,
    };
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    /// Outputs a value large enough that writing its records takes the writer a while.
    struct Big;

    #[async_trait]
    impl Module for Big {
        fn name(&self) -> &str {
            "big"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::ReadOnly
        }
        async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
            Ok(StepOutput::Value(serde_json::json!("x".repeat(16 << 20))))
        }
    }

    /// A writing step that notes, when it goes on to change files, the states `steps.jsonl`
    /// holds: when it starts, or once `before_changes` returns for a module that waits itself.
    struct Writer {
        steps: PathBuf,
        seen: Mutex<Vec<String>>,
        waits_itself: bool,
    }

    #[async_trait]
    impl Module for Writer {
        fn name(&self) -> &str {
            "writer"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::Exclusive
        }
        fn calls_before_changes(&self) -> bool {
            self.waits_itself
        }
        async fn run(&self, _s: &PlanStep, c: &StepContext) -> Result<StepOutput, ModuleError> {
            if self.waits_itself {
                c.before_changes().await;
            }
            let states = read_steps(&self.steps)
                .into_iter()
                .map(|r| format!("{}:{}", r.step, r.state));
            self.seen.lock().unwrap().extend(states);
            Ok(StepOutput::Empty)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writing_step_starts_only_once_the_records_before_it_are_written() {
        records_before_a_change(false).await;
    }

    /// The same for a module that waits itself (`before_changes`, as the edit module does):
    /// it starts at once, and its wait returns only once the end record is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_that_waits_itself_changes_only_once_the_records_before_it_are_written() {
        records_before_a_change(true).await;
    }

    /// `wait_settled` takes its target when it is first polled: a wait made before a step's
    /// end is published, and awaited after, still waits for that end to be written (a module
    /// makes it early and awaits it right before its change).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_settled_wait_covers_the_ends_published_before_its_first_poll() {
        let dir = tempfile::tempdir().unwrap();
        let ws = nuvira_workspace::Workspace::open(dir.path()).unwrap();
        let plan = ExecutionPlan {
            goal: "one big end".into(),
            steps: vec![PlanStep::new("big", "big")],
            ..ExecutionPlan::default()
        };
        let id = "run-settled-test";
        let rec = RunRecorder::prepare(&ws, id, &plan, false).unwrap();
        let bus = crate::EventBus::new(id);
        let writer = rec.start_writer(&bus).unwrap();
        let durable = writer.durable();
        let wait = durable.wait_settled();
        // 16 MiB to serialize: the writer is still at it when the wait is polled.
        let output = Arc::new(StepOutput::Value(serde_json::json!("x".repeat(16 << 20))));
        let seq = bus
            .publish(
                Some("big".into()),
                nuvira_api::EventKind::StepSucceeded {
                    duration_ms: 1,
                    output,
                },
            )
            .unwrap();
        wait.await;
        assert!(
            durable.written() > seq,
            "the wait ended before the end published before its first poll was written"
        );
        bus.close();
        writer.finish().await.unwrap();
    }

    async fn records_before_a_change(waits_itself: bool) {
        let dir = tempfile::tempdir().unwrap();
        let ws = nuvira_workspace::Workspace::open(dir.path()).unwrap();
        let mut w = PlanStep::new("write", "writer");
        w.depends_on = vec!["big".into()];
        let plan = ExecutionPlan {
            goal: "a big output, then a write".into(),
            steps: vec![PlanStep::new("big", "big"), w],
            ..ExecutionPlan::default()
        };
        let id = "run-durable-test";
        let rec = RunRecorder::prepare(&ws, id, &plan, false).unwrap();
        let bus = crate::EventBus::new(id);
        let writer = rec.start_writer(&bus).unwrap();
        let module = Arc::new(Writer {
            steps: rec.dir().join(crate::runs::STEPS_FILE),
            seen: Mutex::new(Vec::new()),
            waits_itself,
        });
        let engine = crate::Engine::builder()
            .module(Arc::new(Big))
            .module(module.clone())
            .build();
        let mut settings = crate::RunSettings::default();
        let hooks = crate::runs::resume::RunHooks {
            durable: Some(writer.durable()),
            ..Default::default()
        };
        settings.hooks = Some(Arc::new(hooks));
        let summary = engine.run(plan, bus.clone(), settings).await.unwrap();
        assert_eq!(summary.status, RunStatus::Succeeded);
        bus.close();
        writer.finish().await.unwrap();
        let seen = module.seen.lock().unwrap().clone();
        assert!(
            seen.iter().any(|s| s == "big:succeeded"),
            "the writing step started before its dependency's end record was written: {seen:?}"
        );
        // plan.json and run.json were written by the writer.
        assert!(rec.dir().join(crate::runs::PLAN_FILE).is_file());
        assert!(rec.dir().join(crate::runs::META_FILE).is_file());
    }

    /// A read-only step that does nothing.
    struct Quick;

    #[async_trait]
    impl Module for Quick {
        fn name(&self) -> &str {
            "quick"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::ReadOnly
        }
        async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
            Ok(StepOutput::Empty)
        }
    }

    /// A writing step that notes, when it starts, the states `steps.jsonl` holds and how far
    /// the files are synced, then lets the held syncs go.
    struct WriterUnderSlowSync {
        steps: PathBuf,
        durable: crate::runs::writer::Durable,
        release: Mutex<std::sync::mpsc::Sender<()>>,
        seen: Mutex<Vec<String>>,
        synced_at_start: Mutex<Option<u64>>,
    }

    #[async_trait]
    impl Module for WriterUnderSlowSync {
        fn name(&self) -> &str {
            "writer"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::Exclusive
        }
        async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
            *self.synced_at_start.lock().unwrap() = Some(self.durable.synced());
            let states = read_steps(&self.steps)
                .into_iter()
                .map(|r| format!("{}:{}", r.step, r.state));
            self.seen.lock().unwrap().extend(states);
            let tx = self.release.lock().unwrap();
            for _ in 0..1000 {
                let _ = tx.send(());
            }
            Ok(StepOutput::Empty)
        }
    }

    /// A read-only step that returns once a sync is being held (so its end is published
    /// while the sync thread is busy).
    struct Gate(Arc<tokio::sync::Notify>);

    #[async_trait]
    impl Module for Gate {
        fn name(&self) -> &str {
            "gate"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::ReadOnly
        }
        async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
            // Bounded only so that a broken writer fails the test instead of hanging it.
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(30), self.0.notified()).await;
            Ok(StepOutput::Empty)
        }
    }

    /// `first` ends (a step boundary: a sync is asked for), the sync thread is held in that
    /// sync (each sync waits for a token only the writing step sends), and `gate` ends only
    /// then: the writing step after `gate` must still start, with both end records in
    /// `steps.jsonl` and no sync done. A writer that synced on its own thread would still be
    /// in the held sync, so `gate`'s end would not be written and the step would wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writing_step_waits_for_the_records_before_it_but_not_for_a_slow_sync() {
        let dir = tempfile::tempdir().unwrap();
        let ws = nuvira_workspace::Workspace::open(dir.path()).unwrap();
        let mut gate = PlanStep::new("gate", "gate");
        gate.depends_on = vec!["first".into()];
        let mut w = PlanStep::new("write", "writer");
        w.depends_on = vec!["gate".into()];
        let plan = ExecutionPlan {
            goal: "a read, a read once a sync is held, then a write".into(),
            steps: vec![PlanStep::new("first", "quick"), gate, w],
            ..ExecutionPlan::default()
        };
        let id = "run-slow-sync-test";
        let rec = RunRecorder::prepare(&ws, id, &plan, false).unwrap();
        let bus = crate::EventBus::new(id);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let held = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let held_in_hook = held.clone();
        let sync_held = Arc::new(tokio::sync::Notify::new());
        let sync_held_in_hook = sync_held.clone();
        let mut files = rec.writer_files().unwrap();
        files.sync_hook = Some(Arc::new(move |_upto| {
            held_in_hook.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            sync_held_in_hook.notify_one();
            let _ = rx
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(30));
        }));
        let writer = crate::runs::writer::RunWriter::spawn(&bus, files);
        let module = Arc::new(WriterUnderSlowSync {
            steps: rec.dir().join(crate::runs::STEPS_FILE),
            durable: writer.durable(),
            release: Mutex::new(tx),
            seen: Mutex::new(Vec::new()),
            synced_at_start: Mutex::new(None),
        });
        let engine = crate::Engine::builder()
            .module(Arc::new(Quick))
            .module(Arc::new(Gate(sync_held)))
            .module(module.clone())
            .build();
        let mut settings = crate::RunSettings::default();
        let hooks = crate::runs::resume::RunHooks {
            durable: Some(writer.durable()),
            ..Default::default()
        };
        settings.hooks = Some(Arc::new(hooks));
        let summary = engine.run(plan, bus.clone(), settings).await.unwrap();
        assert_eq!(summary.status, RunStatus::Succeeded);
        // A sync is asked for and synced while nothing holds it any more.
        let durable = writer.durable();
        durable.wait_synced().await;
        assert!(durable.synced() >= bus.len());
        bus.close();
        writer.finish().await.unwrap();
        let seen = module.seen.lock().unwrap().clone();
        for dep in ["first", "gate"] {
            assert!(
                seen.iter().any(|s| *s == format!("{dep}:succeeded")),
                "the writing step started before {dep}'s end record was written: {seen:?}"
            );
        }
        assert!(
            held.load(std::sync::atomic::Ordering::SeqCst) > 0,
            "no sync was asked for before the writing step"
        );
        assert_eq!(
            *module.synced_at_start.lock().unwrap(),
            Some(0),
            "the writing step waited for a sync (held until it started)"
        );
        // Everything is in the files at the end.
        let states: Vec<String> = read_steps(&rec.dir().join(crate::runs::STEPS_FILE))
            .into_iter()
            .map(|r| format!("{}:{}", r.step, r.state))
            .collect();
        assert!(states.iter().any(|s| s == "write:succeeded"), "{states:?}");
    }
}
