//! The plain-text report, for a terminal. Every text that came from a plan, a repository or a
//! tool (step ids, paths, titles, messages, the goal) is shown with its control characters
//! escaped ([`nuvira_api::text::escape_control`]), so a file name cannot forge lines or
//! recolour the terminal.

use crate::builder::location;
use crate::{ExecutionReport, human_ms, is_rolled_back, run_label, severity_label, step_label};
use nuvira_api::text::escape_control as esc;
use std::fmt::Write as _;

/// Renders the report as plain text.
pub fn render(r: &ExecutionReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Nuvira report {} — run {}",
        r.report_id,
        run_label(r.status)
    );
    if !r.goal.is_empty() {
        let _ = writeln!(o, "goal: {}", esc(&r.goal));
    }
    if r.dry_run {
        o.push_str("dry run: nothing was written\n");
    }
    if let Some(reason) = &r.cancel_reason {
        let _ = writeln!(o, "cancelled: {}", esc(reason));
    }
    if let Some(reason) = &r.budget_exceeded {
        let _ = writeln!(o, "stopped: {}", esc(reason));
    }
    let _ = writeln!(o, "{}", esc(&r.summary));
    if let Some(u) = &r.usage {
        let _ = writeln!(o, "model: {}", u.describe());
    }
    let _ = writeln!(o, "duration: {}\n", human_ms(r.duration_ms));
    let w = r
        .steps
        .iter()
        .map(|s| esc(&s.id).len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        o,
        "  {:<w$}  {:<9}  {:>8}  result",
        "step", "status", "time"
    );
    for s in &r.steps {
        let result = crate::step_result(s);
        let _ = writeln!(
            o,
            "  {:<w$}  {:<9}  {:>8}  {}",
            esc(&s.id),
            step_label(s),
            s.duration_ms.map(human_ms).unwrap_or_default(),
            esc(first_line(&result))
        );
    }
    if r.steps.iter().any(|s| s.usage.is_some()) {
        o.push_str("\nmodel usage by step:\n");
        for s in r.steps.iter().filter(|s| s.usage.is_some()) {
            if let Some(u) = &s.usage {
                let _ = writeln!(o, "  {:<w$}  {}", esc(&s.id), u.describe());
            }
        }
    }
    let findings: Vec<_> = r.findings().collect();
    if !findings.is_empty() {
        let _ = writeln!(
            o,
            "\nfindings ({} error(s), {} warning(s)):",
            r.counts.errors, r.counts.warnings
        );
        for (s, f) in findings {
            let _ = writeln!(
                o,
                "  {:<7} {} [{}] {}: {}",
                severity_label(f.severity),
                esc(&location(f)),
                esc(&s.id),
                esc(&f.title),
                esc(first_line(&f.message))
            );
        }
    }
    let changes: Vec<_> = r.file_changes().collect();
    if !changes.is_empty() {
        let _ = writeln!(
            o,
            "\nfile changes ({} file(s), +{} -{}{}):",
            r.counts.files_changed,
            r.counts.lines_added,
            r.counts.lines_removed,
            crate::rolled_back_note(r)
        );
        for (s, c) in changes {
            let _ = writeln!(
                o,
                "  {:<40} +{:<4} -{:<4} [{}]{}",
                esc(&c.path),
                c.additions,
                c.deletions,
                s.id,
                if is_rolled_back(s, c) {
                    " rolled back"
                } else {
                    ""
                }
            );
        }
    }
    if !r.follow_up.is_empty() {
        o.push_str("\nnext:\n");
        for f in &r.follow_up {
            let _ = writeln!(o, "  - {}", esc(f));
        }
    }
    o
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
