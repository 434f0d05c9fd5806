//! # nuvira-report — what a Nuvira run did, in every format a person or a tool reads
//!
//! A run's report is built from its **events** and nothing else: the scheduler's `run:started`
//! carries the validated plan, `step:succeeded` / `step:failed` carry each step's typed output
//! (test results, edit diffs, verification checks). [`ReportBuilder`] folds those events one at
//! a time into an [`ExecutionReport`], so the report of a live run (the engine feeds the builder
//! from its event bus) and the report of a stored JSONL event file ([`read_jsonl`]) are the same
//! report, byte for byte. Folding is streaming: a stored file is read line by line into one
//! reused buffer, each event is moved into the report and dropped, and no event's payload is
//! ever held twice.
//!
//! The report is then rendered by [`render`] in one of the [`Format`]s:
//!
//! | format | for |
//! |---|---|
//! | `text` | a terminal |
//! | `json` | machines: the [`ExecutionReport`] as JSON |
//! | `markdown` | pull-request comments and the GitHub job summary |
//! | `github` | GitHub Actions workflow commands (annotations), see [`github`] |
//! | `sarif` | code scanning (SARIF 2.1.0, repo-relative URIs, stable rule ids and fingerprints) |
//! | `junit` | CI test dashboards (JUnit XML via `quick-junit`) |
//! | `html` | one self-contained page: the DAG coloured by status, a timeline, diffs, failures |
//!
//! One test run's [`TestResult`](nuvira_api::TestResult) on its own (what `nuvira test` prints)
//! is rendered by [`test_result`] in text, JSON, GitHub and JUnit, with the same escaping, JUnit
//! writer and duration format as the report.
//!
//! Why it is shaped so: the event enum is the boundary (no module calls a reporter), every
//! renderer reads only the [`ExecutionReport`], and findings (test failures, syntax issues,
//! verification blockers, security warnings) are normalised once into
//! [`Finding`]s that every format shares, so the formats cannot
//! disagree about what went wrong.
//!
//! ```
//! use nuvira_report::{Format, ReportBuilder, render};
//!
//! let mut builder = ReportBuilder::new();
//! for event in nuvira_report::sample::failing_run() {
//!     builder.fold(&event);
//! }
//! let report = builder.finish();
//! assert_eq!(report.counts.tests_failed, 2);
//! let annotations = render(&report, Format::Github);
//! assert!(annotations.contains("::error file=src/config.rs,line=42"));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod builder;
mod clean;
pub mod github;
pub mod html;
pub mod junit;
pub mod markdown;
mod module;
pub mod sample;
pub mod sarif;
pub mod test_result;
pub mod text;

pub use builder::{
    BUDGET_EVENT, DEFAULT_MAX_EVENTS_BYTES, EventReader, MAX_EVENT_LINE_BYTES,
    MAX_EVENTS_BYTES_ENV, ReportBuilder, read_jsonl, read_jsonl_file,
};
pub use clean::{checkout_prefix, checkout_root, mask_secrets, rebase_paths};
pub use module::{REPORT_MODULE, ReportModule, write_reports};
pub use nuvira_api::report::{
    ExecutionReport, Finding, FindingKind, ReportCounts, StepRecord, TestTotals,
    VerificationSummary,
};

use std::path::PathBuf;

/// An output format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// Plain text for a terminal.
    Text,
    /// The report as pretty-printed JSON.
    Json,
    /// GitHub-flavoured Markdown.
    Markdown,
    /// GitHub Actions workflow commands.
    Github,
    /// SARIF 2.1.0.
    Sarif,
    /// JUnit XML.
    Junit,
    /// One self-contained HTML page.
    Html,
}

impl Format {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [Format; 7] = [
        Self::Text,
        Self::Json,
        Self::Markdown,
        Self::Github,
        Self::Sarif,
        Self::Junit,
        Self::Html,
    ];

    /// The format's name, as the CLI and plan configs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Json => "json",
            Self::Markdown => "markdown",
            Self::Github => "github",
            Self::Sarif => "sarif",
            Self::Junit => "junit",
            Self::Html => "html",
        }
    }

    /// The usual file name for a report in this format (`report.sarif`, `report.html`, ...).
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Text => "report.txt",
            Self::Json => "report.json",
            Self::Markdown => "report.md",
            Self::Github => "report.github.txt",
            Self::Sarif => "report.sarif",
            Self::Junit => "report.junit.xml",
            Self::Html => "report.html",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is not one of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "recognise report format `{0}`: expected one of text, json, markdown, github, sarif, junit, html"
)]
pub struct UnknownFormat(pub String);

impl std::str::FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|f| f.as_str() == lower || (lower == "md" && *f == Self::Markdown))
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// Renders a report in a format.
///
/// [`Format::Github`] output uses a fresh random stop-commands token on each call; use
/// [`github::render_with_token`] for reproducible output.
pub fn render(report: &ExecutionReport, format: Format) -> String {
    match format {
        Format::Text => text::render(report),
        Format::Json => render_json(report),
        Format::Markdown => markdown::render(report),
        Format::Github => github::render(report),
        Format::Sarif => sarif::render(report),
        Format::Junit => junit::render(report),
        Format::Html => html::render(report),
    }
}

/// Renders a report in a format, SARIF with the given [`sarif::Options`].
pub fn render_with(report: &ExecutionReport, format: Format, sarif: &sarif::Options) -> String {
    match format {
        Format::Sarif => sarif::render_with(report, sarif),
        f => render(report, f),
    }
}

/// The version of the report JSON, its first key `schema_version`: it changes only when an
/// existing key changes meaning (new keys do not). `nuvira schema report` describes it.
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// The report JSON: `schema_version`, then the report's own keys.
#[derive(serde::Serialize)]
struct Versioned<'a> {
    schema_version: u32,
    #[serde(flatten)]
    report: &'a ExecutionReport,
}

fn render_json(report: &ExecutionReport) -> String {
    // Serializing plain data with string keys cannot fail; fall back to an error object anyway
    // rather than panicking.
    let versioned = Versioned {
        schema_version: REPORT_SCHEMA_VERSION,
        report,
    };
    match serde_json::to_string_pretty(&versioned) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        Err(e) => format!("{{\"error\": {:?}}}\n", e.to_string()),
    }
}

/// Why a report could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The events file could not be opened or read.
    #[error("read events file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the events file is not one JSON event.
    #[error(
        "parse events file {}, line {line}: {source} (each line must be one JSON event as written by `nuvira run --events`)",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: u64,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A line of the events file is longer than the line cap (an unbounded source such as
    /// `/dev/zero`, or not an events file).
    #[error(
        "read events file {}, line {line}: the line is longer than {limit} bytes, the cap on one event: pass the file `nuvira run --events` wrote",
        path.display()
    )]
    LineTooLong {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: u64,
        /// The cap, in bytes.
        limit: u64,
    },
    /// The events file is larger than the total cap.
    #[error(
        "read events file {}, line {line}: the file is larger than {limit} bytes, the cap on events files: raise it with NUVIRA_MAX_EVENTS_BYTES=BYTES if the file is right",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The 1-based line where the cap was crossed.
        line: u64,
        /// The cap, in bytes.
        limit: u64,
    },
    /// A cap variable is set to something that is not a positive number of bytes.
    #[error(
        "read the cap {var}={value:?}: not a positive number of bytes: set it to e.g. 2147483648 or unset it"
    )]
    BadLimit {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A report file could not be written.
    #[error("write report {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The first 12 hex digits of a stable 64-bit FNV-1a hash over the parts, for ids and
/// fingerprints that must not change between runs, Rust versions or machines.
pub(crate) fn stable_hash(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Formats milliseconds as `1.2s`, `340ms`, `2m05s`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// One line saying what a step produced or why it did not finish.
pub(crate) fn step_result(s: &StepRecord) -> String {
    use nuvira_api::{StepOutput, StepStatus};
    if s.status != StepStatus::Succeeded
        && let Some(m) = &s.message
    {
        return m.lines().next().unwrap_or_default().to_owned();
    }
    // The typed fields hold what was moved out of the output.
    match (&s.output, &s.tests) {
        (_, Some(t)) => format!(
            "{} passed, {} failed, {} skipped",
            t.passed, t.failed, t.skipped
        ),
        (Some(StepOutput::Edit(r)), _) => format!(
            "{} change(s) applied to {} file(s)",
            r.applied_count,
            s.file_changes.len()
        ),
        (Some(StepOutput::EditPreview(_)), _) => {
            format!("{} change(s) previewed", s.file_changes.len())
        }
        (Some(StepOutput::Value(v)), _) if v.get("report_id").is_some() => {
            format!("report {}", v["report_id"].as_str().unwrap_or_default())
        }
        (Some(out), _) => out.summary(),
        (None, _) => String::new(),
    }
}

/// Whether the step was stopped by the run's cancellation (the builder gives such a failed step
/// no category).
pub(crate) fn was_cancelled(s: &StepRecord) -> bool {
    s.status == nuvira_api::StepStatus::Failed && s.category.is_none()
}

/// The status label of a step: its status, or `cancelled` for a step the run's cancellation
/// stopped.
pub(crate) fn step_label(s: &StepRecord) -> &'static str {
    if was_cancelled(s) {
        "cancelled"
    } else {
        status_label(s.status)
    }
}

/// Whether a change of the step was undone by an `edit:rolled-back`.
pub(crate) fn is_rolled_back(s: &StepRecord, c: &nuvira_api::FileChange) -> bool {
    s.rolled_back.contains(&c.path)
        || matches!(&c.kind, nuvira_api::ChangeKind::Rename { from } if s.rolled_back.contains(from))
}

/// `; N rolled back` after the change totals when some changes were undone ("" otherwise): the
/// totals count only what is left.
pub(crate) fn rolled_back_note(r: &ExecutionReport) -> String {
    match builder::rolled_back_files(r) {
        0 => String::new(),
        n => format!("; {n} file(s) rolled back, not counted"),
    }
}

/// The label of a step status.
pub(crate) fn status_label(status: nuvira_api::StepStatus) -> &'static str {
    use nuvira_api::StepStatus as S;
    match status {
        S::Pending => "pending",
        S::Running => "running",
        S::Succeeded => "succeeded",
        S::Failed => "failed",
        S::Skipped => "skipped",
    }
}

/// The label of a run status (`None` means the stream ended before `run:completed`).
pub(crate) fn run_label(status: Option<nuvira_api::RunStatus>) -> &'static str {
    use nuvira_api::RunStatus as R;
    match status {
        Some(R::Succeeded) => "succeeded",
        Some(R::Failed) => "failed",
        Some(R::Cancelled) => "cancelled",
        None => "incomplete",
    }
}

/// The label of a severity.
pub(crate) fn severity_label(s: nuvira_api::Severity) -> &'static str {
    match s {
        nuvira_api::Severity::Error => "error",
        nuvira_api::Severity::Warning => "warning",
        nuvira_api::Severity::Info => "notice",
    }
}
