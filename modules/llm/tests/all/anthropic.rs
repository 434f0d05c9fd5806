//! The Anthropic Messages transport.

use crate::support::{Reply, Server, fixture};
use crate::{KEY, anthropic_config, ask, assert_no_key, edit_batch_schema};
use nuvira_api::{LlmClient, LlmError, TokenUsage};
use nuvira_llm::HttpLlm;
use std::time::Duration;

#[tokio::test]
async fn sends_x_api_key_version_and_top_level_system_and_reads_text() {
    let server = Server::start(vec![Reply::ok(fixture("anthropic_text.json"))]).await;
    let llm = HttpLlm::new(anthropic_config(&server)).unwrap();
    assert_eq!(llm.model(), "anthropic:claude-sonnet-4-5");
    let r = llm.complete(&ask("Where is parse_config?")).await.unwrap();
    assert_eq!(
        r.text,
        "The function `parse_config` is defined in src/config.rs."
    );
    assert_eq!(r.model, "anthropic:claude-sonnet-4-5-20250929");
    // Cached prompt tokens count as input.
    assert_eq!(
        r.usage,
        TokenUsage {
            input_tokens: 125,
            output_tokens: 14
        }
    );
    let s = &server.requests()[0];
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(s.headers["x-api-key"], KEY);
    assert_eq!(s.headers["anthropic-version"], "2023-06-01");
    assert!(!s.headers.contains_key("authorization"));
    assert_eq!(s.body["model"], "claude-sonnet-4-5");
    assert_eq!(s.body["system"], "You are a careful coding assistant.");
    assert_eq!(s.body["messages"].as_array().unwrap().len(), 1);
    assert_eq!(s.body["messages"][0]["role"], "user");
    assert_eq!(s.body["max_tokens"], 8192, "Anthropic requires max_tokens");
    assert!(s.body.get("tools").is_none());
}

#[tokio::test]
async fn a_schema_is_one_forced_tool_and_the_json_comes_from_tool_use() {
    let server = Server::start(vec![Reply::ok(fixture("anthropic_tool_use.json"))]).await;
    let llm = HttpLlm::new(anthropic_config(&server)).unwrap();
    let req = ask("Rename parse_config").with_schema("edit_batch", edit_batch_schema());
    let r = llm.complete(&req).await.unwrap();
    let json = r.json.unwrap();
    assert_eq!(json["edits"][0]["search"], "fn parse_config");
    assert_eq!(json["explanation"], "Renamed the function.");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.text).unwrap(),
        json
    );
    assert_eq!(r.usage.output_tokens, 88);

    let body = &server.requests()[0].body;
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "edit_batch");
    assert_eq!(tools[0]["input_schema"], edit_batch_schema());
    assert_eq!(
        body["tool_choice"],
        serde_json::json!({"type": "tool", "name": "edit_batch"})
    );
}

#[tokio::test]
async fn text_instead_of_the_tool_is_invalid_output() {
    let server = Server::start(vec![Reply::ok(fixture("anthropic_text.json"))]).await;
    let llm = HttpLlm::new(anthropic_config(&server)).unwrap();
    let req = ask("Rename").with_schema("edit_batch", edit_batch_schema());
    let e = llm.complete(&req).await.unwrap_err().to_string();
    assert!(
        e.contains("did not call the `edit_batch` tool (stop reason `end_turn`)"),
        "{e}"
    );
}

#[tokio::test]
async fn stop_reason_refusal_is_refused() {
    let server = Server::start(vec![Reply::ok(fixture("anthropic_refusal.json"))]).await;
    let llm = HttpLlm::new(anthropic_config(&server)).unwrap();
    let e = llm.complete(&ask("something harmful")).await.unwrap_err();
    assert_eq!(e, LlmError::Refused("the model declined to answer".into()));
}

#[tokio::test]
async fn overloaded_529_is_retried_then_answers() {
    let server = Server::start(vec![
        Reply::status(529, fixture("anthropic_529.json")),
        Reply::ok(fixture("anthropic_text.json")),
    ])
    .await;
    let llm = HttpLlm::new(anthropic_config(&server)).unwrap();
    let r = llm.complete(&ask("hi")).await.unwrap();
    assert_eq!(r.usage.output_tokens, 14);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(server.requests()[1].headers["x-api-key"], KEY);
}

#[tokio::test]
async fn exhausted_retries_report_the_providers_message_without_the_key() {
    let server = Server::start(vec![
        Reply::status(529, fixture("anthropic_529.json")),
        Reply::status(529, fixture("anthropic_529.json")),
        Reply::status(529, fixture("anthropic_529.json")),
    ])
    .await;
    let cfg = anthropic_config(&server).with_timeout(Duration::from_secs(5));
    let llm = HttpLlm::new(cfg).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    assert_eq!(
        e,
        LlmError::Provider("anthropic:claude-sonnet-4-5 answered http 529: Overloaded".into())
    );
    assert_eq!(server.requests().len(), 3, "max_attempts is 3");
    assert_no_key(&format!("{e} {e:?} {llm:?}"));
}
