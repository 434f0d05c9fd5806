//! The scripted client loading recorded transcripts from files.

use crate::ask;
use nuvira_api::{LlmClient, LlmError};
use nuvira_llm::ScriptedLlm;
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
