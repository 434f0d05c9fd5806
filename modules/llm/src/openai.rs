//! The OpenAI Chat Completions wire format (also vLLM, llama.cpp's server, Ollama's `/v1`).

use crate::config::LlmConfig;
use crate::wire::{json_answer, usage_response};
use nuvira_api::{LlmError, LlmRequest, LlmResponse, Role, TokenUsage};
use serde::Deserialize;
use serde_json::{Value, json};

/// `{base}/chat/completions`.
pub(crate) fn endpoint(base: &reqwest::Url) -> reqwest::Url {
    let mut url = base.clone();
    let path = format!("{}/chat/completions", base.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// The request body. OpenAI's own endpoint gets `max_completion_tokens` (its reasoning models
/// reject `max_tokens`); other servers get `max_tokens`, which all of them understand.
pub(crate) fn request_body(cfg: &LlmConfig, req: &LlmRequest) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({ "role": role, "content": m.content })
        })
        .collect();
    let mut body = json!({ "model": cfg.model, "messages": messages });
    if let Some(n) = req.max_tokens {
        let field = if cfg.is_public_endpoint() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[field] = json!(n);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some((name, schema)) = &req.json_schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": { "name": name, "schema": schema, "strict": true }
        });
    }
    body
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<Message>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// Reads a 2xx answer.
pub(crate) fn parse_response(
    cfg: &LlmConfig,
    req: &LlmRequest,
    body: &[u8],
) -> Result<LlmResponse, LlmError> {
    let c: Completion = serde_json::from_slice(body).map_err(|e| {
        LlmError::Provider(format!(
            "{} answered with a body that is not a chat completion: {e}",
            cfg.model_id()
        ))
    })?;
    let usage = c
        .usage
        .map(|u| TokenUsage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        })
        .unwrap_or_default();
    let model = format!("openai:{}", c.model.as_deref().unwrap_or(&cfg.model));
    let Some(choice) = c.choices.into_iter().next() else {
        return Err(LlmError::InvalidOutput(format!(
            "{} returned no choices",
            cfg.model_id()
        )));
    };
    let message = choice.message.unwrap_or(Message {
        content: None,
        refusal: None,
    });
    if let Some(refusal) = message.refusal.filter(|r| !r.trim().is_empty()) {
        return Err(LlmError::Refused(refusal));
    }
    let finish = choice.finish_reason.unwrap_or_default();
    if finish == "content_filter" {
        return Err(LlmError::Refused(
            "the provider's content filter stopped the answer".into(),
        ));
    }
    let text = message.content.unwrap_or_default();
    let json = match &req.json_schema {
        Some((name, _)) => {
            if finish == "length" {
                return Err(LlmError::InvalidOutput(format!(
                    "the `{name}` answer was cut off at the token limit after {} tokens: raise max_tokens or ask for less",
                    usage.output_tokens
                )));
            }
            Some(json_answer(name, &text)?)
        }
        None => None,
    };
    Ok(usage_response(text, json, model, usage))
}
