//! [`RecoverStage`]: the recover stage, as the engine's recovery policy — classify, pick a
//! strategy, keep the budget.

use nuvira_api::{
    ConfigError, ErrorCategory, EventKind, Failure, LlmClient, LlmError, LlmRequest, LlmResponse,
    Module, ModuleError, ModuleKind, PlanStep, RecoveryDecision, RecoveryPolicy, RepairBudget,
    StepContext, StepOutput, WriteSet, async_trait,
};
use nuvira_edit::nuvira_workspace::{Journal, OnChanged, Workspace};
use nuvira_repair_strategies::{
    RepairInput, RepairStrategy, classify_error, default_strategies, preferred_model,
};
use nuvira_secrets::redact;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// The default number of repair attempts over a whole run, across steps.
pub const DEFAULT_RUN_ATTEMPTS: u32 = 10;

/// A step's `config.recover`.
///
/// ```yaml
/// config:
///   recover:
///     strategies: [rephrase-prompt, bypass]      # for every category, or per category:
///     # strategies: { edit-rejected: [split-task], timeout: [retry-same] }
///     max_attempts: 4                            # attempts of this step, the first included
///     rollback_on_failure: true                  # undo the run's edits when recovery gives up
/// ```
///
/// `model` and `tried_models` are written by `switch-model`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RecoverConfig {
    /// Strategy names, for every category or per category name.
    #[serde(default)]
    pub strategies: Option<StrategySelection>,
    /// Attempts of the step, the first included.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Roll back every edit of the run when recovery of this step gives up.
    #[serde(default)]
    pub rollback_on_failure: Option<bool>,
    /// The model to prefer (set by `switch-model`).
    #[serde(default)]
    pub model: Option<String>,
    /// Models already tried (set by `switch-model`).
    #[serde(default)]
    pub tried_models: Option<Vec<String>>,
}

/// Which strategies a step uses.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StrategySelection {
    /// The same list for every category.
    All(Vec<String>),
    /// A list per category (`test-failure`, `edit-rejected`, ...); unlisted categories keep
    /// their defaults.
    PerCategory(BTreeMap<String, Vec<String>>),
}

#[derive(Debug)]
struct StepState {
    started: Instant,
    repairs: u32,
    uses: HashMap<String, u32>,
    last_strategy: Option<String>,
}

/// The recover stage, as the engine's [`RecoveryPolicy`].
///
/// For every recoverable failure it classifies the failure ([`classify_error`], emitting
/// `recover:classified`), checks the budget (attempts per step, default 3 including the first
/// run, and repairs per run, shared by all steps, default [`DEFAULT_RUN_ATTEMPTS`]; when spent:
/// `recover:budget-exhausted`), and tries the strategies selected for the category in order
/// (`config.recover.strategies`, else [`default_strategies`]): the first that applies and
/// decides wins (`recover:attempt` for each one tried). When none can act the step fails
/// (`recover:result` with `success: false`). Success is reported by the module wrapper
/// ([`RecoverStage::wrap`]) when a retried step succeeds.
pub struct RecoverStage {
    strategies: BTreeMap<String, Arc<dyn RepairStrategy>>,
    budget: RepairBudget,
    rollback_on_failure: bool,
    steps: Mutex<HashMap<(String, String), StepState>>,
    runs: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for RecoverStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverStage")
            .field("strategies", &self.strategies.keys().collect::<Vec<_>>())
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Default for RecoverStage {
    fn default() -> Self {
        Self::new()
    }
}

impl RecoverStage {
    /// A policy with the built-in strategies of `nuvira-repair-strategies` (no `debug-tests`:
    /// add it with [`with_strategy`](Self::with_strategy) or use [`standard`](Self::standard)).
    pub fn new() -> Self {
        let mut budget = RepairBudget::default();
        budget.max_run_attempts = Some(DEFAULT_RUN_ATTEMPTS);
        let mut p = Self {
            strategies: BTreeMap::new(),
            budget,
            rollback_on_failure: false,
            steps: Mutex::new(HashMap::new()),
            runs: Mutex::new(HashMap::new()),
        };
        for s in nuvira_repair_strategies::builtin() {
            p = p.with_strategy(s);
        }
        p
    }

    /// The built-in strategies plus `debug-tests`, applying fixes with `editor`.
    pub fn standard(editor: nuvira_edit::Editor) -> Self {
        Self::new().with_strategy(Arc::new(crate::DebugTests::new(editor)))
    }

    /// Builder-style: adds (or replaces, by name) a strategy.
    #[must_use]
    pub fn with_strategy(mut self, s: Arc<dyn RepairStrategy>) -> Self {
        self.strategies.insert(s.name().to_owned(), s);
        self
    }

    /// Builder-style: the budget.
    #[must_use]
    pub fn with_budget(mut self, budget: RepairBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Builder-style: roll back every edit of the run when recovery gives up (default: no; each
    /// batch is all-or-nothing, so files are left consistent either way).
    #[must_use]
    pub fn rollback_on_failure(mut self, yes: bool) -> Self {
        self.rollback_on_failure = yes;
        self
    }

    /// The names of the registered strategies.
    pub fn strategy_names(&self) -> Vec<&str> {
        self.strategies.keys().map(String::as_str).collect()
    }

    /// A step's `config.recover`, checked: known keys, known strategy and category names,
    /// `max_attempts` at least 1.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the step and the bad value.
    pub fn config(&self, step: &PlanStep) -> Result<RecoverConfig, ConfigError> {
        let Some(v) = step.config_value("recover") else {
            return Ok(RecoverConfig::default());
        };
        let err = |message: String| ConfigError::new(&step.id, message).at("recover");
        let cfg: RecoverConfig = serde_json::from_value(v.clone()).map_err(|e| {
            err(format!(
                "config.recover: {e} (keys: strategies, max_attempts, rollback_on_failure)"
            ))
        })?;
        let known = self.strategy_names().join(", ");
        let check = |names: &[String]| -> Result<(), ConfigError> {
            match names
                .iter()
                .find(|n| !self.strategies.contains_key(n.as_str()))
            {
                Some(n) => Err(err(format!(
                    "config.recover.strategies: unknown strategy `{n}`; use one of: {known}"
                ))),
                None => Ok(()),
            }
        };
        match &cfg.strategies {
            Some(StrategySelection::All(names)) => check(names)?,
            Some(StrategySelection::PerCategory(map)) => {
                for (cat, names) in map {
                    if !ErrorCategory::ALL.iter().any(|c| c.as_str() == cat) {
                        return Err(err(format!(
                            "config.recover.strategies: unknown category `{cat}`; use one of: {}",
                            ErrorCategory::ALL
                                .iter()
                                .map(|c| c.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    check(names)?;
                }
            }
            None => {}
        }
        if cfg.max_attempts == Some(0) {
            return Err(err(
                "config.recover.max_attempts must be at least 1 (the first run counts)".into(),
            ));
        }
        Ok(cfg)
    }

    /// The strategy names for a category under a config.
    pub fn selection(cfg: &RecoverConfig, category: ErrorCategory) -> Vec<String> {
        let defaults = || {
            default_strategies(category)
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        };
        match &cfg.strategies {
            Some(StrategySelection::All(v)) => v.clone(),
            Some(StrategySelection::PerCategory(m)) => {
                m.get(category.as_str()).cloned().unwrap_or_else(defaults)
            }
            None => defaults(),
        }
    }

    /// Wraps a module so that steps may carry `config.recover` (it is removed before the
    /// module sees the config, and checked in `validate`), a model chosen by `switch-model` is
    /// preferred for the step's requests, and a retried step that succeeds emits
    /// `recover:result` with `success: true`.
    pub fn wrap(self: &Arc<Self>, module: Arc<dyn Module>) -> Arc<dyn Module> {
        Arc::new(Recovering {
            inner: module,
            policy: Arc::clone(self),
        })
    }

    fn lock_steps(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), StepState>> {
        self.steps.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn give_up(
        &self,
        ctx: &StepContext,
        cfg: &RecoverConfig,
        key: &(String, String),
        failure: &Failure,
    ) -> RecoveryDecision {
        let state = self.lock_steps().remove(key);
        let (repairs, ms) = state.map_or((0, 0), |s| {
            (
                s.repairs,
                u64::try_from(s.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            )
        });
        if cfg.rollback_on_failure.unwrap_or(self.rollback_on_failure) && !ctx.dry_run() {
            rollback(ctx, &redact(&failure.message));
        }
        ctx.emit(EventKind::RecoverResult {
            success: false,
            attempts: repairs,
            duration_ms: ms,
        });
        RecoveryDecision::GiveUp
    }

    /// Ends the recovery of a retried step that succeeded or failed for good.
    fn finished(&self, ctx: &StepContext, success: bool) {
        let key = (ctx.run_id().to_string(), ctx.step_id().to_string());
        if let Some(s) = self.lock_steps().remove(&key) {
            ctx.emit(EventKind::RecoverResult {
                success,
                attempts: s.repairs,
                duration_ms: u64::try_from(s.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
    }
}

/// Rolls back every journaled edit of the run, announcing it.
fn rollback(ctx: &StepContext, reason: &str) {
    let Ok(ws) = Workspace::open(ctx.workspace_root()) else {
        return;
    };
    match Journal::new(&ws).rollback_run_with(ctx.run_id(), OnChanged::Keep) {
        Ok(restored) => {
            let kept: Vec<String> = restored.iter().flat_map(|r| r.kept.clone()).collect();
            let paths: Vec<String> = restored.into_iter().flat_map(|r| r.paths).collect();
            ctx.emit(EventKind::EditRolledBack {
                paths,
                reason: nuvira_edit::with_kept(&format!("recovery gave up: {reason}"), &kept),
            });
        }
        // Said, not swallowed: the run's edits are still in place.
        Err(e) => ctx.emit(EventKind::EditRolledBack {
            paths: Vec::new(),
            reason: format!(
                "recovery gave up: {reason}; rolling back the run's edits failed, so they are still in place: {e} (run `nuvira rollback` to retry)"
            ),
        }),
    }
}

#[async_trait]
impl RecoveryPolicy for RecoverStage {
    /// A split task's sub-steps have run: that is the end of this step's recovery.
    async fn on_split_finished(&self, _step: &PlanStep, ctx: &StepContext, success: bool) {
        self.finished(ctx, success);
    }

    async fn on_failure(
        &self,
        step: &PlanStep,
        ctx: &StepContext,
        attempt: u32,
        failure: &Failure,
    ) -> RecoveryDecision {
        let key = (ctx.run_id().to_string(), step.id.clone());
        let cfg = self.config(step).unwrap_or_default();
        let c = classify_error(failure);
        self.lock_steps()
            .entry(key.clone())
            .or_insert_with(|| StepState {
                started: Instant::now(),
                repairs: 0,
                uses: HashMap::new(),
                last_strategy: None,
            });
        let names = Self::selection(&cfg, c.category);
        let max = cfg.max_attempts.unwrap_or(self.budget.max_attempts).max(1);
        let run_used = *self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(ctx.run_id().as_ref())
            .unwrap_or(&0);
        let run_spent = self.budget.max_run_attempts.is_some_and(|m| run_used >= m);
        let final_error = redact(&failure.message);
        if !names.is_empty() && (attempt >= max || run_spent) {
            ctx.emit(EventKind::RecoverClassified {
                category: c.category,
                strategy: "none".into(),
                evidence: c.evidence.clone(),
            });
            ctx.emit(EventKind::RecoverBudgetExhausted {
                attempts: attempt,
                final_error: if run_spent {
                    format!("{final_error} (the run's repair budget of {run_used} is spent)")
                } else {
                    final_error
                },
            });
            return self.give_up(ctx, &cfg, &key, failure);
        }
        let mut classified = false;
        for name in &names {
            let Some(strategy) = self.strategies.get(name) else {
                continue;
            };
            let uses = self
                .lock_steps()
                .get(&key)
                .and_then(|s| s.uses.get(name).copied())
                .unwrap_or(0);
            let input = RepairInput::new(step, ctx, attempt, failure, &c).with_uses(uses);
            if !strategy.applies(&input) {
                continue;
            }
            if !classified {
                ctx.emit(EventKind::RecoverClassified {
                    category: c.category,
                    strategy: name.clone(),
                    evidence: c.evidence.clone(),
                });
                classified = true;
            }
            let repairs = {
                let mut steps = self.lock_steps();
                let s = steps.entry(key.clone()).or_insert_with(|| StepState {
                    started: Instant::now(),
                    repairs: 0,
                    uses: HashMap::new(),
                    last_strategy: None,
                });
                s.repairs += 1;
                *s.uses.entry(name.clone()).or_insert(0) += 1;
                s.last_strategy = Some(name.clone());
                s.repairs
            };
            *self
                .runs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(ctx.run_id().to_string())
                .or_insert(0) += 1;
            ctx.emit(EventKind::RecoverAttempt {
                attempt: repairs,
                strategy: name.clone(),
            });
            match strategy.decide(&input).await {
                Some(RecoveryDecision::Bypass { reason }) => {
                    self.lock_steps().remove(&key);
                    ctx.emit(EventKind::RecoverResult {
                        success: false,
                        attempts: repairs,
                        duration_ms: 0,
                    });
                    return RecoveryDecision::Bypass { reason };
                }
                Some(RecoveryDecision::GiveUp) => break,
                Some(d) => return d,
                None => {}
            }
        }
        if !classified {
            ctx.emit(EventKind::RecoverClassified {
                category: c.category,
                strategy: "none".into(),
                evidence: c.evidence.clone(),
            });
        }
        self.give_up(ctx, &cfg, &key, failure)
    }
}

/// A module under the recover stage (see [`RecoverStage::wrap`]).
struct Recovering {
    inner: Arc<dyn Module>,
    policy: Arc<RecoverStage>,
}

/// The step without `config.recover`.
fn strip(step: &PlanStep) -> Cow<'_, PlanStep> {
    match step.config.as_object() {
        Some(obj) if obj.contains_key("recover") => {
            let mut s = step.clone();
            if let Some(o) = s.config.as_object_mut() {
                o.remove("recover");
                if o.is_empty() {
                    s.config = Value::Null;
                }
            }
            Cow::Owned(s)
        }
        _ => Cow::Borrowed(step),
    }
}

#[async_trait]
impl Module for Recovering {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> ModuleKind {
        self.inner.kind()
    }
    fn write_set(&self, step: &PlanStep) -> WriteSet {
        self.inner.write_set(&strip(step))
    }
    fn calls_before_changes(&self) -> bool {
        self.inner.calls_before_changes()
    }
    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        self.policy.config(step)?;
        self.inner.validate(&strip(step))
    }
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let mut ctx = ctx.clone();
        if let (Some(model), Some(llm)) = (preferred_model(step), ctx.llm().cloned()) {
            ctx = ctx.with_llm(Some(Arc::new(Prefer {
                inner: llm,
                model: model.to_owned(),
            })));
        }
        let out = self.inner.run(&strip(step), &ctx).await;
        if ctx.attempt() > 1 {
            match &out {
                Ok(_) => self.policy.finished(&ctx, true),
                // A retried attempt that fails for good never reaches the policy again.
                Err(e) if !e.is_recoverable() => self.policy.finished(&ctx, false),
                Err(_) => {}
            }
        }
        out
    }
}

/// A client that asks for one model unless a request names its own.
struct Prefer {
    inner: Arc<dyn LlmClient>,
    model: String,
}

#[async_trait]
impl LlmClient for Prefer {
    fn model(&self) -> &str {
        &self.model
    }
    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        if request.model.is_some() {
            return self.inner.complete(request).await;
        }
        let r = request.clone().with_model(self.model.clone());
        self.inner.complete(&r).await
    }
    fn models(&self) -> Vec<String> {
        self.inner.models()
    }
    fn open_circuits(&self) -> Vec<String> {
        self.inner.open_circuits()
    }
}
