//! Model-assisted relevance: when the step has a model, it picks the relevant files among the
//! keyword ranking's best candidates; keyword ranking stays the fallback (no model, a failed
//! request, an unusable answer), reported as `stats.llm_fallback_used`.
//!
//! The model only ever chooses among paths the walk found: names it invents are dropped. The
//! goal and the candidate list are repository-derived text, so they go into the prompt as
//! [`guard::untrusted`] blocks, and the answer must be JSON (`{"paths": [...]}`).

use nuvira_api::llm::guard;
use nuvira_api::{Artifact, ChatMessage, InspectionResult, LlmClient, LlmRequest};
use serde_json::{Value, json};

/// Symbols listed per candidate in the prompt.
const SYMBOLS_PER_FILE: usize = 8;

/// The JSON Schema of the answer.
pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "paths": {
                "type": "array",
                "items": { "type": "string" },
                "description": "the relevant paths from the list, most relevant first"
            }
        },
        "required": ["paths"],
        "additionalProperties": false
    })
}

const SYSTEM: &str = "You select the files of a repository that a coding task will need to read or \
change. The goal and the candidate list are given as <untrusted-data> blocks. Choose only paths \
from the list, most relevant first, and answer only with a JSON object: {\"paths\": [string]}.";

fn describe(a: &Artifact) -> String {
    let symbols: Vec<&str> = a
        .symbols
        .iter()
        .take(SYMBOLS_PER_FILE)
        .map(|s| s.name.as_str())
        .collect();
    if symbols.is_empty() {
        a.path.clone()
    } else {
        format!("{} — defines {}", a.path, symbols.join(", "))
    }
}

/// The request asking the model to pick among the candidates.
pub fn request(goal: &str, candidates: &[Artifact]) -> LlmRequest {
    let list: Vec<String> = candidates.iter().map(describe).collect();
    let list = list.join("\n");
    let user = format!(
        "Goal:\n{}\n\nCandidate files:\n{}\n",
        guard::untrusted("goal", goal),
        guard::untrusted("candidates", &list)
    );
    LlmRequest::new(vec![
        ChatMessage::system(guard::with_notice(SYSTEM)),
        ChatMessage::user(user),
    ])
    .with_schema("relevant_files", answer_schema())
}

/// Why a model's answer gives no paths (the keyword ranking is used instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// The text is not JSON, even inside a code fence.
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The JSON has no `paths` list.
    #[error("no `paths` array")]
    NoPaths,
    /// An entry of `paths` is not a string.
    #[error("a path is not a string")]
    NotAString,
}

/// The paths of an answer, or why it is unusable.
///
/// # Errors
/// [`AnswerError`] when the answer is not JSON or not `{"paths": [string]}`.
pub fn parse_answer(json: Option<&Value>, text: &str) -> Result<Vec<String>, AnswerError> {
    let value = match json {
        Some(v) => v.clone(),
        None => serde_json::from_str(guard::strip_fence(text)).map_err(AnswerError::NotJson)?,
    };
    let paths = value
        .get("paths")
        .and_then(Value::as_array)
        .ok_or(AnswerError::NoPaths)?;
    paths
        .iter()
        .map(|p| p.as_str().map(str::to_owned).ok_or(AnswerError::NotAString))
        .collect()
}

/// Reorders `result` (whose artifacts are the keyword ranking's candidates) by the model's
/// choice, then keeps `max_files`: the model's picks first, in its order, then the best of the
/// rest by keyword score. Content stays on the first `content_files`.
///
/// Returns `false` (and leaves the keyword order) when the model fails or picks nothing usable.
pub async fn rerank(
    llm: &dyn LlmClient,
    goal: &str,
    result: &mut InspectionResult,
    max_files: usize,
    content_files: usize,
) -> bool {
    let picked = if result.artifacts.is_empty() || goal.trim().is_empty() {
        None
    } else {
        match llm.complete(&request(goal, &result.artifacts)).await {
            Ok(r) => parse_answer(r.json.as_ref(), &r.text).ok(),
            Err(_) => None,
        }
    };
    let mut order: Vec<usize> = Vec::new();
    for p in picked.iter().flatten() {
        if let Some(i) = result.artifacts.iter().position(|a| &a.path == p)
            && !order.contains(&i)
        {
            order.push(i);
        }
    }
    let used = !order.is_empty();
    for i in 0..result.artifacts.len() {
        if !order.contains(&i) {
            order.push(i);
        }
    }
    order.truncate(max_files);
    let mut slots: Vec<Option<Artifact>> = result.artifacts.drain(..).map(Some).collect();
    result.artifacts = order.into_iter().filter_map(|i| slots[i].take()).collect();
    for (rank, a) in result.artifacts.iter_mut().enumerate() {
        if rank >= content_files {
            a.content = None;
        }
    }
    result.relevant_paths = result.artifacts.iter().map(|a| a.path.clone()).collect();
    result.stats.llm_fallback_used = !used;
    used
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_may_be_fenced_and_must_hold_string_paths() {
        assert_eq!(
            parse_answer(None, "```json\n{\"paths\": [\"a.rs\"]}\n```").unwrap(),
            ["a.rs"]
        );
        assert!(matches!(
            parse_answer(Some(&json!({"paths": [1]})), ""),
            Err(AnswerError::NotAString)
        ));
        assert!(matches!(
            parse_answer(Some(&json!({"path": []})), ""),
            Err(AnswerError::NoPaths)
        ));
        let e = parse_answer(None, "a.rs").unwrap_err();
        assert!(e.to_string().starts_with("not JSON: "), "{e}");
    }
}
