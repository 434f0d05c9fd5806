//! The built-in [`RepairStrategy`]s (the trait is the contract's: `nuvira_api::RepairStrategy`).

use crate::Classification;
use nuvira_api::{ErrorCategory, EventKind, Failure, PlanStep, RecoveryDecision, async_trait};
pub use nuvira_api::{RepairInput, RepairStrategy};
use nuvira_secrets::redact;
use serde_json::{Map, Value};
use std::time::Duration;

/// The feedback for the next attempt after `input`'s failure: its message and evidence,
/// redacted.
pub fn feedback(input: &RepairInput<'_>) -> String {
    feedback_text(input.failure, input.classification)
}

/// The feedback text for a retried attempt: what failed and the evidence, redacted.
pub fn feedback_text(failure: &Failure, c: &Classification) -> String {
    let mut s = format!(
        "The previous attempt failed ({}): {}",
        c.category,
        redact(&failure.message)
    );
    for e in &c.evidence {
        s.push_str("\n- ");
        s.push_str(e);
    }
    s
}

/// The config keys holding text for a model, which the prompt strategies rewrite.
const PROMPT_KEYS: &[&str] = &["instructions", "prompt"];

fn prompt_of(step: &PlanStep) -> Option<(&'static str, &str)> {
    PROMPT_KEYS
        .iter()
        .find_map(|k| step.config_str(k).map(|v| (*k, v)))
}

fn with_config_value(step: &PlanStep, key: &str, value: Value) -> PlanStep {
    let mut step = step.clone();
    if !step.config.is_object() {
        step.config = Value::Object(Map::new());
    }
    if let Some(obj) = step.config.as_object_mut() {
        obj.insert(key.to_owned(), value);
    }
    step
}

/// Whether the step's own `config.recover.strategies` names `strategy`.
fn asks_for(step: &PlanStep, strategy: &str) -> bool {
    fn walk(v: &Value, name: &str) -> bool {
        match v {
            Value::String(s) => s == name,
            Value::Array(a) => a.iter().any(|x| walk(x, name)),
            Value::Object(o) => o.values().any(|x| walk(x, name)),
            _ => false,
        }
    }
    step.config_value("recover")
        .and_then(|r| r.get("strategies"))
        .is_some_and(|s| walk(s, strategy))
}

/// The model a step prefers (`config.recover.model`, set by [`SwitchModel`]), if any.
pub fn preferred_model(step: &PlanStep) -> Option<&str> {
    step.config_value("recover")
        .and_then(|r| r.get("model"))
        .and_then(Value::as_str)
}

/// `retry-same`: run the step again unchanged, with the errors as feedback. For failures that
/// may not repeat (a flaky command, an I/O hiccup).
#[derive(Debug, Clone, Copy, Default)]
pub struct RetrySame;

#[async_trait]
impl RepairStrategy for RetrySame {
    fn name(&self) -> &str {
        "retry-same"
    }
    fn applies(&self, _input: &RepairInput<'_>) -> bool {
        true
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        Some(RecoveryDecision::Retry {
            delay: Duration::ZERO,
            feedback: Some(feedback(input)),
            step: None,
        })
    }
}

/// `retry-with-backoff`: run the step again after `base * 2^uses` (capped at `max`), or after
/// the `retry after Ns` the provider asked for when it is longer. For timeouts and rate limits.
#[derive(Debug, Clone, Copy)]
pub struct RetryWithBackoff {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for RetryWithBackoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

impl RetryWithBackoff {
    /// The delay before retry number `uses + 1` of a failure saying `message`.
    pub fn delay(&self, uses: u32, message: &str) -> Duration {
        let exp = self
            .base
            .saturating_mul(2u32.saturating_pow(uses.min(16)))
            .min(self.max);
        retry_after(message).map_or(exp, |ra| ra.min(self.max).max(exp))
    }
}

/// The wait a `(retry after Ns)` in a message asks for.
fn retry_after(message: &str) -> Option<Duration> {
    let i = message.find("retry after ")?;
    let rest = &message[i + "retry after ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Duration::from_secs)
}

#[async_trait]
impl RepairStrategy for RetryWithBackoff {
    fn name(&self) -> &str {
        "retry-with-backoff"
    }
    fn applies(&self, _input: &RepairInput<'_>) -> bool {
        true
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        Some(RecoveryDecision::Retry {
            delay: self.delay(input.uses, &input.failure.message),
            feedback: Some(feedback(input)),
            step: None,
        })
    }
}

/// `rephrase-prompt`: once per step, restate the step's `instructions` (or `prompt`) with what
/// went wrong and firmer rules on the answer's form. For invalid model output and rejected
/// model-written edits.
#[derive(Debug, Clone, Copy, Default)]
pub struct RephrasePrompt;

/// The rephrased text.
pub fn rephrase(original: &str, feedback: &str) -> String {
    format!(
        "{original}\n\n{feedback}\nAnswer again, following these rules strictly: reply with only the JSON object the schema describes; \
         copy every `search` text exactly (whitespace included) from the file contents you were shown; keep each edit small and \
         change nothing the task does not need."
    )
}

#[async_trait]
impl RepairStrategy for RephrasePrompt {
    fn name(&self) -> &str {
        "rephrase-prompt"
    }
    fn applies(&self, input: &RepairInput<'_>) -> bool {
        input.uses == 0 && prompt_of(input.step).is_some()
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        let (key, text) = prompt_of(input.step)?;
        let new = rephrase(text, &feedback(input));
        Some(RecoveryDecision::Retry {
            delay: Duration::ZERO,
            feedback: Some(feedback(input)),
            step: Some(Box::new(with_config_value(
                input.step,
                key,
                Value::from(new),
            ))),
        })
    }
}

/// `switch-model`: run the step again preferring another of the client's models (its
/// `fallback_models`) whose circuit breaker is closed and that this step has not tried; emits
/// `recover:model-switch`. The choice goes into `config.recover.model`, which the recover
/// stage's module wrapper turns into [`LlmRequest::model`](nuvira_api::LlmRequest).
#[derive(Debug, Clone, Copy, Default)]
pub struct SwitchModel;

impl SwitchModel {
    /// The model to switch to: the first of the client's models that is not the current one,
    /// not already tried and whose breaker is not open.
    pub fn candidate(input: &RepairInput<'_>) -> Option<(String, String)> {
        let llm = input.ctx.llm()?;
        let current =
            preferred_model(input.step).map_or_else(|| llm.model().to_owned(), str::to_owned);
        let tried: Vec<String> = input
            .step
            .config_value("recover")
            .and_then(|r| r.get("tried_models"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let open = llm.open_circuits();
        llm.models()
            .into_iter()
            .find(|m| *m != current && !tried.contains(m) && !open.contains(m))
            .map(|to| (current, to))
    }
}

#[async_trait]
impl RepairStrategy for SwitchModel {
    fn name(&self) -> &str {
        "switch-model"
    }
    fn applies(&self, input: &RepairInput<'_>) -> bool {
        Self::candidate(input).is_some()
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        let (from, to) = Self::candidate(input)?;
        let mut recover = input
            .step
            .config_value("recover")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut tried: Vec<Value> = recover
            .get("tried_models")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        tried.push(Value::from(from.clone()));
        recover.insert("tried_models".into(), Value::Array(tried));
        recover.insert("model".into(), Value::from(to.clone()));
        input.ctx.emit(EventKind::RecoverModelSwitch {
            from,
            to: to.clone(),
        });
        Some(RecoveryDecision::Retry {
            delay: Duration::ZERO,
            feedback: Some(feedback(input)),
            step: Some(Box::new(with_config_value(
                input.step,
                "recover",
                Value::Object(recover),
            ))),
        })
    }
}

/// `simplify-goal`: once per step, cut the `instructions` (or `prompt`) down to its first
/// sentence or line and ask for the smallest change that does it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimplifyGoal;

/// The simplified text: the first non-empty line, cut at its first sentence end.
pub fn simplify(text: &str) -> String {
    let first_line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let first_sentence = first_line
        .find(". ")
        .map_or(first_line, |i| &first_line[..=i]);
    format!(
        "{first_sentence}\n\nMake only the smallest change that achieves this; leave everything else as it is."
    )
}

#[async_trait]
impl RepairStrategy for SimplifyGoal {
    fn name(&self) -> &str {
        "simplify-goal"
    }
    fn applies(&self, input: &RepairInput<'_>) -> bool {
        input.uses == 0 && prompt_of(input.step).is_some()
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        let (key, text) = prompt_of(input.step)?;
        Some(RecoveryDecision::Retry {
            delay: Duration::ZERO,
            feedback: Some(feedback(input)),
            step: Some(Box::new(with_config_value(
                input.step,
                key,
                Value::from(simplify(text)),
            ))),
        })
    }
}

/// `split-task`: once per step, replace an edit step by one sub-step per line (or sentence) of
/// its `instructions`, or per entry of an explicit `edits` list when the step names
/// `split-task` in its own `config.recover.strategies` (an explicit batch is otherwise kept
/// all-or-nothing), chained in order; the scheduler validates the sub-steps and runs them in the
/// step's place. Sub-step ids are `<id>-part-<n>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitTask;

impl SplitTask {
    /// The sub-steps for a step, when it splits into at least two.
    pub fn split(step: &PlanStep) -> Option<Vec<PlanStep>> {
        let parts: Vec<(&str, Value)> = if let Some(edits) = step
            .config_value("edits")
            .and_then(Value::as_array)
            .filter(|e| e.len() > 1)
        {
            edits
                .iter()
                .map(|e| ("edits", Value::Array(vec![e.clone()])))
                .collect()
        } else if let Some(text) = step.config_str("instructions") {
            let mut pieces: Vec<&str> = text
                .lines()
                .map(|l| l.trim().trim_start_matches(['-', '*']).trim())
                .filter(|l| !l.is_empty())
                .collect();
            if pieces.len() < 2 {
                pieces = text
                    .split_inclusive(". ")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
            }
            pieces
                .into_iter()
                .map(|p| ("instructions", Value::from(p)))
                .collect()
        } else {
            return None;
        };
        if parts.len() < 2 {
            return None;
        }
        let mut out: Vec<PlanStep> = Vec::with_capacity(parts.len());
        for (i, (key, value)) in parts.into_iter().enumerate() {
            let mut sub = with_config_value(step, key, value);
            sub.id = format!("{}-part-{}", step.id, i + 1);
            if let Some(obj) = sub.config.as_object_mut() {
                let other = if key == "edits" {
                    "instructions"
                } else {
                    "edits"
                };
                obj.remove(other);
                obj.remove("recover");
            }
            if let Some(prev) = out.last() {
                sub.depends_on = vec![prev.id.clone()];
            }
            sub.description = Some(format!(
                "part {} of `{}`{}",
                i + 1,
                step.id,
                step.description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ));
            out.push(sub);
        }
        Some(out)
    }
}

#[async_trait]
impl RepairStrategy for SplitTask {
    fn name(&self) -> &str {
        "split-task"
    }
    fn applies(&self, input: &RepairInput<'_>) -> bool {
        // An explicit `edits` list is all-or-nothing on purpose: it is only split when the step
        // names `split-task` in `config.recover.strategies` itself.
        let explicit = input.step.config_value("edits").is_some();
        input.uses == 0
            && input.step.module == "edit"
            && (!explicit || asks_for(input.step, "split-task"))
            && Self::split(input.step).is_some()
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        Self::split(input.step).map(|steps| RecoveryDecision::Split { steps })
    }
}

/// `bypass`: graceful degradation. The step is recorded as bypassed (never as succeeded), its
/// dependents run, and the run does not count as a success. Only used when configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bypass;

#[async_trait]
impl RepairStrategy for Bypass {
    fn name(&self) -> &str {
        "bypass"
    }
    fn applies(&self, _input: &RepairInput<'_>) -> bool {
        true
    }
    async fn decide(&self, input: &RepairInput<'_>) -> Option<RecoveryDecision> {
        Some(RecoveryDecision::Bypass {
            reason: format!(
                "step `{}` degraded after a {} failure: {}",
                input.step.id,
                input.classification.category,
                redact(&input.failure.message)
            ),
        })
    }
}

/// The strategies tried for a category when the step's config says nothing, in order.
///
/// | category | strategies |
/// |---|---|
/// | compile-error, test-failure | debug-tests (test steps, with a model) |
/// | timeout | retry-with-backoff |
/// | llm-rate-limit | retry-with-backoff, switch-model |
/// | llm-invalid-output | rephrase-prompt, switch-model, retry-same |
/// | edit-rejected | rephrase-prompt, simplify-goal, split-task |
/// | io, unknown | retry-same |
/// | everything else | none: the step fails at once |
pub fn default_strategies(category: ErrorCategory) -> &'static [&'static str] {
    match category {
        ErrorCategory::CompileError | ErrorCategory::TestFailure => &["debug-tests"],
        ErrorCategory::Timeout => &["retry-with-backoff"],
        ErrorCategory::LlmRateLimit => &["retry-with-backoff", "switch-model"],
        ErrorCategory::LlmInvalidOutput => &["rephrase-prompt", "switch-model", "retry-same"],
        ErrorCategory::EditRejected => &["rephrase-prompt", "simplify-goal", "split-task"],
        ErrorCategory::Io | ErrorCategory::Unknown => &["retry-same"],
        _ => &[],
    }
}

/// Every built-in strategy of this crate (`debug-tests` lives in `nuvira-recover`, which has
/// the model and the editor).
pub fn builtin() -> Vec<std::sync::Arc<dyn RepairStrategy>> {
    vec![
        std::sync::Arc::new(RetrySame),
        std::sync::Arc::new(RetryWithBackoff::default()),
        std::sync::Arc::new(RephrasePrompt),
        std::sync::Arc::new(SwitchModel),
        std::sync::Arc::new(SimplifyGoal),
        std::sync::Arc::new(SplitTask),
        std::sync::Arc::new(Bypass),
    ]
}
