//! Writing a run folder: [`RunRecorder`] makes `.nuvira/runs/<run-id>/` with `run.json` and
//! `plan.json`, streams `events.jsonl` and the steps' operation records in `steps.jsonl`
//! (one group-commit writer for both, [`RunRecorder::start_writer`], see
//! [`writer`](crate::runs::writer)), and at the end writes `report.json` and the final
//! `run.json`.

use crate::runs::{
    EVENTS_FILE, FORMAT_VERSION, META_FILE, PLAN_FILE, REPORT_FILE, RUNS_DIR, RunMeta, RunsError,
    STEPS_FILE, hash_bytes,
};
use nuvira_api::{Event, EventKind, ExecutionPlan, ExecutionReport, StepOutput};
use nuvira_workspace::{Workspace, atomic_write};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The run folder of a run going on.
#[derive(Debug)]
pub struct RunRecorder {
    dir: PathBuf,
    root: PathBuf,
    meta: Mutex<RunMeta>,
    /// `plan.json` and `run.json` of a [`prepare`](Self::prepare)d run, not written yet.
    pending: Mutex<Option<Vec<u8>>>,
    /// The folder's lock, held while the run goes on: it tells `gc` that a folder without
    /// `run.json` yet belongs to a live run (see [`crate::runs::Incomplete`]).
    _lock: nuvira_workspace::FolderLock,
}

/// How long [`lock_run_dir`] tries again while the lock is held: a probe
/// ([`nuvira_workspace::folder_locked`], `nuvira runs` showing a folder as live) holds it for an
/// instant, and a run starting at that instant must not go unrecorded.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Takes the lock of run folder `dir`, trying again with a short backoff for up to
/// [`LOCK_RETRY`] while it is held (refused when another process still holds it then).
fn lock_run_dir(dir: &Path) -> Result<nuvira_workspace::FolderLock, RunsError> {
    lock_run_dir_within(dir, LOCK_RETRY)
}

fn lock_run_dir_within(
    dir: &Path,
    patience: std::time::Duration,
) -> Result<nuvira_workspace::FolderLock, RunsError> {
    let deadline = std::time::Instant::now() + patience;
    let mut pause = std::time::Duration::from_millis(2);
    loop {
        match nuvira_workspace::FolderLock::try_acquire(dir) {
            Ok(Some(lock)) => return Ok(lock),
            Ok(None) => {}
            Err(e) => return Err(write_err(dir)(e)),
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(RunsError::Write {
                path: dir.to_owned(),
                source: std::io::Error::other(
                    "another process holds this run folder (a run or `nuvira runs gc`)",
                ),
            });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(std::time::Duration::from_millis(25));
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunsError + '_ {
    move |source| RunsError::Write {
        path: path.to_owned(),
        source,
    }
}

impl RunRecorder {
    /// Creates `.nuvira/runs/<run_id>/` (private, never through a symlink) with `run.json`
    /// (status `running`) and `plan.json`, both durable when it returns.
    ///
    /// # Errors
    /// [`RunsError::BadId`] for a bad id, [`RunsError::Workspace`] when `.nuvira/runs` is a
    /// symlink or cannot be made, [`RunsError::Write`] when a file cannot be written.
    pub fn create(
        ws: &Workspace,
        run_id: &str,
        plan: &ExecutionPlan,
        dry_run: bool,
    ) -> Result<Self, RunsError> {
        let rec = Self::prepare(ws, run_id, plan, dry_run)?;
        rec.write_pending()?;
        Ok(rec)
    }

    /// Like [`create`](Self::create), but `run.json` and `plan.json` are left to the writer
    /// ([`start_writer`](Self::start_writer) writes them, durably, before the run's first
    /// event), or to [`write_pending`](Self::write_pending): starting a run waits for no disk.
    ///
    /// # Errors
    /// As [`create`](Self::create), except that nothing is written yet.
    pub fn prepare(
        ws: &Workspace,
        run_id: &str,
        plan: &ExecutionPlan,
        dry_run: bool,
    ) -> Result<Self, RunsError> {
        if !crate::runs::is_run_id(run_id) {
            return Err(RunsError::BadId(run_id.to_owned()));
        }
        let runs = ws
            .state_folder(&[RUNS_DIR], true)?
            .ok_or_else(|| RunsError::NotFound(run_id.to_owned()))?;
        // The run's own folder, made here without a sync of `.nuvira/runs` (that sync comes
        // with the first files, before anything can depend on the folder).
        let dir = runs.join(run_id);
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        match builder.create(&dir) {
            Ok(()) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::AlreadyExists
                    && crate::runs::is_real_dir(&dir) => {}
            Err(e) => return Err(write_err(&dir)(e)),
        }
        // Held from here to the run's end: `gc` never takes the folder of a live run for one
        // a killed run left without `run.json`.
        let lock = lock_run_dir(&dir)?;
        nuvira_workspace::fault_point("run-folder");
        let meta = RunMeta {
            format: FORMAT_VERSION,
            id: run_id.to_owned(),
            goal: plan.goal.clone(),
            status: "running".into(),
            started_ms: nuvira_api::now_ms(),
            pid: std::process::id(),
            dry_run,
            steps: plan.steps.len(),
            ..RunMeta::default()
        };
        let plan_path = dir.join(PLAN_FILE);
        let bytes = serde_json::to_vec_pretty(plan).map_err(|e| RunsError::Write {
            path: plan_path,
            source: std::io::Error::other(e),
        })?;
        Ok(Self {
            dir,
            root: ws.root().to_owned(),
            meta: Mutex::new(meta),
            pending: Mutex::new(Some(bytes)),
            _lock: lock,
        })
    }

    /// Writes what [`prepare`](Self::prepare) left (`plan.json`, `run.json`), durably; nothing
    /// when it was written already.
    ///
    /// # Errors
    /// [`RunsError::Write`].
    pub fn write_pending(&self) -> Result<(), RunsError> {
        let Some(plan) = self.take_pending() else {
            return Ok(());
        };
        let meta = self.meta_bytes()?;
        write_files_durably(&self.dir, &[(PLAN_FILE, &plan), (META_FILE, &meta)])
            .and_then(|()| sync_parent(&self.dir))
            .map_err(write_err(&self.dir))
    }

    fn take_pending(&self) -> Option<Vec<u8>> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Creates `events.jsonl` and `steps.jsonl` and starts their one writer for `bus` (see
    /// [`writer`](crate::runs::writer)); a [`prepare`](Self::prepare)d run's `plan.json` and
    /// `run.json` are written by it first. Call it before the run publishes its first event.
    ///
    /// # Errors
    /// [`RunsError::Write`] when a file cannot be created (`plan.json` and `run.json` are then
    /// still pending: [`write_pending`](Self::write_pending)).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start_writer(
        &self,
        bus: &nuvira_engine::EventBus,
    ) -> Result<crate::runs::writer::RunWriter, RunsError> {
        let files = self.writer_files()?;
        Ok(crate::runs::writer::RunWriter::spawn(bus, files))
    }

    /// What [`start_writer`](Self::start_writer) hands the writer (its files created).
    pub(crate) fn writer_files(&self) -> Result<crate::runs::writer::Files, RunsError> {
        let events = create_new(&self.dir.join(EVENTS_FILE))?;
        let steps = create_new(&self.dir.join(STEPS_FILE))?;
        let meta = self.meta_bytes()?;
        let initial = match self.take_pending() {
            Some(plan) => vec![(PLAN_FILE, plan), (META_FILE, meta)],
            None => Vec::new(),
        };
        let files = crate::runs::writer::Files {
            dir: self.dir.clone(),
            root: self.root.clone(),
            events,
            steps,
            initial,
            #[cfg(test)]
            sync_hook: None,
        };
        Ok(files)
    }

    /// Takes the lock of the folder of an earlier run before resuming it: `Ok(None)` when
    /// another process holds it (the run is still going on, or `nuvira runs gc` is removing
    /// it). Take it before anything of the run is undone, and hand it to
    /// [`reopen`](Self::reopen) (a second lock from this process would conflict with it).
    ///
    /// # Errors
    /// [`RunsError::Write`] when the folder cannot be opened (a symlink, gone).
    pub fn lock_for_resume(
        run: &crate::runs::StoredRun,
    ) -> Result<Option<nuvira_workspace::FolderLock>, RunsError> {
        nuvira_workspace::FolderLock::try_acquire(&run.dir).map_err(write_err(&run.dir))
    }

    /// Reopens the folder of an earlier run to resume it, under `lock` (its folder's lock,
    /// [`lock_for_resume`](Self::lock_for_resume)): `run.json` goes back to `running` (with
    /// this process and one more resume), and the earlier `events.jsonl` and `steps.jsonl` are
    /// kept as `events.<n>.jsonl` / `steps.<n>.jsonl` (`n` = resumes so far).
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn reopen(
        ws: &Workspace,
        run: &crate::runs::StoredRun,
        lock: nuvira_workspace::FolderLock,
    ) -> Result<Self, RunsError> {
        let mut meta = run.meta.clone();
        meta.resumes += 1;
        meta.status = "running".into();
        meta.pid = std::process::id();
        meta.ended_ms = None;
        meta.duration_ms = None;
        meta.exit_code = None;
        let rec = Self {
            dir: run.dir.clone(),
            root: ws.root().to_owned(),
            meta: Mutex::new(meta.clone()),
            pending: Mutex::new(None),
            _lock: lock,
        };
        for (file, stem) in [(EVENTS_FILE, "events"), (STEPS_FILE, "steps")] {
            let from = rec.dir.join(file);
            if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                let to = rec.dir.join(format!("{stem}.{}.jsonl", meta.resumes));
                std::fs::rename(&from, &to).map_err(write_err(&from))?;
            }
        }
        let report = rec.dir.join(REPORT_FILE);
        if std::fs::symlink_metadata(&report).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::remove_file(&report);
        }
        rec.write_meta()?;
        nuvira_workspace::fault_point("resume-reopened");
        Ok(rec)
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `calls/` of the run folder.
    pub fn calls_dir(&self) -> PathBuf {
        self.dir.join(crate::runs::CALLS_DIR)
    }

    /// Creates `events.jsonl` (new; a file or link already there is an error).
    ///
    /// # Errors
    /// [`RunsError::Write`].
    pub fn events_file(&self) -> Result<(std::fs::File, PathBuf), RunsError> {
        let path = self.dir.join(EVENTS_FILE);
        let file = create_new(&path)?;
        Ok((file, path))
    }

    /// Starts the writer of `steps.jsonl` for `bus` (see [`spawn_steps_log`]).
    ///
    /// # Errors
    /// [`RunsError::Write`] when the file cannot be created.
    pub fn steps_log(
        &self,
        bus: &nuvira_engine::EventBus,
    ) -> Result<tokio::task::JoinHandle<std::io::Result<()>>, RunsError> {
        let path = self.dir.join(STEPS_FILE);
        let file = create_new(&path)?;
        Ok(spawn_steps_log(bus, file, self.root.clone()))
    }

    fn meta_bytes(&self) -> Result<Vec<u8>, RunsError> {
        let meta = self
            .meta
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        serde_json::to_vec_pretty(&meta).map_err(|e| RunsError::Write {
            path: self.dir.join(META_FILE),
            source: std::io::Error::other(e),
        })
    }

    fn write_meta(&self) -> Result<(), RunsError> {
        let path = self.dir.join(META_FILE);
        let bytes = self.meta_bytes()?;
        atomic_write(&path, &bytes, Some(0o600)).map_err(write_err(&path))
    }

    /// Writes `report.json` and the final `run.json` (`status`, exit code, duration, usage).
    ///
    /// # Errors
    /// [`RunsError::Write`].
    pub fn finish(
        &self,
        report: &ExecutionReport,
        status: &str,
        exit_code: u8,
    ) -> Result<(), RunsError> {
        let path = self.dir.join(REPORT_FILE);
        let bytes = serde_json::to_vec_pretty(report).map_err(|e| RunsError::Write {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        // A plan that never got written (no writer was started) goes with them.
        let plan = self.take_pending();
        {
            let mut m = self.meta.lock().unwrap_or_else(PoisonError::into_inner);
            let now = nuvira_api::now_ms();
            m.status = status.to_owned();
            m.ended_ms = Some(now);
            m.duration_ms = Some(now.saturating_sub(m.started_ms));
            m.exit_code = Some(exit_code);
            m.usage.clone_from(&report.usage);
            if m.goal.is_empty() {
                m.goal.clone_from(&report.goal);
            }
        }
        let meta = self.meta_bytes()?;
        let mut files = vec![
            (REPORT_FILE, bytes.as_slice()),
            (META_FILE, meta.as_slice()),
        ];
        if let Some(plan) = &plan {
            files.push((PLAN_FILE, plan.as_slice()));
        }
        write_files_durably(&self.dir, &files)
            .and_then(|()| match plan {
                Some(_) => sync_parent(&self.dir),
                None => Ok(()),
            })
            .map_err(write_err(&path))
    }

    /// Marks the run as a replay of `of` (written with `run.json`'s next write, at once when
    /// it was written already).
    pub fn set_replay_of(&self, of: &str) {
        self.meta
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replay_of = Some(of.to_owned());
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if !pending {
            let _ = self.write_meta();
        }
    }
}

/// Syncs the folder holding `dir` (so that `dir` itself is durable).
pub(crate) fn sync_parent(dir: &Path) -> std::io::Result<()> {
    match dir.parent() {
        Some(p) => nuvira_workspace::sync_dir(p),
        None => Ok(()),
    }
}

/// Writes files of folder `dir` atomically and durably, together: each to a temporary file,
/// all of them synced at once (in parallel), renamed over, and `dir` synced once. A reader sees
/// each file's old or new version, never a torn one; when it returns, all are durable. Costs
/// two sync latencies however many files there are (`atomic_write` one after the other: two
/// each).
///
/// # Errors
/// Any I/O error (the files already renamed stay).
pub fn write_files_durably(dir: &Path, files: &[(&str, &[u8])]) -> std::io::Result<()> {
    let mut temps = Vec::with_capacity(files.len());
    for (name, bytes) in files {
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".nuvira-tmp-{}-", std::process::id()))
            .tempfile_in(dir)?;
        tmp.write_all(bytes)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        temps.push((tmp, *name));
    }
    std::thread::scope(|s| {
        let syncs: Vec<_> = temps
            .iter()
            .skip(1)
            .map(|(t, _)| s.spawn(|| t.as_file().sync_all()))
            .collect();
        let mut result = temps
            .first()
            .map_or(Ok(()), |(t, _)| t.as_file().sync_all());
        for h in syncs {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a sync thread panicked")));
            result = result.and(r);
        }
        result
    })?;
    for (tmp, name) in temps {
        tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    }
    nuvira_workspace::sync_dir(dir)
}

fn create_new(path: &Path) -> Result<std::fs::File, RunsError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path).map_err(write_err(path))
}

/// One line of `steps.jsonl`: a step's lifecycle (`planned` → `running` → `succeeded` /
/// `failed` / `skipped`), with its input fingerprint on `running` and at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct OpRecord {
    /// The step.
    pub step: String,
    /// `planned`, `running`, `succeeded`, `failed` or `skipped`.
    pub state: String,
    /// When (ms since the Unix epoch).
    pub at: u64,
    /// The attempt (`running` and the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What the step's result depends on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

/// A step's input fingerprint: its definition, its dependencies' outputs, and the files it read
/// (or wrote), each `sha256:<hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct Fingerprint {
    /// The step as planned (JSON).
    pub definition: String,
    /// The outputs of its direct dependencies, in `depends_on` order.
    pub upstream: String,
    /// The files it read or wrote, with their content hash when the step ended (`missing`:
    /// there was none). Empty on `running` records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<(String, String)>,
}

/// The hash of a step's definition.
pub fn definition_hash(step: &nuvira_api::PlanStep) -> String {
    hash_bytes(&serde_json::to_vec(step).unwrap_or_default())
}

/// The hash of a step's dependencies' outputs (`None` for one without output yet).
pub fn upstream_hash<'a>(outputs: impl IntoIterator<Item = Option<&'a StepOutput>>) -> String {
    let values: Vec<serde_json::Value> = outputs
        .into_iter()
        .map(|o| {
            o.map_or(serde_json::Value::Null, |o| {
                serde_json::to_value(o).unwrap_or_default()
            })
        })
        .collect();
    hash_bytes(&serde_json::to_vec(&values).unwrap_or_default())
}

/// The content hash of a workspace file (`missing` when there is no plain file), never through
/// a symlink at its last component, and only for a relative path without `..`.
pub fn file_hash(root: &Path, rel: &str) -> String {
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return "invalid".into();
    }
    let path = root.join(p);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => match std::fs::read(&path) {
            Ok(bytes) => hash_bytes(&bytes),
            Err(_) => "unreadable".into(),
        },
        _ => "missing".into(),
    }
}

/// The workspace's files as a sandbox copy holds them (what `git` would not ignore, build
/// folders left out), workspace-relative.
pub(crate) fn workspace_files(root: &Path) -> Vec<String> {
    let options = nuvira_workspace::WalkOptions {
        include_ignored: false,
        skip_build_dirs: true,
    };
    nuvira_workspace::walk(root, options)
        .map(|entries| {
            entries
                .into_iter()
                .filter(|e| e.kind == nuvira_workspace::EntryKind::File)
                .filter_map(|e| e.rel.to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `steps.jsonl` from the events of `bus`, on a blocking thread until the bus closes:
/// `planned` for every step at `run:started`, `running` at `step:started`, and the end with the
/// fingerprint (definition, dependencies' outputs, and the hashes of the files the step's
/// events name: edits written, files inspected, model context files). Synced after each end.
///
/// # Panics
/// Outside a tokio runtime.
pub fn spawn_steps_log(
    bus: &nuvira_engine::EventBus,
    file: std::fs::File,
    root: PathBuf,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let mut rx = bus.subscribe();
    tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::new(file);
        let mut log = StepsLog::new(root);
        while let Some(ev) = rx.blocking_recv() {
            let mut end = log.fold(&ev, &mut out)?;
            while let Ok(ev) = rx.try_recv() {
                end |= log.fold(&ev, &mut out)?;
            }
            out.flush()?;
            if end {
                out.get_ref().sync_data()?;
            }
        }
        out.flush()?;
        out.get_ref().sync_data()
    })
}

/// Folds a run's events into its operation records (`steps.jsonl`).
#[derive(Default)]
pub(crate) struct StepsLog {
    root: PathBuf,
    plan: Option<Arc<ExecutionPlan>>,
    /// Step id to its index in `plan` (a lookup per record, so a linear search would make a
    /// run's records quadratic in its steps).
    index: HashMap<String, usize>,
    outputs: HashMap<String, Arc<StepOutput>>,
    files: HashMap<String, Vec<String>>,
}

impl StepsLog {
    /// A log for the repository at `root`.
    pub(crate) fn new(root: PathBuf) -> Self {
        Self {
            root,
            ..Self::default()
        }
    }

    fn step(&self, id: &str) -> Option<&nuvira_api::PlanStep> {
        self.plan.as_ref()?.steps.get(*self.index.get(id)?)
    }

    fn fingerprint(&self, id: &str, with_files: bool) -> Option<Fingerprint> {
        let step = self.step(id)?;
        let upstream = upstream_hash(
            step.depends_on
                .iter()
                .map(|d| self.outputs.get(d).map(|o| &**o)),
        );
        let files = if with_files {
            let mut names = self.files.get(id).cloned().unwrap_or_default();
            // A test or a command may read any file of the workspace (what a sandbox copy holds).
            if matches!(step.module.as_str(), "test" | "execute") {
                names.extend(workspace_files(&self.root));
            }
            names.sort();
            names.dedup();
            names
                .into_iter()
                .map(|n| {
                    let h = file_hash(&self.root, &n);
                    (n, h)
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Fingerprint {
            definition: definition_hash(step),
            upstream,
            files,
        })
    }

    /// Folds one event; `true` when it ended a step or the run.
    pub(crate) fn fold(&mut self, ev: &Event, out: &mut impl Write) -> std::io::Result<bool> {
        let step = ev.step_id.as_deref().unwrap_or_default().to_owned();
        let mut rec = OpRecord {
            step: step.clone(),
            at: ev.ts,
            ..OpRecord::default()
        };
        match &ev.kind {
            EventKind::RunStarted { plan, .. } => {
                self.plan = Some(plan.clone());
                self.index = (plan.steps.iter().enumerate())
                    .map(|(i, s)| (s.id.clone(), i))
                    .collect();
                for s in &plan.steps {
                    let r = OpRecord {
                        step: s.id.clone(),
                        state: "planned".into(),
                        at: ev.ts,
                        ..OpRecord::default()
                    };
                    line(out, &r)?;
                }
                return Ok(false);
            }
            EventKind::StepStarted { attempt, .. } => {
                rec.state = "running".into();
                rec.attempt = Some(*attempt);
                rec.fingerprint = self.fingerprint(&step, false);
            }
            EventKind::EditWritten { path, .. } => {
                self.files.entry(step).or_default().push(path.clone());
                return Ok(false);
            }
            EventKind::InspectFileFound { path, .. } => {
                self.files.entry(step).or_default().push(path.clone());
                return Ok(false);
            }
            EventKind::LlmRequest { hashes, .. } => {
                let names = hashes
                    .context
                    .iter()
                    .filter(|c| file_hash(&self.root, &c.source) != "invalid")
                    .filter(|c| self.root.join(&c.source).is_file())
                    .map(|c| c.source.clone());
                self.files.entry(step).or_default().extend(names);
                return Ok(false);
            }
            EventKind::StepSucceeded { output, .. } => {
                self.outputs.insert(step.clone(), output.clone());
                rec.state = "succeeded".into();
                rec.fingerprint = self.fingerprint(&step, true);
            }
            EventKind::StepFailed { .. } => {
                rec.state = "failed".into();
                rec.fingerprint = self.fingerprint(&step, true);
            }
            EventKind::StepSkipped { .. } => rec.state = "skipped".into(),
            EventKind::RunCompleted { .. } => return Ok(true),
            _ => return Ok(false),
        }
        if step.is_empty() {
            return Ok(false);
        }
        line(out, &rec)?;
        Ok(rec.state != "running")
    }
}

fn line(out: &mut impl Write, rec: &OpRecord) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, rec).map_err(std::io::Error::other)?;
    out.write_all(b"\n")
}

/// Reads a `steps.jsonl` (a torn last line, from a crash, is ignored).
pub fn read_steps(path: &Path) -> Vec<OpRecord> {
    let Ok(bytes) = crate::runs::read_capped(path) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe (`folder_locked`, `nuvira runs`) holds a run folder's lock for an instant: a run
    /// taking its lock at that instant waits for it instead of going unrecorded; a lock held
    /// longer than the patience is still refused.
    #[cfg(unix)]
    #[test]
    fn a_run_taking_its_lock_while_a_probe_holds_it_waits_for_the_probe() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("run-1");
        std::fs::create_dir(&dir).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let probe = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let lock = nuvira_workspace::FolderLock::try_acquire(&dir)
                    .unwrap()
                    .unwrap();
                held_tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(40));
                drop(lock);
            })
        };
        held_rx.recv().unwrap();
        assert!(nuvira_workspace::folder_locked(&dir).unwrap());
        let lock = lock_run_dir(&dir).expect("the run gave up while a probe held its lock");
        probe.join().unwrap();
        assert!(nuvira_workspace::folder_locked(&dir).unwrap());
        // Held for good (by this lock): refused once the patience is over.
        let t = std::time::Instant::now();
        let err = lock_run_dir_within(&dir, std::time::Duration::from_millis(30)).unwrap_err();
        assert!(t.elapsed() >= std::time::Duration::from_millis(30));
        assert!(err.to_string().contains("another process holds"), "{err}");
        drop(lock);
        assert!(lock_run_dir(&dir).is_ok());
    }
}
