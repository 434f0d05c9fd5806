//! The one walk over a user's files, and the copy built on it.
//!
//! Every place that lists or copies a workspace's files (the local sandbox's copy, the Docker
//! sandbox's tar upload, `nuvira run --scratch`, [`Workspace::list_files`](crate::Workspace))
//! goes through [`walk`], so they all agree on what a user's files are:
//!
//! - `.git` and `.nuvira` (Nuvira's state, including the journal's copies of original files)
//!   are never walked, **at any depth**: a nested repository's or a submodule's `.git` (a
//!   folder or a file) is left out as well as the root's. [`NEVER_WALKED`] lists them.
//! - Files `git` would ignore are left out (`.gitignore`, `.ignore`, `.git/info/exclude` and
//!   git's global excludes, even outside a git repository) unless
//!   [`WalkOptions::include_ignored`]. Ignore files in folders *above* the root are not read:
//!   the root is the boundary.
//! - Every folder named `target` or `node_modules` ([`BUILD_DIRS`]) is left out when
//!   [`WalkOptions::skip_build_dirs`], ignored or not.
//! - A project's Python virtual environment, a folder named `.venv` or `venv` with a
//!   `pyvenv.cfg` file in it, counts as ignored: uv, virtualenv and Python 3.13's `venv` write a
//!   `.gitignore` of `*` into it, older `venv`s nothing, and its thousands of installed files
//!   are not a user's sources (the test step runs it from the workspace). An environment of
//!   another name is walked as any folder: it may be a project's folder too.
//! - Hidden files (dotfiles) are walked; symbolic links are reported as links and never
//!   followed.
//! - Special files (FIFOs, sockets, devices) are never walked, listed or copied: a FIFO would
//!   block a reader and neither can go into a tar. [`walk_noting_special`] and
//!   [`copy_tree_noting_special`] name the ones left out, so callers can say so.
//!
//! Entries come sorted by file name, parents before children.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use crate::STATE_DIR;

/// Whether the folder `dir` is a Python virtual environment: a `pyvenv.cfg` file in it (a link
/// does not count).
fn is_virtualenv(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("pyvenv.cfg")).is_ok_and(|m| m.is_file())
}

/// Names that are never walked, listed or copied, at any depth: git's metadata (a folder, or
/// the `.git` file of a worktree or submodule) and Nuvira's own state folder.
pub const NEVER_WALKED: &[&str] = &[".git", STATE_DIR];

/// Build-output folders [`WalkOptions::skip_build_dirs`] leaves out, at any depth.
pub const BUILD_DIRS: &[&str] = &["target", "node_modules"];

/// Whether an entry with this file name is never walked ([`NEVER_WALKED`]).
pub fn is_never_walked(name: &OsStr) -> bool {
    NEVER_WALKED.iter().any(|n| name == OsStr::new(n))
}

/// What [`walk`] leaves out besides [`NEVER_WALKED`]. The default follows `.gitignore` and
/// keeps build folders that are not ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkOptions {
    /// Also walk files `git` would ignore.
    pub include_ignored: bool,
    /// Leave out every folder named in [`BUILD_DIRS`], even when no ignore file names it.
    pub skip_build_dirs: bool,
}

/// What a walked entry is (symbolic links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A folder.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (to anything, or dangling).
    Symlink,
}

/// One entry found by [`walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkEntry {
    /// The path relative to the root.
    pub rel: PathBuf,
    /// What it is.
    pub kind: EntryKind,
}

/// Why a walk or a copy failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalkError {
    /// The root is missing or not a folder.
    #[error("walk `{}`: it is not a folder; give the workspace's root folder", root.display())]
    NotADirectory {
        /// The root as given.
        root: PathBuf,
    },
    /// An entry (or an ignore file) could not be read.
    #[error("walk `{}`: {source}; check the permissions of the files below it", root.display())]
    Walk {
        /// The root.
        root: PathBuf,
        /// The cause.
        #[source]
        source: ignore::Error,
    },
    /// A file, folder or link could not be copied.
    #[error("{action} `{}`: {source}", path.display())]
    Copy {
        /// What was being done (`create folder`, `copy`, `read link`, ...).
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Lists the entries of `root` (folders, files and symbolic links, relative to `root`, sorted
/// by name, parents before children) by the rules in the [module docs](self).
///
/// # Errors
/// [`WalkError::NotADirectory`] when `root` is not a folder, [`WalkError::Walk`] when an entry
/// cannot be read.
pub fn walk(root: &Path, options: WalkOptions) -> Result<Vec<WalkEntry>, WalkError> {
    walk_noting_special(root, options).map(|(entries, _)| entries)
}

/// Like [`walk`], and also the special files (FIFOs, sockets, devices) it left out, relative to
/// `root`, in walk order.
///
/// # Errors
/// As [`walk`].
pub fn walk_noting_special(
    root: &Path,
    options: WalkOptions,
) -> Result<(Vec<WalkEntry>, Vec<PathBuf>), WalkError> {
    if !root.is_dir() {
        return Err(WalkError::NotADirectory {
            root: root.to_path_buf(),
        });
    }
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .standard_filters(!options.include_ignored)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(std::cmp::Ord::cmp);
    let skip_build_dirs = options.skip_build_dirs;
    let skip_venvs = !options.include_ignored;
    builder.filter_entry(move |e| {
        if e.depth() == 0 {
            return true;
        }
        let name = e.file_name();
        if is_never_walked(name) {
            return false;
        }
        let is_dir = e.file_type().is_some_and(|t| t.is_dir());
        if skip_build_dirs && is_dir && BUILD_DIRS.iter().any(|n| name == OsStr::new(n)) {
            return false;
        }
        !(skip_venvs
            && is_dir
            && (name == OsStr::new(".venv") || name == OsStr::new("venv"))
            && is_virtualenv(e.path()))
    });
    let mut out = Vec::new();
    let mut special = Vec::new();
    for entry in builder.build() {
        let entry = entry.map_err(|source| WalkError::Walk {
            root: root.to_path_buf(),
            source,
        })?;
        if entry.depth() == 0 {
            continue;
        }
        let Some(ft) = entry.file_type() else {
            continue;
        };
        let kind = if ft.is_symlink() {
            EntryKind::Symlink
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else {
            // Sockets, FIFOs, devices: not a user's source files.
            if let Ok(rel) = entry.path().strip_prefix(root) {
                special.push(rel.to_path_buf());
            }
            continue;
        };
        if let Ok(rel) = entry.path().strip_prefix(root) {
            out.push(WalkEntry {
                rel: rel.to_path_buf(),
                kind,
            });
        }
    }
    Ok((out, special))
}

/// Copies what [`walk`] finds in `from` into the folder `to` (created if missing): folders and
/// files with their permissions (a folder's set once it is filled, so a read-only one is
/// copied whole), and symbolic links as links (their targets unchanged; on platforms without
/// symlinks they are left out).
///
/// # Errors
/// As [`walk`], and [`WalkError::Copy`] naming the path that could not be copied.
pub fn copy_tree(from: &Path, to: &Path, options: WalkOptions) -> Result<(), WalkError> {
    copy_tree_noting_special(from, to, options).map(|_| ())
}

/// Like [`copy_tree`], and returns the special files (FIFOs, sockets, devices) it left out,
/// relative to `from`.
///
/// # Errors
/// As [`copy_tree`].
pub fn copy_tree_noting_special(
    from: &Path,
    to: &Path,
    options: WalkOptions,
) -> Result<Vec<PathBuf>, WalkError> {
    let (entries, special) = walk_noting_special(from, options)?;
    let fail = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| WalkError::Copy {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(to).map_err(fail("create folder", to))?;
    let mut dirs = Vec::new();
    for entry in entries {
        let src = from.join(&entry.rel);
        let dst = to.join(&entry.rel);
        match entry.kind {
            EntryKind::Dir => {
                std::fs::create_dir_all(&dst).map_err(fail("create folder", &dst))?;
                dirs.push((src, dst));
            }
            EntryKind::File => {
                std::fs::copy(&src, &dst).map_err(fail("copy", &src))?;
            }
            EntryKind::Symlink => {
                #[cfg(unix)]
                {
                    let target = std::fs::read_link(&src).map_err(fail("read link", &src))?;
                    std::os::unix::fs::symlink(target, &dst).map_err(fail("create link", &dst))?;
                }
            }
        }
    }
    // Folders get their modes last, deepest first: a read-only folder is filled before it is
    // made read-only.
    #[cfg(unix)]
    for (src, dst) in dirs.iter().rev() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::symlink_metadata(src)
            .map_err(fail("inspect", src))?
            .permissions()
            .mode()
            & 0o7777;
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))
            .map_err(fail("set the mode of", dst))?;
    }
    #[cfg(not(unix))]
    let _ = dirs;
    Ok(special)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_projects_virtualenv_without_an_ignore_file_is_left_out_unless_ignored_files_are_asked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "app.py",
            ".venv/pyvenv.cfg",
            ".venv/lib/python3.11/site-packages/pkg/__init__.py",
            "tools/venv/pyvenv.cfg",
            "tools/venv/bin/tool",
            // An environment of another name may be a project's folder: walked.
            "services/api/pyvenv.cfg",
            "services/api/app.py",
            // A file of that name in a folder that is not an environment's top is data.
            "data/sub/pyvenv.cfg.txt",
        ] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        // A link named pyvenv.cfg does not make a folder an environment.
        std::fs::create_dir(root.join("linked")).unwrap();
        std::fs::write(root.join("linked/keep.py"), "x").unwrap();
        std::os::unix::fs::symlink("../app.py", root.join("linked/pyvenv.cfg")).unwrap();
        let files = |include_ignored| -> Vec<String> {
            walk(
                root,
                WalkOptions {
                    include_ignored,
                    skip_build_dirs: true,
                },
            )
            .unwrap()
            .into_iter()
            .filter(|e| e.kind != EntryKind::Dir)
            .map(|e| e.rel.to_string_lossy().into_owned())
            .collect()
        };
        assert_eq!(
            files(false),
            [
                "app.py",
                "data/sub/pyvenv.cfg.txt",
                "linked/keep.py",
                "linked/pyvenv.cfg",
                "services/api/app.py",
                "services/api/pyvenv.cfg",
            ]
        );
        let all = files(true);
        assert!(all.contains(&".venv/lib/python3.11/site-packages/pkg/__init__.py".to_owned()));
        assert!(all.contains(&"tools/venv/bin/tool".to_owned()));
    }

    #[test]
    fn a_missing_root_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = walk(&dir.path().join("nope"), WalkOptions::default()).unwrap_err();
        assert!(matches!(err, WalkError::NotADirectory { .. }));
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn never_walked_names_are_git_and_nuvira() {
        assert!(is_never_walked(OsStr::new(".git")));
        assert!(is_never_walked(OsStr::new(".nuvira")));
        assert!(!is_never_walked(OsStr::new(".github")));
        assert!(!is_never_walked(OsStr::new("nuvira")));
    }
}
