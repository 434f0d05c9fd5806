//! `nuvira ui`, the trace viewer: the real binary serving a real run history (runs made by
//! `nuvira run` with a scripted model and the local sandbox), read over loopback with a raw
//! HTTP/1.1 client (no client-side path normalisation, so traversal attempts reach the server
//! as written), and driven in headless Chromium over the DevTools protocol (a pipe, no
//! WebSocket): load, navigate to a run, see its failing step, a hostile run shown as text, and
//! a run in progress followed live while it moves.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LIB: &str = "pub fn a() -> u32 { 1 }\npub fn b() -> u32 { 2 }\n";

/// A run that edits `src/lib.rs` through the (scripted) model and then fails its check.
const FAILING_PLAN: &str = r#"goal: "make a return 10"
steps:
  - { id: look, module: inspect, config: { keywords: [fn], paths: [src] } }
  - { id: one, module: edit, depends_on: [look], config: { instructions: "make a return 10" } }
  - id: check
    module: execute
    depends_on: [one]
    config: { command: "grep -q '{ 20 }' src/lib.rs", sandbox: local }
"#;

const SCRIPT: &str = r#"- match: { schema: relevant_files }
  response:
    usage: { input_tokens: 50, output_tokens: 5 }
    json: { paths: [src/lib.rs] }
- match: { schema: edit_batch, last_user_contains: "make a return 10" }
  response:
    usage: { input_tokens: 100, output_tokens: 10 }
    json: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 1 }", replace: "{ 10 }" } ], explanation: "a" }
"#;

/// The live run's model: the `tweak` step's edit.
const LIVE_SCRIPT: &str = r#"- match: { schema: edit_batch, last_user_contains: "make b return 20" }
  response:
    usage: { input_tokens: 70, output_tokens: 7 }
    json: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 2 }", replace: "{ 20 }" } ], explanation: "b" }
"#;

/// A page's run view as text: every element with its attributes sorted, every text, in order
/// (what a user sees and what the page's state is, whatever order it was built in).
const CANON: &str = "(() => { const c = (n) => n.nodeType === 3 ? JSON.stringify(n.nodeValue) : n.nodeType !== 1 ? '' :     '<' + n.nodeName + ' ' + [...n.attributes].map(a => a.name + '=' + JSON.stringify(a.value)).sort().join(' ') + '>' +     [...n.childNodes].map(c).join('') + '</>'; return c(document.getElementById('run-body')); })()";

/// What a hostile run folder puts where a test name, a goal and a step message go.
const HOSTILE: &str =
    r#"<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">&amp;"#;

/// A temporary folder with a git repository `repo/`, the plan and the script.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("failing.yaml"), FAILING_PLAN).unwrap();
        std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/lib.rs"), LIB).unwrap();
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &["commit", "-qm", "init"],
        ] {
            let ok = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
                .args(args)
                .current_dir(&repo)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        }
        Self { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn repo(&self) -> PathBuf {
        self.path("repo")
    }

    /// `nuvira run PLAN --repo repo -q` with the scripted model, not waited for.
    fn spawn_run(&self, plan: &str) -> Child {
        self.spawn_run_with(plan, "script.yaml", &[])
    }

    /// [`spawn_run`](Self::spawn_run) with another script and more arguments.
    fn spawn_run_with(&self, plan: &str, script: &str, args: &[&str]) -> Child {
        Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
            .arg("run")
            .arg(self.path(plan))
            .arg("--repo")
            .arg(self.repo())
            .arg("-q")
            .args(args)
            .env("NUVIRA_SCRIPTED_LLM", self.path(script))
            .env_remove("NUVIRA_MODEL")
            .env_remove("NUVIRA_HISTORY")
            .env_remove("NUVIRA_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Runs the failing plan to its end; its run id.
    fn failing_run(&self) -> String {
        let status = self.spawn_run("failing.yaml").wait().unwrap();
        assert_eq!(status.code(), Some(1), "the check step fails");
        let runs = nuvira::runs::RunStore::open(&self.repo())
            .unwrap()
            .list()
            .unwrap();
        let run = runs
            .iter()
            .find(|r| r.meta.goal == "make a return 10")
            .unwrap();
        assert_eq!(run.status(), "failed");
        run.meta.id.clone()
    }

    /// A finished run folder written by hand as a hostile checkout would: the sample failing
    /// run's events with [`HOSTILE`] as its test name, its goal and its step message.
    fn hostile_run(&self) -> String {
        let id = "run-1-hostile";
        let dir = self.repo().join(".nuvira/runs").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let quoted = serde_json::to_string(HOSTILE).unwrap();
        let inner = &quoted[1..quoted.len() - 1];
        let mut lines = String::new();
        for ev in nuvira_report::sample::failing_run() {
            let line = serde_json::to_string(&ev)
                .unwrap()
                .replace("config::tests::loads_defaults", inner);
            lines.push_str(&line);
            lines.push('\n');
        }
        assert!(lines.contains("<script>"));
        std::fs::write(dir.join("events.jsonl"), lines).unwrap();
        let meta = json!({
            "format": 1, "id": id, "goal": HOSTILE, "status": "failed",
            "started_ms": 1_000, "ended_ms": 2_000, "duration_ms": 1_000, "pid": 0, "steps": 6
        });
        std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
        id.to_owned()
    }
}

/// `nuvira ui --repo REPO --port 0`, killed when dropped.
struct Ui {
    child: Child,
    /// `http://127.0.0.1:PORT/`, the first line it printed.
    url: String,
    port: u16,
}

impl Ui {
    fn start(repo: &Path) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
            .args(["ui", "--port", "0", "--repo"])
            .arg(repo)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first.trim().to_owned();
        let port = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|r| r.strip_suffix('/'))
            .unwrap_or_else(|| panic!("first line is the address: {first:?}"))
            .parse()
            .unwrap();
        Self { child, url, port }
    }

    /// `GET path` with `Host: 127.0.0.1:PORT`.
    fn get(&self, path: &str) -> Reply {
        self.get_as(path, &format!("127.0.0.1:{}", self.port), &[])
    }

    fn json(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(r.header("content-type").starts_with("application/json"));
        serde_json::from_str(&r.body).unwrap()
    }

    /// A raw HTTP/1.1 GET: the path is sent exactly as given.
    fn get_as(&self, path: &str, host: &str, headers: &[(&str, &str)]) -> Reply {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).unwrap();
        Reply::parse(&raw)
    }

    /// `GET path` of a server-sent event stream, read until `event: end` (20 s at most).
    fn sse(&self, path: &str, headers: &[(&str, &str)]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", self.port);
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        while !String::from_utf8_lossy(&got).contains("event: end\n") {
            let n = s
                .read(&mut buf)
                .expect("the stream ends with `end` in time");
            assert!(
                n > 0,
                "closed before `end`: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap()
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
struct Reply {
    status: u16,
    /// `name: value` lines, names lowercased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Self {
        let text = String::from_utf8_lossy(raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect::<Vec<_>>();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        };
        Self {
            status,
            headers,
            body,
        }
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

#[test]
fn ui_listens_on_127_0_0_1_only_and_answers_only_its_own_host() {
    let s = Setup::new();
    for host in ["0.0.0.0", "::", "::1", "localhost", "192.168.1.10"] {
        let out = Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
            .args(["ui", "--port", "0", "--host", host, "--repo"])
            .arg(s.repo())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--host {host}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("127.0.0.1 only"), "{err}");
        assert!(out.stdout.is_empty(), "nothing listened on {host}");
    }
    let ui = Ui::start(&s.repo());
    // A page elsewhere that resolves its own name to 127.0.0.1 (DNS rebinding) gets nothing.
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1", ""] {
        let r = ui.get_as("/api/runs", host, &[]);
        assert_eq!(r.status, 421, "Host {host:?}");
        assert!(!r.body.contains('['), "{}", r.body);
    }
    let r = ui.get_as("/api/runs", &format!("localhost:{}", ui.port), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.trim(), "[]");
    // The port is taken: exit 3, saying what to do.
    let out = Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
        .args(["ui", "--port", &ui.port.to_string(), "--repo"])
        .arg(s.repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port 0"));
    // The first run of the repository creates `.nuvira/runs` while the server runs: it shows.
    let id = s.failing_run();
    assert_eq!(ui.json("/api/runs")[0]["id"], id.as_str());

    let help = Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
        .args(["ui", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let (examples, codes) = (
        help.find("Examples:").unwrap(),
        help.find("Exit codes:").unwrap(),
    );
    assert!(examples < codes);
    assert_eq!(help[examples..codes].matches("\n  nuvira ui").count(), 2);
}

#[test]
fn ui_api_shows_a_recorded_run_with_its_failing_step_model_calls_and_diff() {
    let s = Setup::new();
    let id = s.failing_run();
    let ui = Ui::start(&s.repo());

    let runs = ui.json("/api/runs");
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["id"], id.as_str());
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["tokens"], 165);

    let d = ui.json(&format!("/api/runs/{id}"));
    let steps = d["report"]["steps"].as_array().unwrap();
    let status = |sid: &str| {
        steps.iter().find(|s| s["id"] == sid).unwrap()["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(status("look"), "succeeded");
    assert_eq!(status("check"), "failed");
    assert_eq!(d["layers"], json!([["look"], ["one"], ["check"]]));
    let calls = d["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["step"], "one");
    assert_eq!(calls[1]["input_tokens"], 100);
    assert_eq!(calls[1]["output_tokens"], 10);
    let diff = d["report"]["steps"][1]["file_changes"][0]["diff"]
        .as_str()
        .unwrap();
    assert!(diff.contains("+pub fn a() -> u32 { 10 }"), "{diff}");
    assert!(
        d["operations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["step"] == "check" && o["state"] == "failed")
    );

    let call = ui.json(&format!("/api/runs/{id}/calls/2"));
    assert_eq!(call["step"], "one");
    assert!(call["request"]["messages"].as_array().unwrap().len() >= 2);
    assert_eq!(ui.get(&format!("/api/runs/{id}/calls/9")).status, 404);

    // The page and its assets: embedded, from this server only, under a strict policy.
    let page = ui.get("/");
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").starts_with("text/html"));
    for needle in ["http:", "https:", "//cdn", "<style", "onload", "onclick"] {
        assert!(!page.body.contains(needle), "{needle} in the page");
    }
    let js = ui.get("/assets/app.js");
    assert!(js.header("content-type").starts_with("text/javascript"));
    assert!(!js.body.contains("innerHTML") && !js.body.contains("insertAdjacentHTML"));
    // No address but the SVG namespace's (a name, never fetched).
    let js_body = js.body.replace("'http://www.w3.org/2000/svg'", "");
    assert!(!js_body.contains("http://") && !js_body.contains("https://"));
    for path in [
        "/",
        "/assets/app.js",
        "/api/runs",
        "/nope",
        &format!("/api/runs/{id}"),
    ] {
        let r = ui.get(path);
        let csp = r.header("content-security-policy");
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe"),
            "{csp}"
        );
        assert_eq!(r.header("x-content-type-options"), "nosniff", "{path}");
    }
}

#[test]
fn ui_event_stream_sends_every_line_then_ends_and_resumes_from_last_event_id() {
    let s = Setup::new();
    let id = s.failing_run();
    let lines =
        std::fs::read_to_string(s.repo().join(".nuvira/runs").join(&id).join("events.jsonl"))
            .unwrap()
            .lines()
            .count();
    let ui = Ui::start(&s.repo());
    let path = format!("/api/runs/{id}/events");
    let all = ui.sse(&path, &[]);
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(
        all.to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    assert_eq!(all.matches("event: event\n").count(), lines);
    assert!(all.contains(r#"data: {"status":"failed"}"#), "{all}");
    assert!(all.contains(r#""type":"step:failed""#));
    // Reconnecting after the last event gets only the end.
    let last_id = all
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .next_back()
        .unwrap()
        .to_owned();
    let rest = ui.sse(&path, &[("Last-Event-ID", &last_id)]);
    assert_eq!(rest.matches("event: event\n").count(), 0, "{rest}");
    assert!(rest.contains("event: end"));
}

/// Appends bytes to a file.
fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn ui_live_refresh_folds_only_the_new_events_into_the_kept_state_and_gives_the_full_rebuilds_report()
 {
    let s = Setup::new();
    let done = s.failing_run();
    let runs = s.repo().join(".nuvira/runs");
    let lines: Vec<String> = std::fs::read_to_string(runs.join(&done).join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(lines.len() > 10, "{}", lines.len());
    // A run in progress (this test's pid is alive) whose events.jsonl the test writes as the
    // run would: the real run's lines, a few at a time.
    let id = "run-3-live";
    let dir = runs.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let meta = json!({"format": 1, "id": id, "goal": "g", "status": "running",
        "started_ms": 1, "pid": std::process::id(), "steps": 3});
    std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
    let events = dir.join("events.jsonl");
    let ui = Ui::start(&s.repo());
    let path = format!("/api/runs/{id}");
    // What `nuvira runs show` would rebuild from the whole file now.
    let full = || {
        let run = nuvira::runs::RunStore::open(&s.repo())
            .unwrap()
            .get(id)
            .unwrap();
        serde_json::to_value(run.report().unwrap()).unwrap()
    };
    let half = lines.len() / 2;
    let head: String = lines[..half].concat();
    append(&events, head.as_bytes());
    let d = ui.json(&path);
    assert_eq!(d["fold"]["events"], half);
    assert_eq!(d["fold"]["new_events"], half);
    assert_eq!(d["fold"]["bytes_read"], head.len());
    assert_eq!(d["fold"]["reused"], false);
    assert_eq!(d["report"], full());

    // Nothing new: nothing read, nothing folded, the same report.
    let d = ui.json(&path);
    assert_eq!(d["fold"]["new_events"], 0);
    assert_eq!(d["fold"]["bytes_read"], 0);
    assert_eq!(d["fold"]["reused"], true);
    assert_eq!(d["report"], full());

    // Model-call records: each parsed once, again only when it changes.
    let calls = dir.join("calls");
    std::fs::create_dir(&calls).unwrap();
    std::fs::copy(
        runs.join(&done).join("calls/0001.json"),
        calls.join("0001.json"),
    )
    .unwrap();
    let d = ui.json(&path);
    assert_eq!(d["fold"]["calls_read"], 1);
    assert_eq!(d["calls"].as_array().unwrap().len(), 1);
    std::fs::copy(
        runs.join(&done).join("calls/0002.json"),
        calls.join("0002.json"),
    )
    .unwrap();
    let d = ui.json(&path);
    assert_eq!(d["fold"]["calls_read"], 1, "only the new record is read");
    assert_eq!(d["calls"].as_array().unwrap().len(), 2);
    assert_eq!(d["calls"][1]["input_tokens"], 100);
    let d = ui.json(&path);
    assert_eq!(d["fold"]["calls_read"], 0);
    assert_eq!(d["calls"].as_array().unwrap().len(), 2);

    // N new events: N folded, only their bytes read, on top of the kept state.
    let last = lines.len() - 1;
    let more: String = lines[half..last].concat();
    append(&events, more.as_bytes());
    let d = ui.json(&path);
    assert_eq!(d["fold"]["new_events"], last - half);
    assert_eq!(d["fold"]["bytes_read"], more.len());
    assert_eq!(d["fold"]["events"], last);
    assert_eq!(d["fold"]["reused"], true);
    assert_eq!(d["report"], full());

    // A line whose newline is not written yet waits for it.
    let (torn, rest) = lines[last].split_at(20);
    append(&events, torn.as_bytes());
    let d = ui.json(&path);
    assert_eq!(d["fold"]["new_events"], 0);
    assert_eq!(d["fold"]["events"], last);
    append(&events, rest.as_bytes());
    let d = ui.json(&path);
    assert_eq!(d["fold"]["new_events"], 1);
    assert_eq!(d["fold"]["bytes_read"], rest.len());
    assert_eq!(d["fold"]["events"], lines.len());
    assert_eq!(d["report"], full());
    let ops = d["operations"].as_array().unwrap().len();
    assert_eq!(ops, 0, "no steps.jsonl yet");

    // A resume moves the stream aside and starts a new file: folded again from its start.
    std::fs::rename(&events, dir.join("events.1.jsonl")).unwrap();
    append(&events, lines[..3].concat().as_bytes());
    let d = ui.json(&path);
    assert_eq!(d["fold"]["reused"], false);
    assert_eq!(d["fold"]["events"], 3);
    assert_eq!(d["report"], full());

    // Once the run wrote its report, that is what is served (no state kept for it).
    std::fs::copy(
        runs.join(&done).join("report.json"),
        dir.join("report.json"),
    )
    .unwrap();
    let d = ui.json(&path);
    assert!(d.get("fold").is_none(), "{d}");
    assert_eq!(d["report"], full());
}

#[test]
fn ui_refuses_traversal_symlinked_runs_and_bad_ids() {
    let s = Setup::new();
    let id = s.failing_run();
    let runs = s.repo().join(".nuvira/runs");
    // Outside the history: a run folder and a file the viewer must never show.
    let outside = s.path("outside/run-2-evil");
    std::fs::create_dir_all(&outside).unwrap();
    let meta = json!({"format": 1, "id": "run-2-evil", "goal": "SECRET-GOAL", "status": "failed",
        "started_ms": 5, "pid": 0, "steps": 0});
    std::fs::write(outside.join("run.json"), meta.to_string()).unwrap();
    std::fs::write(s.path("outside/secret.txt"), "SECRET-FILE\n").unwrap();
    std::os::unix::fs::symlink(&outside, runs.join("run-2-evil")).unwrap();
    // A real run folder whose events file is a symlink to the secret.
    let linked = runs.join("run-3-linked");
    std::fs::create_dir_all(&linked).unwrap();
    let meta = json!({"format": 1, "id": "run-3-linked", "goal": "g", "status": "failed",
        "started_ms": 6, "pid": 0, "steps": 0});
    std::fs::write(linked.join("run.json"), meta.to_string()).unwrap();
    std::os::unix::fs::symlink(s.path("outside/secret.txt"), linked.join("events.jsonl")).unwrap();

    let ui = Ui::start(&s.repo());
    let listed = ui.get("/api/runs").body;
    assert!(
        !listed.contains("SECRET") && !listed.contains("run-2-evil"),
        "{listed}"
    );
    for path in [
        "/api/runs/run-2-evil".to_owned(),
        "/api/runs/run-2-evil/events".to_owned(),
        "/api/runs/../../outside/run-2-evil".to_owned(),
        "/api/runs/..%2F..%2Foutside%2Frun-2-evil".to_owned(),
        "/api/runs/run-x%2F..%2F..%2F..%2Foutside%2Frun-2-evil".to_owned(),
        "/api/runs/%2e%2e".to_owned(),
        "/api/runs/run-%00".to_owned(),
        format!("/api/runs/{id}/calls/..%2F..%2Frun.json"),
        format!("/api/runs/{id}/calls/1%2F..%2F..%2Frun.json"),
        format!("/api/runs/{id}/calls/-1"),
        "/assets/..%2F..%2F..%2FCargo.toml".to_owned(),
        "/assets/../../Cargo.toml".to_owned(),
        "/../../../../etc/passwd".to_owned(),
    ] {
        let r = ui.get(&path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert!(!r.body.contains("SECRET"), "{path}");
        assert!(
            !r.body.contains("[package]") && !r.body.contains("root:"),
            "{path}"
        );
    }
    // The linked run is shown, without what its symlink points at.
    let d = ui.get("/api/runs/run-3-linked");
    assert_eq!(d.status, 200);
    assert!(!d.body.contains("SECRET"), "{}", d.body);
    let stream = ui.sse("/api/runs/run-3-linked/events", &[]);
    assert!(!stream.contains("SECRET"), "{stream}");
    assert_eq!(stream.matches("event: event\n").count(), 0);
    // Read-only: nothing but GET.
    let mut c = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
    write!(
        c,
        "DELETE /api/runs/{id} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        ui.port
    )
    .unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    assert_eq!(Reply::parse(&raw).status, 405);
    assert!(runs.join(&id).join("run.json").is_file());
}

/// A child process killed if the test ends before it does.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// --- headless Chromium over the DevTools protocol --------------------------------------------

/// A headless Chromium driven over `--remote-debugging-pipe` (messages on fds 3 and 4, each
/// ended by a NUL byte), with one page attached.
struct Browser {
    child: Child,
    to: std::process::ChildStdin,
    from: mpsc::Receiver<Value>,
    next: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn launch(chrome: &Path) -> Self {
        let profile = tempfile::tempdir().unwrap();
        // fd 3 is what Chromium reads, fd 4 what it writes: the shell moves our pipes there.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chrome)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,1400",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let to = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buf = [0u8; 65536];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                pending.extend_from_slice(&buf[..n]);
                while let Some(i) = pending.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = pending.drain(..=i).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..i]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut b = Self {
            child,
            to,
            from,
            next: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = b.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_owned();
        b
    }

    /// Sends a command (to the page once attached) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        self.to.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates a JavaScript expression in the page (promises awaited); its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits (15 s at most, checking every 50 ms in the page) until `cond` is truthy; its
    /// value. Fails with the page's text when it never is.
    fn wait_for(&mut self, cond: &str, what: &str) -> Value {
        let expr = format!(
            "new Promise((done) => {{ const t0 = Date.now(); const tick = () => {{ let v = null; \
             try {{ v = ({cond}); }} catch (e) {{ v = null; }} \
             if (v) done(v); else if (Date.now() - t0 > 15000) done(null); else setTimeout(tick, 50); }}; tick(); }})"
        );
        let v = self.eval(&expr);
        if v.is_null() || v == json!(false) {
            let text = self.eval("document.body.innerText");
            panic!(
                "{what}: never happened; the page says:\n{}",
                text.as_str().unwrap_or("")
            );
        }
        v
    }

    fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn ui_in_headless_chromium_shows_a_failing_step_escapes_a_hostile_run_and_follows_a_live_run() {
    let Some(chrome) = nuvira_test_support::env::chromium() else {
        return;
    };
    let s = Setup::new();
    let failed = s.failing_run();
    let hostile = s.hostile_run();
    let ui = Ui::start(&s.repo());
    let mut b = Browser::launch(&chrome);

    // Load: the list of runs.
    b.navigate(&ui.url);
    b.wait_for(
        "document.querySelectorAll('#run-list tr.run').length === 2",
        "the list shows both runs",
    );
    // Navigate: click the failed run's link.
    b.eval(&format!(
        "document.querySelector('#run-list tr[data-run=\"{failed}\"] a.run-link').click()"
    ));
    b.wait_for(
        "document.querySelector('#dag g.node.failed[data-step=\"check\"]')",
        "the DAG shows the check step failed",
    );
    let seen = b.eval(
        "({ look: document.querySelector('#dag g.node[data-step=\"look\"]').getAttribute('class'), \
            row: document.querySelector('#step-table tr[data-step=\"check\"] td.result').textContent, \
            tokens: [...document.querySelectorAll('#call-table td.input-tokens')].map(e => e.textContent), \
            diff: document.querySelector('#changes pre.diff').textContent, \
            hash: location.hash })",
    );
    assert_eq!(seen["look"], "node succeeded");
    assert!(
        seen["row"]
            .as_str()
            .unwrap()
            .contains("failed with exit code 1"),
        "{seen}"
    );
    assert_eq!(seen["tokens"], json!(["50", "100"]));
    assert!(seen["diff"].as_str().unwrap().contains("{ 10 }"), "{seen}");
    assert_eq!(seen["hash"], format!("#/run/{failed}"));
    // A model call in full.
    b.eval("document.querySelectorAll('#call-table button.show-call')[1].click()");
    b.wait_for(
        "(document.querySelector('#call-detail pre.answer') || {}).textContent",
        "the second call's answer is shown",
    );

    // A hostile run folder: its strings are shown as text, nothing of them runs or loads.
    b.eval("location.hash = '#/'");
    b.wait_for(
        &format!("document.querySelector('#run-list tr[data-run=\"{hostile}\"] a.run-link')"),
        "the list is back",
    );
    let goal = b.eval(&format!(
        "document.querySelector('#run-list tr[data-run=\"{hostile}\"] td.goal').textContent"
    ));
    assert_eq!(goal, HOSTILE);
    b.eval(&format!(
        "document.querySelector('#run-list tr[data-run=\"{hostile}\"] a.run-link').click()"
    ));
    let name = b.wait_for(
        "(document.querySelector('#tests h3.test-name') || {}).textContent",
        "the hostile run's test failure is shown",
    );
    assert_eq!(name, HOSTILE);
    let page = b.eval(
        "({ pwned: window.__pwned === undefined ? null : window.__pwned, \
            scripts: document.querySelectorAll('script').length, \
            imgs: document.querySelectorAll('img').length, \
            handlers: document.querySelectorAll('[onerror]').length, \
            failed: document.querySelector('#dag g.node.failed[data-step=\"test\"]') !== null })",
    );
    assert_eq!(
        page,
        json!({"pwned": null, "scripts": 1, "imgs": 0, "handlers": 0, "failed": true})
    );

    // A run in progress, followed live: its `wait` and `hold` steps each wait for a file the
    // test creates once the page shows the step running (30 s at most, so that a failing test
    // leaves no run behind); `tweak` asks the (scripted) model for an edit in between.
    let (go, go2) = (s.path("go"), s.path("go2"));
    let live_plan = format!(
        r#"goal: "follow me live"
steps:
  - {{ id: first, module: execute, config: {{ command: "true", sandbox: local }} }}
  - id: wait
    module: execute
    depends_on: [first]
    config: {{ command: "for i in $(seq 600); do [ -f '{go}' ] && exit 0; sleep 0.05; done; exit 1", sandbox: local }}
  - {{ id: tweak, module: edit, depends_on: [wait], config: {{ instructions: "make b return 20" }} }}
  - id: hold
    module: execute
    depends_on: [tweak]
    config: {{ command: "for i in $(seq 600); do [ -f '{go2}' ] && exit 0; sleep 0.05; done; exit 1", sandbox: local }}
  - {{ id: last, module: execute, depends_on: [hold], config: {{ command: "true", sandbox: local }} }}
"#,
        go = go.display(),
        go2 = go2.display()
    );
    std::fs::write(s.path("live.yaml"), live_plan).unwrap();
    std::fs::write(s.path("live-script.yaml"), LIVE_SCRIPT).unwrap();
    let mut run = Reaped(s.spawn_run_with(
        "live.yaml",
        "live-script.yaml",
        // The failing run's edit is still in the tree.
        &["--allow-dirty"],
    ));
    b.eval("location.hash = '#/'");
    let link = b.wait_for(
        "(() => { const tr = [...document.querySelectorAll('#run-list tr.run.running')].find(t => t.querySelector('td.goal').textContent === 'follow me live'); return tr ? tr.getAttribute('data-run') : null; })()",
        "the list shows the live run as running",
    );
    let live_id = link.as_str().unwrap().to_owned();
    b.eval(&format!(
        "document.querySelector('#run-list tr[data-run=\"{live_id}\"] a.run-link').click()"
    ));
    b.wait_for(
        "document.querySelector('#dag g.node.running[data-step=\"wait\"]') && document.querySelector('#dag g.node.pending[data-step=\"hold\"]') && document.querySelector('#operations details')",
        "the page shows the wait step running",
    );
    // Marks this page and the nodes that will change (a reload or a redraw would lose the
    // marks), opens the operation records and selects a step, as a user would.
    b.eval(
        "window.__same_page = 7; \
         document.querySelector('#dag g.node[data-step=\"wait\"]').__mark = 'node'; \
         document.querySelector('#step-table tr[data-step=\"hold\"]').__mark = 'row'; \
         document.querySelector('.timeline .row[data-step=\"wait\"]').__mark = 'bar'; \
         document.querySelector('#operations details').__mark = 'ops'; \
         document.querySelector('#operations details').open = true; \
         document.querySelector('#dag g.node[data-step=\"last\"]').dispatchEvent(new MouseEvent('click', { bubbles: true })); \
         true",
    );
    let marks = "({ page: window.__same_page, \
        node: document.querySelector('#dag g.node[data-step=\"wait\"]').__mark, \
        row: document.querySelector('#step-table tr[data-step=\"hold\"]').__mark, \
        bar: document.querySelector('.timeline .row[data-step=\"wait\"]').__mark, \
        ops: document.querySelector('#operations details').__mark, \
        open: document.querySelector('#operations details').open, \
        selected: [...document.querySelectorAll('#step-table tr.selected')].map(t => t.getAttribute('data-step')) })";
    let marked = json!({"page": 7, "node": "node", "row": "row", "bar": "bar", "ops": "ops",
        "open": true, "selected": ["last"]});
    assert_eq!(b.eval(marks), marked);
    std::fs::write(&go, "").unwrap();
    // The run goes on (`hold` waits): the page moved while the run is still in progress, and
    // the model call of `tweak` got its row.
    b.wait_for(
        "document.querySelector('#dag g.node.succeeded[data-step=\"wait\"]') && document.querySelector('#dag g.node.running[data-step=\"hold\"]') && document.querySelector('#step-table tr.step.running[data-step=\"hold\"]') && document.querySelector('#call-table tr.call') && document.getElementById('live').textContent === 'following'",
        "the page shows, live, wait succeeded, hold running and the model call",
    );
    // Updated in place: the same nodes, the details still open, the step still selected.
    assert_eq!(b.eval(marks), marked);
    b.eval("document.querySelector('#call-table tr.call').__mark = 'call'; true");
    std::fs::write(&go2, "").unwrap();
    b.wait_for(
        "document.querySelector('#dag g.node.succeeded[data-step=\"last\"]') && document.querySelector('#dag g.node.succeeded[data-step=\"hold\"]')",
        "the page shows the run's last steps succeeded",
    );
    b.wait_for(
        "document.getElementById('live').textContent === 'run over: succeeded'",
        "the page says the run is over",
    );
    let after = b.eval(
        "({ same: window.__same_page, badge: document.querySelector('#run-body h1 .badge').textContent, \
            call: document.querySelector('#call-table tr.call').__mark, \
            finished: [...document.querySelectorAll('#events li')].some(li => li.textContent.includes('run:completed')) })",
    );
    assert_eq!(
        after,
        json!({"same": 7, "badge": "succeeded", "call": "call", "finished": true})
    );
    assert_eq!(b.eval(marks), marked);
    // What it shows in the end is what a fresh load of the run shows (with the same step
    // selected and the same details open): attributes, texts, order.
    let live_page = b.eval(CANON);
    b.navigate("about:blank");
    b.navigate(&format!("{}#/run/{live_id}", ui.url));
    b.wait_for(
        "document.getElementById('live').textContent === 'run over: succeeded' && window.__same_page === undefined",
        "a fresh load shows the run over",
    );
    b.eval(
        "document.querySelector('#operations details').open = true; \
         document.querySelector('#dag g.node[data-step=\"last\"]').dispatchEvent(new MouseEvent('click', { bubbles: true })); \
         true",
    );
    let fresh = b.eval(CANON);
    assert!(fresh.as_str().unwrap().contains("tweak"), "{fresh}");
    assert_eq!(live_page, fresh);
    assert_eq!(run.0.wait().unwrap().code(), Some(0));
}
