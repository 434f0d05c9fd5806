//! The `edit` module: config validation, write sets, dry runs, rejections and events.

use crate::support::{Recorder, editor, repo, tree};
use nuvira_api::{
    ErrorCategory, Module, ModuleError, ModuleKind, PlanStep, StepContext, StepOutput, WriteSet,
};
use nuvira_edit::EditModule;
use serde_json::json;
use std::sync::Arc;

fn step(config: serde_json::Value) -> PlanStep {
    PlanStep::new("edit", "edit").with_config(config)
}

#[test]
fn the_module_is_named_edit_and_derives_its_write_set_from_the_entries() {
    let m = EditModule::new(editor());
    assert_eq!(m.name(), "edit");
    assert_eq!(m.kind(), ModuleKind::Edit);
    let s = step(json!({"edits": [
        {"strategy": "search-replace", "path": "./src/a.rs", "search": "a", "replace": "b"},
        {"strategy": "rename-file", "path": "x.txt", "to": "docs/y.txt"},
        {"strategy": "unified-diff", "patch": "--- a/src/c.rs\n+++ b/src/c.rs\n@@ -1 +1 @@\n-a\n+b\n"}
    ]}));
    assert_eq!(
        m.write_set(&s),
        WriteSet::paths(["src/a.rs", "x.txt", "docs/y.txt", "src/c.rs"])
    );
    assert_eq!(
        m.write_set(&step(json!({"instructions": "rename things"}))),
        WriteSet::Exclusive
    );
}

#[test]
fn validate_names_the_entry_index_and_field_of_every_problem() {
    let m = EditModule::new(editor());
    let err = m
        .validate(&step(json!({"edits": [
            {"strategy": "search-replace", "path": "a.rs", "replace": "b"},
            {"strategy": "teleport", "path": "a.rs"},
            "not a mapping",
            {"path": "a.rs"},
            {"strategy": "whole-file", "path": "b.rs", "content": "x"}
        ]})))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("step `edit`: "), "{err}");
    assert!(err.contains("edits[0].search: missing"), "{err}");
    assert!(
        err.contains("edits[1].strategy: unknown strategy `teleport`"),
        "{err}"
    );
    assert!(err.contains("edits[2]: expected a mapping"), "{err}");
    assert!(err.contains("edits[3].strategy: missing"), "{err}");
    assert!(!err.contains("edits[4]"), "{err}");
    assert!(
        m.validate(&step(json!({"edits": [], "colour": "red"})))
            .unwrap_err()
            .to_string()
            .contains("colour")
    );
    assert!(m.validate(&PlanStep::new("e", "edit")).is_err());
    assert!(m.validate(&step(json!({"instructions": "do it"}))).is_ok());
}

#[tokio::test]
async fn a_dry_run_step_returns_a_preview_and_writes_nothing() {
    let dir = repo(&[("a.txt", "one\n")]);
    let before = tree(dir.path());
    let ctx = StepContext::standalone(dir.path()).with_execution(
        true,
        1,
        Arc::new(nuvira_api::NeverCancelled),
        None,
        None,
    );
    let out = EditModule::new(editor())
        .run(
            &step(json!({"edits": [{"strategy": "search-replace", "path": "a.txt", "search": "one", "replace": "two"}]})),
            &ctx,
        )
        .await
        .unwrap();
    let StepOutput::EditPreview(p) = out else {
        panic!("expected a preview, got {out:?}");
    };
    assert_eq!(p.changes[0].path, "a.txt");
    assert_eq!(tree(dir.path()), before);
}

#[tokio::test]
async fn a_step_writes_emits_events_and_records_its_run_in_the_journal() {
    let dir = repo(&[("a.txt", "one\n")]);
    let events = Arc::new(Recorder::default());
    let ctx = StepContext::standalone(dir.path())
        .with_identity("run-7", "rename", "goal")
        .with_events(events.clone());
    let out = EditModule::new(editor())
        .run(
            &step(json!({"edits": [{"strategy": "search-replace", "path": "a.txt", "search": "one", "replace": "two"}]})),
            &ctx,
        )
        .await
        .unwrap();
    let StepOutput::Edit(r) = out else {
        panic!("expected an edit result");
    };
    assert_eq!(r.applied_count, 1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(events.names(), vec!["edit:generating", "edit:written"]);
    assert!(
        events
            .events()
            .iter()
            .all(|(s, _)| s.as_deref() == Some("rename"))
    );
    // The engine undoes a failed run by its id.
    let ws = nuvira_workspace::Workspace::open(dir.path()).unwrap();
    let done = nuvira_workspace::Journal::new(&ws)
        .rollback_run("run-7")
        .unwrap();
    assert_eq!(done[0].step_id.as_deref(), Some("rename"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "one\n"
    );
}

#[tokio::test]
async fn a_rejected_batch_is_a_recoverable_edit_rejected_failure_with_evidence() {
    let dir = repo(&[("src/lib.rs", "fn a() {}\n")]);
    let err = EditModule::new(editor())
        .run(
            &step(json!({"edits": [
                {"strategy": "search-replace", "path": "src/lib.rs", "search": "fn a() {}", "replace": "fn a() {"}
            ]})),
            &StepContext::standalone(dir.path()),
        )
        .await
        .unwrap_err();
    assert!(err.is_recoverable());
    assert_eq!(err.category(), ErrorCategory::EditRejected);
    let f = err.failure().unwrap();
    assert!(
        f.evidence[0].starts_with("src/lib.rs:1: the edit introduces a syntax error"),
        "{:?}",
        f.evidence
    );
    assert!(matches!(f.output.as_deref(), Some(StepOutput::Edit(r)) if r.applied_count == 0));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap(),
        "fn a() {}\n"
    );
}

#[tokio::test]
async fn block_on_secrets_in_the_step_config_blocks() {
    let dir = repo(&[]);
    let token = format!("xoxb-{}", "1234567890-abcdefgh");
    let err = EditModule::new(editor())
        .run(
            &step(json!({"block_on_secrets": true, "edits": [
                {"strategy": "whole-file", "path": "slack.txt", "content": format!("token: {token}\n")}
            ]})),
            &StepContext::standalone(dir.path()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.category(), ErrorCategory::EditRejected);
    assert!(err.failure().unwrap().evidence[0].contains("[slack-token]"));
    assert!(!dir.path().join("slack.txt").exists());
}

#[tokio::test]
async fn instructions_without_a_model_are_an_invalid_config_error() {
    let dir = repo(&[]);
    let err = EditModule::new(editor())
        .run(
            &step(json!({"instructions": "rename parse_config"})),
            &StepContext::standalone(dir.path()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ModuleError::Fatal(_)));
    assert_eq!(err.category(), ErrorCategory::InvalidConfig);
    assert!(err.to_string().contains("NUVIRA_MODEL"), "{err}");
}
