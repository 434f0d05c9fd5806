//! Models: the [`LlmClient`] trait and its request/response types, and the [`guard`] text
//! helpers every prompt and answer goes through.

use crate::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub mod guard;

pub use guard::strip_fence;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions.
    System,
    /// The request.
    User,
    /// The model.
    Assistant,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// A request to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct LlmRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Ask for JSON matching this schema, under this name (`execution_plan`, `edit_batch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<(String, serde_json::Value)>,
    /// Cap on the answer's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Prefer this model (`provider:model`) when the client can answer with several (a
    /// fallback router); clients with one model ignore it. Set by the switch-model repair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl LlmRequest {
    /// A request with these messages.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// Builder-style: asks for JSON matching a schema.
    #[must_use]
    pub fn with_schema(mut self, name: impl Into<String>, schema: serde_json::Value) -> Self {
        self.json_schema = Some((name.into(), schema));
        self
    }

    /// Builder-style: prefers a model (`provider:model`) among those the client can use.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

/// The hashes a model call is recorded and compared by (each `sha256:<hex>` of the exact
/// text): the system prompt, the other messages, the JSON schema, the request parameters, and
/// each context source (an `<untrusted-data source="...">` block of a message, usually a file).
/// Replay compares them one by one to name what differed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct RequestHashes {
    /// The whole request (messages, schema, parameters).
    pub request: String,
    /// The system messages.
    pub system: String,
    /// The user and assistant messages.
    pub messages: String,
    /// The JSON schema with its name, when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// `max_tokens`, `temperature` and `model` as sent.
    pub params: String,
    /// The context sources found in the messages, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextSource>,
}

/// One context source of a request: a block of repository text (see [`RequestHashes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ContextSource {
    /// The block's `source` (a workspace-relative path, a command, `previous-attempt`).
    pub source: String,
    /// `sha256:<hex>` of the block's text.
    pub hash: String,
}

impl ContextSource {
    /// A source with its hash.
    pub fn new(source: impl Into<String>, hash: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            hash: hash.into(),
        }
    }
}

/// Tokens used by a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct LlmResponse {
    /// The text (for JSON requests, the JSON text).
    pub text: String,
    /// The parsed JSON, for JSON requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// The model that answered.
    pub model: String,
    /// Tokens used.
    pub usage: TokenUsage,
}

/// Why a model request failed. Messages never contain keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// Missing or bad configuration (no key, unknown provider).
    #[error("model not configured: {0}")]
    Config(String),
    /// The provider rate limited us.
    #[error("rate limited by the provider{}", .retry_after.map(|d| format!(" (retry after {}s)", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// What the provider asked us to wait.
        retry_after: Option<Duration>,
    },
    /// The request timed out.
    #[error("the model request timed out")]
    Timeout,
    /// The provider failed (5xx) or the connection broke.
    #[error("the model provider failed: {0}")]
    Provider(String),
    /// The answer was not usable (not JSON, not matching the schema).
    #[error("the model's answer was invalid: {0}")]
    InvalidOutput(String),
    /// The model refused.
    #[error("the model refused: {0}")]
    Refused(String),
    /// The circuit breaker for the model is open.
    #[error("the circuit breaker for {0} is open after repeated failures")]
    CircuitOpen(String),
    /// The request was too large.
    #[error("the request is too large: {0}")]
    TooLarge(String),
}

/// A chat model.
///
/// # Errors
/// [`complete`](LlmClient::complete) returns [`LlmError`]; see its variants.
///
/// ```
/// use nuvira_api::{async_trait, LlmClient, LlmError, LlmRequest, LlmResponse};
///
/// /// Always answers the same text (a stand-in for tests).
/// struct Canned(&'static str);
///
/// #[async_trait]
/// impl LlmClient for Canned {
///     fn model(&self) -> &str { "canned:v1" }
///     async fn complete(&self, _request: &LlmRequest) -> Result<LlmResponse, LlmError> {
///         let mut answer = LlmResponse::default();
///         answer.text = self.0.into();
///         answer.model = self.model().into();
///         Ok(answer)
///     }
/// }
///
/// let client = Canned("done");
/// assert_eq!(client.models(), ["canned:v1"]);
/// assert!(client.open_circuits().is_empty());
/// ```
#[async_trait]
pub trait LlmClient: Send + Sync {
    /// `provider:model`.
    fn model(&self) -> &str;
    /// Sends a request.
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError>;
    /// Every model this client can answer with (`provider:model`), the preferred one first.
    /// A fallback router lists its `fallback_models`; the default is just [`model`](Self::model).
    fn models(&self) -> Vec<String> {
        vec![self.model().to_owned()]
    }
    /// The models whose circuit breaker is open right now (they fail fast with
    /// [`LlmError::CircuitOpen`]). The switch-model repair picks a model not in this list.
    /// The default, for clients without a breaker, is none.
    fn open_circuits(&self) -> Vec<String> {
        Vec::new()
    }
}
