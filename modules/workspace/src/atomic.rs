//! Durable, atomic file replacement.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Mode of a file Nuvira creates (where the platform has modes): `rw-r--r--`.
#[cfg(unix)]
const NEW_FILE_MODE: u32 = 0o644;

/// Replaces (or creates) `path` with `bytes` atomically and durably.
///
/// A temp file, `.nuvira-tmp-<pid>-<random>`, is created in the same directory (so the rename
/// cannot cross file systems; the pid lets [`remove_temp_files_of`] clean up after a killed
/// process),
/// written, given `mode` (or else the target's current permissions, or `0o644` for a new file),
/// fsynced, renamed over the target, and then the directory is fsynced so that the rename
/// itself survives a power cut. The parent directory must exist.
///
/// # Errors
/// Any I/O error; the target is then untouched and the temp file removed.
pub fn atomic_write(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = parent_of(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(&temp_prefix(std::process::id()))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    set_mode(tmp.as_file(), path, mode)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// How the temp files of [`atomic_write`] in process `pid` begin.
fn temp_prefix(pid: u32) -> String {
    format!(".nuvira-tmp-{pid}-")
}

/// Removes the temp files [`atomic_write`] calls of process `pid` left in `dir` (a process
/// killed mid-write leaves its temp file behind). Only regular files of that name are removed;
/// call it for a process that is dead. Returns how many were removed.
pub fn remove_temp_files_of(dir: &Path, pid: u32) -> usize {
    let prefix = temp_prefix(pid);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Removes `path` and fsyncs its directory. A missing file is not an error.
///
/// # Errors
/// Any other I/O error.
pub fn remove_durably(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(parent_of(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Fsyncs a directory, so that entries created, renamed or removed in it are durable.
///
/// # Errors
/// Any I/O error (on platforms that cannot open a directory this is a no-op).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(unix)]
fn set_mode(tmp: &File, target: &Path, mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = mode.or_else(|| mode_of(target)).unwrap_or(NEW_FILE_MODE);
    tmp.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(tmp: &File, target: &Path, _mode: Option<u32>) -> io::Result<()> {
    if let Ok(meta) = std::fs::metadata(target) {
        tmp.set_permissions(meta.permissions())?;
    }
    Ok(())
}

/// The permission bits of a file (`mode & 0o7777`, symlinks followed), where the platform has
/// them; `None` when the file cannot be read or the platform has no modes. The same bits
/// [`atomic_write`] keeps and the journal records.
pub fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "old").unwrap();
        atomic_write(&p, b"new", None).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn temp_files_of_a_dead_process_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".nuvira-tmp-4242-abc"), "x").unwrap();
        std::fs::write(dir.path().join(".nuvira-tmp-42-abc"), "x").unwrap();
        std::fs::write(dir.path().join("keep.txt"), "x").unwrap();
        assert_eq!(remove_temp_files_of(dir.path(), 4242), 1);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".nuvira-tmp-42-abc", "keep.txt"]);
    }

    #[cfg(unix)]
    #[test]
    fn preserves_the_mode_of_an_existing_file_and_uses_0644_for_new_ones() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.sh");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        atomic_write(&p, b"#!/bin/sh\necho hi\n", None).unwrap();
        assert_eq!(mode_of(&p), Some(0o755));
        let q = dir.path().join("new.txt");
        atomic_write(&q, b"x", None).unwrap();
        assert_eq!(
            std::fs::metadata(&q).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let r = dir.path().join("restored.sh");
        atomic_write(&r, b"x", Some(0o700)).unwrap();
        assert_eq!(mode_of(&r), Some(0o700));
    }
}
