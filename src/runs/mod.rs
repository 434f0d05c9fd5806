//! Run history: every `nuvira run` leaves a folder `.nuvira/runs/<run-id>/` with its plan, its
//! events, its report, its model calls and its steps' operation records; [`RunStore`] lists,
//! loads and garbage-collects them. The format is documented precisely in `docs/runs.md`.
//!
//! ```no_run
//! # fn main() -> Result<(), nuvira::runs::RunsError> {
//! let store = nuvira::runs::RunStore::open(std::path::Path::new("."))?;
//! for run in store.list()? {
//!     println!("{} {} {}", run.meta.id, run.status(), run.meta.goal);
//! }
//! let run = store.get("run-1764580000-0a1f")?;
//! let report = run.report()?; // report.json
//! println!("{}", run.events_path().display()); // events.jsonl
//! # let _ = report; Ok(()) }
//! ```
//!
//! Why a folder per run and plain files: each file is written by one party at one time
//! (`run.json`, `plan.json` and `report.json` atomically; `events.jsonl` and `steps.jsonl`
//! appended and synced at step boundaries; one file per model call), so a reader (`nuvira runs`,
//! a UI following a live run, `nuvira resume`) never needs a lock, and a run killed at any
//! moment leaves every file either complete or a prefix of complete lines.
//!
//! `.nuvira/` may have come with a checkout, so a run folder is untrusted data: run ids are
//! checked ([`is_run_id`]) before they become paths, nothing under `.nuvira/runs` is reached
//! through a symlink, files are read with a size cap, and garbage collection only ever removes
//! real folders with a run id's name directly inside `.nuvira/runs`.

pub mod calls;
pub mod record;
pub mod resume;
pub mod writer;

use nuvira_api::{ExecutionPlan, ExecutionReport, ModelUsage};
use nuvira_workspace::{
    HeldDir, HeldKind, MAX_REMOVE_DEPTH, Removal, Workspace, WorkspaceError, folder_locked,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The folder of the run history under `.nuvira/`.
pub const RUNS_DIR: &str = "runs";
/// The version of the run folder format written in `run.json`'s `format`.
pub const FORMAT_VERSION: u32 = 1;
/// The run's summary (atomically replaced at start and end).
pub const META_FILE: &str = "run.json";
/// The validated plan.
pub const PLAN_FILE: &str = "plan.json";
/// Every event, one JSON object a line.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The report at the end of the run.
pub const REPORT_FILE: &str = "report.json";
/// The operation records of the steps, one JSON object a line.
pub const STEPS_FILE: &str = "steps.jsonl";
/// One file per model call, `calls/<n>.json`.
pub const CALLS_DIR: &str = "calls";
/// The largest file of a run folder that is read (a planted huge file is refused).
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Default retention: the newest runs kept.
pub const DEFAULT_KEEP_RUNS: usize = 100;
/// Default retention: runs younger than this many days are kept (within `keep_runs`).
pub const DEFAULT_KEEP_DAYS: u64 = 30;
/// The environment variable for `keep_runs`.
pub const KEEP_RUNS_ENV: &str = "NUVIRA_RUNS_KEEP";
/// The environment variable for `keep_days`.
pub const KEEP_DAYS_ENV: &str = "NUVIRA_RUNS_KEEP_DAYS";
/// The environment variable that turns the history off (`0`).
pub const HISTORY_ENV: &str = "NUVIRA_HISTORY";
/// How long a run folder without `run.json` (an [`Incomplete`] one) must have been left
/// untouched before [`RunStore::gc`] may remove it, when no process holds its lock: a margin
/// over the moment between a run making its folder and taking the folder's lock (and for a
/// run of an older Nuvira, which takes none, until it writes `run.json`).
pub const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// Whether `name` is a run id: `run-` then letters, digits and `-`, at most 64 bytes. Only such
/// names become paths under `.nuvira/runs`. The rule lives in `nuvira-workspace`, which the MCP
/// server (`nuvira-mcp`) shares.
pub use nuvira_workspace::is_run_id;

/// Why the run history could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsError {
    /// The repository or its `.nuvira/runs` cannot be used.
    #[error("failed to open the run history: {0}")]
    Workspace(#[from] WorkspaceError),
    /// Not a run id.
    #[error(
        "`{0}` is not a run id (run ids look like `run-1764580000-0a1f`; `nuvira runs` lists them)"
    )]
    BadId(String),
    /// No such run.
    #[error("no run `{0}` in the history (`nuvira runs` lists them)")]
    NotFound(String),
    /// A file of a run folder cannot be read or is malformed.
    #[error("failed to read `{}`: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file of a run folder cannot be written.
    #[error("failed to write `{}`: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// `run.json`: what a run is, how it ended, what it used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct RunMeta {
    /// [`FORMAT_VERSION`].
    pub format: u32,
    /// The run id (the folder's name).
    pub id: String,
    /// The plan's goal.
    pub goal: String,
    /// `running`, `succeeded`, `failed`, `cancelled` or `budget-exceeded`.
    pub status: String,
    /// When the run started (ms since the Unix epoch).
    pub started_ms: u64,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// How long it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The process that ran it (to tell a live run from an interrupted one).
    #[serde(default)]
    pub pid: u32,
    /// The process's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// Whether it was a dry run.
    #[serde(default)]
    pub dry_run: bool,
    /// Model calls and what they used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ModelUsage>,
    /// Steps in the plan.
    #[serde(default)]
    pub steps: usize,
    /// How often the run was resumed.
    #[serde(default)]
    pub resumes: u32,
    /// The run this one replays (`nuvira replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
}

/// Retention of the run history: a run is kept while it is among the newest `keep_runs` *and*
/// younger than `keep_days` days (`None`: no limit of that kind). Running runs and the run that
/// collects are always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest runs kept.
    pub keep_runs: Option<usize>,
    /// The age in days under which runs are kept.
    pub keep_days: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            keep_runs: Some(DEFAULT_KEEP_RUNS),
            keep_days: Some(DEFAULT_KEEP_DAYS),
        }
    }
}

impl Retention {
    /// The defaults, overridden by `[runs] keep` / `keep_days` of `.nuvira/config.toml` and
    /// then by [`KEEP_RUNS_ENV`] / [`KEEP_DAYS_ENV`] (`0` for either: no limit of that kind).
    pub fn from_config(config: &crate::runs::calls::Config) -> Self {
        let mut r = Self::default();
        if let Some(n) = config.runs.keep {
            r.keep_runs = (n > 0).then_some(n);
        }
        if let Some(d) = config.runs.keep_days {
            r.keep_days = (d > 0).then_some(d);
        }
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(n) = env(KEEP_RUNS_ENV) {
            r.keep_runs = (n > 0).then_some(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(d) = env(KEEP_DAYS_ENV) {
            r.keep_days = (d > 0).then_some(d);
        }
        r
    }
}

/// What [`RunStore::gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcOutcome {
    /// Runs removed (or that would be, for a dry run), oldest first.
    pub removed: Vec<String>,
    /// Runs kept.
    pub kept: usize,
    /// Abandoned run folders removed (or that would be): no `run.json`, no process holding
    /// the folder's lock, untouched for longer than the grace period (see [`Incomplete`]).
    pub abandoned: Vec<String>,
    /// Folders without `run.json` kept: a live process holds them, or they are younger than
    /// the grace period.
    pub kept_incomplete: usize,
    /// Entries of `.nuvira/runs` left alone because they are not real run folders (a symlink,
    /// a file, a name that is no run id): `(name, why)`.
    pub ignored: Vec<(String, String)>,
}

/// The run history of one repository (`.nuvira/runs`).
#[derive(Debug, Clone)]
pub struct RunStore {
    ws: Workspace,
    /// `.nuvira/runs`, when it exists.
    dir: Option<PathBuf>,
}

impl RunStore {
    /// The history of the repository at `repo` (nothing is created).
    ///
    /// # Errors
    /// [`RunsError::Workspace`] when the repository cannot be opened or `.nuvira/runs` (or
    /// `.nuvira`) is a symlink or a file.
    pub fn open(repo: &Path) -> Result<Self, RunsError> {
        let ws = Workspace::open(repo)?;
        Self::of(&ws)
    }

    /// The history of an open workspace.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn of(ws: &Workspace) -> Result<Self, RunsError> {
        let dir = ws.state_folder(&[RUNS_DIR], false)?;
        Ok(Self {
            ws: ws.clone(),
            dir,
        })
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// `.nuvira/runs`, when it exists.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Every run, newest first (by start time, then id). Entries that are not real run folders
    /// and runs whose `run.json` is missing or unreadable are left out.
    ///
    /// # Errors
    /// When `.nuvira/runs` cannot be listed.
    pub fn list(&self) -> Result<Vec<StoredRun>, RunsError> {
        Ok(self.list_all()?.0)
    }

    /// The run folders without `run.json`, newest first (by their last change): a run killed
    /// before its first write, or one that is starting right now ([`Incomplete::live`]).
    /// [`list`](Self::list) leaves them out; `nuvira runs` shows them as `incomplete`.
    ///
    /// # Errors
    /// When `.nuvira/runs` cannot be listed.
    pub fn incomplete(&self) -> Result<Vec<Incomplete>, RunsError> {
        Ok(self.list_all()?.1)
    }

    /// [`list`](Self::list) and [`incomplete`](Self::incomplete) from one look at the folder.
    ///
    /// # Errors
    /// When `.nuvira/runs` cannot be listed.
    pub fn list_all(&self) -> Result<(Vec<StoredRun>, Vec<Incomplete>), RunsError> {
        let Scan {
            mut runs,
            mut incomplete,
            ..
        } = self.scan_all()?;
        runs.sort_by(|a, b| {
            b.meta
                .started_ms
                .cmp(&a.meta.started_ms)
                .then_with(|| b.meta.id.cmp(&a.meta.id))
        });
        incomplete.sort_by(|a, b| {
            b.modified_ms
                .cmp(&a.modified_ms)
                .then_with(|| b.id.cmp(&a.id))
        });
        Ok((runs, incomplete))
    }

    /// The run `id`.
    ///
    /// # Errors
    /// [`RunsError::BadId`] for a name that is no run id, [`RunsError::NotFound`] when there is
    /// no such real folder, [`RunsError::Read`] when its `run.json` is unreadable.
    pub fn get(&self, id: &str) -> Result<StoredRun, RunsError> {
        if !is_run_id(id) {
            return Err(RunsError::BadId(id.to_owned()));
        }
        let Some(root) = &self.dir else {
            return Err(RunsError::NotFound(id.to_owned()));
        };
        let dir = root.join(id);
        if !is_real_dir(&dir) {
            return Err(RunsError::NotFound(id.to_owned()));
        }
        StoredRun::load(dir, id)
    }

    /// Removes the runs `policy` does not keep (see [`Retention`]), never `protect`ed ones nor
    /// runs still going on, and the abandoned folders ([`Incomplete`]: no `run.json`, no
    /// process holding the folder's lock, untouched for [`DEFAULT_GRACE`]); with `dry_run`,
    /// only says which. Only real folders named by a run id directly in `.nuvira/runs` are
    /// ever removed; a symlink there is ignored (never followed, never removed), as is
    /// anything else.
    ///
    /// # Errors
    /// When the folder cannot be listed or a run folder cannot be removed.
    pub fn gc(
        &self,
        policy: Retention,
        protect: &[&str],
        dry_run: bool,
    ) -> Result<GcOutcome, RunsError> {
        self.gc_with_grace(policy, protect, dry_run, DEFAULT_GRACE)
    }

    /// [`gc`](Self::gc) with another grace period for folders without `run.json`.
    ///
    /// # Errors
    /// As [`gc`](Self::gc).
    pub fn gc_with_grace(
        &self,
        policy: Retention,
        protect: &[&str],
        dry_run: bool,
        grace: std::time::Duration,
    ) -> Result<GcOutcome, RunsError> {
        // `.nuvira/runs` is opened once; every scan, lock, read and removal below goes
        // through that handle and the handles of the run folders opened from it (never
        // following a symlink), so swapping `.nuvira/runs` or a run folder for a symlink
        // meanwhile redirects nothing.
        let Some(root) = self.open_root()? else {
            return Ok(GcOutcome::default());
        };
        let Scan {
            mut runs,
            incomplete,
            ignored,
        } = scan(&root)?;
        nuvira_workspace::fault_point("gc-scanned");
        runs.sort_by(|a, b| {
            b.meta
                .started_ms
                .cmp(&a.meta.started_ms)
                .then_with(|| b.meta.id.cmp(&a.meta.id))
        });
        let now = nuvira_api::now_ms();
        let mut out = GcOutcome {
            ignored,
            ..GcOutcome::default()
        };
        let mut doomed = Vec::new();
        for (rank, run) in runs.iter().enumerate() {
            let too_many = policy.keep_runs.is_some_and(|n| rank >= n);
            let too_old = policy.keep_days.is_some_and(|d| {
                now.saturating_sub(run.meta.started_ms) > d.saturating_mul(86_400_000)
            });
            // Alive by its pid, or by the folder lock its process holds (a pid reused by
            // another process keeps a run; a lock never outlives its process).
            let live = run.status() == "running"
                || (run.meta.status == "running"
                    && root
                        .open_dir(&run.meta.id)
                        .and_then(|d| d.locked())
                        .unwrap_or(true));
            if (too_many || too_old) && !live && !protect.contains(&run.meta.id.as_str()) {
                doomed.push(run);
            } else {
                out.kept += 1;
            }
        }
        doomed.reverse();
        for run in doomed {
            let id = &run.meta.id;
            let held = match root.open_dir(id) {
                Ok(held) => held,
                // Removed since the scan (by another gc): nothing to say.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.ignored.push((id.clone(), io_reason(&e)));
                    continue;
                }
            };
            // As for an abandoned folder: the lock is taken, and held while the folder goes. A
            // resume that reopened the run since the scan holds it (the run is kept), and one
            // that starts now finds it taken (and refuses) instead of losing its folder.
            match held.try_lock() {
                Ok(Some(_locked)) => {
                    // Removed by another gc meanwhile (that held the lock until it was gone).
                    if held.is_removed() {
                        continue;
                    }
                    // `run.json` again, now that nobody can be changing it: a resume that came
                    // and went since the scan leaves another one (and a new start).
                    match load_held(&held, run.dir.clone(), id) {
                        Ok(now) if now.meta == run.meta => {}
                        _ => {
                            out.kept += 1;
                            continue;
                        }
                    }
                    nuvira_workspace::fault_point("gc-locked");
                    if dry_run || remove_held(&root, id, held, &mut out.ignored) {
                        out.removed.push(id.clone());
                    }
                }
                Ok(None) => out.kept += 1,
                Err(_) if held.is_removed() => {}
                Err(e) => out.ignored.push((id.clone(), io_reason(&e))),
            }
        }
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let mut abandoned: Vec<&Incomplete> = incomplete
            .iter()
            .filter(|i| {
                let idle = now.saturating_sub(i.modified_ms) >= grace_ms;
                let dead = idle && !protect.contains(&i.id.as_str());
                if !dead {
                    out.kept_incomplete += 1;
                }
                dead
            })
            .collect();
        abandoned.sort_by(|a, b| a.modified_ms.cmp(&b.modified_ms).then(a.id.cmp(&b.id)));
        for dead in abandoned {
            let held = match root.open_dir(&dead.id) {
                Ok(held) => held,
                // Removed since the scan (by another gc): nothing to say.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.ignored.push((dead.id.clone(), io_reason(&e)));
                    continue;
                }
            };
            // The lock is taken, and held while the folder goes: a run that made the folder
            // but was slow to lock it finds the lock taken (its folder is not recorded), and a
            // run that holds it keeps it.
            match held.try_lock() {
                Ok(Some(_locked)) => {
                    if held.is_removed() {
                        continue;
                    }
                    // Still no `run.json` now that nobody can be writing one.
                    match held.kind_of(META_FILE) {
                        Ok(None) => {}
                        Ok(Some(_)) => {
                            out.kept_incomplete += 1;
                            continue;
                        }
                        Err(e) => {
                            out.ignored.push((dead.id.clone(), io_reason(&e)));
                            continue;
                        }
                    }
                    if dry_run || remove_held(&root, &dead.id, held, &mut out.ignored) {
                        out.abandoned.push(dead.id.clone());
                    }
                }
                Ok(None) => out.kept_incomplete += 1,
                Err(_) if held.is_removed() => {}
                Err(e) => out.ignored.push((dead.id.clone(), io_reason(&e))),
            }
        }
        Ok(out)
    }

    /// `.nuvira/runs` as a handle (opened without following a symlink), when it exists.
    fn open_root(&self) -> Result<Option<HeldDir>, RunsError> {
        Ok(self.ws.open_state_dir(&[RUNS_DIR])?)
    }

    /// Every real run folder: with a readable `run.json`, without one, and the entries left
    /// alone.
    fn scan_all(&self) -> Result<Scan, RunsError> {
        match self.open_root()? {
            Some(root) => scan(&root),
            None => Ok(Scan::default()),
        }
    }
}

/// Every real run folder of `root` (`.nuvira/runs`), each opened from its handle.
fn scan(root: &HeldDir) -> Result<Scan, RunsError> {
    let entries = root.entries().map_err(|e| RunsError::Read {
        path: root.path().to_owned(),
        reason: io_reason(&e),
    })?;
    let mut scan = Scan::default();
    for (name, kind) in entries {
        let name = name.to_string_lossy().into_owned();
        if !is_run_id(&name) {
            scan.ignored.push((name, "not a run id".to_owned()));
            continue;
        }
        match kind {
            HeldKind::Dir => {}
            HeldKind::Symlink => {
                scan.ignored
                    .push((name, "a symlink, never followed".to_owned()));
                continue;
            }
            _ => {
                scan.ignored.push((name, "not a folder".to_owned()));
                continue;
            }
        }
        // Opened without following a symlink: one swapped in since the listing is refused.
        let held = match root.open_dir(&name) {
            Ok(held) => held,
            // Removed since the listing (by another gc).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                scan.ignored.push((name, io_reason(&e)));
                continue;
            }
        };
        let dir = root.path().join(&name);
        match load_held(&held, dir.clone(), &name) {
            Ok(run) => scan.runs.push(run),
            Err(_) if matches!(held.kind_of(META_FILE), Ok(None)) => {
                scan.incomplete.push(Incomplete::of_held(&held, dir, name));
            }
            Err(e) => scan.ignored.push((name, e.to_string())),
        }
    }
    Ok(scan)
}

/// The run `id` from the handle of its folder (`dir` is its path, for messages and for the
/// readers that come later).
fn load_held(held: &HeldDir, dir: PathBuf, id: &str) -> Result<StoredRun, RunsError> {
    let path = dir.join(META_FILE);
    let bytes = held.read_file(META_FILE, MAX_FILE_BYTES).map_err(|e| {
        let reason = if e.kind() == std::io::ErrorKind::FileTooLarge {
            "it is larger than 256 MiB".to_owned()
        } else {
            io_reason(&e)
        };
        RunsError::Read {
            path: path.clone(),
            reason,
        }
    })?;
    StoredRun::parse(dir, id, &bytes)
}

/// Removes the run folder `id` of `root` through its handle (see [`HeldDir::remove_entry`]:
/// never through a symlink, only the folder that was opened, and only while it is still
/// `.nuvira/runs/<id>`); `true` when it is gone. One that cannot be removed (or was moved
/// away meanwhile) is reported in `ignored` and left: the rest of gc goes on.
fn remove_held(
    root: &HeldDir,
    id: &str,
    held: HeldDir,
    ignored: &mut Vec<(String, String)>,
) -> bool {
    let why = match root.remove_entry(id, held) {
        Ok(Removal::Removed) => return true,
        // Another gc removed it meanwhile: not this one's, and nothing to report.
        Ok(Removal::Gone) => return false,
        Ok(Removal::Moved) => {
            "it was moved out of .nuvira/runs during gc: left where it went".to_owned()
        }
        Ok(Removal::TooDeep) => format!(
            "it holds folders nested deeper than {MAX_REMOVE_DEPTH} levels: left as it is; remove it by hand"
        ),
        Ok(_) => "it was not removed".to_owned(),
        Err(e) => format!("it could not be removed: {}", io_reason(&e)),
    };
    ignored.push((id.to_owned(), why));
    false
}

/// A run folder without `run.json`: a run killed before its first write (between making its
/// folder and writing `run.json`), or one starting right now. [`RunStore::gc`] removes it
/// when no process holds the folder's lock ([`live`](Self::live)) and nothing in it changed
/// for the grace period.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Incomplete {
    /// The folder's name (a run id).
    pub id: String,
    /// `.nuvira/runs/<id>`.
    pub dir: PathBuf,
    /// The last change to the folder or an entry in it (ms since the Unix epoch; 0 when
    /// unknown).
    pub modified_ms: u64,
}

impl Incomplete {
    fn of_held(held: &HeldDir, dir: PathBuf, id: String) -> Self {
        let modified_ms = held
            .entry_modified_ms()
            .into_iter()
            .fold(held.modified_ms(), u64::max);
        Self {
            id,
            dir,
            modified_ms,
        }
    }

    /// Whether a process holds the folder's lock: a run that is starting (every run holds
    /// the lock of its folder from the moment it made it until it ends).
    pub fn live(&self) -> bool {
        folder_locked(&self.dir).unwrap_or(false)
    }
}

/// Run folders with `run.json`, without it, and the entries left alone with why.
#[derive(Default)]
struct Scan {
    runs: Vec<StoredRun>,
    incomplete: Vec<Incomplete>,
    ignored: Vec<(String, String)>,
}

/// One run of the history: its folder and `run.json`.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// The run's folder, `.nuvira/runs/<id>`.
    pub dir: PathBuf,
    /// Its `run.json`.
    pub meta: RunMeta,
}

impl StoredRun {
    /// A run folder given by its path (e.g. one copied from another repository for
    /// `nuvira replay`): its name must be a run id and it must be a real folder.
    ///
    /// # Errors
    /// [`RunsError::BadId`], [`RunsError::NotFound`] or [`RunsError::Read`].
    pub fn open_dir(dir: &Path) -> Result<Self, RunsError> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_run_id(&name) {
            return Err(RunsError::BadId(name));
        }
        if !is_real_dir(dir) {
            return Err(RunsError::NotFound(name));
        }
        Self::load(dir.to_owned(), &name)
    }

    fn load(dir: PathBuf, id: &str) -> Result<Self, RunsError> {
        let bytes = read_capped(&dir.join(META_FILE))?;
        Self::parse(dir, id, &bytes)
    }

    /// The run `id` of folder `dir` from the bytes of its `run.json`.
    fn parse(dir: PathBuf, id: &str, bytes: &[u8]) -> Result<Self, RunsError> {
        let path = dir.join(META_FILE);
        let meta: RunMeta = serde_json::from_slice(bytes).map_err(|e| RunsError::Read {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if meta.id != id {
            return Err(RunsError::Read {
                path,
                reason: format!("it names run `{}`, not `{id}`", meta.id),
            });
        }
        Ok(Self { dir, meta })
    }

    /// The status to show: `run.json`'s, except that a run still marked `running` whose
    /// process is gone is `interrupted`.
    pub fn status(&self) -> &str {
        if self.meta.status == "running" && !process_alive(self.meta.pid) {
            "interrupted"
        } else {
            &self.meta.status
        }
    }

    /// `plan.json`.
    pub fn plan_path(&self) -> PathBuf {
        self.dir.join(PLAN_FILE)
    }

    /// `events.jsonl`.
    pub fn events_path(&self) -> PathBuf {
        self.dir.join(EVENTS_FILE)
    }

    /// `report.json` (missing while the run goes on, or when it was killed).
    pub fn report_path(&self) -> PathBuf {
        self.dir.join(REPORT_FILE)
    }

    /// `steps.jsonl`.
    pub fn steps_path(&self) -> PathBuf {
        self.dir.join(STEPS_FILE)
    }

    /// `calls/`.
    pub fn calls_dir(&self) -> PathBuf {
        self.dir.join(CALLS_DIR)
    }

    /// The validated plan.
    ///
    /// # Errors
    /// [`RunsError::Read`] when `plan.json` is missing or malformed.
    pub fn plan(&self) -> Result<ExecutionPlan, RunsError> {
        read_json(&self.plan_path())
    }

    /// The report: `report.json`, or, for a run that has none (killed, or going on), the report
    /// rebuilt from `events.jsonl`.
    ///
    /// # Errors
    /// [`RunsError::Read`] when neither can be read.
    pub fn report(&self) -> Result<ExecutionReport, RunsError> {
        let path = self.report_path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            return read_json(&path);
        }
        let events = self.events_path();
        check_plain_file(&events)?;
        nuvira_report::read_jsonl_file(&events).map_err(|e| RunsError::Read {
            path: events,
            reason: e.to_string(),
        })
    }

    /// The model-call records, in call order.
    ///
    /// # Errors
    /// [`RunsError::Read`] when a record is unreadable.
    pub fn calls(&self) -> Result<Vec<calls::CallRecord>, RunsError> {
        calls::read_calls(&self.calls_dir())
    }
}

/// Reads a JSON file of a run folder (a plain file, capped).
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, RunsError> {
    let bytes = read_capped(path)?;
    serde_json::from_slice(&bytes).map_err(|e| RunsError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Refuses anything but a plain file (a symlink is never followed).
pub(crate) fn check_plain_file(path: &Path) -> Result<u64, RunsError> {
    let bad = |reason: &str| RunsError::Read {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(bad("it is a symlink, which is never followed")),
        Ok(m) if !m.is_file() => Err(bad("it is not a file")),
        Ok(m) if m.len() > MAX_FILE_BYTES => Err(bad("it is larger than 256 MiB")),
        Ok(m) => Ok(m.len()),
        Err(e) => Err(bad(&io_reason(&e))),
    }
}

/// Reads a plain file of a run folder, at most [`MAX_FILE_BYTES`].
pub(crate) fn read_capped(path: &Path) -> Result<Vec<u8>, RunsError> {
    check_plain_file(path)?;
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| RunsError::Read {
        path: path.to_owned(),
        reason: io_reason(&e),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| RunsError::Read {
            path: path.to_owned(),
            reason: io_reason(&e),
        })?;
    Ok(bytes)
}

/// Whether `path` is a folder itself, not a symlink to one.
pub(crate) fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Whether process `pid` is alive (Linux: `/proc/<pid>`; elsewhere assumed alive).
pub(crate) fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if pid == std::process::id() {
        return true;
    }
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true
    }
}

/// An I/O error in words, without the `(os error N)` suffix.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// `sha256:<hex>` of some bytes.
pub fn hash_bytes(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in digest {
        use std::fmt::Write;
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_plain_names() {
        assert!(is_run_id("run-1764580000-0a1f"));
        assert!(!is_run_id("run-"));
        assert!(!is_run_id("run-../../etc"));
        assert!(!is_run_id("../run-1"));
        assert!(!is_run_id("run-\u{1b}[31m"));
    }
}
