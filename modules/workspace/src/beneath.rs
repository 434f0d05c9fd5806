//! File operations relative to an open handle of the workspace root, never following a symlink.
//!
//! [`Workspace::resolve`](crate::Workspace::resolve) checks a path once; a folder of it can be
//! swapped for a symlink between that check and the write (a time-of-check to time-of-use
//! race). So the writes, deletions and reads of a batch do not use the resolved absolute path:
//! they start from a directory handle of the root opened when the workspace was, and open each
//! folder of the real relative path one component at a time with `O_NOFOLLOW`
//! (`cap_fs_ext::DirExt::open_dir_nofollow`: `openat2` with `RESOLVE_BENEATH` on Linux kernels
//! that have it, a checked component-by-component `openat` elsewhere). A component that is a
//! symlink by then is refused with [`WorkspaceError::BecameSymlink`], naming it. The temp file,
//! the rename over the target and the directory fsync all use the one handle of the target's
//! folder, so the file lands in the folder that was checked or nowhere.

use crate::{Resolved, Workspace, WorkspaceError};
use cap_fs_ext::DirExt as _;
use cap_std::fs::{Dir, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of a file Nuvira creates (where the platform has modes): `rw-r--r--`.
#[cfg(unix)]
const NEW_FILE_MODE: u32 = 0o644;

/// Tells temp files of one process apart.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Opens the root as a directory handle. On unix it is opened for reading (not `O_PATH`, as
/// `Dir::open_ambient_dir` does), so that it can be fsynced after a folder is created in it.
pub(crate) fn open_root(root: &std::path::Path) -> io::Result<Dir> {
    #[cfg(unix)]
    {
        let file = std::fs::File::open(root)?;
        if !file.metadata()?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        Ok(Dir::from_std_file(file))
    }
    #[cfg(not(unix))]
    {
        Dir::open_ambient_dir(root, cap_std::ambient_authority())
    }
}

/// A file's bytes with its permission bits, as [`Workspace::read_original_at`] read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    /// The content.
    pub bytes: Vec<u8>,
    /// `mode & 0o7777` where the platform has modes, else `None`.
    pub mode: Option<u32>,
}

/// What opening the parent folder of a target found.
enum Parent {
    /// The folder, and the file name inside it.
    Dir(Dir, String),
    /// A folder on the way does not exist (and was not to be created).
    Missing,
}

impl Workspace {
    /// Opens the folder of `r` below the root, one component at a time, refusing symlinks.
    /// With `create`, missing folders are created (each new entry fsynced in its parent).
    fn parent_of(&self, r: &Resolved, create: bool) -> Result<Parent, WorkspaceError> {
        let mut parts: Vec<&str> = r.rel.split('/').filter(|p| !p.is_empty()).collect();
        let Some(name) = parts.pop() else {
            return Err(WorkspaceError::InvalidPath {
                path: r.rel.clone(),
                reason: "the path names the workspace root itself, not a file".into(),
            });
        };
        let mut dir = self
            .handle
            .try_clone()
            .map_err(|e| WorkspaceError::io("open the workspace root for", &r.rel, e))?;
        for (i, part) in parts.iter().enumerate() {
            let shown = || parts[..=i].join("/");
            let next = match dir.open_dir_nofollow(part) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                    match dir.create_dir(part) {
                        Ok(()) => sync(&dir).map_err(|e| {
                            WorkspaceError::io("sync the folder holding", shown(), e)
                        })?,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(WorkspaceError::io("create folder", shown(), e)),
                    }
                    dir.open_dir_nofollow(part)
                        .map_err(|e| self.refused(&dir, part, &r.rel, shown(), e))?
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Parent::Missing),
                Err(e) => return Err(self.refused(&dir, part, &r.rel, shown(), e)),
            };
            dir = next;
        }
        Ok(Parent::Dir(dir, name.to_owned()))
    }

    /// The error for a component that could not be opened as a folder: a symlink (swapped in
    /// after the check) is named as such, anything else is an I/O error.
    fn refused(
        &self,
        dir: &Dir,
        name: &str,
        path: &str,
        shown: String,
        e: io::Error,
    ) -> WorkspaceError {
        // The component was a folder when the path was checked. Opened without following
        // links, it now fails as "not a directory" or "too many links": it was swapped for
        // something else, though it may be back by the time we look again.
        #[cfg(unix)]
        let too_many_links = e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error());
        #[cfg(not(unix))]
        let too_many_links = false;
        let swapped = e.kind() == io::ErrorKind::NotADirectory || too_many_links;
        match dir.symlink_metadata(name) {
            Ok(m) if m.file_type().is_symlink() => WorkspaceError::BecameSymlink {
                path: path.to_owned(),
                link: shown,
            },
            _ if swapped => WorkspaceError::BecameSymlink {
                path: path.to_owned(),
                link: shown,
            },
            _ => WorkspaceError::io("open folder", shown, e),
        }
    }

    /// Replaces (or creates) the file at `r` with `bytes`, atomically and durably, through the
    /// root's directory handle: missing folders are created, a temp file is written in the
    /// target's folder, given `mode` (or the target's current permissions, or `0o644` for a new
    /// file), fsynced, renamed over the target inside that same folder handle, and the folder is
    /// fsynced. No component of the path is followed if it is a symlink.
    ///
    /// # Errors
    /// [`WorkspaceError::BecameSymlink`] when a folder of the path is a symlink by now (nothing
    /// is written through it), [`WorkspaceError::IsDirectory`], or an I/O error; the target is
    /// then untouched and the temp file removed.
    pub fn write_at(
        &self,
        r: &Resolved,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> Result<(), WorkspaceError> {
        let Parent::Dir(dir, name) = self.parent_of(r, true)? else {
            return Err(WorkspaceError::io(
                "write",
                &r.rel,
                io::Error::new(io::ErrorKind::NotFound, "a folder on the way vanished"),
            ));
        };
        let existing = match dir.symlink_metadata(&name) {
            Ok(m) if m.is_dir() => {
                return Err(WorkspaceError::IsDirectory {
                    path: r.rel.clone(),
                });
            }
            Ok(m) if m.is_file() => Some(m.permissions()),
            _ => None,
        };
        let (tmp_name, file) =
            create_temp(&dir).map_err(|e| WorkspaceError::io("write", &r.rel, e))?;
        let written =
            fill(file, bytes, mode, existing).and_then(|()| dir.rename(&tmp_name, &dir, &name));
        if let Err(e) = written {
            let _ = dir.remove_file(&tmp_name);
            return Err(WorkspaceError::io("write", &r.rel, e));
        }
        sync(&dir).map_err(|e| WorkspaceError::io("sync the folder of", &r.rel, e))
    }

    /// Removes the file at `r` through the root's directory handle and fsyncs its folder. A
    /// missing file is not an error; a symlink at `r` itself is removed, never its target.
    ///
    /// # Errors
    /// [`WorkspaceError::BecameSymlink`] when a folder of the path is a symlink by now, or an
    /// I/O error.
    pub fn remove_at(&self, r: &Resolved) -> Result<(), WorkspaceError> {
        let Parent::Dir(dir, name) = self.parent_of(r, false)? else {
            return Ok(());
        };
        match dir.remove_file(&name) {
            Ok(()) => sync(&dir).map_err(|e| WorkspaceError::io("sync the folder of", &r.rel, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WorkspaceError::io("remove", &r.rel, e)),
        }
    }

    /// Reads the file at `r` through the root's directory handle, following no symlink, with
    /// its permission bits (unix). `Ok(None)` when it does not exist. No size cap.
    ///
    /// # Errors
    /// [`WorkspaceError::BecameSymlink`] when the file or a folder of its path is a symlink by
    /// now, [`WorkspaceError::IsDirectory`], or an I/O error.
    pub fn read_original_at(&self, r: &Resolved) -> Result<Option<FileBytes>, WorkspaceError> {
        self.read_beneath(r, None)
    }

    /// Reads through the handle; with a cap, a larger file is [`WorkspaceError::TooLarge`].
    pub(crate) fn read_beneath(
        &self,
        r: &Resolved,
        cap: Option<u64>,
    ) -> Result<Option<FileBytes>, WorkspaceError> {
        let Parent::Dir(dir, name) = self.parent_of(r, false)? else {
            return Ok(None);
        };
        // A FIFO or a device would block or worse when opened; only regular files are read.
        match dir.symlink_metadata(&name) {
            Ok(m) if m.is_dir() => {
                return Err(WorkspaceError::IsDirectory {
                    path: r.rel.clone(),
                });
            }
            Ok(m) if !m.is_file() && !m.file_type().is_symlink() => {
                return Err(WorkspaceError::io(
                    "read",
                    &r.rel,
                    io::Error::new(io::ErrorKind::InvalidInput, "it is not a regular file"),
                ));
            }
            _ => {}
        }
        let mut opts = OpenOptions::new();
        opts.read(true);
        cap_fs_ext::OpenOptionsFollowExt::follow(&mut opts, cap_fs_ext::FollowSymlinks::No);
        let file = match dir.open_with(&name, &opts) {
            Ok(f) => f.into_std(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.refused(&dir, &name, &r.rel, r.rel.clone(), e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| WorkspaceError::io("read", &r.rel, e))?;
        if meta.is_dir() {
            return Err(WorkspaceError::IsDirectory {
                path: r.rel.clone(),
            });
        }
        if let Some(limit) = cap
            && meta.len() > limit
        {
            return Err(WorkspaceError::TooLarge {
                path: r.rel.clone(),
                size: meta.len(),
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        let mut reader: Box<dyn io::Read> = match cap {
            // One byte over the cap tells a file that grew since the stat.
            Some(limit) => Box::new((&file).take(limit.saturating_add(1))),
            None => Box::new(&file),
        };
        reader
            .read_to_end(&mut bytes)
            .map_err(|e| WorkspaceError::io("read", &r.rel, e))?;
        if let Some(limit) = cap
            && bytes.len() as u64 > limit
        {
            return Err(WorkspaceError::TooLarge {
                path: r.rel.clone(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(Some(FileBytes {
            bytes,
            mode: mode_bits(&meta),
        }))
    }
}

/// Creates a fresh temp file in `dir` (`create_new`, so never an existing name or a symlink).
fn create_temp(dir: &Dir) -> io::Result<(String, std::fs::File)> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    loop {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(".nuvira-tmp-{}-{n}-{nanos:x}", std::process::id());
        match dir.open_with(&name, &opts) {
            Ok(f) => return Ok((name, f.into_std())),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes the temp file, gives it its mode and fsyncs it.
fn fill(
    mut file: std::fs::File,
    bytes: &[u8],
    mode: Option<u32>,
    existing: Option<cap_std::fs::Permissions>,
) -> io::Result<()> {
    file.write_all(bytes)?;
    #[cfg(unix)]
    {
        use cap_std::fs::PermissionsExt as _;
        use std::os::unix::fs::PermissionsExt as _;
        let mode = mode
            .or_else(|| existing.map(|p| p.mode() & 0o7777))
            .unwrap_or(NEW_FILE_MODE);
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        if let Some(p) = existing {
            file.set_permissions(p.into_std(&file)?)?;
        }
    }
    file.sync_all()
}

/// Fsyncs a folder through its handle. The handles of the walk are `O_PATH` on Linux (which
/// cannot be fsynced), so `.` of the handle, the same folder, is opened for reading.
fn sync(dir: &Dir) -> io::Result<()> {
    #[cfg(unix)]
    {
        let mut opts = OpenOptions::new();
        opts.read(true);
        cap_fs_ext::OpenOptionsMaybeDirExt::maybe_dir(&mut opts, true);
        dir.open_with(".", &opts)?.into_std().sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(unix)]
fn mode_bits(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(meta.permissions().mode() & 0o7777)
}

#[cfg(not(unix))]
fn mode_bits(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use crate::{Workspace, WorkspaceError};

    #[test]
    fn a_folder_swapped_for_a_symlink_after_resolve_is_refused_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f.txt"), "old").unwrap();
        std::fs::write(outside.path().join("f.txt"), "secret").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let r = ws.resolve_for_write("d/f.txt").unwrap();
        // The swap, between the check and the use.
        std::fs::rename(dir.path().join("d"), dir.path().join("d.real")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
        for err in [
            ws.write_at(&r, b"new", None).unwrap_err(),
            ws.remove_at(&r).unwrap_err(),
            ws.read_original_at(&r).unwrap_err(),
            ws.read_bytes_at(&r).unwrap_err(),
        ] {
            assert!(
                matches!(&err, WorkspaceError::BecameSymlink { link, .. } if link == "d"),
                "{err}"
            );
            assert!(err.to_string().contains("`d`"), "{err}");
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("f.txt")).unwrap(),
            "secret"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn writes_create_folders_keep_modes_and_leave_no_temp_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let r = ws.resolve_for_write("a/b/run.sh").unwrap();
        ws.write_at(&r, b"one", None).unwrap();
        let p = dir.path().join("a/b/run.sh");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        ws.write_at(&r, b"two", None).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let read = ws.read_original_at(&r).unwrap().unwrap();
        assert_eq!(
            (read.bytes.as_slice(), read.mode),
            (&b"two"[..], Some(0o755))
        );
        assert_eq!(
            std::fs::read_dir(dir.path().join("a/b")).unwrap().count(),
            1
        );
        ws.remove_at(&r).unwrap();
        assert!(!p.exists());
        ws.remove_at(&r).unwrap();
        assert_eq!(ws.read_original_at(&r).unwrap(), None);
    }
}
