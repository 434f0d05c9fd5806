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
//! with the operation records they make, and `plan.json` and `run.json`, are durable
//! ([`RunHooks`](crate::runs::resume::RunHooks) asks the scheduler for that through
//! [`StepHooks::before_run`](crate::hooks::StepHooks::before_run)). So resume never finds a
//! step's committed edits without the end records of the steps it built on, nor edits of a run
//! whose folder has no plan, and the file hashes of a step's end record are taken before any
//! later step can change those files. Read-only steps never wait.

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
    /// Every event numbered below this is durable in both files (`u64::MAX` once the writer
    /// stopped, so nobody waits for a writer that is gone).
    synced: watch::Sender<u64>,
    /// The most any waiter asked for.
    wanted: AtomicU64,
    /// Wakes the writer when a waiter asks for more than is synced.
    wake: Notify,
}

impl Durable {
    /// A future that resolves once every event published on the run's bus before this call
    /// (and the operation records they make) is durable, or the writer stopped (it failed, or
    /// the run ended). Waiting wakes the writer, so it resolves after at most one sync.
    pub fn wait_all(&self) -> impl Future<Output = ()> + Send + 'static {
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
        let shared = Arc::new(Shared {
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
