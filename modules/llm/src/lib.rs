//! # nuvira-llm — how Nuvira talks to models
//!
//! The engine only knows [`nuvira_api::LlmClient`]: messages in, text or JSON out, with token
//! usage and the model's name. This crate provides the implementations:
//!
//! - [`HttpLlm`]: the real transport for one model, speaking the OpenAI-compatible Chat
//!   Completions API (OpenAI, vLLM, llama.cpp's server, Ollama's `/v1`) or Anthropic's Messages
//!   API, with per-attempt timeouts, retries (exponential backoff, full jitter, `Retry-After`),
//!   a [`CircuitBreaker`] per model and a request size cap checked before sending;
//! - [`FallbackClient`]: a router over a primary model and its `fallback_models`, which knows
//!   which breakers are open (for the switch-model repair);
//! - [`ScriptedLlm`]: replays a recorded transcript for tests and offline demos, and
//!   [`RecordingLlm`] records one from a real model;
//! - [`guard`]: wraps repository text as untrusted, delimited data for prompts;
//! - [`context`]: packs inspected files into a token budget, most relevant first.
//!
//! Why it is shaped so: the wire formats are a few hundred lines of serde over `reqwest`
//! rather than two provider SDKs, so both providers share one retry/breaker/size-cap path and
//! structured output works the same way on both (OpenAI `response_format: json_schema`,
//! Anthropic a single forced tool). Keys live in [`ApiKey`], which cannot be printed, and are
//! cut out of every message, so an error or event can be logged as is.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nuvira_api::LlmError> {
//! use nuvira_api::{ChatMessage, LlmClient, LlmRequest};
//! // NUVIRA_MODEL=openai:gpt-4.1 and OPENAI_API_KEY in the environment.
//! let llm = nuvira_llm::client_from_settings(&nuvira_llm::LlmSettings::from_env()?)?;
//! let answer = llm
//!     .complete(&LlmRequest::new(vec![ChatMessage::user("Say hi")]))
//!     .await?;
//! println!("{} ({} tokens)", answer.text, answer.usage.output_tokens);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod anthropic;
mod breaker;
mod config;
pub mod context;
mod fallback;
pub mod guard;
mod http;
mod openai;
mod retry;
pub mod scripted;
mod secret;
mod wire;

pub use breaker::{
    BreakerPolicy, BreakerState, CircuitBreaker, Clock, ManualClock, Permit, SystemClock,
    is_availability_error,
};
pub use config::{
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_TIMEOUT, LlmConfig, LlmSettings, Provider, env, parse_model,
};
pub use fallback::FallbackClient;
pub use http::HttpLlm;
pub use retry::{RetryPolicy, count_retries, parse_retry_after};
pub use scripted::{RecordingLlm, ScriptEntry, ScriptedLlm, UnusedEntries};
pub use secret::ApiKey;

use nuvira_api::{LlmClient, LlmError};
use std::sync::Arc;

/// Builds the client the settings describe: one [`HttpLlm`], or a [`FallbackClient`] when
/// fallback models are set.
///
/// # Errors
/// [`LlmError::Config`] as [`LlmSettings::resolve`] and [`HttpLlm::new`] describe (no model, no
/// key for a public endpoint, a bad base URL).
pub fn client_from_settings(settings: &LlmSettings) -> Result<Arc<dyn LlmClient>, LlmError> {
    let configs = settings.resolve()?;
    clients_from_configs(configs)
}

/// Like [`client_from_settings`], from resolved configurations (primary first).
///
/// # Errors
/// [`LlmError::Config`] when `configs` is empty or [`HttpLlm::new`] fails.
pub fn clients_from_configs(configs: Vec<LlmConfig>) -> Result<Arc<dyn LlmClient>, LlmError> {
    let mut clients = configs
        .into_iter()
        .map(HttpLlm::new)
        .collect::<Result<Vec<_>, _>>()?;
    if clients.len() == 1
        && let Some(only) = clients.pop()
    {
        return Ok(Arc::new(only));
    }
    Ok(Arc::new(FallbackClient::from_http(clients)?))
}
