//! Resume and the engine hooks of a recorded run.
//!
//! [`RunHooks`] is what `nuvira run` hands the engine ([`StepHooks`]): every step attempt's
//! model is wrapped by the run's [`CallLog`], and a resumed run
//! reuses, through [`Prior`], the recorded outcome of each step that succeeded before and whose
//! input fingerprint is unchanged: its definition, its dependencies' outputs (as the resumed
//! run has them), and every file it read or wrote still holding what the run last left there.
//! A reused step's module is not called (no model call, no edit applied again); its recorded
//! events are emitted again so the report is the one an uninterrupted run gives.

use crate::hooks::StepHooks;
use crate::runs::calls::CallLog;
use crate::runs::record::{OpRecord, definition_hash, file_hash, read_steps, upstream_hash};
use nuvira_api::{Event, EventKind, LlmClient, PlanStep, StepContext, StepOutput};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The hooks of a recorded run: model calls recorded per step attempt, on resume the
/// recorded outcomes of finished steps, and a step that may change files held until the
/// records before it are durable.
#[derive(Debug, Default)]
pub struct RunHooks {
    /// The run's model-call log.
    pub calls: Option<Arc<CallLog>>,
    /// What an earlier attempt of the run finished (resume).
    pub prior: Option<Prior>,
    /// The run folder's writer: a step whose write set is not read-only waits, before its
    /// first change, until the records of every step that ended before are written
    /// ([`Durable::wait_settled`](crate::runs::writer::Durable::wait_settled); see
    /// [`writer`](crate::runs::writer)).
    pub durable: Option<crate::runs::writer::Durable>,
}

impl StepHooks for RunHooks {
    fn before_run(
        &self,
        _step: &PlanStep,
        writes: &nuvira_api::WriteSet,
    ) -> Option<crate::hooks::Wait> {
        if matches!(writes, nuvira_api::WriteSet::ReadOnly) {
            return None;
        }
        let durable = self.durable.as_ref()?;
        Some(Box::pin(durable.wait_settled()))
    }

    fn prior_outcome(&self, step: &PlanStep, ctx: &StepContext) -> Option<StepOutput> {
        self.prior.as_ref()?.outcome(step, ctx)
    }

    fn step_llm(
        &self,
        llm: &Arc<dyn LlmClient>,
        step_id: &str,
        attempt: u32,
    ) -> Option<Arc<dyn LlmClient>> {
        Some(
            self.calls
                .as_ref()?
                .client(llm.clone(), Some(step_id), attempt),
        )
    }
}

/// The finished steps of an earlier attempt of a run.
#[derive(Debug, Default)]
pub struct Prior {
    root: PathBuf,
    steps: HashMap<String, PriorStep>,
    /// Each file's content hash as the run last left it.
    latest: HashMap<String, String>,
    /// Rerun test and execute steps even when their inputs are unchanged.
    pub rerun_tests: bool,
    /// Files the run's edits wrote that an `edit:rolled-back` event restored since (a
    /// cancelled run's rollback, a repair's): nuvira, not the user, changed them.
    rolled_back: std::collections::HashSet<String>,
    /// The finished steps that wrote files changed since, kept as they are now
    /// (`--accept-changes`): pinned to their recorded outcome.
    accepted: std::collections::HashSet<String>,
}

/// A file a finished step of the run wrote that holds something else now (see
/// [`Prior::changed_results`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedResult {
    /// The step that wrote it (the last finished one, when several did).
    pub step: String,
    /// Every finished step that wrote it, in the journal's order (`step` last).
    pub writers: Vec<String>,
    /// The file, workspace-relative.
    pub path: String,
    /// Its content hash as the run left it.
    pub recorded: String,
    /// Its content hash now (`missing` when it is gone).
    pub now: String,
}

#[derive(Debug)]
struct PriorStep {
    output: Arc<StepOutput>,
    events: Vec<EventKind>,
    record: OpRecord,
}

impl Prior {
    /// Reads what the earlier attempt recorded: its events file and its steps file.
    pub fn load(root: &Path, events: &Path, steps: &Path) -> Self {
        let records = read_steps(steps);
        let mut ended: HashMap<String, OpRecord> = HashMap::new();
        let mut latest = HashMap::new();
        for r in records {
            if let Some(fp) = &r.fingerprint
                && r.state != "running"
            {
                for (path, hash) in &fp.files {
                    latest.insert(path.clone(), hash.clone());
                }
            }
            if r.state == "succeeded" {
                ended.insert(r.step.clone(), r);
            } else if r.state != "planned" {
                ended.remove(&r.step);
            }
        }
        let mut live: HashMap<String, Vec<EventKind>> = HashMap::new();
        let mut steps_out = HashMap::new();
        let mut rolled_back = std::collections::HashSet::new();
        for ev in read_events(events) {
            match &ev.kind {
                EventKind::EditWritten { path, .. } => {
                    rolled_back.remove(path);
                }
                EventKind::EditRolledBack { paths, .. } => {
                    rolled_back.extend(paths.iter().cloned());
                }
                _ => {}
            }
            let Some(step) = ev.step_id.as_deref().map(str::to_owned) else {
                continue;
            };
            match ev.kind {
                EventKind::StepStarted { .. } | EventKind::StepRetrying { .. } => {
                    live.entry(step).or_default();
                }
                EventKind::StepReady
                | EventKind::StepFailed { .. }
                | EventKind::StepSkipped { .. } => {
                    live.remove(&step);
                }
                EventKind::StepSucceeded { output, .. } => {
                    let events = live.remove(&step).unwrap_or_default();
                    if let Some(record) = ended.get(&step) {
                        steps_out.insert(
                            step,
                            PriorStep {
                                output,
                                events,
                                record: record.clone(),
                            },
                        );
                    }
                }
                kind => live.entry(step).or_default().push(kind),
            }
        }
        Self {
            root: root.to_owned(),
            steps: steps_out,
            latest,
            rerun_tests: false,
            rolled_back,
            accepted: std::collections::HashSet::new(),
        }
    }

    /// The files that finished steps wrote, whose edits are still in place (`applied`: the
    /// steps the journal has a committed batch of, not rolled back), and that hold something
    /// else now than the run left there: the user (or another tool) edited them since.
    /// Resuming as if nothing happened would run the remaining steps on the edited file
    /// without a word; `nuvira resume` refuses instead, unless `--accept-changes`
    /// ([`accept`](Self::accept)). A file the run itself restored since (an
    /// `edit:rolled-back` event after its last write) is not counted: the step runs again.
    pub fn changed_results(&self, applied: &[String]) -> Vec<ChangedResult> {
        let mut out: Vec<ChangedResult> = Vec::new();
        for step in applied {
            let Some(prior) = self.steps.get(step) else {
                continue;
            };
            let mut paths: Vec<&str> = prior
                .events
                .iter()
                .filter_map(|k| match k {
                    EventKind::EditWritten { path, .. } => Some(path.as_str()),
                    _ => None,
                })
                .collect();
            paths.sort_unstable();
            paths.dedup();
            for path in paths {
                if self.rolled_back.contains(path) {
                    continue;
                }
                let Some(recorded) = self.latest.get(path) else {
                    continue;
                };
                let now = file_hash(&self.root, path);
                if &now == recorded {
                    continue;
                }
                // One entry per file: the last step (in `applied` order) that wrote it.
                let mut writers = Vec::new();
                if let Some(i) = out.iter().position(|c| c.path == path) {
                    writers = out.remove(i).writers;
                }
                writers.push(step.clone());
                out.push(ChangedResult {
                    step: step.clone(),
                    writers,
                    path: path.to_owned(),
                    recorded: recorded.clone(),
                    now,
                });
            }
        }
        out
    }

    /// Keeps the files of `changed` as they are now: the steps that wrote them are pinned to
    /// their recorded outcome (not run again, whatever changed before them: their edits are
    /// never applied a second time); every other step whose fingerprint names such a file (it
    /// read it) sees the change and runs again, and so do the steps after it whose inputs
    /// change with it.
    pub fn accept(&mut self, changed: &[ChangedResult]) {
        for c in changed {
            self.accepted.extend(c.writers.iter().cloned());
        }
    }

    /// The steps whose recorded outcome may be reused (fingerprints are checked when they run).
    pub fn finished(&self) -> Vec<&str> {
        self.steps.keys().map(String::as_str).collect()
    }

    fn outcome(&self, step: &PlanStep, ctx: &StepContext) -> Option<StepOutput> {
        let prior = self.steps.get(&step.id)?;
        let fp = prior.record.fingerprint.as_ref()?;
        if self.rerun_tests && matches!(step.module.as_str(), "test" | "execute") {
            return None;
        }
        if definition_hash(step) != fp.definition {
            return None;
        }
        // A step whose written files the user kept (`--accept-changes`) is pinned: its edit is
        // in the tree, and running it again (because a step before it that read the file ran
        // again, say) would apply it a second time.
        let pinned = self.accepted.contains(&step.id);
        let deps: Vec<Option<Arc<StepOutput>>> =
            step.depends_on.iter().map(|d| ctx.dependency(d)).collect();
        if !pinned && upstream_hash(deps.iter().map(Option::as_deref)) != fp.upstream {
            return None;
        }
        for (path, _) in fp.files.iter().filter(|_| !pinned) {
            let now = file_hash(&self.root, path);
            if self.latest.get(path) != Some(&now) {
                return None;
            }
        }
        // A test or a command may read any file: one that appeared since changes its inputs.
        if matches!(step.module.as_str(), "test" | "execute") {
            let mut now = crate::runs::record::workspace_files(&self.root);
            now.sort();
            let mut then: Vec<&str> = fp.files.iter().map(|(p, _)| p.as_str()).collect();
            then.sort_unstable();
            then.dedup();
            if now.iter().map(String::as_str).ne(then.iter().copied()) {
                return None;
            }
        }
        for kind in &prior.events {
            ctx.emit(kind.clone());
        }
        Some(StepOutput::clone(&prior.output))
    }
}

/// Every event of a JSONL file that parses (a torn last line is left out).
fn read_events(path: &Path) -> Vec<Event> {
    let Ok(bytes) = crate::runs::read_capped(path) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
