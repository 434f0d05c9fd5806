//! Small strategies and helpers shared by the tests. The strategies are minimal plugins written
//! against the public `EditStrategy` contract (the real ones live in `nuvira-edit-strategies`).

use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};
use nuvira_edit::Editor;
use std::path::Path;
use std::sync::Arc;

/// `search` must occur exactly once; it is replaced by `replace`.
pub struct SearchReplace;
impl EditStrategy for SearchReplace {
    fn name(&self) -> &str {
        "search-replace"
    }
    fn apply(&self, e: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = e.require_path()?;
        let search = e.require("search", &e.search)?;
        let replace = e.require("replace", &e.replace)?;
        let text = files
            .read(path)?
            .ok_or_else(|| EditError::new(Some(path.into()), "the file does not exist"))?;
        match text.matches(search).count() {
            1 => files.write(path, text.replacen(search, replace, 1)),
            0 => {
                let line = text
                    .lines()
                    .position(|l| l.contains(search.lines().next().unwrap_or("").trim()))
                    .map_or(1, |i| i + 1);
                Err(EditError::new(Some(path.into()), "search text not found").at_line(line as u32))
            }
            n => Err(EditError::new(
                Some(path.into()),
                format!("search text found {n} times"),
            )),
        }
    }
}

pub struct WholeFile;
impl EditStrategy for WholeFile {
    fn name(&self) -> &str {
        "whole-file"
    }
    fn apply(&self, e: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        files.write(
            e.require_path()?,
            e.require("content", &e.content)?.to_owned(),
        )
    }
}

pub struct DeleteFile;
impl EditStrategy for DeleteFile {
    fn name(&self) -> &str {
        "delete-file"
    }
    fn apply(&self, e: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        files.delete(e.require_path()?)
    }
}

pub struct RenameFile;
impl EditStrategy for RenameFile {
    fn name(&self) -> &str {
        "rename-file"
    }
    fn apply(&self, e: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        files.rename(e.require_path()?, e.require("to", &e.to)?)
    }
}

pub fn editor() -> Editor {
    Editor::new()
        .with_strategies([
            Arc::new(SearchReplace) as Arc<dyn EditStrategy>,
            Arc::new(WholeFile),
            Arc::new(DeleteFile),
            Arc::new(RenameFile),
        ])
        .with_checker(Some(Arc::new(nuvira_syntax::TreeSitterChecker::new())))
}

/// The other way an editor is built: every built-in strategy and the tree-sitter checker.
pub fn standard_editor() -> Editor {
    Editor::standard()
}

pub fn entry(value: serde_json::Value) -> EditEntry {
    serde_json::from_value(value).unwrap()
}

pub fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, t) in files {
        let p = dir.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    }
    dir
}

/// Every file under `dir` (skipping `.nuvira/`) with its bytes.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if rel == ".nuvira" {
                continue;
            }
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

pub use nuvira_test_support::Recorder;
