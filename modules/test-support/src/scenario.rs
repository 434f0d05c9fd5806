//! Scenario folders, one format for every scenario test.
//!
//! A scenario is a folder `NNN_name/` holding:
//!
//! - `input/`: the workspace before;
//! - `request.yaml`: what to do (for edits: `edits:`, a list of edit entries);
//! - either `expected/`, the whole workspace after, compared as a tree, or
//!   `expected_error.txt`, lines that must each appear in the error (and nothing is written);
//! - optionally `expected_stdout.txt`, lines that must each appear in the output.
//!
//! [`run`] runs a test function on every scenario below a root and reports every failure at
//! once; `SCENARIO=part` runs only the scenarios whose name contains `part`.

use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A workspace as a tree: `/`-separated relative path -> bytes.
pub type Tree = BTreeMap<String, Vec<u8>>;

/// One scenario folder.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The folder name (`001_search_replace`).
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
}

/// What a scenario expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// The whole workspace after (`expected/`).
    Tree(Tree),
    /// Lines the error must contain (`expected_error.txt`); the workspace stays as it was.
    Error(Vec<String>),
}

impl Scenario {
    /// The workspace before (`input/`).
    pub fn input(&self) -> PathBuf {
        self.dir.join("input")
    }

    /// The request file (`request.yaml`).
    pub fn request_path(&self) -> PathBuf {
        self.dir.join("request.yaml")
    }

    /// The request, parsed.
    ///
    /// # Panics
    /// When `request.yaml` is missing or does not parse as `T`.
    pub fn request<T: DeserializeOwned>(&self) -> T {
        let path = self.request_path();
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// What the scenario expects.
    ///
    /// # Panics
    /// When it has neither `expected/` nor `expected_error.txt`.
    pub fn expected(&self) -> Expected {
        let tree = self.dir.join("expected");
        let error = self.dir.join("expected_error.txt");
        if tree.is_dir() {
            Expected::Tree(read_tree(&tree))
        } else if error.is_file() {
            Expected::Error(lines(&error))
        } else {
            panic!(
                "scenario {}: needs expected/ or expected_error.txt",
                self.name
            )
        }
    }

    /// Whether the scenario expects an error.
    pub fn expects_error(&self) -> bool {
        self.dir.join("expected_error.txt").is_file()
    }

    /// Lines the output must contain (`expected_stdout.txt`; none without it).
    pub fn expected_stdout(&self) -> Vec<String> {
        let path = self.dir.join("expected_stdout.txt");
        if path.is_file() {
            lines(&path)
        } else {
            Vec::new()
        }
    }
}

/// Every scenario folder directly below `root`, by name.
///
/// # Panics
/// When `root` cannot be read.
pub fn scenarios(root: &Path) -> Vec<Scenario> {
    let mut out: Vec<Scenario> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|dir| Scenario {
            name: dir.file_name().unwrap().to_string_lossy().into_owned(),
            dir,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Runs `test` on every scenario below `root` (only those whose name contains `$SCENARIO`
/// when it is set) and returns how many ran.
///
/// # Panics
/// When fewer than `at_least` scenarios exist (a moved folder must not pass by running
/// nothing), or listing every scenario whose test returned an error.
pub fn run(
    root: &Path,
    at_least: usize,
    mut test: impl FnMut(&Scenario) -> Result<(), String>,
) -> usize {
    let all = scenarios(root);
    assert!(
        all.len() >= at_least,
        "only {} scenarios in {}, expected at least {at_least}",
        all.len(),
        root.display()
    );
    let only = std::env::var("SCENARIO").ok();
    let mut ran = 0;
    let mut failures = Vec::new();
    for s in &all {
        if only.as_deref().is_some_and(|o| !s.name.contains(o)) {
            continue;
        }
        ran += 1;
        if let Err(e) = test(s) {
            failures.push(format!("--- {}: {e}", s.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    ran
}

/// Every file below `dir` with its bytes, skipping `.nuvira/` (the journal) and `.gitkeep`
/// files (which only keep empty folders in git). A missing `dir` is an empty tree.
///
/// # Panics
/// When a file cannot be read.
pub fn read_tree(dir: &Path) -> Tree {
    fn walk(base: &Path, dir: &Path, out: &mut Tree) {
        let Ok(read) = std::fs::read_dir(dir) else {
            return;
        };
        for e in read {
            let p = e.unwrap().path();
            let rel = p
                .strip_prefix(base)
                .unwrap()
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            if rel == ".nuvira" || p.file_name().is_some_and(|n| n == ".gitkeep") {
                continue;
            }
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = Tree::new();
    walk(dir, dir, &mut out);
    out
}

/// Copies the tree below `from` (as [`read_tree`] sees it) into `to`.
///
/// # Panics
/// When a file cannot be read or written.
pub fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in read_tree(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// `Ok` when the trees are equal; otherwise which paths differ and, for each differing file,
/// a unified diff (expected -> got).
///
/// # Errors
/// The difference, as text for a test failure.
pub fn compare_trees(got: &Tree, want: &Tree) -> Result<(), String> {
    let got_paths: Vec<&String> = got.keys().collect();
    let want_paths: Vec<&String> = want.keys().collect();
    if got_paths != want_paths {
        return Err(format!(
            "files differ: got {got_paths:?}, expected {want_paths:?}"
        ));
    }
    let mut diffs = Vec::new();
    for (path, want) in want {
        let got = &got[path];
        if got != want {
            let (w, g) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
            let diff = similar::TextDiff::from_lines(&*w, &*g)
                .unified_diff()
                .header("expected", "got")
                .to_string();
            diffs.push(format!("{path} differs:\n{diff}"));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(diffs.join("\n"))
    }
}

/// `Ok` when `text` contains every line of `lines`.
///
/// # Errors
/// The first missing line, with the text.
pub fn contains_lines(text: &str, lines: &[String], what: &str) -> Result<(), String> {
    match lines.iter().find(|l| !text.contains(l.as_str())) {
        None => Ok(()),
        Some(l) => Err(format!("the {what} does not mention `{l}`:\n{text}")),
    }
}

/// The non-blank lines of a file.
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}
