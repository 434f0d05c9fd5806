//! Folding events into an [`ExecutionReport`], and reading stored JSONL event files.

use crate::ReportError;
use nuvira_api::report::{
    ExecutionReport, Finding, FindingKind, ReportCounts, StepRecord, TestTotals,
    VerificationSummary,
};
use nuvira_api::{
    ChangeKind, CheckStatus, EditPreview, Event, EventKind, ExecutionPlan, FileChange, RunStatus,
    Severity, StepOutput, StepStatus, TestFailure, TestResult, VerificationCheck,
    VerificationResult,
};
use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

/// Folds a run's events, one at a time, into an [`ExecutionReport`].
///
/// Feed it every event of a run in order ([`fold`](Self::fold) for borrowed events from a live
/// bus, [`fold_owned`](Self::fold_owned) to move payloads in without copying), then call
/// [`finish`](Self::finish). Events of other runs are not filtered: give it one run's stream.
/// Unknown steps (added at run time) are appended in the order they first appear.
#[derive(Debug, Default, Clone)]
pub struct ReportBuilder {
    report: ExecutionReport,
    index: HashMap<String, usize>,
    start_ts: Option<u64>,
    first_ts: Option<u64>,
    last_ts: u64,
    last_seq: Option<u64>,
    live_failures: HashMap<usize, Vec<TestFailure>>,
    live_checks: HashMap<usize, Vec<VerificationCheck>>,
    /// Steps whose repair budget ran out: (step, attempts, last error).
    budget_exhausted: Vec<(String, u32, String)>,
    /// Paths of `edit:rolled-back` events not scoped to a step (the CLI's rollback of a
    /// cancelled run): matched against every step's changes when the report is finished.
    rolled_back_unscoped: Vec<String>,
    /// Changes announced by `edit:written` events, per step: a step whose output carries no
    /// edit result (a test step whose failure the `debug-tests` repair fixed) still reports the
    /// files it changed.
    written: HashMap<usize, Vec<FileChange>>,
    completed: bool,
    /// The test cases each step's `test:completed` named, for a step whose output carries
    /// none (an output written by an older Nuvira, a step stopped before it returned).
    live_cases: HashMap<usize, Vec<nuvira_api::TestCase>>,
}

/// The `custom` event a run emits when `--max-tokens` or `--max-cost` stops it: its
/// `data.reason` becomes [`ExecutionReport::budget_exceeded`].
pub const BUDGET_EVENT: &str = "run:budget-exceeded";

/// The message the scheduler gives a step it stopped because the run was cancelled (category
/// `unknown` before `cancelled` existed, no evidence and no output).
const CANCELLED_MESSAGE: &str = "cancelled while running";

impl ReportBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder that already knows the plan (for a report built inside a run, from upstream
    /// step outputs rather than events).
    pub fn with_plan(run_id: &str, plan: &ExecutionPlan) -> Self {
        let mut b = Self::new();
        b.report.run_id = run_id.to_owned();
        b.apply_plan(plan);
        b
    }

    /// A builder for a run known by id and goal (a report step inside a run).
    pub fn for_run(run_id: &str, goal: &str, dry_run: bool) -> Self {
        let mut b = Self::new();
        b.report.run_id = run_id.to_owned();
        b.report.goal = goal.to_owned();
        b.report.dry_run = dry_run;
        b
    }

    /// Records the output of a step that succeeded, as a report step does with its upstream
    /// outputs (`ctx.upstream()`).
    pub fn record_output(&mut self, step_id: &str, module: Option<&str>, output: StepOutput) {
        let i = self.step_index(step_id, module);
        let rec = &mut self.report.steps[i];
        rec.status = StepStatus::Succeeded;
        rec.attempts = rec.attempts.max(1);
        absorb_output(rec, output);
    }

    /// Takes the dependencies and descriptions of the steps already in the report from the
    /// plan, keeping only dependencies that are in the report too: a report step inside a run
    /// knows its upstream steps, and this gives them their edges.
    pub fn record_edges(&mut self, plan: &ExecutionPlan) {
        for step in &plan.steps {
            let Some(&i) = self.index.get(&step.id) else {
                continue;
            };
            let deps = step
                .depends_on
                .iter()
                .filter(|d| self.index.contains_key(d.as_str()))
                .cloned()
                .collect();
            let rec = &mut self.report.steps[i];
            rec.depends_on = deps;
            rec.description.clone_from(&step.description);
            if rec.module.is_empty() {
                rec.module.clone_from(&step.module);
            }
        }
    }

    /// Folds one event (payloads that the report keeps are cloned).
    pub fn fold(&mut self, event: &Event) {
        self.stamp(event);
        match &event.kind {
            EventKind::RunStarted { plan, dry_run, .. } => {
                self.report.dry_run = *dry_run;
                self.apply_plan(plan);
            }
            EventKind::StepSucceeded {
                duration_ms,
                output,
            } => {
                if let Some(i) = self.scoped(event) {
                    self.succeeded(i, *duration_ms, output.clone());
                }
            }
            EventKind::StepFailed {
                category,
                message,
                recoverable: _,
                evidence,
                duration_ms,
                output,
            } => {
                if let Some(i) = self.scoped(event) {
                    let duration_ms = self.failed_duration(i, *duration_ms, event.ts);
                    self.failed(
                        i,
                        *category,
                        message.clone(),
                        evidence.clone(),
                        duration_ms,
                        output.clone(),
                    );
                }
            }
            EventKind::TestFailed { failure } => {
                if let Some(i) = self.scoped(event) {
                    self.live_failures
                        .entry(i)
                        .or_default()
                        .push(failure.clone());
                }
            }
            EventKind::VerifyCheck { check } => {
                if let Some(i) = self.scoped(event) {
                    self.live_checks.entry(i).or_default().push(check.clone());
                }
            }
            _ => self.fold_small(event),
        }
    }

    /// Folds one event, moving its payload into the report.
    pub fn fold_owned(&mut self, event: Event) {
        self.stamp(&event);
        let scoped = self.scoped(&event);
        match (event.kind, scoped) {
            (EventKind::RunStarted { plan, dry_run, .. }, _) => {
                self.report.dry_run = dry_run;
                self.apply_plan(&plan);
            }
            (
                EventKind::StepSucceeded {
                    duration_ms,
                    output,
                },
                Some(i),
            ) => self.succeeded(i, duration_ms, output),
            (
                EventKind::StepFailed {
                    category,
                    message,
                    evidence,
                    duration_ms,
                    output,
                    ..
                },
                Some(i),
            ) => {
                let duration_ms = self.failed_duration(i, duration_ms, event.ts);
                self.failed(i, category, message, evidence, duration_ms, output);
            }
            (EventKind::TestFailed { failure }, Some(i)) => {
                self.live_failures.entry(i).or_default().push(failure);
            }
            (EventKind::VerifyCheck { check }, Some(i)) => {
                self.live_checks.entry(i).or_default().push(check);
            }
            (kind, _) => {
                let ev = Event {
                    seq: event.seq,
                    ts: event.ts,
                    run_id: event.run_id,
                    step_id: event.step_id,
                    kind,
                };
                self.fold_small(&ev);
            }
        }
    }

    /// Events whose payloads are small or not kept.
    fn fold_small(&mut self, event: &Event) {
        match &event.kind {
            EventKind::RunCompleted {
                status,
                duration_ms,
                ..
            } => {
                self.report.status = Some(*status);
                self.report.duration_ms = *duration_ms;
                self.completed = true;
            }
            EventKind::RunCancelled { reason } => {
                self.report.status = Some(RunStatus::Cancelled);
                self.report.cancel_reason = Some(reason.clone());
            }
            EventKind::PlanStarted { goal, .. } if self.report.goal.is_empty() => {
                self.report.goal.clone_from(goal);
            }
            EventKind::PlanStepCreated { step, module } => {
                self.step_index(step, Some(module));
            }
            EventKind::StepReady => {
                self.scoped(event);
            }
            EventKind::StepStarted { module, attempt } => {
                let Some(id) = event.step_id.as_deref() else {
                    return;
                };
                let i = self.step_index(id, Some(module));
                let offset = self.offset(event.ts);
                let rec = &mut self.report.steps[i];
                rec.status = StepStatus::Running;
                rec.attempts = rec.attempts.max(*attempt);
                rec.started_ms = Some(offset);
            }
            EventKind::StepSkipped { reason, cause } => {
                if let Some(i) = self.scoped(event) {
                    let rec = &mut self.report.steps[i];
                    rec.status = StepStatus::Skipped;
                    rec.message = Some(reason.clone());
                    rec.skip_cause.clone_from(cause);
                    rec.category = cause
                        .as_ref()
                        .map(|_| nuvira_api::ErrorCategory::DependencyFailed);
                }
            }
            EventKind::EditWritten {
                change: Some(change),
                ..
            } => {
                if let Some(i) = self.scoped(event) {
                    self.written
                        .entry(i)
                        .or_default()
                        .push(FileChange::clone(change));
                }
            }
            // Whenever it arrives (the CLI's rollback of a cancelled run comes after
            // `run:completed`, with no step): the changes of those paths were undone.
            EventKind::EditRolledBack { paths, .. } => match self.scoped(event) {
                Some(i) => {
                    let rec = &mut self.report.steps[i];
                    for p in paths {
                        if !rec.rolled_back.contains(p) {
                            rec.rolled_back.push(p.clone());
                        }
                    }
                }
                None => self.rolled_back_unscoped.extend(paths.iter().cloned()),
            },
            EventKind::TestCompleted { cases, .. } if !cases.is_empty() => {
                if let Some(i) = self.scoped(event) {
                    // The last run of the step's tests stands (a repair reruns them).
                    self.live_cases.insert(i, cases.clone());
                }
            }
            EventKind::RecoverAttempt { attempt, .. } => {
                if let Some(i) = self.scoped(event) {
                    let rec = &mut self.report.steps[i];
                    rec.repair_attempts = rec.repair_attempts.max(*attempt);
                }
            }
            EventKind::LlmResponse {
                usage, cost_usd, ..
            } => {
                self.report
                    .usage
                    .get_or_insert_with(Default::default)
                    .add(*usage, *cost_usd);
                if let Some(i) = self.scoped(event) {
                    self.report.steps[i]
                        .usage
                        .get_or_insert_with(Default::default)
                        .add(*usage, *cost_usd);
                }
            }
            EventKind::Custom { name, data } if name == BUDGET_EVENT => {
                let reason = data
                    .get("reason")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("the run's budget was exceeded");
                self.report.budget_exceeded = Some(reason.to_owned());
            }
            EventKind::RecoverBudgetExhausted {
                attempts,
                final_error,
            } => {
                if let Some(step) = &event.step_id {
                    self.budget_exhausted
                        .push((step.to_string(), *attempts, final_error.clone()));
                }
            }
            _ => {}
        }
    }

    fn stamp(&mut self, event: &Event) {
        if self.report.run_id.is_empty() {
            self.report.run_id = event.run_id.to_string();
        }
        self.first_ts.get_or_insert(event.ts);
        self.last_ts = self.last_ts.max(event.ts);
        self.last_seq = Some(event.seq);
        self.report.events += 1;
        if matches!(event.kind, EventKind::RunStarted { .. }) {
            self.start_ts = Some(event.ts);
            self.report.started_at_ms = Some(event.ts);
        }
    }

    fn offset(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.start_ts.or(self.first_ts).unwrap_or(ts))
    }

    fn scoped(&mut self, event: &Event) -> Option<usize> {
        event.step_id.as_deref().map(|id| self.step_index(id, None))
    }

    fn step_index(&mut self, id: &str, module: Option<&str>) -> usize {
        if let Some(&i) = self.index.get(id) {
            if let Some(m) = module
                && self.report.steps[i].module.is_empty()
            {
                m.clone_into(&mut self.report.steps[i].module);
            }
            return i;
        }
        let i = self.report.steps.len();
        self.report.steps.push(StepRecord::pending(
            id,
            module.unwrap_or_default(),
            Vec::new(),
        ));
        self.index.insert(id.to_owned(), i);
        i
    }

    fn apply_plan(&mut self, plan: &ExecutionPlan) {
        if !plan.goal.is_empty() {
            self.report.goal.clone_from(&plan.goal);
        }
        for step in &plan.steps {
            let i = self.step_index(&step.id, Some(&step.module));
            let rec = &mut self.report.steps[i];
            rec.depends_on.clone_from(&step.depends_on);
            rec.description.clone_from(&step.description);
        }
    }

    fn succeeded(&mut self, i: usize, duration_ms: u64, output: Arc<StepOutput>) {
        let live = self.take_live(i);
        let rec = &mut self.report.steps[i];
        rec.status = StepStatus::Succeeded;
        rec.duration_ms = Some(duration_ms);
        rec.attempts = rec.attempts.max(1);
        absorb_output(rec, Arc::unwrap_or_clone(output));
        absorb_live(rec, live);
    }

    fn failed(
        &mut self,
        i: usize,
        category: nuvira_api::ErrorCategory,
        message: String,
        evidence: Vec<String>,
        duration_ms: u64,
        output: Option<Arc<StepOutput>>,
    ) {
        let live = self.take_live(i);
        let cancelled = is_cancellation(category, &message, &evidence, output.is_some());
        let rec = &mut self.report.steps[i];
        rec.status = StepStatus::Failed;
        rec.duration_ms = Some(duration_ms);
        rec.attempts = rec.attempts.max(1);
        if cancelled {
            // Not a failure of the step: no category (`unknown` would send the reader looking
            // for a bug), a warning rather than an error.
            rec.category = None;
            absorb_live(rec, live);
            rec.findings.push(Finding::new(
                FindingKind::StepFailure,
                Severity::Warning,
                "nuvira/step-failure/cancelled",
                format!("step `{}` was cancelled", rec.id),
                "the run was cancelled while the step ran; it did not finish",
            ));
            rec.message = Some(message);
            return;
        }
        rec.category = Some(category);
        rec.evidence = evidence;
        if let Some(out) = output {
            absorb_output(rec, Arc::unwrap_or_clone(out));
            // A failed edit step wrote nothing ("edit batch rejected ...; nothing was
            // written"): the changes of its output are what it would have done, not changes.
            // Only `edit:written` events (merged in `finish`) list what reached the disk.
            if matches!(
                rec.output,
                Some(StepOutput::Edit(_) | StepOutput::EditPreview(_))
            ) {
                rec.file_changes.clear();
            }
        }
        absorb_live(rec, live);
        if category == nuvira_api::ErrorCategory::EditRejected
            && !rec.findings.iter().any(|f| f.severity == Severity::Error)
        {
            // A rejection without the edit's output (older events): its evidence lines are
            // `path:line: reason`.
            for line in &rec.evidence {
                let located = nuvira_api::CheckFinding::parse(line);
                let mut f = Finding::new(
                    FindingKind::StepFailure,
                    Severity::Error,
                    format!("nuvira/step-failure/{}", category.as_str()),
                    "edit rejected",
                    located.message,
                );
                if let Some(p) = located.file {
                    f = f.at(p, located.line);
                    f.column = located.column;
                }
                rec.findings.push(f);
            }
        }
        if !rec.findings.iter().any(|f| f.severity == Severity::Error) {
            let mut f = Finding::new(
                FindingKind::StepFailure,
                Severity::Error,
                format!("nuvira/step-failure/{}", category.as_str()),
                format!("step `{}` failed ({category})", rec.id),
                message.clone(),
            );
            if !rec.evidence.is_empty() {
                f.detail = rec.evidence.join("\n");
            }
            rec.findings.push(f);
        }
        rec.message = Some(message);
    }

    /// The duration of a failed step. A step stopped by a cancellation is reported with 0 ms
    /// by the scheduler; its real time is from its `step:started` to this event.
    fn failed_duration(&self, i: usize, duration_ms: u64, ts: u64) -> u64 {
        match self.report.steps[i].started_ms {
            Some(started) if duration_ms == 0 => self.offset(ts).saturating_sub(started),
            _ => duration_ms,
        }
    }

    fn take_live(&mut self, i: usize) -> (Vec<TestFailure>, Vec<VerificationCheck>) {
        (
            self.live_failures.remove(&i).unwrap_or_default(),
            self.live_checks.remove(&i).unwrap_or_default(),
        )
    }

    /// The report so far, without consuming the builder (e.g. for a progress display).
    pub fn snapshot(&self) -> ExecutionReport {
        self.clone().finish()
    }

    /// Finishes the report: counts, summary, follow-up suggestions, report id.
    pub fn finish(mut self) -> ExecutionReport {
        // Test failures and checks streamed by steps that never delivered an output (cancelled,
        // still running when the stream ended) are still worth reporting.
        let mut pending: Vec<usize> = self
            .live_failures
            .keys()
            .chain(self.live_checks.keys())
            .copied()
            .collect();
        pending.sort_unstable();
        pending.dedup();
        for i in pending {
            let live = self.take_live(i);
            absorb_live(&mut self.report.steps[i], live);
        }
        let mut r = self.report;
        for (i, cases) in self.live_cases {
            if let Some(t) = r.steps[i].tests.as_mut()
                && t.cases.is_empty()
            {
                t.cases = cases;
            }
        }
        // Files a step wrote that its output does not already list (the output of an edit
        // step is the whole batch; a test step's repairs only show in events).
        let mut written: Vec<(usize, Vec<FileChange>)> = self.written.into_iter().collect();
        written.sort_unstable_by_key(|(i, _)| *i);
        for (i, changes) in written {
            let rec = &mut r.steps[i];
            for c in changes {
                match rec.file_changes.iter_mut().find(|have| have.path == c.path) {
                    // A later write of the same file by the same step (a second repair): the
                    // diff of the last write stands for the file, lines added up.
                    Some(have) if rec.module != "edit" => {
                        have.additions += c.additions;
                        have.deletions += c.deletions;
                        have.diff.push_str(&c.diff);
                    }
                    Some(_) => {}
                    None => rec.file_changes.push(c),
                }
            }
        }
        if !self.rolled_back_unscoped.is_empty() {
            for rec in &mut r.steps {
                let undone: Vec<String> = rec
                    .file_changes
                    .iter()
                    .flat_map(|c| {
                        let from = match &c.kind {
                            ChangeKind::Rename { from } => Some(from.as_str()),
                            _ => None,
                        };
                        std::iter::once(c.path.as_str()).chain(from)
                    })
                    .filter(|p| self.rolled_back_unscoped.iter().any(|u| u == p))
                    .map(str::to_owned)
                    .collect();
                for p in undone {
                    if !rec.rolled_back.contains(&p) {
                        rec.rolled_back.push(p);
                    }
                }
            }
        }
        if !self.completed {
            r.duration_ms = self
                .last_ts
                .saturating_sub(self.start_ts.or(self.first_ts).unwrap_or(self.last_ts));
            if r.status.is_none()
                && r.steps.iter().all(|s| is_terminal(s.status))
                && !r.steps.is_empty()
            {
                // A stream without `run:completed` whose steps all ended still has an outcome.
                r.status = Some(if r.steps.iter().any(|s| s.status == StepStatus::Failed) {
                    RunStatus::Failed
                } else {
                    RunStatus::Succeeded
                });
            }
        }
        // Every finding of the secret scanner is masked in everything the report holds, before
        // any text is derived from it: no format can then repeat a credential.
        crate::clean::mask_report(&mut r);
        r.counts = count(&r.steps);
        r.follow_up = follow_up(&r);
        for (step, attempts, error) in &self.budget_exhausted {
            r.follow_up.insert(
                0,
                format!(
                    "step `{step}`: the repair budget was exhausted after {attempts} attempt(s); last error: {}",
                    nuvira_secrets::mask(error.lines().next().unwrap_or_default())
                ),
            );
        }
        r.summary = summary(&r);
        r.report_id = format!(
            "{}-{}",
            if r.run_id.is_empty() {
                "report"
            } else {
                &r.run_id
            },
            &crate::stable_hash(&[
                &r.run_id,
                &self.last_seq.map(|s| s.to_string()).unwrap_or_default(),
                &r.events.to_string(),
                &self.last_ts.to_string(),
            ])[..8]
        );
        r
    }
}

/// Whether a `step:failed` is the scheduler stopping the step because the run was cancelled:
/// category `cancelled`, or (in event files of earlier versions) category `unknown` with the
/// scheduler's message and nothing else.
fn is_cancellation(
    category: nuvira_api::ErrorCategory,
    message: &str,
    evidence: &[String],
    has_output: bool,
) -> bool {
    category == nuvira_api::ErrorCategory::Cancelled
        || (category == nuvira_api::ErrorCategory::Unknown
            && message == CANCELLED_MESSAGE
            && evidence.is_empty()
            && !has_output)
}

fn is_terminal(s: StepStatus) -> bool {
    matches!(
        s,
        StepStatus::Succeeded | StepStatus::Failed | StepStatus::Skipped
    )
}

/// Distils a step output into the record's typed fields, and keeps the output.
///
/// The parts that become typed fields are moved, not copied: an edit's file changes go to
/// `file_changes`, its syntax issues and security warnings and a test run's failures become
/// `findings`, and the kept output no longer holds them. Nothing is held twice.
fn absorb_output(rec: &mut StepRecord, mut output: StepOutput) {
    match &mut output {
        StepOutput::Edit(r) => absorb_edit(rec, &mut r.preview),
        StepOutput::EditPreview(p) => absorb_edit(rec, p),
        StepOutput::Test(t) => absorb_tests(rec, t),
        StepOutput::Verification(v) => absorb_verification(rec, v),
        StepOutput::Report(r) => {
            // A report step's output is a whole report of the upstream steps: keep its id, not
            // a second copy of everything this report already holds.
            output = StepOutput::Value(serde_json::json!({ "report_id": r.report_id }));
        }
        StepOutput::Repair(r) => {
            rec.repair_attempts = rec
                .repair_attempts
                .max(u32::try_from(r.attempts.len()).unwrap_or(u32::MAX));
        }
        _ => {}
    }
    rec.output = Some(output);
}

fn absorb_live(
    rec: &mut StepRecord,
    (failures, checks): (Vec<TestFailure>, Vec<VerificationCheck>),
) {
    if rec.tests.is_none() && !failures.is_empty() {
        rec.findings.extend(failures.into_iter().map(test_finding));
    }
    if rec.verification.is_none() && !checks.is_empty() {
        for c in &checks {
            check_findings(rec, c);
        }
    }
}

fn absorb_edit(rec: &mut StepRecord, p: &mut EditPreview) {
    rec.file_changes = std::mem::take(&mut p.changes);
    // Entries that did not apply: each reason with its file and line, not only a count.
    for e in std::mem::take(&mut p.errors) {
        let mut message = e.message;
        if let Some(c) = &e.candidate {
            message.push_str(&format!("; closest match: {c}"));
        }
        let mut f = Finding::new(
            FindingKind::StepFailure,
            Severity::Error,
            format!(
                "nuvira/step-failure/{}",
                nuvira_api::ErrorCategory::EditRejected.as_str()
            ),
            "edit rejected",
            message,
        );
        if let Some(path) = e.path {
            f = f.at(path, e.line);
        }
        rec.findings.push(f);
    }
    for d in std::mem::take(&mut p.validation.ast_issues) {
        let f = Finding::new(
            FindingKind::Syntax,
            Severity::Error,
            format!("nuvira/syntax/{}", d.node_kind.to_ascii_lowercase()),
            format!("syntax error in {}", d.path),
            d.message,
        )
        .at(d.path, Some(d.line))
        .span(d.column, d.end_line, d.end_column);
        rec.findings.push(f);
    }
    for w in std::mem::take(&mut p.validation.security_warnings) {
        rec.findings.push(
            Finding::new(
                FindingKind::Security,
                w.severity,
                format!("nuvira/security/{}", w.rule),
                format!("security: {}", w.rule),
                w.message,
            )
            .at(w.path, Some(w.line)),
        );
    }
}

fn absorb_tests(rec: &mut StepRecord, t: &mut TestResult) {
    let sandbox = t.sandbox.as_ref();
    let mut totals = TestTotals::default();
    totals.success = t.success;
    totals.passed = t.passed;
    totals.failed = t.failed;
    totals.skipped = t.skipped;
    totals.total = t.total;
    totals.duration_ms = t.duration_ms;
    totals.framework.clone_from(&t.framework);
    totals.command.clone_from(&t.command);
    totals.timed_out = sandbox.is_some_and(|s| s.timed_out);
    totals.oom_killed = sandbox.is_some_and(|s| s.oom_killed);
    totals.cases = std::mem::take(&mut t.cases);
    rec.tests = Some(totals);
    rec.findings.extend(
        std::mem::take(&mut t.failures)
            .into_iter()
            .map(test_finding),
    );
}

fn test_finding(t: TestFailure) -> Finding {
    let mut f = Finding::new(
        FindingKind::TestFailure,
        Severity::Error,
        "nuvira/test-failure",
        format!("test failed: {}", t.name),
        if t.message.trim().is_empty() {
            format!("test `{}` failed", t.name)
        } else {
            t.message
        },
    );
    if let Some(file) = t.file {
        f = f.at(file, t.line);
    }
    f.detail = t.output;
    f
}

fn absorb_verification(rec: &mut StepRecord, v: &VerificationResult) {
    let mut summary = VerificationSummary::default();
    summary.passed = v.passed;
    summary.score = v.overall_score;
    summary.checks = v.checks.len();
    summary.blockers = v.blockers.len();
    rec.verification = Some(summary);
    for c in &v.checks {
        check_findings(rec, c);
    }
}

fn check_findings(rec: &mut StepRecord, c: &VerificationCheck) {
    let severity = match (c.status, c.blocking) {
        (CheckStatus::Failed, true) => Severity::Error,
        (CheckStatus::Failed, false) | (CheckStatus::Warning, _) => Severity::Warning,
        (CheckStatus::NotRun, true) => Severity::Warning,
        (CheckStatus::Passed, _) | (CheckStatus::NotRun, false) => return,
    };
    let rule = format!("nuvira/verification/{}", c.name);
    let title = if severity == Severity::Error {
        format!("verification blocker: {}", c.name)
    } else {
        format!("verification: {}", c.name)
    };
    if c.findings.is_empty() {
        rec.findings.push(Finding::new(
            FindingKind::Verification,
            severity,
            rule,
            title,
            c.details.clone(),
        ));
        return;
    }
    for finding in &c.findings {
        // The finding's own severity (a secret scanner's `error`) goes in front of the message;
        // the report's severity is the check's, which decides what blocks.
        let message = match finding.severity {
            _ if finding.message.is_empty() => c.details.clone(),
            Some(sev) => format!("{}: {}", sev.as_str(), finding.message),
            None => finding.message.clone(),
        };
        let mut f = Finding::new(
            FindingKind::Verification,
            severity,
            rule.clone(),
            title.clone(),
            message,
        );
        if let Some(p) = &finding.file {
            f = f.at(p.clone(), finding.line);
            f.column = finding.column;
        }
        rec.findings.push(f);
    }
}

fn count(steps: &[StepRecord]) -> ReportCounts {
    let mut c = ReportCounts::default();
    c.steps = steps.len();
    let mut files = BTreeSet::new();
    for s in steps {
        match s.status {
            StepStatus::Succeeded => c.succeeded += 1,
            StepStatus::Failed => c.failed += 1,
            StepStatus::Skipped => c.skipped += 1,
            StepStatus::Pending | StepStatus::Running => c.unfinished += 1,
        }
        for ch in s
            .file_changes
            .iter()
            .filter(|c| !crate::is_rolled_back(s, c))
        {
            files.insert(ch.path.as_str());
            c.lines_added += ch.additions;
            c.lines_removed += ch.deletions;
        }
        if let Some(t) = &s.tests {
            c.tests_passed += u64::from(t.passed);
            c.tests_failed += u64::from(t.failed);
            c.tests_skipped += u64::from(t.skipped);
        } else {
            c.tests_failed += s
                .findings
                .iter()
                .filter(|f| f.kind == FindingKind::TestFailure)
                .count() as u64;
        }
        for f in &s.findings {
            match f.severity {
                Severity::Error => c.errors += 1,
                Severity::Warning => c.warnings += 1,
                Severity::Info => c.notices += 1,
            }
        }
    }
    c.files_changed = files.len();
    c
}

fn summary(r: &ExecutionReport) -> String {
    let c = &r.counts;
    let mut s = format!(
        "run {} {}: {} of {} step(s) succeeded",
        if r.run_id.is_empty() { "?" } else { &r.run_id },
        crate::run_label(r.status),
        c.succeeded,
        c.steps
    );
    if c.failed > 0 {
        s.push_str(&format!(", {} failed", c.failed));
    }
    if c.skipped > 0 {
        s.push_str(&format!(", {} skipped", c.skipped));
    }
    if c.unfinished > 0 {
        s.push_str(&format!(", {} unfinished", c.unfinished));
    }
    if c.tests_passed + c.tests_failed > 0 {
        s.push_str(&format!(
            "; tests {} passed, {} failed",
            c.tests_passed, c.tests_failed
        ));
    }
    if c.files_changed > 0 {
        s.push_str(&format!(
            "; {} file(s) {} (+{} -{})",
            c.files_changed,
            if r.dry_run { "would change" } else { "changed" },
            c.lines_added,
            c.lines_removed
        ));
    }
    let undone = rolled_back_files(r);
    if undone > 0 {
        s.push_str(&format!(
            "; {undone} file(s) changed, then rolled back (nothing of it is left)"
        ));
    }
    s
}

/// Distinct files whose changes were rolled back.
pub(crate) fn rolled_back_files(r: &ExecutionReport) -> usize {
    r.file_changes()
        .filter(|(s, c)| crate::is_rolled_back(s, c))
        .map(|(_, c)| c.path.as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

fn follow_up(r: &ExecutionReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if r.status == Some(RunStatus::Cancelled) {
        out.push(format!(
            "the run was cancelled{}: run it again to finish the remaining steps",
            r.cancel_reason
                .as_deref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default()
        ));
    } else if r.status.is_none() && !r.steps.is_empty() {
        out.push(
            "the event stream ended before `run:completed`: the run may have crashed or still be running"
                .into(),
        );
    }
    for s in &r.steps {
        let by = |k: FindingKind| s.findings.iter().filter(move |f| f.kind == k);
        let sec: Vec<_> = by(FindingKind::Security)
            .filter(|f| f.severity >= Severity::Warning)
            .collect();
        if let Some(first) = sec.first() {
            out.push(format!(
                "step `{}`: review {} security warning(s) before merging (first: {} at {})",
                s.id,
                sec.len(),
                first.rule_id,
                location(first)
            ));
        }
        let syn: Vec<_> = by(FindingKind::Syntax).collect();
        if let Some(first) = syn.first() {
            out.push(format!(
                "step `{}`: fix {} syntax error(s) (first at {})",
                s.id,
                syn.len(),
                location(first)
            ));
        }
        let tests: Vec<_> = by(FindingKind::TestFailure).collect();
        if let Some(first) = tests.first() {
            out.push(format!(
                "step `{}`: fix {} failing test(s) (first: {} at {})",
                s.id,
                tests.len(),
                first.title.trim_start_matches("test failed: "),
                location(first)
            ));
        }
        if let Some(t) = &s.tests {
            if t.timed_out {
                out.push(format!(
                    "step `{}`: the tests hit the timeout: raise the step's `timeout` or speed them up",
                    s.id
                ));
            }
            if t.oom_killed {
                out.push(format!(
                    "step `{}`: the tests ran out of memory: raise `memory` in the step's config",
                    s.id
                ));
            }
        }
        if s.status == StepStatus::Failed
            && tests.is_empty()
            && syn.is_empty()
            && !crate::was_cancelled(s)
        {
            if let Some(m) = &s.message {
                out.push(format!("step `{}` failed: {m}", s.id));
            }
        }
        if let Some(StepOutput::Verification(v)) = &s.output {
            for sug in &v.suggestions {
                out.push(format!("step `{}`: {sug}", s.id));
            }
        }
    }
    // Steps skipped by a cancellation have no cause; the cancellation line above covers them.
    let skipped = r
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Skipped && s.skip_cause.is_some())
        .count();
    if skipped > 0 {
        out.push(format!(
            "{skipped} step(s) were skipped because a dependency failed: they run once it is fixed"
        ));
    }
    let mut seen = BTreeSet::new();
    out.retain(|s| seen.insert(s.clone()));
    out
}

/// `path:line` or `path` or `no location`.
pub(crate) fn location(f: &Finding) -> String {
    match (&f.path, f.line) {
        (Some(p), Some(l)) => format!("{p}:{l}"),
        (Some(p), None) => p.clone(),
        _ => "no location".into(),
    }
}

/// The longest line of an events file read (16 MiB): an event is at most a few hundred KB.
pub const MAX_EVENT_LINE_BYTES: u64 = 16 * 1024 * 1024;

/// The largest events file read (1 GiB), unless [`MAX_EVENTS_BYTES_ENV`] says otherwise.
pub const DEFAULT_MAX_EVENTS_BYTES: u64 = 1024 * 1024 * 1024;

/// The environment variable that sets the largest events file `read_jsonl_file` reads, in bytes.
pub const MAX_EVENTS_BYTES_ENV: &str = "NUVIRA_MAX_EVENTS_BYTES";

/// Reads JSONL events one line at a time into one reused buffer.
///
/// Blank lines are skipped. Each item is the event of one line, or an error naming the
/// source and the 1-based line number. No line longer than [`MAX_EVENT_LINE_BYTES`] and no
/// more than the total cap ([`DEFAULT_MAX_EVENTS_BYTES`], see [`with_limits`](Self::with_limits))
/// is ever held: an unbounded source such as `/dev/zero` ends in an error, not an abort.
#[derive(Debug)]
pub struct EventReader<R> {
    reader: R,
    path: std::path::PathBuf,
    line: u64,
    buf: Vec<u8>,
    done: bool,
    unknown: Vec<(u64, String)>,
    max_line: u64,
    max_total: u64,
    total: u64,
}

impl<R: BufRead> EventReader<R> {
    /// A reader over JSONL text; `path` names the source in errors.
    pub fn new(reader: R, path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            reader,
            path: path.into(),
            line: 0,
            buf: Vec::new(),
            done: false,
            unknown: Vec::new(),
            max_line: MAX_EVENT_LINE_BYTES,
            max_total: DEFAULT_MAX_EVENTS_BYTES,
            total: 0,
        }
    }

    /// The same reader with other caps: the longest line and the most bytes read in all.
    #[must_use]
    pub fn with_limits(mut self, max_line: u64, max_total: u64) -> Self {
        self.max_line = max_line;
        self.max_total = max_total;
        self
    }

    /// The events skipped so far because their `type` is not one this version knows (from a
    /// newer Nuvira): line number and type.
    pub fn unknown(&self) -> &[(u64, String)] {
        &self.unknown
    }

    /// Reads the next line (with its newline) into `buf`, at most the line cap plus one byte.
    fn read_capped_line(&mut self) -> Result<usize, ReportError> {
        use std::io::Read;
        let limit = self.max_line.saturating_add(1);
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| ReportError::Read {
                path: self.path.clone(),
                source,
            })?;
        self.total = self.total.saturating_add(n as u64);
        if n as u64 > self.max_line && self.buf.last() != Some(&b'\n') {
            return Err(ReportError::LineTooLong {
                path: self.path.clone(),
                line: self.line,
                limit: self.max_line,
            });
        }
        if self.total > self.max_total {
            return Err(ReportError::TooLarge {
                path: self.path.clone(),
                line: self.line,
                limit: self.max_total,
            });
        }
        Ok(n)
    }
}

/// The `type` of a JSON object line when it is a string this version does not know.
fn unknown_type(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Tagged {
        #[serde(rename = "type")]
        kind: String,
    }
    let tagged: Tagged = serde_json::from_str(line).ok()?;
    (!EventKind::is_known_type(&tagged.kind)).then_some(tagged.kind)
}

impl<R: BufRead> Iterator for EventReader<R> {
    type Item = Result<Event, ReportError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            self.line += 1;
            match self.read_capped_line() {
                Ok(0) => self.done = true,
                Ok(_) => {
                    let text = match std::str::from_utf8(&self.buf) {
                        Ok(t) => t,
                        Err(e) => {
                            self.done = true;
                            return Some(Err(ReportError::Read {
                                path: self.path.clone(),
                                source: std::io::Error::new(
                                    std::io::ErrorKind::InvalidData,
                                    format!("line {} is not UTF-8 text: {e}", self.line),
                                ),
                            }));
                        }
                    };
                    if text.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str(text) {
                        Ok(event) => return Some(Ok(event)),
                        // An event of a newer Nuvira: skipped, and noted, rather than fatal.
                        Err(_) if let Some(kind) = unknown_type(text) => {
                            self.unknown.push((self.line, kind));
                        }
                        Err(source) => {
                            self.done = true;
                            return Some(Err(ReportError::Malformed {
                                path: self.path.clone(),
                                line: self.line,
                                source,
                            }));
                        }
                    }
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Builds a report from JSONL events, streaming.
///
/// # Errors
/// [`ReportError::Malformed`] for a line that is not one JSON event (with its number),
/// [`ReportError::Read`] when reading fails.
///
/// A line whose `type` this version does not know (an event of a newer Nuvira) is skipped; its
/// type is listed in [`ExecutionReport::unknown_event_types`].
pub fn read_jsonl(reader: impl BufRead, path: &Path) -> Result<ExecutionReport, ReportError> {
    let mut b = ReportBuilder::new();
    let mut events = EventReader::new(reader, path);
    for ev in events.by_ref() {
        b.fold_owned(ev?);
    }
    Ok(finish_with_unknown(b, &events))
}

/// Builds a report from a stored JSONL event file, streaming.
///
/// # Errors
/// [`ReportError::Read`] when the file cannot be opened or read, [`ReportError::Malformed`]
/// naming the line that is not one JSON event.
pub fn read_jsonl_file(path: &Path) -> Result<ExecutionReport, ReportError> {
    let file = std::fs::File::open(path).map_err(|source| ReportError::Read {
        path: path.to_owned(),
        source,
    })?;
    let max_total = max_events_bytes()?;
    let reader = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut b = ReportBuilder::new();
    let mut events = EventReader::new(reader, path).with_limits(MAX_EVENT_LINE_BYTES, max_total);
    for ev in events.by_ref() {
        b.fold_owned(ev?);
    }
    Ok(finish_with_unknown(b, &events))
}

/// The total cap in force: [`MAX_EVENTS_BYTES_ENV`] when set to a positive number of bytes.
fn max_events_bytes() -> Result<u64, ReportError> {
    match std::env::var(MAX_EVENTS_BYTES_ENV) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ReportError::BadLimit {
                var: MAX_EVENTS_BYTES_ENV,
                value: v,
            }),
        },
        _ => Ok(DEFAULT_MAX_EVENTS_BYTES),
    }
}

fn finish_with_unknown<R: BufRead>(b: ReportBuilder, events: &EventReader<R>) -> ExecutionReport {
    let mut report = b.finish();
    for (_, kind) in events.unknown() {
        if !report.unknown_event_types.contains(kind) {
            report.unknown_event_types.push(kind.clone());
        }
    }
    report
}
