//! The per-repository lock, and the compare-and-swap guard of a batch's writes.
//!
//! ## The lock
//!
//! Two processes editing one repository at once lose updates: both read a file, both write
//! it, and the second write silently drops the first one's edit. So everything that writes a
//! repository through the journal — a batch ([`crate::Transaction::apply`] until its commit or
//! rollback), a rollback, crash recovery — holds an advisory `flock` on `.nuvira/lock`.
//! [`RepoLock::acquire`] takes it for a whole command (the CLI takes it before it reads
//! anything, so the read is covered too); the journal takes it again for each operation, which
//! within one process is free (the lock is shared by everything in the process that asks for
//! the same repository), and from another process fails fast with [`LockError::Held`].
//!
//! The holder writes its pid and command into the lock file, so a refused process can name
//! it. The file is only a name: the lock is the `flock`, which the kernel drops when the
//! process ends, however it ends, so a crash never leaves a stale lock. The file is opened
//! without following symlinks (at `.nuvira` and at `lock`), never as a FIFO or device, and only
//! ever truncated and rewritten by a process that holds the lock.
//!
//! ## Compare-and-swap
//!
//! The lock keeps Nuvira processes apart, but not an editor, a formatter or a `git checkout`.
//! So a batch states what it read ([`Seen`], via [`crate::Transaction::expect`]), and the
//! journal checks every file against it when it records the originals and again right before
//! each file is replaced. A file that changed in between aborts the batch with
//! [`crate::JournalError::ChangedSinceRead`] naming it; the outsider's content is kept and
//! whatever the batch already wrote is restored.

use crate::Workspace;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// The lock file, inside [`crate::STATE_DIR`].
pub const LOCK_FILE: &str = "lock";

/// How long a refused process waits for the holder to write its name before it reports the
/// holder as unknown (the holder writes it right after it takes the lock).
const NAME_WAIT: Duration = Duration::from_secs(2);

/// The process holding a repository's lock, as written in its lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Its process id.
    pub pid: u32,
    /// The command it runs (e.g. `nuvira apply edits.yaml`), control characters removed.
    pub command: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} (`{}`)", self.pid, self.command)
    }
}

/// Why a repository's lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds it.
    #[error(
        "`{}` is locked by {}, which is changing files there; wait for it to finish, or run with --wait to queue",
        root.display(),
        holder.as_ref().map_or_else(|| "another process".to_owned(), ToString::to_string)
    )]
    Held {
        /// The repository.
        root: PathBuf,
        /// Who holds it, when its lock file says so.
        holder: Option<LockHolder>,
    },
    /// The lock file (or `.nuvira`) is a symlink, a FIFO or anything else but a plain file
    /// (folder): a checkout may carry one, and following it could write anywhere.
    #[error(
        "take the lock `{}`: {what}; remove the link (or file) there, Nuvira recreates it, and retry",
        path.display()
    )]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// The lock file could not be created, opened or locked.
    #[error("{action} the lock `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The lock file (or `.nuvira`).
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Whether [`RepoLock::acquire`] waits for another holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockWait {
    /// Fail at once with [`LockError::Held`].
    #[default]
    Fail,
    /// Wait until the holder releases it.
    Wait,
}

/// A held repository lock; released when the last handle of the process drops.
#[derive(Debug, Clone)]
pub struct RepoLock {
    _held: Arc<Held>,
}

#[derive(Debug)]
struct Held {
    /// Closing it releases the lock.
    file: std::fs::File,
    root: PathBuf,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Name nobody, while still holding the lock (closing the file releases it): the record
        // is blanked in place, not truncated (see `write_holder`).
        let _ = self.file.rewind();
        let _ = self.file.write_all(&[b'\n'; HOLDER_LEN]);
    }
}

/// The locks this process holds, by repository root: asking again shares the one held.
static HELD: Mutex<Vec<(PathBuf, Weak<Held>)>> = Mutex::new(Vec::new());

impl RepoLock {
    /// Takes the lock of `ws` for `command` (written into the lock file for others to read).
    /// Within one process this is shared: a second call for the same repository while a
    /// handle is alive returns at once. With [`LockWait::Wait`], `on_wait` is called once, with
    /// the holder, before waiting.
    ///
    /// # Errors
    /// [`LockError::Held`] (with [`LockWait::Fail`]), [`LockError::Unsafe`] for a symlinked or
    /// special lock file, or [`LockError::Io`].
    pub fn acquire(
        ws: &Workspace,
        command: &str,
        wait: LockWait,
        on_wait: impl FnOnce(Option<&LockHolder>),
    ) -> Result<Self, LockError> {
        let root = ws.root().to_path_buf();
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|(_, w)| w.strong_count() > 0);
        if let Some(h) = held
            .iter()
            .find(|(r, _)| *r == root)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(Self { _held: h });
        }
        let path = ws.state_dir().join(LOCK_FILE);
        let mut file = open_lock_file(ws)?;
        let deadline = Instant::now() + NAME_WAIT;
        loop {
            match try_lock(&file) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return Err(lock_io("lock", &path, e)),
            }
            let holder = read_holder(&mut file);
            if holder.is_none() && Instant::now() < deadline {
                // The holder has the lock but has not written its name yet, or it just let go.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            match wait {
                LockWait::Fail => return Err(LockError::Held { root, holder }),
                LockWait::Wait => {
                    // Other threads of this process need not wait for this one's queueing.
                    drop(held);
                    on_wait(holder.as_ref());
                    lock_blocking(&file).map_err(|e| lock_io("lock", &path, e))?;
                    held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
                    break;
                }
            }
        }
        write_holder(&mut file, command).map_err(|e| lock_io("write", &path, e))?;
        let h = Arc::new(Held {
            file,
            root: root.clone(),
        });
        held.push((root, Arc::downgrade(&h)));
        Ok(Self { _held: h })
    }

    /// The lock for one journal operation: shared with the process's own handle when it holds
    /// one, else taken without waiting.
    pub(crate) fn for_journal(ws: &Workspace) -> Result<Self, LockError> {
        Self::acquire(ws, &this_command(), LockWait::Fail, |_| {})
    }

    /// The repository whose lock this is.
    pub fn root(&self) -> &Path {
        &self._held.root
    }
}

/// This process's command line, for the lock file.
fn this_command() -> String {
    let mut args = std::env::args();
    let exe = args
        .next()
        .map(|a| {
            Path::new(&a)
                .file_name()
                .map_or(a.clone(), |n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    std::iter::once(exe)
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

fn lock_io(action: &'static str, path: &Path, source: io::Error) -> LockError {
    LockError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Opens (creating) `.nuvira/lock` without following a symlink at `.nuvira` or at `lock`;
/// a `.nuvira` this creates gets its `.gitignore`.
#[cfg(unix)]
fn open_lock_file(ws: &Workspace) -> Result<std::fs::File, LockError> {
    use rustix::fs::{Mode, OFlags};
    let state = ws.state_dir();
    let path = state.join(LOCK_FILE);
    let root = rustix::fs::open(
        ws.root(),
        OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )
    .map_err(|e| lock_io("open", ws.root(), e.into()))?;
    let created = match rustix::fs::mkdirat(&root, crate::STATE_DIR, Mode::from_raw_mode(0o755)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(lock_io("create", &state, e.into())),
    };
    let dir = rustix::fs::openat(
        &root,
        crate::STATE_DIR,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => LockError::Unsafe {
            path: state.clone(),
            what: "`.nuvira` is a symlink or a file, not a folder",
        },
        e => lock_io("open", &state, e.into()),
    })?;
    if created {
        // Keep Nuvira's state out of `git status`, as the journal does for a `.nuvira` it creates.
        if let Ok(gi) = rustix::fs::openat(
            &dir,
            ".gitignore",
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        ) {
            let _ = std::fs::File::from(gi).write_all(b"*\n");
        }
        let _ = rustix::fs::fsync(&dir);
        let _ = rustix::fs::fsync(&root);
    }
    let fd = rustix::fs::openat(
        &dir,
        LOCK_FILE,
        // NONBLOCK: a FIFO planted there must not hang the open.
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => LockError::Unsafe {
            path: path.clone(),
            what: "it is a symlink",
        },
        e => lock_io("open", &path, e.into()),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| lock_io("inspect", &path, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(LockError::Unsafe {
            path,
            what: "it is not a plain file",
        });
    }
    Ok(std::fs::File::from(fd))
}

#[cfg(not(unix))]
fn open_lock_file(ws: &Workspace) -> Result<std::fs::File, LockError> {
    let state = ws.state_dir();
    std::fs::create_dir_all(&state).map_err(|e| lock_io("create", &state, e))?;
    let path = state.join(LOCK_FILE);
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| lock_io("open", &path, e))
}

/// Takes the lock without waiting: `Ok(false)` when another holds it.
#[cfg(unix)]
fn try_lock(file: &std::fs::File) -> io::Result<bool> {
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(unix)]
fn lock_blocking(file: &std::fs::File) -> io::Result<()> {
    loop {
        match rustix::fs::flock(file, rustix::fs::FlockOperation::LockExclusive) {
            Err(rustix::io::Errno::INTR) => {}
            other => return other.map_err(Into::into),
        }
    }
}

#[cfg(not(unix))]
fn try_lock(_file: &std::fs::File) -> io::Result<bool> {
    Ok(true)
}

#[cfg(not(unix))]
fn lock_blocking(_file: &std::fs::File) -> io::Result<()> {
    Ok(())
}

/// Writes `<pid>\n<command>\n` over the lock file's content (only while holding the lock).
fn write_holder(file: &mut std::fs::File, command: &str) -> io::Result<()> {
    let mut text = format!("{}\n", std::process::id());
    for c in command.chars().map(|c| if c == '\n' { ' ' } else { c }) {
        if text.len() + c.len_utf8() >= HOLDER_LEN {
            break;
        }
        text.push(c);
    }
    // A record of fixed size written in place, padded with newlines (read as empty lines): a
    // truncation on every lock made ext4 flush the file (its replace-via-truncate heuristic),
    // which cost ~150 µs per batch on disk.
    let mut record = text.into_bytes();
    record.resize(HOLDER_LEN, b'\n');
    file.rewind()?;
    file.write_all(&record)?;
    file.flush()
}

/// The size of the holder record in the lock file (pid and command, padded).
const HOLDER_LEN: usize = 512;

/// The holder named in the lock file, if it names a live process.
fn read_holder(file: &mut std::fs::File) -> Option<LockHolder> {
    let mut bytes = Vec::new();
    file.rewind().ok()?;
    // A planted lock file may be huge: its name is short.
    file.take(4096).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    let pid: u32 = lines.next()?.trim().parse().ok()?;
    let command: String = lines
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    let alive = !cfg!(target_os = "linux") || Path::new(&format!("/proc/{pid}")).exists();
    (pid != 0 && alive).then_some(LockHolder { pid, command })
}

/// What a batch read of a file before computing its new content: the file was absent, or
/// held bytes of this length and SHA-256. The journal refuses to replace a file that no longer
/// matches ([`crate::Transaction::expect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen(SeenState);

#[derive(Debug, Clone, PartialEq, Eq)]
enum SeenState {
    Absent,
    File { len: u64, sha256: [u8; 32] },
    Other,
}

impl Seen {
    /// The file did not exist.
    pub fn absent() -> Self {
        Self(SeenState::Absent)
    }

    /// The file held exactly `bytes`.
    pub fn bytes(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(SeenState::File {
            len: bytes.len() as u64,
            sha256: sha2::Sha256::digest(bytes).into(),
        })
    }

    /// What `abs` holds now, looked at without following a symlink at its last component
    /// (hashed in chunks; a symlink, folder or FIFO is "something else", never opened).
    ///
    /// # Errors
    /// When the file cannot be inspected or read.
    pub fn of_path(abs: &Path) -> io::Result<Self> {
        use sha2::Digest as _;
        let meta = match std::fs::symlink_metadata(abs) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Self::absent()),
            Err(e) => return Err(e),
        };
        if !meta.is_file() {
            return Ok(Self(SeenState::Other));
        }
        let mut file = std::fs::File::open(abs)?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut len = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        Ok(Self(SeenState::File {
            len,
            sha256: hasher.finalize().into(),
        }))
    }

    /// How `now` differs from what was read, in words (`edited`, `deleted`, `created`, ...).
    pub(crate) fn change_to(&self, now: &Self) -> &'static str {
        match (&self.0, &now.0) {
            (_, SeenState::Other) => "replaced by a symlink, folder or special file",
            (SeenState::File { .. }, SeenState::Absent) => "deleted",
            (SeenState::Absent | SeenState::Other, SeenState::File { .. }) => "created",
            _ => "edited",
        }
    }
}

/// Test hooks, only with the cargo feature `fault-injection` (never in a production build).
#[cfg(feature = "fault-injection")]
pub(crate) mod fault {
    use std::time::{Duration, Instant};

    /// With [`FAULT_PAUSE_FILE_ENV`](crate::FAULT_PAUSE_FILE_ENV): a transaction pauses right
    /// before its `N`th file write (before that write's compare-and-swap check).
    pub const PAUSE_BEFORE_WRITE_ENV: &str = "NUVIRA_FAULT_PAUSE_BEFORE_WRITE";
    /// The file a paused transaction creates, and waits (at most 60 s) to be removed.
    pub const PAUSE_FILE_ENV: &str = "NUVIRA_FAULT_PAUSE_FILE";

    /// Pauses before write `nth` (1-based) when the variables say so.
    pub(crate) fn pause_before_write(nth: u64) {
        let wanted = std::env::var(PAUSE_BEFORE_WRITE_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        let Some(file) = std::env::var_os(PAUSE_FILE_ENV) else {
            return;
        };
        if wanted != Some(nth) {
            return;
        }
        let file = std::path::PathBuf::from(file);
        if std::fs::write(&file, std::process::id().to_string()).is_err() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while file.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
