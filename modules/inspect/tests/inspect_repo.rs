//! Inspection of real trees: a small Rust + TypeScript repository built in a temp folder, and
//! this repository itself.

use nuvira_api::{EventKind, Module, PlanStep, StepContext, StepOutput};
use nuvira_inspect::{
    Hooks, InspectError, InspectModule, InspectOptions, inspect,
    walk::{WalkOptions, walk},
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// A small Rust crate with a web front end, plus the things inspection must not read.
/// Returns the repo and a folder outside it (kept alive by the caller).
fn demo_repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(
        r,
        "Cargo.toml",
        "[package]\nname = \"demo-app\"\nversion = \"0.1.0\"\n",
    );
    write(
        r,
        "src/lib.rs",
        "//! Demo.\npub mod config;\npub mod server;\n",
    );
    write(
        r,
        "src/config.rs",
        r#"use std::collections::BTreeMap;

/// Parsed settings.
pub struct Config {
    pub values: BTreeMap<String, String>,
}

impl Config {
    pub fn validate(&self) -> bool {
        !self.values.is_empty()
    }
}

/// Reads `key = value` lines.
pub fn parse_config(text: &str) -> Config {
    let values = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Config { values }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses() {
        assert!(super::parse_config("a = 1").validate());
    }
}
"#,
    );
    write(
        r,
        "src/server.rs",
        "use crate::config::parse_config;\n\npub fn start(text: &str) {\n    let c = parse_config(text);\n    let d = parse_config(text);\n    let _ = (c, d);\n}\n",
    );
    let many_calls = "    parse_config(\"a = 1\");\n".repeat(12);
    write(
        r,
        "tests/config_test.rs",
        format!(
            "use demo_app::config::parse_config;\n\n#[test]\nfn parse_config_works() {{\n{many_calls}}}\n"
        ),
    );
    write(
        r,
        "tests/server_test.rs",
        "#[test]\nfn starts() { demo_app::server::start(\"\"); }\n",
    );
    write(
        r,
        "web/src/api.ts",
        "import { request } from './http';\n\nexport interface User { id: string }\n\nexport function parseConfig(text: string): Record<string, string> {\n  return Object.fromEntries(text.split('\\n').map((l) => l.split('=')));\n}\n\nexport class ApiClient {\n  fetchUser(id: string): Promise<User> {\n    return request(`/users/${id}`);\n  }\n}\n",
    );
    write(
        r,
        "web/src/api.test.ts",
        "import { parseConfig } from './api';\n\ntest('parses', () => {\n  expect(parseConfig('a=1')).toEqual({ a: '1' });\n});\n",
    );
    write(
        r,
        "web/src/http.ts",
        "export const request = (url: string) => fetch(url).then((r) => r.json());\n",
    );
    write(
        r,
        "README.md",
        "# demo\n\nSettings are read by parse_config.\n",
    );
    // Ignored by .gitignore: must not be listed or read.
    write(r, ".gitignore", "ignored/\n*.log\n");
    write(
        r,
        "ignored/secret.rs",
        "pub fn parse_config() {}\n".repeat(20),
    );
    write(r, "debug.log", "parse_config parse_config parse_config\n");
    // Oversized (over the 100 KB cap) and binary files: listed but never ranked.
    write(
        r,
        "src/generated.rs",
        "pub fn parse_config_generated() {}\n".repeat(4000),
    );
    let mut bin = b"parse_config\0\0\x01\x02".to_vec();
    bin.extend(std::iter::repeat_n(0u8, 64));
    write(r, "assets/parse_config.bin", bin);
    // Symlinks leaving the root: a file and a folder.
    write(
        outside.path(),
        "leak.rs",
        "pub fn parse_config() {} // outside\n",
    );
    write(outside.path(), "dir/leak2.rs", "pub fn parse_config() {}\n");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.path().join("leak.rs"), r.join("src/leak.rs")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("dir"), r.join("outside_dir")).unwrap();
        // A symlink to a file inside the root is fine.
        std::os::unix::fs::symlink(r.join("src/server.rs"), r.join("server_link.rs")).unwrap();
    }
    // Nuvira's own state and git internals, visible only with hidden files on.
    write(r, ".nuvira/journal.json", "{\"parse_config\": 1}\n");
    write(r, ".git/HEAD", "ref: refs/heads/main\n");
    write(r, ".github/workflows/ci.yml", "name: ci\n");
    (dir, outside)
}

fn run(root: &Path, goal: &str, options: &InspectOptions) -> nuvira_api::InspectionResult {
    inspect(root, goal, options, &Hooks::none()).unwrap()
}

#[test]
fn the_file_defining_the_goal_identifier_ranks_first() {
    let (dir, _outside) = demo_repo();
    let r = run(
        dir.path(),
        "Rename parse_config to load_config",
        &InspectOptions::default(),
    );
    assert_eq!(
        r.relevant_paths[0], "src/config.rs",
        "{:?}",
        r.relevant_paths
    );
    // The test file calls it twelve times but defines nothing: it must rank below.
    let pos = |p: &str| r.relevant_paths.iter().position(|x| x == p);
    assert!(pos("tests/config_test.rs").unwrap() > 0);
    assert!(pos("src/server.rs").is_some());

    let top = &r.artifacts[0];
    assert_eq!(top.language.as_deref(), Some("rust"));
    let syms: Vec<(&str, &str)> = top
        .symbols
        .iter()
        .map(|s| (s.name.as_str(), s.kind.as_str()))
        .collect();
    for want in [
        ("Config", "struct"),
        ("Config::validate", "method"),
        ("parse_config", "function"),
    ] {
        assert!(syms.contains(&want), "{want:?} missing from {syms:?}");
    }
    assert_eq!(top.imports, ["std::collections::BTreeMap"]);
    // In-file #[cfg(test)] and the tests/ file naming the module; not the unrelated one.
    assert_eq!(top.test_files, ["src/config.rs", "tests/config_test.rs"]);
    assert!(
        top.content
            .as_deref()
            .unwrap()
            .contains("pub fn parse_config")
    );
    assert!(r.artifacts.iter().all(|a| a.score > 0.0));
    assert!(r.artifacts.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn typescript_goal_ranks_the_defining_module_and_finds_its_test() {
    let (dir, _outside) = demo_repo();
    let r = run(
        dir.path(),
        "make parseConfig in the api client trim values",
        &InspectOptions::default(),
    );
    assert_eq!(
        r.relevant_paths[0], "web/src/api.ts",
        "{:?}",
        r.relevant_paths
    );
    let top = &r.artifacts[0];
    assert_eq!(top.test_files, ["web/src/api.test.ts"]);
    assert!(
        top.symbols
            .iter()
            .any(|s| s.name == "ApiClient::fetchUser" && s.kind == "method")
    );
    assert_eq!(top.imports, ["./http"]);
}

#[test]
fn ignored_binary_oversized_and_escaping_files_are_never_ranked() {
    let (dir, _outside) = demo_repo();
    let r = run(dir.path(), "parse_config", &InspectOptions::default());
    for bad in [
        "ignored/secret.rs",
        "debug.log",
        "src/generated.rs",
        "assets/parse_config.bin",
        "src/leak.rs",
        "outside_dir/leak2.rs",
        ".nuvira/journal.json",
    ] {
        assert!(
            !r.relevant_paths.iter().any(|p| p == bad),
            "{bad} ranked: {:?}",
            r.relevant_paths
        );
    }
    // .gitignore'd files and escaping symlinks are not even listed.
    for unlisted in [
        "ignored/",
        "debug.log",
        "leak.rs",
        "leak2.rs",
        ".nuvira",
        ".git/",
    ] {
        assert!(
            !r.file_tree.contains(unlisted),
            "{unlisted} in tree:\n{}",
            r.file_tree
        );
    }
    // Oversized and binary files are listed (they exist) but not read.
    assert!(r.file_tree.contains("generated.rs"), "{}", r.file_tree);
    assert!(r.file_tree.contains("parse_config.bin"), "{}", r.file_tree);
    assert_eq!(r.stats.inspected_files, r.stats.total_files - 2);
    assert_eq!(r.stats.errors, 0);
    // A symlink to a file inside the root is followed.
    #[cfg(unix)]
    assert!(
        r.relevant_paths.iter().any(|p| p == "server_link.rs"),
        "{:?}",
        r.relevant_paths
    );
}

#[test]
fn the_read_cap_is_configurable() {
    let (dir, _outside) = demo_repo();
    let options = InspectOptions::default().with_max_file_bytes(1024 * 1024);
    let r = run(dir.path(), "parse_config", &options);
    assert!(r.relevant_paths.iter().any(|p| p == "src/generated.rs"));
}

#[test]
fn walk_skips_git_and_nuvira_even_with_hidden_files_on() {
    let (dir, _outside) = demo_repo();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let out = walk(
        &root,
        &WalkOptions {
            hidden: true,
            ..WalkOptions::default()
        },
        &|| false,
    );
    let rels: Vec<&str> = out.files.iter().map(|f| f.rel.as_str()).collect();
    assert!(rels.contains(&".github/workflows/ci.yml"), "{rels:?}");
    assert!(rels.contains(&".gitignore"));
    assert!(
        !rels
            .iter()
            .any(|r| r.starts_with(".git/") || r.starts_with(".nuvira/")),
        "{rels:?}"
    );
    assert!(rels.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
    // Stopping early is reported.
    let stopped = walk(&root, &WalkOptions::default(), &|| true);
    assert!(stopped.stopped);
}

#[test]
fn restricting_paths_limits_the_walk_and_rejects_escapes() {
    let (dir, _outside) = demo_repo();
    let options = InspectOptions::default().with_paths(vec!["web".into()]);
    let r = run(dir.path(), "parse_config parseConfig", &options);
    assert!(!r.relevant_paths.is_empty());
    assert!(
        r.relevant_paths.iter().all(|p| p.starts_with("web/")),
        "{:?}",
        r.relevant_paths
    );
    assert_eq!(r.stats.total_files, 3);

    // The root .gitignore still applies below a restricted folder, and a file can be named.
    write(dir.path(), "web/src/trace.log", "parseConfig parseConfig\n");
    let r = run(dir.path(), "parseConfig", &options);
    assert!(!r.file_tree.contains("trace.log"), "{}", r.file_tree);
    let one = InspectOptions::default().with_paths(vec!["web/src/api.ts".into(), "src/".into()]);
    let r = run(dir.path(), "parseConfig parse_config", &one);
    assert!(
        r.relevant_paths.contains(&"web/src/api.ts".to_owned()),
        "{:?}",
        r.relevant_paths
    );
    assert!(
        !r.relevant_paths
            .iter()
            .any(|p| p.starts_with("web/src/api.test")),
        "{:?}",
        r.relevant_paths
    );
    assert!(
        r.relevant_paths.contains(&"src/config.rs".to_owned()),
        "{:?}",
        r.relevant_paths
    );

    for (bad, why) in [
        ("../etc", "stay inside"),
        ("/etc", "stay inside"),
        ("nope", "does not exist"),
        ("outside_dir", "outside the workspace"),
        (".nuvira", "never inspected"),
    ] {
        let options = InspectOptions::default().with_paths(vec![bad.into()]);
        let err = inspect(dir.path(), "x", &options, &Hooks::none()).unwrap_err();
        assert!(matches!(err, InspectError::Path { .. }), "{bad}: {err}");
        assert!(
            err.to_string().contains(why) && err.to_string().contains(bad),
            "{bad}: {err}"
        );
    }
    let err = inspect(
        &dir.path().join("missing"),
        "x",
        &InspectOptions::default(),
        &Hooks::none(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn events_report_scanning_found_files_and_completion() {
    let (dir, _outside) = demo_repo();
    let seen = Mutex::new(Vec::new());
    let emit = |k: EventKind| seen.lock().unwrap().push(k);
    let hooks = Hooks {
        emit: &emit,
        stop: &|| false,
    };
    let options = InspectOptions::default().with_max_files(3);
    let r = inspect(dir.path(), "parse_config", &options, &hooks).unwrap();
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.first().unwrap().name(), "inspect:scanning");
    let found: Vec<&str> = seen
        .iter()
        .filter_map(|k| match k {
            EventKind::InspectFileFound { path, .. } => Some(path.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(found, r.relevant_paths);
    assert_eq!(found.len(), 3);
    match seen.last().unwrap() {
        EventKind::InspectCompleted {
            artifacts,
            total_bytes,
        } => {
            assert_eq!(*artifacts, 3);
            assert!(*total_bytes > 1000);
        }
        other => panic!("last event {}", other.name()),
    }
}

#[derive(Default)]
struct Collect(Mutex<Vec<(Option<String>, String)>>);

impl nuvira_api::EventSink for Collect {
    fn emit(&self, step: Option<&str>, kind: EventKind) {
        self.0
            .lock()
            .unwrap()
            .push((step.map(str::to_owned), kind.name().to_owned()));
    }
}

#[test]
fn the_module_runs_a_step_with_its_config_and_rejects_bad_config() {
    let (dir, _outside) = demo_repo();
    let module = InspectModule::new();
    assert_eq!(module.name(), "inspect");
    assert_eq!(module.kind(), nuvira_api::ModuleKind::Inspect);
    let step = PlanStep::new("inspect", "inspect").with_config(serde_json::json!({
        "keywords": ["ApiClient"], "max_files": 2, "paths": ["web"], "max_file_bytes": 50000
    }));
    assert_eq!(module.write_set(&step), nuvira_api::WriteSet::ReadOnly);
    assert!(module.validate(&step).is_ok());
    let sink = Arc::new(Collect::default());
    let ctx = StepContext::standalone(dir.path())
        .with_identity("run-1", "inspect", "change the api client")
        .with_events(sink.clone());
    let out = futures::executor::block_on(module.run(&step, &ctx)).unwrap();
    let StepOutput::Inspection(r) = out else {
        panic!("not an inspection")
    };
    assert_eq!(r.relevant_paths[0], "web/src/api.ts");
    assert!(r.artifacts.len() <= 2);
    assert!(r.stats.llm_fallback_used);
    let events = sink.0.lock().unwrap();
    assert!(events.iter().all(|(s, _)| s.as_deref() == Some("inspect")));
    assert_eq!(events.last().unwrap().1, "inspect:completed");

    let bad = PlanStep::new("i2", "inspect").with_config(serde_json::json!({ "max_file": 3 }));
    let err = module.validate(&bad).unwrap_err().to_string();
    assert!(err.contains("i2") && err.contains("max_file"), "{err}");
    let zero = PlanStep::new("i3", "inspect").with_config(serde_json::json!({ "max_files": 0 }));
    let zero = module.validate(&zero).unwrap_err();
    assert!(zero.to_string().contains("max_files"), "{zero}");
    assert_eq!(zero.field.as_deref(), Some("max_files"));
    let escape =
        PlanStep::new("i4", "inspect").with_config(serde_json::json!({ "paths": ["../x"] }));
    let err = futures::executor::block_on(module.run(&escape, &ctx)).unwrap_err();
    assert_eq!(err.category(), nuvira_api::ErrorCategory::InvalidConfig);
    assert!(err.to_string().contains("i4"), "{err}");
}

fn this_repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn inspecting_this_repository_finds_the_keyword_splitter() {
    let r = run(
        &this_repo(),
        "split_identifier splits snake_case and camelCase keywords",
        &InspectOptions::default(),
    );
    assert_eq!(
        r.relevant_paths[0], "modules/inspect/src/keywords.rs",
        "{:?}",
        r.relevant_paths
    );
    assert!(
        r.artifacts[0]
            .symbols
            .iter()
            .any(|s| s.name == "split_identifier" && s.kind == "function")
    );
    assert!(
        r.artifacts[0]
            .test_files
            .contains(&"modules/inspect/src/keywords.rs".to_owned())
    );
    // target/ is .gitignore'd: nothing from it is listed.
    assert!(
        !r.file_tree
            .lines()
            .any(|l| l.trim_start().starts_with("target/")),
        "{}",
        r.file_tree
    );
    assert!(r.stats.total_files > 50);
    assert!(r.file_tree.lines().count() <= 200);
}

/// A run that was cancelled before the step started.
struct AlreadyCancelled;

#[nuvira_api::async_trait]
impl nuvira_api::CancelSignal for AlreadyCancelled {
    fn is_cancelled(&self) -> bool {
        true
    }
    async fn cancelled(&self) {}
}

#[test]
fn the_module_stops_on_cancellation_and_at_its_deadline() {
    let (dir, _outside) = demo_repo();
    let step = PlanStep::new("inspect", "inspect");
    let cancelled = StepContext::standalone(dir.path())
        .with_identity("r", "inspect", "parse_config")
        .with_execution(false, 1, Arc::new(AlreadyCancelled), None, None);
    let err = futures::executor::block_on(InspectModule::new().run(&step, &cancelled)).unwrap_err();
    assert_eq!(err, nuvira_api::ModuleError::Cancelled);

    let past = std::time::Instant::now();
    let late = StepContext::standalone(dir.path())
        .with_identity("r", "inspect", "parse_config")
        .with_execution(
            false,
            1,
            Arc::new(nuvira_api::NeverCancelled),
            Some(past),
            None,
        );
    let err = futures::executor::block_on(InspectModule::new().run(&step, &late)).unwrap_err();
    assert!(err.is_recoverable());
    assert_eq!(err.category(), nuvira_api::ErrorCategory::Timeout);
    assert!(err.to_string().contains("out of time"), "{err}");
}

/// A model that answers with one scripted text (or fails) and records the requests.
struct ScriptedLlm {
    answer: Option<String>,
    requests: Mutex<Vec<nuvira_api::LlmRequest>>,
}

#[nuvira_api::async_trait]
impl nuvira_api::LlmClient for ScriptedLlm {
    fn model(&self) -> &str {
        "scripted:test"
    }
    async fn complete(
        &self,
        request: &nuvira_api::LlmRequest,
    ) -> Result<nuvira_api::LlmResponse, nuvira_api::LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        match &self.answer {
            Some(text) => {
                let mut r = nuvira_api::LlmResponse::default();
                r.text = text.clone();
                Ok(r)
            }
            None => Err(nuvira_api::LlmError::Timeout),
        }
    }
}

/// What a module run with a model gave: the result, the model (with its requests) and the
/// events (step id, name).
type ModelRun = (
    nuvira_api::InspectionResult,
    Arc<ScriptedLlm>,
    Vec<(Option<String>, String)>,
);

fn run_with_model(root: &Path, answer: Option<&str>) -> ModelRun {
    let llm = Arc::new(ScriptedLlm {
        answer: answer.map(str::to_owned),
        requests: Mutex::new(Vec::new()),
    });
    let sink = Arc::new(Collect::default());
    let ctx = StepContext::standalone(root)
        .with_identity("r", "inspect", "make parseConfig send the request")
        .with_events(sink.clone())
        .with_llm(Some(llm.clone() as Arc<dyn nuvira_api::LlmClient>));
    let step =
        PlanStep::new("inspect", "inspect").with_config(serde_json::json!({ "max_files": 2 }));
    let out = futures::executor::block_on(InspectModule::new().run(&step, &ctx)).unwrap();
    let StepOutput::Inspection(r) = out else {
        panic!("not an inspection")
    };
    let events = sink.0.lock().unwrap().clone();
    (r, llm, events)
}

#[test]
fn with_a_model_the_module_lets_it_choose_among_the_candidates() {
    let (dir, _outside) = demo_repo();
    let (r, llm, events) = run_with_model(
        dir.path(),
        Some(r#"{"paths": ["src/invented.rs", "web/src/http.ts", "web/src/http.ts"]}"#),
    );
    assert!(!r.stats.llm_fallback_used);
    // The model's (real) pick comes first; invented and repeated paths are dropped; the rest is
    // filled from the keyword ranking up to max_files.
    assert_eq!(r.relevant_paths[0], "web/src/http.ts");
    assert_eq!(r.relevant_paths.len(), 2);
    assert_eq!(r.relevant_paths[1], "web/src/api.ts");
    assert!(
        r.artifacts[0]
            .content
            .as_deref()
            .unwrap()
            .contains("fetch(url)")
    );
    let found = events
        .iter()
        .filter(|(_, n)| n == "inspect:file-found")
        .count();
    assert_eq!(
        found, 2,
        "file-found only for the returned files: {events:?}"
    );
    assert_eq!(events.last().unwrap().1, "inspect:completed");

    let requests = llm.requests.lock().unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].json_schema.as_ref().unwrap().0,
        "relevant_files"
    );
    let user = &requests[0].messages[1].content;
    let candidates = user
        .find("<untrusted-data source=\"candidates\">\n")
        .unwrap_or_else(|| panic!("{user}"));
    let listed = user
        .find("web/src/api.ts — defines")
        .unwrap_or_else(|| panic!("{user}"));
    let closed = user
        .rfind("</untrusted-data>")
        .unwrap_or_else(|| panic!("{user}"));
    assert!(candidates < listed && listed < closed, "{user}");
    assert!(
        user.contains("<untrusted-data source=\"goal\">\n"),
        "{user}"
    );
    assert!(
        requests[0].messages[0]
            .content
            .ends_with(nuvira_api::llm::guard::NOTICE)
    );
}

#[test]
fn when_the_model_fails_the_keyword_ranking_is_the_answer() {
    let (dir, _outside) = demo_repo();
    let (failed, _, _) = run_with_model(dir.path(), None);
    assert!(failed.stats.llm_fallback_used);
    let (nonsense, _, _) = run_with_model(dir.path(), Some("I think api.ts"));
    assert!(nonsense.stats.llm_fallback_used);
    let plain = run(
        dir.path(),
        "make parseConfig send the request",
        &InspectOptions::default().with_max_files(2),
    );
    assert_eq!(failed.relevant_paths, plain.relevant_paths);
    assert_eq!(nonsense.relevant_paths, plain.relevant_paths);
}

#[test]
fn validate_rejects_paths_that_leave_the_workspace_before_the_run() {
    // Regression: `paths: ["../"]`, `["/etc"]` and `[".git"]` passed validation and failed
    // only at run time.
    let module = InspectModule::new();
    for (bad, why) in [
        ("../", "leads outside the workspace"),
        ("src/../../x", "leads outside the workspace"),
        ("/etc", "absolute"),
        (".git", "never inspected"),
        ("sub/.nuvira/journal", "never inspected"),
    ] {
        let step = PlanStep::new("look", "inspect")
            .with_config(serde_json::json!({ "paths": ["src", bad] }));
        let err = module.validate(&step).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("paths[1]"));
        let err = err.to_string();
        assert!(
            err.contains("step `look`")
                && err.contains("paths[1]")
                && err.contains(&format!("`{bad}`"))
                && err.contains(why)
                && err.contains("e.g. `src`"),
            "{bad}: {err}"
        );
    }
    // Lexically inside: fine (existence is checked when the step runs).
    let ok = PlanStep::new("look", "inspect")
        .with_config(serde_json::json!({ "paths": ["src/../web", "./src", "not/there/yet"] }));
    assert!(module.validate(&ok).is_ok());
    let (dir, _outside) = demo_repo();
    let options = InspectOptions::default().with_paths(vec!["src/../web".into()]);
    let r = run(dir.path(), "parseConfig", &options);
    assert!(
        r.relevant_paths.iter().all(|p| p.starts_with("web/")),
        "{:?}",
        r.relevant_paths
    );
}

/// Two files that match a goal equally: `a.rs` first by path, unless `b.rs` is preferred.
fn twins() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["a.rs", "b.rs", "gen/c.rs"] {
        write(dir.path(), f, "fn widget_count() -> usize { 1 }\n");
    }
    write(dir.path(), "unrelated.rs", "fn other() {}\n");
    dir
}

fn ranked(root: &Path, options: &InspectOptions) -> Vec<String> {
    inspect(root, "fix widget_count", options, &Hooks::none())
        .unwrap()
        .artifacts
        .into_iter()
        .map(|a| a.path)
        .collect()
}

#[test]
fn files_the_branch_changed_rank_higher_and_are_found_without_a_keyword_match() {
    let dir = twins();
    let plain = ranked(dir.path(), &InspectOptions::default());
    assert_eq!(plain, vec!["a.rs", "b.rs", "gen/c.rs"]);
    let preferred = ranked(
        dir.path(),
        &InspectOptions::default().with_prefer(vec!["b.rs".into(), "unrelated.rs".into()]),
    );
    assert_eq!(preferred[0], "b.rs", "{preferred:?}");
    assert!(
        preferred.contains(&"unrelated.rs".to_owned()),
        "{preferred:?}"
    );
}

#[test]
fn skipped_generated_files_are_never_inspected() {
    let dir = twins();
    let got = ranked(
        dir.path(),
        &InspectOptions::default().with_skip(vec!["gen/c.rs".into()]),
    );
    assert_eq!(got, vec!["a.rs", "b.rs"]);
}

#[test]
fn the_step_config_takes_prefer_and_skip() {
    let dir = twins();
    let step = PlanStep::new("inspect", "inspect").with_config(serde_json::json!({
        "keywords": ["widget_count"], "prefer": ["b.rs"], "skip": ["gen/c.rs"]
    }));
    let ctx =
        StepContext::standalone(dir.path()).with_identity("run-1", "inspect", "fix widget_count");
    let out = futures::executor::block_on(InspectModule::new().run(&step, &ctx)).unwrap();
    let StepOutput::Inspection(r) = out else {
        panic!("not an inspection")
    };
    let paths: Vec<&str> = r.artifacts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, vec!["b.rs", "a.rs"]);
}
