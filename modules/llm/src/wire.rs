//! Helpers shared by the wire formats.

use nuvira_api::{LlmError, LlmResponse, TokenUsage};
use serde_json::Value;

/// At most `max` bytes of `text` (cut at a character boundary), with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Parses a structured answer. Some local servers wrap JSON in a Markdown fence even in
/// JSON mode; a single surrounding fence is accepted, as [`crate::guard::strip_fence`] reads it.
pub(crate) fn json_answer(name: &str, text: &str) -> Result<Value, LlmError> {
    let first = match serde_json::from_str::<Value>(text) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let trimmed = text.trim();
    if trimmed.starts_with("```")
        && let Ok(v) = serde_json::from_str::<Value>(crate::guard::strip_fence(trimmed))
    {
        return Ok(v);
    }
    Err(LlmError::InvalidOutput(format!(
        "the `{name}` answer is not JSON ({first}); it began: {}",
        clip(trimmed, 200)
    )))
}

pub(crate) fn usage_response(
    text: String,
    json: Option<Value>,
    model: String,
    usage: TokenUsage,
) -> LlmResponse {
    let mut r = LlmResponse::default();
    r.text = text;
    r.json = json;
    r.model = model;
    r.usage = usage;
    r
}

/// The human part of a provider's error body: `error.message` in both OpenAI's
/// (`{"error": {"message", "type", "code"}}`) and Anthropic's
/// (`{"type": "error", "error": {"type", "message"}}`) shapes, else the clipped body.
pub(crate) fn error_detail(body: &[u8]) -> (String, Option<String>) {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let err = &v["error"];
        if let Some(msg) = err["message"].as_str().or_else(|| err.as_str()) {
            let code = err["code"]
                .as_str()
                .or_else(|| err["type"].as_str())
                .map(str::to_owned);
            return (clip(msg, 500), code);
        }
    }
    let text = String::from_utf8_lossy(body);
    (clip(text.trim(), 300), None)
}

/// The URL without user info or query, for messages.
pub(crate) fn display_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        // Not a URL: show it, minus anything that looks like user info.
        Err(_) => clip(url.rsplit('@').next().unwrap_or(url), 200),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_json_is_accepted_and_prose_is_not() {
        assert_eq!(json_answer("x", "```json\n{\"a\":1}\n```").unwrap()["a"], 1);
        let e = json_answer("edit_batch", "Sure! Here you go")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the model's answer was invalid: the `edit_batch` answer is not JSON"),
            "{e}"
        );
        assert_eq!(clip("héllo", 2), "h…");
        assert_eq!(
            display_url("http://u:p@127.0.0.1:9/v1?k=s"),
            "http://127.0.0.1:9/v1"
        );
    }
}
