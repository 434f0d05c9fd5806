//! # nuvira-inspect — find the files of a repository that matter for a goal
//!
//! The `inspect` step of a Nuvira plan answers "where in this repository is the work?". It
//! walks the repository, scores every text file against the goal's keywords, and describes the
//! most relevant files (symbols, imports, the tests that belong to them, and for the top few the
//! capped text) in a [`nuvira_api::InspectionResult`].
//!
//! Why it is shaped so:
//! - **In-process parallel walk** ([`walk`]): `ignore`'s parallel walker respects `.gitignore`,
//!   `.ignore` and hidden files like ripgrep, and runs in this process (no `rg` subprocess).
//! - **Deterministic keyword ranking** ([`keywords`], [`inspect`]): the goal is split into
//!   identifiers and words (`parse_config` → `parse_config`, `parse`, `config`), stop words are
//!   dropped, and files are scored by path matches, content matches (dampened by a logarithm)
//!   and, weighted highest, symbol definitions. [`inspect`] asks no model: it is cheap,
//!   reproducible and works offline (`stats.llm_fallback_used` is `true`). The `inspect`
//!   module, when the run has a model, lets it choose among the best candidates
//!   ([`classify`]) and falls back to the keyword ranking if the model fails.
//! - **Tree-sitter only where it pays** ([`lang`], outlines from `nuvira-syntax`): a file is
//!   parsed only when its text matches a keyword or it ends up among the artifacts, so large
//!   repositories cost one read per file.
//! - **Confined**: nothing outside the workspace root is read (symlinks leaving it are not
//!   followed), `.git/` and `.nuvira/` are never entered, files over the read cap and binary
//!   files are skipped unread.
//!
//! ```no_run
//! use nuvira_inspect::{inspect, Hooks, InspectOptions};
//!
//! let result = inspect(".".as_ref(), "rename parse_config", &InspectOptions::default(), &Hooks::none())?;
//! for artifact in &result.artifacts {
//!     println!("{} {:.1}", artifact.path, artifact.score);
//! }
//! # Ok::<(), nuvira_inspect::InspectError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod classify;
pub mod keywords;
pub mod lang;
mod module;
pub mod score;
pub mod tree;
pub mod walk;

pub use module::{InspectModule, StepConfig};

use lang::Outline;
use nuvira_api::{Artifact, EventKind, InspectionResult, InspectionStats};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Default cap on the bytes read from one file; larger files are skipped.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 100 * 1024;
/// Default number of artifacts.
pub const DEFAULT_MAX_FILES: usize = 20;

/// How to inspect.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InspectOptions {
    /// Extra keywords (identifiers), on top of those taken from the goal.
    pub keywords: Vec<String>,
    /// How many of the most relevant files become artifacts.
    pub max_files: usize,
    /// Workspace-relative files or folders to restrict the walk to; empty means everything.
    pub paths: Vec<String>,
    /// Files larger than this are skipped unread.
    pub max_file_bytes: u64,
    /// How many of the top artifacts carry their text.
    pub content_files: usize,
    /// The cap on an artifact's text, in bytes.
    pub content_bytes: usize,
    /// The cap on the lines of the rendered file tree.
    pub tree_lines: usize,
    /// Threads for the walk and the reads; 0 picks the number of CPUs.
    pub threads: usize,
    /// Workspace-relative files to rank higher (the files a branch changed: `git diff
    /// --name-only base...HEAD`): their score becomes `score * 1.5 + 2`, and they are candidates
    /// even when no keyword matches them. Inspect computes nothing from git itself; the caller
    /// passes the list (empty: no preference).
    pub prefer: Vec<String>,
    /// Workspace-relative files never inspected (generated files, by `.gitattributes`
    /// `linguist-generated` or `-diff`; the caller passes the list).
    pub skip: Vec<String>,
}

impl Default for InspectOptions {
    fn default() -> Self {
        Self {
            keywords: Vec::new(),
            max_files: DEFAULT_MAX_FILES,
            paths: Vec::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            content_files: 5,
            content_bytes: 16 * 1024,
            tree_lines: 200,
            threads: 0,
            prefer: Vec::new(),
            skip: Vec::new(),
        }
    }
}

impl InspectOptions {
    /// Builder-style: extra keywords.
    #[must_use]
    pub fn with_keywords(mut self, keywords: Vec<String>) -> Self {
        self.keywords = keywords;
        self
    }

    /// Builder-style: how many artifacts.
    #[must_use]
    pub fn with_max_files(mut self, max_files: usize) -> Self {
        self.max_files = max_files;
        self
    }

    /// Builder-style: restrict the walk to these workspace-relative files or folders.
    #[must_use]
    pub fn with_paths(mut self, paths: Vec<String>) -> Self {
        self.paths = paths;
        self
    }

    /// Builder-style: the per-file read cap.
    #[must_use]
    pub fn with_max_file_bytes(mut self, max_file_bytes: u64) -> Self {
        self.max_file_bytes = max_file_bytes;
        self
    }

    /// Builder-style: files to rank higher ([`InspectOptions::prefer`]).
    #[must_use]
    pub fn with_prefer(mut self, prefer: Vec<String>) -> Self {
        self.prefer = prefer;
        self
    }

    /// Builder-style: files never inspected ([`InspectOptions::skip`]).
    #[must_use]
    pub fn with_skip(mut self, skip: Vec<String>) -> Self {
        self.skip = skip;
        self
    }

    /// Builder-style: walker and reader threads (0: one per CPU).
    #[must_use]
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
}

/// Why an inspection could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The workspace root is missing or not a folder.
    #[error("open workspace root {}: {reason}", path.display())]
    Root {
        /// The root as given.
        path: PathBuf,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A `paths` entry is outside the root, inside `.git/`/`.nuvira/`, or missing.
    #[error("restrict inspection to `{path}`: {reason}")]
    Path {
        /// The entry as given.
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// Cancellation or the deadline stopped the walk.
    #[error("inspect the workspace: stopped before the walk finished (cancelled or out of time)")]
    Stopped,
}

/// Why [`check_path`] rejects a `paths` entry; each message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathRejected {
    /// An absolute path.
    #[error("it is absolute; {INSIDE}: write it relative to the repository root, e.g. `src`")]
    Absolute,
    /// A `..` that climbs above the workspace root.
    #[error(
        "`..` leads outside the workspace; {INSIDE}: name a folder inside the repository, e.g. `src`"
    )]
    LeavesRoot,
    /// A path through `.git` or `.nuvira`.
    #[error(
        "`.git/` and `.nuvira/` are never inspected (the path goes through `{component}`); name a folder of the project, relative to the repository root, e.g. `src`"
    )]
    NeverInspected {
        /// The component that is never entered.
        component: String,
    },
}

const INSIDE: &str =
    "paths must be relative to the repository root and stay inside it (no `..`, no absolute paths)";

/// Callbacks an inspection reports through: events, and a stop flag polled per file.
pub struct Hooks<'a> {
    /// Receives `inspect:*` events.
    pub emit: &'a (dyn Fn(EventKind) + Sync),
    /// Returns true to stop (cancellation, deadline).
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

impl Hooks<'static> {
    /// No events, never stops.
    pub fn none() -> Self {
        Self {
            emit: &|_| {},
            stop: &|| false,
        }
    }
}

/// What reading one file gave.
enum ReadOutcome {
    Text(String),
    Binary,
    TooLarge,
    Failed,
}

/// Reads a file if it is at most `cap` bytes and not binary ([`nuvira_workspace::binary_reason`]).
fn read_capped(path: &Path, cap: u64) -> (ReadOutcome, u64) {
    let Ok(file) = std::fs::File::open(path) else {
        return (ReadOutcome::Failed, 0);
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > cap {
        return (ReadOutcome::TooLarge, size);
    }
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // `take` guards against a file that grew since the metadata call.
    if file.take(cap + 1).read_to_end(&mut buf).is_err() {
        return (ReadOutcome::Failed, size);
    }
    if buf.len() as u64 > cap {
        return (ReadOutcome::TooLarge, buf.len() as u64);
    }
    if nuvira_workspace::binary_reason(&buf).is_some() {
        return (ReadOutcome::Binary, size);
    }
    let text = match String::from_utf8(buf) {
        Ok(t) => t,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    (ReadOutcome::Text(text), size)
}

/// A file that matched in phase 1.
struct Candidate {
    index: usize,
    /// In [`InspectOptions::prefer`].
    preferred: bool,
    pre: score::Prescore,
    size: u64,
    score: f64,
    outline: Option<Outline>,
}

/// The score of a preferred file (one the branch changed).
fn preferred_score(score: f64) -> f64 {
    ((score * 1.5 + 2.0) * 100.0).round() / 100.0
}

/// How many of the best candidates are parsed to confirm their definitions.
fn parse_budget(max_files: usize) -> usize {
    max_files.saturating_mul(2).max(32)
}

/// Checks a `paths` entry without touching the filesystem, and returns it normalized (`.`
/// dropped, `..` applied).
///
/// Rejected: absolute paths, a `..` that climbs above the workspace root, and any `.git` or
/// `.nuvira` component (those folders are never inspected). Step validation uses this, so a bad
/// entry is reported before a run starts; [`inspect`] applies it again before resolving the
/// entry on disk (where symlinks are checked too).
///
/// # Errors
/// [`PathRejected`]: why the entry is rejected and what to write instead.
pub fn check_path(path: &str) -> Result<PathBuf, PathRejected> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Prefix(_) | Component::RootDir => return Err(PathRejected::Absolute),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(PathRejected::LeavesRoot);
                }
            }
            Component::Normal(s) => {
                if walk::NEVER_ENTER.iter().any(|n| s == *n) {
                    return Err(PathRejected::NeverInspected {
                        component: s.to_string_lossy().into_owned(),
                    });
                }
                parts.push(s);
            }
        }
    }
    Ok(parts.iter().collect())
}

/// Resolves the `paths` restriction inside the (canonical) root.
fn resolve_restrictions(root: &Path, paths: &[String]) -> Result<Vec<PathBuf>, InspectError> {
    let mut out = Vec::new();
    for p in paths {
        let err = |reason: &str| InspectError::Path {
            path: p.clone(),
            reason: reason.to_owned(),
        };
        let rel = check_path(p).map_err(|reason| err(&reason.to_string()))?;
        let abs = std::fs::canonicalize(root.join(rel)).map_err(|e| {
            err(&format!(
                "it does not exist in the workspace ({e}); fix or remove the entry"
            ))
        })?;
        if !abs.starts_with(root) {
            return Err(err(
                "it resolves (through a symlink) outside the workspace root",
            ));
        }
        let inside_private = abs
            .strip_prefix(root)
            .ok()
            .and_then(|r| r.components().next())
            .is_some_and(|c| walk::NEVER_ENTER.iter().any(|n| c.as_os_str() == *n));
        if inside_private {
            return Err(err("`.git/` and `.nuvira/` are never inspected"));
        }
        out.push(abs);
    }
    Ok(out)
}

/// Cuts `text` to at most `cap` bytes at a character boundary.
fn cap_text(mut text: String, cap: usize) -> String {
    if text.len() > cap {
        let mut end = cap;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n… (truncated)\n");
    }
    text
}

/// Inspects the repository at `root` for `goal`.
///
/// Emits `inspect:scanning` before the walk, `inspect:file-found` for each relevant file
/// returned, and `inspect:completed` at the end.
///
/// # Errors
/// [`InspectError::Root`] when the root is not a readable folder, [`InspectError::Path`] for a
/// bad `paths` entry, [`InspectError::Stopped`] when `hooks.stop` ended the walk.
pub fn inspect(
    root: &Path,
    goal: &str,
    options: &InspectOptions,
    hooks: &Hooks<'_>,
) -> Result<InspectionResult, InspectError> {
    let root = std::fs::canonicalize(root).map_err(|e| InspectError::Root {
        path: root.to_owned(),
        reason: format!("{e}; pass an existing repository folder"),
    })?;
    if !root.is_dir() {
        return Err(InspectError::Root {
            path: root,
            reason: "it is not a folder; pass the repository folder".into(),
        });
    }
    let restrict = resolve_restrictions(&root, &options.paths)?;
    if options.paths.is_empty() {
        (hooks.emit)(EventKind::InspectScanning { path: ".".into() });
    } else {
        for p in &options.paths {
            (hooks.emit)(EventKind::InspectScanning { path: p.clone() });
        }
    }
    let walked = walk::walk(
        &root,
        &walk::WalkOptions {
            restrict,
            threads: options.threads,
            hidden: false,
        },
        hooks.stop,
    );
    if walked.stopped {
        return Err(InspectError::Stopped);
    }
    let mut walked = walked;
    if !options.skip.is_empty() {
        let skip: BTreeSet<&str> = options.skip.iter().map(String::as_str).collect();
        walked.files.retain(|f| !skip.contains(f.rel.as_str()));
    }
    let prefer: BTreeSet<&str> = options.prefer.iter().map(String::as_str).collect();
    let files = &walked.files;
    let matcher = score::Matcher::new(keywords::keywords(goal, &options.keywords));

    // Phase 1, in parallel: read every file once and prescore it; each worker takes the next
    // index.
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
    .min(files.len().max(1));
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut found = Vec::new();
        let (mut inspected, mut errors, mut bytes) = (0u64, 0u64, 0u64);
        if matcher.keywords().is_empty() {
            return (found, inspected, errors, bytes);
        }
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(file) = files.get(i) else { break };
            if (hooks.stop)() {
                break;
            }
            let (outcome, size) = read_capped(&file.abs, options.max_file_bytes);
            match outcome {
                ReadOutcome::Text(text) => {
                    inspected += 1;
                    bytes += size;
                    let pre = matcher.prescore(&file.rel, &text);
                    let preferred = prefer.contains(file.rel.as_str());
                    if pre.raw > 0.0 || preferred {
                        found.push(Candidate {
                            index: i,
                            preferred,
                            pre,
                            size,
                            score: matcher.finish(&pre, 0.0),
                            outline: None,
                        });
                    }
                }
                ReadOutcome::Failed => errors += 1,
                ReadOutcome::Binary | ReadOutcome::TooLarge => {}
            }
        }
        (found, inspected, errors, bytes)
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(worker)).collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    if (hooks.stop)() {
        return Err(InspectError::Stopped);
    }
    let mut candidates = Vec::new();
    let mut stats = InspectionStats::default();
    stats.total_files = files.len() as u64;
    stats.errors = walked.errors;
    stats.llm_fallback_used = true;
    let mut total_bytes = 0;
    for (found, inspected, errors, bytes) in results {
        candidates.extend(found);
        stats.inspected_files += inspected;
        stats.errors += errors;
        total_bytes += bytes;
    }

    // Phase 2: parse the most promising candidates (by score plus hinted definitions) to
    // confirm which keywords name a definition.
    let by_path = |a: &Candidate, b: &Candidate| files[a.index].rel.cmp(&files[b.index].rel);
    let estimate = |c: &Candidate| {
        let e = matcher.finish(&c.pre, c.pre.hinted);
        if c.preferred { preferred_score(e) } else { e }
    };
    candidates.sort_by(|a, b| {
        estimate(b)
            .total_cmp(&estimate(a))
            .then_with(|| by_path(a, b))
    });
    let budget = parse_budget(options.max_files).min(candidates.len());
    let next = AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<&mut Candidate>> = candidates[..budget]
        .iter_mut()
        .map(std::sync::Mutex::new)
        .collect();
    let parse_worker = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = slots.get(i) else { break };
            if (hooks.stop)() {
                break;
            }
            let Ok(mut c) = slot.lock() else { continue };
            let file = &files[c.index];
            let Some(language) = lang::language_of(&file.rel).filter(|l| lang::has_inspector(l))
            else {
                continue;
            };
            if !c.pre.content_match {
                continue;
            }
            if let (ReadOutcome::Text(text), _) = read_capped(&file.abs, options.max_file_bytes) {
                let outline = lang::outline(language, &text);
                c.score = matcher.finish(&c.pre, matcher.symbol_score(&outline));
                c.outline = Some(outline);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..threads.min(budget.max(1)) {
            s.spawn(parse_worker);
        }
    });
    drop(slots);
    if (hooks.stop)() {
        return Err(InspectError::Stopped);
    }
    for c in candidates.iter_mut().filter(|c| c.preferred) {
        c.score = preferred_score(c.score);
    }
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| by_path(a, b)));
    candidates.truncate(options.max_files);
    let scored = candidates;

    let all: BTreeSet<String> = files.iter().map(|f| f.rel.clone()).collect();
    let read_rel = |rel: &str| -> Option<String> {
        let f = files.binary_search_by(|f| f.rel.as_str().cmp(rel)).ok()?;
        match read_capped(&files[f].abs, options.max_file_bytes).0 {
            ReadOutcome::Text(t) => Some(t),
            _ => None,
        }
    };
    let mut artifacts = Vec::with_capacity(scored.len());
    for (rank, s) in scored.into_iter().enumerate() {
        let file = &files[s.index];
        let language = lang::language_of(&file.rel);
        let text = read_rel(&file.rel);
        let outline = match (s.outline, language, &text) {
            (Some(o), _, _) => o,
            (None, Some(l), Some(t)) => lang::outline(l, t),
            _ => Outline::default(),
        };
        let test_files = lang::test_files_for(&file.rel, &outline, &all, &read_rel);
        let mut artifact = Artifact::default();
        artifact.path = file.rel.clone();
        artifact.language = language.map(str::to_owned);
        artifact.size = s.size;
        artifact.score = s.score;
        artifact.symbols = outline.symbols;
        artifact.imports = outline.imports;
        artifact.test_files = test_files;
        if rank < options.content_files {
            artifact.content = text.map(|t| cap_text(t, options.content_bytes));
        }
        (hooks.emit)(EventKind::InspectFileFound {
            path: file.rel.clone(),
            extension: file
                .rel
                .rsplit('/')
                .next()
                .and_then(|n| n.rsplit_once('.'))
                .map(|(_, e)| e.to_owned())
                .unwrap_or_default(),
            size: s.size,
        });
        artifacts.push(artifact);
    }
    (hooks.emit)(EventKind::InspectCompleted {
        artifacts: artifacts.len(),
        total_bytes,
    });
    let mut result = InspectionResult::default();
    result.relevant_paths = artifacts.iter().map(|a| a.path.clone()).collect();
    result.file_tree = tree::render(files.iter().map(|f| f.rel.as_str()), options.tree_lines);
    result.artifacts = artifacts;
    result.stats = stats;
    Ok(result)
}
