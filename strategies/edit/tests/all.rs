//! Scenario tests: each `scenarios/NNN_name/` holds `input/` (the workspace before),
//! `request.yaml` (`edits:`, a list of edit entries applied in order) and either `expected/`
//! (the whole workspace after, compared as a tree) or `expected_error.txt` (every line must
//! appear in the error message of the batch): the format of
//! `nuvira_test_support::scenario`, which runs them. Inputs are real files from published crates and
//! npm packages where that matters (see modules/syntax/tests/fixtures/README.md).

#![allow(clippy::expect_used, clippy::unwrap_used, reason = "test harness")]

use anyhow::{Result, bail};
use nuvira_api::{EditEntry, EditError, FileView};
use nuvira_test_support::scenario::{
    self, Expected, Scenario, Tree, compare_trees, contains_lines, read_tree,
};
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

/// The tree as text (every scenario file is UTF-8).
fn text_tree(tree: Tree) -> BTreeMap<String, String> {
    tree.into_iter()
        .map(|(path, bytes)| {
            (
                path,
                String::from_utf8(bytes).expect("a UTF-8 scenario file"),
            )
        })
        .collect()
}

fn run(scenario: &Scenario) -> Result<()> {
    let request: Request = scenario.request();
    let input = text_tree(read_tree(&scenario.input()));
    let mut view = MemView(input.clone());
    let outcome = apply_all(&request.edits, &mut view);
    let expected = match scenario.expected() {
        Expected::Error(lines) => {
            let Err(err) = outcome else {
                bail!("expected an error, but the edits applied");
            };
            contains_lines(&err.to_string(), &lines, "error").map_err(anyhow::Error::msg)?;
            return Ok(());
        }
        Expected::Tree(tree) => tree,
    };
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
    let got: Tree = view
        .0
        .into_iter()
        .map(|(path, text)| (path, text.into_bytes()))
        .collect();
    compare_trees(&got, &expected).map_err(anyhow::Error::msg)
}

#[test]
fn scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    scenario::run(&root, 30, |s| run(s).map_err(|e| format!("{e:#}")));
}

#[test]
fn every_builtin_strategy_has_success_and_failure_scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for s in scenario::scenarios(&root) {
        let request: Request = s.request();
        let fails = s.expects_error();
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
