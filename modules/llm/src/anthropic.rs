//! Anthropic's Messages wire format.

use crate::config::LlmConfig;
use crate::wire::usage_response;
use nuvira_api::{LlmError, LlmRequest, LlmResponse, Role, TokenUsage};
use serde::Deserialize;
use serde_json::{Value, json};

/// `{base}/v1/messages` (the base is `https://api.anthropic.com`, as in Anthropic's SDKs); a
/// base that already ends in `/v1` is accepted too.
pub(crate) fn endpoint(base: &reqwest::Url) -> reqwest::Url {
    let mut url = base.clone();
    let prefix = base.path().trim_end_matches('/');
    let path = if prefix.ends_with("/v1") {
        format!("{prefix}/messages")
    } else {
        format!("{prefix}/v1/messages")
    };
    url.set_path(&path);
    url
}

/// The request body: system messages go to the top-level `system` field; a schema becomes a
/// single tool of that name, forced with `tool_choice`.
pub(crate) fn request_body(cfg: &LlmConfig, req: &LlmRequest) -> Value {
    let system: Vec<&str> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    let messages: Vec<Value> = req
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| {
            let role = if m.role == Role::Assistant {
                "assistant"
            } else {
                "user"
            };
            json!({ "role": role, "content": m.content })
        })
        .collect();
    let mut body = json!({
        "model": cfg.model,
        "max_tokens": req.max_tokens.unwrap_or(cfg.default_max_tokens),
        "messages": messages,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some((name, schema)) = &req.json_schema {
        body["tools"] = json!([{
            "name": name,
            "description": format!("Return the `{name}` answer as this tool's input."),
            "input_schema": schema,
        }]);
        body["tool_choice"] = json!({ "type": "tool", "name": name });
    }
    body
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        name: String,
        input: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// Reads a 2xx answer. Input tokens include cached prompt tokens (read and written), which
/// Anthropic reports apart from `input_tokens`.
pub(crate) fn parse_response(
    cfg: &LlmConfig,
    req: &LlmRequest,
    body: &[u8],
) -> Result<LlmResponse, LlmError> {
    let m: Message = serde_json::from_slice(body).map_err(|e| {
        LlmError::Provider(format!(
            "{} answered with a body that is not a message: {e}",
            cfg.model_id()
        ))
    })?;
    let usage = m
        .usage
        .map(|u| TokenUsage {
            input_tokens: u.input_tokens
                + u.cache_creation_input_tokens.unwrap_or(0)
                + u.cache_read_input_tokens.unwrap_or(0),
            output_tokens: u.output_tokens,
        })
        .unwrap_or_default();
    let model = format!("anthropic:{}", m.model.as_deref().unwrap_or(&cfg.model));
    let mut text = String::new();
    let mut tool_input = None;
    for block in m.content {
        match block {
            Block::Text { text: t } => text.push_str(&t),
            Block::ToolUse { name, input } => {
                if req.json_schema.as_ref().is_some_and(|(n, _)| *n == name) {
                    tool_input = Some(input);
                }
            }
            Block::Other => {}
        }
    }
    let stop = m.stop_reason.unwrap_or_default();
    if stop == "refusal" {
        let why = if text.trim().is_empty() {
            "the model declined to answer".to_owned()
        } else {
            text
        };
        return Err(LlmError::Refused(why));
    }
    let Some((name, _)) = &req.json_schema else {
        return Ok(usage_response(text, None, model, usage));
    };
    match tool_input {
        Some(input) if stop != "max_tokens" => {
            let text = input.to_string();
            Ok(usage_response(text, Some(input), model, usage))
        }
        Some(_) => Err(LlmError::InvalidOutput(format!(
            "the `{name}` answer was cut off at the token limit after {} tokens: raise max_tokens or ask for less",
            usage.output_tokens
        ))),
        None => Err(LlmError::InvalidOutput(format!(
            "the model did not call the `{name}` tool (stop reason `{stop}`){}",
            if text.is_empty() {
                String::new()
            } else {
                format!("; it wrote: {}", crate::wire::clip(&text, 300))
            }
        ))),
    }
}
