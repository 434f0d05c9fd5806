//! The OpenAI-compatible Chat Completions transport.

use crate::support::{Reply, Server, fixture};
use crate::{KEY, ask, assert_no_key, edit_batch_schema, openai_config};
use nuvira_api::{LlmClient, LlmError, TokenUsage};
use nuvira_llm::HttpLlm;

#[tokio::test]
async fn sends_bearer_key_and_messages_and_reads_text_usage_and_model() {
    let server = Server::start(vec![Reply::ok(fixture("openai_chat.json"))]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    assert_eq!(llm.model(), "openai:gpt-4.1");
    let mut req = ask("Where is parse_config?");
    req.max_tokens = Some(256);
    req.temperature = Some(0.0);
    let r = llm.complete(&req).await.unwrap();
    assert_eq!(
        r.text,
        "The function `parse_config` is defined in src/config.rs."
    );
    assert_eq!(r.json, None);
    assert_eq!(r.model, "openai:gpt-4.1-2025-04-14");
    assert_eq!(
        r.usage,
        TokenUsage {
            input_tokens: 19,
            output_tokens: 10
        }
    );

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(s.headers["authorization"], format!("Bearer {KEY}"));
    assert!(!s.headers.contains_key("x-api-key"));
    assert_eq!(s.headers["content-type"], "application/json");
    assert_eq!(s.body["model"], "gpt-4.1");
    assert_eq!(s.body["messages"][0]["role"], "system");
    assert_eq!(s.body["messages"][1]["role"], "user");
    assert_eq!(s.body["messages"][1]["content"], "Where is parse_config?");
    // A local/compatible server gets `max_tokens`.
    assert_eq!(s.body["max_tokens"], 256);
    assert_eq!(s.body["temperature"], 0.0);
    assert!(s.body.get("response_format").is_none());
}

#[tokio::test]
async fn json_schema_goes_in_response_format_and_the_answer_is_parsed() {
    let server = Server::start(vec![Reply::ok(fixture("openai_json_schema.json"))]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let req = ask("Rename parse_config").with_schema("edit_batch", edit_batch_schema());
    let r = llm.complete(&req).await.unwrap();
    let json = r.json.unwrap();
    assert_eq!(json["edits"][0]["replace"], "fn load_config");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.text).unwrap(),
        json
    );
    assert_eq!(r.usage.input_tokens, 812);

    let body = &server.requests()[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "edit_batch");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    assert_eq!(
        body["response_format"]["json_schema"]["schema"],
        edit_batch_schema()
    );
}

#[tokio::test]
async fn a_refusal_is_refused() {
    let server = Server::start(vec![Reply::ok(fixture("openai_refusal.json"))]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let req = ask("Write malware").with_schema("edit_batch", edit_batch_schema());
    assert_eq!(
        llm.complete(&req).await.unwrap_err(),
        LlmError::Refused("I'm sorry, I cannot assist with that request.".into())
    );
    assert_eq!(server.requests().len(), 1, "a refusal is not retried");
}

#[tokio::test]
async fn prose_instead_of_json_is_invalid_output() {
    let body = fixture("openai_chat.json");
    let server = Server::start(vec![Reply::ok(body)]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let req = ask("Rename").with_schema("edit_batch", edit_batch_schema());
    let e = llm.complete(&req).await.unwrap_err();
    assert!(
        matches!(&e, LlmError::InvalidOutput(m) if m.contains("the `edit_batch` answer is not JSON")),
        "{e}"
    );
}

#[tokio::test]
async fn malformed_json_body_is_a_provider_error_and_not_retried() {
    let server = Server::start(vec![Reply::ok(r#"{"id": "chatcmpl-1", "choices": [{"#)]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&e, LlmError::Provider(m) if m.contains("openai:gpt-4.1 answered with a body that is not a chat completion")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn context_length_exceeded_is_too_large() {
    let server = Server::start(vec![Reply::status(
        400,
        fixture("openai_context_length.json"),
    )])
    .await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(&e, LlmError::TooLarge(m) if m.contains("128000 tokens")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1, "a 400 is not retried");
}

#[tokio::test]
async fn a_rejected_key_is_a_config_error_without_the_key() {
    // OpenAI echoes the key it rejected; we must cut it out.
    let server = Server::start(vec![Reply::status(401, fixture("openai_401_echo.json"))]).await;
    let llm = HttpLlm::new(openai_config(&server)).unwrap();
    let e = llm.complete(&ask("hi")).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("openai:gpt-4.1 rejected the api key (http 401"),
        "{text}"
    );
    assert!(
        text.contains("Incorrect API key provided: <redacted>"),
        "{text}"
    );
    assert_no_key(&text);
    assert_no_key(&format!("{e:?}"));
    assert_no_key(&format!("{llm:?}"));
    assert_no_key(&format!("{:?}", llm.config()));
}

#[tokio::test]
async fn no_key_means_no_authorization_header_for_a_local_server() {
    let server = Server::start(vec![Reply::ok(fixture("openai_chat.json"))]).await;
    let cfg = openai_config(&server).with_api_key(None);
    let llm = HttpLlm::new(cfg).unwrap();
    llm.complete(&ask("hi")).await.unwrap();
    assert!(!server.requests()[0].headers.contains_key("authorization"));
}
