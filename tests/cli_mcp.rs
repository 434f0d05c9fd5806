//! `nuvira mcp` driven by real MCP clients: the official Python SDK (`tests/mcp/py_client.py`)
//! and the TypeScript SDK (`tests/mcp/ts_client.mjs`), and raw JSON-RPC lines for requests no
//! SDK would send. The SDK tests skip without the SDKs, unless `NUVIRA_REQUIRE_MCP=1`.

use nuvira_test_support::env::{mcp_npm_dir, mcp_python_ready, pytest_ready};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn nuvira_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("nuvira")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp")).join(name)
}

/// A small pytest project with one passing and one failing test, and two plans.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::write(p.join("src/lib.py"), "def one():\n    return 1\n").unwrap();
    std::fs::write(p.join("src/__init__.py"), "").unwrap();
    std::fs::write(p.join("pytest.ini"), "[pytest]\n").unwrap();
    std::fs::write(
        p.join("test_lib.py"),
        "from src.lib import one\n\ndef test_one():\n    assert one() == 1\n\ndef test_fails():\n    assert one() == 3, \"one is not three\"\n",
    )
    .unwrap();
    std::fs::write(
        p.join("slow.yaml"),
        r#"goal: change one, then wait
steps:
  - id: fix
    module: edit
    config:
      edits:
        - { strategy: search-replace, path: src/lib.py, search: "return 1", replace: "return 5" }
  - id: wait
    module: execute
    depends_on: [fix]
    config: { command: "sleep 300" }
"#,
    )
    .unwrap();
    std::fs::write(
        p.join("plan.yaml"),
        "goal: g\nsteps:\n  - id: look\n    module: inspect\n  - id: rep\n    module: report\n    depends_on: [look]\n",
    )
    .unwrap();
    dir
}

/// Runs a scenario of the Python client; its JSON output.
fn python(repo: &Path, scenario: &str, args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(script("py_client.py"))
        .arg(nuvira_bin())
        .arg(repo)
        .arg(scenario)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python client `{scenario}` failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bad output of `{scenario}`: {e}: {stdout}"))
}

const TOOLS: [&str; 9] = [
    "apply_edits",
    "graph",
    "inspect",
    "preview_edits",
    "report",
    "rollback",
    "run_plan",
    "run_tests",
    "validate_plan",
];

#[test]
fn mcp_python_client_lists_every_tool_with_input_and_output_schemas() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "tools", &[]);
    assert_eq!(out["tools"], json!(TOOLS));
    for t in TOOLS {
        assert_eq!(out["schemas"][t]["type"], "object", "{t}: {out}");
        assert_eq!(out["output_schemas"][t], true, "{t} has no output schema");
    }
    // Outputs are typed by the API's own types: the TestResult inside run_tests' result has
    // its fields (not an untyped object).
    let tests = &out["output_schema"]["run_tests"];
    let reference = tests["properties"]["result"]["$ref"]
        .as_str()
        .unwrap_or_else(|| panic!("{tests}"));
    let name = reference.rsplit('/').next().unwrap();
    let defs = tests
        .get("$defs")
        .or_else(|| tests.get("definitions"))
        .unwrap();
    for field in ["passed", "failed", "failures", "success"] {
        assert!(
            defs[name]["properties"].get(field).is_some(),
            "{field} missing in {name}: {tests}"
        );
    }
    // The schema comes from the argument type: `edits` is required, a typo is refused.
    assert_eq!(out["schemas"]["apply_edits"]["required"], json!(["edits"]));
    assert_eq!(
        out["schemas"]["apply_edits"]["additionalProperties"],
        json!(false)
    );
}

#[test]
fn mcp_python_client_previews_applies_and_rolls_back_an_edit() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let lib = repo.path().join("src/lib.py");
    let out = python(repo.path(), "edit", &[lib.to_str().unwrap()]);
    assert_eq!(out["preview_valid"], true);
    assert!(
        out["diff"].as_str().unwrap().contains("+    return 2"),
        "{out}"
    );
    assert_eq!(out["after_apply"], "def one():\n    return 2\n");
    assert!(
        out["transaction_id"]
            .as_str()
            .unwrap()
            .starts_with("apply-"),
        "{out}"
    );
    // A rejected batch is a tool error with the CLI's words, and writes nothing.
    assert_eq!(out["bad_is_error"], true);
    assert!(
        out["bad_text"]
            .as_str()
            .unwrap()
            .contains("edits rejected (1 problem(s)); nothing was written"),
        "{out}"
    );
    // A path out of the repository is refused.
    assert_eq!(out["outside_is_error"], true, "{out}");
    assert!(!repo.path().parent().unwrap().join("escape.txt").exists());
    assert_eq!(out["rolled_back"]["restored"], json!(["src/lib.py"]));
    assert_eq!(
        std::fs::read_to_string(&lib).unwrap(),
        "def one():\n    return 1\n"
    );
}

#[test]
fn mcp_python_client_runs_tests_and_gets_structured_failures() {
    if !mcp_python_ready() || !pytest_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "tests", &[]);
    let run = &out["run"];
    assert_eq!(run["success"], false, "{out}");
    assert_eq!(run["passed"], 1);
    assert_eq!(run["failed"], 1);
    let failure = &run["failures"][0];
    assert_eq!(failure["name"], "test_lib.py::test_fails");
    assert_eq!(failure["file"], "test_lib.py");
    assert_eq!(failure["line"], 7);
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("one is not three")
    );
    assert_eq!(run["result"]["sandbox"]["kind"], "local");
    // Asking for more network than the server was started with is a tool error.
    assert_eq!(out["wider_is_error"], true);
    assert!(
        out["wider_text"]
            .as_str()
            .unwrap()
            .contains("`network: host` is wider than this server allows"),
        "{out}"
    );
}

#[test]
fn mcp_a_docker_server_refuses_a_client_asking_for_the_local_sandbox() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "refuse-local", &[]);
    assert_eq!(out["is_error"], true);
    assert!(
        out["text"]
            .as_str()
            .unwrap()
            .contains("it was started with --sandbox docker"),
        "{out}"
    );
}

#[test]
fn mcp_python_client_cancelling_a_run_rolls_its_edits_back() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "cancel", &["slow.yaml"]);
    // The client cancelled after the progress notification of the written edit...
    assert!(
        out["progress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().unwrap().contains("`fix` wrote its edits")),
        "{out}"
    );
    // ...and by the time the server exited, the edit was undone.
    assert_eq!(
        std::fs::read_to_string(repo.path().join("src/lib.py")).unwrap(),
        "def one():\n    return 1\n"
    );
    assert!(!repo.path().join(".nuvira/lock").exists() || lock_free(repo.path()));
}

/// Whether a new writer can take the repository lock (the server released it).
fn lock_free(repo: &Path) -> bool {
    Command::new(nuvira_bin())
        .args(["rollback", "--repo"])
        .arg(repo)
        .output()
        .is_ok_and(|o| !String::from_utf8_lossy(&o.stderr).contains("lock"))
}

#[test]
fn mcp_python_client_validates_and_graphs_plans_inside_the_repository_only() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "plan", &["plan.yaml"]);
    assert_eq!(out["validate"]["valid"], true);
    assert_eq!(out["validate"]["steps"], 2);
    assert_eq!(out["graph"]["graph"]["order"], json!(["look", "rep"]));
    assert_eq!(out["bad"]["valid"], false);
    assert_eq!(out["bad"]["errors"][0]["kind"], "unknown-module");
    assert_eq!(out["outside_is_error"], true);
    assert!(
        out["outside_text"]
            .as_str()
            .unwrap()
            .contains("leaves the repository"),
        "{out}"
    );
}

#[test]
fn mcp_typescript_client_lists_tools_previews_applies_and_runs_tests() {
    let Some(npm) = mcp_npm_dir("@modelcontextprotocol/sdk") else {
        return;
    };
    if !pytest_ready() {
        return;
    }
    let repo = project();
    let out = Command::new("node")
        .arg(script("ts_client.mjs"))
        .arg(nuvira_bin())
        .arg(repo.path())
        .env("NODE_PATH", npm.join("node_modules"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ts client failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(out["tools"], json!(TOOLS));
    assert_eq!(out["preview_valid"], true);
    assert_eq!(out["applied"], 1);
    // After the edit `one()` is 2: both tests fail, each reported.
    assert_eq!(out["tests_failed"], 2);
    assert_eq!(out["failure_name"], "test_lib.py::test_one");
    // Arguments against the schema are refused, naming what is wrong.
    assert!(
        out["malformed_error"]
            .as_str()
            .unwrap()
            .contains("expected a sequence"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("src/lib.py")).unwrap(),
        "def one():\n    return 2\n"
    );
}

/// A session over raw stdio lines.
struct Raw {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Raw {
    fn start(repo: &Path) -> Self {
        let mut child = Command::new(nuvira_bin())
            .args(["mcp", "--sandbox", "local", "--repo"])
            .arg(repo)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Self { child, out }
    }
    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }
    fn initialize(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
        let init = self.recv();
        assert_eq!(init["result"]["serverInfo"]["name"], "nuvira", "{init}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }
}

#[test]
fn mcp_malformed_requests_get_errors_and_the_server_keeps_serving() {
    let repo = project();
    let mut s = Raw::start(repo.path());
    s.initialize();
    // Arguments that do not match the schema (an unknown key, a wrong type, a missing key)
    // are tool errors naming what is wrong, as the protocol asks since 2025-11-25 (SEP-1303:
    // so a model can correct its call); nothing runs.
    for (id, args, says) in [
        (
            1,
            json!({"edits": [], "colour": "red"}),
            "unknown field `colour`",
        ),
        (2, json!({"edits": "not a list"}), "expected a sequence"),
        (3, json!({}), "missing field `edits`"),
    ] {
        s.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "preview_edits", "arguments": args}})
            .to_string(),
        );
        let r = s.recv();
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"]["isError"], true, "{r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(says), "{says}: {r}");
    }
    // An unknown tool, an unknown method.
    s.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}"#);
    let r = s.recv();
    assert!(
        r["error"].is_object() || r["result"]["isError"] == true,
        "{r}"
    );
    s.send(r#"{"jsonrpc":"2.0","id":5,"method":"no/such/method","params":{}}"#);
    assert_eq!(s.recv()["error"]["code"], -32601);
    // Not JSON at all, then a deep nest, then a valid call: still answered.
    s.send("{this is not json");
    s.send(&format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)));
    s.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#);
    let mut r = s.recv();
    while r.get("id") != Some(&json!(6)) {
        r = s.recv();
    }
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 9, "{r}");
    drop(s.child.stdin.take());
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn mcp_python_client_works_over_streamable_http_on_loopback() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    let out = python(repo.path(), "http", &[]);
    assert!(
        out["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{out}"
    );
    assert_eq!(out["tools"], json!(TOOLS));
    assert_eq!(out["preview_valid"], true);
}

#[test]
fn mcp_http_refuses_a_non_loopback_address_without_allow_remote() {
    let repo = project();
    let out = Command::new(nuvira_bin())
        .args(["mcp", "--http", "0.0.0.0:0", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a loopback address"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mcp_refuses_a_missing_repository_like_every_command() {
    let out = Command::new(nuvira_bin())
        .args(["mcp", "--repo", "/no/such/folder"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("repository `/no/such/folder` does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mcp_python_client_reads_the_run_history_as_nuvira_runs_resources_and_nothing_else() {
    if !mcp_python_ready() {
        return;
    }
    let repo = project();
    // A recorded run of the inspect + report plan.
    let run = Command::new(nuvira_bin())
        .args(["run", "plan.yaml", "-q", "--repo"])
        .arg(repo.path())
        .current_dir(repo.path())
        .env_remove("NUVIRA_HISTORY")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ids: Vec<String> = std::fs::read_dir(repo.path().join(".nuvira/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run-"))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let out = python(repo.path(), "resources", &[]);
    let uri = format!("nuvira://runs/{}", ids[0]);
    assert_eq!(out["runs"], json!([uri]), "{out}");
    let report = &out["reports"][&uri];
    assert_eq!(report["goal"], "g", "{report}");
    let steps: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        steps.contains(&"look") && steps.contains(&"rep"),
        "{report}"
    );
    for (bad, why) in out["refused"].as_object().unwrap() {
        assert!(why.is_string(), "{bad} was served: {out}");
    }
    assert!(
        out["refused"]["nuvira://runs/../../etc/passwd"]
            .as_str()
            .unwrap()
            .contains("not a run id"),
        "{out}"
    );
}
