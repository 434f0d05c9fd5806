//! The in-memory overlay strategies edit: a [`FileView`] over the workspace that records the
//! original of every file it touches and never writes to disk.

use nuvira_api::{EditError, FileView};
use nuvira_workspace::{Seen, Workspace, WorkspaceError};
use std::collections::BTreeMap;

/// What a file holds in the overlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileState {
    /// The file does not exist.
    Absent,
    /// A text file.
    Text(String),
    /// An existing file we cannot show as text (binary or over the cap): it may only be
    /// deleted.
    Opaque(String),
}

impl FileState {
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(t),
            _ => None,
        }
    }
    pub(crate) fn exists(&self) -> bool {
        !matches!(self, Self::Absent)
    }
}

/// The overlay: originals as loaded from disk, and the current state after the entries applied
/// so far. Keys are real workspace-relative paths, so two spellings of one file are one entry.
pub(crate) struct Overlay<'w> {
    ws: &'w Workspace,
    pub(crate) original: BTreeMap<String, FileState>,
    pub(crate) current: BTreeMap<String, FileState>,
    /// First-touch order, for stable output.
    pub(crate) order: Vec<String>,
    /// New path -> the original path it was renamed from (chains collapse to the first).
    pub(crate) renamed_from: BTreeMap<String, String>,
    /// The mode a renamed file keeps.
    pub(crate) modes: BTreeMap<String, u32>,
    /// What the entry running now changed, oldest first, to undo it when it fails
    /// ([`Overlay::restore`]). Cleared by [`Overlay::checkpoint`], so it only ever holds one
    /// entry's changes: saving and undoing cost what the entry touched, not the size of the
    /// overlay (a batch of 40,000 creations copied the whole map 40,000 times before).
    undo: Vec<Undo>,
    /// What each file held when first read, for the journal's compare-and-swap check.
    pub(crate) seen: BTreeMap<String, Seen>,
}

/// One change to the overlay's mutable maps, with the value it replaced (`None`: no value).
enum Undo {
    Current(String, Option<FileState>),
    Renamed(String, Option<String>),
    Mode(String, Option<u32>),
}

/// Where the undo log stood before an entry ran ([`Overlay::checkpoint`]).
pub(crate) struct Checkpoint {
    undo_len: usize,
}

pub(crate) fn ws_error(path: &str, e: &WorkspaceError) -> EditError {
    EditError::new(Some(path.to_owned()), e.to_string())
}

impl<'w> Overlay<'w> {
    pub(crate) fn new(ws: &'w Workspace) -> Self {
        Self {
            ws,
            original: BTreeMap::new(),
            current: BTreeMap::new(),
            order: Vec::new(),
            renamed_from: BTreeMap::new(),
            modes: BTreeMap::new(),
            undo: Vec::new(),
            seen: BTreeMap::new(),
        }
    }

    /// Resolves `path` (for writing when `write`) and loads its original on first touch.
    fn touch(&mut self, path: &str, write: bool) -> Result<String, EditError> {
        let resolved = if write {
            self.ws.resolve_for_write(path)
        } else {
            self.ws.resolve(path)
        }
        .map_err(|e| ws_error(path, &e))?;
        let rel = resolved.rel.clone();
        if !self.original.contains_key(&rel) {
            let state = match self.ws.read_text_at(&resolved) {
                Ok(Some(t)) => FileState::Text(t),
                Ok(None) => FileState::Absent,
                Err(e @ (WorkspaceError::Binary { .. } | WorkspaceError::TooLarge { .. })) => {
                    FileState::Opaque(e.to_string())
                }
                Err(e) => return Err(ws_error(path, &e)),
            };
            // Not logged: a file first loaded by a failing entry keeps its original state.
            let seen = match &state {
                FileState::Text(t) => Some(Seen::bytes(t.as_bytes())),
                FileState::Absent => Some(Seen::absent()),
                // Not held in memory: hashed where it lies.
                FileState::Opaque(_) => Seen::of_path(&resolved.abs).ok(),
            };
            if let Some(seen) = seen {
                self.seen.insert(rel.clone(), seen);
            }
            self.original.insert(rel.clone(), state.clone());
            self.current.insert(rel.clone(), state);
            self.order.push(rel.clone());
        }
        Ok(rel)
    }

    /// Marks the start of an entry, so a failing entry can be undone. The entry before it
    /// succeeded, so its undo records are dropped.
    pub(crate) fn checkpoint(&mut self) -> Checkpoint {
        self.undo.clear();
        Checkpoint { undo_len: 0 }
    }

    /// Undoes everything since `checkpoint`, newest first. A file the failing entry loaded
    /// for the first time keeps what it holds on disk (its first load is not logged): dropping
    /// it from `current` would leave its original behind with no current state, which reads
    /// as "deleted" to the diff and as "does not exist" to the entries after it.
    pub(crate) fn restore(&mut self, checkpoint: Checkpoint) {
        while self.undo.len() > checkpoint.undo_len {
            let Some(undo) = self.undo.pop() else { break };
            match undo {
                Undo::Current(k, Some(v)) => {
                    self.current.insert(k, v);
                }
                Undo::Current(k, None) => {
                    self.current.remove(&k);
                }
                Undo::Renamed(k, Some(v)) => {
                    self.renamed_from.insert(k, v);
                }
                Undo::Renamed(k, None) => {
                    self.renamed_from.remove(&k);
                }
                Undo::Mode(k, Some(v)) => {
                    self.modes.insert(k, v);
                }
                Undo::Mode(k, None) => {
                    self.modes.remove(&k);
                }
            }
        }
    }

    /// The number of undo records the running entry has made (what a restore would cost).
    #[cfg(test)]
    pub(crate) fn undo_len(&self) -> usize {
        self.undo.len()
    }

    fn set_current(&mut self, rel: String, state: FileState) {
        let old = self.current.insert(rel.clone(), state);
        self.undo.push(Undo::Current(rel, old));
    }

    fn set_renamed(&mut self, to: String, from: Option<String>) {
        let old = match from {
            Some(from) => self.renamed_from.insert(to.clone(), from),
            None => self.renamed_from.remove(&to),
        };
        self.undo.push(Undo::Renamed(to, old));
    }

    fn set_mode(&mut self, rel: String, mode: Option<u32>) {
        let old = match mode {
            Some(mode) => self.modes.insert(rel.clone(), mode),
            None => self.modes.remove(&rel),
        };
        self.undo.push(Undo::Mode(rel, old));
    }

    /// The target of `path`'s last component when that is a symlink (its folders are
    /// resolved as usual; a path whose folders do not resolve is not a link here).
    fn symlink_named(&self, path: &str) -> Option<String> {
        let p = std::path::Path::new(path);
        let name = p.file_name()?;
        let parent = match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => {
                self.ws.resolve(&parent.to_string_lossy()).ok()?.abs
            }
            _ => self.ws.root().to_path_buf(),
        };
        let at = parent.join(name);
        let meta = std::fs::symlink_metadata(&at).ok()?;
        if !meta.file_type().is_symlink() {
            return None;
        }
        std::fs::read_link(&at)
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }

    fn state(&self, rel: &str) -> &FileState {
        self.current.get(rel).unwrap_or(&FileState::Absent)
    }
}

impl FileView for Overlay<'_> {
    fn read(&mut self, path: &str) -> Result<Option<String>, EditError> {
        let rel = self.touch(path, false)?;
        match self.state(&rel) {
            FileState::Absent => Ok(None),
            FileState::Text(t) => Ok(Some(t.clone())),
            FileState::Opaque(why) => Err(EditError::new(Some(path.to_owned()), why.clone())),
        }
    }

    fn write(&mut self, path: &str, content: String) -> Result<(), EditError> {
        let rel = self.touch(path, true)?;
        if let FileState::Opaque(why) = self.state(&rel) {
            return Err(EditError::new(Some(path.to_owned()), why.clone()));
        }
        self.ws
            .check_content(&rel, content.as_bytes())
            .map_err(|e| ws_error(path, &e))?;
        self.set_current(rel, FileState::Text(content));
        Ok(())
    }

    fn delete(&mut self, path: &str) -> Result<(), EditError> {
        let rel = self.touch(path, true)?;
        // `rel` is the link's target: deleting it would leave the link dangling, and the
        // journal restores files, not links.
        if let Some(link) = self.symlink_named(path) {
            return Err(EditError::new(
                Some(path.to_owned()),
                format!(
                    "cannot delete `{path}`: it is a symlink to `{link}`, and deleting would remove \
                     `{rel}` and leave the link dangling; nothing was deleted: delete the link \
                     outside Nuvira (`git rm`), or delete `{rel}` itself"
                ),
            ));
        }
        if !self.state(&rel).exists() {
            return Err(EditError::new(
                Some(path.to_owned()),
                "cannot delete a file that does not exist; check the path",
            ));
        }
        self.set_current(rel.clone(), FileState::Absent);
        self.set_renamed(rel, None);
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), EditError> {
        let src = self.touch(from, true)?;
        if let Some(link) = self.symlink_named(from) {
            return Err(EditError::new(
                Some(from.to_owned()),
                format!(
                    "cannot rename `{from}`: it is a symlink to `{link}`, and renaming would move \
                     `{src}` and leave the link dangling; nothing was renamed: rename the link \
                     outside Nuvira (`git mv`), or rename `{src}` itself"
                ),
            ));
        }
        let dst = self.touch(to, true)?;
        if src == dst {
            return Err(EditError::new(
                Some(from.to_owned()),
                format!("cannot rename `{from}` to itself"),
            ));
        }
        let content = match self.state(&src) {
            FileState::Absent => {
                return Err(EditError::new(
                    Some(from.to_owned()),
                    "cannot rename a file that does not exist; check the path",
                ));
            }
            FileState::Opaque(why) => {
                return Err(EditError::new(Some(from.to_owned()), why.clone()));
            }
            FileState::Text(t) => t.clone(),
        };
        if self.state(&dst).exists() {
            return Err(EditError::new(
                Some(to.to_owned()),
                format!("cannot rename `{from}` to `{to}`: the target exists; delete it first"),
            ));
        }
        let mode = self
            .modes
            .get(&src)
            .copied()
            .or_else(|| nuvira_workspace::mode_of(&self.ws.root().join(&src)));
        self.set_mode(src.clone(), None);
        if let Some(mode) = mode {
            self.set_mode(dst.clone(), Some(mode));
        }
        self.set_current(src.clone(), FileState::Absent);
        self.set_current(dst.clone(), FileState::Text(content));
        let origin = self
            .renamed_from
            .get(&src)
            .cloned()
            .unwrap_or_else(|| src.clone());
        self.set_renamed(src, None);
        self.set_renamed(dst, Some(origin));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_costs_what_it_touches_not_the_size_of_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "kept\n").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let mut o = Overlay::new(&ws);
        for i in 0..2_000 {
            let _ = o.checkpoint();
            o.write(&format!("f{i}.txt"), "x\n".into()).unwrap();
        }
        // A checkpoint copies nothing, however many files the overlay holds...
        let cp = o.checkpoint();
        assert_eq!(o.undo_len(), 0);
        // ...and an entry records only what it changed.
        o.write("new.txt", "n\n".into()).unwrap();
        o.rename("keep.txt", "moved.txt").unwrap();
        assert!(o.undo_len() <= 8, "{}", o.undo_len());
        o.restore(cp);
        assert_eq!(o.current.len(), 2_003);
        assert_eq!(o.current["f1999.txt"], FileState::Text("x\n".into()));
        assert_eq!(o.current["keep.txt"], FileState::Text("kept\n".into()));
        // Files the failed entry loaded first keep their state on disk.
        assert_eq!(o.current["new.txt"], FileState::Absent);
        assert_eq!(o.current["moved.txt"], FileState::Absent);
        assert!(o.renamed_from.is_empty() && o.modes.is_empty());
    }
}
