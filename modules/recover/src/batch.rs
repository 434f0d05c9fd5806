//! The `edit_batch` answer: its JSON Schema, parsing, and asking a model for one.

use nuvira_api::{
    ChatMessage, EditEntry, ErrorCategory, Failure, LlmClient, LlmError, LlmRequest, ModuleError,
};
use nuvira_edit::{Editor, parse_entries};
use serde_json::{Value, json};

/// The request name of an edit batch.
pub const EDIT_BATCH: &str = "edit_batch";

/// The JSON Schema of an edit batch: `{"edits": [EditEntry...], "explanation"?: string}`.
///
/// Hand-written rather than derived so that `nuvira-api` keeps its four dependencies; the
/// tests check it against real batches and against `nuvira_edit::parse_entries`.
pub fn edit_batch_schema() -> Value {
    let text = json!({ "type": "string" });
    json!({
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "strategy": {
                            "type": "string",
                            "enum": ["search-replace", "unified-diff", "regex", "whole-file",
                                     "delete-file", "rename-file", "ast-replace"],
                            "description": "search-replace: replace the exact `search` text in `path` by `replace`"
                        },
                        "path": { "type": "string", "description": "workspace-relative file path" },
                        "search": { "type": "string", "description": "text copied exactly from the file" },
                        "replace": text,
                        "all": { "type": "boolean" },
                        "patch": text,
                        "pattern": text,
                        "content": text,
                        "to": text,
                        "symbol": text
                    },
                    "required": ["strategy"],
                    "additionalProperties": false
                }
            },
            "explanation": { "type": "string", "description": "one or two sentences on what the edits do" }
        },
        "required": ["edits"],
        "additionalProperties": false
    })
}

/// A parsed edit batch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EditBatch {
    /// The entries, checked against the editor's strategies and required fields.
    pub edits: Vec<EditEntry>,
    /// The model's explanation, if any.
    pub explanation: Option<String>,
}

/// Why a model's answer is not a usable edit batch: every problem found, each naming the entry
/// (`edits[1].search: missing`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the answer is not a valid edit batch: {}", problems.join("; "))]
#[non_exhaustive]
pub struct InvalidEditBatch {
    /// The problems, in the order found.
    pub problems: Vec<String>,
}

impl From<Vec<String>> for InvalidEditBatch {
    fn from(problems: Vec<String>) -> Self {
        Self { problems }
    }
}

/// Parses a model's answer (its JSON, or its text with an optional code fence) as an edit batch
/// whose entries `editor` accepts.
///
/// # Errors
/// [`InvalidEditBatch`] with every problem, each naming the entry (`edits[1].search: missing`).
pub fn parse_edit_batch(
    json: Option<&Value>,
    text: &str,
    editor: &Editor,
) -> Result<EditBatch, InvalidEditBatch> {
    parse_batch(json, text, editor).map_err(InvalidEditBatch::from)
}

fn parse_batch(
    json: Option<&Value>,
    text: &str,
    editor: &Editor,
) -> Result<EditBatch, Vec<String>> {
    let value = match json {
        Some(v) => v.clone(),
        None => serde_json::from_str(nuvira_llm::guard::strip_fence(text))
            .map_err(|e| vec![format!("the answer is not JSON: {e}")])?,
    };
    let Some(obj) = value.as_object() else {
        return Err(vec![
            "the answer is not a JSON object with an `edits` list".into(),
        ]);
    };
    if let Some(k) = obj.keys().find(|k| *k != "edits" && *k != "explanation") {
        return Err(vec![format!(
            "unknown key `{k}`: an edit batch has only `edits` and `explanation`"
        )]);
    }
    let Some(values) = obj.get("edits").and_then(Value::as_array) else {
        return Err(vec!["`edits` is missing or not a list".into()]);
    };
    if values.is_empty() {
        return Err(vec!["`edits` is empty: give at least one edit".into()]);
    }
    let edits = parse_entries(values, editor)?;
    Ok(EditBatch {
        edits,
        explanation: obj
            .get("explanation")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// The module error for a failed model request: rate limits, open circuits and provider
/// outages are recoverable `llm-rate-limit` (retry later or switch model), timeouts are
/// recoverable `timeout`, unusable answers and refusals are recoverable `llm-invalid-output`,
/// missing configuration is a fatal `environment-unavailable` and an oversized request a
/// fatal `invalid-config`.
pub fn llm_failure(what: &str, e: &LlmError) -> ModuleError {
    let msg = nuvira_secrets::redact(&format!("{what}: {e}"));
    match e {
        LlmError::RateLimited { .. } | LlmError::CircuitOpen(_) | LlmError::Provider(_) => {
            ModuleError::recoverable(ErrorCategory::LlmRateLimit, msg)
        }
        LlmError::Timeout => ModuleError::recoverable(ErrorCategory::Timeout, msg),
        LlmError::InvalidOutput(_) | LlmError::Refused(_) => {
            ModuleError::recoverable(ErrorCategory::LlmInvalidOutput, msg)
        }
        LlmError::Config(_) => ModuleError::fatal(ErrorCategory::EnvironmentUnavailable, msg),
        LlmError::TooLarge(_) => ModuleError::fatal(ErrorCategory::InvalidConfig, msg),
        _ => ModuleError::recoverable(ErrorCategory::Unknown, msg),
    }
}

/// Asks `llm` for an edit batch; an answer that does not parse is shown its problems and asked
/// once more. Returns the batch and the conversation so far (for a further correction round).
///
/// # Errors
/// A [`ModuleError`] from [`llm_failure`], or a recoverable `llm-invalid-output` failure
/// listing the problems of the second answer.
pub async fn ask_edit_batch(
    llm: &dyn LlmClient,
    mut messages: Vec<ChatMessage>,
    model: Option<&str>,
    editor: &Editor,
) -> Result<(EditBatch, Vec<ChatMessage>), ModuleError> {
    let mut last = Vec::new();
    for round in 0..2 {
        let mut request =
            LlmRequest::new(messages.clone()).with_schema(EDIT_BATCH, edit_batch_schema());
        if let Some(m) = model {
            request = request.with_model(m);
        }
        // An answer the transport could not read as JSON is corrected like any invalid one.
        let parsed = match llm.complete(&request).await {
            Ok(response) => {
                messages.push(ChatMessage::assistant(response.text.clone()));
                parse_batch(response.json.as_ref(), &response.text, editor)
            }
            Err(LlmError::InvalidOutput(m)) => {
                Err(vec![format!("the answer is not valid JSON: {m}")])
            }
            Err(e) => return Err(llm_failure("ask the model for edits", &e)),
        };
        match parsed {
            Ok(batch) => return Ok((batch, messages)),
            Err(problems) => {
                if round == 0 {
                    messages.push(ChatMessage::user(format!(
                        "That answer is not a valid edit batch:\n- {}\nAnswer again with only the corrected JSON object.",
                        problems.join("\n- ")
                    )));
                }
                last = problems;
            }
        }
    }
    Err(ModuleError::Recoverable(
        Failure::new(
            ErrorCategory::LlmInvalidOutput,
            format!(
                "get usable edits from the model: its answer was invalid twice ({})",
                last.join("; ")
            ),
        )
        .with_evidence(last),
    ))
}
