//! An advisory lock on one folder, held by the process that owns the folder's content while it
//! lives ([`FolderLock`]), and a probe for it ([`folder_locked`]).
//!
//! Why: the run history (`.nuvira/runs/<id>/`) must tell a folder a live process is about to
//! fill from one a killed process left behind, without trusting anything written inside it
//! (a process killed before its first write left nothing there, and the folder may have come
//! with a checkout). The lock is an `flock` on the folder itself, which the kernel drops when
//! the holder ends, however it ends; a probe takes it without waiting and so never mistakes
//! a live holder for a dead one. The folder is opened without following a symlink, so a
//! symlink planted in its place is refused, never locked through.
//!
//! Off Unix there is no such lock: acquiring always succeeds and a probe always says "free",
//! so callers must keep their own safety margin (the run history's grace period).

use std::io;
use std::path::Path;

/// An advisory lock on a folder, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct FolderLock {
    #[cfg(unix)]
    _fd: rustix::fd::OwnedFd,
}

impl FolderLock {
    /// Takes the lock on folder `dir` without waiting: `Ok(None)` when another open of the
    /// folder (another process, or another lock of this one) holds it.
    ///
    /// # Errors
    /// When `dir` is a symlink (never followed), not a folder, or cannot be opened.
    pub fn try_acquire(dir: &Path) -> io::Result<Option<Self>> {
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, Mode, OFlags};
            let fd = rustix::fs::open(
                dir,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a symlink or a file, not a folder",
                ),
                e => e.into(),
            })?;
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => Ok(Some(Self { _fd: fd })),
                Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        #[cfg(not(unix))]
        {
            if !std::fs::symlink_metadata(dir)?.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a symlink or a file, not a folder",
                ));
            }
            Ok(Some(Self {}))
        }
    }

    /// Takes the lock on an open folder without waiting (see
    /// [`HeldDir::try_lock`](crate::HeldDir::try_lock)): `Ok(None)` when another open of the
    /// folder holds it. The handle is kept, with the lock, until the lock is dropped.
    ///
    /// # Errors
    /// When the folder cannot be locked.
    pub fn try_acquire_dir(dir: cap_std::fs::Dir) -> io::Result<Option<Self>> {
        #[cfg(unix)]
        {
            use rustix::fs::FlockOperation;
            let fd = rustix::fd::OwnedFd::from(dir.into_std_file());
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => Ok(Some(Self { _fd: fd })),
                Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        #[cfg(not(unix))]
        {
            drop(dir);
            Ok(Some(Self {}))
        }
    }
}

/// Whether some process holds the [`FolderLock`] of `dir` (taken and released at once when
/// free). A symlink or a file is never "locked": it is no folder anyone holds.
///
/// # Errors
/// As [`FolderLock::try_acquire`].
pub fn folder_locked(dir: &Path) -> io::Result<bool> {
    Ok(FolderLock::try_acquire(dir)?.is_none())
}

/// A named point where a test build may stop the process: with the cargo feature
/// `fault-injection` (never in a production build), when [`FAULT_PAUSE_AT_ENV`] names `point`,
/// the process writes `nuvira: paused at <point>` on stderr and waits until a line arrives on
/// stdin (or stdin closes), so a test can act (and SIGKILL it) at exactly that moment. Without
/// the feature it does nothing and reads no variable.
pub fn fault_point(point: &str) {
    #[cfg(feature = "fault-injection")]
    {
        use std::io::{BufRead as _, Write as _};
        if std::env::var(FAULT_PAUSE_AT_ENV).is_ok_and(|v| v == point) {
            let _ = writeln!(io::stderr(), "nuvira: paused at {point}");
            let _ = io::stderr().flush();
            let mut line = String::new();
            let _ = io::stdin().lock().read_line(&mut line);
        }
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = point;
}

/// The variable naming the [`fault_point`] a test build stops at (only read with the cargo
/// feature `fault-injection`).
pub const FAULT_PAUSE_AT_ENV: &str = "NUVIRA_FAULT_PAUSE_AT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_seen_and_a_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("f");
        std::fs::create_dir(&dir).unwrap();
        assert!(!folder_locked(&dir).unwrap());
        let held = FolderLock::try_acquire(&dir).unwrap().unwrap();
        #[cfg(unix)]
        {
            assert!(folder_locked(&dir).unwrap());
            assert!(FolderLock::try_acquire(&dir).unwrap().is_none());
        }
        drop(held);
        assert!(!folder_locked(&dir).unwrap());
        #[cfg(unix)]
        {
            let link = d.path().join("link");
            std::os::unix::fs::symlink(&dir, &link).unwrap();
            assert!(FolderLock::try_acquire(&link).is_err());
            let file = d.path().join("file");
            std::fs::write(&file, "x").unwrap();
            assert!(folder_locked(&file).is_err());
        }
    }
}
