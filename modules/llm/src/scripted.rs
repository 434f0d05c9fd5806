//! [`ScriptedLlm`]: replays a recorded transcript, for tests and offline demos.
//!
//! A script is a YAML list (`.yaml`/`.yml`) or JSON Lines (`.jsonl`, one entry per line) of
//! entries, consumed in order. Each entry may say what the request must look like (`match`) and
//! gives either a `response` or an `error`:
//!
//! ```yaml
//! - match: { schema: execution_plan, last_user_contains: "rename parse_config" }
//!   response:
//!     json: { goal: "Rename", steps: [] }
//!     usage: { input_tokens: 812, output_tokens: 95 }
//! - error: { kind: rate_limited, retry_after: 2s }
//! - match: { contains: "src/config.rs" }
//!   delay: 50ms
//!   response: { text: "The function is defined in src/config.rs." }
//! ```
//!
//! A request that does not match the next entry, or comes after the last one, fails with
//! [`LlmError::Config`] naming the script, the entry and what differed — a test never gets a
//! silently wrong answer.

use nuvira_api::{LlmClient, LlmError, LlmRequest, LlmResponse, Role, TokenUsage, async_trait};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What a request must look like; every field set must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RequestMatcher {
    /// Some message contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// The last user message contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_user_contains: Option<String>,
    /// A system message contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_contains: Option<String>,
    /// The request asks for JSON under this schema name (`none` for a plain-text request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The request prefers this model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl RequestMatcher {
    /// Why `req` does not match, or `None` when it does.
    pub fn mismatch(&self, req: &LlmRequest) -> Option<String> {
        if let Some(t) = &self.contains
            && !req.messages.iter().any(|m| m.content.contains(t.as_str()))
        {
            return Some(format!("no message contains {t:?}"));
        }
        if let Some(t) = &self.last_user_contains {
            let last = req.messages.iter().rev().find(|m| m.role == Role::User);
            if !last.is_some_and(|m| m.content.contains(t.as_str())) {
                let got = last.map_or("(no user message)".to_owned(), |m| {
                    crate::wire::clip(&m.content, 120)
                });
                return Some(format!(
                    "the last user message does not contain {t:?}; it is {got:?}"
                ));
            }
        }
        if let Some(t) = &self.system_contains
            && !req
                .messages
                .iter()
                .any(|m| m.role == Role::System && m.content.contains(t.as_str()))
        {
            return Some(format!("no system message contains {t:?}"));
        }
        if let Some(want) = &self.schema {
            let got = req.json_schema.as_ref().map_or("none", |(n, _)| n.as_str());
            if got != want {
                return Some(format!("expected schema `{want}`, the request has `{got}`"));
            }
        }
        if let Some(want) = &self.model
            && req.model.as_deref() != Some(want.as_str())
        {
            return Some(format!(
                "expected a request for model `{want}`, got {}",
                req.model
                    .as_deref()
                    .map_or("none".to_owned(), |m| format!("`{m}`"))
            ));
        }
        None
    }
}

/// A recorded answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptedResponse {
    /// The text; for a `json` answer it defaults to the JSON's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The JSON answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    /// The model reported; defaults to the scripted client's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokens reported.
    #[serde(default)]
    pub usage: TokenUsage,
}

/// The kinds of [`LlmError`] a script can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ScriptedErrorKind {
    /// [`LlmError::Config`].
    Config,
    /// [`LlmError::RateLimited`].
    RateLimited,
    /// [`LlmError::Timeout`].
    Timeout,
    /// [`LlmError::Provider`].
    Provider,
    /// [`LlmError::InvalidOutput`].
    InvalidOutput,
    /// [`LlmError::Refused`].
    Refused,
    /// [`LlmError::CircuitOpen`].
    CircuitOpen,
    /// [`LlmError::TooLarge`].
    TooLarge,
}

/// A recorded failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptedError {
    /// Which error.
    pub kind: ScriptedErrorKind,
    /// Its message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For `rate_limited`: the wait asked for (`"2s"`).
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_after: Option<Duration>,
}

impl ScriptedError {
    fn to_error(&self, model: &str) -> LlmError {
        let msg = self
            .message
            .clone()
            .unwrap_or_else(|| "scripted failure".into());
        match self.kind {
            ScriptedErrorKind::Config => LlmError::Config(msg),
            ScriptedErrorKind::RateLimited => LlmError::RateLimited {
                retry_after: self.retry_after,
            },
            ScriptedErrorKind::Timeout => LlmError::Timeout,
            ScriptedErrorKind::Provider => LlmError::Provider(msg),
            ScriptedErrorKind::InvalidOutput => LlmError::InvalidOutput(msg),
            ScriptedErrorKind::Refused => LlmError::Refused(msg),
            ScriptedErrorKind::CircuitOpen => {
                LlmError::CircuitOpen(self.message.clone().unwrap_or_else(|| model.to_owned()))
            }
            ScriptedErrorKind::TooLarge => LlmError::TooLarge(msg),
        }
    }

    /// The script form of an error (the inverse of what a script entry produces).
    pub fn from_error(error: &LlmError) -> Self {
        let (kind, message, retry_after) = match error {
            LlmError::Config(m) => (ScriptedErrorKind::Config, Some(m.clone()), None),
            LlmError::RateLimited { retry_after } => {
                (ScriptedErrorKind::RateLimited, None, *retry_after)
            }
            LlmError::Timeout => (ScriptedErrorKind::Timeout, None, None),
            LlmError::Provider(m) => (ScriptedErrorKind::Provider, Some(m.clone()), None),
            LlmError::InvalidOutput(m) => (ScriptedErrorKind::InvalidOutput, Some(m.clone()), None),
            LlmError::Refused(m) => (ScriptedErrorKind::Refused, Some(m.clone()), None),
            LlmError::CircuitOpen(m) => (ScriptedErrorKind::CircuitOpen, Some(m.clone()), None),
            LlmError::TooLarge(m) => (ScriptedErrorKind::TooLarge, Some(m.clone()), None),
            other => (ScriptedErrorKind::Provider, Some(other.to_string()), None),
        };
        Self {
            kind,
            message,
            retry_after,
        }
    }
}

/// One step of a script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScriptEntry {
    /// What the request must look like (anything, when empty).
    #[serde(default, rename = "match")]
    pub matcher: RequestMatcher,
    /// Wait this long before answering (to script timing: timeouts, cancellation).
    #[serde(
        default,
        with = "nuvira_api::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub delay: Option<Duration>,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ScriptedResponse>,
    /// Or the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptedError>,
    #[serde(skip)]
    line: Option<usize>,
}

impl ScriptEntry {
    /// Answers any request with `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            response: Some(ScriptedResponse {
                text: Some(text.into()),
                ..ScriptedResponse::default()
            }),
            ..Self::default()
        }
    }

    /// Answers any request with `json`.
    pub fn json(json: serde_json::Value) -> Self {
        Self {
            response: Some(ScriptedResponse {
                json: Some(json),
                ..ScriptedResponse::default()
            }),
            ..Self::default()
        }
    }

    /// Fails any request with `error`.
    pub fn error(error: &LlmError) -> Self {
        Self {
            error: Some(ScriptedError::from_error(error)),
            ..Self::default()
        }
    }

    /// Builder-style: only for requests matching `matcher`.
    #[must_use]
    pub fn matching(mut self, matcher: RequestMatcher) -> Self {
        self.matcher = matcher;
        self
    }

    /// Builder-style: answers after `delay`.
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    fn describe(&self, index: usize) -> String {
        match self.line {
            Some(line) => format!("entry {} (line {line})", index + 1),
            None => format!("entry {}", index + 1),
        }
    }
}

/// A script that was not used up, from [`ScriptedLlm::finish`]: the run made fewer requests
/// than the script expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model script {script} has {unused} unused entries, starting at {first}")]
#[non_exhaustive]
pub struct UnusedEntries {
    /// The script: its file name, or `the script` for one built in code.
    pub script: String,
    /// How many entries were never requested.
    pub unused: usize,
    /// The first of them: `entry 3 (line 12)`.
    pub first: String,
}

#[derive(Debug, Default)]
struct Progress {
    next: usize,
    seen: Vec<LlmRequest>,
}

/// A client that replays a script. See the [module docs](self) for the format.
#[derive(Debug)]
pub struct ScriptedLlm {
    model: String,
    source: String,
    entries: Vec<ScriptEntry>,
    progress: Mutex<Progress>,
    skip_unmatched: bool,
}

impl ScriptedLlm {
    /// A client answering with `entries` in order, as model `scripted:test`.
    pub fn new(entries: Vec<ScriptEntry>) -> Self {
        Self {
            model: "scripted:test".into(),
            source: "the script".into(),
            entries,
            progress: Mutex::new(Progress::default()),
            skip_unmatched: false,
        }
    }

    /// Builder-style: an entry whose `match` does not fit the request is skipped (consumed),
    /// and the next one tried, instead of failing the request. For a process that picks up a
    /// script in the middle (a resumed run, whose finished steps make no calls).
    #[must_use]
    pub fn skipping_unmatched(mut self, skip: bool) -> Self {
        self.skip_unmatched = skip;
        self
    }

    /// Builder-style: the model name reported (`provider:model`).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Loads a script file: `.jsonl` as JSON Lines, anything else as YAML. The model is
    /// `scripted:<file stem>`.
    ///
    /// # Errors
    /// [`LlmError::Config`] naming the file (and line) when it cannot be read or parsed, or
    /// an entry has neither or both of `response` and `error`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            LlmError::Config(format!(
                "could not read the model script {}: {e}",
                path.display()
            ))
        })?;
        let name = path.display().to_string();
        let mut client = if path.extension().is_some_and(|e| e == "jsonl") {
            Self::from_jsonl(&name, &text)?
        } else {
            Self::from_yaml(&name, &text)?
        };
        if let Some(stem) = path.file_stem() {
            client.model = format!("scripted:{}", stem.to_string_lossy());
        }
        Ok(client)
    }

    /// Parses a YAML list of entries; `source` names it in messages.
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file).
    pub fn from_yaml(source: &str, text: &str) -> Result<Self, LlmError> {
        let entries: Vec<ScriptEntry> = serde_yaml_ng::from_str(text).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
                .unwrap_or_default();
            LlmError::Config(format!("model script {source} is not valid{at}: {e}"))
        })?;
        Self::checked(source, entries)
    }

    /// Parses JSON Lines (blank lines skipped); `source` names it in messages.
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file).
    pub fn from_jsonl(source: &str, text: &str) -> Result<Self, LlmError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut entry: ScriptEntry = serde_json::from_str(line).map_err(|e| {
                LlmError::Config(format!(
                    "model script {source} line {} is not a valid entry: {e}",
                    i + 1
                ))
            })?;
            entry.line = Some(i + 1);
            entries.push(entry);
        }
        Self::checked(source, entries)
    }

    fn checked(source: &str, entries: Vec<ScriptEntry>) -> Result<Self, LlmError> {
        for (i, e) in entries.iter().enumerate() {
            if e.response.is_some() == e.error.is_some() {
                return Err(LlmError::Config(format!(
                    "model script {source} {} must have exactly one of `response` and `error`",
                    e.describe(i)
                )));
            }
        }
        let mut client = Self::new(entries);
        client.source = source.to_owned();
        Ok(client)
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries not yet consumed.
    pub fn remaining(&self) -> usize {
        self.entries.len().saturating_sub(self.progress().next)
    }

    /// Every request received so far, in order (also those that did not match).
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.progress().seen.clone()
    }

    /// Checks that the whole script was used.
    ///
    /// # Errors
    /// [`UnusedEntries`], naming the script and its first unused entry.
    pub fn finish(&self) -> Result<(), UnusedEntries> {
        let next = self.progress().next;
        match self.entries.get(next) {
            None => Ok(()),
            Some(e) => Err(UnusedEntries {
                script: self.source.clone(),
                unused: self.entries.len() - next,
                first: e.describe(next),
            }),
        }
    }
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let entry = {
            let mut p = self.progress();
            p.seen.push(request.clone());
            let n = p.seen.len();
            let mut index = p.next;
            if self.skip_unmatched {
                while let Some(e) = self.entries.get(index) {
                    if e.matcher.mismatch(request).is_none() {
                        break;
                    }
                    index += 1;
                }
                if index < self.entries.len() {
                    p.next = index;
                }
            }
            let Some(entry) = self.entries.get(index) else {
                return Err(LlmError::Config(format!(
                    "model script {} ran out: request {n} came after its last entry ({} entries)",
                    self.source,
                    self.entries.len()
                )));
            };
            if let Some(why) = entry.matcher.mismatch(request) {
                return Err(LlmError::Config(format!(
                    "model script {}: request {n} does not match {}: {why}",
                    self.source,
                    entry.describe(index)
                )));
            }
            p.next += 1;
            entry.clone()
        };
        if let Some(d) = entry.delay {
            tokio::time::sleep(d).await;
        }
        if let Some(e) = &entry.error {
            return Err(e.to_error(&self.model));
        }
        let r = entry.response.unwrap_or_default();
        let text = match (&r.text, &r.json) {
            (Some(t), _) => t.clone(),
            (None, Some(j)) => j.to_string(),
            (None, None) => String::new(),
        };
        let json = match (&r.json, &request.json_schema) {
            (Some(j), _) => Some(j.clone()),
            (None, Some((name, _))) => Some(crate::wire::json_answer(name, &text)?),
            (None, None) => None,
        };
        Ok(crate::wire::usage_response(
            text,
            json,
            r.model.unwrap_or_else(|| self.model.clone()),
            r.usage,
        ))
    }
}

/// Wraps a client and appends every exchange to a JSON Lines script that [`ScriptedLlm`]
/// replays: record a session against a real model once, replay it offline.
///
/// Each entry matches on the request's schema name and the first line of its last user message
/// (at most 80 characters), and holds the answer or the error.
pub struct RecordingLlm {
    inner: Arc<dyn LlmClient>,
    path: PathBuf,
    write: Mutex<()>,
}

impl std::fmt::Debug for RecordingLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingLlm")
            .field("model", &self.inner.model())
            .field("path", &self.path)
            .finish()
    }
}

impl RecordingLlm {
    /// Records `inner`'s exchanges into `path` (appending).
    pub fn new(inner: Arc<dyn LlmClient>, path: impl Into<PathBuf>) -> Self {
        Self {
            inner,
            path: path.into(),
            write: Mutex::new(()),
        }
    }

    fn entry(request: &LlmRequest, outcome: &Result<LlmResponse, LlmError>) -> ScriptEntry {
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| {
                let line = m.content.lines().next().unwrap_or_default();
                let mut end = line.len().min(80);
                while !line.is_char_boundary(end) {
                    end -= 1;
                }
                line[..end].to_owned()
            })
            .filter(|l| !l.trim().is_empty());
        let matcher = RequestMatcher {
            last_user_contains: last_user,
            schema: Some(
                request
                    .json_schema
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |(n, _)| n.clone()),
            ),
            ..RequestMatcher::default()
        };
        let mut entry = ScriptEntry {
            matcher,
            ..ScriptEntry::default()
        };
        match outcome {
            Ok(r) => {
                entry.response = Some(ScriptedResponse {
                    text: Some(r.text.clone()),
                    json: r.json.clone(),
                    model: Some(r.model.clone()),
                    usage: r.usage,
                });
            }
            Err(e) => entry.error = Some(ScriptedError::from_error(e)),
        }
        entry
    }

    fn append(&self, entry: &ScriptEntry) -> Result<(), LlmError> {
        use std::io::Write as _;
        let fail = |e: &dyn std::fmt::Display| {
            LlmError::Config(format!(
                "could not record the model exchange to {}: {e}",
                self.path.display()
            ))
        };
        let mut line = serde_json::to_string(entry).map_err(|e| fail(&e))?;
        line.push('\n');
        let _guard = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| fail(&e))
    }
}

#[async_trait]
impl LlmClient for RecordingLlm {
    fn model(&self) -> &str {
        self.inner.model()
    }

    /// # Errors
    /// The inner client's error, or [`LlmError::Config`] when the script cannot be written
    /// (a recording with holes would fail later, far from the cause).
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let outcome = self.inner.complete(request).await;
        self.append(&Self::entry(request, &outcome))?;
        outcome
    }

    fn models(&self) -> Vec<String> {
        self.inner.models()
    }

    fn open_circuits(&self) -> Vec<String> {
        self.inner.open_circuits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nuvira_api::ChatMessage;

    #[tokio::test]
    async fn replays_in_order_and_fails_clearly() {
        let yaml = r#"
- match: { schema: edit_batch, last_user_contains: "rename" }
  response:
    json: { edits: [] }
    usage: { input_tokens: 10, output_tokens: 3 }
- error: { kind: rate_limited, retry_after: 2s }
- match: { contains: "tests" }
  response: { text: "ok" }
"#;
        let llm = ScriptedLlm::from_yaml("demo.yaml", yaml).unwrap();
        let req = LlmRequest::new(vec![ChatMessage::user("please rename it")])
            .with_schema("edit_batch", serde_json::json!({}));
        let r = llm.complete(&req).await.unwrap();
        assert_eq!(r.json, Some(serde_json::json!({ "edits": [] })));
        assert_eq!(r.usage.output_tokens, 3);
        assert_eq!(r.model, "scripted:test");
        assert_eq!(
            llm.complete(&req).await.unwrap_err(),
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        let e = llm.complete(&req).await.unwrap_err().to_string();
        assert_eq!(
            e,
            "model not configured: model script demo.yaml: request 3 does not match entry 3: no message contains \"tests\""
        );
        assert_eq!(llm.remaining(), 1);
        assert!(
            llm.finish()
                .unwrap_err()
                .to_string()
                .contains("1 unused entries, starting at entry 3")
        );
        let ok = LlmRequest::new(vec![ChatMessage::user("run the tests")]);
        assert_eq!(llm.complete(&ok).await.unwrap().text, "ok");
        let e = llm.complete(&ok).await.unwrap_err().to_string();
        assert!(
            e.contains("ran out: request 5 came after its last entry (3 entries)"),
            "{e}"
        );
        assert_eq!(llm.requests().len(), 5);
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let text = "{\"response\": {\"text\": \"a\"}}\n\n{\"respnse\": {}}\n";
        let e = ScriptedLlm::from_jsonl("t.jsonl", text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.jsonl line 3 is not a valid entry"), "{e}");
        let e = ScriptedLlm::from_jsonl("t.jsonl", "{}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("entry 1 (line 1) must have exactly one of"),
            "{e}"
        );
    }
}
