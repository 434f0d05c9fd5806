//! The one writer of a run folder's streamed files: `events.jsonl` and `steps.jsonl` from one
//! subscription to the run's bus, on one blocking thread, synced by group commit.
//!
//! Why it is shaped so (issue 14, "the cost of recording"): the run's steps never wait for a
//! disk. They publish events and go on; the writer takes every event that is there, writes
//! both files, and when the batch ends a step (or someone waits, below) syncs both files at
//! once, the two syncs in parallel. Events that arrive during a sync are the next batch: one
//! sync covers every step that ended meanwhile. `plan.json` and `run.json` of a new run are
//! written by the same thread before its first event, so starting a run costs no sync either.
//!
//! What resume relies on is kept by [`Durable`]: a step that may change files (its write set
//! is not read-only) waits, before its module runs, until every event published before it,
//! with the operation records they make, has been written to its file (handed to the
//! operating system, so it outlives the process being killed; `plan.json` and `run.json` are
//! synced before any event is written) — see
//! [`wait_written`](Durable::wait_written); [`RunHooks`](crate::runs::resume::RunHooks) asks
//! the scheduler for it through
//! [`StepHooks::before_run`](crate::hooks::StepHooks::before_run). So after a kill, resume
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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    written: watch::Sender<u64>,
    /// Every event numbered below this is durable in both files (synced; `u64::MAX` once the
    /// writer stopped).
    synced: watch::Sender<u64>,
    /// The most any waiter asked for.
    wanted: AtomicU64,
    /// Wakes the writer when a waiter asks for more than is synced.
    wake: Notify,
}

impl Durable {
    /// A future that resolves once every event published on the run's bus before this call
    /// (and the operation records they make) is written to its file, handed to the operating
    /// system (it survives the process being killed, not a machine crash), or the writer
    /// stopped. No disk sync is waited for: the writer flushes after every batch.
    pub fn wait_written(&self) -> impl Future<Output = ()> + Send + 'static {
        let target = self.bus.len();
        let mut rx = self.shared.written.subscribe();
        async move {
            let _ = rx.wait_for(|s| *s >= target).await;
        }
    }

    /// A future that resolves once every event published on the run's bus before this call
    /// (and the operation records they make) is durable, or the writer stopped (it failed, or
    /// the run ended). Waiting wakes the writer, so it resolves after at most one sync.
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

impl RunWriter {
    /// Starts writing `bus`'s events into the run folder, on a thread of tokio's blocking pool.
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
            } = files;
            let initial: Vec<(&str, &[u8])> =
                initial.iter().map(|(n, b)| (*n, b.as_slice())).collect();
            if !initial.is_empty() {
                // A new run: its files, then its folder in `.nuvira/runs`.
                write_files_durably(&dir, &initial)?;
                sync_parent(&dir)?;
            }
            let mut ev_out = BufWriter::new(events);
            let mut st_out = BufWriter::new(steps);
            let mut log = StepsLog::new(root);
            // Events numbered below `written` are written (flushed after each batch), below
            // `synced` durable.
            let (mut written, mut synced) = (0u64, 0u64);
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
                let wanted = shared.wanted.load(Ordering::Acquire);
                if written > synced && (boundary || wanted > synced) {
                    sync_both(ev_out.get_ref(), st_out.get_ref())?;
                    synced = written;
                    shared.synced.send_replace(synced);
                }
            }
            ev_out.flush()?;
            st_out.flush()?;
            sync_both(ev_out.get_ref(), st_out.get_ref())?;
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
    /// When writing failed (the run itself went on; its folder is incomplete).
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

    /// A writing step that notes, when it starts, the states `steps.jsonl` holds.
    struct Writer {
        steps: PathBuf,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Module for Writer {
        fn name(&self) -> &str {
            "writer"
        }
        fn write_set(&self, _s: &PlanStep) -> WriteSet {
            WriteSet::Exclusive
        }
        async fn run(&self, _s: &PlanStep, _c: &StepContext) -> Result<StepOutput, ModuleError> {
            let states = read_steps(&self.steps)
                .into_iter()
                .map(|r| format!("{}:{}", r.step, r.state));
            self.seen.lock().unwrap().extend(states);
            Ok(StepOutput::Empty)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writing_step_starts_only_once_the_records_before_it_are_written() {
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
}
