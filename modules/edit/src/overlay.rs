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
    /// What each file held when first read, for the journal's compare-and-swap check.
    pub(crate) seen: BTreeMap<String, Seen>,
}

/// The overlay's mutable state before an entry ran ([`Overlay::checkpoint`]).
pub(crate) struct Checkpoint {
    current: BTreeMap<String, FileState>,
    renamed_from: BTreeMap<String, String>,
    modes: BTreeMap<String, u32>,
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

    /// What an entry may change, saved before it runs so a failing entry can be undone.
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            current: self.current.clone(),
            renamed_from: self.renamed_from.clone(),
            modes: self.modes.clone(),
        }
    }

    /// Undoes everything since `checkpoint`. A file the failing entry loaded for the first
    /// time keeps what it holds on disk: dropping it from `current` alone would leave its
    /// original behind with no current state, which reads as "deleted" to the diff and as
    /// "does not exist" to the entries after it.
    pub(crate) fn restore(&mut self, checkpoint: Checkpoint) {
        self.current = checkpoint.current;
        self.renamed_from = checkpoint.renamed_from;
        self.modes = checkpoint.modes;
        for (rel, state) in &self.original {
            if !self.current.contains_key(rel) {
                self.current.insert(rel.clone(), state.clone());
            }
        }
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
        self.current.insert(rel, FileState::Text(content));
        Ok(())
    }

    fn delete(&mut self, path: &str) -> Result<(), EditError> {
        let rel = self.touch(path, true)?;
        if !self.state(&rel).exists() {
            return Err(EditError::new(
                Some(path.to_owned()),
                "cannot delete a file that does not exist; check the path",
            ));
        }
        self.current.insert(rel.clone(), FileState::Absent);
        self.renamed_from.remove(&rel);
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), EditError> {
        let src = self.touch(from, true)?;
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
            .remove(&src)
            .or_else(|| nuvira_workspace::mode_of(&self.ws.root().join(&src)));
        if let Some(mode) = mode {
            self.modes.insert(dst.clone(), mode);
        }
        self.current.insert(src.clone(), FileState::Absent);
        self.current.insert(dst.clone(), FileState::Text(content));
        let origin = self.renamed_from.remove(&src).unwrap_or(src);
        self.renamed_from.insert(dst, origin);
        Ok(())
    }
}
