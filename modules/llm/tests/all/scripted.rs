//! The scripted client loading recorded transcripts from files.

use crate::support::{Reply, Server, fixture};
use crate::{ask, edit_batch_schema, openai_config, quick_retry};
use nuvira_api::{LlmClient, LlmError};
use nuvira_llm::{HttpLlm, RecordingLlm, ScriptedLlm};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_jsonl_transcript_replays_and_names_the_line_of_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan-demo.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"match": {"schema": "execution_plan"}, "response": {"json": {"goal": "g", "steps": []}, "usage": {"input_tokens": 5, "output_tokens": 2}}}"#,
            "\n",
            r#"{"match": {"last_user_contains": "tests"}, "delay": "10ms", "error": {"kind": "timeout"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let llm = ScriptedLlm::from_file(&path).unwrap();
    assert_eq!(llm.model(), "scripted:plan-demo");
    let r = llm
        .complete(&ask("plan it").with_schema("execution_plan", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(r.json.unwrap()["goal"], "g");
    let e = llm
        .complete(&ask("write docs"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(r#"request 2 does not match entry 2 (line 2): the last user message does not contain "tests"; it is "write docs""#),
        "{e}"
    );
    let started = std::time::Instant::now();
    assert_eq!(
        llm.complete(&ask("run tests")).await.unwrap_err(),
        LlmError::Timeout
    );
    assert!(started.elapsed() >= Duration::from_millis(10));
    assert!(llm.finish().is_ok());
}

#[tokio::test]
async fn a_missing_script_names_the_file() {
    let e = ScriptedLlm::from_file("/nonexistent/x.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("could not read the model script /nonexistent/x.yaml"),
        "{e}"
    );
}

#[tokio::test]
async fn a_session_recorded_over_http_replays_offline() {
    let server = Server::start(vec![
        Reply::ok(fixture("openai_json_schema.json")),
        Reply::status(400, fixture("openai_context_length.json")),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    let http = HttpLlm::new(openai_config(&server).with_retry(quick_retry())).unwrap();
    let recorder = RecordingLlm::new(Arc::new(http), &path);
    let plan =
        ask("Rename parse_config\nin src/config.rs").with_schema("edit_batch", edit_batch_schema());
    let live = recorder.complete(&plan).await.unwrap();
    let live_err = recorder.complete(&ask("a huge prompt")).await.unwrap_err();
    drop(server);

    let replay = ScriptedLlm::from_file(&path).unwrap();
    assert_eq!(replay.complete(&plan).await.unwrap(), live);
    assert_eq!(
        replay.complete(&ask("a huge prompt")).await.unwrap_err(),
        live_err
    );
    assert!(replay.finish().is_ok());
    // The recorded matcher is specific: another request does not replay the first answer.
    let again = ScriptedLlm::from_file(&path).unwrap();
    let e = again
        .complete(&ask("something else"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the last user message does not contain \"Rename parse_config\""),
        "{e}"
    );
}
