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
//! ## Only transactions this machine wrote are acted on
//!
//! `.nuvira/` may have come with a checkout, so the journal treats what it finds there as
//! untrusted data. `.nuvira/` and `.nuvira/journal` are never reached through a symlink (an
//! error names the link), and every manifest is signed: HMAC-SHA256, keyed with 32 random bytes
//! kept `0600` outside every repository ([`crate::key_path`]), over the domain
//! `nuvira-journal-v1`, the transaction id (its folder's name) and the manifest's JSON without
//! its `mac`. A transaction folder that is a symlink, whose manifest is unreadable, unsigned,
//! signed with another key or names another folder, or whose entries lack the record of what
//! the batch wrote, is *untrusted*: it is listed by [`Journal::untrusted`] (folder and reason)
//! and never recovered, rolled back or pruned. A folder without a manifest (a crash before the
//! first manifest write) is removed only when its name is a transaction id and it holds only
//! `<n>.orig` copies. The journal's folders are `0700`, and each copy of an original is at most
//! as readable as the original (`mode & 0o600`), so a copy of a `0600` secret stays private.
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

use crate::atomic::{atomic_write, mode_of, remove_temp_files_of};
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
    /// This machine's journal key could not be read or created.
    #[error(
        "use the journal key `{path}`: {reason}; set NUVIRA_STATE_DIR to a private folder of yours to keep it elsewhere"
    )]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
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
    /// The signature with this machine's key (hex HMAC-SHA256; see the module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
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

/// A transaction folder the journal does not trust (it did not write it on this machine, or it
/// was edited since), so it never recovers, rolls back or prunes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untrusted {
    /// The folder, workspace-relative: `.nuvira/journal/<id>`.
    pub folder: String,
    /// Why it is not trusted.
    pub reason: String,
}

impl std::fmt::Display for Untrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.folder, self.reason)
    }
}

/// The journal's transaction folders: those it trusts, oldest first, and those it does not.
#[derive(Debug, Clone, Default)]
struct Scan {
    txns: Vec<(PathBuf, Option<Manifest>)>,
    untrusted: Vec<Untrusted>,
}

/// The journal as one listing read it ([`Journal::read`]): what a command's start asks of it
/// (the transactions it does not trust, the last run, a run's committed steps) from one read,
/// kept up to date by [`Journal::recover_incomplete_in`]. It is a picture of that moment: a
/// transaction written after it is not in it.
#[derive(Debug, Clone, Default)]
pub struct JournalSnapshot {
    scan: Scan,
}

impl JournalSnapshot {
    /// The transaction folders the journal does not trust (see [`Journal::untrusted`]).
    pub fn untrusted(&self) -> &[Untrusted] {
        &self.scan.untrusted
    }

    /// The run of the newest transaction that is not rolled back (see [`Journal::last_run`]).
    pub fn last_run(&self) -> Option<&str> {
        self.scan
            .txns
            .iter()
            .rev()
            .filter_map(|(_, m)| m.as_ref())
            .find(|m| m.state != TxnState::RolledBack)
            .map(|m| m.run_id.as_str())
    }

    /// The steps of run `run_id` that have a committed transaction not rolled back, in the
    /// order of their first such transaction (see [`Journal::committed_steps`]).
    pub fn committed_steps(&self, run_id: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self.scan.txns.iter().filter_map(|(_, m)| m.as_ref()) {
            if m.run_id == run_id
                && m.state == TxnState::Committed
                && let Some(step) = &m.step_id
                && !out.contains(step)
            {
                out.push(step.clone());
            }
        }
        out
    }
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
                mac: None,
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
        let mut snapshot = JournalSnapshot { scan: self.scan()? };
        self.recover_locked(&mut snapshot)
    }

    /// Reads the journal once (every transaction folder listed and checked), for a command
    /// that asks several things of it at its start; see [`JournalSnapshot`].
    ///
    /// # Errors
    /// When `.nuvira/` or `.nuvira/journal` is a symlink or a file, or the journal cannot be
    /// listed.
    pub fn read(&self) -> Result<JournalSnapshot, JournalError> {
        Ok(JournalSnapshot { scan: self.scan()? })
    }

    /// [`Journal::recover_incomplete`] over the transactions of `snapshot` (no second read),
    /// which is brought up to date: the folders removed leave it, the transactions rolled back
    /// are marked so. Read the snapshot just before (a transaction begun since is not seen, as
    /// if it began after the recovery).
    ///
    /// # Errors
    /// As [`Journal::recover_incomplete`].
    pub fn recover_incomplete_in(
        &self,
        snapshot: &mut JournalSnapshot,
    ) -> Result<Vec<RolledBack>, JournalError> {
        let _guard = lock();
        let Some(_repo) = self.repo_lock()? else {
            return Ok(Vec::new());
        };
        self.recover_locked(snapshot)
    }

    fn recover_locked(
        &self,
        snapshot: &mut JournalSnapshot,
    ) -> Result<Vec<RolledBack>, JournalError> {
        let mut out = Vec::new();
        let txns = std::mem::take(&mut snapshot.scan.txns);
        let mut kept = Vec::with_capacity(txns.len());
        let mut txns = txns.into_iter();
        let result = loop {
            let Some((dir, manifest)) = txns.next() else {
                break Ok(());
            };
            match manifest {
                // Crashed before its manifest was durable: nothing was written yet.
                None => {
                    if let Err(e) = std::fs::remove_dir_all(&dir).map_err(jio("remove", &dir)) {
                        kept.push((dir, None));
                        break Err(e);
                    }
                }
                // Another live process is mid-batch: its transaction is not ours to undo.
                Some(m) if m.state == TxnState::Pending && is_other_live_process(m.pid) => {
                    kept.push((dir, Some(m)));
                }
                Some(m) if m.state == TxnState::Pending => {
                    // A file edited after the crash keeps the edit (and is named in `kept`).
                    let one = [(dir, m)];
                    let keep = match self.changed_since(&one) {
                        Ok(c) => c.into_iter().map(|c| c.path).collect::<BTreeSet<String>>(),
                        Err(e) => {
                            let [(dir, m)] = one;
                            kept.push((dir, Some(m)));
                            break Err(e);
                        }
                    };
                    let [(dir, m)] = one;
                    match self.restore(&dir, m.clone(), &keep, None) {
                        Ok(r) => {
                            out.push(r);
                            let mut m = m;
                            m.state = TxnState::RolledBack;
                            kept.push((dir, Some(m)));
                        }
                        Err(e) => {
                            kept.push((dir, Some(m)));
                            break Err(e);
                        }
                    }
                }
                Some(m) => kept.push((dir, Some(m))),
            }
        };
        kept.extend(txns);
        snapshot.scan.txns = kept;
        result?;
        self.remove_dead_temp_files(&snapshot.scan.txns)?;
        Ok(out)
    }

    /// Removes the temp files that processes killed mid-write left beside the files their
    /// transactions name (and in the transactions' folders).
    fn remove_dead_temp_files(
        &self,
        txns: &[(PathBuf, Option<Manifest>)],
    ) -> Result<(), JournalError> {
        let mut swept = BTreeSet::new();
        for (dir, manifest) in txns {
            let Some(m) = manifest else { continue };
            if m.pid == 0 || m.pid == std::process::id() || is_other_live_process(m.pid) {
                continue;
            }
            let mut dirs = vec![dir.clone()];
            for rel in m.entries.iter().map(|e| &e.path) {
                // Only folders inside the workspace, reached without a symlink.
                if symlink_on_path(self.ws.root(), rel).is_none()
                    && let Ok(path) = self.recorded(rel)
                    && let Some(parent) = path.parent()
                {
                    dirs.push(parent.to_path_buf());
                }
            }
            for d in dirs {
                if swept.insert((d.clone(), m.pid)) {
                    remove_temp_files_of(&d, m.pid);
                }
            }
        }
        Ok(())
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
        self.rollback_matching(run_id, None, on_changed)
    }

    /// [`Journal::rollback_run_with`] for the transactions of one step of the run only (a
    /// resumed run undoes the batch of a step that wrote but was not recorded as finished,
    /// before running it again, so that no batch is applied twice).
    ///
    /// # Errors
    /// As [`Journal::rollback_run_with`].
    pub fn rollback_step_with(
        &self,
        run_id: &str,
        step_id: &str,
        on_changed: OnChanged,
    ) -> Result<Vec<RolledBack>, JournalError> {
        self.rollback_matching(run_id, Some(step_id), on_changed)
    }

    /// The steps of run `run_id` that have a committed transaction not rolled back, in the
    /// order of their first such transaction.
    ///
    /// # Errors
    /// When the journal cannot be read.
    pub fn committed_steps(&self, run_id: &str) -> Result<Vec<String>, JournalError> {
        Ok(self.read()?.committed_steps(run_id))
    }

    fn rollback_matching(
        &self,
        run_id: &str,
        step_id: Option<&str>,
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
            .filter(|(_, m)| step_id.is_none_or(|s| m.step_id.as_deref() == Some(s)))
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
        // Never through a symlink: a linked `.nuvira` or journal is refused by name here, not
        // taken for a missing journal (`exists` would follow the link).
        if self.ws.state_folder(&["journal"], false)?.is_none() {
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
        Ok(self.read()?.last_run().map(str::to_owned))
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

    /// Every trusted transaction folder, oldest first, with its manifest (`None` when it has
    /// none yet).
    fn transactions(&self) -> Result<Vec<(PathBuf, Option<Manifest>)>, JournalError> {
        Ok(self.scan()?.txns)
    }

    /// The transaction folders this journal does not trust, and why (see the module docs): they
    /// are never recovered, rolled back or pruned. A caller reports them, so that a planted or
    /// foreign transaction is seen.
    ///
    /// # Errors
    /// When `.nuvira/` or `.nuvira/journal` is a symlink or a file, or the journal cannot be
    /// listed.
    pub fn untrusted(&self) -> Result<Vec<Untrusted>, JournalError> {
        Ok(self.scan()?.untrusted)
    }

    /// Lists the journal, never through a symlink, and checks every transaction folder.
    fn scan(&self) -> Result<Scan, JournalError> {
        let Some(dir) = self.ws.state_folder(&["journal"], false)? else {
            return Ok(Scan::default());
        };
        let read = std::fs::read_dir(&dir).map_err(jio("list", &dir))?;
        let mut items: Vec<(String, PathBuf, std::fs::FileType)> = Vec::new();
        for e in read {
            let e = e.map_err(jio("list", &dir))?;
            let ty = e.file_type().map_err(jio("list", &dir))?;
            items.push((e.file_name().to_string_lossy().into_owned(), e.path(), ty));
        }
        items.sort_by(|a, b| a.0.cmp(&b.0));
        let key = match crate::state::load_key(false) {
            Ok(Some(key)) => Ok(key),
            Ok(None) => Err(format!(
                "this machine has no journal key yet (`{}`), so it wrote no transaction here",
                crate::key_path().unwrap_or_default().display()
            )),
            Err(e) => Err(format!(
                "the journal key `{}` cannot be used to check it: {}",
                e.path.display(),
                e.reason
            )),
        };
        let mut scan = Scan::default();
        for (name, path, ty) in items {
            let folder = format!("{}/journal/{name}", crate::STATE_DIR);
            if ty.is_symlink() {
                scan.untrusted.push(Untrusted {
                    folder,
                    reason: "it is a symlink, and Nuvira never follows a link in its state folder"
                        .into(),
                });
                continue;
            }
            if !ty.is_dir() {
                // Not a transaction (nor something the journal would act on).
                continue;
            }
            match check_transaction(&path, &name, key.as_ref()) {
                Ok(m) => scan.txns.push((path, m)),
                Err(reason) => scan.untrusted.push(Untrusted { folder, reason }),
            }
        }
        Ok(scan)
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
        let target = crate::Resolved {
            rel: entry.path.clone(),
            abs: lexical.clone(),
        };
        let Some(orig) = &entry.original else {
            self.ws.remove_at(&target)?;
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
        // Through the root's handle, creating missing folders: a folder swapped for a symlink
        // since the check above is refused, not written through.
        self.ws.write_at(&target, &bytes, orig.mode)?;
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
        let mut new_blobs: Vec<(String, Vec<u8>, Option<u32>)> = Vec::new();
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
            // Through the root's handle: a folder swapped for a symlink is refused, not read.
            let original = match ws.read_original_at(target)? {
                Some(crate::FileBytes { bytes, mode }) => {
                    let blob = format!("{}.orig", self.manifest.entries.len() + new_entries.len());
                    let orig = Original {
                        blob: blob.clone(),
                        len: bytes.len() as u64,
                        mode,
                    };
                    new_blobs.push((blob, bytes, orig.mode));
                    Some(orig)
                }
                None => None,
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
        for (blob, bytes, mode) in &new_blobs {
            let path = self.dir.join(blob);
            write_blob(&path, bytes, *mode).map_err(jio("write", &path))?;
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

        // 2. Write, through the root's directory handle (no component followed if it became a
        // symlink since it was resolved).
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
                FileOp::Write { content, mode, .. } => ws
                    .write_at(target, content, *mode)
                    .map(|()| content.len() as u64),
                FileOp::Delete { .. } => ws.remove_at(target).map(|()| 0),
            };
            match result {
                Ok(n) => written.push(n),
                Err(source) => return Err(self.abort(JournalError::Workspace(source))),
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
        // Never through a symlink, private, and `.nuvira/.gitignore` when `.nuvira/` is new.
        self.journal
            .ws
            .state_folder(&["journal", &self.manifest.id], true)?;
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
        } else if !self.on_disk {
            // A first batch that failed before its manifest was durable (e.g. out of space)
            // wrote nothing to the workspace: its half-written folder goes.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Test hook, hidden from the docs: signs the manifest at `path` (a `txn.json`) again with this
/// machine's key, so a test can edit a real manifest on purpose (another pid, a hostile blob
/// name) and still reach the checks behind the signature. Anything that can call it can read the
/// key anyway; Nuvira itself never calls it.
///
/// # Errors
/// When the manifest cannot be read, understood or written.
#[doc(hidden)]
pub fn resign_manifest_for_tests(path: &Path) -> Result<(), JournalError> {
    let bytes = std::fs::read(path).map_err(jio("read", path))?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| JournalError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    write_manifest(path.parent().unwrap_or(Path::new(".")), &m)
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

/// Writes a manifest, signed with this machine's key (made on the first write).
fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), JournalError> {
    let path = dir.join(MANIFEST);
    let corrupt = |reason: String| JournalError::Corrupt {
        path: path.clone(),
        reason,
    };
    let key = crate::state::load_key(true)
        .map_err(|e| JournalError::Key {
            path: e.path,
            reason: e.reason,
        })?
        .ok_or_else(|| corrupt("no journal key could be made".into()))?;
    let mut signed = m.clone();
    signed.mac = None;
    let mac = {
        use hmac::Mac as _;
        signature(&key, &signed)
            .map_err(corrupt)?
            .finalize()
            .into_bytes()
    };
    signed.mac = Some(hex(&mac));
    let bytes = serde_json::to_vec_pretty(&signed).map_err(|e| corrupt(e.to_string()))?;
    atomic_write(&path, &bytes, Some(0o600)).map_err(jio("write", &path))
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The MAC of an unsigned manifest (`mac` is `None`): the domain, the id and its JSON.
fn signature(key: &crate::state::Key, unsigned: &Manifest) -> Result<HmacSha256, String> {
    use hmac::Mac as _;
    let json = serde_json::to_vec(unsigned).map_err(|e| e.to_string())?;
    let mut mac = HmacSha256::new_from_slice(key.bytes()).map_err(|e| e.to_string())?;
    mac.update(b"nuvira-journal-v1\n");
    mac.update(unsigned.id.as_bytes());
    mac.update(b"\n");
    mac.update(&json);
    Ok(mac)
}

/// Checks a transaction folder: `Ok(None)` for a folder a crash left before its first manifest
/// write, `Ok(Some(..))` for a manifest this machine signed; otherwise why it is not trusted.
fn check_transaction(
    dir: &Path,
    name: &str,
    key: Result<&crate::state::Key, &String>,
) -> Result<Option<Manifest>, String> {
    let path = dir.join(MANIFEST);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return if is_unwritten_transaction(dir, name) {
                Ok(None)
            } else {
                Err(format!(
                    "it has no `{MANIFEST}`, and its name or its files are not those of a transaction the journal began"
                ))
            };
        }
        Err(e) => return Err(format!("its `{MANIFEST}` cannot be read: {e}")),
        Ok(meta) if !meta.is_file() => {
            return Err(format!(
                "its `{MANIFEST}` is a symlink or not a regular file"
            ));
        }
        Ok(_) => {}
    }
    let bytes =
        std::fs::read(&path).map_err(|e| format!("its `{MANIFEST}` cannot be read: {e}"))?;
    let mut m: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| format!("its `{MANIFEST}` cannot be understood: {e}"))?;
    let key = key.map_err(Clone::clone)?;
    let Some(given) = m.mac.take() else {
        return Err(
            "it is not signed with this machine's journal key, so Nuvira did not write it here (or an older Nuvira did)"
                .into(),
        );
    };
    let matches = unhex(&given).is_some_and(|given| {
        use hmac::Mac as _;
        signature(key, &m).is_ok_and(|mac| mac.verify_slice(&given).is_ok())
    });
    if !matches {
        return Err(
            "its signature does not match this machine's journal key: it was written elsewhere or edited since"
                .into(),
        );
    }
    if m.id != name {
        return Err(format!(
            "its manifest is the transaction `{}`, not `{name}`",
            m.id
        ));
    }
    if let Some(e) = m.entries.iter().find(|e| e.after.is_none()) {
        return Err(format!(
            "its entry for `{}` has no record of what the batch wrote",
            e.path
        ));
    }
    Ok(Some(m))
}

/// Whether a folder without a manifest is one [`Journal::begin`] named and only copies of
/// originals (or a temp file) were written into: a crash came before the first manifest write.
fn is_unwritten_transaction(dir: &Path, name: &str) -> bool {
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.split('-').collect();
    if !matches!(parts.as_slice(), [t, p, c] if digits(t, 13) && digits(p, 7) && digits(c, 5)) {
        return false;
    }
    let Ok(read) = std::fs::read_dir(dir) else {
        return false;
    };
    read.into_iter().all(|e| {
        let Ok(e) = e else { return false };
        let name = e.file_name().to_string_lossy().into_owned();
        let plain_file = e.file_type().is_ok_and(|t| t.is_file());
        let copy = name
            .strip_suffix(".orig")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        plain_file && (copy || name.starts_with(".nuvira-tmp-"))
    })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Writes a copy of an original, at most as readable as the original was (`mode & 0o600`).
fn write_blob(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    let mode = mode.unwrap_or(0o600) & 0o600;
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(path)?;
    // Also narrows a file that was there already.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    f.write_all(bytes)?;
    f.sync_all()
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

/// Whether `pid` is another process that is still running (Linux: `/proc/<pid>` exists;
/// elsewhere the writer is assumed gone).
fn is_other_live_process(pid: u32) -> bool {
    if pid == 0 || pid == std::process::id() {
        return false;
    }
    cfg!(target_os = "linux") && Path::new(&format!("/proc/{pid}")).exists()
}
