//! The rollback journal: original contents recorded durably before a batch writes anything.
//!
//! Layout: `.nuvira/journal/<txn-id>/txn.json` (the manifest) and `<n>.orig` (one file of
//! original bytes per changed file that existed). A transaction is
//!
//! 1. **pending** — every original is on disk and fsynced and the manifest says `pending`
//!    (written atomically) *before* the first target file is touched;
//! 2. **committed** — every write of the batch is durable;
//! 3. **rolled-back** — the originals were restored (and files the batch created removed).
//!
//! A crash leaves at most one transaction per process `pending`; [`Journal::recover_incomplete`]
//! rolls those back. Committed transactions stay until `nuvira rollback` or the engine (for a
//! cancelled or failed run, [`Journal::rollback_run`]) undoes them. Transaction ids start with
//! the creation time in milliseconds, so sorting them sorts by age.
//!
//! ## Later changes are never overwritten silently
//!
//! A commit also records what each file looked like right after the batch (its length and
//! SHA-256, or that it was deleted). Before a rollback restores anything, it compares every file
//! with that record; a file edited, deleted or created since the run wrote it is a *changed*
//! file, and [`OnChanged`] says what happens: by default ([`OnChanged::Refuse`]) the rollback
//! restores nothing and fails with [`JournalError::Changed`] naming each file, so a user's work
//! after the run is never lost to an undo. [`OnChanged::Keep`] restores every other file and
//! leaves the changed ones as they are (the engine's own rollback of a failed run does this);
//! [`OnChanged::Overwrite`] restores them anyway. Transactions recorded before this check
//! existed carry no record and are restored as before.
//!
//! ## Fault injection (a test hook, not for production)
//!
//! Only in builds with the cargo feature `fault-injection` (off by default, turned on by the
//! dev-dependencies of the tests that need it): when the environment variable
//! `NUVIRA_FAULT_CRASH_AFTER_WRITES` holds a positive integer `N`, a transaction aborts the
//! process (`std::process::abort`, no unwinding, no cleanup — like a kill) right after its `N`th
//! durable write of a target file. It exists only so that tests can prove crash recovery on a
//! real process. A build without the feature never reads the variable; never enable the
//! feature in a build that users run.

use crate::atomic::{atomic_write, mode_of, remove_durably, sync_dir};
use crate::lock::{LockError, RepoLock, Seen};
use crate::{Workspace, WorkspaceError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Serialises transactions and rollbacks within this process: a rollback of a run (after a
/// cancellation, say) waits for a batch still being written to commit, instead of racing it.
static JOURNAL_LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    JOURNAL_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The test hook's environment variable (only with the cargo feature `fault-injection`, which
/// is off by default and not for production): when it holds a positive integer `N`, a
/// transaction aborts the process (`std::process::abort`, no cleanup, like a kill) right after
/// its `N`th durable file write, so tests can prove crash recovery on a real process. Builds
/// without the feature never read it.
#[cfg(feature = "fault-injection")]
pub const FAULT_CRASH_AFTER_WRITES_ENV: &str = "NUVIRA_FAULT_CRASH_AFTER_WRITES";

const MANIFEST: &str = "txn.json";
const MANIFEST_VERSION: u32 = 1;

/// How many transactions the journal keeps after a commit (older ones are pruned).
pub const KEEP_TRANSACTIONS: usize = 200;

/// What a journal operation failed at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A path was refused or a file could not be touched.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The journal itself could not be read or written.
    #[error("{action} journal `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The journal file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A manifest could not be understood.
    #[error("read journal `{path}`: {reason}; move the folder away to discard it")]
    Corrupt {
        /// The manifest.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Files changed after the run wrote them; nothing was restored ([`OnChanged::Refuse`]).
    #[error(
        "{} changed after run `{run_id}` wrote {}: {}; nothing was restored, so those changes are safe. Save them elsewhere and retry, restore only the other files, or overwrite them",
        count(files.len()),
        if files.len() == 1 { "it" } else { "them" },
        describe(files)
    )]
    Changed {
        /// The run being rolled back.
        run_id: String,
        /// Each changed file, in path order.
        files: Vec<ChangedFile>,
    },
    /// Another process is still writing a batch of the run.
    #[error(
        "run `{run_id}` is still being written by process {pid}: wait for it to finish (or stop it), then roll back"
    )]
    Busy {
        /// The run.
        run_id: String,
        /// The process writing it.
        pid: u32,
    },
    /// A file to restore is reached through a folder that is now a symlink.
    #[error(
        "`{path}` is now reached through the symlink `{link}`, so restoring it would write wherever that points; nothing was restored: replace the symlink by a folder (or remove it) and retry"
    )]
    ThroughSymlink {
        /// The file.
        path: String,
        /// The symlink on its path.
        link: String,
    },
    /// A write of the batch failed; every file already written was restored.
    #[error(
        "{source}; the files already written were restored, so nothing changed: fix that and retry"
    )]
    WriteFailed {
        /// The failed write.
        #[source]
        source: WorkspaceError,
    },
    /// Another process holds the repository's lock (see [`RepoLock`]).
    #[error(transparent)]
    Locked(#[from] LockError),
    /// A file changed between the batch's read and its write (compare-and-swap, see
    /// [`Transaction::expect`]); the batch was aborted, its written files restored.
    #[error(
        "`{path}` changed since the batch read it ({what}), so the batch was aborted: nothing was written and that change is kept; run the edits again on the new content"
    )]
    ChangedSinceRead {
        /// The file.
        path: String,
        /// How it changed: `edited`, `deleted`, `created`, ...
        what: String,
    },
    /// A rollback restored some files but not all; the journal keeps the rest, so running
    /// the rollback again finishes it once the causes are fixed.
    #[error(
        "roll back run `{run_id}`: {}; {} other file(s) were restored, and the journal keeps the rest: fix that and roll back again to finish",
        not_restored(failed),
        restored.len()
    )]
    RestoreIncomplete {
        /// The run.
        run_id: String,
        /// The files restored (or removed), in path order.
        restored: Vec<String>,
        /// Each file that could not be restored, and why.
        failed: Vec<NotRestored>,
    },
    /// A batch failed, and some of the files it had written could not be restored; the
    /// journal keeps the batch pending, so the next command (or `nuvira rollback`) finishes.
    #[error(
        "{cause}; restoring the files the batch had written failed too: {}; the journal keeps the batch: fix that and roll back to finish",
        not_restored(failed)
    )]
    NotUndone {
        /// Why the batch failed.
        #[source]
        cause: Box<JournalError>,
        /// Each written file that could not be restored, and why.
        failed: Vec<NotRestored>,
    },
}

/// A file a rollback could not restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotRestored {
    /// The workspace-relative path.
    pub path: String,
    /// Why, naming the file (e.g. ``restore `a.txt`: Permission denied (os error 13)``).
    pub cause: String,
}

fn not_restored(failed: &[NotRestored]) -> String {
    failed
        .iter()
        .map(|f| f.cause.clone())
        .collect::<Vec<_>>()
        .join("; ")
}

fn count(n: usize) -> String {
    if n == 1 {
        "1 file".to_owned()
    } else {
        format!("{n} files")
    }
}

fn describe(files: &[ChangedFile]) -> String {
    files
        .iter()
        .map(|f| format!("`{}` ({})", f.path, f.what))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a rollback does with a file that changed after the run wrote it: edited, deleted or
/// created since, as told by the length and SHA-256 its commit recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnChanged {
    /// Restore nothing and fail with [`JournalError::Changed`].
    #[default]
    Refuse,
    /// Restore every other file; leave the changed ones as they are (listed in
    /// [`RolledBack::kept`]).
    Keep,
    /// Restore them too: the later changes are lost.
    Overwrite,
}

/// A file that changed after a run wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedFile {
    /// The workspace-relative path.
    pub path: String,
    /// How it changed: `edited`, `deleted`, `created again`, `replaced by a folder`.
    pub what: String,
}

/// What a file looked like: absent, or bytes of this length and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum FileState {
    Absent,
    Folder,
    File {
        len: u64,
        sha256: String,
    },
    /// Never recorded: the path (or the folder named) is a symlink now.
    Symlink {
        at: String,
    },
    /// Never recorded: a FIFO, socket or device.
    Special,
}

impl FileState {
    fn of_bytes(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self::File {
            len: bytes.len() as u64,
            sha256: hex(&sha2::Sha256::digest(bytes)),
        }
    }

    /// A file's state, hashed in chunks (a large file is never held in memory whole).
    fn of_file(abs: &Path) -> io::Result<Self> {
        use sha2::Digest as _;
        use std::io::Read as _;
        let mut file = std::fs::File::open(abs)?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut len = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        Ok(Self::File {
            len,
            sha256: hex(&hasher.finalize()),
        })
    }

    /// The state of `rel` under `root` now, looked at without following any symlink: a link
    /// on the way (the file itself or a folder above it) is reported as such, and a FIFO is
    /// never opened. A file whose length differs from `expected`'s is not read.
    fn on_disk(root: &Path, rel: &str, expected: Option<&Self>) -> io::Result<Self> {
        if let Some(at) = symlink_on_path(root, rel) {
            return Ok(Self::Symlink { at });
        }
        let abs = root.join(rel);
        match std::fs::symlink_metadata(&abs) {
            Ok(meta) if meta.is_dir() => Ok(Self::Folder),
            Ok(meta) if !meta.is_file() => Ok(Self::Special),
            Ok(meta) => match expected {
                Some(Self::File { len, .. }) if *len != meta.len() => Ok(Self::File {
                    len: meta.len(),
                    sha256: String::new(),
                }),
                _ => Self::of_file(&abs),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::Absent),
            Err(e) => Err(e),
        }
    }

    /// How `now` differs from `self` (the state the run left), for a [`ChangedFile`].
    fn change_to(&self, now: &Self, rel: &str) -> String {
        match (self, now) {
            (_, Self::Symlink { at }) if at == rel => "replaced by a symlink".into(),
            (_, Self::Symlink { at }) => format!("reached through the symlink `{at}`"),
            (_, Self::Special) => "replaced by a FIFO, socket or device".into(),
            (_, Self::Folder) => "replaced by a folder".into(),
            (Self::File { .. }, Self::Absent) => "deleted".into(),
            (Self::Absent | Self::Folder, Self::File { .. }) => "created again".into(),
            _ => "edited".into(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The first component of `rel` under `root`, from the top, that is a symlink (as a
/// workspace-relative path), if any.
fn symlink_on_path(root: &Path, rel: &str) -> Option<String> {
    let mut path = root.to_path_buf();
    let mut shown = String::new();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        path.push(part);
        if !shown.is_empty() {
            shown.push('/');
        }
        shown.push_str(part);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return Some(shown),
            Ok(_) => {}
            // Missing: nothing below it exists, links included.
            Err(_) => return None,
        }
    }
    None
}

fn jio<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> JournalError + 'a {
    move |source| JournalError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// One change to the workspace, by workspace-relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Create or replace a file.
    Write {
        /// The file.
        path: String,
        /// Its new bytes.
        content: Vec<u8>,
        /// The mode for the file (e.g. a renamed file keeps its source's); `None` keeps the
        /// target's current mode, or `0o644` for a new file.
        mode: Option<u32>,
    },
    /// Remove a file.
    Delete {
        /// The file.
        path: String,
    },
}

impl FileOp {
    /// The file the op touches.
    pub fn path(&self) -> &str {
        match self {
            Self::Write { path, .. } | Self::Delete { path } => path,
        }
    }
}

/// The state of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnState {
    /// Originals recorded, writes possibly in progress (or interrupted by a crash).
    Pending,
    /// Every write is durable.
    Committed,
    /// The originals were restored.
    RolledBack,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    id: String,
    run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step_id: Option<String>,
    /// The process that wrote it: a pending transaction of a live process is not recovered.
    #[serde(default)]
    pid: u32,
    created_ms: u64,
    state: TxnState,
    entries: Vec<Entry>,
    /// Folders the batch created, parents first; removed on rollback when empty.
    #[serde(default)]
    created_dirs: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    path: String,
    /// `None`: the file did not exist before the batch.
    original: Option<Original>,
    /// What the batch left (recorded before the first write; absent in older journals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<FileState>,
    /// The permission bits the written file had at commit (Unix; absent before the commit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_mode: Option<u32>,
    /// Restored by a rollback that could not restore every file (the transaction is not rolled
    /// back yet; a retry finishes it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    restored: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Original {
    blob: String,
    len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<u32>,
}

/// What a rollback restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RolledBack {
    /// The transaction.
    pub txn_id: String,
    /// The run it belonged to.
    pub run_id: String,
    /// The step, if any.
    pub step_id: Option<String>,
    /// The files restored (or removed, for files the batch created).
    pub paths: Vec<String>,
    /// Of `paths`, those removed because the batch had created them.
    pub removed: Vec<String>,
    /// Files left as they were because they changed after the run wrote them
    /// ([`OnChanged::Keep`]).
    pub kept: Vec<String>,
}

/// The rollback journal of one workspace.
#[derive(Debug, Clone)]
pub struct Journal {
    ws: Workspace,
    dir: PathBuf,
}

impl Journal {
    /// The journal of a workspace (nothing is created until a transaction writes).
    pub fn new(ws: &Workspace) -> Self {
        Self {
            dir: ws.state_dir().join("journal"),
            ws: ws.clone(),
        }
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// Starts a transaction for a run (and step). Nothing is written until
    /// [`Transaction::apply`].
    ///
    /// Transactions and rollbacks of one process run one at a time: `begin` waits for the
    /// transaction in flight, and the other `Journal` methods wait for it to end. So do not call
    /// them on the thread that holds an open transaction.
    pub fn begin(&self, run_id: &str, step_id: Option<&str>) -> Transaction<'_> {
        let guard = lock();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let created_ms = nuvira_api::now_ms();
        let id = format!(
            "{created_ms:013}-{:07}-{:05}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed) % 100_000
        );
        #[cfg(feature = "fault-injection")]
        let fault = std::env::var(FAULT_CRASH_AFTER_WRITES_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n > 0);
        Transaction {
            _guard: guard,
            journal: self,
            dir: self.dir.join(&id),
            manifest: Manifest {
                version: MANIFEST_VERSION,
                id,
                run_id: run_id.to_owned(),
                step_id: step_id.map(str::to_owned),
                pid: std::process::id(),
                created_ms,
                state: TxnState::Pending,
                entries: Vec::new(),
                created_dirs: Vec::new(),
            },
            on_disk: false,
            finished: false,
            writes_done: 0,
            repo_lock: None,
            written: BTreeSet::new(),
            expected: HashMap::new(),
            #[cfg(feature = "fault-injection")]
            fault,
        }
    }

    /// Rolls back every transaction a crash left `pending`. Call it at every start, before
    /// anything else touches the workspace.
    ///
    /// # Errors
    /// When the journal cannot be read or a file cannot be restored.
    pub fn recover_incomplete(&self) -> Result<Vec<RolledBack>, JournalError> {
        let _guard = lock();
        let Some(_repo) = self.repo_lock()? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (dir, manifest) in self.transactions()? {
            match manifest {
                // Crashed before its manifest was durable: nothing was written yet.
                None => {
                    std::fs::remove_dir_all(&dir).map_err(jio("remove", &dir))?;
                }
                // Another live process is mid-batch: its transaction is not ours to undo.
                Some(m) if m.state == TxnState::Pending && is_other_live_process(m.pid) => {}
                Some(m) if m.state == TxnState::Pending => {
                    // A file edited after the crash keeps the edit (and is named in `kept`).
                    let one = [(dir, m)];
                    let keep: BTreeSet<String> = self
                        .changed_since(&one)?
                        .into_iter()
                        .map(|c| c.path)
                        .collect();
                    let [(dir, m)] = one;
                    out.push(self.restore(&dir, m, &keep, None)?);
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }

    /// Rolls back every transaction of a run that is not rolled back yet, newest first (for
    /// a cancelled or failed run). Returns what was restored; empty when there was nothing.
    ///
    /// # Errors
    /// When the journal cannot be read or a file cannot be restored.
    ///
    /// A file changed since the run wrote it makes the whole rollback fail with
    /// [`JournalError::Changed`] before anything is restored; see [`Journal::rollback_run_with`].
    pub fn rollback_run(&self, run_id: &str) -> Result<Vec<RolledBack>, JournalError> {
        self.rollback_run_with(run_id, OnChanged::Refuse)
    }

    /// [`Journal::rollback_run`], with a choice of what happens to files changed since the run
    /// wrote them.
    ///
    /// # Errors
    /// [`JournalError::Changed`] (with [`OnChanged::Refuse`]; nothing restored), or when the
    /// journal cannot be read or a file cannot be restored.
    pub fn rollback_run_with(
        &self,
        run_id: &str,
        on_changed: OnChanged,
    ) -> Result<Vec<RolledBack>, JournalError> {
        let _guard = lock();
        let Some(_repo) = self.repo_lock()? else {
            return Ok(Vec::new());
        };
        let txns: Vec<(PathBuf, Manifest)> = self
            .transactions()?
            .into_iter()
            .rev()
            .filter_map(|(dir, m)| m.map(|m| (dir, m)))
            .filter(|(_, m)| m.run_id == run_id && m.state != TxnState::RolledBack)
            .collect();
        if let Some((_, m)) = txns
            .iter()
            .find(|(_, m)| m.state == TxnState::Pending && is_other_live_process(m.pid))
        {
            return Err(JournalError::Busy {
                run_id: run_id.to_owned(),
                pid: m.pid,
            });
        }
        let keep: BTreeSet<String> = match on_changed {
            OnChanged::Overwrite => {
                // Even when told to overwrite, never write through a folder that became a
                // symlink: that would write wherever it points.
                for (_, m) in &txns {
                    for entry in &m.entries {
                        self.recorded(&entry.path)?;
                        if let Some(at) = symlink_on_path(self.ws.root(), &entry.path)
                            && at != entry.path
                        {
                            return Err(JournalError::ThroughSymlink {
                                path: entry.path.clone(),
                                link: at,
                            });
                        }
                    }
                }
                BTreeSet::new()
            }
            OnChanged::Refuse | OnChanged::Keep => {
                let changed = self.changed_since(&txns)?;
                if on_changed == OnChanged::Refuse && !changed.is_empty() {
                    return Err(JournalError::Changed {
                        run_id: run_id.to_owned(),
                        files: changed,
                    });
                }
                changed.into_iter().map(|c| c.path).collect()
            }
        };
        let mut out: Vec<RolledBack> = Vec::with_capacity(txns.len());
        for (dir, m) in txns {
            // Newest first, and no older batch before a newer one is fully undone: a retry
            // then starts where this one stopped.
            match self.restore(&dir, m, &keep, None) {
                Ok(r) => out.push(r),
                Err(JournalError::RestoreIncomplete {
                    run_id,
                    restored,
                    failed,
                }) => {
                    let mut all: BTreeSet<String> = out.into_iter().flat_map(|r| r.paths).collect();
                    all.extend(restored);
                    return Err(JournalError::RestoreIncomplete {
                        run_id,
                        restored: all.into_iter().collect(),
                        failed,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The repository lock for one operation, or `None` when there is no journal yet (so
    /// nothing to recover or roll back, and no `.nuvira/` is created just to look).
    fn repo_lock(&self) -> Result<Option<RepoLock>, JournalError> {
        if !self.dir.exists() {
            return Ok(None);
        }
        Ok(Some(RepoLock::for_journal(&self.ws)?))
    }

    /// Every file of these transactions (newest first) that differs from what the newest of
    /// them to touch it left, in path order.
    ///
    /// A pending batch (a crash interrupted it) may have written a file or not: either what it
    /// meant to write or the original is fine, anything else changed after the crash.
    fn changed_since(
        &self,
        txns: &[(PathBuf, Manifest)],
    ) -> Result<Vec<ChangedFile>, JournalError> {
        let mut seen = BTreeSet::new();
        let mut changed = Vec::new();
        for (dir, m) in txns {
            for entry in m.entries.iter().rev() {
                if !seen.insert(entry.path.as_str()) {
                    continue;
                }
                let Some(after) = &entry.after else {
                    continue;
                };
                self.recorded(&entry.path)?;
                let now = FileState::on_disk(self.ws.root(), &entry.path, Some(after))
                    .map_err(|e| WorkspaceError::io("read", &entry.path, e))?;
                // An earlier rollback that could not finish restored this one already: it must
                // still hold its original.
                if entry.restored {
                    if !self.is_original(dir, entry, &now, &entry.path)? {
                        changed.push(ChangedFile {
                            path: entry.path.clone(),
                            what: "edited after a rollback restored it".into(),
                        });
                    }
                    continue;
                }
                if now == *after {
                    let mode = entry
                        .after_mode
                        .zip(mode_of(&self.ws.root().join(&entry.path)))
                        .filter(|(was, is)| was != is);
                    if let Some((was, is)) = mode {
                        changed.push(ChangedFile {
                            path: entry.path.clone(),
                            what: format!("mode changed from {was:o} to {is:o}"),
                        });
                    }
                    continue;
                }
                if m.state == TxnState::Pending
                    && self.is_original(dir, entry, &now, &entry.path)?
                {
                    continue;
                }
                changed.push(ChangedFile {
                    path: entry.path.clone(),
                    what: after.change_to(&now, &entry.path),
                });
            }
        }
        changed.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(changed)
    }

    /// A path a batch recorded, as a path under the root, checked without following symlinks:
    /// relative, inside the workspace, outside `.nuvira/` and `.git/` (a manifest could have
    /// been edited by hand).
    fn recorded(&self, rel: &str) -> Result<PathBuf, JournalError> {
        let parts: Vec<&str> = rel.split('/').collect();
        if rel.is_empty()
            || rel.starts_with('/')
            || rel.contains('\\')
            || parts
                .iter()
                .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(WorkspaceError::Escape {
                path: rel.to_owned(),
                reason: "the journal names a path that is not a plain path inside the workspace"
                    .into(),
            }
            .into());
        }
        if let Some(area) = parts
            .first()
            .filter(|p| **p == crate::STATE_DIR || **p == ".git")
        {
            return Err(WorkspaceError::Protected {
                path: rel.to_owned(),
                area: (*area).to_owned(),
            }
            .into());
        }
        Ok(self.ws.root().join(rel))
    }

    /// Whether `now` (the state of `rel`) is the original a batch recorded for `entry`.
    fn is_original(
        &self,
        dir: &Path,
        entry: &Entry,
        now: &FileState,
        rel: &str,
    ) -> Result<bool, JournalError> {
        let Some(orig) = &entry.original else {
            return Ok(*now == FileState::Absent);
        };
        let FileState::File { len, .. } = now else {
            return Ok(false);
        };
        if *len != orig.len {
            return Ok(false);
        }
        let blob = blob_path(dir, &orig.blob)?;
        let was = std::fs::read(&blob).map_err(jio("read", &blob))?;
        let is = std::fs::read(self.ws.root().join(rel))
            .map_err(|e| WorkspaceError::io("read", rel, e))?;
        Ok(was == is)
    }

    /// The run of the newest transaction that is not rolled back, if any.
    ///
    /// # Errors
    /// When the journal cannot be read.
    pub fn last_run(&self) -> Result<Option<String>, JournalError> {
        Ok(self
            .transactions()?
            .into_iter()
            .rev()
            .filter_map(|(_, m)| m)
            .find(|m| m.state != TxnState::RolledBack)
            .map(|m| m.run_id))
    }

    /// Rolls back the last run (`nuvira rollback`): every not-yet-rolled-back transaction of
    /// the newest run, newest first. `Ok(None)` when there is nothing to roll back.
    ///
    /// # Errors
    /// When the journal cannot be read or a file cannot be restored.
    pub fn rollback_last(&self) -> Result<Option<(String, Vec<RolledBack>)>, JournalError> {
        self.rollback_last_with(OnChanged::Refuse)
    }

    /// [`Journal::rollback_last`] with a choice for files changed since the run wrote them
    /// (see [`Journal::rollback_run_with`]).
    ///
    /// # Errors
    /// As [`Journal::rollback_run_with`].
    pub fn rollback_last_with(
        &self,
        on_changed: OnChanged,
    ) -> Result<Option<(String, Vec<RolledBack>)>, JournalError> {
        let Some(run) = self.last_run()? else {
            return Ok(None);
        };
        let done = self.rollback_run_with(&run, on_changed)?;
        Ok(Some((run, done)))
    }

    /// Deletes the records of all but the newest `keep` transactions (pending ones are always
    /// kept). Older changes can then no longer be rolled back. Returns how many were removed.
    ///
    /// # Errors
    /// When the journal cannot be listed or a folder cannot be removed.
    pub fn prune(&self, keep: usize) -> Result<usize, JournalError> {
        let _guard = lock();
        let Some(_repo) = self.repo_lock()? else {
            return Ok(0);
        };
        self.prune_locked(keep)
    }

    fn prune_locked(&self, keep: usize) -> Result<usize, JournalError> {
        let all = self.transactions()?;
        let excess = all.len().saturating_sub(keep);
        let mut removed = 0;
        for (dir, m) in all.into_iter().take(excess) {
            if m.is_some_and(|m| m.state == TxnState::Pending) {
                continue;
            }
            std::fs::remove_dir_all(&dir).map_err(jio("remove", &dir))?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Every transaction folder, oldest first, with its manifest (`None` when it has none).
    fn transactions(&self) -> Result<Vec<(PathBuf, Option<Manifest>)>, JournalError> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(jio("list", &self.dir)(e)),
        };
        let mut dirs: Vec<PathBuf> = read
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        dirs.sort();
        let mut out = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let path = dir.join(MANIFEST);
            let manifest = match std::fs::read(&path) {
                Ok(bytes) => Some(serde_json::from_slice::<Manifest>(&bytes).map_err(|e| {
                    JournalError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(jio("read", &path)(e)),
            };
            out.push((dir, manifest));
        }
        Ok(out)
    }

    /// Restores a transaction's originals (but for the paths in `keep`, and, when `only` is
    /// given, for every path not in it) and marks it rolled back. Idempotent: a file that
    /// already holds its original is not written again, so running it again after a crash or
    /// a failure halfway through gives the same result. A file that cannot be restored does not
    /// stop the others; when any failed, the transaction is left as it was (for a retry) and
    /// [`JournalError::RestoreIncomplete`] names each one.
    fn restore(
        &self,
        dir: &Path,
        mut m: Manifest,
        keep: &BTreeSet<String>,
        only: Option<&BTreeSet<String>>,
    ) -> Result<RolledBack, JournalError> {
        let mut paths = Vec::with_capacity(m.entries.len());
        let mut kept = Vec::new();
        let mut removed = Vec::new();
        let mut failed = Vec::new();
        // A manifest edited by hand fails before any file is touched.
        for entry in &m.entries {
            self.recorded(&entry.path)?;
            if let Some(orig) = &entry.original {
                blob_path(dir, &orig.blob)?;
            }
        }
        let mut done = Vec::new();
        for (i, entry) in m.entries.iter().enumerate().rev() {
            if only.is_some_and(|o| !o.contains(&entry.path)) {
                continue;
            }
            if keep.contains(&entry.path) {
                kept.push(entry.path.clone());
                continue;
            }
            match self.restore_entry(dir, entry) {
                Ok(()) => {
                    if entry.original.is_none() {
                        removed.push(entry.path.clone());
                    }
                    paths.push(entry.path.clone());
                    done.push(i);
                }
                Err(e) => failed.push(NotRestored {
                    path: entry.path.clone(),
                    cause: e.to_string(),
                }),
            }
        }
        paths.reverse();
        if !failed.is_empty() {
            // Remember what is restored, so the retry's check of later changes expects the
            // originals there; the transaction itself stays as it was.
            for i in done {
                m.entries[i].restored = true;
            }
            write_manifest(dir, &m)?;
            failed.reverse();
            paths.sort();
            return Err(JournalError::RestoreIncomplete {
                run_id: m.run_id,
                restored: paths,
                failed,
            });
        }
        for rel in m.created_dirs.iter().rev() {
            // Only removes an empty folder (never a symlink's target); anything the user put
            // there stays.
            if let Ok(dir) = self.recorded(rel)
                && symlink_on_path(self.ws.root(), rel).is_none()
            {
                let _ = std::fs::remove_dir(&dir);
            }
        }
        kept.reverse();
        removed.reverse();
        m.state = TxnState::RolledBack;
        write_manifest(dir, &m)?;
        Ok(RolledBack {
            txn_id: m.id,
            run_id: m.run_id,
            step_id: m.step_id,
            paths,
            removed,
            kept,
        })
    }

    /// Restores one file of a transaction (or removes it, when the batch created it).
    fn restore_entry(&self, dir: &Path, entry: &Entry) -> Result<(), JournalError> {
        // The path as the batch wrote it, not wherever a symlink put there since points.
        let lexical = self.recorded(&entry.path)?;
        match symlink_on_path(self.ws.root(), &entry.path) {
            // The file itself became a symlink: it is replaced, its target left alone.
            Some(at) if at == entry.path => std::fs::remove_file(&lexical)
                .map_err(|e| WorkspaceError::io("remove the symlink", &entry.path, e))?,
            Some(at) => {
                return Err(JournalError::ThroughSymlink {
                    path: entry.path.clone(),
                    link: at,
                });
            }
            None => {}
        }
        let Some(orig) = &entry.original else {
            remove_durably(&lexical).map_err(|e| WorkspaceError::io("remove", &entry.path, e))?;
            return Ok(());
        };
        let blob = blob_path(dir, &orig.blob)?;
        let bytes = std::fs::read(&blob).map_err(jio("read", &blob))?;
        if bytes.len() as u64 != orig.len {
            return Err(JournalError::Corrupt {
                path: blob,
                reason: format!(
                    "holds {} bytes, the manifest says {}",
                    bytes.len(),
                    orig.len
                ),
            });
        }
        // Already the original (never written, or restored by an earlier attempt): a write
        // would change nothing, and could fail where this file cannot be written.
        let same = std::fs::symlink_metadata(&lexical)
            .is_ok_and(|meta| meta.is_file() && meta.len() == orig.len)
            && std::fs::read(&lexical).is_ok_and(|now| now == bytes)
            && (orig.mode.is_none() || mode_of(&lexical) == orig.mode);
        if same {
            return Ok(());
        }
        if let Some(parent) = lexical.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| WorkspaceError::io("create folder for", &entry.path, e))?;
        }
        atomic_write(&lexical, &bytes, orig.mode)
            .map_err(|e| WorkspaceError::io("restore", &entry.path, e))?;
        Ok(())
    }
}

/// One batch of writes, all-or-nothing across crashes. Created by [`Journal::begin`].
///
/// Dropping a transaction that wrote something and was neither committed nor rolled back rolls
/// it back (best effort); a crash leaves it `pending` for [`Journal::recover_incomplete`].
#[derive(Debug)]
pub struct Transaction<'j> {
    _guard: MutexGuard<'static, ()>,
    journal: &'j Journal,
    dir: PathBuf,
    manifest: Manifest,
    on_disk: bool,
    finished: bool,
    writes_done: u64,
    /// The repository lock, from the first `apply` until the transaction ends.
    repo_lock: Option<RepoLock>,
    /// The files this transaction has written: all a failure restores.
    written: BTreeSet<String>,
    /// What the caller read of each file ([`Transaction::expect`]).
    expected: HashMap<String, Seen>,
    /// The `fault-injection` hook: abort after this many writes.
    #[cfg(feature = "fault-injection")]
    fault: Option<u64>,
}

impl Transaction<'_> {
    /// The transaction id (its folder name under `.nuvira/journal/`).
    pub fn id(&self) -> &str {
        &self.manifest.id
    }

    /// States what the caller read of `path` (as the op will name it) before computing the
    /// batch: [`apply`](Self::apply) then writes that file only while it still holds exactly
    /// that, checked when its original is recorded and again right before it is replaced, and
    /// otherwise aborts with [`JournalError::ChangedSinceRead`] (compare-and-swap). Paths
    /// without an expectation are written whatever they hold.
    pub fn expect(&mut self, path: &str, seen: Seen) {
        self.expected.insert(path.to_owned(), seen);
    }

    /// Applies ops: takes the repository lock ([`RepoLock`], held until the transaction ends),
    /// resolves every path (refusing escapes and protected folders), checks each file against
    /// what the caller read ([`expect`](Self::expect)), records the originals of files not yet
    /// recorded durably, then writes each op atomically. When a write fails, or a file changed
    /// since it was read, every file this transaction wrote — and only those — is restored
    /// before the error is returned.
    ///
    /// Returns the bytes written per op (0 for a deletion), in order.
    ///
    /// # Errors
    /// A refused path (nothing written), [`JournalError::Locked`] or a journal failure
    /// (nothing written), [`JournalError::ChangedSinceRead`] or [`JournalError::WriteFailed`]
    /// (written files restored), or [`JournalError::NotUndone`] (some written files could not
    /// be restored; the transaction stays pending for the next recovery).
    pub fn apply(&mut self, ops: &[FileOp]) -> Result<Vec<u64>, JournalError> {
        if ops.is_empty() {
            // Nothing to record: an empty batch must not become the "last run" to undo.
            return Ok(Vec::new());
        }
        let ws = self.journal.ws.clone();
        if self.repo_lock.is_none() {
            self.repo_lock = Some(RepoLock::for_journal(&ws)?);
        }
        let mut targets = Vec::with_capacity(ops.len());
        for op in ops {
            targets.push(ws.resolve_for_write(op.path())?);
        }
        for (op, target) in ops.iter().zip(&targets) {
            self.check_seen(op, target)?;
        }
        // 1. Record originals and the folders we will create, durably, before any write.
        let mut recorded: BTreeSet<String> = self
            .manifest
            .entries
            .iter()
            .map(|e| e.path.clone())
            .collect();
        let mut new_blobs = Vec::new();
        let mut new_entries = Vec::new();
        let mut new_dirs = Vec::new();
        for (op, target) in ops.iter().zip(&targets) {
            if let FileOp::Write { .. } = op {
                for dir in missing_dirs(&ws, &target.abs) {
                    if !self.manifest.created_dirs.contains(&dir) && !new_dirs.contains(&dir) {
                        new_dirs.push(dir);
                    }
                }
            }
            if !recorded.insert(target.rel.clone()) {
                continue;
            }
            let original = match std::fs::symlink_metadata(&target.abs) {
                Ok(meta) if meta.is_dir() => {
                    return Err(WorkspaceError::IsDirectory {
                        path: target.rel.clone(),
                    }
                    .into());
                }
                Ok(_) => {
                    let bytes = std::fs::read(&target.abs)
                        .map_err(|e| WorkspaceError::io("read", &target.rel, e))?;
                    let blob = format!("{}.orig", self.manifest.entries.len() + new_entries.len());
                    let orig = Original {
                        blob: blob.clone(),
                        len: bytes.len() as u64,
                        mode: mode_of(&target.abs),
                    };
                    new_blobs.push((blob, bytes));
                    Some(orig)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(WorkspaceError::io("inspect", &target.rel, e).into()),
            };
            new_entries.push(Entry {
                path: target.rel.clone(),
                original,
                after: None,
                after_mode: None,
                restored: false,
            });
        }
        self.prepare_dir()?;
        for (blob, bytes) in &new_blobs {
            let path = self.dir.join(blob);
            let mut f = std::fs::File::create(&path).map_err(jio("write", &path))?;
            f.write_all(bytes).map_err(jio("write", &path))?;
            f.sync_all().map_err(jio("sync", &path))?;
        }
        self.manifest.entries.extend(new_entries);
        self.manifest.created_dirs.extend(new_dirs.iter().cloned());
        // What each file will hold once written, recorded before anything is written: a crash
        // leaves each file either so or as it was, and anything else is a later change that
        // recovery must not overwrite.
        let mut intended: std::collections::HashMap<&str, FileState> =
            std::collections::HashMap::with_capacity(ops.len());
        for (op, target) in ops.iter().zip(&targets) {
            let state = match op {
                FileOp::Write { content, .. } => FileState::of_bytes(content),
                FileOp::Delete { .. } => FileState::Absent,
            };
            intended.insert(target.rel.as_str(), state);
        }
        for entry in &mut self.manifest.entries {
            if let Some(state) = intended.remove(entry.path.as_str()) {
                entry.after = Some(state);
            }
        }
        // The manifest's atomic write also fsyncs the folder, making the blobs' names durable.
        write_manifest(&self.dir, &self.manifest)?;
        self.on_disk = true;

        // 2. Write.
        let mut written = Vec::with_capacity(ops.len());
        for (op, target) in ops.iter().zip(&targets) {
            #[cfg(feature = "fault-injection")]
            crate::lock::fault::pause_before_write(self.writes_done + 1);
            // Compare-and-swap: the file still holds what the batch read, right before it is
            // replaced.
            if let Err(changed) = self.check_seen(op, target) {
                return Err(self.abort(changed));
            }
            let result = match op {
                FileOp::Write { content, mode, .. } => create_parents(&target.abs)
                    .and_then(|()| atomic_write(&target.abs, content, *mode))
                    .map(|()| content.len() as u64),
                FileOp::Delete { .. } => remove_durably(&target.abs).map(|()| 0),
            };
            match result {
                Ok(n) => written.push(n),
                Err(e) => {
                    let source = WorkspaceError::io("write", &target.rel, e);
                    return Err(self.abort(JournalError::Workspace(source)));
                }
            }
            self.written.insert(target.rel.clone());
            self.writes_done += 1;
            #[cfg(feature = "fault-injection")]
            if self.fault == Some(self.writes_done) {
                // The documented test hook: die like a kill would, no cleanup at all.
                std::process::abort();
            }
        }
        Ok(written)
    }

    /// Whether the file of `op` still holds what the caller read of it (when it said).
    fn check_seen(&self, op: &FileOp, target: &crate::Resolved) -> Result<(), JournalError> {
        let Some(seen) = self
            .expected
            .get(op.path())
            .or_else(|| self.expected.get(&target.rel))
        else {
            return Ok(());
        };
        let now =
            Seen::of_path(&target.abs).map_err(|e| WorkspaceError::io("read", &target.rel, e))?;
        if now == *seen {
            return Ok(());
        }
        Err(JournalError::ChangedSinceRead {
            path: target.rel.clone(),
            what: seen.change_to(&now).to_owned(),
        })
    }

    /// Ends a batch that failed with `cause`: restores exactly the files this transaction
    /// wrote and returns the error to report. When some cannot be restored, the transaction
    /// stays pending (the next recovery finishes it) and the error says which.
    fn abort(&mut self, cause: JournalError) -> JournalError {
        self.finished = true;
        let restored = self.journal.restore(
            &self.dir,
            self.manifest.clone(),
            &BTreeSet::new(),
            Some(&self.written),
        );
        match (restored, cause) {
            (Ok(_), JournalError::Workspace(source)) => JournalError::WriteFailed { source },
            (Ok(_), cause) => cause,
            (Err(JournalError::RestoreIncomplete { failed, .. }), cause) => {
                JournalError::NotUndone {
                    cause: Box::new(cause),
                    failed,
                }
            }
            (Err(e), cause) => JournalError::NotUndone {
                cause: Box::new(cause),
                failed: vec![NotRestored {
                    path: String::new(),
                    cause: e.to_string(),
                }],
            },
        }
    }

    /// Marks the transaction committed: its writes stay until a rollback of its run.
    ///
    /// # Errors
    /// When the manifest cannot be written (the transaction then stays pending and is rolled
    /// back by the next [`Journal::recover_incomplete`]).
    pub fn commit(mut self) -> Result<(), JournalError> {
        self.finished = true;
        if !self.on_disk {
            return Ok(());
        }
        self.manifest.state = TxnState::Committed;
        // The modes the files have now, so a later `chmod` counts as a change too.
        let root = self.journal.ws.root().to_path_buf();
        for entry in &mut self.manifest.entries {
            if matches!(entry.after, Some(FileState::File { .. })) {
                entry.after_mode = mode_of(&root.join(&entry.path));
            }
        }
        write_manifest(&self.dir, &self.manifest)?;
        // Bound the journal; failing to prune never fails a committed batch.
        let _ = self.journal.prune_locked(KEEP_TRANSACTIONS);
        Ok(())
    }

    /// Ends the transaction *without* committing or restoring, exactly as a crash would leave
    /// it: `pending`, for [`Journal::recover_incomplete`] to roll back. For tests and crash
    /// drills; a normal caller commits or rolls back.
    pub fn leave_pending(mut self) {
        self.finished = true;
    }

    /// Restores every file this transaction wrote.
    ///
    /// # Errors
    /// When a file cannot be restored.
    pub fn rollback(mut self) -> Result<RolledBack, JournalError> {
        self.finished = true;
        if !self.on_disk {
            return Ok(RolledBack {
                txn_id: self.manifest.id.clone(),
                run_id: self.manifest.run_id.clone(),
                step_id: self.manifest.step_id.clone(),
                paths: Vec::new(),
                removed: Vec::new(),
                kept: Vec::new(),
            });
        }
        self.journal.restore(
            &self.dir,
            self.manifest.clone(),
            &BTreeSet::new(),
            Some(&self.written),
        )
    }

    fn prepare_dir(&self) -> Result<(), JournalError> {
        if self.on_disk {
            return Ok(());
        }
        let state = self.journal.ws.state_dir();
        let fresh_state = !state.exists();
        std::fs::create_dir_all(&self.dir).map_err(jio("create", &self.dir))?;
        if fresh_state {
            // Keep Nuvira's state out of `git status`.
            let gi = state.join(".gitignore");
            let _ = std::fs::write(&gi, "*\n");
        }
        sync_dir(&self.journal.dir).map_err(jio("sync", &self.journal.dir))?;
        sync_dir(&state).map_err(jio("sync", &state))?;
        if fresh_state {
            let root = self.journal.ws.root();
            sync_dir(root).map_err(jio("sync", root))?;
        }
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.finished && self.on_disk {
            let _ = self.journal.restore(
                &self.dir,
                self.manifest.clone(),
                &BTreeSet::new(),
                Some(&self.written),
            );
        }
    }
}

/// A blob of a transaction folder; a name that would leave the folder is corruption.
fn blob_path(dir: &Path, blob: &str) -> Result<PathBuf, JournalError> {
    let plain = !blob.is_empty() && !blob.contains(['/', '\\']) && blob != "." && blob != "..";
    if plain {
        Ok(dir.join(blob))
    } else {
        Err(JournalError::Corrupt {
            path: dir.join(MANIFEST),
            reason: format!("the blob name `{blob}` is not a file of the transaction's folder"),
        })
    }
}

fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), JournalError> {
    let path = dir.join(MANIFEST);
    let bytes = serde_json::to_vec_pretty(m).map_err(|e| JournalError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    atomic_write(&path, &bytes, Some(0o600)).map_err(jio("write", &path))
}

/// The folders (workspace-relative, parents first) that must be created for `abs`.
fn missing_dirs(ws: &Workspace, abs: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = abs.parent();
    while let Some(dir) = cur {
        if dir == ws.root() || dir.exists() {
            break;
        }
        if let Ok(rel) = dir.strip_prefix(ws.root()) {
            out.push(
                rel.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
        cur = dir.parent();
    }
    out.reverse();
    out
}

fn create_parents(abs: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut cur = abs.parent();
    while let Some(dir) = cur {
        if dir.exists() {
            break;
        }
        missing.push(dir);
        cur = dir.parent();
    }
    let Some(top) = missing.last() else {
        return Ok(());
    };
    std::fs::create_dir_all(missing[0])?;
    // Make every new folder's entry durable in its parent.
    if let Some(parent) = top.parent() {
        sync_dir(parent)?;
    }
    for dir in &missing[1..] {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Whether `pid` is another process that is still running (Linux: `/proc/<pid>` exists;
/// elsewhere the writer is assumed gone).
fn is_other_live_process(pid: u32) -> bool {
    if pid == 0 || pid == std::process::id() {
        return false;
    }
    cfg!(target_os = "linux") && Path::new(&format!("/proc/{pid}")).exists()
}
