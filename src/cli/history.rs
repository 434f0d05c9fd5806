//! The run history side of `nuvira run` (and `resume`, `replay`): the run folder
//! `.nuvira/runs/<run-id>/` is written while the run goes on (see `nuvira::runs` and
//! docs/runs.md), the model calls are recorded, budgets are enforced, and at the end the
//! report is stored and old runs are collected by the retention policy.

use super::run::{Args, Fail};
use crate::runs::calls::{Budget, CallLog, Config, Recorded};
use crate::runs::record::RunRecorder;
use crate::runs::resume::{Prior, RunHooks};
use crate::runs::{Retention, RunStore, RunsError, StoredRun};
use nuvira_api::{ExecutionPlan, ExecutionReport, RunStatus};
use nuvira_edit::nuvira_workspace::{Journal, JournalSnapshot, OnChanged, Workspace};
use std::sync::Arc;

/// What a run records.
#[derive(Default)]
pub(crate) struct History {
    recorder: Option<RunRecorder>,
    writer: Option<crate::runs::writer::RunWriter>,
    calls: Option<Arc<CallLog>>,
    prior: Option<Prior>,
    ws: Option<Workspace>,
    retention: Retention,
    replay: Option<super::run::Replay>,
}

/// Whether runs are recorded: not with `--no-history` or `NUVIRA_HISTORY=0`.
fn enabled(args: &Args) -> bool {
    !args.no_history && std::env::var(crate::runs::HISTORY_ENV).map_or(true, |v| v.trim() != "0")
}

/// The model-call log of the planner (`--planner llm`), before the run's bus and folder exist:
/// events go to `held`, records stay in memory until [`start`] adopts them.
pub(crate) fn planner_log(
    config: &Result<Config, RunsError>,
    args: &Args,
    held: Arc<dyn nuvira_api::EventSink>,
    settings: &crate::RunSettings,
) -> Arc<CallLog> {
    let config = config.as_ref().ok().cloned().unwrap_or_default();
    let budget = Budget {
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost,
    };
    Arc::new(CallLog::new(None, held, config, budget, settings.cancel.clone()).buffering())
}

/// The configuration of a command in `repo` ([`Config::load`]), read once: the planner's call
/// log and the run's history both take it (no workspace: the defaults).
pub(crate) fn load_config(repo: &std::path::Path) -> Result<Config, RunsError> {
    match Workspace::open(repo) {
        Ok(ws) => Config::load(&ws),
        Err(_) => Ok(Config::default()),
    }
}

/// What the command read once at its start and [`start`] uses.
pub(crate) struct Loaded<'a> {
    /// [`load_config`].
    pub(crate) config: &'a Result<Config, RunsError>,
    /// The journal after the start's recovery (`None`: it could not be read).
    pub(crate) journal: Option<&'a JournalSnapshot>,
    /// A resumed run's folder lock, taken at the command's start ([`lock_resumed`]; `None`:
    /// [`start`] takes it).
    pub(crate) resume_lock: Option<nuvira_workspace::FolderLock>,
}

/// Starts recording run `run_id` of `plan` on `bus` (a resumed run reopens its folder).
#[expect(clippy::too_many_arguments, reason = "the run's parts, passed once")]
pub(crate) async fn start(
    ws: &Workspace,
    args: &Args,
    run_id: &str,
    plan: &ExecutionPlan,
    resumed: Option<&StoredRun>,
    bus: &crate::EventBus,
    settings: &crate::RunSettings,
    planner: &CallLog,
    loaded: Loaded<'_>,
) -> Result<History, Fail> {
    let config = match loaded.config {
        Ok(c) => c.clone(),
        Err(e) => {
            eprintln!("warning: {e}; using the default settings");
            Config::default()
        }
    };
    let mut retention = Retention::from_config(&config);
    if let Some(n) = args.keep_runs {
        retention.keep_runs = (n > 0).then_some(n);
    }
    if let Some(d) = args.keep_days {
        retention.keep_days = (d > 0).then_some(d);
    }
    let budget = Budget {
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost,
    };
    let mut h = History {
        ws: Some(ws.clone()),
        retention,
        replay: args.replay.clone(),
        ..History::default()
    };
    // A resumed run: its folder's lock first (taken by the command at its start, see
    // [`lock_resumed`]), so that a run still going on in another process is refused before
    // anything of it is undone (and no gc removes the folder while this resume goes on); held
    // from here to the run's end (handed to the recorder).
    let mut held = match (resumed, loaded.resume_lock) {
        (Some(_), Some(lock)) => Some(lock),
        (Some(run), None) => Some(lock_resumed(run)?),
        (None, _) => None,
    };
    // Then what its earlier attempt finished, its unfinished batches undone, and the files its
    // finished steps wrote checked against the tree, all before its folder is reopened (a
    // refusal leaves the run as it was).
    let mut prior = match resumed {
        Some(run) => Some(resume_prior(ws, args, run, loaded.journal)?),
        None => None,
    };
    if enabled(args) || resumed.is_some() || args.replay.is_some() {
        let rec = match resumed {
            Some(run) => match held.take() {
                Some(lock) => RunRecorder::reopen(ws, run, lock),
                None => Err(RunsError::NotFound(run.meta.id.clone())),
            },
            None => RunRecorder::prepare(ws, run_id, plan, args.dry_run),
        };
        match rec {
            Ok(rec) => {
                if let Some(r) = &args.replay {
                    rec.set_replay_of(&r.from.meta.id);
                }
                // One writer for events.jsonl and steps.jsonl, which writes plan.json and
                // run.json first (see `nuvira::runs::writer`).
                match rec.start_writer(bus) {
                    Ok(writer) => h.writer = Some(writer),
                    Err(e) => {
                        eprintln!("warning: {e}; the run's events are not recorded");
                        if let Err(e) = rec.write_pending() {
                            eprintln!("warning: {e}; the run cannot be resumed");
                        }
                    }
                }
                h.recorder = Some(rec);
            }
            Err(e) => eprintln!("warning: {e}; this run is not recorded in the history"),
        }
    }
    let dir = h.recorder.as_ref().map(RunRecorder::calls_dir);
    let mut log = CallLog::new(
        dir,
        Arc::new(bus.clone()),
        config,
        budget,
        settings.cancel.clone(),
    );
    if let Some(run) = resumed {
        h.prior = prior.take();
        match Recorded::from_dir(&run.calls_dir()) {
            Ok(recorded) => {
                let next = recorded.last_call() + 1;
                log = log.with_recorded(recorded).numbered_from(next);
            }
            Err(e) => eprintln!("warning: {e}; model calls are made again"),
        }
    }
    if let Some(r) = &args.replay {
        match Recorded::from_dir(&r.from.calls_dir()) {
            Ok(mut recorded) => {
                recorded.strict = true;
                recorded.continue_on_divergence = r.continue_on_divergence;
                log = log.with_recorded(recorded);
            }
            Err(e) => return Err(Fail::invalid(format!("cannot replay: {e}"))),
        }
    }
    log.adopt(planner).await;
    h.calls = Some(Arc::new(log));
    Ok(h)
}

/// The lock of resumed run `run`'s folder; refused (exit 3) while another process holds it:
/// the run is still going on (or `nuvira runs gc` is removing it), and resuming it would undo
/// its batches under it and run beside it. Taken before the resume touches anything (its
/// in-progress marker, the journal's recovery, the undoing of batches).
pub(crate) fn lock_resumed(run: &StoredRun) -> Result<nuvira_workspace::FolderLock, Fail> {
    let id = super::esc(&run.meta.id);
    match RunRecorder::lock_for_resume(run) {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => {
            let by = if run.meta.pid == 0 {
                "its folder is locked".to_owned()
            } else {
                format!("pid {}, which holds its folder", run.meta.pid)
            };
            Err(Fail::environment(format!(
                "cannot resume run `{id}`: run {id} is still running in another process ({by}); wait for it or stop it, then resume"
            )))
        }
        Err(e) => Err(Fail::environment(format!("cannot resume run `{id}`: {e}"))),
    }
}

/// What the earlier attempt of `run` finished ([`Prior`]), after its unfinished batches were
/// undone; refused (exit 3) when a file a finished step wrote was changed since, unless
/// `--accept-changes` (then that file is kept, and the steps that read it run again).
fn resume_prior(
    ws: &Workspace,
    args: &Args,
    run: &StoredRun,
    snapshot: Option<&JournalSnapshot>,
) -> Result<Prior, Fail> {
    let mut prior = Prior::load(ws.root(), &run.events_path(), &run.steps_path());
    prior.rerun_tests = args.rerun_tests;
    let applied = undo_unfinished_batches(ws, snapshot, &run.meta.id, &prior)?;
    let changed = prior.changed_results(&applied);
    if changed.is_empty() {
        return Ok(prior);
    }
    let list = |c: &crate::runs::resume::ChangedResult| {
        format!(
            "`{}` (written by step `{}`; the run left {}, it holds {} now)",
            super::esc(&c.path),
            super::esc(&c.step),
            short_hash(&c.recorded),
            short_hash(&c.now)
        )
    };
    if args.accept_changes {
        for c in &changed {
            eprintln!(
                "resume: keeping your version of {}: step `{}` is not run again, the steps that read the file are",
                list(c),
                super::esc(&c.step)
            );
        }
        prior.accept(&changed);
        return Ok(prior);
    }
    let files: Vec<String> = changed.iter().map(list).collect();
    let repo = super::apply::rollback_command(ws.root());
    Err(Fail::environment(format!(
        "cannot resume run `{}`: {} file(s) changed since the run's finished steps wrote them: {}. Resuming would run the remaining steps on the changed files without their fingerprints knowing. Keep your version with `nuvira resume {} --accept-changes` (the steps that read those files run again; the steps that wrote them are not, so no edit is applied twice), or undo the run's edits with `{repo} --keep-changed` (or `--force` to discard your changes too) and start a new run",
        super::esc(&run.meta.id),
        changed.len(),
        files.join(", "),
        super::esc(&run.meta.id),
    )))
}

/// `sha256:` and the first 12 hex digits of a content hash (`missing` and the like as they are).
fn short_hash(h: &str) -> String {
    match h.strip_prefix("sha256:") {
        Some(hex) => format!("sha256:{}…", hex.get(..12).unwrap_or(hex)),
        None => h.to_owned(),
    }
}

/// A resumed run's steps that wrote a batch but were not recorded as finished: their batches
/// are undone (the journal knows them) before they run again, so no batch is applied twice.
/// Returns the finished steps whose batches are still applied.
fn undo_unfinished_batches(
    ws: &Workspace,
    snapshot: Option<&JournalSnapshot>,
    run_id: &str,
    prior: &Prior,
) -> Result<Vec<String>, Fail> {
    let journal = Journal::new(ws);
    let finished = prior.finished();
    // From the run start's read of the journal (none: it could not be read).
    let steps = snapshot
        .map(|s| s.committed_steps(run_id))
        .unwrap_or_default();
    // The newest first: a later step's batch may have changed files an earlier one wrote, and
    // undoing it first gives the earlier one back the files it left.
    for step in steps
        .iter()
        .rev()
        .filter(|s| !finished.contains(&s.as_str()))
    {
        match journal.rollback_step_with(run_id, step, OnChanged::Refuse) {
            Ok(done) => {
                let n: usize = done.iter().map(|r| r.paths.len()).sum();
                eprintln!(
                    "resume: undid the {n} file change(s) of step `{}`, which had not finished; it runs again",
                    super::esc(step)
                );
            }
            Err(e) => {
                return Err(Fail::environment(format!(
                    "cannot resume: step `{}` wrote files and did not finish, and they cannot be undone: {e}",
                    super::esc(step)
                )));
            }
        }
    }
    Ok(steps
        .into_iter()
        .filter(|s| finished.contains(&s.as_str()))
        .collect())
}

impl History {
    /// The engine hooks: model calls recorded per step attempt; on resume, prior outcomes.
    pub(crate) fn hooks(&mut self) -> Option<Arc<dyn crate::hooks::StepHooks>> {
        let hooks = RunHooks {
            calls: self.calls.clone(),
            prior: self.prior.take(),
            durable: self
                .writer
                .as_ref()
                .map(crate::runs::writer::RunWriter::durable),
        };
        Some(Arc::new(hooks))
    }

    /// Why the run was stopped early: a budget was exceeded, or a replay diverged.
    pub(crate) fn exceeded(&self) -> Option<String> {
        let calls = self.calls.as_ref()?;
        calls.exceeded().or_else(|| {
            let first = calls.divergences().into_iter().next()?;
            (self
                .replay
                .as_ref()
                .is_some_and(|r| !r.continue_on_divergence))
            .then(|| format!("the replay diverged at {first}"))
        })
    }

    /// After the bus closed: waits for the writers, stores the report and the final
    /// `run.json`, collects old runs. For a replay, compares with the recorded report and says
    /// what diverged. Returns the exit code the history adds (1 for a replay that diverged).
    pub(crate) async fn finish(
        self,
        report: &ExecutionReport,
        status: RunStatus,
        code: u8,
        run_id: &str,
    ) -> u8 {
        if let Some(writer) = self.writer
            && let Err(e) = writer.finish().await
        {
            eprintln!("warning: failed to record the run's events and steps: {e}");
        }
        let exceeded = self.calls.as_ref().and_then(|c| c.exceeded());
        let status = match (exceeded, status) {
            (Some(_), _) => "budget-exceeded",
            (None, RunStatus::Succeeded) => "succeeded",
            (None, RunStatus::Failed) => "failed",
            (None, RunStatus::Cancelled) => "cancelled",
        };
        if let Some(rec) = &self.recorder
            && let Err(e) = rec.finish(report, status, code)
        {
            eprintln!("warning: {e}");
        }
        let mut extra = crate::exit::SUCCESS;
        if let Some(r) = &self.replay {
            extra = super::replay::conclude(r, report, self.calls.as_deref());
        }
        if let Some(ws) = &self.ws
            && self.recorder.is_some()
        {
            match RunStore::of(ws).and_then(|s| s.gc(self.retention, &[run_id], false)) {
                Ok(_) => {}
                Err(e) => eprintln!("warning: failed to collect old runs: {e}"),
            }
        }
        extra
    }
}

/// `NUVIRA_SCRIPTED_LLM_LOG=FILE` (tests): every request the scripted model answers is appended
/// to FILE as one JSON line (`{"pid", "schema", "last_user_sha256"}`), so a test can tell which
/// calls reached the model across processes (a resumed run must not call it again for a
/// finished step).
pub(crate) const SCRIPTED_LOG_ENV: &str = "NUVIRA_SCRIPTED_LLM_LOG";

/// Wraps the scripted model with the call log of [`SCRIPTED_LOG_ENV`], when it is set.
pub(crate) fn log_scripted(
    client: Arc<dyn nuvira_api::LlmClient>,
) -> Arc<dyn nuvira_api::LlmClient> {
    match std::env::var_os(SCRIPTED_LOG_ENV).filter(|v| !v.is_empty()) {
        Some(path) => Arc::new(ScriptedLog {
            inner: client,
            path: path.into(),
        }),
        None => client,
    }
}

struct ScriptedLog {
    inner: Arc<dyn nuvira_api::LlmClient>,
    path: std::path::PathBuf,
}

#[nuvira_api::async_trait]
impl nuvira_api::LlmClient for ScriptedLog {
    fn model(&self) -> &str {
        self.inner.model()
    }
    async fn complete(
        &self,
        request: &nuvira_api::LlmRequest,
    ) -> Result<nuvira_api::LlmResponse, nuvira_api::LlmError> {
        use std::io::Write;
        let last_user = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == nuvira_api::Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or_default();
        let line = serde_json::json!({
            "pid": std::process::id(),
            "schema": request.json_schema.as_ref().map(|(n, _)| n.clone()),
            "last_user_sha256": crate::runs::hash_bytes(last_user.as_bytes()),
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            let _ = writeln!(f, "{line}");
        }
        self.inner.complete(request).await
    }
}
