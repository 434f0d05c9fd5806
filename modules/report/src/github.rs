//! GitHub Actions mode: workflow-command annotations and the job summary.
//!
//! Annotations are `::error file=F,line=L,col=C,endLine=..,endColumn=..,title=T::message`
//! lines (and `::warning`, `::notice`). Values are escaped the way the Actions toolkit
//! (`@actions/core`) does it: in the message (data) `%` becomes `%25` first, then CR `%0D` and
//! LF `%0A`; property values additionally escape `:` as `%3A` and `,` as `%2C`. An escaped value
//! has no line break, so no text can end the command early.
//!
//! GitHub shows at most 10 error and 10 warning annotations per workflow step (and drops the
//! rest silently). `nuvira run` / `nuvira report` are one workflow step, so the whole report
//! emits at most [`MAX_ERRORS`] errors and [`MAX_WARNINGS`] warnings, the most severe first
//! (security, then syntax, then test failures, then verification, then other step failures;
//! located findings before unlocated ones), and one `::notice` with the totals, saying how
//! many were not annotated.
//!
//! Every piece of untrusted text that is printed as-is (the goal, test output, model text,
//! suggestions) sits between `::stop-commands::TOKEN` and `::TOKEN::` with a fresh random token,
//! so a line such as `::add-mask::` or `::set-output` inside test output is not executed.

use crate::{ExecutionReport, Finding, ReportError, markdown};
use nuvira_api::Severity;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// At most this many `::error` annotations are emitted.
pub const MAX_ERRORS: usize = 10;
/// At most this many `::warning` annotations are emitted.
pub const MAX_WARNINGS: usize = 10;
/// GitHub's limit for one step's job summary (`$GITHUB_STEP_SUMMARY`), in bytes.
pub const STEP_SUMMARY_LIMIT: usize = 1024 * 1024;

/// Whether we run inside GitHub Actions (`GITHUB_ACTIONS=true`).
pub fn is_actions() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// Escapes a command's message (data): `%` → `%25`, CR → `%0D`, LF → `%0A`.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a command's property value: as [`escape_data`], plus `:` → `%3A` and `,` → `%2C`.
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Reverses [`escape_data`] (as the Actions runner does).
pub fn unescape_data(s: &str) -> String {
    s.replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%25", "%")
}

/// Reverses [`escape_property`].
pub fn unescape_property(s: &str) -> String {
    s.replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%3A", ":")
        .replace("%2C", ",")
        .replace("%25", "%")
}

/// A parsed workflow command: `::name k=v,k=v::message`, properties and message unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowCommand {
    /// `error`, `warning`, `notice`, `group`, `stop-commands`, ...
    pub name: String,
    /// Properties in order.
    pub properties: Vec<(String, String)>,
    /// The message.
    pub message: String,
}

/// Parses one line as a workflow command the way the Actions runner does, or `None`.
pub fn parse_command(line: &str) -> Option<WorkflowCommand> {
    let rest = line.strip_prefix("::")?;
    let end = rest.find("::")?;
    let (head, message) = (&rest[..end], &rest[end + 2..]);
    let (name, props) = match head.find(' ') {
        Some(i) => (&head[..i], &head[i + 1..]),
        None => (head, ""),
    };
    let properties = props
        .split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.to_owned(), unescape_property(v)))
        })
        .collect();
    Some(WorkflowCommand {
        name: name.to_owned(),
        properties,
        message: unescape_data(message),
    })
}

/// Untrusted text made inert for the Actions runner, which reads workflow commands on stdout
/// *and* stderr: a line whose first non-blank characters are `::` (the runner trims leading
/// whitespace) gets a `\\` in front of them, and every `##[` (a command anywhere in a line, the
/// old syntax) becomes `##\\[`. Nothing else changes; text with neither is borrowed.
///
/// ```
/// use nuvira_report::github::neutralise;
/// assert_eq!(neutralise("ok\n  ::error ::x\nsee ##[warning]y"), "ok\n  \\::error ::x\nsee ##\\[warning]y");
/// assert_eq!(neutralise("a::b"), "a::b");
/// ```
pub fn neutralise(text: &str) -> std::borrow::Cow<'_, str> {
    let risky = |line: &str| line.trim_start().starts_with("::") || line.contains("##[");
    if !text.split(['\n', '\r']).any(risky) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(['\n', '\r']).map_or(rest.len(), |i| i + 1);
        let (line, tail) = rest.split_at(end);
        let body = line.trim_start();
        let lead = &line[..line.len() - body.len()];
        out.push_str(lead);
        if body.starts_with("::") {
            out.push('\\');
        }
        out.push_str(&body.replace("##[", "##\\["));
        rest = tail;
    }
    std::borrow::Cow::Owned(out)
}

/// A rendered report made safe to print where the Actions runner reads commands (standard
/// output under `GITHUB_ACTIONS=true`), in a way that keeps each format what it is:
///
/// - `github`: as it is (its untrusted parts already sit in stop-commands blocks);
/// - `json`, `sarif`: every `##[` written `##\u005b` (the same JSON string); no line of
///   pretty-printed JSON can start with `::`;
/// - `junit`, `html`: `##[` written `##&#91;` and a `::` that starts a line `&#58;:` (the same
///   XML/HTML text);
/// - `text`, `markdown`: the whole text in one stop-commands block with a random token that
///   does not occur in it.
pub fn for_log(text: &str, format: crate::Format) -> std::borrow::Cow<'_, str> {
    use crate::Format as F;
    use std::borrow::Cow;
    match format {
        F::Github => Cow::Borrowed(text),
        F::Json | F::Sarif if text.contains("##[") => Cow::Owned(text.replace("##[", "##\\u005b")),
        F::Json | F::Sarif => Cow::Borrowed(text),
        F::Junit | F::Html => {
            if !text.contains("##[") && !text.lines().any(|l| l.trim_start().starts_with("::")) {
                return Cow::Borrowed(text);
            }
            let mut out = String::with_capacity(text.len() + 16);
            for line in text.split_inclusive('\n') {
                let body = line.trim_start();
                out.push_str(&line[..line.len() - body.len()]);
                let body = body.replace("##[", "##&#91;");
                match body.strip_prefix(':') {
                    Some(rest) if rest.starts_with(':') => {
                        out.push_str("&#58;");
                        out.push_str(rest);
                    }
                    _ => out.push_str(&body),
                }
            }
            Cow::Owned(out)
        }
        _ => {
            let mut token = random_token();
            while text.contains(&token) {
                token = random_token();
            }
            let mut out = String::with_capacity(text.len() + 80);
            stop_commands(&mut out, &token, text);
            Cow::Owned(out)
        }
    }
}

/// A random stop-commands token (32 hex digits).
pub fn random_token() -> String {
    let n: u128 = rand::random();
    format!("{n:032x}")
}

/// Renders the report as workflow commands, with a fresh random stop-commands token.
pub fn render(report: &ExecutionReport) -> String {
    render_with_token(report, &random_token())
}

/// One finding as an annotation line (without the trailing newline).
pub fn annotation(f: &Finding, step_id: &str) -> String {
    let cmd = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "notice",
    };
    let mut props: Vec<(&str, String)> = Vec::new();
    if let Some(p) = &f.path {
        props.push(("file", p.clone()));
        if let Some(l) = f.line {
            props.push(("line", l.to_string()));
            // The runner keeps columns only for an annotation on one line: with
            // `line != endLine` it drops `col`/`endColumn`, so they are left out.
            let one_line = f.end_line.is_none_or(|el| el == l);
            if let Some(c) = f.column.filter(|_| one_line) {
                props.push(("col", c.to_string()));
            }
            if let Some(el) = f.end_line {
                props.push(("endLine", el.to_string()));
                if let Some(ec) = f.end_column.filter(|_| one_line) {
                    props.push(("endColumn", ec.to_string()));
                }
            }
        }
    }
    props.push(("title", format!("{} [{step_id}]", f.title)));
    command(cmd, &props, &f.message)
}

/// A workflow command line `::NAME k=v,k=v::message` (without the trailing newline), the
/// property values escaped with [`escape_property`] and the message with [`escape_data`].
/// Control characters other than line breaks and tabs (ESC, BEL, bidirectional overrides...)
/// are written as visible escapes first ([`nuvira_api::text::escape_control`]): the runner
/// prints an annotation's file, title and message in the log, so raw they would reach the
/// reader's terminal.
pub fn command(name: &str, properties: &[(&str, String)], message: &str) -> String {
    let props: Vec<String> = properties
        .iter()
        .map(|(k, v)| format!("{k}={}", escape_property(&visible(v))))
        .collect();
    format!(
        "::{name} {}::{}",
        props.join(","),
        escape_data(&visible(message))
    )
}

/// `s` with every control character but CR, LF and tab (which [`escape_data`] encodes, so a
/// file name keeps them and still names the real file) written as a visible escape.
fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    let hostile = |c: char| nuvira_api::text::is_hostile(c) && !matches!(c, '\n' | '\r' | '\t');
    if !s.chars().any(hostile) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hostile(c) {
            out.push_str(&nuvira_api::text::escape_control(
                c.encode_utf8(&mut [0; 4]),
            ));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The findings that become annotations: the most severe first, at most [`MAX_ERRORS`] errors
/// and [`MAX_WARNINGS`] warnings; notices are only counted.
pub fn ranked(report: &ExecutionReport) -> Vec<(&str, &Finding)> {
    let mut all: Vec<(usize, &str, &Finding)> = report
        .findings()
        .enumerate()
        .map(|(i, (s, f))| (i, s.id.as_str(), f))
        .collect();
    all.sort_by_key(|(i, _, f)| (std::cmp::Reverse(f.severity), f.kind, f.path.is_none(), *i));
    let (mut errors, mut warnings) = (0, 0);
    all.into_iter()
        .filter(|(_, _, f)| match f.severity {
            Severity::Error => {
                errors += 1;
                errors <= MAX_ERRORS
            }
            Severity::Warning => {
                warnings += 1;
                warnings <= MAX_WARNINGS
            }
            Severity::Info => false,
        })
        .map(|(_, s, f)| (s, f))
        .collect()
}

/// Wraps untrusted text so that no line in it runs as a workflow command.
pub fn stop_commands(out: &mut String, token: &str, text: &str) {
    let _ = writeln!(out, "::stop-commands::{token}");
    out.push_str(text);
    if !text.ends_with('\n') {
        out.push('\n');
    }
    let _ = writeln!(out, "::{token}::");
}

/// Renders the report as workflow commands with a given token (for reproducible output).
///
/// If the token occurs in the text it must protect, a longer one is derived so that the text
/// can never end the block early.
pub fn render_with_token(report: &ExecutionReport, token: &str) -> String {
    let mut untrusted = crate::text::render(report);
    for (_, f) in report.findings() {
        untrusted.push_str(&f.message);
        untrusted.push_str(&f.detail);
    }
    let mut token = token.to_owned();
    while untrusted.contains(&token) {
        token.push_str("x0");
    }
    let mut out = String::new();
    stop_commands(&mut out, &token, &crate::text::render(report));
    let shown = ranked(report);
    for (step, f) in &shown {
        out.push_str(&annotation(f, step));
        out.push('\n');
    }
    for (step, f) in &shown {
        if f.detail.trim().is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "::group::{}",
            escape_data(&format!("{} [{step}]", f.title))
        );
        stop_commands(&mut out, &token, &f.detail);
        out.push_str("::endgroup::\n");
    }
    let c = &report.counts;
    let not_shown = (c.errors + c.warnings).saturating_sub(shown.len());
    let mut totals = format!(
        "{}: {} error(s), {} warning(s), {} notice(s)",
        report.summary, c.errors, c.warnings, c.notices
    );
    if not_shown > 0 {
        let _ = write!(
            totals,
            "; {not_shown} not annotated (GitHub shows at most {MAX_ERRORS} errors and {MAX_WARNINGS} warnings per step): see the full report"
        );
    }
    let _ = writeln!(
        out,
        "::notice title={}::{}",
        escape_property("nuvira totals"),
        escape_data(&totals)
    );
    out
}

/// The job summary: the Markdown report, cut to fit in `limit` bytes with a note saying so.
/// Whole sections are kept or dropped, so no code block or table is left open.
pub fn step_summary(report: &ExecutionReport, limit: usize) -> String {
    let blocks = markdown::render_blocks(report);
    let full: usize = blocks.iter().map(String::len).sum();
    if full <= limit {
        return blocks.concat();
    }
    let note = format!(
        "\n> **Note:** this summary was truncated to fit GitHub's {} KiB limit; the full report is {full} bytes. Run `nuvira report EVENTS --format markdown` for all of it.\n",
        limit / 1024
    );
    let budget = limit.saturating_sub(note.len());
    let mut out = String::new();
    for b in blocks {
        if out.len() + b.len() > budget {
            if out.is_empty() {
                let mut cut = budget.min(b.len());
                while !b.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&b[..cut]);
            }
            break;
        }
        out.push_str(&b);
    }
    out.push_str(&note);
    out
}

/// Appends the job summary to the file `$GITHUB_STEP_SUMMARY` names, keeping the file under
/// [`STEP_SUMMARY_LIMIT`] (content already in it counts). Does nothing when the variable is not
/// set; returns the path written.
///
/// # Errors
/// [`ReportError::Write`] when the file cannot be opened or written.
pub fn write_step_summary(
    report: &ExecutionReport,
) -> Result<Option<std::path::PathBuf>, ReportError> {
    match std::env::var_os("GITHUB_STEP_SUMMARY") {
        Some(p) if !p.is_empty() => {
            let path = std::path::PathBuf::from(p);
            append_step_summary(report, &path, STEP_SUMMARY_LIMIT)?;
            Ok(Some(path))
        }
        _ => Ok(None),
    }
}

/// Appends the job summary to a file, keeping the whole file under `limit` bytes.
///
/// # Errors
/// [`ReportError::Write`] when the file cannot be opened or written.
pub fn append_step_summary(
    report: &ExecutionReport,
    path: &Path,
    limit: usize,
) -> Result<(), ReportError> {
    let err = |source| ReportError::Write {
        path: path.to_owned(),
        source,
    };
    let existing = match std::fs::metadata(path) {
        Ok(m) => usize::try_from(m.len()).unwrap_or(usize::MAX),
        Err(_) => 0,
    };
    let text = step_summary(report, limit.saturating_sub(existing).saturating_sub(1));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    let sep = if existing > 0 { "\n" } else { "" };
    file.write_all(format!("{sep}{text}").as_bytes())
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_matches_the_actions_toolkit() {
        assert_eq!(escape_data("50% done\r\nnext"), "50%25 done%0D%0Anext");
        assert_eq!(escape_property("a:b,c%"), "a%3Ab%2Cc%25");
        // A file name and message carrying terminal escapes: visible, never raw.
        let line = command(
            "error",
            &[
                ("file", "src/\x1b[2Jx.rs".into()),
                ("title", "t\u{202e}".into()),
            ],
            "one\x07\ntwo",
        );
        let kept = command("error", &[("file", "a\nb.rs".into())], "m");
        assert_eq!(kept, "::error file=a%0Ab.rs::m");
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
        assert_eq!(
            line,
            "::error file=src/\\x1b[2Jx.rs,title=t\\u{202e}::one\\x07%0Atwo"
        );
        // `%` first, so an escape sequence in the input survives a round trip.
        assert_eq!(unescape_data(&escape_data("%0A")), "%0A");
    }

    #[test]
    fn parse_reads_properties_and_message() {
        let c = parse_command("::error file=a%2Cb.rs,line=3,title=x%3Ay::m%0Az").unwrap();
        assert_eq!(c.name, "error");
        assert_eq!(c.properties[0], ("file".into(), "a,b.rs".into()));
        assert_eq!(c.properties[2], ("title".into(), "x:y".into()));
        assert_eq!(c.message, "m\nz");
    }
}
