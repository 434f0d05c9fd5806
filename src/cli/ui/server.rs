//! The HTTP side of `nuvira ui`: an axum router over a [`RunStore`], read-only.
//!
//! Routes (every one `GET`; anything else is 405, an unknown path 404):
//!
//! | path | what |
//! |---|---|
//! | `/` | the page (`index.html`) |
//! | `/assets/app.js`, `/assets/app.css` | its script and style, embedded in the binary |
//! | `/api/runs` | the runs, newest first: the rows of `nuvira runs --json` |
//! | `/api/runs/{id}` | one run: its row, report, DAG layers, model calls, operation records (and `fold`, what a refresh of a run without `report.json` read: see [`super::live`]) |
//! | `/api/runs/{id}/calls/{n}` | one model-call record in full (redacted as stored) |
//! | `/api/runs/{id}/events` | server-sent events: each line of `events.jsonl`, then `end` |
//!
//! Everything a run folder holds is untrusted (it may have come with a checkout): run ids are
//! checked by [`RunStore::get`] (the run-id rule, real folders only, no symlink followed), files
//! are read through [`RunStore`]'s capped readers, and every response carries a strict
//! Content-Security-Policy (scripts and styles from this server only, no inline script, nothing
//! from anywhere else) and `nosniff`. Requests whose `Host` is not this server's loopback address
//! are refused, so a web page cannot reach the viewer by DNS rebinding.

use crate::runs::{RunStore, StoredRun};
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

/// The page.
const INDEX_HTML: &str = include_str!("index.html");
/// Its script.
const APP_JS: &str = include_str!("app.js");
/// Its style.
const APP_CSS: &str = include_str!("app.css");

/// The Content-Security-Policy of every response: the page's own script and style only, API
/// calls to this server only, no inline script or style element, no frames, no forms.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// How often a followed `events.jsonl` is looked at for new lines.
const TAIL_POLL: Duration = Duration::from_millis(150);
/// The most read from `events.jsonl` in one go by the event stream.
const TAIL_CHUNK: u64 = 1024 * 1024;

/// The run history, opened again for each look: `.nuvira/runs` may appear (the first run) or
/// change (replaced by a symlink) while the server runs.
pub(crate) struct History {
    ws: nuvira_workspace::Workspace,
}

impl History {
    fn open(&self) -> Result<RunStore, crate::runs::RunsError> {
        RunStore::of(&self.ws)
    }

    fn list(&self) -> Result<Vec<StoredRun>, crate::runs::RunsError> {
        self.open()?.list()
    }

    fn get(&self, id: &str) -> Result<StoredRun, crate::runs::RunsError> {
        self.open()?.get(id)
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Ui {
    store: Arc<History>,
    /// The reports of runs without `report.json`, kept up to date from their events' tail
    /// (see [`super::live`]).
    live: Arc<std::sync::Mutex<super::live::LiveRuns>>,
    /// The `Host` header values accepted (`127.0.0.1:<port>`, `localhost:<port>`).
    hosts: Arc<[String]>,
}

/// The router for `store`, served on loopback port `port`.
pub(crate) fn router(store: RunStore, port: u16) -> Router {
    let ui = Ui {
        store: Arc::new(History {
            ws: store.workspace().clone(),
        }),
        hosts: vec![format!("127.0.0.1:{port}"), format!("localhost:{port}")].into(),
        live: Arc::default(),
    };
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/app.css", get(app_css))
        .route("/api/runs", get(list))
        .route("/api/runs/{id}", get(detail))
        .route("/api/runs/{id}/calls/{n}", get(call))
        .route("/api/runs/{id}/events", get(events))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(ui.clone(), guard))
        .with_state(ui)
}

/// Refuses a foreign `Host` (DNS rebinding) and adds the security headers to every response.
async fn guard(State(ui): State<Ui>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut resp = if ui.hosts.contains(&host) {
        next.run(req).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "nuvira ui answers only requests for its own loopback address\n",
        )
            .into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such page").into_response()
}

/// An API error, answered as JSON: `{"error": message}`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

fn error(status: StatusCode, message: &str) -> ApiError {
    ApiError(status, message.to_owned())
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// The run `id`, or the error response: 404 for a name that is no run id or no run folder (the
/// same answer, so that probing learns nothing), 500 for an unreadable `run.json`.
fn run_of(store: &History, id: &str) -> Result<StoredRun, ApiError> {
    use crate::runs::RunsError;
    store.get(id).map_err(|e| match e {
        RunsError::BadId(_) | RunsError::NotFound(_) => error(StatusCode::NOT_FOUND, "no such run"),
        e => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    })
}

async fn list(State(ui): State<Ui>) -> Result<Response, ApiError> {
    let store = ui.store.clone();
    let rows = blocking(move || {
        store
            .list()
            .map(|r| r.iter().map(super::super::runs::row).collect::<Vec<_>>())
    })
    .await;
    match rows {
        Some(Ok(rows)) => Ok(axum::Json(Value::Array(rows)).into_response()),
        Some(Err(e)) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())),
        None => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the listing stopped",
        )),
    }
}

async fn detail(State(ui): State<Ui>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let store = ui.store.clone();
    let live = ui.live.clone();
    match blocking(move || run_detail(&store, &live, &id)).await {
        Some(Ok(v)) => Ok(axum::Json(v).into_response()),
        Some(Err(e)) => Err(e),
        None => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reading the run stopped",
        )),
    }
}

/// One run as the page shows it. The report of a run without `report.json` (going on, or
/// killed) comes from the state kept for it, brought up to date with the lines its
/// `events.jsonl` got since the last look (`fold` says what that cost), not from the whole
/// file read again.
fn run_detail(
    store: &History,
    live: &std::sync::Mutex<super::live::LiveRuns>,
    id: &str,
) -> Result<Value, ApiError> {
    let run = run_of(store, id)?;
    let mut out = json!({ "run": super::super::runs::row(&run) });
    let mut live = live
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let written = std::fs::symlink_metadata(run.report_path()).is_ok_and(|m| m.is_file());
    let (report, operations, calls) =
        if written || crate::runs::check_plain_file(&run.events_path()).is_err() {
            live.forget(id);
            (run.report(), None, run.calls())
        } else {
            let (report, operations, mut stats) =
                live.refresh(id, &run.events_path(), &run.steps_path());
            let calls = live.calls(id, &run.calls_dir(), &mut stats);
            out["fold"] = json!(stats);
            (
                report.map_err(|reason| crate::runs::RunsError::Read {
                    path: run.events_path(),
                    reason,
                }),
                Some(operations),
                calls,
            )
        };
    drop(live);
    match report {
        Ok(report) => {
            let layers: Vec<Vec<&str>> = nuvira_report::html::layers(&report.steps)
                .into_iter()
                .map(|l| l.into_iter().map(|i| report.steps[i].id.as_str()).collect())
                .collect();
            out["layers"] = json!(layers);
            out["report"] = json!(report);
        }
        Err(e) => {
            out["report"] = Value::Null;
            out["report_error"] = json!(e.to_string());
        }
    }
    match calls {
        Ok(calls) => {
            let rows: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let usage = c.response.as_ref().map(|r| &r.usage);
                    json!({
                        "call": c.call,
                        "step": c.step,
                        "attempt": c.attempt,
                        "ordinal": c.ordinal,
                        "model": c.provider_model,
                        "answered_by": c.response.as_ref().map(|r| &r.model),
                        "sent_ms": c.sent_ms,
                        "input_tokens": usage.map(|u| u.input_tokens),
                        "output_tokens": usage.map(|u| u.output_tokens),
                        "latency_ms": c.latency_ms,
                        "retries": c.retries,
                        "cost_usd": c.cost_usd,
                        "from_record": c.from_record,
                        "error": c.error,
                        "in_flight": c.response.is_none() && c.error.is_none(),
                    })
                })
                .collect();
            out["calls"] = Value::Array(rows);
        }
        Err(e) => {
            out["calls"] = json!([]);
            out["calls_error"] = json!(e.to_string());
        }
    }
    let steps_path = run.steps_path();
    out["operations"] = match operations {
        Some(ops) => json!(ops),
        None if crate::runs::check_plain_file(&steps_path).is_ok() => {
            json!(crate::runs::record::read_steps(&steps_path))
        }
        None => json!([]),
    };
    Ok(out)
}

async fn call(
    State(ui): State<Ui>,
    Path((id, n)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let Ok(n) = n.parse::<u64>() else {
        return Err(error(StatusCode::NOT_FOUND, "no such model call"));
    };
    let store = ui.store.clone();
    let found = blocking(move || {
        let run = run_of(&store, &id)?;
        let calls = run
            .calls()
            .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?;
        calls
            .into_iter()
            .find(|c| c.call == n)
            .ok_or_else(|| error(StatusCode::NOT_FOUND, "no such model call"))
    })
    .await;
    match found {
        Some(Ok(c)) => Ok(axum::Json(c).into_response()),
        Some(Err(e)) => Err(e),
        None => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reading the call stopped",
        )),
    }
}

/// `GET /api/runs/{id}/events`: every line of the run's `events.jsonl` as an `event` message
/// (its `id` the byte offset after the line, so a reconnecting `EventSource` resumes with
/// `Last-Event-ID`), following the file as it grows; `reset` when the file was replaced (a
/// resume starts a new one); `end` with the run's status once it is over and every line sent.
async fn events(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let store = ui.store.clone();
    let check = {
        let id = id.clone();
        blocking(move || run_of(&store, &id).map(|_| ())).await
    };
    match check {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(e),
        None => {
            return Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reading the run stopped",
            ));
        }
    }
    let offset = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let tail = Tail::new(ui.store.clone(), id, offset);
    let stream = futures::stream::unfold(tail, |mut t| async move {
        loop {
            if let Some(ev) = t.queue.pop_front() {
                return Some((Ok::<Event, Infallible>(ev), t));
            }
            if t.done {
                return None;
            }
            let (back, got) = blocking(move || {
                let mut t = t;
                let got = t.poll();
                (t, got)
            })
            .await?;
            t = back;
            if !got && !t.done {
                tokio::time::sleep(TAIL_POLL).await;
            }
        }
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The status of `run` as gc judges it: `running` only while its `run.json` says so *and*
/// its folder's lock is held (a lock never outlives its process; a pid can be reused by
/// another process, which would keep the stream following forever); `interrupted` when it
/// says `running` and nobody holds the lock. When the lock cannot be looked at, by its pid.
fn live_status(run: &StoredRun) -> &str {
    if run.meta.status != "running" {
        return &run.meta.status;
    }
    match nuvira_workspace::folder_locked(&run.dir) {
        Ok(true) => "running",
        Ok(false) => "interrupted",
        Err(_) => run.status(),
    }
}

/// The state of one followed `events.jsonl`.
struct Tail {
    store: Arc<History>,
    id: String,
    /// Bytes of the file consumed (complete lines, and the partial line held).
    offset: u64,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
    /// Inside a line longer than the event-line cap: dropped up to its newline.
    skipping: bool,
    queue: VecDeque<Event>,
    /// The run was seen over; one more read and the stream ends.
    saw_end: bool,
    done: bool,
    /// The run as last read, and the stamp of its `run.json` then: `run.json` is read again
    /// only when its stamp changed (it is replaced atomically at start and end, and by a
    /// resume), not at every look.
    seen: Option<(StoredRun, Option<MetaStamp>)>,
    /// Times `run.json` was read (for the tests).
    meta_reads: u64,
}

/// What tells that a `run.json` changed without reading it: its inode, size and mtime (a
/// replacement is another inode even within one mtime tick).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MetaStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl MetaStamp {
    /// The stamp of `path`, not following a symlink; `None` when it is no plain file.
    fn of(path: &std::path::Path) -> Option<Self> {
        let m = std::fs::symlink_metadata(path).ok()?;
        if !m.is_file() {
            return None;
        }
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt as _;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        let mtime_ns = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        Some(Self {
            dev,
            ino,
            len: m.len(),
            mtime_ns,
        })
    }
}

impl Tail {
    fn new(store: Arc<History>, id: String, offset: u64) -> Self {
        Self {
            store,
            id,
            offset,
            partial: Vec::new(),
            skipping: false,
            queue: VecDeque::new(),
            saw_end: false,
            done: false,
            seen: None,
            meta_reads: 0,
        }
    }

    /// The run, read again only when its `run.json` changed since the last look (or its
    /// folder is no longer a real folder); `None` when it is gone.
    fn run(&mut self) -> Option<&StoredRun> {
        let fresh = match &self.seen {
            Some((run, Some(stamp))) => {
                !crate::runs::is_real_dir(&run.dir)
                    || MetaStamp::of(&run.dir.join(crate::runs::META_FILE)) != Some(*stamp)
            }
            _ => true,
        };
        if fresh {
            self.seen = None;
            if !crate::runs::is_run_id(&self.id) {
                return None;
            }
            // The stamp before the read: a `run.json` replaced in between is read again at
            // the next look, never missed.
            let stamp = self.store.open().ok().and_then(|s| {
                s.dir()
                    .and_then(|d| MetaStamp::of(&d.join(&self.id).join(crate::runs::META_FILE)))
            });
            let run = self.store.get(&self.id).ok()?;
            self.meta_reads += 1;
            self.seen = Some((run, stamp));
        }
        self.seen.as_ref().map(|(run, _)| run)
    }

    /// Reads what is new; queues its events (or `end`). Whether it got anywhere: bytes read,
    /// or something queued (else the stream waits a moment before looking again).
    fn poll(&mut self) -> bool {
        // Status first, then the file: a run seen over before a read that finds nothing new
        // has written its last line.
        // (`live_status` looks at the run folder's lock each time: a killed run ends the
        // stream even though its `run.json` did not change.)
        let (status, path) = match self.run() {
            Some(run) => (live_status(run).to_owned(), Some(run.events_path())),
            None => ("gone".to_owned(), None),
        };
        let over = status != "running";
        let new = path.map(|p| self.read(&p)).unwrap_or(false);
        if new {
            return true;
        }
        if over {
            if self.saw_end {
                self.queue.push_back(
                    Event::default()
                        .event("end")
                        .json_data(json!({ "status": status }))
                        .unwrap_or_default(),
                );
                self.done = true;
                return true;
            }
            // One more look: lines written between this read and the status check.
            self.saw_end = true;
            return self.poll();
        }
        false
    }

    /// Reads new complete lines of `path`; whether it read anything or queued anything.
    fn read(&mut self, path: &std::path::Path) -> bool {
        let Ok(len) = crate::runs::check_plain_file(path) else {
            return false;
        };
        let mut queued = false;
        if len < self.offset {
            // Replaced (a resume moved the old stream aside): start again.
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
            self.queue
                .push_back(Event::default().event("reset").data("{}"));
            queued = true;
        }
        if len == self.offset {
            return queued;
        }
        let Ok(mut file) = nuvira_workspace::open_plain_file(path) else {
            return queued;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return queued;
        }
        let mut buf = Vec::new();
        if file.take(TAIL_CHUNK).read_to_end(&mut buf).is_err() {
            return queued;
        }
        let start = self.offset;
        self.offset += buf.len() as u64;
        queued |= !buf.is_empty();
        let mut line_start = 0;
        for (i, &b) in buf.iter().enumerate() {
            if b != b'\n' {
                continue;
            }
            let end_offset = start + i as u64 + 1;
            let piece = &buf[line_start..i];
            line_start = i + 1;
            if self.skipping {
                self.skipping = false;
                self.partial.clear();
                continue;
            }
            self.partial.extend_from_slice(piece);
            let line = std::mem::take(&mut self.partial);
            if let Some(ev) = event_of(&line) {
                self.queue.push_back(ev.id(end_offset.to_string()));
                queued = true;
            }
        }
        if !self.skipping {
            self.partial.extend_from_slice(&buf[line_start..]);
            if self.partial.len() as u64 > nuvira_report::MAX_EVENT_LINE_BYTES {
                self.partial.clear();
                self.skipping = true;
            }
        }
        queued
    }
}

/// The SSE message for one line of `events.jsonl`: a summary of the event (`seq`, `ts`,
/// `type`, `step_id`, and `name` / `message` when it has them), re-serialised so that no byte
/// of the file reaches the stream raw. A torn or malformed line gives none.
fn event_of(line: &[u8]) -> Option<Event> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let obj = v.as_object()?;
    let mut summary = serde_json::Map::new();
    for key in [
        "seq", "ts", "type", "step_id", "name", "message", "attempt", "call", "model",
    ] {
        if let Some(x) = obj.get(key) {
            if x.is_string() || x.is_number() {
                summary.insert(key.to_owned(), x.clone());
            }
        }
    }
    Event::default()
        .event("event")
        .json_data(Value::Object(summary))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A repository with one run marked `running` by this (live) process, and its tail.
    /// A run folder whose `run.json` says `running`, its lock held (as its process holds it).
    fn live_run() -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Tail,
        nuvira_workspace::FolderLock,
    ) {
        let repo = tempfile::tempdir().unwrap();
        let dir = repo.path().join(".nuvira/runs/run-1-live");
        std::fs::create_dir_all(&dir).unwrap();
        let meta = json!({"format": 1, "id": "run-1-live", "goal": "g", "status": "running",
            "started_ms": 1, "pid": std::process::id(), "steps": 1});
        std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
        let ws = nuvira_workspace::Workspace::open(repo.path()).unwrap();
        let tail = Tail::new(Arc::new(History { ws }), "run-1-live".into(), 0);
        let lock = nuvira_workspace::FolderLock::try_acquire(&dir)
            .unwrap()
            .unwrap();
        (repo, dir, tail, lock)
    }

    fn append(path: &std::path::Path, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    fn drain(t: &mut Tail) -> usize {
        let n = t.queue.len();
        t.queue.clear();
        n
    }

    #[test]
    fn tail_sends_whole_lines_only_skips_torn_and_oversized_ones_and_restarts_on_a_new_file() {
        let (_repo, dir, mut t, _lock) = live_run();
        let events = dir.join(crate::runs::EVENTS_FILE);
        // No file yet: nothing, and the stream goes on (the run is alive).
        assert!(!t.poll());
        assert!(!t.done);
        append(
            &events,
            b"{\"seq\":0,\"type\":\"run:started\"}\n{\"seq\":1,\"ty",
        );
        assert!(t.poll());
        assert_eq!(drain(&mut t), 1, "the second line is not whole yet");
        append(
            &events,
            b"pe\":\"step:started\",\"step_id\":\"a\"}\nnot json\n",
        );
        assert!(t.poll());
        assert_eq!(
            drain(&mut t),
            1,
            "the completed line; the malformed one is skipped"
        );
        // A line longer than the cap is dropped, the next one still arrives.
        let huge = vec![b'x'; usize::try_from(nuvira_report::MAX_EVENT_LINE_BYTES).unwrap() + 10];
        append(&events, &huge);
        append(&events, b"\n{\"seq\":2,\"type\":\"step:succeeded\"}\n");
        let mut got = 0;
        while t.poll() {
            got += drain(&mut t);
        }
        assert_eq!(got, 1);
        // A resume moves the stream aside and starts a new, shorter file: `reset`, then it.
        std::fs::rename(&events, dir.join("events.1.jsonl")).unwrap();
        append(&events, b"{\"seq\":0,\"type\":\"run:started\"}\n");
        assert!(t.poll());
        assert_eq!(drain(&mut t), 2, "reset and the new first line");
        assert!(!t.done);
        // The run ends: one more look, then `end`.
        let meta = json!({"format": 1, "id": "run-1-live", "goal": "g", "status": "succeeded",
            "started_ms": 1, "pid": 0, "steps": 1});
        std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
        append(&events, b"{\"seq\":1,\"type\":\"run:completed\"}\n");
        assert!(t.poll());
        assert_eq!(drain(&mut t), 1, "the last line before the end");
        assert!(t.poll());
        assert!(t.done);
        assert_eq!(drain(&mut t), 1, "end");
    }

    /// Replaces `run.json` as the run writer does (a new file renamed over the old one).
    fn replace_meta(dir: &std::path::Path, status: &str, pid: u32) {
        let meta = json!({"format": 1, "id": "run-1-live", "goal": "g", "status": status,
            "started_ms": 1, "pid": pid, "steps": 1});
        std::fs::write(dir.join("run.json.tmp"), meta.to_string()).unwrap();
        std::fs::rename(dir.join("run.json.tmp"), dir.join("run.json")).unwrap();
    }

    #[test]
    fn tail_reads_run_json_again_only_when_it_changed() {
        let (_repo, dir, mut t, _lock) = live_run();
        let events = dir.join(crate::runs::EVENTS_FILE);
        append(&events, b"{\"seq\":0,\"type\":\"run:started\"}\n");
        assert!(t.poll());
        assert_eq!(drain(&mut t), 1);
        for i in 0..50 {
            if i % 10 == 0 {
                append(&events, b"{\"seq\":1,\"type\":\"step:started\"}\n");
            }
            t.poll();
            drain(&mut t);
        }
        assert!(!t.done);
        assert_eq!(t.meta_reads, 1, "run.json unchanged: read once");
        // The writer replaces it (a resume, the end): read again at the next look.
        replace_meta(&dir, "running", std::process::id());
        assert!(!t.poll());
        assert_eq!(t.meta_reads, 2);
        assert!(!t.poll());
        assert_eq!(t.meta_reads, 2);
        replace_meta(&dir, "succeeded", 0);
        assert!(t.poll());
        assert!(t.done, "the end is seen from the new run.json");
        assert_eq!(drain(&mut t), 1, "end");
        assert_eq!(t.meta_reads, 3);
    }

    #[test]
    fn tail_ends_for_a_killed_run_whose_run_json_still_says_running() {
        let (_repo, dir, mut t, lock) = live_run();
        drop(lock);
        // The run's process: alive, holding the folder's lock (on its own open of the
        // folder, kept across the exec), until killed. It waits for the lock: a process
        // another test forks at that moment holds a copy of the dropped one until it execs.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "exec 9<\"$0\"; flock -w 20 9 || exit 1; exec sleep 30",
            ])
            .arg(&dir)
            .spawn()
            .unwrap();
        while !nuvira_workspace::folder_locked(&dir).unwrap() {
            assert!(child.try_wait().unwrap().is_none(), "flock gave up");
            std::thread::yield_now();
        }
        replace_meta(&dir, "running", child.id());
        assert!(!t.poll());
        assert!(!t.done, "alive: followed");
        let reads = t.meta_reads;
        child.kill().unwrap();
        child.wait().unwrap();
        // Found over within a few looks (a process another test forks at the moment of a
        // look holds that look's lock until it execs), without reading run.json again.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !t.poll() {
            assert!(
                std::time::Instant::now() < give_up,
                "the killed run is still followed"
            );
            std::thread::yield_now();
        }
        assert!(t.done, "the run is over: its process is gone");
        assert_eq!(t.meta_reads, reads);
        assert_eq!(drain(&mut t), 1, "end");
    }

    #[test]
    fn tail_ends_for_a_run_whose_pid_is_alive_but_whose_lock_nobody_holds() {
        let (_repo, _dir, mut t, lock) = live_run();
        assert!(!t.poll());
        assert!(!t.done);
        // Its pid (this test's) is alive, but the lock is gone: a pid reused by another
        // process keeps no stream going.
        drop(lock);
        assert!(t.poll());
        assert!(t.done);
        let end = format!("{:?}", t.queue.back().unwrap());
        assert!(end.contains("interrupted"), "{end}");
    }

    #[test]
    fn tail_does_not_block_on_an_events_file_swapped_for_a_fifo() {
        let (_repo, dir, mut t, _lock) = live_run();
        let events = dir.join(crate::runs::EVENTS_FILE);
        append(&events, b"{\"seq\":0,\"type\":\"run:started\"}\n");
        // Swapped for a FIFO after the check: the open must neither block nor read it.
        std::fs::remove_file(&events).unwrap();
        nix::unistd::mkfifo(&events, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        assert!(nuvira_workspace::open_plain_file(&events).is_err());
        assert!(!t.poll());
        assert!(!t.done);
    }

    #[test]
    fn event_summaries_carry_no_raw_bytes_of_the_file() {
        let line = br#"{"seq":3,"type":"step:failed","step_id":"a\r\n\u0000b","message":"x\ry","output":{"big":1}}"#;
        let ev = event_of(line).unwrap();
        let text = format!("{ev:?}");
        assert!(!text.contains("big"), "only the summary keys: {text}");
        assert!(event_of(b"[1,2]").is_none());
        assert!(event_of(b"{\"seq\":").is_none());
    }
}
