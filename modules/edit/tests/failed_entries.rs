//! A failing entry leaves the files it read as they are: the preview shows no change (never a
//! deletion) for them, later entries of the batch see them as they are on disk, and a rejected
//! batch writes nothing. Run with the real built-in strategies (`Editor::standard()`).

use crate::support::{Recorder, entry, repo, tree};
use nuvira_api::{ChangeKind, EditEntry, EventKind};
use nuvira_edit::{EditFailure, Editor, Emit};
use nuvira_workspace::Workspace;
use serde_json::json;

const LIB: &str = "pub fn parse_config() -> u32 {\n    1\n}\n\npub fn other() -> u32 {\n    2\n}\n";

/// One failing entry per built-in strategy that reads `src/lib.rs`, with a fragment of its error.
fn failing_entries() -> Vec<(&'static str, EditEntry, &'static str)> {
    vec![
        (
            "search-replace",
            entry(
                json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "fn parse_confg() -> u64", "replace": "x"}),
            ),
            "was not found",
        ),
        (
            "regex",
            entry(
                json!({"strategy": "regex", "path": "src/lib.rs", "pattern": "volume\\(", "replace": "x"}),
            ),
            "matches nothing",
        ),
        (
            "unified-diff",
            entry(json!({"strategy": "unified-diff", "patch":
                "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n-pub fn nope() -> u32 {\n+pub fn yes() -> u32 {\n     1\n }\n"})),
            "context does not match",
        ),
        (
            "ast-replace",
            entry(
                json!({"strategy": "ast-replace", "path": "src/lib.rs", "symbol": "missing", "content": "fn missing() {}\n"}),
            ),
            "not found",
        ),
    ]
}

fn later_good_edit() -> EditEntry {
    entry(
        json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "fn other", "replace": "fn another"}),
    )
}

#[test]
fn a_search_that_is_not_found_is_not_previewed_as_deleting_the_file() {
    let dir = repo(&[("src/lib.rs", LIB)]);
    let ws = Workspace::open(dir.path()).unwrap();
    let preview = Editor::standard().dry_run(
        &ws,
        &[entry(
            json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "fn parse_confg() -> u64", "replace": "x"}),
        )],
        &Emit::none(),
    );
    assert!(
        preview.changes.is_empty(),
        "a failed entry was previewed as a change: {:?}",
        preview.changes
    );
    assert_eq!(preview.estimated_impact.files, 0);
    assert_eq!(preview.errors.len(), 1, "{:?}", preview.errors);
    let e = &preview.errors[0];
    assert_eq!(e.path.as_deref(), Some("src/lib.rs"));
    assert!(e.message.contains("was not found"), "{}", e.message);
    assert_eq!(e.line, Some(1), "the closest match is on line 1");
    assert!(e.candidate.is_some(), "the closest match is named");
}

#[test]
fn every_strategy_failure_leaves_the_file_for_later_entries_on_it() {
    for (name, failing, fragment) in failing_entries() {
        let dir = repo(&[("src/lib.rs", LIB)]);
        let ws = Workspace::open(dir.path()).unwrap();
        let preview = Editor::standard().dry_run(&ws, &[failing, later_good_edit()], &Emit::none());
        assert_eq!(preview.errors.len(), 1, "{name}: {:?}", preview.errors);
        let message = &preview.errors[0].message;
        assert!(
            message.starts_with(&format!("edit 1 ({name})")),
            "{name}: {message}"
        );
        assert!(message.contains(fragment), "{name}: {message}");
        assert!(!message.contains("does not exist"), "{name}: {message}");
        let kinds: Vec<_> = preview
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.kind.clone()))
            .collect();
        assert_eq!(kinds, vec![("src/lib.rs", ChangeKind::Modify)], "{name}");
        let diff = &preview.changes[0].diff;
        assert!(
            diff.contains("-pub fn other() -> u32 {\n+pub fn another() -> u32 {"),
            "{name}: {diff}"
        );
        assert_eq!(
            (preview.changes[0].additions, preview.changes[0].deletions),
            (1, 1),
            "{name}: only the later entry's change is shown"
        );
    }
}

#[test]
fn a_failed_rename_previews_nothing_for_either_path() {
    let dir = repo(&[("src/lib.rs", LIB), ("src/main.rs", "fn main() {}\n")]);
    let ws = Workspace::open(dir.path()).unwrap();
    let preview = Editor::standard().dry_run(
        &ws,
        &[
            // The source is missing.
            entry(json!({"strategy": "rename-file", "path": "src/gone.rs", "to": "src/new.rs"})),
            // The target exists: both files were read before the entry failed.
            entry(json!({"strategy": "rename-file", "path": "src/lib.rs", "to": "src/main.rs"})),
            later_good_edit(),
        ],
        &Emit::none(),
    );
    assert_eq!(preview.errors.len(), 2, "{:?}", preview.errors);
    assert!(
        preview.errors[1].message.contains("already exists"),
        "{}",
        preview.errors[1].message
    );
    let kinds: Vec<_> = preview
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind.clone()))
        .collect();
    assert_eq!(kinds, vec![("src/lib.rs", ChangeKind::Modify)]);
}

#[test]
fn a_patch_failing_on_its_second_file_leaves_the_first_unchanged() {
    let dir = repo(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
    let ws = Workspace::open(dir.path()).unwrap();
    let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-three\n+THREE\n";
    let preview = Editor::standard().dry_run(
        &ws,
        &[entry(json!({"strategy": "unified-diff", "patch": patch}))],
        &Emit::none(),
    );
    assert_eq!(preview.errors.len(), 1, "{:?}", preview.errors);
    assert!(preview.changes.is_empty(), "{:?}", preview.changes);
}

#[test]
fn a_rejected_batch_writes_nothing_and_describes_nothing_as_deleted() {
    for (name, failing, _) in failing_entries() {
        let dir = repo(&[("src/lib.rs", LIB)]);
        let before = tree(dir.path());
        let ws = Workspace::open(dir.path()).unwrap();
        let events = Recorder::default();
        let err = Editor::standard()
            .edit(
                &ws,
                &[failing, later_good_edit()],
                "run",
                &Emit::to(&events, Some("edit")),
            )
            .unwrap_err();
        let EditFailure::Rejected(result) = err else {
            panic!("{name}: expected a rejection, got {err}");
        };
        assert_eq!(
            tree(dir.path()),
            before,
            "{name}: a rejected batch wrote something"
        );
        assert!(
            result
                .preview
                .changes
                .iter()
                .all(|c| c.kind != ChangeKind::Delete),
            "{name}: {:?}",
            result.preview.changes
        );
        assert_eq!(
            result.skipped_changes.len(),
            1,
            "{name}: {:?}",
            result.skipped_changes
        );
        assert_eq!(result.skipped_changes[0].path, "src/lib.rs", "{name}");
        let names = events.names();
        assert!(!names.contains(&"edit:written"), "{name}: {names:?}");
        let skipped: Vec<_> = events
            .events()
            .iter()
            .filter_map(|(_, k)| match k {
                EventKind::EditSkipped { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(skipped.len(), 1, "{name}: {skipped:?}");
        assert!(
            !skipped[0].contains("does not exist"),
            "{name}: {}",
            skipped[0]
        );
    }
}
