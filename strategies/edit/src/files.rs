//! Whole-file strategies: `whole-file`, `delete-file`, `rename-file`.

use crate::text::read_existing;
use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};

/// `whole-file`: writes `content` to `path`, creating the file (and, through the file view,
/// its parent folders) or replacing it.
#[derive(Debug, Clone, Copy, Default)]
pub struct WholeFile;

impl EditStrategy for WholeFile {
    fn name(&self) -> &str {
        "whole-file"
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = entry.require_path()?;
        let content = entry.require("content", &entry.content)?;
        files.write(path, content.to_owned())
    }
}

/// `delete-file`: deletes `path`, which must exist.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteFile;

impl EditStrategy for DeleteFile {
    fn name(&self) -> &str {
        "delete-file"
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = entry.require_path()?;
        read_existing(files, entry, path)?;
        files.delete(path)
    }
}

/// `rename-file`: moves `path` to `to`; the source must exist and the target must not.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenameFile;

impl EditStrategy for RenameFile {
    fn name(&self) -> &str {
        "rename-file"
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = entry.require_path()?;
        let to = entry.require("to", &entry.to)?;
        read_existing(files, entry, path)?;
        if files.read(to)?.is_some() {
            return Err(EditError::new(
                Some(to.to_owned()),
                format!(
                    "rename `{path}` to `{to}`: the target already exists; delete it first or pick another name"
                ),
            ));
        }
        files.rename(path, to)
    }
}
