//! A folder of the state folder (`.nuvira/<parts>`) opened once as a directory handle, and
//! everything a caller does in it relative to that handle: listing, reading, locking and
//! removing its subfolders never goes through a path again.
//!
//! Why: the run history's garbage collection scans `.nuvira/runs`, locks a run folder, reads
//! its `run.json` again and removes it. Done by path, each step resolves `.nuvira/runs` and the
//! run folder anew, so a process that swaps either for a symlink between the steps (to a
//! folder of someone else's) has the removal follow it. From one handle, opened component by
//! component without following a symlink, a swapped `.nuvira/runs` changes nothing (the handle
//! is the folder that was opened), and a run folder swapped for a symlink is refused when it
//! is opened (`O_NOFOLLOW`); once opened, its handle is locked, read and emptied, so what is
//! removed is what was locked.

use crate::{FolderLock, Workspace, WorkspaceError};
use cap_fs_ext::DirExt as _;
use cap_std::fs::{Dir, OpenOptions};
use std::ffi::OsString;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

/// How often [`HeldDir::remove_all`] looks for an emptied folder again in its parent.
const REMOVE_TRIES: usize = 8;

/// What an entry of a [`HeldDir`] is, not following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldKind {
    /// A real folder.
    Dir,
    /// A symlink (never followed).
    Symlink,
    /// A plain file.
    File,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

/// A folder opened as a directory handle, and what is done in it through that handle (see
/// [`Workspace::open_state_dir`]): nothing in it is reached by path again, so a folder of its
/// path swapped for a symlink after it was opened redirects nothing (the run history's gc
/// scans, locks, re-reads and removes run folders this way).
#[derive(Debug)]
pub struct HeldDir {
    dir: Dir,
    path: PathBuf,
}

/// The error for a name that is a symlink or a file where a folder was to be opened.
fn not_a_folder() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "it is a symlink or a file, not a folder",
    )
}

/// Whether opening a folder without following a symlink failed because the name is a
/// symlink (`ELOOP`) or a file (`ENOTDIR`) at that moment.
fn is_link_error(e: &io::Error) -> bool {
    #[cfg(unix)]
    if rustix::io::Errno::from_io_error(e) == Some(rustix::io::Errno::LOOP) {
        return true;
    }
    e.kind() == io::ErrorKind::NotADirectory
}

impl Workspace {
    /// Opens `.nuvira/<parts...>` as a [`HeldDir`], from the root's handle one component at a
    /// time without following a symlink; `None` when a folder of it does not exist (nothing is
    /// created).
    ///
    /// # Errors
    /// [`WorkspaceError::InvalidPath`] for a part that is not one plain name,
    /// [`WorkspaceError::BecameSymlink`] when a component is a symlink or a file, or an I/O
    /// error.
    pub fn open_state_dir(&self, parts: &[&str]) -> Result<Option<HeldDir>, WorkspaceError> {
        let mut path = self.root.clone();
        let mut dir = self
            .handle
            .try_clone()
            .map_err(|e| WorkspaceError::io("open the workspace root for", ".nuvira", e))?;
        let mut shown = String::new();
        for part in std::iter::once(crate::STATE_DIR).chain(parts.iter().copied()) {
            if part.is_empty() || part == "." || part == ".." || part.contains(['/', '\\']) {
                return Err(WorkspaceError::InvalidPath {
                    path: format!("{shown}/{part}"),
                    reason: "a folder of the state folder must be one plain name".into(),
                });
            }
            if !shown.is_empty() {
                shown.push('/');
            }
            shown.push_str(part);
            path.push(part);
            dir = match dir.open_dir_nofollow(part) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e)
                    if is_link_error(&e)
                        || dir.symlink_metadata(part).is_ok_and(|m| !m.is_dir()) =>
                {
                    return Err(WorkspaceError::BecameSymlink {
                        link: shown.clone(),
                        path: shown,
                    });
                }
                Err(e) => return Err(WorkspaceError::io("open", &shown, e)),
            };
        }
        Ok(Some(HeldDir { dir, path }))
    }
}

impl HeldDir {
    /// The path the folder had when it was opened (for messages: it is never used again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every entry: its name and what it is (not following a symlink).
    ///
    /// # Errors
    /// When the folder cannot be listed.
    pub fn entries(&self) -> io::Result<Vec<(OsString, HeldKind)>> {
        let mut out = Vec::new();
        for entry in self.dir.entries()? {
            let Ok(entry) = entry else { continue };
            // `file_type` of an entry does not follow a symlink.
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => HeldKind::Dir,
                Ok(t) if t.is_symlink() => HeldKind::Symlink,
                Ok(t) if t.is_file() => HeldKind::File,
                _ => HeldKind::Other,
            };
            out.push((entry.file_name(), kind));
        }
        Ok(out)
    }

    /// What `name` is, not following a symlink; `None` when it does not exist.
    pub fn kind_of(&self, name: &str) -> Option<HeldKind> {
        let m = self.dir.symlink_metadata(name).ok()?;
        let t = m.file_type();
        Some(if t.is_dir() {
            HeldKind::Dir
        } else if t.is_symlink() {
            HeldKind::Symlink
        } else if t.is_file() {
            HeldKind::File
        } else {
            HeldKind::Other
        })
    }

    /// The last modification of the folder itself (ms since the Unix epoch; 0 when unknown).
    pub fn modified_ms(&self) -> u64 {
        self.dir.dir_metadata().map_or(0, |m| ms_of(&m))
    }

    /// The last modification of each entry (not following a symlink), in ms since the Unix
    /// epoch (0 when unknown).
    pub fn entry_modified_ms(&self) -> Vec<u64> {
        let Ok(entries) = self.dir.entries() else {
            return Vec::new();
        };
        entries
            .flatten()
            // `DirEntry::metadata` does not follow a symlink.
            .filter_map(|e| e.metadata().ok())
            .map(|m| ms_of(&m))
            .collect()
    }

    /// Opens the subfolder `name` as a handle of its own, without following a symlink.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] when `name` is a symlink or a file, `NotFound` when it
    /// does not exist, or another I/O error.
    pub fn open_dir(&self, name: &str) -> io::Result<Self> {
        match self.dir.open_dir_nofollow(name) {
            Ok(dir) => Ok(Self {
                dir,
                path: self.path.join(name),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
            Err(e) if is_link_error(&e) => Err(not_a_folder()),
            Err(e) => match self.kind_of(name) {
                Some(HeldKind::Dir) | None => Err(e),
                Some(_) => Err(not_a_folder()),
            },
        }
    }

    /// The bytes of the plain file `name` (a symlink is never followed, anything but a plain
    /// file is refused), at most `cap` bytes.
    ///
    /// # Errors
    /// `NotFound`, [`io::ErrorKind::InvalidInput`] for a symlink or anything but a plain file,
    /// [`io::ErrorKind::FileTooLarge`] for a file over `cap`, or another I/O error.
    pub fn read_file(&self, name: &str, cap: u64) -> io::Result<Vec<u8>> {
        match self.kind_of(name) {
            None => return Err(io::ErrorKind::NotFound.into()),
            Some(HeldKind::File) => {}
            Some(HeldKind::Symlink) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a symlink, which is never followed",
                ));
            }
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is not a file",
                ));
            }
        }
        let mut opts = OpenOptions::new();
        opts.read(true);
        cap_fs_ext::OpenOptionsFollowExt::follow(&mut opts, cap_fs_ext::FollowSymlinks::No);
        let file = self.dir.open_with(name, &opts)?.into_std();
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is not a file",
            ));
        }
        let mut bytes = Vec::new();
        (&file)
            .take(cap.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > cap {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("it is larger than {cap} bytes"),
            ));
        }
        Ok(bytes)
    }

    /// Takes the [`FolderLock`] of this folder (the one [`FolderLock::try_acquire`] takes by
    /// path) without waiting: `Ok(None)` when another holder has it.
    ///
    /// # Errors
    /// When the handle cannot be duplicated or locked.
    pub fn try_lock(&self) -> io::Result<Option<FolderLock>> {
        // A fresh open of the folder itself (`.`), as a lock by path opens it: a lock on a
        // duplicate of this handle would share its open file and so never see this process's
        // other locks of the folder.
        // (cap-std opens folders `O_PATH`, which cannot be locked: this one is read-only.)
        #[cfg(unix)]
        let own = {
            use rustix::fs::{Mode, OFlags};
            let fd = rustix::fs::openat(
                &self.dir,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            Dir::from_std_file(std::fs::File::from(fd))
        };
        #[cfg(not(unix))]
        let own = self.dir.try_clone()?;
        FolderLock::try_acquire_dir(own)
    }

    /// Whether some holder has this folder's [`FolderLock`] (taken and released at once when
    /// free).
    ///
    /// # Errors
    /// As [`try_lock`](Self::try_lock).
    pub fn locked(&self) -> io::Result<bool> {
        Ok(self.try_lock()?.is_none())
    }

    /// Removes this folder: its content through its handle (never following a symlink in it),
    /// then the folder itself, found in its current parent by its identity (so a folder moved
    /// away meanwhile is still the one removed, and a symlink or another folder put at its old
    /// name is not touched).
    ///
    /// # Errors
    /// When an entry or the folder cannot be removed.
    pub fn remove_all(self) -> io::Result<()> {
        // The folder's entry is found in its parent by identity and then removed by name: a
        // name swapped in between (for a symlink) makes that removal fail, harmlessly (a
        // symlink is no folder, another folder is not empty). Looked for again a few times.
        let again = self.dir.try_clone()?;
        let Err(mut err) = self.dir.remove_open_dir_all() else {
            return Ok(());
        };
        for _ in 0..REMOVE_TRIES {
            if again.entries()?.flatten().next().is_some() {
                // Not emptied: the error was about its content, not its name.
                return Err(err);
            }
            match again.try_clone()?.remove_open_dir() {
                Ok(()) => return Ok(()),
                Err(e) => err = e,
            }
        }
        Err(err)
    }
}

/// A modification time in ms since the Unix epoch (0 when unknown).
fn ms_of(m: &cap_std::fs::Metadata) -> u64 {
    m.modified()
        .ok()
        .map(cap_std::time::SystemTime::into_std)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_held_folder_refuses_symlinks_and_removes_the_folder_it_opened_wherever_it_went() {
        let repo = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("run-1/keep")).unwrap();
        std::fs::write(outside.path().join("run-1/keep/x"), "x").unwrap();
        let ws = Workspace::open(repo.path()).unwrap();
        assert!(
            ws.open_state_dir(&["runs"]).unwrap().is_none(),
            "nothing yet"
        );
        // `.nuvira/runs` a symlink: refused, naming it.
        std::fs::create_dir(repo.path().join(".nuvira")).unwrap();
        symlink(outside.path(), repo.path().join(".nuvira/runs")).unwrap();
        let err = ws.open_state_dir(&["runs"]).unwrap_err();
        assert!(err.to_string().contains(".nuvira/runs"), "{err}");
        std::fs::remove_file(repo.path().join(".nuvira/runs")).unwrap();
        let runs_path = repo.path().join(".nuvira/runs");
        std::fs::create_dir_all(runs_path.join("run-2/sub")).unwrap();
        std::fs::write(runs_path.join("run-2/run.json"), "{}").unwrap();
        std::fs::write(runs_path.join("run-2/sub/f"), "f").unwrap();
        symlink(outside.path().join("run-1"), runs_path.join("run-1")).unwrap();
        symlink(
            outside.path().join("run-1/keep/x"),
            runs_path.join("run-2/link"),
        )
        .unwrap();
        let runs = ws.open_state_dir(&["runs"]).unwrap().unwrap();
        let mut seen = runs.entries().unwrap();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            vec![
                ("run-1".into(), HeldKind::Symlink),
                ("run-2".into(), HeldKind::Dir)
            ]
        );
        let e = runs.open_dir("run-1").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let run = runs.open_dir("run-2").unwrap();
        assert_eq!(run.read_file("run.json", 10).unwrap(), b"{}");
        assert_eq!(
            run.read_file("run.json", 1).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
        assert_eq!(
            run.read_file("link", 10).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(!run.locked().unwrap());
        let held = run.try_lock().unwrap().unwrap();
        assert!(crate::folder_locked(&runs_path.join("run-2")).unwrap());
        assert!(run.try_lock().unwrap().is_none());
        // Moved away after it was opened, a symlink put at its name: the folder opened goes,
        // the symlink and what it points at stay.
        std::fs::rename(runs_path.join("run-2"), runs_path.join("moved")).unwrap();
        symlink(outside.path().join("run-1"), runs_path.join("run-2")).unwrap();
        run.remove_all().unwrap();
        drop(held);
        assert!(!runs_path.join("moved").exists());
        assert!(
            std::fs::symlink_metadata(runs_path.join("run-2"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("run-1/keep/x")).unwrap(),
            "x"
        );
    }
}
