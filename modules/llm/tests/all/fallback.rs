//! The fallback router over real HTTP models and scripted ones.

use crate::support::{Reply, Server, fixture};
use crate::{anthropic_config, ask, openai_config};
use nuvira_api::{LlmClient, LlmError};
use nuvira_llm::{
    BreakerPolicy, FallbackClient, HttpLlm, LlmSettings, RetryPolicy, ScriptEntry, ScriptedLlm,
    clients_from_configs,
};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn falls_back_when_the_primary_is_down_and_reports_its_open_breaker() {
    let primary = Server::start(vec![Reply::status(503, fixture("openai_500.json"))]).await;
    let backup = Server::start(vec![
        Reply::ok(fixture("anthropic_text.json")),
        Reply::ok(fixture("anthropic_text.json")),
    ])
    .await;
    let router = FallbackClient::from_http(vec![
        HttpLlm::new(
            openai_config(&primary)
                .with_retry(RetryPolicy::never())
                .with_breaker(BreakerPolicy::new(1, Duration::from_secs(60))),
        )
        .unwrap(),
        HttpLlm::new(anthropic_config(&backup)).unwrap(),
    ])
    .unwrap();
    assert_eq!(router.model(), "openai:gpt-4.1");
    assert_eq!(
        router.models(),
        vec!["openai:gpt-4.1", "anthropic:claude-sonnet-4-5"]
    );
    assert!(router.open_circuits().is_empty());

    let r = router.complete(&ask("hi")).await.unwrap();
    assert_eq!(r.model, "anthropic:claude-sonnet-4-5-20250929");
    assert_eq!(router.open_circuits(), vec!["openai:gpt-4.1".to_string()]);
    // The open primary is skipped without a request.
    router.complete(&ask("hi")).await.unwrap();
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(backup.requests().len(), 2);
}

#[tokio::test]
async fn a_preferred_model_goes_first_and_refusals_do_not_fall_back() {
    let a: Arc<dyn LlmClient> =
        Arc::new(ScriptedLlm::new(vec![ScriptEntry::text("from a")]).with_model("openai:a"));
    let b = Arc::new(
        ScriptedLlm::new(vec![ScriptEntry::error(&LlmError::Refused("no".into()))])
            .with_model("anthropic:b"),
    );
    let router = FallbackClient::new(vec![a, b.clone()], BreakerPolicy::default()).unwrap();
    let e = router
        .complete(&ask("hi").with_model("anthropic:b"))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        LlmError::Refused("no".into()),
        "a refusal is returned, not routed around"
    );
    assert_eq!(router.complete(&ask("hi")).await.unwrap().text, "from a");
    assert_eq!(b.requests().len(), 1);
}

#[tokio::test]
async fn all_models_down_returns_the_last_availability_error() {
    let a: Arc<dyn LlmClient> = Arc::new(
        ScriptedLlm::new(vec![ScriptEntry::error(&LlmError::Timeout)]).with_model("openai:a"),
    );
    let b: Arc<dyn LlmClient> = Arc::new(
        ScriptedLlm::new(vec![ScriptEntry::error(&LlmError::Provider("down".into()))])
            .with_model("openai:b"),
    );
    let router =
        FallbackClient::new(vec![a, b], BreakerPolicy::new(1, Duration::from_secs(60))).unwrap();
    assert_eq!(
        router.complete(&ask("hi")).await.unwrap_err(),
        LlmError::Provider("down".into())
    );
    assert_eq!(router.open_circuits(), vec!["openai:a", "openai:b"]);
    assert_eq!(
        router.complete(&ask("hi")).await.unwrap_err(),
        LlmError::CircuitOpen("openai:a, openai:b".into())
    );
}

#[tokio::test]
async fn settings_with_fallback_models_build_a_router_against_a_local_server() {
    let server = Server::start(vec![Reply::ok(fixture("openai_chat.json"))]).await;
    let base = format!("{}/v1", server.url());
    let env = move |name: &str| match name {
        "NUVIRA_MODEL" => Some("openai:qwen2.5-coder".to_string()),
        "NUVIRA_LLM_BASE_URL" => Some(base.clone()),
        "NUVIRA_LLM_FALLBACK_MODELS" => Some("openai:llama3.1".to_string()),
        _ => None,
    };
    let settings = LlmSettings::from_lookup(&env).unwrap();
    let llm = clients_from_configs(settings.resolve_with(&env).unwrap()).unwrap();
    assert_eq!(
        llm.models(),
        vec!["openai:qwen2.5-coder", "openai:llama3.1"]
    );
    llm.complete(&ask("hi")).await.unwrap();
    let s = &server.requests()[0];
    assert_eq!(s.body["model"], "qwen2.5-coder");
    assert!(!s.headers.contains_key("authorization"));
}

#[tokio::test]
async fn a_fallback_to_the_next_model_counts_as_a_retry() {
    let primary = Server::start(vec![
        Reply::status(503, fixture("openai_500.json")),
        Reply::status(503, fixture("openai_500.json")),
    ])
    .await;
    let backup = Server::start(vec![Reply::ok(fixture("anthropic_text.json"))]).await;
    let router = FallbackClient::from_http(vec![
        HttpLlm::new(
            openai_config(&primary).with_retry(
                RetryPolicy::default()
                    .with_max_attempts(2)
                    .with_delays(Duration::from_millis(1), Duration::from_millis(10)),
            ),
        )
        .unwrap(),
        HttpLlm::new(anthropic_config(&backup)).unwrap(),
    ])
    .unwrap();
    let (r, retries) = nuvira_llm::count_retries(router.complete(&ask("hi"))).await;
    assert_eq!(r.unwrap().model, "anthropic:claude-sonnet-4-5-20250929");
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(retries, 2, "one retry of the primary, then the backup");
}
