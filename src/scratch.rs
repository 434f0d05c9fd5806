//! Scratch copies of a repository, for trying a plan without touching the original.
//!
//! The copy uses the workspace layer's one walk
//! ([`nuvira_workspace::walk`](mod@nuvira_workspace::walk)): files `git` would ignore stay
//! behind, `.git` and Nuvira's `.nuvira` are never copied (at any depth: a nested repository's
//! `.git` neither), and folders, files (with their modes) and symbolic links (as links) are
//! copied. Build folders that no ignore file names are copied.

use nuvira_workspace::{WalkError, WalkOptions};
use std::path::{Path, PathBuf};

/// Why a scratch copy could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScratchError {
    /// The temporary folder could not be created.
    #[error(
        "create a temporary folder: {source}; check that the system's temporary directory is writable"
    )]
    TempDir {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be listed or copied.
    #[error(transparent)]
    Copy(#[from] WalkError),
}

/// What a scratch copy leaves out beyond `.git` and `.nuvira`: ignored files only.
const SCRATCH_WALK: WalkOptions = WalkOptions {
    include_ignored: false,
    skip_build_dirs: false,
};

/// Copies `repo` into a new folder under the system's temporary directory and returns it.
/// The copy respects `.gitignore` (so an ignored `target/` or `node_modules/` stays behind) and
/// skips `.git` and Nuvira's own `.nuvira`; the folder is kept after the process exits.
///
/// # Errors
/// [`ScratchError`] naming the folder or file that could not be created or copied.
pub fn copy_to_temp(repo: &Path) -> Result<PathBuf, ScratchError> {
    let name = repo
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "repo".into());
    let dir = tempfile::Builder::new()
        .prefix(&format!("nuvira-{name}-"))
        .tempdir()
        .map_err(|source| ScratchError::TempDir { source })?
        .keep();
    copy_tree(repo, &dir)?;
    Ok(dir)
}

/// Copies the files of `from` that git would not ignore into `to`, by the rules in the
/// [module docs](self).
///
/// # Errors
/// [`WalkError`] naming the file that could not be listed or copied.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), WalkError> {
    nuvira_workspace::copy_tree(from, to, SCRATCH_WALK)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_scratch_copy_never_holds_git_or_nuvira_state_at_any_depth() {
        let repo = tempfile::tempdir().unwrap();
        for (file, text) in [
            ("src/a.rs", "fn a() {}"),
            (".gitignore", "*.log\n"),
            ("debug.log", "ignored"),
            (".nuvira/journal/0001/files/src/a.rs", "the original"),
            ("sub/.nuvira/last-run.json", "{}"),
            (".git/HEAD", "ref: refs/heads/main"),
            ("vendor/lib/.git/HEAD", "ref: refs/heads/main"),
            ("vendor/lib/lib.rs", "pub fn lib() {}"),
        ] {
            let p = repo.path().join(file);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let copy = copy_to_temp(repo.path()).unwrap();
        assert!(copy.join("src/a.rs").is_file());
        assert!(copy.join("vendor/lib/lib.rs").is_file());
        for gone in [
            ".nuvira",
            "sub/.nuvira",
            ".git",
            "vendor/lib/.git",
            "debug.log",
        ] {
            assert!(!copy.join(gone).exists(), "{gone} was copied");
        }
        std::fs::remove_dir_all(&copy).unwrap();
    }
}
