//! Scenario tests: each `scenarios/NNN_name/` holds `input/` (the workspace before),
//! `request.yaml` (`edits:`, a list of edit entries applied in order) and either `expected/`
//! (the whole workspace after, compared as a tree) or `expected_error.txt` (every line must
//! appear in the error message of the batch). Inputs are real files from published crates and
//! npm packages where that matters (see modules/syntax/tests/fixtures/README.md).

#![allow(clippy::expect_used, clippy::unwrap_used, reason = "test harness")]

use anyhow::{Context, Result, bail};
use nuvira_api::{EditEntry, EditError, FileView};
use std::collections::BTreeMap;
use std::path::Path;

/// The in-memory [`FileView`] the scenarios run against.
#[derive(Default, Debug)]
struct MemView(BTreeMap<String, String>);

impl MemView {
    fn missing(path: &str) -> EditError {
        EditError::new(Some(path.to_owned()), "the file does not exist")
    }
}

impl FileView for MemView {
    fn read(&mut self, path: &str) -> Result<Option<String>, EditError> {
        Ok(self.0.get(path).cloned())
    }
    fn write(&mut self, path: &str, content: String) -> Result<(), EditError> {
        self.0.insert(path.to_owned(), content);
        Ok(())
    }
    fn delete(&mut self, path: &str) -> Result<(), EditError> {
        self.0
            .remove(path)
            .map(drop)
            .ok_or_else(|| Self::missing(path))
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), EditError> {
        let text = self.0.remove(from).ok_or_else(|| Self::missing(from))?;
        self.0.insert(to.to_owned(), text);
        Ok(())
    }
}

fn read_tree(root: &Path) -> Result<BTreeMap<String, String>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else if path.file_name().is_some_and(|n| n != ".gitkeep") {
                let rel = path
                    .strip_prefix(root)?
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read_to_string(&path)?);
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    if root.exists() {
        walk(root, root, &mut out)?;
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
struct Request {
    edits: Vec<EditEntry>,
}

fn apply_all(edits: &[EditEntry], view: &mut MemView) -> Result<(), EditError> {
    for entry in edits {
        let strategy = nuvira_edit_strategies::by_name(&entry.strategy).ok_or_else(|| {
            EditError::new(
                entry.path.clone(),
                format!("unknown strategy `{}`", entry.strategy),
            )
        })?;
        strategy.apply(entry, view)?;
    }
    Ok(())
}

fn run(dir: &Path) -> Result<()> {
    let request: Request =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("request.yaml"))?)
            .context("request.yaml")?;
    let input = read_tree(&dir.join("input"))?;
    let mut view = MemView(input.clone());
    let outcome = apply_all(&request.edits, &mut view);
    let error_file = dir.join("expected_error.txt");
    if error_file.exists() {
        let Err(err) = outcome else {
            bail!("expected an error, but the edits applied");
        };
        let shown = err.to_string();
        for want in std::fs::read_to_string(error_file)?
            .lines()
            .filter(|l| !l.is_empty())
        {
            if !shown.contains(want) {
                bail!("the error does not mention `{want}`:\n{shown}");
            }
        }
        return Ok(());
    }
    if let Err(err) = outcome {
        bail!("edits failed: {err}");
    }
    // Successful edits of code must not introduce syntax errors (real tree-sitter check).
    for (path, text) in &view.0 {
        let before = input.get(path).map_or("", String::as_str);
        let report = nuvira_syntax::introduced_errors(path, before, text);
        if let Some(d) = report.diagnostics.first() {
            bail!(
                "{path}:{}: the edit introduced a syntax error: {}",
                d.line,
                d.message
            );
        }
    }
    let expected = read_tree(&dir.join("expected"))?;
    let got_paths: Vec<&String> = view.0.keys().collect();
    let want_paths: Vec<&String> = expected.keys().collect();
    if got_paths != want_paths {
        bail!("files differ: got {got_paths:?}, expected {want_paths:?}");
    }
    for (path, want) in &expected {
        let got = &view.0[path];
        if got != want {
            let diff = similar::TextDiff::from_lines(want, got)
                .unified_diff()
                .header("expected", "got")
                .to_string();
            bail!("{path} differs:\n{diff}");
        }
    }
    Ok(())
}

#[test]
fn scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .expect("scenarios folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 30, "scenarios are missing: {}", dirs.len());
    let only = std::env::var("SCENARIO").ok();
    let mut failures = Vec::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        if let Err(e) = run(dir) {
            failures.push(format!("--- {name}: {e:#}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_builtin_strategy_has_success_and_failure_scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        let request: Request =
            serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("request.yaml")).unwrap())
                .unwrap();
        let fails = dir.join("expected_error.txt").exists();
        for e in request.edits {
            let s = seen.entry(e.strategy).or_default();
            if fails { s.1 = true } else { s.0 = true }
        }
    }
    for name in nuvira_edit_strategies::NAMES {
        assert_eq!(
            seen.get(name),
            Some(&(true, true)),
            "{name}: needs a success and a failure scenario"
        );
    }
    let builtin: Vec<String> = nuvira_edit_strategies::builtin()
        .iter()
        .map(|s| s.name().to_owned())
        .collect();
    assert_eq!(builtin, nuvira_edit_strategies::NAMES);
}

#[test]
fn unified_diff_write_set_names_every_file_of_the_patch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios/012_unified_diff_multi_file_git");
    let request: Request =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("request.yaml")).unwrap())
            .unwrap();
    let strategy = nuvira_edit_strategies::by_name("unified-diff").unwrap();
    assert_eq!(
        strategy.paths(&request.edits[0]),
        ["src/chan.rs", "NOTES.md", "old.txt"]
    );
}
