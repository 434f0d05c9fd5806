//! Text built from a run's report: the commit message and the pull-request description.

use nuvira_api::report::FindingKind;
use nuvira_api::{ChangeKind, ExecutionReport, RunStatus, StepRecord};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// GitHub's limit on a pull request's body, in characters.
pub const PR_BODY_LIMIT: usize = 65_536;

/// The longest commit subject before it is cut (with `…`).
const SUBJECT_MAX: usize = 72;

/// The files a run left written, repository-relative and sorted: every file change of every
/// step, with the old path of a rename, minus the files a step rolled back. A dry run wrote
/// nothing.
pub fn files_written(report: &ExecutionReport) -> Vec<String> {
    if report.dry_run {
        return Vec::new();
    }
    let mut out = BTreeSet::new();
    for step in &report.steps {
        let rolled: BTreeSet<&str> = step.rolled_back.iter().map(String::as_str).collect();
        for c in &step.file_changes {
            if rolled.contains(c.path.as_str()) {
                continue;
            }
            out.insert(c.path.clone());
            if let ChangeKind::Rename { from } = &c.kind {
                out.insert(from.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// Text for a commit message line: control characters dropped, whitespace runs collapsed.
fn plain(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max - 1).collect();
    s.push('…');
    s
}

fn test_line(report: &ExecutionReport) -> Option<String> {
    let steps: Vec<&StepRecord> = report.steps.iter().filter(|s| s.tests.is_some()).collect();
    if steps.is_empty() {
        return None;
    }
    let c = &report.counts;
    Some(format!(
        "Tests: {} passed, {} failed, {} skipped ({} test step(s))",
        c.tests_passed,
        c.tests_failed,
        c.tests_skipped,
        steps.len()
    ))
}

/// The commit message for a run: the goal's first line as the subject (cut at 72 characters),
/// then the rest of the goal, the run's summary, one line each for steps, tests and every
/// verification, the files, and the trailer `Nuvira-Run: <run id>` (read it with
/// `git log --format='%(trailers:key=Nuvira-Run)'`). Control characters are dropped.
pub fn commit_message(report: &ExecutionReport) -> String {
    let mut lines = report.goal.lines().map(plain).filter(|l| !l.is_empty());
    let first = lines.next();
    let subject = match &first {
        Some(s) => cut(s, SUBJECT_MAX),
        None => format!("Nuvira run {}", plain(&report.run_id)),
    };
    let mut msg = format!("{subject}\n\n");
    let rest: Vec<String> = lines.collect();
    if first
        .as_ref()
        .is_some_and(|f| f.chars().count() > SUBJECT_MAX)
        || !rest.is_empty()
    {
        if let Some(f) = &first {
            msg.push_str(f);
            msg.push('\n');
        }
        for l in rest {
            msg.push_str(&l);
            msg.push('\n');
        }
        msg.push('\n');
    }
    let summary = plain(&report.summary);
    if !summary.is_empty() {
        let _ = writeln!(msg, "{summary}\n");
    }
    let c = &report.counts;
    let _ = writeln!(
        msg,
        "Steps: {} succeeded, {} failed, {} skipped of {}",
        c.succeeded, c.failed, c.skipped, c.steps
    );
    if let Some(t) = test_line(report) {
        let _ = writeln!(msg, "{t}");
    }
    for s in &report.steps {
        if let Some(v) = &s.verification {
            let _ = writeln!(
                msg,
                "Verify ({}): {} (score {:.2}, {} check(s), {} blocker(s))",
                plain(&s.id),
                if v.passed { "passed" } else { "failed" },
                v.score,
                v.checks,
                v.blockers
            );
        }
    }
    let mut files: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in &report.steps {
        for ch in &s.file_changes {
            let e = files.entry(plain(&ch.path)).or_default();
            e.0 += ch.additions;
            e.1 += ch.deletions;
        }
    }
    if !files.is_empty() {
        msg.push_str("\nFiles:\n");
        for (p, (a, d)) in &files {
            let _ = writeln!(msg, "  {p} (+{a} -{d})");
        }
    }
    let _ = write!(msg, "\nNuvira-Run: {}\n", plain(&report.run_id));
    msg
}

/// Untrusted inline text for Markdown: punctuation, HTML and table pipes escaped, line breaks
/// as spaces, control characters escaped, and `@` followed by a zero-width space so a name in
/// a goal or test output mentions nobody.
fn inline(s: &str) -> String {
    let s = nuvira_api::text::escape_control(s);
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '|' => o.push_str("\\|"),
            '@' => o.push_str("@\u{200b}"),
            '\n' | '\r' => o.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '!' | '~' => {
                o.push('\\');
                o.push(ch);
            }
            c => o.push(c),
        }
    }
    o
}

/// A fenced code block whose fence is longer than any backtick run in the text.
fn fenced(lang: &str, text: &str) -> String {
    let text = nuvira_api::text::escape_control_keep_lines(text);
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    let nl = if text.ends_with('\n') { "" } else { "\n" };
    format!("{fence}{lang}\n{text}{nl}{fence}\n")
}

/// Whether step `id` comes after an edit step (depends on one, directly or not).
fn after_edits(report: &ExecutionReport, id: &str) -> bool {
    let by_id: BTreeMap<&str, &StepRecord> =
        report.steps.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut stack: Vec<&str> = vec![id];
    let mut seen = BTreeSet::new();
    while let Some(cur) = stack.pop() {
        let Some(step) = by_id.get(cur) else { continue };
        for dep in &step.depends_on {
            if !seen.insert(dep.as_str()) {
                continue;
            }
            if by_id.get(dep.as_str()).is_some_and(|d| d.module == "edit") {
                return true;
            }
            stack.push(dep);
        }
    }
    false
}

/// Text kept within a character budget: what does not fit is counted, not cut mid-way.
struct Budget {
    out: String,
    used: usize,
    limit: usize,
    left_out: usize,
}

impl Budget {
    /// Appends `piece` if it fits; returns whether it did.
    fn push(&mut self, piece: &str) -> bool {
        let n = piece.chars().count();
        if self.used + n > self.limit {
            self.left_out += 1;
            return false;
        }
        self.out.push_str(piece);
        self.used += n;
        true
    }
}

/// The Markdown description of a pull request for a run: the goal, what changed per file (a
/// table, then each diff folded in `<details>`), the tests before and after the edits, the
/// verification and its findings, the follow-ups, and the run id. At most `limit` characters
/// ([`PR_BODY_LIMIT`] for GitHub): diffs go first when it is too long, then the rows that do not
/// fit, and a closing line says what was left out. Untrusted text (goal, paths, messages) is
/// escaped.
pub fn pr_body(report: &ExecutionReport, limit: usize) -> String {
    // Room for the closing lines, which always fit.
    const RESERVE: usize = 400;
    let mut b = Budget {
        out: String::new(),
        used: 0,
        limit: limit.saturating_sub(RESERVE),
        left_out: 0,
    };
    let goal_first = report
        .goal
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    b.push(&format!("## {}\n\n", inline(goal_first.trim())));
    let goal_rest: Vec<&str> = report
        .goal
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .skip(1)
        .collect();
    if goal_rest.iter().any(|l| !l.trim().is_empty()) {
        for l in goal_rest {
            b.push(&format!("> {}\n", inline(l)));
        }
        b.push("\n");
    }
    let status = match report.status {
        Some(RunStatus::Succeeded) => "succeeded",
        Some(RunStatus::Failed) => "failed",
        Some(RunStatus::Cancelled) => "cancelled",
        None => "unfinished",
    };
    let c = &report.counts;
    b.push(&format!(
        "Nuvira run **{status}**: {} step(s) ({} succeeded, {} failed, {} skipped); {} file(s) changed (+{} −{}).\n\n",
        c.steps, c.succeeded, c.failed, c.skipped, c.files_changed, c.lines_added, c.lines_removed
    ));

    // What changed.
    let changes: Vec<_> = report.file_changes().collect();
    b.push("### What changed\n\n");
    if changes.is_empty() {
        b.push("No files changed.\n\n");
    } else {
        b.push("| File | Change | Added | Removed | Step |\n|---|---|---:|---:|---|\n");
        for (step, ch) in &changes {
            let kind = match &ch.kind {
                ChangeKind::Create => "created".to_owned(),
                ChangeKind::Modify => "modified".to_owned(),
                ChangeKind::Delete => "deleted".to_owned(),
                ChangeKind::Rename { from } => format!("renamed from `{}`", code(from)),
            };
            let rolled = if step.rolled_back.contains(&ch.path) {
                " (rolled back)"
            } else {
                ""
            };
            b.push(&format!(
                "| `{}` | {kind}{rolled} | {} | {} | `{}` |\n",
                code(&ch.path),
                ch.additions,
                ch.deletions,
                code(&step.id)
            ));
        }
        b.push("\n");
    }

    // Tests.
    let tests: Vec<&StepRecord> = report.steps.iter().filter(|s| s.tests.is_some()).collect();
    b.push("### Tests\n\n");
    if tests.is_empty() {
        b.push("No tests were run.\n\n");
    } else {
        b.push(
            "| Step | When | Passed | Failed | Skipped | Result |\n|---|---|---:|---:|---:|---|\n",
        );
        for s in &tests {
            let Some(t) = &s.tests else { continue };
            let when = if after_edits(report, &s.id) {
                "after the edits"
            } else {
                "before the edits"
            };
            let result = if t.timed_out {
                "timed out"
            } else if t.success {
                "passed"
            } else {
                "failed"
            };
            b.push(&format!(
                "| `{}` | {when} | {} | {} | {} | {result} |\n",
                code(&s.id),
                t.passed,
                t.failed,
                t.skipped
            ));
        }
        b.push("\n");
    }

    // Verification.
    let verifies: Vec<&StepRecord> = report
        .steps
        .iter()
        .filter(|s| s.verification.is_some())
        .collect();
    let findings: Vec<_> = report.findings().collect();
    if !verifies.is_empty() || !findings.is_empty() {
        b.push("### Verification\n\n");
        for s in &verifies {
            let Some(v) = &s.verification else { continue };
            b.push(&format!(
                "- `{}`: {} (score {:.2}, {} check(s), {} blocker(s))\n",
                code(&s.id),
                if v.passed { "passed" } else { "failed" },
                v.score,
                v.checks,
                v.blockers
            ));
        }
        for (_, f) in &findings {
            let at = match (&f.path, f.line) {
                (Some(p), Some(l)) => format!(" at `{}:{l}`", code(p)),
                (Some(p), None) => format!(" in `{}`", code(p)),
                _ => String::new(),
            };
            let kind = match f.kind {
                FindingKind::Security => "security",
                FindingKind::Syntax => "syntax",
                FindingKind::TestFailure => "test failure",
                FindingKind::Verification => "verification",
                _ => "finding",
            };
            b.push(&format!(
                "- **{}** {kind}{at}: {} — {}\n",
                inline(&format!("{:?}", f.severity).to_lowercase()),
                inline(&f.title),
                inline(&cut(&f.message, 300))
            ));
        }
        b.push("\n");
    }

    // Follow-ups.
    if !report.follow_up.is_empty() {
        b.push("### Follow-ups\n\n");
        for f in &report.follow_up {
            b.push(&format!("- {}\n", inline(f)));
        }
        b.push("\n");
    }

    // The diffs, as much as fits.
    let mut diffs_left_out = 0;
    let with_diff: Vec<_> = changes.iter().filter(|(_, c)| !c.diff.is_empty()).collect();
    if !with_diff.is_empty() && b.push("### Diffs\n\n") {
        for (_, ch) in with_diff {
            let piece = format!(
                "<details><summary><code>{}</code></summary>\n\n{}\n</details>\n\n",
                html(&ch.path),
                fenced("diff", &ch.diff)
            );
            if !b.push(&piece) {
                diffs_left_out += 1;
            }
        }
    }
    let left_out = b.left_out;
    let mut out = b.out;
    if left_out > 0 {
        let _ = write!(
            out,
            "_Shortened to fit GitHub's {limit}-character limit: {left_out} part(s) left out{}; `nuvira report` shows everything._\n\n",
            if diffs_left_out > 0 {
                format!(" ({diffs_left_out} diff(s))")
            } else {
                String::new()
            }
        );
    }
    let _ = write!(out, "---\nNuvira run `{}`\n", code(&report.run_id));
    if out.chars().count() > limit {
        out = out.chars().take(limit).collect();
    }
    out
}

/// Text inside a code span.
fn code(s: &str) -> String {
    nuvira_api::text::escape_control(s)
        .replace('`', "'")
        .replace(['\n', '\r'], " ")
        .replace('|', "\\|")
}

fn html(s: &str) -> String {
    nuvira_api::text::escape_control(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('@', "@\u{200b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_longer_than_72_characters_is_cut_and_the_goal_kept_in_the_body() {
        let mut r = ExecutionReport::default();
        r.goal = "x".repeat(100);
        r.run_id = "run-1".into();
        let m = commit_message(&r);
        let subject = m.lines().next().unwrap_or("");
        assert_eq!(subject.chars().count(), 72);
        assert!(m.contains(&"x".repeat(100)));
        assert!(m.ends_with("\n\nNuvira-Run: run-1\n"), "{m}");
    }

    #[test]
    fn control_characters_never_reach_the_commit_message() {
        let mut r = ExecutionReport::default();
        r.goal = "fix \u{1b}[31mred\u{7} thing".into();
        r.run_id = "run-\n2".into();
        let m = commit_message(&r);
        assert!(!m.contains('\u{1b}') && !m.contains('\u{7}'), "{m:?}");
        assert!(m.contains("Nuvira-Run: run- 2\n"), "{m:?}");
    }

    #[test]
    fn a_mention_in_the_goal_mentions_nobody() {
        let mut r = ExecutionReport::default();
        r.goal = "ping @octocat <script>".into();
        let body = pr_body(&r, PR_BODY_LIMIT);
        assert!(!body.contains("@octocat"), "{body}");
        assert!(!body.contains("<script>"), "{body}");
    }

    #[test]
    fn a_body_over_githubs_limit_drops_diffs_first_keeps_every_file_row_and_says_so() {
        let mut r = ExecutionReport::default();
        r.goal = "Big change".into();
        r.run_id = "run-big".into();
        let mut step = StepRecord::pending("edit", "edit", vec![]);
        for i in 0..40 {
            let diff = format!(
                "@@ -1 +1 @@\n-{}\n+{}\n",
                "a".repeat(1500),
                "b".repeat(1500)
            );
            step.file_changes.push(nuvira_api::FileChange::new(
                format!("src/f{i:02}.rs"),
                ChangeKind::Modify,
                diff,
                1,
                1,
            ));
        }
        r.steps.push(step);
        let body = pr_body(&r, PR_BODY_LIMIT);
        assert!(body.chars().count() <= PR_BODY_LIMIT, "{}", body.len());
        for i in 0..40 {
            assert!(
                body.contains(&format!("| `src/f{i:02}.rs` | modified |")),
                "row {i}"
            );
        }
        assert!(body.contains("<details>"), "the diffs that fit are kept");
        assert!(
            body.contains("Shortened to fit GitHub's 65536-character limit"),
            "{body}"
        );
        assert!(body.contains("diff(s))"), "{body}");
        assert!(body.ends_with("Nuvira run `run-big`\n"));
        // A tiny limit still gives a well-formed body that ends with the run id.
        let small = pr_body(&r, 1000);
        assert!(small.chars().count() <= 1000);
        assert!(small.starts_with("## Big change"));
    }

    #[test]
    fn after_edits_follows_dependencies_transitively() {
        let mut r = ExecutionReport::default();
        r.steps = vec![
            StepRecord::pending("before", "test", vec![]),
            StepRecord::pending("edit", "edit", vec!["before".into()]),
            StepRecord::pending("fmt", "execute", vec!["edit".into()]),
            StepRecord::pending("after", "test", vec!["fmt".into()]),
        ];
        assert!(!after_edits(&r, "before"));
        assert!(after_edits(&r, "after"));
    }
}
