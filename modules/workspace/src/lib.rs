//! # nuvira-workspace — the safe file layer under every Nuvira edit
//!
//! Everything Nuvira writes into a repository goes through this crate, so the rules that keep a
//! user's files safe live in one place:
//!
//! - **Confinement.** [`Workspace::resolve`] turns a workspace-relative path into a real path
//!   inside the root. Absolute paths, `..` that climbs above the root, and symlinks (in any
//!   component, followed through chains) that lead outside are rejected. Writes are also refused
//!   inside `.nuvira/` (Nuvira's own state) and `.git/`, at any depth and in any case.
//! - **No check-then-use race.** [`Workspace::write_at`], [`Workspace::remove_at`] and the
//!   checked reads ([`Workspace::read_bytes_at`], [`Workspace::read_original_at`]) work from a
//!   directory handle of the root opened with the workspace, opening each folder of the path
//!   without following a symlink, so a folder swapped for a symlink after [`Workspace::resolve`]
//!   is refused ([`WorkspaceError::BecameSymlink`]) instead of written through.
//! - **Guards.** Reads and writes are capped in size (1 MiB by default) and binary content is
//!   refused, so a model or a typo never rewrites an image or a 200 MB log.
//! - **One walk over a user's files.** [`walk()`] (and [`copy_tree`] on it) decides what a
//!   sandbox copy, a Docker tar, a scratch copy and [`Workspace::list_files`] hold: what `git`
//!   would not ignore, never `.git` nor `.nuvira` at any depth. See [`mod@walk`].
//! - **Atomic writes.** [`atomic_write`] writes a temp file in the target's directory, fsyncs
//!   it, renames it over the target and fsyncs the directory; the file's mode is preserved. A
//!   reader sees the old bytes or the new ones, never a torn file.
//! - **A rollback journal.** [`Journal`] records the original bytes of every file a batch is
//!   about to change (and which files did not exist) durably under `.nuvira/journal/` *before*
//!   the first write. A crash between two writes leaves a `pending` transaction that
//!   [`Journal::recover_incomplete`] (called at every start) or `nuvira rollback` restores.
//! - **State that came with a checkout is data, not instructions.** Nothing under `.nuvira/` is
//!   reached through a symlink ([`Workspace::state_folder`]), the folders and original copies
//!   there are private, and the journal acts only on transactions signed with this machine's
//!   key ([`key_path`]); anything else is reported ([`Journal::untrusted`]) and left alone.
//! - **One writer per repository.** [`RepoLock`] is an advisory `flock` on `.nuvira/lock`,
//!   held by every batch, rollback and recovery; and a batch re-checks each file against what it
//!   read ([`Seen`], [`Transaction::expect`]) right before replacing it, so an edit made by
//!   anything else in between aborts the batch instead of being overwritten.
//!
//! The crate is synchronous on purpose: file I/O is blocking anyway, and an async caller wraps a
//! whole batch in one `spawn_blocking` rather than paying a thread hop per file.
//!
//! ```
//! use nuvira_workspace::Workspace;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let ws = Workspace::open(dir.path())?;
//! let target = ws.resolve_for_write("src/lib.rs")?;
//! assert_eq!(target.rel, "src/lib.rs");
//! assert!(ws.resolve("../outside").is_err());
//! assert!(ws.resolve_for_write(".git/config").is_err());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod atomic;
mod beneath;
mod folder_lock;
mod held_dir;
mod journal;
mod lock;
mod state;
pub mod walk;

pub use atomic::{atomic_write, mode_of, remove_durably, remove_temp_files_of, sync_dir};
pub use beneath::FileBytes;
pub use folder_lock::{FAULT_PAUSE_AT_ENV, FolderLock, fault_point, folder_locked};
pub use held_dir::{HeldDir, HeldKind, MAX_DEPTH as MAX_REMOVE_DEPTH, Removal, open_plain_file};
#[cfg(feature = "fault-injection")]
pub use journal::FAULT_CRASH_AFTER_WRITES_ENV;
#[doc(hidden)]
pub use journal::resign_manifest_for_tests;
pub use journal::{
    ChangedFile, FileOp, Journal, JournalError, JournalSnapshot, KEEP_TRANSACTIONS, NotRestored,
    OnChanged, RolledBack, Transaction, TxnState, Untrusted,
};
#[cfg(feature = "fault-injection")]
pub use lock::fault::{
    PAUSE_BEFORE_WRITE_ENV as FAULT_PAUSE_BEFORE_WRITE_ENV, PAUSE_FILE_ENV as FAULT_PAUSE_FILE_ENV,
};
pub use lock::{LOCK_FILE, LockError, LockHolder, LockWait, RepoLock, Seen};
pub use state::{STATE_DIR_ENV, is_run_id, key_path, machine_state_dir};
pub use walk::{EntryKind, WalkEntry, WalkError, WalkOptions, copy_tree, walk};

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The default size cap for one file: 1 MiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 1024 * 1024;

/// The folder at the workspace root that holds Nuvira's own state (journal, last-run records).
pub const STATE_DIR: &str = ".nuvira";

/// How many leading bytes are looked at for a NUL byte when deciding whether a file is binary
/// (the same heuristic git and ripgrep use).
const BINARY_SNIFF_LEN: usize = 8000;

/// Why a path or a file was refused, or what failed while touching it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The workspace root cannot be used.
    #[error("open workspace `{root}`: {source}")]
    Root {
        /// The root as given.
        root: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The path is empty or malformed.
    #[error("use path `{path}`: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why.
        reason: String,
    },
    /// The path leads outside the workspace.
    #[error("use path `{path}`: {reason}; paths must stay inside the workspace root")]
    Escape {
        /// The path as given.
        path: String,
        /// How it escapes.
        reason: String,
    },
    /// The path is inside a `.nuvira/` or `.git/` folder (at any depth, in any case), which
    /// edits never write.
    #[error(
        "write `{path}`: `{area}/` is off limits to edits (no `.git` or `.nuvira` folder is written, at any depth); edit files outside it"
    )]
    Protected {
        /// The path as given.
        path: String,
        /// The protected folder as the path spells it: `.git`, `.nuvira`, `sub/.git`, `a/.GIT`.
        area: String,
    },
    /// A folder of the path (or the file itself) is a symbolic link by the time it is written
    /// or read, though it was not when the path was checked: something swapped it in while
    /// Nuvira ran. Nothing was written or read through it.
    #[error(
        "use `{path}`: `{link}` became a symbolic link after the path was checked, so nothing was written or read through it; stop whatever changes the repository while nuvira runs and try again"
    )]
    BecameSymlink {
        /// The path as resolved.
        path: String,
        /// The component (workspace-relative) that is now a symlink.
        link: String,
    },
    /// The file (or the new content) is larger than the cap.
    #[error(
        "use `{path}`: {size} bytes is over the {limit}-byte limit per file; raise `max_file_size` or edit a smaller file"
    )]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// The file (or the new content) is binary (contains a NUL byte or is not UTF-8).
    #[error("use `{path}`: it is a binary file ({why}); Nuvira only edits text")]
    Binary {
        /// The path.
        path: String,
        /// What gave it away.
        why: &'static str,
    },
    /// The path is a directory where a file was expected.
    #[error("use `{path}`: it is a directory, not a file")]
    IsDirectory {
        /// The path.
        path: String,
    },
    /// A component of a path into `.nuvira/` is a symlink: Nuvira's state folder is never
    /// reached through one (a checkout could point it anywhere).
    #[error(
        "use `{link}`: it is a symlink (to `{target}`), and Nuvira never follows a link in its state folder; nothing was touched: remove the link (`rm {link}`) and retry"
    )]
    StateLink {
        /// The link, workspace-relative (`.nuvira/journal`).
        link: String,
        /// Where it points.
        target: String,
    },
    /// A component of a path into `.nuvira/` is a file, not a folder.
    #[error(
        "use `{path}`: it is not a folder, and Nuvira keeps its state there: move it away and retry"
    )]
    StateNotFolder {
        /// The path, workspace-relative.
        path: String,
    },
    /// An I/O error.
    #[error("{action} `{path}`: {source}")]
    Io {
        /// What was being done (`read`, `write`, ...).
        action: &'static str,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl WorkspaceError {
    pub(crate) fn io(action: &'static str, path: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// A path resolved inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The real path relative to the root, `/`-separated, with symlinks inside the workspace
    /// followed (so two spellings of one file resolve to the same `rel`).
    pub rel: String,
    /// The absolute real path (for a file that does not exist yet: its real parent joined with
    /// the remaining components).
    pub abs: PathBuf,
}

/// A workspace root with its guards. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    /// The root opened as a directory handle: every write, deletion and checked read starts
    /// here (see `beneath.rs`), so a folder swapped for a symlink cannot redirect it.
    handle: Arc<cap_std::fs::Dir>,
    max_file_size: u64,
}

impl Workspace {
    /// Opens a workspace at `root` (which must be an existing directory) with the default size
    /// cap.
    ///
    /// # Errors
    /// When the root does not exist or is not a directory.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let root = std::fs::canonicalize(given).map_err(|source| WorkspaceError::Root {
            root: given.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(WorkspaceError::Root {
                root: given.to_path_buf(),
                source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let handle = beneath::open_root(&root).map_err(|source| WorkspaceError::Root {
            root: given.to_path_buf(),
            source,
        })?;
        Ok(Self {
            root,
            handle: Arc::new(handle),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
        })
    }

    /// Builder-style: sets the size cap per file, in bytes.
    #[must_use]
    pub fn with_max_file_size(mut self, bytes: u64) -> Self {
        self.max_file_size = bytes;
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The size cap per file.
    pub fn max_file_size(&self) -> u64 {
        self.max_file_size
    }

    /// The folder of Nuvira's own state, `<root>/.nuvira`.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join(STATE_DIR)
    }

    /// A folder of Nuvira's state, `<root>/.nuvira/<parts...>` (each part one plain name),
    /// reached without following any symlink: a component that is a symlink is refused with
    /// [`WorkspaceError::StateLink`], one that is a file with [`WorkspaceError::StateNotFolder`].
    ///
    /// Without `create` nothing is changed and `Ok(None)` says the folder does not exist. With
    /// `create`, missing folders are made `0700` (and durable), existing ones narrowed to
    /// `0700`, and a `.nuvira/` made here gets a `.gitignore` of `*`.
    ///
    /// # Errors
    /// [`WorkspaceError::StateLink`], [`WorkspaceError::StateNotFolder`],
    /// [`WorkspaceError::InvalidPath`] for a part that is not a plain name, or an I/O error.
    pub fn state_folder(
        &self,
        parts: &[&str],
        create: bool,
    ) -> Result<Option<PathBuf>, WorkspaceError> {
        state::state_folder(&self.root, parts, create)
    }

    /// Resolves a workspace-relative path for reading.
    ///
    /// `.` components are dropped and `..` is applied lexically; a `..` that would climb above
    /// the root is rejected, as are absolute paths. Then each existing component is checked on
    /// disk: a symlink is followed (through any chain) and must land inside the root; a dangling
    /// symlink is rejected because writing through it could create a file anywhere.
    ///
    /// # Errors
    /// [`WorkspaceError::InvalidPath`] or [`WorkspaceError::Escape`], or an I/O error while
    /// inspecting a component.
    pub fn resolve(&self, path: &str) -> Result<Resolved, WorkspaceError> {
        let invalid = |reason: &str| WorkspaceError::InvalidPath {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        let escape = |reason: String| WorkspaceError::Escape {
            path: path.to_owned(),
            reason,
        };
        if path.trim().is_empty() {
            return Err(invalid("the path is empty"));
        }
        if path.contains('\0') {
            return Err(invalid("the path contains a NUL byte"));
        }
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for comp in Path::new(path).components() {
            match comp {
                Component::Prefix(_) | Component::RootDir => {
                    return Err(escape("absolute paths are not allowed".into()));
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(escape("`..` leads outside the workspace".into()));
                    }
                }
                Component::Normal(s) => parts.push(s),
            }
        }
        if parts.is_empty() {
            return Err(invalid(
                "the path names the workspace root itself, not a file",
            ));
        }

        let mut cur = self.root.clone();
        let mut idx = 0;
        while idx < parts.len() {
            let next = cur.join(parts[idx]);
            match std::fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let shown = display_parts(&parts[..=idx]);
                    let target = std::fs::canonicalize(&next).map_err(|_| {
                        escape(format!(
                            "`{shown}` is a symlink that points nowhere (dangling)"
                        ))
                    })?;
                    if !target.starts_with(&self.root) {
                        return Err(escape(format!(
                            "`{shown}` is a symlink to `{}`, outside the workspace",
                            target.display()
                        )));
                    }
                    cur = target;
                }
                Ok(_) => cur = next,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Nothing below a missing component can exist (or be a symlink) yet.
                    for p in &parts[idx..] {
                        cur.push(p);
                    }
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    return Err(invalid(&format!(
                        "`{}` is a file, not a folder",
                        display_parts(&parts[..idx])
                    )));
                }
                Err(e) => return Err(WorkspaceError::io("inspect", path, e)),
            }
            idx += 1;
        }
        let rel_path = cur
            .strip_prefix(&self.root)
            .map_err(|_| escape("it resolves outside the workspace".into()))?;
        let rel = rel_path
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        if rel.is_empty() {
            return Err(invalid("the path resolves to the workspace root itself"));
        }
        Ok(Resolved { rel, abs: cur })
    }

    /// Resolves a path for writing: [`resolve`](Self::resolve), and the real path (symlinks
    /// inside the workspace followed) may not have `.git` or `.nuvira` as *any* component (a nested repository's
    /// `sub/.git/config` runs code through `core.fsmonitor`). Names are compared ignoring ASCII
    /// case and trailing dots and spaces, since macOS and Windows treat `.GIT` and `.git.` as
    /// `.git`.
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve), plus [`WorkspaceError::Protected`], whose `area` is the
    /// protected folder as spelled in the path (`sub/.git`).
    pub fn resolve_for_write(&self, path: &str) -> Result<Resolved, WorkspaceError> {
        let r = self.resolve(path)?;
        if let Some(area) = protected_area(r.rel.split('/')) {
            return Err(WorkspaceError::Protected {
                path: path.to_owned(),
                area,
            });
        }
        Ok(r)
    }

    /// Reads a text file. `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// When the path escapes, the file is a directory, over the size cap, binary, or unreadable.
    pub fn read_text(&self, path: &str) -> Result<Option<String>, WorkspaceError> {
        let r = self.resolve(path)?;
        self.read_text_at(&r)
    }

    /// Reads a text file at an already resolved path. `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// As [`read_text`](Self::read_text).
    pub fn read_text_at(&self, r: &Resolved) -> Result<Option<String>, WorkspaceError> {
        let Some(bytes) = self.read_bytes_at(r)? else {
            return Ok(None);
        };
        if let Some(why) = binary_reason(&bytes) {
            return Err(WorkspaceError::Binary {
                path: r.rel.clone(),
                why,
            });
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| WorkspaceError::Binary {
                path: r.rel.clone(),
                why: "not valid UTF-8",
            })
    }

    /// Reads a file's bytes (any content) under the size cap. `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// When the file is a directory, over the size cap, or unreadable.
    ///
    /// The file is opened through the root's directory handle, following no symlink on the way
    /// (see [`write_at`](Self::write_at)), so a folder swapped for a symlink since `r` was
    /// resolved is refused with [`WorkspaceError::BecameSymlink`] instead of read.
    pub fn read_bytes_at(&self, r: &Resolved) -> Result<Option<Vec<u8>>, WorkspaceError> {
        Ok(self
            .read_beneath(r, Some(self.max_file_size))?
            .map(|f| f.bytes))
    }

    /// Checks content about to be written to `path`: under the size cap and not binary.
    ///
    /// # Errors
    /// [`WorkspaceError::TooLarge`] or [`WorkspaceError::Binary`].
    pub fn check_content(&self, path: &str, content: &[u8]) -> Result<(), WorkspaceError> {
        let size = content.len() as u64;
        if size > self.max_file_size {
            return Err(WorkspaceError::TooLarge {
                path: path.to_owned(),
                size,
                limit: self.max_file_size,
            });
        }
        if let Some(why) = binary_reason(content) {
            return Err(WorkspaceError::Binary {
                path: path.to_owned(),
                why,
            });
        }
        if std::str::from_utf8(content).is_err() {
            return Err(WorkspaceError::Binary {
                path: path.to_owned(),
                why: "not valid UTF-8",
            });
        }
        Ok(())
    }

    /// Lists the workspace's files (workspace-relative, `/`-separated, sorted) by the rules of
    /// [`walk`](mod@walk): `.gitignore`, `.ignore` and git's global excludes are honoured,
    /// `.git` and `.nuvira` are skipped at any depth, hidden files are listed, symbolic links
    /// are not.
    ///
    /// # Errors
    /// [`WalkError`] when a folder or an ignore file cannot be read.
    pub fn list_files(&self) -> Result<Vec<String>, WalkError> {
        let mut out: Vec<String> = walk::walk(&self.root, WalkOptions::default())?
            .into_iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| {
                e.rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// The first `.git` or `.nuvira` component, as the path up to it (`sub/.GIT`).
fn protected_area<'a>(parts: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut seen = Vec::new();
    for part in parts {
        seen.push(part);
        let name = part.trim_end_matches(['.', ' ']);
        if name.eq_ignore_ascii_case(".git") || name.eq_ignore_ascii_case(STATE_DIR) {
            return Some(seen.join("/"));
        }
    }
    None
}

fn display_parts(parts: &[&std::ffi::OsStr]) -> String {
    parts
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Why these bytes look binary, if they do: a NUL byte in the first 8000 bytes.
pub fn binary_reason(bytes: &[u8]) -> Option<&'static str> {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_LEN)];
    head.contains(&0).then_some("it contains a NUL byte")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn dot_dot_inside_the_root_is_applied_lexically() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        assert_eq!(ws.resolve("a/../b.txt").unwrap().rel, "b.txt");
        assert_eq!(ws.resolve("./a/./b.txt").unwrap().rel, "a/b.txt");
        assert!(matches!(
            ws.resolve("a/../../b"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve(""),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert!(matches!(
            ws.resolve("."),
            Err(WorkspaceError::InvalidPath { .. })
        ));
    }

    #[test]
    fn git_and_nuvira_are_refused_as_any_component_in_any_case() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        for (path, area) in [
            ("sub/.git/config", "sub/.git"),
            ("a/.GIT/hooks/x", "a/.GIT"),
            ("x/.Nuvira/y", "x/.Nuvira"),
            ("deep/er/.git./HEAD", "deep/er/.git."),
            (".git/config", ".git"),
        ] {
            match ws.resolve_for_write(path) {
                Err(WorkspaceError::Protected { path: p, area: a }) => {
                    assert_eq!((p.as_str(), a.as_str()), (path, area));
                }
                other => panic!("{path}: {other:?}"),
            }
        }
        for ok in [
            "sub/git/config",
            "a/.gitignore",
            "x/.nuvirarc",
            ".github/ci.yml",
        ] {
            ws.resolve_for_write(ok).unwrap();
        }
    }

    #[test]
    fn binary_and_size_guards_apply_to_content() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap().with_max_file_size(4);
        assert!(matches!(
            ws.check_content("a", b"12345"),
            Err(WorkspaceError::TooLarge { size: 5, .. })
        ));
        assert!(matches!(
            ws.check_content("a", b"a\0"),
            Err(WorkspaceError::Binary { .. })
        ));
        assert!(matches!(
            ws.check_content("a", &[0xff, 0xfe]),
            Err(WorkspaceError::Binary { .. })
        ));
        ws.check_content("a", b"ok").unwrap();
    }
}
