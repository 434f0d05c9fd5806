//! The plain-text report, for a terminal.

use crate::builder::location;
use crate::{ExecutionReport, human_ms, is_rolled_back, run_label, severity_label, step_label};
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
        let _ = writeln!(o, "goal: {}", r.goal);
    }
    if r.dry_run {
        o.push_str("dry run: nothing was written\n");
    }
    if let Some(reason) = &r.cancel_reason {
        let _ = writeln!(o, "cancelled: {reason}");
    }
    let _ = writeln!(o, "{}", r.summary);
    let _ = writeln!(o, "duration: {}\n", human_ms(r.duration_ms));
    let w = r.steps.iter().map(|s| s.id.len()).max().unwrap_or(4).max(4);
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
            s.id,
            step_label(s),
            s.duration_ms.map(human_ms).unwrap_or_default(),
            first_line(&result)
        );
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
                location(f),
                s.id,
                f.title,
                first_line(&f.message)
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
                c.path,
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
            let _ = writeln!(o, "  - {f}");
        }
    }
    o
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}
