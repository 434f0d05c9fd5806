//! Moving only what changed: keeping a persistent workspace copy in step with the workspace.
//!
//! [`sync_tree`] brings a copy made by an earlier run up to date with the workspace, by the
//! same walk ([`nuvira_workspace::walk`](mod@nuvira_workspace::walk)) and the same rules as a
//! fresh copy (folders and files with their modes, symbolic links as links, special files left
//! out). A manifest beside the copy records, for every file, the source's size, mtime and
//! mode, the SHA-256 of what was copied, and the copy's inode, change time and size:
//!
//! - a file is **unchanged** when the source's size, mtime, ctime and mode are those recorded
//!   and the copy is still the file Nuvira wrote (same inode, change time and size: a run that
//!   rewrote it, even keeping its size and mtime, changed its ctime, which cannot be set back);
//! - when the source's size is the recorded one but its mtime or ctime is not (a `touch`, a
//!   checkout, an editor that rewrites unchanged files, a `touch -r` that put the old mtime
//!   back), its **content hash** is compared with the recorded one; equal, nothing is written
//!   (and a build tool sees no change);
//! - otherwise it is copied again (to a new file: a link the run made to elsewhere is never
//!   written through);
//! - entries of the copy that are not in the workspace (deleted files, what the last run
//!   created) are **removed**, and an entry whose type changed (a file replaced by a symlink or
//!   a folder) is removed and made again. Build folders the walk leaves out (`target/`,
//!   `node_modules/`) are kept in the copy as a warm cache when the workspace has none.
//!
//! Entries are handled parents first, and a folder of the copy is only entered once it is known
//! to be a real folder, so a symbolic link the last run put in place of a folder is removed,
//! never followed. Folders get the workspace's modes last, deepest first (a read-only folder is
//! filled first; one the last run made unreadable or read-only is opened for the sync), so a
//! run's `chmod` of a folder does not reach the next run. For a volume ([`plan_delta`]) a
//! folder's mode is in the manifest, and a folder whose mode changed is uploaded again.
//!
//! # Build tools that trust mtimes
//! cargo (and Python's bytecode, make...) decide what to rebuild by comparing mtimes: a source
//! is stale when its mtime is *later* than the moment the last build started. A file copied
//! again gets the current time as its mtime, but on a file system with coarse timestamps (one
//! second on some, one clock tick on others) a file written in the same tick as the last build
//! started has the *same* mtime, and cargo would keep the old build: the run would test code
//! that is no longer there. So every sync first reads the file system's clock (the mtime of a
//! file it writes beside the manifest), and a file it copies whose mtime is not later than that
//! clock gets an mtime just past it (one unit of the clock's apparent resolution: a second when
//! the clock reads whole seconds). Every build of an earlier run started before the sync, so
//! each copied file is newer than all of them.
//!
//! [`plan_delta`] is the same comparison against a manifest only, for the Docker sandbox, which
//! keeps the workspace in a volume and uploads just the changed entries.

use nuvira_workspace::walk::{BUILD_DIRS, EntryKind, WalkOptions};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a sync failed; names the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The workspace could not be walked.
    #[error("walk the workspace: {0}")]
    Walk(#[from] nuvira_workspace::walk::WalkError),
    /// A file, folder or link could not be synced.
    #[error("{action} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SyncError + 'a {
    move |source| SyncError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Files and links written (new or changed) and folders made.
    pub copied: Vec<PathBuf>,
    /// Entries of the copy removed (their whole tree counts once).
    pub removed: Vec<PathBuf>,
    /// Files whose content was hashed because their mtime changed.
    pub hashed: usize,
    /// Files, folders and links left as they were.
    pub unchanged: usize,
    /// Special files of the workspace left out (FIFOs, sockets, devices).
    pub special: Vec<PathBuf>,
}

impl SyncReport {
    /// `synced: N copied, M removed, K unchanged`.
    pub fn summary(&self) -> String {
        format!(
            "synced: {} copied, {} removed, {} unchanged",
            self.copied.len(),
            self.removed.len(),
            self.unchanged
        )
    }
}

/// One manifest line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Record {
    kind: u8, // b'd', b'f', b'l'
    size: u64,
    mtime_ns: i128,
    /// The source's change time: it cannot be set back, so a file rewritten with its size and
    /// mtime restored (`touch -r`) is still hashed.
    ctime_ns: i128,
    mode: u32,
    /// SHA-256 of a file's content, or a link's target bytes.
    hash: [u8; 32],
    dst_ino: u64,
    dst_ctime_ns: i128,
    dst_size: u64,
}

/// What a copy (or a volume) holds, as last written: workspace-relative path → record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    records: BTreeMap<PathBuf, Record>,
}

const MANIFEST_HEADER: &str = "nuvira-sync-manifest 2";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Manifest {
    /// Reads a manifest; a missing or unreadable one is empty (everything is then checked
    /// against the copy and rewritten where it cannot be trusted).
    pub fn load(path: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Self::default();
        };
        let mut lines = text.lines();
        if lines.next() != Some(MANIFEST_HEADER) {
            return Self::default();
        }
        let mut records = BTreeMap::new();
        for line in lines {
            let Some((rel, rec)) = Self::parse_line(line) else {
                return Self::default();
            };
            records.insert(rel, rec);
        }
        Self { records }
    }

    fn parse_line(line: &str) -> Option<(PathBuf, Record)> {
        let f: Vec<&str> = line.split('\t').collect();
        let [
            kind,
            size,
            mtime,
            sctime,
            mode,
            hash,
            ino,
            ctime,
            dsize,
            rel,
        ] = f.as_slice()
        else {
            return None;
        };
        let rel = PathBuf::from(OsStr::from_bytes(&unhex(rel)?));
        let hash: [u8; 32] = unhex(hash)?.try_into().ok()?;
        Some((
            rel,
            Record {
                kind: *kind.as_bytes().first()?,
                size: size.parse().ok()?,
                mtime_ns: mtime.parse().ok()?,
                ctime_ns: sctime.parse().ok()?,
                mode: mode.parse().ok()?,
                hash,
                dst_ino: ino.parse().ok()?,
                dst_ctime_ns: ctime.parse().ok()?,
                dst_size: dsize.parse().ok()?,
            },
        ))
    }

    /// Writes the manifest atomically (a temporary file renamed into place).
    ///
    /// # Errors
    /// [`SyncError::Io`] naming the file.
    pub fn save(&self, path: &Path) -> Result<(), SyncError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut out = String::with_capacity(self.records.len() * 160);
        out.push_str(MANIFEST_HEADER);
        out.push('\n');
        for (rel, r) in &self.records {
            out.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                r.kind as char,
                r.size,
                r.mtime_ns,
                r.ctime_ns,
                r.mode,
                hex(&r.hash),
                r.dst_ino,
                r.dst_ctime_ns,
                r.dst_size,
                hex(rel.as_os_str().as_bytes())
            ));
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(".manifest-")
            .tempfile_in(dir)
            .map_err(io_err("write", path))?;
        tmp.write_all(out.as_bytes())
            .map_err(io_err("write", path))?;
        tmp.persist(path)
            .map_err(|e| io_err("write", path)(e.error))?;
        Ok(())
    }

    /// How many entries it records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it records nothing.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// What kind of entry it records at `rel` (`b'd'`, `b'f'` or `b'l'`), if any.
    #[cfg(feature = "docker")]
    pub(crate) fn kind_of(&self, rel: &Path) -> Option<u8> {
        self.records.get(rel).map(|r| r.kind)
    }

    /// The mode recorded at `rel` (a file's or a folder's), if any.
    #[cfg(feature = "docker")]
    pub(crate) fn mode_of(&self, rel: &Path) -> Option<u32> {
        self.records.get(rel).map(|r| r.mode)
    }

    /// Makes the records of the files and links at `paths` match nothing: the next delta
    /// uploads them again when the workspace still has them as they were recorded, and counts
    /// them deleted (the volume is made again) when it no longer has them, or has another kind
    /// of entry there. (Forgotten instead, a path the workspace lost would stay in the volume.)
    #[cfg(feature = "docker")]
    pub(crate) fn invalidate(&mut self, paths: &[PathBuf]) {
        for p in paths {
            if let Some(r) = self.records.get_mut(p).filter(|r| r.kind != b'd') {
                // No file's content hashes to zeros; a size no file has makes it hashed.
                r.hash = [0; 32];
                r.size = u64::MAX;
            }
        }
    }

    /// Every recorded path with its kind.
    #[cfg(feature = "docker")]
    pub(crate) fn paths(&self) -> impl Iterator<Item = (&Path, u8)> {
        self.records.iter().map(|(p, r)| (p.as_path(), r.kind))
    }
}

fn mtime_ns(m: &std::fs::Metadata) -> i128 {
    i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
}

fn ctime_ns(m: &std::fs::Metadata) -> i128 {
    i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())
}

/// SHA-256 of a regular file (opened without following a symlink).
fn hash_file(path: &Path) -> io::Result<[u8; 32]> {
    let mut f = open_regular(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// Opens a file for reading only if it is a regular file (no symlink followed, a FIFO never
/// waited on).
fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("it is not a regular file"));
    }
    Ok(f)
}

fn link_hash(target: &Path) -> [u8; 32] {
    Sha256::digest(target.as_os_str().as_bytes()).into()
}

/// Removes whatever is at `path` (a folder with its tree, without following symlinks).
fn remove_any(path: &Path) -> Result<(), SyncError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            make_tree_writable(path);
            std::fs::remove_dir_all(path).map_err(io_err("remove", path))
        }
        Ok(_) => std::fs::remove_file(path).map_err(io_err("remove", path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("inspect", path)(e)),
    }
}

/// A run may have left read-only folders: give the owner write permission back so they can be
/// emptied. Symlinks are not followed.
fn make_tree_writable(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode | 0o700));
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
}

fn kind_byte(kind: EntryKind) -> u8 {
    match kind {
        EntryKind::Dir => b'd',
        EntryKind::File => b'f',
        EntryKind::Symlink => b'l',
    }
}

/// Brings the copy `dst` up to date with the workspace `src` (see the [module docs](self)),
/// using and then rewriting the manifest at `manifest_path` (outside `dst`).
///
/// # Errors
/// [`SyncError::Walk`] when the workspace cannot be walked, [`SyncError::Io`] naming the path
/// that could not be synced. After an error the manifest is left out of date, and the next
/// sync checks the copy again.
pub fn sync_tree(
    src: &Path,
    dst: &Path,
    options: WalkOptions,
    manifest_path: &Path,
) -> Result<SyncReport, SyncError> {
    let (entries, special) = nuvira_workspace::walk::walk_noting_special(src, options)?;
    let old = Manifest::load(manifest_path);
    let floor = fs_clock(manifest_path)?;
    // Removed first: a failed sync must not leave a manifest that vouches for the copy.
    let _ = std::fs::remove_file(manifest_path);
    let wanted: BTreeMap<&Path, EntryKind> =
        entries.iter().map(|e| (e.rel.as_path(), e.kind)).collect();
    let mut report = SyncReport {
        special,
        ..SyncReport::default()
    };

    match std::fs::symlink_metadata(dst) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            remove_any(dst)?;
            std::fs::create_dir_all(dst).map_err(io_err("create folder", dst))?;
        }
        Err(_) => std::fs::create_dir_all(dst).map_err(io_err("create folder", dst))?,
    }

    // Prune: what the copy has and the workspace does not (or has as another type).
    let mut stack = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        let abs_dir = dst.join(&rel_dir);
        // A folder the last run made unreadable or unwritable is opened for the prune (it gets
        // the workspace's mode at the end).
        if let Ok(m) = std::fs::symlink_metadata(&abs_dir)
            && m.is_dir()
            && m.permissions().mode() & 0o700 != 0o700
        {
            set_dir_mode(&abs_dir, m.permissions().mode() | 0o700)?;
        }
        let rd = std::fs::read_dir(&abs_dir).map_err(io_err("read folder", &abs_dir))?;
        for child in rd {
            let child = child.map_err(io_err("read folder", &abs_dir))?;
            let rel = rel_dir.join(child.file_name());
            let ft = child
                .file_type()
                .map_err(io_err("inspect", &child.path()))?;
            let keep_build_dir = options.skip_build_dirs
                && ft.is_dir()
                && BUILD_DIRS
                    .iter()
                    .any(|n| child.file_name() == OsStr::new(n));
            let same_type = match wanted.get(rel.as_path()) {
                Some(EntryKind::Dir) => ft.is_dir(),
                Some(EntryKind::File) => ft.is_file(),
                Some(EntryKind::Symlink) => ft.is_symlink(),
                None => {
                    if !keep_build_dir {
                        remove_any(&child.path())?;
                        report.removed.push(rel);
                    }
                    continue;
                }
            };
            if !same_type {
                remove_any(&child.path())?;
                report.removed.push(rel);
            } else if ft.is_dir() {
                stack.push(rel);
            }
        }
    }

    let mut new = Manifest::default();
    let mut dirs = Vec::new();
    for entry in &entries {
        let s = src.join(&entry.rel);
        let d = dst.join(&entry.rel);
        let recorded = old.records.get(&entry.rel);
        match entry.kind {
            EntryKind::Dir => {
                match std::fs::symlink_metadata(&d) {
                    Ok(m) if m.is_dir() => {
                        report.unchanged += 1;
                        // A folder the last run made unwritable is opened for the sync; it
                        // gets the workspace's mode at the end.
                        if m.permissions().mode() & 0o700 != 0o700 {
                            set_dir_mode(&d, m.permissions().mode() | 0o700)?;
                        }
                    }
                    _ => {
                        std::fs::create_dir(&d).map_err(io_err("create folder", &d))?;
                        report.copied.push(entry.rel.clone());
                    }
                }
                dirs.push(entry.rel.clone());
                new.records.insert(
                    entry.rel.clone(),
                    Record {
                        kind: b'd',
                        ..Record::default()
                    },
                );
            }
            EntryKind::Symlink => {
                let target = std::fs::read_link(&s).map_err(io_err("read link", &s))?;
                let current = std::fs::read_link(&d).ok();
                if current.as_deref() == Some(target.as_path()) {
                    report.unchanged += 1;
                } else {
                    remove_any(&d)?;
                    std::os::unix::fs::symlink(&target, &d).map_err(io_err("create link", &d))?;
                    report.copied.push(entry.rel.clone());
                }
                new.records.insert(
                    entry.rel.clone(),
                    Record {
                        kind: b'l',
                        hash: link_hash(&target),
                        ..Record::default()
                    },
                );
            }
            EntryKind::File => {
                let sm = std::fs::symlink_metadata(&s).map_err(io_err("inspect", &s))?;
                if !sm.is_file() {
                    // Changed type since the walk: the next sync sees it as it is then.
                    continue;
                }
                let dm = std::fs::symlink_metadata(&d).ok();
                let copy_untouched = |r: &Record| {
                    dm.as_ref().is_some_and(|dm| {
                        dm.is_file()
                            && dm.ino() == r.dst_ino
                            && ctime_ns(dm) == r.dst_ctime_ns
                            && dm.len() == r.dst_size
                    })
                };
                let mode = sm.permissions().mode() & 0o7777;
                let trusted = recorded.filter(|r| r.kind == b'f' && copy_untouched(r));
                let keep = match trusted {
                    Some(r) if r.size == sm.len() && r.mode == mode => {
                        if r.mtime_ns == mtime_ns(&sm) && r.ctime_ns == ctime_ns(&sm) {
                            Some(r.clone())
                        } else {
                            report.hashed += 1;
                            let h = hash_file(&s).map_err(io_err("read", &s))?;
                            (h == r.hash).then(|| Record {
                                mtime_ns: mtime_ns(&sm),
                                ctime_ns: ctime_ns(&sm),
                                ..r.clone()
                            })
                        }
                    }
                    _ => None,
                };
                let record = match keep {
                    Some(r) => {
                        report.unchanged += 1;
                        r
                    }
                    None => {
                        let r = copy_file(&s, &d, &sm, floor)?;
                        report.copied.push(entry.rel.clone());
                        r
                    }
                };
                new.records.insert(entry.rel.clone(), record);
            }
        }
    }
    // Folders get the workspace's modes (a run may have changed the copy's: `chmod` of a
    // folder reaches no later run), deepest first, once nothing more is written into them.
    for rel in dirs.iter().rev() {
        let (s, d) = (src.join(rel), dst.join(rel));
        let Ok(sm) = std::fs::symlink_metadata(&s) else {
            continue;
        };
        let want = sm.permissions().mode() & 0o7777;
        match std::fs::symlink_metadata(&d) {
            Ok(dm) if sm.is_dir() && dm.is_dir() && dm.permissions().mode() & 0o7777 != want => {
                set_dir_mode(&d, want)?;
            }
            _ => {}
        }
    }
    new.save(manifest_path)?;
    Ok(report)
}

/// Sets the mode of the folder `dir` of the copy, not through a link in its place (an error:
/// the caller just found a folder there). The folders on its way were checked parents first;
/// a process of the last run still alive (the local sandbox without cgroups cannot kill a
/// `setsid` one) could swap one meanwhile, but it has this user's rights anyway.
fn set_dir_mode(dir: &Path, mode: u32) -> Result<(), SyncError> {
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_PATH | nix::libc::O_NOFOLLOW | nix::libc::O_DIRECTORY)
        .open(dir)
        .map_err(io_err("open folder", dir))?;
    // A chmod of the descriptor's own /proc entry: `fchmod` refuses an `O_PATH` descriptor,
    // and a folder without read permission cannot be opened otherwise.
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    std::fs::set_permissions(&by_fd, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(io_err("set the mode of", dir))
}

/// The file system's clock: the mtime (ns since the epoch) of a file written now beside
/// `manifest_path` (see [Build tools that trust mtimes](self#build-tools-that-trust-mtimes)).
fn fs_clock(manifest_path: &Path) -> Result<i128, SyncError> {
    let mut name = manifest_path.as_os_str().to_owned();
    name.push(".clock");
    let path = PathBuf::from(name);
    let _ = std::fs::remove_file(&path);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io_err("create", &path))?;
    (&file).write_all(b"0").map_err(io_err("write", &path))?;
    let m = file.metadata().map_err(io_err("inspect", &path))?;
    Ok(mtime_ns(&m))
}

/// The smallest step past `clock` that a file system whose clock reads `clock` can store: a
/// second when the clock has no sub-second part, else the last non-zero decimal digit's unit.
fn past(clock: i128) -> i128 {
    let nanos = clock.rem_euclid(1_000_000_000);
    if nanos == 0 {
        return clock + 1_000_000_000;
    }
    let mut unit = 1i128;
    while (nanos / unit) % 10 == 0 {
        unit *= 10;
    }
    clock + unit
}

fn system_time(ns: i128) -> std::time::SystemTime {
    let secs = u64::try_from(ns.div_euclid(1_000_000_000)).unwrap_or(0);
    let nanos = u32::try_from(ns.rem_euclid(1_000_000_000)).unwrap_or(0);
    std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos)
}

/// Copies a file to a new file at `d` (whatever was there removed first), hashing it, with
/// the source's permissions and an mtime later than `floor` (the file system's clock at the
/// start of the sync); the record of what was written.
fn copy_file(s: &Path, d: &Path, sm: &std::fs::Metadata, floor: i128) -> Result<Record, SyncError> {
    remove_any(d)?;
    let mut from = open_regular(s).map_err(io_err("read", s))?;
    let mode = sm.permissions().mode() & 0o7777;
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(d)
        .map_err(io_err("create", d))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = from.read(&mut buf).map_err(io_err("read", s))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(io_err("write", d))?;
        size += n as u64;
    }
    to.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io_err("set permissions", d))?;
    let written = to.metadata().map_err(io_err("inspect", d))?;
    if mtime_ns(&written) <= floor {
        to.set_times(std::fs::FileTimes::new().set_modified(system_time(past(floor))))
            .map_err(io_err("set the mtime of", d))?;
    }
    let dm = to.metadata().map_err(io_err("inspect", d))?;
    Ok(Record {
        kind: b'f',
        // What was read: a file growing during the copy is seen as changed next time.
        size,
        mtime_ns: if size == sm.len() { mtime_ns(sm) } else { 0 },
        ctime_ns: ctime_ns(sm),
        mode,
        hash: h.finalize().into(),
        dst_ino: dm.ino(),
        dst_ctime_ns: ctime_ns(&dm),
        dst_size: dm.len(),
    })
}

/// What to upload to bring a workspace volume up to date.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    /// Entries (parents before children) that are new or changed and must be uploaded.
    pub upload: Vec<PathBuf>,
    /// Entries the volume holds that the workspace no longer has (or has as another type).
    /// When there are any, the volume must be made again and everything uploaded.
    pub deleted: Vec<PathBuf>,
    /// Every entry of the workspace, for a full upload.
    pub all: Vec<PathBuf>,
    /// Entries left as they were.
    pub unchanged: usize,
    /// Special files of the workspace left out.
    pub special: Vec<PathBuf>,
    /// The manifest to save once the upload succeeded.
    pub manifest: Manifest,
}

/// Compares the workspace with the manifest of what a volume holds (see the [module
/// docs](self); there is no copy to check, so only the source side is compared).
///
/// # Errors
/// [`SyncError::Walk`] when the workspace cannot be walked, [`SyncError::Io`] when a file cannot
/// be read.
pub fn plan_delta(src: &Path, options: WalkOptions, old: &Manifest) -> Result<Delta, SyncError> {
    let (entries, special) = nuvira_workspace::walk::walk_noting_special(src, options)?;
    let mut delta = Delta {
        special,
        ..Delta::default()
    };
    let mut seen = BTreeSet::new();
    for entry in &entries {
        let s = src.join(&entry.rel);
        seen.insert(entry.rel.clone());
        delta.all.push(entry.rel.clone());
        let recorded = old.records.get(&entry.rel);
        if recorded.is_some_and(|r| r.kind != kind_byte(entry.kind)) {
            delta.deleted.push(entry.rel.clone());
        }
        let record = match entry.kind {
            // A folder's mode is recorded: a `chmod` of a folder alone uploads it again.
            EntryKind::Dir => Record {
                kind: b'd',
                mode: std::fs::symlink_metadata(&s).map_or(0, |m| m.permissions().mode() & 0o7777),
                ..Record::default()
            },
            EntryKind::Symlink => {
                let target = std::fs::read_link(&s).map_err(io_err("read link", &s))?;
                Record {
                    kind: b'l',
                    hash: link_hash(&target),
                    ..Record::default()
                }
            }
            EntryKind::File => {
                let sm = std::fs::symlink_metadata(&s).map_err(io_err("inspect", &s))?;
                let mode = sm.permissions().mode() & 0o7777;
                match recorded {
                    Some(r)
                        if r.kind == b'f'
                            && r.size == sm.len()
                            && r.mode == mode
                            && r.mtime_ns == mtime_ns(&sm)
                            && r.ctime_ns == ctime_ns(&sm) =>
                    {
                        r.clone()
                    }
                    _ => {
                        let hash = hash_file(&s).map_err(io_err("read", &s))?;
                        Record {
                            kind: b'f',
                            size: sm.len(),
                            mtime_ns: mtime_ns(&sm),
                            ctime_ns: ctime_ns(&sm),
                            mode,
                            hash,
                            ..Record::default()
                        }
                    }
                }
            }
        };
        let same = recorded.is_some_and(|r| {
            r.kind == record.kind && r.hash == record.hash && r.mode == record.mode
        });
        if same {
            delta.unchanged += 1;
        } else {
            delta.upload.push(entry.rel.clone());
        }
        delta.manifest.records.insert(entry.rel.clone(), record);
    }
    delta
        .deleted
        .extend(old.records.keys().filter(|k| !seen.contains(*k)).cloned());
    Ok(delta)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_manifest_round_trips_odd_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Manifest::default();
        m.records.insert(
            PathBuf::from(OsStr::from_bytes(b"a\tb\n\xff")),
            Record {
                kind: b'f',
                size: 3,
                mtime_ns: -5,
                ..Record::default()
            },
        );
        let p = dir.path().join("m");
        m.save(&p).unwrap();
        assert_eq!(Manifest::load(&p), m);
        std::fs::write(&p, "garbage").unwrap();
        assert!(Manifest::load(&p).is_empty());
    }

    #[test]
    fn past_steps_by_the_clocks_apparent_resolution() {
        const S: i128 = 1_000_000_000;
        assert_eq!(past(7 * S), 8 * S);
        assert_eq!(past(7 * S + 120_000_000), 7 * S + 130_000_000);
        assert_eq!(past(7 * S + 633_221_202), 7 * S + 633_221_203);
        assert_eq!(past(-S), 0);
    }
}
