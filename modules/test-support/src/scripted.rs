//! A module whose behaviour each step's config scripts, for scheduler tests without sleeps.

use nuvira_api::{
    ErrorCategory, Module, ModuleError, PlanStep, StepContext, StepOutput, WriteSet, async_trait,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Barrier, Notify};

/// What happened, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// The step started.
    Start(String),
    /// The step ended (returned, failed, or its future was dropped).
    End(String),
}

/// A module (named `scripted`) whose behaviour each step's config scripts:
/// `{"do": "ok" | "fail" | "fatal" | "hang" | "until-cancelled" | "panic" | "barrier" | "flaky",
/// "fails": N}`. It records what ran when, how many ran at once, and whether two steps that
/// write the same path (`writes`) ever overlapped; tests wait for it by notification
/// ([`until_started`](Self::until_started)) and synchronise steps by a barrier, never by
/// sleeping.
///
/// - `ok`: succeeds with the step id as its output;
/// - `fail` / `fatal`: a recoverable `test-failure` / a fatal `sandbox-unavailable` failure;
/// - `hang`: never ends (until its future is dropped);
/// - `until-cancelled`: ends with a recoverable failure when the run is cancelled;
/// - `barrier`: waits at [`barrier`](Self::barrier), then succeeds;
/// - `flaky`: fails its first `fails` attempts (default 1), then succeeds with the attempt.
#[derive(Debug, Default)]
pub struct Scripted {
    /// Starts and ends, in order.
    pub log: Mutex<Vec<Mark>>,
    /// Steps running now.
    pub running: AtomicUsize,
    /// The most steps that ran at once.
    pub max_running: AtomicUsize,
    /// Steps started so far.
    pub started: AtomicUsize,
    started_notify: Notify,
    /// Step runs that ended, by returning or by being dropped.
    pub dropped: AtomicUsize,
    /// The barrier `barrier` steps wait at.
    pub barrier: Mutex<Option<Arc<Barrier>>>,
    /// Attempts per step id (of `flaky` steps).
    pub attempts: Mutex<HashMap<String, u32>>,
    writes_running: Mutex<HashMap<String, usize>>,
    /// How often a step started while another step writing one of its paths was running.
    pub write_overlap: AtomicUsize,
}

impl Scripted {
    /// A module whose `barrier` steps wait at a barrier of `n`.
    pub fn with_barrier(n: usize) -> Self {
        let m = Self::default();
        *m.barrier.lock().unwrap() = Some(Arc::new(Barrier::new(n)));
        m
    }

    /// Starts and ends so far, in order.
    pub fn log(&self) -> Vec<Mark> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until `n` steps have started (woken by each start, no polling).
    pub async fn until_started(&self, n: usize) {
        loop {
            let notified = self.started_notify.notified();
            if self.started.load(Ordering::SeqCst) >= n {
                return;
            }
            notified.await;
        }
    }
}

struct RunningGuard<'a> {
    m: &'a Scripted,
    id: String,
    writes: Vec<String>,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.m.running.fetch_sub(1, Ordering::SeqCst);
        self.m.dropped.fetch_add(1, Ordering::SeqCst);
        let mut w = self.m.writes_running.lock().unwrap();
        for p in &self.writes {
            *w.get_mut(p).unwrap() -= 1;
        }
        self.m.log.lock().unwrap().push(Mark::End(self.id.clone()));
    }
}

#[async_trait]
impl Module for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn write_set(&self, step: &PlanStep) -> WriteSet {
        if step.writes.is_empty() {
            WriteSet::ReadOnly
        } else {
            WriteSet::paths(&step.writes)
        }
    }
    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        self.log.lock().unwrap().push(Mark::Start(step.id.clone()));
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        {
            let mut w = self.writes_running.lock().unwrap();
            for p in &step.writes {
                let c = w.entry(p.clone()).or_default();
                *c += 1;
                if *c > 1 {
                    self.write_overlap.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let _guard = RunningGuard {
            m: self,
            id: step.id.clone(),
            writes: step.writes.clone(),
        };
        self.started.fetch_add(1, Ordering::SeqCst);
        self.started_notify.notify_waiters();
        // Let other ready steps start before this one ends, so overlap would show.
        tokio::task::yield_now().await;
        match step.config_str("do").unwrap_or("ok") {
            "ok" => Ok(StepOutput::Value(json!(step.id))),
            "fail" => Err(ModuleError::recoverable(
                ErrorCategory::TestFailure,
                format!("{} failed", step.id),
            )),
            "fatal" => Err(ModuleError::fatal(
                ErrorCategory::SandboxUnavailable,
                "no engine",
            )),
            "hang" => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            // Notices the cancellation itself and returns an error, as a module that kills its
            // child process would.
            "until-cancelled" => {
                ctx.cancel().cancelled().await;
                Err(ModuleError::recoverable(
                    ErrorCategory::Io,
                    format!("{} was stopped", step.id),
                ))
            }
            "panic" => panic!("scripted panic in {}", step.id),
            "barrier" => {
                let b = self.barrier.lock().unwrap().clone().unwrap();
                b.wait().await;
                Ok(StepOutput::Empty)
            }
            "flaky" => {
                let fails = step
                    .config_value("fails")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(1) as u32;
                let mut a = self.attempts.lock().unwrap();
                let n = a.entry(step.id.clone()).or_default();
                *n += 1;
                if *n <= fails {
                    Err(ModuleError::recoverable(
                        ErrorCategory::TestFailure,
                        format!("attempt {n} failed"),
                    ))
                } else {
                    Ok(StepOutput::Value(json!(*n)))
                }
            }
            other => Err(ModuleError::invalid_config(format!("unknown do {other}"))),
        }
    }
}

/// A step of the [`Scripted`] module (`module: scripted`) doing `what` (`{"do": what}`).
pub fn scripted_step(id: &str, deps: &[&str], what: &str) -> PlanStep {
    PlanStep::new(id, "scripted")
        .depends_on(deps.iter().copied())
        .with_config(json!({ "do": what }))
}
