//! Shared helpers: real diffs (made with `similar`), files on disk, a scripted model.

use nuvira_api::{
    ChangeKind, FileChange, LlmClient, LlmError, LlmRequest, LlmResponse, async_trait,
};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A unified diff from `old` to `new` as the edit module writes it.
pub fn change(path: &str, old: &str, new: &str) -> FileChange {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    let (mut add, mut del) = (0, 0);
    for op in diff.iter_all_changes() {
        match op.tag() {
            similar::ChangeTag::Insert => add += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let kind = if old.is_empty() {
        ChangeKind::Create
    } else {
        ChangeKind::Modify
    };
    FileChange::new(path, kind, text, add, del)
}

/// Writes `new` under `root` and returns the change from `old`.
pub fn edit(root: &Path, path: &str, old: &str, new: &str) -> FileChange {
    let p = root.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, new).unwrap();
    change(path, old, new)
}

/// A model that answers from a script and records every request.
pub struct ScriptedLlm {
    answers: Mutex<Vec<Result<LlmResponse, LlmError>>>,
    pub requests: Mutex<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    /// Answers with these texts, in order (as a transport without JSON parsing would).
    pub fn texts(texts: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(
                texts
                    .iter()
                    .rev()
                    .map(|t| {
                        let mut r = LlmResponse::default();
                        r.text = (*t).to_owned();
                        r.model = "scripted:test".into();
                        Ok(r)
                    })
                    .collect(),
            ),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// Fails every request with this error.
    pub fn failing(err: LlmError) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(vec![Err(err)]),
            requests: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    fn model(&self) -> &str {
        "scripted:test"
    }
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        let mut answers = self.answers.lock().unwrap();
        if answers.len() > 1 {
            answers.pop().unwrap()
        } else {
            answers[0].clone()
        }
    }
}

pub use nuvira_test_support::Upstream;
