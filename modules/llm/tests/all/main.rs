//! End-to-end tests of the real transports against an HTTP server on 127.0.0.1 that speaks
//! the providers' wire formats, plus the router, the scripted client and context packing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod anthropic;
mod context;
mod fallback;
mod openai;
mod resilience;
mod scripted;

use nuvira_api::{ChatMessage, LlmRequest};
use nuvira_llm::{ApiKey, BreakerPolicy, LlmConfig, RetryPolicy};
use std::time::Duration;
use support::Server;

/// The key every test uses; no error text or Debug output may contain it.
pub const KEY: &str = "sk-test-SECRET-0123456789abcdef";

pub fn assert_no_key(text: &str) {
    assert!(!text.contains(KEY), "the api key leaked into: {text}");
    assert!(
        !text.contains("SECRET"),
        "part of the api key leaked into: {text}"
    );
}

/// Fast retries so tests stay quick; a breaker that does not get in the way.
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(3)
        .with_delays(Duration::from_millis(10), Duration::from_secs(3))
}

pub fn openai_config(server: &Server) -> LlmConfig {
    LlmConfig::new("openai:gpt-4.1")
        .unwrap()
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key(ApiKey::new(KEY))
        .with_timeout(Duration::from_secs(5))
        .with_retry(quick_retry())
        .with_breaker(BreakerPolicy::new(100, Duration::from_secs(60)))
}

pub fn anthropic_config(server: &Server) -> LlmConfig {
    LlmConfig::new("anthropic:claude-sonnet-4-5")
        .unwrap()
        .with_base_url(server.url())
        .with_api_key(ApiKey::new(KEY))
        .with_timeout(Duration::from_secs(5))
        .with_retry(quick_retry())
        .with_breaker(BreakerPolicy::new(100, Duration::from_secs(60)))
}

pub fn ask(text: &str) -> LlmRequest {
    LlmRequest::new(vec![
        ChatMessage::system("You are a careful coding assistant."),
        ChatMessage::user(text),
    ])
}

pub fn edit_batch_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "edits": { "type": "array", "items": { "type": "object" } },
            "explanation": { "type": "string" }
        },
        "required": ["edits", "explanation"],
        "additionalProperties": false
    })
}
