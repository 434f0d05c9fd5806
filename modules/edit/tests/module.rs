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

/// A cancel signal the test sets.
struct Flag(tokio::sync::watch::Sender<bool>);

#[nuvira_api::async_trait]
impl nuvira_api::CancelSignal for Flag {
    fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }
    async fn cancelled(&self) {
        let _ = self.0.subscribe().wait_for(|c| *c).await;
    }
}

/// A run scope whose wait before changes is held until the test opens it, and says when it
/// is being waited for.
struct HeldScope {
    info: nuvira_api::engine::RunInfo,
    id: Arc<str>,
    open: tokio::sync::watch::Sender<bool>,
    waiting: Arc<tokio::sync::Notify>,
}

impl nuvira_api::engine::RunScope for HeldScope {
    fn run_info(&self) -> &nuvira_api::engine::RunInfo {
        &self.info
    }
    fn step_id(&self, index: usize) -> Option<&Arc<str>> {
        (index == 0).then_some(&self.id)
    }
    fn before_changes(&self, _index: usize) -> Option<nuvira_api::engine::ChangesWait> {
        let mut open = self.open.subscribe();
        let waiting = self.waiting.clone();
        Some(Box::pin(async move {
            waiting.notify_one();
            let _ = open.wait_for(|o| *o).await;
        }))
    }
}

/// An edit step whose wait before changes is held: what the tree holds while it waits, and
/// the step's result once the wait is opened (`cancel`: the run is cancelled first).
fn edit_under_held_wait(cancel: bool) -> (bool, Result<StepOutput, ModuleError>, bool) {
    let dir = repo(&[("a.txt", "old\n")]);
    let flag = Arc::new(Flag(tokio::sync::watch::channel(false).0));
    let scope = Arc::new(HeldScope {
        info: StepContext::builder(dir.path())
            .run_id("run-held")
            .cancel(flag.clone())
            .build_run(),
        id: "edit".into(),
        open: tokio::sync::watch::channel(false).0,
        waiting: Arc::default(),
    });
    let ctx = nuvira_api::engine::StepContextBuilder::in_scope(scope.clone(), 0).build();
    let s = step(json!({"edits": [
        {"strategy": "search-replace", "path": "a.txt", "search": "old", "replace": "new"}
    ]}));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let m = Arc::new(EditModule::new(editor()));
    let (unchanged_while_waiting, out) = rt.block_on(async {
        let run = tokio::spawn({
            let m = m.clone();
            async move { m.run(&s, &ctx).await }
        });
        tokio::time::timeout(std::time::Duration::from_secs(20), scope.waiting.notified())
            .await
            .expect("the edit batch never waited before its changes");
        let unchanged = std::fs::read_to_string(dir.path().join("a.txt")).unwrap() == "old\n";
        if cancel {
            flag.0.send_replace(true);
        }
        scope.open.send_replace(true);
        (unchanged, run.await.unwrap())
    });
    // Dropping the runtime waits for its blocking threads: the batch's thread is done.
    drop(rt);
    let changed = std::fs::read_to_string(dir.path().join("a.txt")).unwrap() == "new\n";
    (unchanged_while_waiting, out, changed)
}

/// The edit module waits for its scope right before the batch is written: nothing is written
/// while the wait is held, and the batch is written once it opens.
#[test]
fn an_edit_batch_is_written_only_after_its_wait_before_changes() {
    let (unchanged_while_waiting, out, changed) = edit_under_held_wait(false);
    assert!(unchanged_while_waiting);
    assert!(matches!(out, Ok(StepOutput::Edit(_))), "{out:?}");
    assert!(changed);
}

/// A step cancelled while its batch waits writes nothing, even once the wait opens.
#[test]
fn an_edit_batch_cancelled_during_its_wait_writes_nothing() {
    let (unchanged_while_waiting, out, changed) = edit_under_held_wait(true);
    assert!(unchanged_while_waiting);
    assert!(matches!(out, Err(ModuleError::Cancelled)), "{out:?}");
    assert!(
        !changed,
        "the batch was written after the step was cancelled"
    );
}
