//! Scratch copies of a repository, for trying a plan without touching the original.

use std::path::{Path, PathBuf};

/// Copies `repo` into a new folder under the system's temporary directory and returns it.
/// The copy respects `.gitignore` (so `target/` and `node_modules/` stay behind) and skips
/// `.git/` and Nuvira's own `.nuvira/`; the folder is kept after the process exits.
///
/// # Errors
/// A message naming the file that could not be copied.
pub fn copy_to_temp(repo: &Path) -> Result<PathBuf, String> {
    let name = repo
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "repo".into());
    let dir = tempfile::Builder::new()
        .prefix(&format!("nuvira-{name}-"))
        .tempdir()
        .map_err(|e| format!("cannot create a temporary folder: {e}"))?
        .keep();
    copy_tree(repo, &dir)?;
    Ok(dir)
}

/// Copies the files of `from` that git would not ignore into `to`.
///
/// # Errors
/// A message naming the file that could not be copied.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let walk = ignore::WalkBuilder::new(from)
        .hidden(false)
        .git_ignore(true)
        .require_git(false)
        .filter_entry(|e| !matches!(e.file_name().to_str(), Some(".git" | ".nuvira")))
        .build();
    for entry in walk {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", from.display()))?;
        let rel = entry.path().strip_prefix(from).unwrap_or(entry.path());
        if rel.as_os_str().is_empty() {
            continue;
        }
        let dest = to.join(rel);
        let ft = entry.file_type();
        if ft.is_some_and(|t| t.is_dir()) {
            std::fs::create_dir_all(&dest)
                .map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
        } else if ft.is_some_and(|t| t.is_file()) {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            std::fs::copy(entry.path(), &dest)
                .map_err(|e| format!("cannot copy {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}
