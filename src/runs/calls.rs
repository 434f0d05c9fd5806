//! Model-call records: every model request of a run, before it is sent and after it returns,
//! as `calls/<n>.json` in the run folder, with `llm:request` / `llm:response` events on the bus;
//! prices, token and cost budgets.
//!
//! `RecordingLlm` wraps the run's model client for one step attempt (the engine's
//! [`StepHooks::step_llm`](crate::hooks::StepHooks::step_llm)). Events carry hashes and counts
//! only, never a key nor the prompt's text; the record file holds the full request and answer,
//! redacted by `nuvira-secrets`.

use crate::runs::{RunsError, hash_bytes};
use nuvira_api::{
    ContextSource, EventKind, EventSink, LlmClient, LlmError, LlmRequest, LlmResponse, ModelUsage,
    RequestHashes, Role, TokenUsage, async_trait,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// The configuration file of a repository's Nuvira settings, under `.nuvira/`.
pub const CONFIG_FILE: &str = "config.toml";
/// The environment variable naming another configuration file.
pub const CONFIG_ENV: &str = "NUVIRA_CONFIG";

/// The configuration (`~/.config/nuvira/config.toml`, `.nuvira/config.toml`, or
/// `$NUVIRA_CONFIG`; see [`Config::load`]): the run history's retention and the price of each
/// model.
///
/// ```toml
/// [runs]
/// keep = 100        # the newest runs kept (0: no limit)
/// keep_days = 30    # runs older than this are removed (0: no limit)
///
/// [prices."openai:gpt-4.1"]
/// input_per_mtok = 2.0     # US dollars per million prompt tokens
/// output_per_mtok = 8.0    # US dollars per million answer tokens
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// `[runs]`.
    #[serde(default)]
    pub runs: RunsConfig,
    /// `[prices."provider:model"]`.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
}

/// `[runs]` of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunsConfig {
    /// The newest runs kept.
    pub keep: Option<usize>,
    /// Runs younger than this many days are kept.
    pub keep_days: Option<u64>,
}

/// The price of a model, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input_per_mtok: f64,
    /// Per million answer tokens.
    pub output_per_mtok: f64,
}

impl Config {
    /// The configuration of a run in `ws`, from the files the user trusts and the one the
    /// repository brings:
    ///
    /// - `$NUVIRA_CONFIG` when set: that file alone;
    /// - else the user's own file ([`Config::user_path`]: `$XDG_CONFIG_HOME/nuvira/config.toml`,
    ///   else `~/.config/nuvira/config.toml`), with `<repo>/.nuvira/config.toml` on top **only
    ///   where it is stricter** ([`Config::tightened_by`]): `.nuvira/` may have come with a
    ///   checkout, so a repository may raise a price (a budget stops sooner) or keep more runs,
    ///   never lower a price (to slip past `--max-cost`) or have runs deleted.
    ///
    /// A file is never read through a symlink (an error); no file is the default
    /// configuration.
    ///
    /// # Errors
    /// [`RunsError::Read`] when a file is unreadable or not valid configuration.
    pub fn load(ws: &nuvira_workspace::Workspace) -> Result<Self, RunsError> {
        if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
            return Self::read(&PathBuf::from(p));
        }
        let user = match Self::user_path() {
            Some(p) => Self::read(&p)?,
            None => Self::default(),
        };
        let repo = match ws.state_folder(&[], false) {
            Ok(Some(dir)) => Self::read(&dir.join(CONFIG_FILE))?,
            _ => Self::default(),
        };
        Ok(user.tightened_by(&repo))
    }

    /// The user's own configuration file: `$XDG_CONFIG_HOME/nuvira/config.toml` (when
    /// absolute), else `$HOME/.config/nuvira/config.toml`.
    pub fn user_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|h| h.join(".config"))
            })?;
        Some(base.join("nuvira").join(CONFIG_FILE))
    }

    /// Reads one file (a missing one is the default configuration; a symlink is an error).
    fn read(path: &std::path::Path) -> Result<Self, RunsError> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(Self::default());
        }
        let bytes = crate::runs::read_capped(path)?;
        let text = String::from_utf8_lossy(&bytes);
        toml::from_str(&text).map_err(|e| RunsError::Read {
            path: path.to_path_buf(),
            reason: e.to_string().trim().replace('\n', " "),
        })
    }

    /// This (trusted) configuration with `untrusted`'s settings taken only where they are
    /// stricter: a price per field the higher of the two (a model only `untrusted` prices gets
    /// its price: costs can only go up), and the retention that keeps more (`0`, no limit,
    /// keeps the most). What `untrusted` would loosen is ignored.
    #[must_use]
    pub fn tightened_by(mut self, untrusted: &Config) -> Self {
        for (model, theirs) in &untrusted.prices {
            let price = self.prices.entry(model.clone()).or_insert(*theirs);
            price.input_per_mtok = price.input_per_mtok.max(theirs.input_per_mtok);
            price.output_per_mtok = price.output_per_mtok.max(theirs.output_per_mtok);
        }
        // `0` is no limit: the most kept.
        let more = |ours: u64, theirs: u64| {
            if ours == 0 || theirs == 0 {
                0
            } else {
                ours.max(theirs)
            }
        };
        if let Some(theirs) = untrusted.runs.keep {
            let ours = self.runs.keep.unwrap_or(crate::runs::DEFAULT_KEEP_RUNS);
            let kept = more(ours as u64, theirs as u64);
            self.runs.keep = Some(usize::try_from(kept).unwrap_or(usize::MAX));
        }
        if let Some(theirs) = untrusted.runs.keep_days {
            let ours = self
                .runs
                .keep_days
                .unwrap_or(crate::runs::DEFAULT_KEEP_DAYS);
            self.runs.keep_days = Some(more(ours, theirs));
        }
        self
    }

    /// What `usage` costs on `model` (`provider:model`), when the model has a price.
    pub fn cost(&self, model: &str, usage: TokenUsage) -> Option<f64> {
        let p = self.prices.get(model)?;
        #[expect(
            clippy::cast_precision_loss,
            reason = "token counts are far below 2^52"
        )]
        let cost = (usage.input_tokens as f64 * p.input_per_mtok
            + usage.output_tokens as f64 * p.output_per_mtok)
            / 1_000_000.0;
        Some(cost)
    }
}

/// Caps on what a run's model calls may use (`--max-tokens`, `--max-cost`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Input plus output tokens of every call.
    pub max_tokens: Option<u64>,
    /// US dollars of every priced call.
    pub max_cost_usd: Option<f64>,
}

/// One `calls/<n>.json`: the request as sent (redacted) with its hashes, then the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct CallRecord {
    /// The call's number in the run, from 1.
    pub call: u64,
    /// The step that made it (`None`: the planner, before the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The step's attempt.
    pub attempt: u32,
    /// The call's position among the calls of the same step attempt, from 1.
    pub ordinal: u32,
    /// `provider:model` of the client asked.
    pub provider_model: String,
    /// When it was sent (ms since the Unix epoch).
    pub sent_ms: u64,
    /// The hashes of the request (of the text as sent, before redaction).
    pub hashes: RequestHashes,
    /// The request, every message redacted.
    pub request: LlmRequest,
    /// The answer, redacted; `None` while the call is in flight or when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<LlmResponse>,
    /// The answer as returned, unredacted, for replay: only kept when it held nothing the
    /// scanner redacts (else replay cannot reproduce it and says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayable: Option<bool>,
    /// Why the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// How often the request was sent again after a failure (a transport's retries of a 429,
    /// 5xx or broken connection, and each fallback to the next model); 0 for an answer from a
    /// record.
    #[serde(default)]
    pub retries: u32,
    /// The cost in US dollars, when the model has a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Whether the answer came from a record (`nuvira replay`, or `nuvira resume` reusing an
    /// earlier attempt's answer) rather than from the model.
    #[serde(default)]
    pub from_record: bool,
}

/// Reads every `calls/<n>.json` of a run folder, by call number.
///
/// # Errors
/// [`RunsError::Read`] when a record is unreadable.
pub fn read_calls(dir: &Path) -> Result<Vec<CallRecord>, RunsError> {
    if !crate::runs::is_real_dir(dir) {
        return Ok(Vec::new());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| RunsError::Read {
        path: dir.to_owned(),
        reason: crate::runs::io_reason(&e),
    })?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(n) = name.strip_suffix(".json") else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        out.push(crate::runs::read_json::<CallRecord>(&entry.path())?);
    }
    out.sort_by_key(|c| c.call);
    Ok(out)
}

/// The hashes of a request (see [`RequestHashes`]).
pub fn hash_request(request: &LlmRequest) -> RequestHashes {
    let join = |want: bool| {
        let mut s = String::new();
        for m in request
            .messages
            .iter()
            .filter(|m| (m.role == Role::System) == want)
        {
            s.push_str(match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
            });
            s.push('\0');
            s.push_str(&m.content);
            s.push('\0');
        }
        s
    };
    let params = serde_json::json!({
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "model": request.model,
    });
    let mut context = Vec::new();
    for m in &request.messages {
        context.extend(context_sources(&m.content));
    }
    let mut h = RequestHashes::default();
    h.request = hash_bytes(&serde_json::to_vec(request).unwrap_or_default());
    h.system = hash_bytes(join(true).as_bytes());
    h.messages = hash_bytes(join(false).as_bytes());
    h.schema = request
        .json_schema
        .as_ref()
        .map(|s| hash_bytes(&serde_json::to_vec(s).unwrap_or_default()));
    h.params = hash_bytes(params.to_string().as_bytes());
    h.context = context;
    h
}

/// The `<untrusted-data source="...">` blocks of a message: each source with the hash of its
/// text.
pub fn context_sources(text: &str) -> Vec<ContextSource> {
    const OPEN: &str = "<untrusted-data source=\"";
    const CLOSE: &str = "</untrusted-data>";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let after = &rest[i + OPEN.len()..];
        let Some(q) = after.find("\">") else { break };
        let source = &after[..q];
        let body = &after[q + 2..];
        let end = body.find(CLOSE).unwrap_or(body.len());
        out.push(ContextSource::new(
            source,
            hash_bytes(&body.as_bytes()[..end]),
        ));
        rest = &body[end..];
    }
    out
}

/// How a recorded request differs from a new one: `None` when they are the same.
pub fn differences(recorded: &RequestHashes, now: &RequestHashes) -> Option<Vec<String>> {
    if recorded.request == now.request {
        return None;
    }
    let mut out = Vec::new();
    let rec_ctx: BTreeMap<&str, &str> = recorded
        .context
        .iter()
        .map(|c| (c.source.as_str(), c.hash.as_str()))
        .collect();
    let now_ctx: BTreeMap<&str, &str> = now
        .context
        .iter()
        .map(|c| (c.source.as_str(), c.hash.as_str()))
        .collect();
    for (src, h) in &now_ctx {
        match rec_ctx.get(src) {
            Some(r) if r != h => out.push(format!(
                "context file `{src}` changed (recorded {r}, now {h})"
            )),
            None => out.push(format!("context file `{src}` is new")),
            _ => {}
        }
    }
    for src in rec_ctx.keys().filter(|s| !now_ctx.contains_key(*s)) {
        out.push(format!("context file `{src}` is no longer sent"));
    }
    if recorded.system != now.system {
        out.push(format!(
            "the system prompt changed (prompt hash recorded {}, now {})",
            recorded.system, now.system
        ));
    }
    if recorded.schema != now.schema {
        out.push(format!(
            "the JSON schema changed (recorded {}, now {})",
            recorded.schema.as_deref().unwrap_or("none"),
            now.schema.as_deref().unwrap_or("none")
        ));
    }
    if recorded.params != now.params {
        out.push("the request parameters changed (max_tokens, temperature or model)".into());
    }
    if recorded.messages != now.messages && !out.iter().any(|d| d.starts_with("context")) {
        out.push(format!(
            "the prompt's messages changed (prompt hash recorded {}, now {})",
            recorded.messages, now.messages
        ));
    }
    if out.is_empty() {
        out.push(format!(
            "the request changed (hash recorded {}, now {})",
            recorded.request, now.request
        ));
    }
    Some(out)
}

/// Where recorded answers come from when a run reuses them: `nuvira replay` (every call must
/// match) and `nuvira resume` (a call that matches an earlier attempt's is answered from it).
#[derive(Debug, Default)]
pub struct Recorded {
    /// By (step, attempt, ordinal).
    calls: BTreeMap<(Option<String>, u32, u32), CallRecord>,
    /// The highest call number of any record, answered or not.
    max_call: u64,
    /// Replay: a request that does not match is a divergence (else it goes to the model).
    pub strict: bool,
    /// Replay: record a divergence and answer from the record anyway.
    pub continue_on_divergence: bool,
}

impl Recorded {
    /// The answered calls of a run folder's `calls/`.
    ///
    /// # Errors
    /// As [`read_calls`].
    pub fn from_dir(dir: &Path) -> Result<Self, RunsError> {
        let mut calls = BTreeMap::new();
        let mut max_call = 0;
        for c in read_calls(dir)? {
            max_call = max_call.max(c.call);
            if c.response.is_some() {
                calls.insert((c.step.clone(), c.attempt, c.ordinal), c);
            }
        }
        Ok(Self {
            calls,
            max_call,
            ..Self::default()
        })
    }

    /// The highest call number recorded (0: none).
    pub fn last_call(&self) -> u64 {
        self.max_call
    }

    /// How many answered calls there are.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// A divergence found by replay: the call, where, and what differed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Divergence {
    /// The step (`None`: the planner).
    pub step: Option<String>,
    /// The attempt.
    pub attempt: u32,
    /// The call's position in the step attempt.
    pub ordinal: u32,
    /// What differed, one line each.
    pub differences: Vec<String>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step `{}` attempt {} call {}: {}",
            self.step.as_deref().unwrap_or("(planner)"),
            self.attempt,
            self.ordinal,
            self.differences.join("; ")
        )
    }
}

/// The model-call log of one run: numbers calls, writes their records, emits their events,
/// adds up what they used and stops the run when a budget is exceeded.
pub struct CallLog {
    /// `calls/` of the run folder (`None`: history off, nothing written).
    dir: Option<PathBuf>,
    events: Arc<dyn EventSink>,
    config: Config,
    budget: Budget,
    cancel: CancellationToken,
    next: AtomicU64,
    state: Mutex<LogState>,
    recorded: Option<Recorded>,
    /// Records kept in memory while there is no folder yet (the planner's calls, made before
    /// the run folder exists).
    pending: Mutex<Vec<CallRecord>>,
    /// Whether records are kept in `pending` while there is no folder.
    buffer: bool,
    /// Runs on the blocking thread before each record is written (tests hold a write with it).
    #[cfg(test)]
    write_hook: Option<Arc<dyn Fn() + Send + Sync>>,
}

#[derive(Default)]
struct LogState {
    usage: ModelUsage,
    exceeded: Option<String>,
    ordinals: BTreeMap<(Option<String>, u32), u32>,
    divergences: Vec<Divergence>,
    /// Calls answered by the model (not from a record).
    live_calls: u64,
}

impl std::fmt::Debug for CallLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallLog")
            .field("dir", &self.dir)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl CallLog {
    /// A log writing into `dir` (a run folder's `calls/`, created on the first call), emitting
    /// on `events`, cancelling `cancel` when `budget` is exceeded.
    pub fn new(
        dir: Option<PathBuf>,
        events: Arc<dyn EventSink>,
        config: Config,
        budget: Budget,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            dir,
            events,
            config,
            budget,
            cancel,
            next: AtomicU64::new(1),
            state: Mutex::new(LogState::default()),
            recorded: None,
            pending: Mutex::new(Vec::new()),
            buffer: false,
            #[cfg(test)]
            write_hook: None,
        }
    }

    /// Builder-style: without a folder, keeps the records in memory for [`adopt`](Self::adopt)
    /// (the planner's log; a run without history keeps none).
    #[must_use]
    pub fn buffering(mut self) -> Self {
        self.buffer = true;
        self
    }

    /// The records of a log that had no folder (see [`CallLog::new`] with `None`), in call
    /// order, each in its final state.
    pub fn take_pending(&self) -> Vec<CallRecord> {
        let mut recs =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        // A record is kept twice (before and after the call): the last state of each wins.
        recs.reverse();
        let mut seen = std::collections::BTreeSet::new();
        recs.retain(|r| seen.insert(r.call));
        recs.reverse();
        recs
    }

    /// Takes over the calls of another log that had no folder (the planner's, made before
    /// the run folder existed): their records are written into this log's folder, numbering
    /// goes on after them, and their usage (and a budget they exceeded) counts here.
    ///
    /// The records are written like a call's own (`write_off_runtime`):
    /// durably, on a thread of tokio's blocking pool rather than the runtime's thread awaiting
    /// this, and on disk when it returns. Await it before the run's first step, so that they
    /// are on disk before any step's success is recorded.
    pub async fn adopt(&self, other: &CallLog) {
        let records = other.take_pending();
        for r in &records {
            self.write_off_runtime(r).await;
        }
        let last = records.iter().map(|r| r.call).max().unwrap_or(0);
        self.next.fetch_max(last + 1, Ordering::Relaxed);
        let theirs = other.state();
        let mut st = self.state();
        let u = &theirs.usage;
        st.usage.calls += u.calls;
        st.usage.input_tokens += u.input_tokens;
        st.usage.output_tokens += u.output_tokens;
        st.usage.unpriced_calls += u.unpriced_calls;
        if let Some(c) = u.cost_usd {
            st.usage.cost_usd = Some(st.usage.cost_usd.unwrap_or(0.0) + c);
        }
        st.live_calls += theirs.live_calls;
        if st.exceeded.is_none() {
            st.exceeded.clone_from(&theirs.exceeded);
        }
    }

    /// Builder-style: answers from recorded calls (replay, resume).
    #[must_use]
    pub fn with_recorded(mut self, recorded: Recorded) -> Self {
        self.recorded = Some(recorded);
        self
    }

    /// Builder-style: numbers calls from `first` at least (a resumed run goes on after the
    /// records of its earlier attempts).
    #[must_use]
    pub fn numbered_from(self, first: u64) -> Self {
        self.next.fetch_max(first.max(1), Ordering::Relaxed);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What every call used so far.
    pub fn usage(&self) -> ModelUsage {
        self.state().usage.clone()
    }

    /// Why the budget stopped the run, if it did.
    pub fn exceeded(&self) -> Option<String> {
        self.state().exceeded.clone()
    }

    /// The divergences replay found.
    pub fn divergences(&self) -> Vec<Divergence> {
        self.state().divergences.clone()
    }

    /// Calls answered by the model itself.
    pub fn live_calls(&self) -> u64 {
        self.state().live_calls
    }

    /// The client for one step attempt (`step` `None`: the planner).
    pub fn client(
        self: &Arc<Self>,
        inner: Arc<dyn LlmClient>,
        step: Option<&str>,
        attempt: u32,
    ) -> Arc<dyn LlmClient> {
        Arc::new(RecordingLlm {
            inner,
            log: self.clone(),
            step: step.map(str::to_owned),
            attempt,
        })
    }

    /// Writes a record, on the calling thread (see [`write_off_runtime`](Self::write_off_runtime)
    /// for a call's records).
    fn write(&self, rec: &CallRecord) {
        let Some(dir) = &self.dir else {
            if !self.buffer {
                return;
            }
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(rec.clone());
            return;
        };
        if let Ok(bytes) = serde_json::to_vec_pretty(rec) {
            write_record(dir, rec.call, &bytes);
        }
    }

    /// Writes a record durably (two syncs: the file and `calls/`) on a thread of tokio's
    /// blocking pool, not on the runtime worker that runs the step, and returns once it is on
    /// disk: so a call's completed record is durable before the call returns, hence before the
    /// step's success is recorded (resume answers from it instead of calling again).
    async fn write_off_runtime(&self, rec: &CallRecord) {
        let (Some(dir), Ok(rt)) = (&self.dir, tokio::runtime::Handle::try_current()) else {
            return self.write(rec);
        };
        let Ok(bytes) = serde_json::to_vec_pretty(rec) else {
            return;
        };
        let dir = dir.clone();
        let call = rec.call;
        #[cfg(test)]
        let hook = self.write_hook.clone();
        let _ = rt
            .spawn_blocking(move || {
                #[cfg(test)]
                if let Some(hook) = hook {
                    hook();
                }
                write_record(&dir, call, &bytes);
            })
            .await;
    }

    /// Adds a call's usage; past a cap, records why, says so on the bus and cancels the run.
    fn account(&self, usage: TokenUsage, cost: Option<f64>) {
        let mut st = self.state();
        st.usage.add(usage, cost);
        if st.exceeded.is_some() {
            return;
        }
        let tokens = st.usage.total_tokens();
        let reason = match (self.budget.max_tokens, self.budget.max_cost_usd) {
            (Some(max), _) if tokens > max => Some(format!(
                "the token budget was exceeded: {tokens} tokens used, --max-tokens {max}"
            )),
            (_, Some(max)) if st.usage.cost_usd.is_some_and(|c| c > max) => Some(format!(
                "the cost budget was exceeded: ${:.4} used, --max-cost {max}",
                st.usage.cost_usd.unwrap_or(0.0)
            )),
            _ => None,
        };
        if let Some(reason) = reason {
            st.exceeded = Some(reason.clone());
            drop(st);
            self.events.emit(
                None,
                EventKind::Custom {
                    name: nuvira_report::BUDGET_EVENT.into(),
                    data: serde_json::json!({ "reason": reason }),
                },
            );
            self.cancel.cancel();
        }
    }
}

/// Writes `calls/<call>.json` (creating `calls/`, never through a symlink) atomically and
/// durably; a failure leaves the record out (the call itself goes on).
fn write_record(dir: &Path, call: u64, bytes: &[u8]) {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    if builder.create(dir).is_err() && !crate::runs::is_real_dir(dir) {
        return;
    }
    let path = dir.join(format!("{call:04}.json"));
    let _ = nuvira_workspace::atomic_write(&path, bytes, Some(0o600));
}

/// A model client that records every call of one step attempt in a [`CallLog`].
struct RecordingLlm {
    inner: Arc<dyn LlmClient>,
    log: Arc<CallLog>,
    step: Option<String>,
    attempt: u32,
}

#[async_trait]
impl LlmClient for RecordingLlm {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn models(&self) -> Vec<String> {
        self.inner.models()
    }

    fn open_circuits(&self) -> Vec<String> {
        self.inner.open_circuits()
    }

    async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let log = &self.log;
        if let Some(why) = log.exceeded() {
            return Err(LlmError::Refused(format!("no more model calls: {why}")));
        }
        if let Some(r) = &log.recorded
            && r.strict
            && !r.continue_on_divergence
            && let Some(d) = log.state().divergences.first()
        {
            return Err(LlmError::Refused(format!(
                "the replay stopped at its divergence: {d}"
            )));
        }
        let call = log.next.fetch_add(1, Ordering::Relaxed);
        let ordinal = {
            let mut st = log.state();
            let n = st
                .ordinals
                .entry((self.step.clone(), self.attempt))
                .or_insert(0);
            *n += 1;
            *n
        };
        let hashes = hash_request(request);
        let model = request
            .model
            .clone()
            .unwrap_or_else(|| self.inner.model().to_owned());
        let mut rec = CallRecord {
            call,
            step: self.step.clone(),
            attempt: self.attempt,
            ordinal,
            provider_model: model.clone(),
            sent_ms: nuvira_api::now_ms(),
            hashes: hashes.clone(),
            request: redact_request(request),
            ..CallRecord::default()
        };
        log.write_off_runtime(&rec).await;
        log.events.emit(
            self.step.as_deref(),
            EventKind::LlmRequest {
                call,
                attempt: self.attempt,
                model: model.clone(),
                hashes: Box::new(hashes.clone()),
            },
        );
        let started = Instant::now();
        let key = (self.step.clone(), self.attempt, ordinal);
        let from_record = match &log.recorded {
            Some(recorded) => match recorded.calls.get(&key) {
                Some(old) => match differences(&old.hashes, &hashes) {
                    None => old.response.clone(),
                    Some(diff) if recorded.strict => {
                        let d = Divergence {
                            step: self.step.clone(),
                            attempt: self.attempt,
                            ordinal,
                            differences: diff,
                        };
                        log.state().divergences.push(d.clone());
                        if recorded.continue_on_divergence {
                            old.response.clone()
                        } else {
                            log.cancel.cancel();
                            return Err(LlmError::Refused(format!("replay diverged: {d}")));
                        }
                    }
                    Some(_) => None,
                },
                None if recorded.strict => {
                    let d = Divergence {
                        step: self.step.clone(),
                        attempt: self.attempt,
                        ordinal,
                        differences: vec!["the recorded run made no such call".into()],
                    };
                    log.state().divergences.push(d.clone());
                    log.cancel.cancel();
                    return Err(LlmError::Refused(format!("replay diverged: {d}")));
                }
                None => None,
            },
            None => None,
        };
        rec.from_record = from_record.is_some();
        let (result, retries) = match from_record {
            Some(r) => (Ok(r), 0),
            None => {
                log.state().live_calls += 1;
                complete_counting_retries(&*self.inner, request).await
            }
        };
        let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        rec.latency_ms = Some(latency_ms);
        rec.retries = retries;
        match &result {
            Ok(resp) => {
                let cost = log.config.cost(&resp.model, resp.usage);
                rec.cost_usd = cost;
                let redacted = redact_response(resp);
                rec.replayable = Some(redacted == *resp);
                rec.response = Some(resp.clone());
                if rec.replayable == Some(false) {
                    rec.response = Some(redacted);
                }
                log.write_off_runtime(&rec).await;
                log.events.emit(
                    self.step.as_deref(),
                    EventKind::LlmResponse {
                        call,
                        model: resp.model.clone(),
                        usage: resp.usage,
                        cost_usd: cost,
                        latency_ms,
                        retries,
                        error: None,
                    },
                );
                log.account(resp.usage, cost);
            }
            Err(e) => {
                let msg = nuvira_secrets::redact(&e.to_string());
                rec.error = Some(msg.clone());
                log.write_off_runtime(&rec).await;
                log.events.emit(
                    self.step.as_deref(),
                    EventKind::LlmResponse {
                        call,
                        model: String::new(),
                        usage: TokenUsage::default(),
                        cost_usd: None,
                        latency_ms,
                        retries,
                        error: Some(msg),
                    },
                );
            }
        }
        result
    }
}

/// `inner.complete(request)` and the retries its transport made (see
/// `nuvira_llm::count_retries`; without the `llm` feature there is no transport that retries).
async fn complete_counting_retries(
    inner: &dyn LlmClient,
    request: &LlmRequest,
) -> (Result<LlmResponse, LlmError>, u32) {
    #[cfg(feature = "llm")]
    {
        nuvira_llm::count_retries(inner.complete(request)).await
    }
    #[cfg(not(feature = "llm"))]
    {
        (inner.complete(request).await, 0)
    }
}

fn redact_request(request: &LlmRequest) -> LlmRequest {
    let mut r = request.clone();
    for m in &mut r.messages {
        m.content = nuvira_secrets::redact(&m.content);
    }
    r
}

fn redact_response(resp: &LlmResponse) -> LlmResponse {
    let mut r = resp.clone();
    r.text = nuvira_secrets::redact(&r.text);
    if let Some(j) = &r.json {
        let text = j.to_string();
        let red = nuvira_secrets::redact(&text);
        if red != text {
            r.json = Some(serde_json::Value::String(red));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use nuvira_api::ChatMessage;

    #[test]
    fn a_repositorys_config_can_only_tighten_the_users() {
        let parse = |t: &str| toml::from_str::<Config>(t).unwrap();
        let user = parse(
            "[runs]\nkeep = 50\n[prices.\"a:m\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
        );
        let repo = parse(
            "[runs]\nkeep = 1\nkeep_days = 0\n\
             [prices.\"a:m\"]\ninput_per_mtok = 0.0\noutput_per_mtok = 9.0\n\
             [prices.\"b:n\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n",
        );
        let c = user.tightened_by(&repo);
        let a = c.prices["a:m"];
        assert_eq!((a.input_per_mtok, a.output_per_mtok), (2.0, 9.0));
        assert_eq!(c.prices["b:n"].input_per_mtok, 1.0);
        // keep 1 would delete runs: the user's 50 stands; keep_days 0 (no limit) keeps more.
        assert_eq!((c.runs.keep, c.runs.keep_days), (Some(50), Some(0)));
        // Against the defaults, a larger keep is taken.
        let c = Config::default().tightened_by(&parse("[runs]\nkeep = 500\nkeep_days = 7\n"));
        assert_eq!(
            (c.runs.keep, c.runs.keep_days),
            (Some(500), Some(crate::runs::DEFAULT_KEEP_DAYS))
        );
    }

    #[test]
    fn a_changed_context_file_is_named_and_a_changed_prompt_gives_its_hash() {
        let req = |file: &str, system: &str| {
            LlmRequest::new(vec![
                ChatMessage::system(system),
                ChatMessage::user(format!(
                    "task\n{}",
                    nuvira_api::llm::guard::untrusted("src/lib.rs", file)
                )),
            ])
        };
        let a = hash_request(&req("fn a() {}", "sys"));
        assert_eq!(differences(&a, &a), None);
        let b = hash_request(&req("fn b() {}", "sys"));
        let d = differences(&a, &b).unwrap();
        assert!(
            d.iter()
                .any(|l| l.contains("context file `src/lib.rs` changed")),
            "{d:?}"
        );
        let c = hash_request(&req("fn a() {}", "other sys"));
        let d = differences(&a, &c).unwrap();
        assert!(d.iter().any(|l| l.contains(&a.system)), "{d:?}");
    }

    /// A provider on 127.0.0.1 answering each connection with the next of `replies` (OpenAI's
    /// wire format), one request a connection.
    #[cfg(feature = "llm")]
    async fn loopback_provider(replies: Vec<(u16, &'static str)>) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for (status, body) in replies {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head, then the body its content-length announces.
                loop {
                    let n = sock.read(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                    assert!(n > 0, "the client closed mid-request");
                }
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after-ms: 1\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                sock.write_all(head.as_bytes()).await.unwrap();
                sock.write_all(body.as_bytes()).await.unwrap();
                sock.shutdown().await.unwrap();
            }
        });
        addr
    }

    #[cfg(feature = "llm")]
    #[tokio::test]
    async fn a_call_records_the_retries_its_transport_made() {
        const OK: &str = r#"{"id":"c","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        const DOWN: &str = r#"{"error":{"message":"overloaded","type":"server_error"}}"#;
        let addr = loopback_provider(vec![(503, DOWN), (500, DOWN), (200, OK), (200, OK)]).await;
        let config = nuvira_llm::LlmConfig::new("openai:gpt-4.1")
            .unwrap()
            .with_base_url(format!("http://{addr}/v1"))
            .with_api_key(nuvira_llm::ApiKey::new("sk-test-not-a-key"))
            .with_retry(
                nuvira_llm::RetryPolicy::default()
                    .with_max_attempts(4)
                    .with_delays(
                        std::time::Duration::from_millis(1),
                        std::time::Duration::from_millis(20),
                    ),
            );
        let http: Arc<dyn LlmClient> = Arc::new(nuvira_llm::HttpLlm::new(config).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        let bus = nuvira_engine::EventBus::new("run-retries");
        let log = Arc::new(CallLog::new(
            Some(calls.clone()),
            Arc::new(bus.clone()),
            Config::default(),
            Budget::default(),
            CancellationToken::new(),
        ));
        let client = log.client(http, Some("one"), 1);
        let ask = LlmRequest::new(vec![ChatMessage::user("hi")]);
        assert_eq!(client.complete(&ask).await.unwrap().text, "done");
        assert_eq!(client.complete(&ask).await.unwrap().text, "done");
        let recs = read_calls(&calls).unwrap();
        let retries: Vec<u32> = recs.iter().map(|r| r.retries).collect();
        assert_eq!(retries, [2, 0], "a 503 and a 500 were retried; then none");
        let in_events: Vec<u32> = bus
            .history()
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::LlmResponse { retries, .. } => Some(*retries),
                _ => None,
            })
            .collect();
        assert_eq!(in_events, [2, 0]);
    }

    /// Answers every request with "done".
    struct Answer;

    #[async_trait]
    impl LlmClient for Answer {
        fn model(&self) -> &str {
            "test:answer"
        }
        async fn complete(&self, _r: &LlmRequest) -> Result<LlmResponse, LlmError> {
            let mut r = LlmResponse::default();
            r.text = "done".into();
            r.model = "test:answer".into();
            Ok(r)
        }
    }

    /// On a runtime of one thread, each record write is held (a token from the test releases
    /// it; the wait gives up after a while only so that a write on the runtime's thread fails
    /// the test instead of hanging it): the test's task still runs while the write is held,
    /// which it can only when the write is not on the runtime's thread; and when the call
    /// returns, its record with the answer is on disk (what resume answers from).
    #[tokio::test(flavor = "current_thread")]
    async fn a_calls_records_are_written_off_the_runtime_and_on_disk_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        let bus = nuvira_engine::EventBus::new("run-off-runtime");
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let mut log = CallLog::new(
            Some(calls.clone()),
            Arc::new(bus.clone()),
            Config::default(),
            Budget::default(),
            CancellationToken::new(),
        );
        log.write_hook = Some(Arc::new(move || {
            let _ = entered_tx.send(());
            let _ = release_rx
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(30));
        }));
        let log = Arc::new(log);
        let client = log.client(Arc::new(Answer), Some("one"), 1);
        let call = tokio::spawn(async move {
            let ask = LlmRequest::new(vec![ChatMessage::user("hi")]);
            client.complete(&ask).await
        });
        // The record before the request, held.
        entered.recv().await.unwrap();
        assert!(
            !call.is_finished(),
            "the call went on while its record was held"
        );
        assert!(read_calls(&calls).unwrap().is_empty());
        release.send(()).unwrap();
        // The record after the answer, held: the call has not returned.
        entered.recv().await.unwrap();
        assert!(
            !call.is_finished(),
            "the call returned before its record was written"
        );
        let before = read_calls(&calls).unwrap();
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].response, None, "only the request is recorded yet");
        release.send(()).unwrap();
        assert_eq!(call.await.unwrap().unwrap().text, "done");
        let after = read_calls(&calls).unwrap();
        assert_eq!(after.len(), 1);
        let answer = after[0].response.as_ref().map(|r| r.text.as_str());
        assert_eq!(
            answer,
            Some("done"),
            "the answer is on disk when the call returns"
        );
        // And resume would answer from it.
        assert_eq!(Recorded::from_dir(&calls).unwrap().len(), 1);
    }

    /// The planner's calls (a log without a folder) adopted by the run's log: their records
    /// are written on the blocking pool, not on the runtime's thread (the write is held, and
    /// this single-threaded runtime's other task still runs), and are on disk when `adopt`
    /// returns.
    #[tokio::test(flavor = "current_thread")]
    async fn adopted_records_are_written_off_the_runtime_and_on_disk_when_adopt_returns() {
        let dir = tempfile::tempdir().unwrap();
        let calls = dir.path().join("calls");
        let bus = nuvira_engine::EventBus::new("run-adopt");
        let planner = Arc::new(
            CallLog::new(
                None,
                Arc::new(bus.clone()),
                Config::default(),
                Budget::default(),
                CancellationToken::new(),
            )
            .buffering(),
        );
        let client = planner.client(Arc::new(Answer), None, 1);
        let ask = LlmRequest::new(vec![ChatMessage::user("plan")]);
        assert_eq!(client.complete(&ask).await.unwrap().text, "done");
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let mut log = CallLog::new(
            Some(calls.clone()),
            Arc::new(bus.clone()),
            Config::default(),
            Budget::default(),
            CancellationToken::new(),
        );
        log.write_hook = Some(Arc::new(move || {
            let _ = entered_tx.send(());
            let _ = release_rx
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(30));
        }));
        let log = Arc::new(log);
        let adopting = {
            let (log, planner) = (log.clone(), planner.clone());
            tokio::spawn(async move { log.adopt(&planner).await })
        };
        entered.recv().await.unwrap();
        assert!(
            !adopting.is_finished(),
            "adopt went on while its write was held"
        );
        assert!(read_calls(&calls).unwrap().is_empty());
        release.send(()).unwrap();
        adopting.await.unwrap();
        let on_disk = read_calls(&calls).unwrap();
        assert_eq!(
            on_disk.len(),
            1,
            "the planner's call is on disk when adopt returns"
        );
        assert_eq!(on_disk[0].step, None);
        assert_eq!(log.usage().calls, 1);
    }

    #[test]
    fn prices_give_a_cost_and_unknown_models_none() {
        let cfg: Config = toml::from_str(
            "[prices.\"openai:gpt-4.1\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
        )
        .unwrap();
        let usage = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
        };
        assert_eq!(cfg.cost("openai:gpt-4.1", usage), Some(6.0));
        assert_eq!(cfg.cost("other:x", usage), None);
    }
}
