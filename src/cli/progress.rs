//! Progress of a run on stderr: a spinner line per running step on a terminal, plain log
//! lines otherwise (CI logs, pipes).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use nuvira_api::{Event, EventKind, StepOutput};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Follows the events of a run until the bus closes.
pub(crate) async fn follow(
    mut rx: UnboundedReceiver<Arc<Event>>,
    quiet: bool,
    workspace: std::path::PathBuf,
) {
    if quiet {
        while rx.recv().await.is_some() {}
        return;
    }
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let multi = MultiProgress::with_draw_target(if tty {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    // `--color` (NO_COLOR, CLICOLOR_FORCE) decides whether the spinner line has colour.
    let template = if crate::cli::conventions::global().color_stderr {
        "{spinner:.cyan} {prefix:.bold} {wide_msg} {elapsed:>4}"
    } else {
        "{spinner} {prefix} {wide_msg} {elapsed:>4}"
    };
    let style =
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut bars: HashMap<String, ProgressBar> = HashMap::new();
    let mut modules: HashMap<String, String> = HashMap::new();
    let line = |text: String| {
        // Step ids, paths and messages come from the plan, the repository and the tools.
        let text = crate::cli::esc(&text).into_owned();
        if tty {
            let _ = multi.println(text);
        } else {
            eprintln!("[{:>6.1}s] {text}", started.elapsed().as_secs_f64());
        }
    };
    while let Some(ev) = rx.recv().await {
        let step = ev.step_id.as_deref().unwrap_or("").to_owned();
        match &ev.kind {
            EventKind::RunStarted {
                plan,
                max_parallel,
                dry_run,
            } => {
                for s in &plan.steps {
                    modules.insert(s.id.clone(), s.module.clone());
                }
                line(format!(
                    "running {} step(s), up to {max_parallel} at once{}",
                    plan.steps.len(),
                    if *dry_run {
                        " (dry run: nothing will be changed)"
                    } else {
                        ""
                    }
                ));
            }
            EventKind::StepStarted { module, attempt } => {
                let suffix = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                if tty {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(style.clone());
                    bar.set_prefix(step.clone());
                    bar.set_message(crate::cli::esc(&format!("{module}{suffix}")).into_owned());
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bars.insert(step.clone(), bar);
                } else {
                    line(format!("started  {step} ({module}){suffix}"));
                }
            }
            EventKind::StepSucceeded {
                duration_ms,
                output,
            } => {
                let summary = describe(output);
                if let Some(bar) = bars.remove(&step) {
                    bar.finish_and_clear();
                }
                line(format!(
                    "ok       {step} in {}: {summary}",
                    ms(*duration_ms)
                ));
            }
            EventKind::StepFailed {
                message,
                category,
                evidence,
                ..
            } => {
                if let Some(bar) = bars.remove(&step) {
                    bar.finish_and_clear();
                }
                line(format!("FAILED   {step} ({category}): {message}"));
                // A rejected edit's evidence is its reasons, one `path:line: reason` each.
                if *category == nuvira_api::ErrorCategory::EditRejected {
                    for reason in evidence {
                        line(format!("         {step}: {reason}"));
                    }
                }
            }
            EventKind::StepSkipped { reason, .. } => {
                line(format!("skipped  {step}: {reason}"));
            }
            EventKind::StepRetrying {
                attempt, reason, ..
            } => {
                line(format!("retrying {step} (attempt {attempt}): {reason}"));
            }
            EventKind::EditWritten { path, .. } => {
                if let Some(bar) = bars.get(&step) {
                    bar.set_message(format!("wrote {}", crate::cli::esc(path)));
                }
            }
            EventKind::TestStarted {
                framework, sandbox, ..
            } => {
                if let Some(bar) = bars.get(&step) {
                    bar.set_message(format!("{framework} in the {sandbox} sandbox"));
                } else {
                    line(format!(
                        "         {step}: {framework} in the {sandbox} sandbox"
                    ));
                }
            }
            EventKind::ReportGenerated {
                format,
                path: Some(path),
                ..
            } => {
                line(format!(
                    "report   {format}: {}",
                    workspace.join(path).display()
                ));
            }
            EventKind::RunCancelled { reason } => line(format!("cancelled: {reason}")),
            _ => {}
        }
    }
    for (_, bar) in bars {
        bar.finish_and_clear();
    }
}

fn ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

fn describe(output: &StepOutput) -> String {
    output.summary()
}
