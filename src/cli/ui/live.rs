//! The report of a run without `report.json` (going on, or killed), kept per run by the
//! server and brought up to date from the tail of its `events.jsonl`: a refresh folds only the
//! lines written since the last one into the run's [`ReportBuilder`], instead of reading and
//! folding the whole file again (a live run's page asks after every burst of events, so a
//! rebuild made following a run quadratic in its events). Its operation records
//! (`steps.jsonl`) are followed the same way.
//!
//! The result is the report `StoredRun::report()` rebuilds from the same complete lines, error
//! for error (the same line and size caps, the same messages): only a torn last line — a line
//! whose newline is not written yet — is left for the next refresh instead of being an error.
//! A file replaced (a resume moves the stream aside and starts a new one: another inode, or
//! shorter than what was read) starts the fold again.

use crate::runs::calls::CallRecord;
use crate::runs::record::OpRecord;
use nuvira_api::{Event, EventKind, ExecutionReport};
use nuvira_report::{ReportBuilder, ReportError};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The most runs whose state is kept (a run whose report is written needs none).
const MAX_RUNS: usize = 64;
/// The most read from a file in one go.
const CHUNK: u64 = 4 * 1024 * 1024;

/// What one refresh did, for the API's `fold` object (and the tests that check that a refresh
/// costs what is new, not what is old).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct FoldStats {
    /// Events folded into the report so far.
    pub events: u64,
    /// Events folded by this refresh.
    pub new_events: u64,
    /// Bytes of `events.jsonl` read by this refresh.
    pub bytes_read: u64,
    /// Whether the state of an earlier refresh was used (`false`: folded from the start).
    pub reused: bool,
    /// Operation records read so far.
    pub operations: u64,
    /// Bytes of `steps.jsonl` read by this refresh.
    pub operation_bytes_read: u64,
    /// Model-call records read (parsed) by this refresh: new ones, and ones changed since
    /// (a call's record is written before the call and completed after it).
    pub calls_read: u64,
}

/// The followed runs.
#[derive(Default)]
pub(crate) struct LiveRuns {
    runs: HashMap<String, LiveRun>,
}

impl LiveRuns {
    /// The report of run `id` from `events` and its operation records from `steps`, brought up
    /// to date (the report's error: why the file cannot be read as events, as the full read
    /// says it).
    pub(crate) fn refresh(
        &mut self,
        id: &str,
        events: &Path,
        steps: &Path,
    ) -> (Result<ExecutionReport, String>, Vec<OpRecord>, FoldStats) {
        if !self.runs.contains_key(id) && self.runs.len() >= MAX_RUNS {
            // Any one goes: a page following a run asks for it again within a second.
            if let Some(k) = self.runs.keys().next().cloned() {
                self.runs.remove(&k);
            }
        }
        let reused = self.runs.contains_key(id);
        let run = self.runs.entry(id.to_owned()).or_default();
        let mut stats = FoldStats {
            reused,
            ..FoldStats::default()
        };
        run.events.follow(events, &mut stats.bytes_read);
        if run.events.reset {
            // A new file: folded again from its start (its lines were queued after the reset;
            // nothing of the old file is kept).
            run.events.reset = false;
            run.report = Folding::default();
            stats.reused = false;
        }
        let mut new_events = 0;
        let folding = &mut run.report;
        run.events.take_lines(|line, no, total| {
            folding.line(events, line, no, total, &mut new_events);
        });
        if let Some(e) = &run.events.error {
            folding.error.get_or_insert_with(|| e.clone());
        }
        run.steps.follow(steps, &mut stats.operation_bytes_read);
        if run.steps.reset {
            run.steps.reset = false;
            run.operations.clear();
        }
        let operations = &mut run.operations;
        run.steps.take_lines(|line, _, _| {
            if let Ok(r) = serde_json::from_slice::<OpRecord>(line) {
                operations.push(r);
            }
        });
        stats.new_events = new_events;
        stats.events = run.report.events;
        stats.operations = run.operations.len() as u64;
        let report = match &run.report.error {
            Some(e) => Err(e.clone()),
            None => Ok(run.report.snapshot()),
        };
        (report, run.operations.clone(), stats)
    }

    /// The model-call records of run `id` in `dir` (as `calls::read_calls` gives them), each
    /// parsed again only when its file changed since the last look; counts the ones parsed
    /// into `stats`.
    ///
    /// # Errors
    /// As `calls::read_calls`.
    pub(crate) fn calls(
        &mut self,
        id: &str,
        dir: &Path,
        stats: &mut FoldStats,
    ) -> Result<Vec<CallRecord>, crate::runs::RunsError> {
        let run = self.runs.entry(id.to_owned()).or_default();
        if !crate::runs::is_real_dir(dir) {
            run.calls.clear();
            return Ok(Vec::new());
        }
        let entries = std::fs::read_dir(dir).map_err(|e| crate::runs::RunsError::Read {
            path: dir.to_owned(),
            reason: crate::runs::io_reason(&e),
        })?;
        let mut seen = std::collections::HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(n) = name.strip_suffix(".json") else {
                continue;
            };
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // `DirEntry::metadata` does not follow a symlink; `read_json` refuses one.
            let stamp = entry.metadata().ok().map(|m| {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .unwrap_or_default();
                (m.len(), mtime, m.is_file(), identity_of(&m))
            });
            seen.insert(name.clone());
            if let (Some(stamp), Some((had, _))) = (stamp, run.calls.get(&name))
                && stamp == *had
            {
                continue;
            }
            let record = crate::runs::read_json::<CallRecord>(&entry.path())?;
            stats.calls_read += 1;
            if let Some(stamp) = stamp {
                run.calls.insert(name, (stamp, record));
            }
        }
        run.calls.retain(|name, _| seen.contains(name));
        let mut out: Vec<CallRecord> = run.calls.values().map(|(_, r)| r.clone()).collect();
        out.sort_by_key(|c| c.call);
        Ok(out)
    }

    /// Forgets run `id` (its report is written: it is read from there).
    pub(crate) fn forget(&mut self, id: &str) {
        self.runs.remove(id);
    }
}

#[derive(Default)]
struct LiveRun {
    events: Lines,
    report: Folding,
    steps: Lines,
    operations: Vec<OpRecord>,
    /// Model-call records by file name, with the (length, mtime, plain file) they were read at.
    calls: HashMap<String, (CallStamp, CallRecord)>,
}

/// What tells a call record's file changed: length, modification time, whether a plain file,
/// and which file (a record is replaced by a rename).
type CallStamp = (u64, std::time::Duration, bool, (u64, u64));

/// The report folded so far.
#[derive(Default)]
struct Folding {
    builder: ReportBuilder,
    unknown: Vec<String>,
    events: u64,
    /// The first error, as the full read gives it; nothing is folded after it.
    error: Option<String>,
}

impl Folding {
    /// One complete line (without its newline), the `no`th of the file, the file read up to
    /// `total` bytes with it: as `nuvira_report::read_jsonl_file` reads it.
    fn line(&mut self, path: &Path, line: &[u8], no: u64, total: u64, new: &mut u64) {
        if self.error.is_some() {
            return;
        }
        let path_buf = || PathBuf::from(path);
        let limit = max_events_bytes();
        let limit = match limit {
            Ok(l) => l,
            Err(e) => {
                self.error = Some(e.to_string());
                return;
            }
        };
        if total > limit {
            self.error = Some(
                ReportError::TooLarge {
                    path: path_buf(),
                    line: no,
                    limit,
                }
                .to_string(),
            );
            return;
        }
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                self.error = Some(
                    ReportError::Read {
                        path: path_buf(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("line {no} is not UTF-8 text: {e}"),
                        ),
                    }
                    .to_string(),
                );
                return;
            }
        };
        if text.trim().is_empty() {
            return;
        }
        match serde_json::from_str::<Event>(text) {
            Ok(ev) => {
                self.builder.fold_owned(ev);
                self.events += 1;
                *new += 1;
            }
            Err(source) => match unknown_type(text) {
                Some(kind) => {
                    if !self.unknown.contains(&kind) {
                        self.unknown.push(kind);
                    }
                }
                None => {
                    self.error = Some(
                        ReportError::Malformed {
                            path: path_buf(),
                            line: no,
                            source,
                        }
                        .to_string(),
                    );
                }
            },
        }
    }

    fn snapshot(&self) -> ExecutionReport {
        let mut report = self.builder.snapshot();
        for kind in &self.unknown {
            if !report.unknown_event_types.contains(kind) {
                report.unknown_event_types.push(kind.clone());
            }
        }
        report
    }
}

/// The `type` of a JSON object line when it is a string this version does not know (an event
/// of a newer Nuvira: skipped, as the full read skips it).
fn unknown_type(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Tagged {
        #[serde(rename = "type")]
        kind: String,
    }
    let tagged: Tagged = serde_json::from_str(line).ok()?;
    (!EventKind::is_known_type(&tagged.kind)).then_some(tagged.kind)
}

/// The total cap of an events file, as the full read takes it.
fn max_events_bytes() -> Result<u64, ReportError> {
    match std::env::var(nuvira_report::MAX_EVENTS_BYTES_ENV) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ReportError::BadLimit {
                var: nuvira_report::MAX_EVENTS_BYTES_ENV,
                value: v,
            }),
        },
        _ => Ok(nuvira_report::DEFAULT_MAX_EVENTS_BYTES),
    }
}

/// A followed file of complete lines: what was read, the line not complete yet.
#[derive(Default)]
struct Lines {
    /// The file read (device, inode): another one is a replacement.
    identity: Option<(u64, u64)>,
    /// Bytes read (complete lines, and the partial line held).
    offset: u64,
    partial: Vec<u8>,
    /// Complete lines read and not taken yet, with their line number and the bytes read up to
    /// their end.
    queued: Vec<(Vec<u8>, u64, u64)>,
    lines: u64,
    /// The file was replaced since the last take: start again.
    reset: bool,
    error: Option<String>,
}

impl Lines {
    /// Reads what was appended to `path` since the last look (a plain file only, never
    /// through a symlink); counts the bytes read into `read`.
    fn follow(&mut self, path: &Path, read: &mut u64) {
        let Ok(len) = crate::runs::check_plain_file(path) else {
            return;
        };
        let Ok(mut file) = std::fs::File::open(path) else {
            return;
        };
        let identity = file.metadata().ok().map(|m| identity_of(&m));
        if self.identity.is_some() && (identity != self.identity || len < self.offset) {
            *self = Self {
                reset: true,
                ..Self::default()
            };
        }
        self.identity = identity;
        if len <= self.offset || self.error.is_some() {
            return;
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut left = len - self.offset;
        let mut buf = Vec::new();
        while left > 0 {
            buf.clear();
            let Ok(n) = (&mut file).take(left.min(CHUNK)).read_to_end(&mut buf) else {
                return;
            };
            if n == 0 {
                break;
            }
            let n = n as u64;
            left = left.saturating_sub(n);
            *read += n;
            let start = self.offset;
            self.offset += n;
            let mut line_start = 0;
            for (i, &b) in buf.iter().enumerate() {
                if b != b'\n' {
                    continue;
                }
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&buf[line_start..i]);
                line_start = i + 1;
                self.lines += 1;
                if line.len() as u64 > nuvira_report::MAX_EVENT_LINE_BYTES {
                    self.error = Some(too_long(path, self.lines));
                    return;
                }
                self.queued.push((line, self.lines, start + i as u64 + 1));
            }
            self.partial.extend_from_slice(&buf[line_start..]);
            if self.partial.len() as u64 > nuvira_report::MAX_EVENT_LINE_BYTES {
                self.error = Some(too_long(path, self.lines + 1));
                return;
            }
        }
    }

    /// Hands each queued complete line (without its newline) to `f` with its line number and
    /// the bytes read up to its end.
    fn take_lines(&mut self, mut f: impl FnMut(&[u8], u64, u64)) {
        for (line, no, total) in std::mem::take(&mut self.queued) {
            f(&line, no, total);
        }
    }
}

/// The full read's error for line `no` over the line cap.
fn too_long(path: &Path, no: u64) -> String {
    ReportError::LineTooLong {
        path: path.to_owned(),
        line: no,
        limit: nuvira_report::MAX_EVENT_LINE_BYTES,
    }
    .to_string()
}

#[cfg(unix)]
fn identity_of(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn identity_of(_m: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}
