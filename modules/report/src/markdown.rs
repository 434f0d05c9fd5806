//! The Markdown report (GitHub-flavoured), used for the job summary and PR comments.
//!
//! Untrusted text is escaped (inline) or fenced with a fence longer than any backtick run in
//! it (blocks), so test output or model text cannot add links, images, HTML or break tables.

use crate::builder::location;
use crate::{ExecutionReport, human_ms, run_label, severity_label, step_label};
use nuvira_api::{FileChange, StepStatus};
use std::fmt::Write as _;

/// At most this many findings are listed in the findings table.
const MAX_ROWS: usize = 100;

/// Renders the report as Markdown.
pub fn render(r: &ExecutionReport) -> String {
    render_blocks(r).concat()
}

/// The report as self-contained Markdown blocks (each closes what it opens), so a caller can
/// drop trailing blocks to fit a size limit.
pub fn render_blocks(r: &ExecutionReport) -> Vec<String> {
    let mut blocks = Vec::new();
    let icon = match r.status {
        Some(nuvira_api::RunStatus::Succeeded) => "✅",
        Some(nuvira_api::RunStatus::Failed) => "❌",
        Some(nuvira_api::RunStatus::Cancelled) => "⏹️",
        None => "⚠️",
    };
    let mut head = format!(
        "## {icon} Nuvira run `{}` {}\n\n",
        code_safe(&r.run_id),
        run_label(r.status)
    );
    if !r.goal.is_empty() {
        let _ = writeln!(head, "**Goal:** {}\n", inline(&r.goal));
    }
    let _ = writeln!(head, "{}\n", inline(&r.summary));
    if r.dry_run {
        head.push_str("_Dry run: file changes are previews; nothing was written._\n\n");
    }
    if let Some(reason) = &r.cancel_reason {
        let _ = writeln!(head, "**Cancelled:** {}\n", inline(reason));
    }
    if let Some(reason) = &r.budget_exceeded {
        let _ = writeln!(head, "**Stopped:** {}\n", inline(reason));
    }
    if let Some(u) = &r.usage {
        let _ = writeln!(head, "**Model:** {}\n", inline(&u.describe()));
        for s in r.steps.iter() {
            if let Some(u) = &s.usage {
                let _ = writeln!(head, "- `{}`: {}", code_safe(&s.id), inline(&u.describe()));
            }
        }
        head.push('\n');
    }
    head.push_str("| step | module | status | time | result |\n|---|---|---|---|---|\n");
    for s in &r.steps {
        let result = crate::step_result(s);
        let _ = writeln!(
            head,
            "| `{}` | {} | {} {} | {} | {} |",
            cell_code(&s.id),
            inline(&s.module),
            if crate::was_cancelled(s) {
                "⏹️"
            } else {
                status_icon(s.status)
            },
            step_label(s),
            s.duration_ms.map(human_ms).unwrap_or_default(),
            inline(result.lines().next().unwrap_or_default())
        );
    }
    head.push('\n');
    blocks.push(head);

    let findings: Vec<_> = r.findings().collect();
    if !findings.is_empty() {
        let mut b = format!(
            "### Findings ({} error(s), {} warning(s))\n\n| severity | where | step | what |\n|---|---|---|---|\n",
            r.counts.errors, r.counts.warnings
        );
        for (s, f) in findings.iter().take(MAX_ROWS) {
            let _ = writeln!(
                b,
                "| {} | `{}` | `{}` | **{}**: {} |",
                severity_label(f.severity),
                cell_code(&location(f)),
                cell_code(&s.id),
                inline(&f.title),
                inline(&f.message)
            );
        }
        if findings.len() > MAX_ROWS {
            let _ = writeln!(b, "\n_…and {} more._", findings.len() - MAX_ROWS);
        }
        b.push('\n');
        blocks.push(b);
    }

    let outputs: Vec<_> = findings
        .iter()
        .filter(|(_, f)| !f.detail.trim().is_empty())
        .collect();
    if !outputs.is_empty() {
        blocks.push("### Output of failures\n\n".into());
        for (s, f) in outputs {
            blocks.push(format!(
                "<details><summary>{} at {} [{}]</summary>\n\n{}\n</details>\n\n",
                html_escape(&f.title),
                html_escape(&location(f)),
                html_escape(&s.id),
                fenced("text", &f.detail)
            ));
        }
    }

    let changes: Vec<_> = r.file_changes().collect();
    if !changes.is_empty() {
        blocks.push(format!(
            "### File changes ({} file(s), +{} −{}{})\n\n",
            r.counts.files_changed,
            r.counts.lines_added,
            r.counts.lines_removed,
            crate::rolled_back_note(r)
        ));
        for (s, c) in changes {
            blocks.push(change_block(&s.id, c, crate::is_rolled_back(s, c)));
        }
    }

    if !r.follow_up.is_empty() {
        let mut b = String::from("### Next steps\n\n");
        for f in &r.follow_up {
            let _ = writeln!(b, "- {}", inline(f));
        }
        b.push('\n');
        blocks.push(b);
    }
    blocks.push(format!(
        "<sub>report `{}` · {} event(s) · {}</sub>\n",
        code_safe(&r.report_id),
        r.events,
        human_ms(r.duration_ms)
    ));
    blocks
}

fn change_block(step: &str, c: &FileChange, rolled_back: bool) -> String {
    format!(
        "<details><summary><code>{}</code> (+{} −{}) [{}]{}</summary>\n\n{}\n</details>\n\n",
        html_escape(&c.path),
        c.additions,
        c.deletions,
        html_escape(step),
        if rolled_back {
            " <b>rolled back</b>"
        } else {
            ""
        },
        fenced("diff", &c.diff)
    )
}

fn status_icon(s: StepStatus) -> &'static str {
    match s {
        StepStatus::Succeeded => "✅",
        StepStatus::Failed => "❌",
        StepStatus::Skipped => "⏭️",
        StepStatus::Running => "⏳",
        StepStatus::Pending => "⏸️",
    }
}

/// Text inside a code span: backticks and line breaks would end it; other control characters
/// are shown as escapes.
fn code_safe(s: &str) -> String {
    let s = s.replace('`', "'").replace(['\n', '\r'], " ");
    nuvira_api::text::escape_control(&s).into_owned()
}

/// A code span inside a table cell: as [`code_safe`], and `|` escaped as `\|` (GFM splits
/// cells at a bare `|` even inside a code span, and renders `\|` there as `|`).
fn cell_code(s: &str) -> String {
    code_safe(s).replace('|', "\\|")
}

/// Escapes untrusted inline text: Markdown punctuation, HTML, table pipes, line breaks.
pub(crate) fn inline(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '|' => o.push_str("\\|"),
            '\n' => o.push_str("<br>"),
            '\r' => {}
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                o.push_str(&nuvira_api::text::escape_control(&c.to_string()));
            }
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '!' | '~' => {
                o.push('\\');
                o.push(ch);
            }
            c => o.push(c),
        }
    }
    o
}

fn html_escape(s: &str) -> String {
    crate::clean::html(s)
}

/// A fenced code block whose fence is longer than any backtick run in the text.
pub(crate) fn fenced(lang: &str, text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    let text = nuvira_api::text::escape_control_keep_lines(text);
    let nl = if text.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{text}{nl}{fence}\n")
}
