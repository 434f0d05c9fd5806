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

/// How often [`HeldDir::remove_entry`] lists a folder it empties (one that fills again as
/// fast as it is emptied is given up).
const REMOVE_TRIES: usize = 8;
/// How often the emptied folder's removal by name is tried ([`HeldDir::remove_entry`]).
const RMDIR_TRIES: usize = 64;
/// How many listings in a row must miss a held folder before it counts as moved away.
const LOCATE_TRIES: usize = 16;

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
    /// [`WorkspaceError::StateLink`] when a component is a symlink,
    /// [`WorkspaceError::StateNotFolder`] when it is a file,
    /// [`WorkspaceError::BecameSymlink`] when it was one of those but is no more, or an I/O
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
                Err(e) => {
                    // As `state::check_folder` says it: a symlink, or a file, by its name.
                    return Err(match dir.symlink_metadata(part) {
                        Ok(m) if m.file_type().is_symlink() => WorkspaceError::StateLink {
                            target: dir
                                .read_link(part)
                                .map(|t| t.display().to_string())
                                .unwrap_or_else(|_| "?".into()),
                            link: shown,
                        },
                        Ok(m) if !m.is_dir() => WorkspaceError::StateNotFolder { path: shown },
                        _ if is_link_error(&e) => WorkspaceError::BecameSymlink {
                            link: shown.clone(),
                            path: shown,
                        },
                        _ => WorkspaceError::io("open", &shown, e),
                    });
                }
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
    ///
    /// # Errors
    /// When `name` cannot be inspected (a permission error, say).
    pub fn kind_of(&self, name: &str) -> io::Result<Option<HeldKind>> {
        let m = match self.dir.symlink_metadata(name) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let t = m.file_type();
        Ok(Some(if t.is_dir() {
            HeldKind::Dir
        } else if t.is_symlink() {
            HeldKind::Symlink
        } else if t.is_file() {
            HeldKind::File
        } else {
            HeldKind::Other
        }))
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
                Ok(Some(HeldKind::Dir) | None) | Err(_) => Err(e),
                Ok(Some(_)) => Err(not_a_folder()),
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
        match self.kind_of(name)? {
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
        let file = self.open_checked(name, &opts)?;
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

    /// Opens the plain file `name` with `opts`, not following a symlink and without blocking
    /// (a FIFO is refused, not waited on), checking it is a plain file once open.
    fn open_checked(&self, name: &str, opts: &OpenOptions) -> io::Result<std::fs::File> {
        let mut opts = opts.clone();
        cap_fs_ext::OpenOptionsFollowExt::follow(&mut opts, cap_fs_ext::FollowSymlinks::No);
        // Non-blocking: a file swapped for a FIFO since the check above would block the open
        // (and the caller, holding a run folder's lock) until a writer came; it is refused
        // below instead, as anything but a plain file is.
        #[cfg(unix)]
        cap_std::fs::OpenOptionsExt::custom_flags(
            &mut opts,
            rustix::fs::OFlags::NONBLOCK.bits() as i32,
        );
        let file = self.dir.open_with(name, &opts)?.into_std();
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is not a file",
            ));
        }
        Ok(file)
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

    /// Whether this folder was removed since it was opened (its link count is 0: no name
    /// anywhere leads to it any more).
    pub fn is_removed(&self) -> bool {
        #[cfg(unix)]
        {
            use cap_std::fs::MetadataExt as _;
            self.dir.dir_metadata().is_ok_and(|m| m.nlink() == 0)
        }
        #[cfg(not(unix))]
        false
    }

    /// Whether `name` in this folder is, right now, the folder `held` (same device and inode,
    /// not following a symlink).
    fn holds(&self, name: &str, held: &HeldDir) -> io::Result<bool> {
        let here = match self.dir.symlink_metadata(name) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        #[cfg(unix)]
        {
            use cap_std::fs::MetadataExt as _;
            let it = held.dir.dir_metadata()?;
            Ok(here.is_dir() && here.dev() == it.dev() && here.ino() == it.ino())
        }
        #[cfg(not(unix))]
        {
            let _ = held;
            Ok(here.is_dir())
        }
    }

    /// The name `held` has in this folder right now: `name` when it still is there, else
    /// whichever entry it is (found by identity: renamed within this folder, it is still
    /// one of its own); `None` when it is no longer directly in this folder.
    fn locate(&self, name: &str, held: &HeldDir) -> io::Result<Option<OsString>> {
        // A rename between two names of this folder during one listing can hide the folder
        // from that listing (its old name read before, its new one after): it is not gone
        // until several listings in a row miss it.
        for _ in 0..LOCATE_TRIES {
            if self.holds(name, held)? {
                return Ok(Some(name.into()));
            }
            #[cfg(unix)]
            {
                use cap_std::fs::MetadataExt as _;
                let it = held.dir.dir_metadata()?;
                for entry in self.dir.entries()? {
                    let Ok(entry) = entry else { continue };
                    // Not following a symlink.
                    if let Ok(m) = entry.metadata()
                        && m.is_dir()
                        && m.dev() == it.dev()
                        && m.ino() == it.ino()
                    {
                        return Ok(Some(entry.file_name()));
                    }
                }
            }
            if held.is_removed() {
                break;
            }
        }
        Ok(None)
    }

    /// Removes the subfolder `name`, which `held` (opened from this folder) is: its content
    /// through `held` (never following a symlink, at most [`MAX_DEPTH`] levels deep), then
    /// the folder itself, here, by the name it has here then. Only while it is still directly
    /// in this folder (under `name`, or another name it was renamed to here): a folder moved
    /// out of this folder is left where it went and said so ([`Removal::Moved`]), checked
    /// before anything is removed, before each folder of it is listed, and before it goes. A
    /// folder someone else removed meanwhile is [`Removal::Gone`].
    ///
    /// # Errors
    /// When an entry cannot be inspected or removed (what was removed so far stays removed).
    pub fn remove_entry(&self, name: &str, held: HeldDir) -> io::Result<Removal> {
        let moved = |held: &HeldDir| {
            if held.is_removed() {
                Removal::Gone
            } else {
                Removal::Moved
            }
        };
        if self.locate(name, &held)?.is_none() {
            return Ok(moved(&held));
        }
        match held.empty(|| self.locate(name, &held).is_ok_and(|n| n.is_some()))? {
            Emptied::Done => {}
            Emptied::Moved => return Ok(moved(&held)),
            Emptied::TooDeep => return Ok(Removal::TooDeep),
        }
        let mut last = None;
        // Each try can lose a race with a rename of the name (a loaded machine may pause this
        // process between the look and the removal): tried more often than a listing.
        for _ in 0..RMDIR_TRIES {
            let Some(here) = self.locate(name, &held)? else {
                return Ok(moved(&held));
            };
            // By name, here: a name swapped since the check is a symlink (refused) or
            // another folder (removed only if empty); looked for again.
            match self.dir.remove_dir(&here) {
                Ok(()) => return Ok(Removal::Removed),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::Other.into()))
    }

    /// Empties this folder through handles, one level at a time without recursion (one
    /// handle per level, at most [`MAX_DEPTH`] levels: a folder deeper is left, and so are its
    /// parents), never following a symlink; `still_here` is asked before each listing.
    fn empty(&self, still_here: impl Fn() -> bool) -> io::Result<Emptied> {
        struct Level {
            dir: Dir,
            /// Its name in the level above (`None` for this folder).
            name: Option<OsString>,
            /// Subfolders found and not yet emptied.
            pending: Vec<OsString>,
            /// Listed how often (a folder that fills again as fast is given up).
            listed: usize,
            /// Something in it is too deep: it stays.
            keep: bool,
        }
        let level = |dir: Dir, name: Option<OsString>| Level {
            dir,
            name,
            pending: Vec::new(),
            listed: 0,
            keep: false,
        };
        let mut stack = vec![level(self.dir.try_clone()?, None)];
        loop {
            let depth = stack.len();
            let Some(top) = stack.last_mut() else {
                return Ok(Emptied::Done);
            };
            if let Some(sub) = top.pending.pop() {
                match top.dir.open_dir_nofollow(&sub) {
                    Ok(dir) => stack.push(level(dir, Some(sub))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    // Swapped for a symlink or a file since the listing: that name goes.
                    Err(e) if is_link_error(&e) => remove_name(&top.dir, &sub)?,
                    Err(e) => return Err(e),
                }
                continue;
            }
            if !top.keep && top.listed < REMOVE_TRIES {
                if !still_here() {
                    return Ok(Emptied::Moved);
                }
                top.listed += 1;
                let mut any = false;
                for entry in top.dir.entries()? {
                    let entry = entry?;
                    any = true;
                    let name = entry.file_name();
                    // `file_type` of an entry does not follow a symlink.
                    if entry.file_type()?.is_dir() {
                        if depth >= MAX_DEPTH {
                            top.keep = true;
                        } else {
                            top.pending.push(name);
                        }
                    } else {
                        match top.dir.remove_file(&name) {
                            Ok(()) => {}
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(_) if top.dir.symlink_metadata(&name).is_ok_and(|m| m.is_dir()) => {
                                top.pending.push(name);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                }
                if !top.pending.is_empty() || (any && !top.keep) {
                    continue;
                }
            }
            // Emptied (or given up): this level goes, from the level above.
            let Some(done) = stack.pop() else {
                return Ok(Emptied::Done);
            };
            let Some(up) = stack.last_mut() else {
                return Ok(if done.keep {
                    Emptied::TooDeep
                } else {
                    Emptied::Done
                });
            };
            let Some(name) = done.name else {
                continue;
            };
            if done.keep {
                up.keep = true;
                continue;
            }
            drop(done.dir);
            match up.dir.remove_dir(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Removes the non-folder `name` of `dir` (gone already is fine).
fn remove_name(dir: &Dir, name: &OsString) -> io::Result<()> {
    match dir.remove_file(name) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// How deep [`HeldDir::remove_entry`] goes into a folder: a folder nested deeper is left (and
/// so the folders around it), not followed, so a tree thousands of levels deep costs neither
/// thousands of handles nor a failed removal of everything else.
pub const MAX_DEPTH: usize = 256;

/// What [`HeldDir::remove_entry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Removal {
    /// The folder and all in it are gone.
    Removed,
    /// It was gone already (someone else removed it).
    Gone,
    /// It was moved away from its name (and left where it went, with whatever was still in
    /// it).
    Moved,
    /// Something in it is nested deeper than [`MAX_DEPTH`] levels: that and the folders
    /// around it were left.
    TooDeep,
}

/// What [`HeldDir::empty`] came to.
enum Emptied {
    Done,
    Moved,
    TooDeep,
}

/// Opens the plain file `path` for reading by path, not following a symlink at its last
/// component and without blocking: a file swapped for a FIFO (or anything but a plain file)
/// since it was checked is refused once open, never waited on.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] for anything but a plain file, or the open's error.
pub fn open_plain_file(path: &Path) -> io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use rustix::fs::OFlags;
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.custom_flags((OFlags::NONBLOCK | OFlags::NOFOLLOW).bits() as i32);
    }
    let file = opts.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a plain file",
        ));
    }
    Ok(file)
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
    fn a_held_folder_refuses_symlinks_and_removes_the_folder_it_opened_only_at_its_name() {
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
        // Moved out of `.nuvira/runs` after it was opened, a symlink put at its name: nothing
        // is removed, neither the folder where it went nor the symlink nor what it points at.
        let away = outside.path().join("moved");
        std::fs::rename(runs_path.join("run-2"), &away).unwrap();
        symlink(outside.path().join("run-1"), runs_path.join("run-2")).unwrap();
        assert_eq!(runs.remove_entry("run-2", run).unwrap(), Removal::Moved);
        drop(held);
        assert_eq!(std::fs::read_to_string(away.join("sub/f")).unwrap(), "f");
        assert!(
            std::fs::symlink_metadata(runs_path.join("run-2"))
                .unwrap()
                .is_symlink()
        );
        // Renamed within `.nuvira/runs`: still one of its own, removed under its new name,
        // its symlink inside not followed.
        std::fs::remove_file(runs_path.join("run-2")).unwrap();
        std::fs::rename(&away, runs_path.join("run-2")).unwrap();
        let run = runs.open_dir("run-2").unwrap();
        std::fs::rename(runs_path.join("run-2"), runs_path.join("elsewhere")).unwrap();
        assert_eq!(runs.remove_entry("run-2", run).unwrap(), Removal::Removed);
        assert!(!runs_path.join("elsewhere").exists());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("run-1/keep/x")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_folder_removed_by_someone_else_meanwhile_is_gone_not_an_error() {
        let repo = tempfile::tempdir().unwrap();
        let runs_path = repo.path().join(".nuvira/runs");
        std::fs::create_dir_all(runs_path.join("run-1/calls")).unwrap();
        std::fs::write(runs_path.join("run-1/calls/a"), "a").unwrap();
        let ws = Workspace::open(repo.path()).unwrap();
        let runs = ws.open_state_dir(&["runs"]).unwrap().unwrap();
        let run = runs.open_dir("run-1").unwrap();
        std::fs::remove_dir_all(runs_path.join("run-1")).unwrap();
        assert!(run.is_removed());
        assert_eq!(runs.remove_entry("run-1", run).unwrap(), Removal::Gone);
    }

    #[test]
    fn a_tree_deeper_than_the_cap_is_left_and_said_so_without_a_handle_per_level() {
        use rustix::fs::{Mode, OFlags};
        let repo = tempfile::tempdir().unwrap();
        let runs_path = repo.path().join(".nuvira/runs");
        std::fs::create_dir_all(runs_path.join("run-1")).unwrap();
        std::fs::create_dir_all(runs_path.join("run-2/a/b")).unwrap();
        std::fs::write(runs_path.join("run-1/run.json"), "{}").unwrap();
        // 600 levels, made relative to a handle (a path that long is refused).
        let mut fd = rustix::fs::open(
            runs_path.join("run-1"),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        for _ in 0..600 {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = rustix::fs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                .unwrap();
        }
        drop(fd);
        let ws = Workspace::open(repo.path()).unwrap();
        let runs = ws.open_state_dir(&["runs"]).unwrap().unwrap();
        let run = runs.open_dir("run-1").unwrap();
        assert_eq!(runs.remove_entry("run-1", run).unwrap(), Removal::TooDeep);
        assert!(runs_path.join("run-1/d/d").is_dir(), "left, not followed");
        let run = runs.open_dir("run-2").unwrap();
        assert_eq!(runs.remove_entry("run-2", run).unwrap(), Removal::Removed);
        assert!(!runs_path.join("run-2").exists());
    }

    #[test]
    fn a_file_swapped_for_a_fifo_is_refused_without_blocking() {
        let repo = tempfile::tempdir().unwrap();
        let run_path = repo.path().join(".nuvira/runs/run-1");
        std::fs::create_dir_all(&run_path).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            run_path.join("run.json"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let ws = Workspace::open(repo.path()).unwrap();
        let runs = ws.open_state_dir(&["runs"]).unwrap().unwrap();
        let run = runs.open_dir("run-1").unwrap();
        // Past the type check (as a swap in the gap would be): the open itself must not block.
        let mut opts = OpenOptions::new();
        opts.read(true);
        let e = run.open_checked("run.json", &opts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert_eq!(
            run.read_file("run.json", 10).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
