//! The run history (`.nuvira/runs/`), `nuvira runs`, budgets, `nuvira resume` after SIGKILL at
//! random moments, and `nuvira replay` — real processes, a scripted model (NUVIRA_SCRIPTED_LLM),
//! real git repositories and real commands in the local sandbox.

use crate::runs_setup::{LIB, Setup, WANT};
use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

const PLAN: &str = r#"goal: "make a and b return 10 and 20"
steps:
  - { id: look, module: inspect, config: { keywords: [fn], paths: [src] } }
  - { id: one, module: edit, depends_on: [look], config: { instructions: "make a return 10" } }
  - { id: pause, module: execute, depends_on: [one], config: { command: "sleep 0.2", sandbox: local } }
  - { id: two, module: edit, depends_on: [pause], config: { instructions: "make b return 20" } }
  - id: check
    module: execute
    depends_on: [two]
    config: { command: "grep -q '{ 10 }' src/lib.rs && grep -q '{ 20 }' src/lib.rs", sandbox: local }
"#;

fn runs_json(repo: &Path) -> Vec<Value> {
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .args(["runs", "--json", "--repo"])
        .arg(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Folders a run killed before its first write left (`incomplete`) are no runs to resume
    // or compare (tests/cli_runs_gc.rs covers them).
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["incomplete"] != true)
        .cloned()
        .collect()
}

fn only_run(repo: &Path) -> (String, PathBuf) {
    let runs = runs_json(repo);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let id = runs[0]["id"].as_str().unwrap().to_owned();
    let dir = repo.join(".nuvira/runs").join(&id);
    (id, dir)
}

/// A report without what differs between two executions: ids, times, durations, event counts.
fn normalized(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in [
                    "run_id",
                    "report_id",
                    "started_at_ms",
                    "started_ms",
                    "duration_ms",
                    "summary",
                    // How the sandbox got there: the cache key names the repository, the
                    // workspace copy says fresh or synced.
                    "container_id",
                    "cache_key",
                    "workspace_copy",
                ] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

fn report_of(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap()
}

#[test]
fn every_run_is_recorded_listed_and_shown_in_every_format() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    let out = s.run(
        &repo,
        &["--events", s.path("events.jsonl").to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        WANT
    );
    // --events keeps working, next to the run folder.
    assert!(s.path("events.jsonl").is_file());
    let (id, dir) = only_run(&repo);
    for f in [
        "run.json",
        "plan.json",
        "events.jsonl",
        "report.json",
        "steps.jsonl",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let calls: Vec<_> = std::fs::read_dir(dir.join("calls")).unwrap().collect();
    assert_eq!(calls.len(), 3, "one record per model call");
    let row = &runs_json(&repo)[0];
    assert_eq!(row["status"], "succeeded");
    assert_eq!(row["goal"], "make a and b return 10 and 20");
    assert_eq!(row["tokens"], 385);
    assert!(row["started_ms"].as_u64().unwrap() > 0);
    assert!(row["duration_ms"].as_u64().is_some());
    // The call record has the step, the attempt, the hashes and the context file.
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("calls/0002.json")).unwrap()).unwrap();
    assert_eq!(rec["step"], "one");
    assert_eq!(rec["attempt"], 1);
    assert!(
        rec["hashes"]["system"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(rec["hashes"]["context"][0]["source"], "src/lib.rs");
    assert_eq!(rec["response"]["usage"]["input_tokens"], 100);
    // Events carry hashes, not the prompt.
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let request = events
        .lines()
        .find(|l| l.contains("\"llm:request\""))
        .unwrap();
    assert!(!request.contains("make a return 10"), "{request}");
    // Usage per step and per run in every format.
    for (format, needle) in [
        ("text", "model: 3 model call(s), 385 tokens"),
        ("markdown", "**Model:** 3 model call(s), 385 tokens"),
        ("json", "\"output_tokens\": 35"),
        ("github", "model: 3 model call(s)"),
        ("junit", "model_usage"),
        ("sarif", "modelUsage"),
        ("html", "Model: 3 model call(s)"),
    ] {
        let out = Command::cargo_bin("nuvira")
            .unwrap()
            .args(["runs", "show", &id, "--format", format, "--repo"])
            .arg(&repo)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{format}");
        assert!(text.contains(needle), "{format}: {text}");
    }
    let text = String::from_utf8_lossy(
        &Command::cargo_bin("nuvira")
            .unwrap()
            .args(["runs", "show", &id, "--repo"])
            .arg(&repo)
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    let two = text
        .lines()
        .find(|l| l.trim_start().starts_with("two ") && l.contains("model call"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        two.contains("1 model call(s), 220 tokens (200 in, 20 out)"),
        "{text}"
    );
    // --no-history records nothing.
    let repo2 = s.fresh_repo("repo2");
    let out = s.run(&repo2, &["--no-history"]);
    assert!(out.status.success());
    assert!(runs_json(&repo2).is_empty());
}

#[test]
fn show_of_an_unknown_or_malformed_id_is_refused_by_name() {
    let s = Setup::new(PLAN);
    for (id, want) in [
        ("run-1-none", "no run `run-1-none`"),
        ("../../etc", "is not a run id"),
    ] {
        let out = Command::cargo_bin("nuvira")
            .unwrap()
            .args(["runs", "show", id, "--repo"])
            .arg(s.path("repo"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(want));
    }
}

/// Writes a fake finished run started `age_days` ago.
fn fake_run(repo: &Path, id: &str, started_ms: u64) {
    let dir = repo.join(".nuvira/runs").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let meta = serde_json::json!({
        "format": 1, "id": id, "goal": "g", "status": "succeeded", "started_ms": started_ms,
        "pid": 0, "steps": 1
    });
    std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
}

fn ids(repo: &Path) -> Vec<String> {
    runs_json(repo)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn gc_keeps_exactly_what_the_policy_says() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    let now = nuvira::api::now_ms();
    let day = 86_400_000;
    for i in 0..6u64 {
        // run-0 is the oldest (50 days), run-5 the newest (today).
        let age = [50, 40, 20, 10, 2, 0][usize::try_from(i).unwrap()];
        fake_run(&repo, &format!("run-{i}"), now - age * day);
    }
    // A run going on (this test's pid is alive) is never collected.
    let live = repo.join(".nuvira/runs/run-live");
    fake_run(&repo, "run-live", now - 90 * day);
    let meta = std::fs::read_to_string(live.join("run.json"))
        .unwrap()
        .replace("\"succeeded\"", "\"running\"")
        .replace("\"pid\":0", &format!("\"pid\":{}", std::process::id()));
    std::fs::write(live.join("run.json"), meta).unwrap();
    // The user's own configuration folder (empty until the test writes it).
    let xdg = tempfile::tempdir().unwrap();
    let gc = |args: &[&str]| {
        let out = Command::cargo_bin("nuvira")
            .unwrap()
            .args(["runs", "gc", "--repo"])
            .arg(&repo)
            .args(args)
            .env_remove("NUVIRA_RUNS_KEEP")
            .env_remove("NUVIRA_RUNS_KEEP_DAYS")
            .env_remove("NUVIRA_CONFIG")
            .env("XDG_CONFIG_HOME", xdg.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A dry run removes nothing.
    let said = gc(&["--keep", "2", "--keep-days", "0", "--dry-run"]);
    assert!(said.contains("would remove 4 run(s)"), "{said}");
    assert_eq!(ids(&repo).len(), 7);
    // Age: 30 days by default keeps the four youngest (and the live one).
    gc(&[]);
    assert_eq!(ids(&repo), ["run-5", "run-4", "run-3", "run-2", "run-live"]);
    // Count: the newest 2 (the live one is kept on top).
    gc(&["--keep", "2"]);
    assert_eq!(ids(&repo), ["run-5", "run-4", "run-live"]);
    // The repository's own config file (it may have come with the checkout) cannot have
    // runs deleted: its `keep = 1` is looser than the default and ignored, its `keep_days =
    // 0` (no age limit) keeps more and is taken.
    std::fs::write(
        repo.join(".nuvira/config.toml"),
        "[runs]\nkeep = 1\nkeep_days = 0\n",
    )
    .unwrap();
    gc(&[]);
    assert_eq!(ids(&repo), ["run-5", "run-4", "run-live"]);
    // The user's config file's policy, when no flag is given.
    std::fs::create_dir_all(xdg.path().join("nuvira")).unwrap();
    std::fs::write(
        xdg.path().join("nuvira/config.toml"),
        "[runs]\nkeep = 1\nkeep_days = 0\n",
    )
    .unwrap();
    gc(&[]);
    assert_eq!(ids(&repo), ["run-5", "run-live"]);
    // And a run's own collection at its end follows --keep-runs.
    for i in 0..3u64 {
        fake_run(&repo, &format!("run-old{i}"), now - (i + 1) * 1000);
    }
    std::fs::remove_file(repo.join(".nuvira/config.toml")).unwrap();
    let out = s.run(&repo, &["--keep-runs", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = ids(&repo);
    assert_eq!(left.len(), 3, "{left:?}"); // the new run, run-5, and the live run
    assert!(left.contains(&"run-5".to_owned()) && left.contains(&"run-live".to_owned()));
}

#[test]
fn max_tokens_stops_the_run_at_the_cap_with_every_file_consistent() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    // The inspect call uses 55 tokens and the first edit 110: the cap is passed at the edit.
    let out = s.run(&repo, &["--max-tokens", "100", "--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the token budget was exceeded: 165 tokens used, --max-tokens 100"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["budget_exceeded"]
            .as_str()
            .unwrap()
            .contains("token budget")
    );
    // The run's edits are rolled back: the file is as it was, no transaction is left pending.
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        LIB
    );
    let (_, dir) = only_run(&repo);
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "budget-exceeded");
    assert_eq!(meta["exit_code"], 1);
    // No call after the cap: the second edit's model was never asked.
    let log = std::fs::read_to_string(s.path("calls.log")).unwrap();
    assert_eq!(log.lines().count(), 2, "{log}");
    // Nothing is left pending in the journal: a later start restores nothing.
    let out = s.run(&s.fresh_repo("other"), &[]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("restored"));
}

/// Writes a configuration file `config` pricing the scripted model at `per_mtok` dollars per
/// million tokens, in and out.
fn price(config: &Path, per_mtok: f64) {
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        config,
        format!(
            "[prices.\"scripted:script\"]\ninput_per_mtok = {per_mtok:.1}\noutput_per_mtok = {per_mtok:.1}\n"
        ),
    )
    .unwrap();
}

#[test]
fn max_cost_uses_the_configured_price_and_unknown_models_show_tokens_only() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    // $1000 per million tokens: the inspect call (55 tokens) costs $0.055, the first edit's
    // (110) brings the run to $0.165.
    price(&repo.join(".nuvira/config.toml"), 1000.0);
    let out = s.run(&repo, &["--max-cost", "0.1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the cost budget was exceeded"));
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        LIB
    );
    let row = &runs_json(&repo)[0];
    assert!(row["cost_usd"].as_f64().unwrap() > 0.1);
    // Without a price: tokens, no cost.
    let repo2 = s.fresh_repo("repo2");
    let out = s.run(&repo2, &["--max-cost", "0.1"]);
    assert!(out.status.success());
    let row = &runs_json(&repo2)[0];
    assert_eq!(row["tokens"], 385);
    assert!(row["cost_usd"].is_null());
    // The user's price stands against a repository that says the model is free: its
    // `.nuvira/config.toml` may come with the checkout, and must not slip past --max-cost.
    price(&s.path("xdg/nuvira/config.toml"), 1000.0);
    let repo3 = s.fresh_repo("repo3");
    price(&repo3.join(".nuvira/config.toml"), 0.0);
    let out = s.run(&repo3, &["--max-cost", "0.1"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("the cost budget was exceeded"));
    assert_eq!(
        std::fs::read_to_string(repo3.join("src/lib.rs")).unwrap(),
        LIB
    );
}

/// A run SIGKILLed at a random moment, then resumed, ends with the tree and the report of an
/// uninterrupted run; the model is not asked again for a step that had finished, and no edit
/// is applied twice (a second `{ 1 }` → `{ 10 }` would not find its text and fail the step).
#[test]
fn a_run_killed_at_random_moments_resumes_to_the_same_tree_and_report() {
    let s = Setup::new(PLAN);
    // The uninterrupted run: its tree, its report and how long it takes.
    let base = s.path("repo");
    let started = std::time::Instant::now();
    let out = s.run(&base, &[]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, base_dir) = only_run(&base);
    let want_report = normalized(report_of(&base_dir));
    // Which step each scripted call belongs to, by its last user message's hash.
    let log: Vec<Value> = std::fs::read_to_string(s.path("calls.log"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let step_of: std::collections::HashMap<String, &str> = log
        .iter()
        .zip(["look", "one", "two"])
        .map(|(l, s)| (l["last_user_sha256"].as_str().unwrap().to_owned(), s))
        .collect();
    let trials: u64 = std::env::var("NUVIRA_RESUME_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut resumed_something = 0;
    for trial in 0..trials {
        // A seeded delay within the uninterrupted run's duration.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = std::time::Duration::from_millis(
            seed % u64::try_from(took.as_millis()).unwrap().max(1),
        );
        let repo = s.fresh_repo(&format!("t{trial}"));
        let _ = std::fs::remove_file(s.path("calls.log"));
        let mut child = s
            .command()
            .arg("run")
            .arg(s.path("plan.yaml"))
            .arg("--repo")
            .arg(&repo)
            .arg("-q")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let killed_pid = child.id();
        // What had finished when it was killed.
        let runs = runs_json(&repo);
        let finished: Vec<String> = match runs.first() {
            Some(r) => {
                let dir = repo.join(".nuvira/runs").join(r["id"].as_str().unwrap());
                std::fs::read_to_string(dir.join("steps.jsonl"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|v| v["state"] == "succeeded")
                    .map(|v| v["step"].as_str().unwrap().to_owned())
                    .collect()
            }
            None => Vec::new(),
        };
        let out = match runs.first() {
            // Killed before it had a run folder: nothing to resume, run it again.
            None => s.run(&repo, &[]),
            Some(r) => {
                resumed_something += 1;
                s.resume(&repo, r["id"].as_str().unwrap(), &[])
            }
        };
        assert!(
            out.status.success() || out.status.code() == Some(1),
            "trial {trial} ({delay:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "trial {trial} ({delay:?}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
            WANT,
            "trial {trial} ({delay:?}): the tree differs"
        );
        let runs = runs_json(&repo);
        assert_eq!(runs.len(), 1, "trial {trial}: one run, resumed");
        let dir = repo
            .join(".nuvira/runs")
            .join(runs[0]["id"].as_str().unwrap());
        assert_eq!(
            normalized(report_of(&dir)),
            want_report,
            "trial {trial} ({delay:?}): the report differs"
        );
        // The resuming process asked the model nothing for a finished step.
        let log = std::fs::read_to_string(s.path("calls.log")).unwrap_or_default();
        for line in log.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["pid"].as_u64() == Some(u64::from(killed_pid)) {
                continue;
            }
            let step = step_of[v["last_user_sha256"].as_str().unwrap()];
            assert!(
                !finished.iter().any(|f| f == step),
                "trial {trial} ({delay:?}): the model was asked again for finished step `{step}`"
            );
        }
    }
    assert!(
        resumed_something > trials / 2,
        "most kills left a run to resume"
    );
}

#[test]
fn replay_of_an_unchanged_repository_reproduces_the_report_offline() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    let fresh = s.fresh_repo("fresh");
    assert!(s.run(&repo, &[]).status.success());
    let (_, dir) = only_run(&repo);
    // No model at all: a call the record does not hold would fail.
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .env_remove("NUVIRA_MODEL")
        .arg("replay")
        .arg(&dir)
        .arg("--repo")
        .arg(&fresh)
        .arg("-q")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("reproduced run"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(fresh.join("src/lib.rs")).unwrap(),
        WANT
    );
    let (_, replayed) = only_run(&fresh);
    assert_eq!(
        normalized(report_of(&replayed)),
        normalized(report_of(&dir))
    );
    let meta: Value =
        serde_json::from_slice(&std::fs::read(replayed.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        meta["replay_of"],
        dir.file_name().unwrap().to_str().unwrap()
    );
}

fn replay(dir: &Path, repo: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .env_remove("NUVIRA_MODEL")
        .arg("replay")
        .arg(dir)
        .arg("--repo")
        .arg(repo)
        .arg("-q")
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn replay_with_a_changed_context_file_diverges_naming_the_file() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    assert!(s.run(&repo, &[]).status.success());
    let (_, dir) = only_run(&repo);
    let changed = s.fresh_repo("changed");
    std::fs::write(
        changed.join("src/lib.rs"),
        format!("{LIB}// a comment that changes the context\n"),
    )
    .unwrap();
    let (code, stderr) = replay(&dir, &changed, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "divergence at step `one` attempt 1 call 1: context file `src/lib.rs` changed"
        ),
        "{stderr}"
    );
    // It stopped there: the edits were not made.
    assert!(stderr.matches("divergence at").count() == 1, "{stderr}");
    // With --continue-on-divergence every divergence is listed and the run goes on.
    let again = s.fresh_repo("again");
    std::fs::write(again.join("src/lib.rs"), format!("{LIB}// changed\n")).unwrap();
    let (code, stderr) = replay(&dir, &again, &["--continue-on-divergence"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.matches("divergence at").count() >= 2, "{stderr}");
    assert!(
        std::fs::read_to_string(again.join("src/lib.rs"))
            .unwrap()
            .contains("{ 20 }")
    );
}

#[test]
fn replay_with_a_changed_prompt_template_diverges_naming_the_prompt_hash() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    assert!(s.run(&repo, &[]).status.success());
    let (id, dir) = only_run(&repo);
    // The run as recorded by a Nuvira whose edit prompt template (the system prompt) differed:
    // a copy of the folder whose record of the first edit call has another system hash.
    let copy = s.path("copy").join(&id);
    std::fs::create_dir_all(copy.join("calls")).unwrap();
    for f in [
        "run.json",
        "plan.json",
        "events.jsonl",
        "report.json",
        "steps.jsonl",
    ] {
        std::fs::copy(dir.join(f), copy.join(f)).unwrap();
    }
    for c in std::fs::read_dir(dir.join("calls")).unwrap() {
        let c = c.unwrap();
        std::fs::copy(c.path(), copy.join("calls").join(c.file_name())).unwrap();
    }
    let rec_path = copy.join("calls/0002.json");
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&rec_path).unwrap()).unwrap();
    let now_system = rec["hashes"]["system"].as_str().unwrap().to_owned();
    let old = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    rec["hashes"]["system"] = Value::from(old);
    rec["hashes"]["request"] = Value::from(old);
    std::fs::write(&rec_path, rec.to_string()).unwrap();
    let (code, stderr) = replay(&copy, &s.fresh_repo("fresh"), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "divergence at step `one` attempt 1 call 1: the system prompt changed (prompt hash recorded {old}, now {now_system})"
        )),
        "{stderr}"
    );
    // A changed step prompt (the plan's instructions) names the messages' prompt hash.
    let plan = std::fs::read_to_string(copy.join("plan.json"))
        .unwrap()
        .replace("make b return 20", "make b return 20 please");
    std::fs::write(copy.join("plan.json"), plan).unwrap();
    std::fs::copy(dir.join("calls/0002.json"), &rec_path).unwrap();
    let (code, stderr) = replay(&copy, &s.fresh_repo("fresh2"), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("divergence at step `two` attempt 1 call 1: the prompt's messages changed (prompt hash recorded sha256:"),
        "{stderr}"
    );
}

#[test]
fn the_planners_model_call_is_recorded_under_no_step_and_counted() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    std::fs::write(
        s.path("plan-script.yaml"),
        r#"- match: { schema: execution_plan }
  response:
    usage: { input_tokens: 640, output_tokens: 60 }
    json:
      goal: "make a return 10"
      steps:
        - id: fix
          module: edit
          config: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 1 }", replace: "{ 10 }" } ] }
"#,
    )
    .unwrap();
    let out = s
        .nuvira()
        .env("NUVIRA_SCRIPTED_LLM", s.path("plan-script.yaml"))
        .args([
            "run",
            "--goal",
            "make a return 10",
            "--planner",
            "llm",
            "-q",
        ])
        .args(["--sandbox", "local", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, dir) = only_run(&repo);
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("calls/0001.json")).unwrap()).unwrap();
    assert!(rec.get("step").is_none(), "{rec}");
    assert_eq!(rec["response"]["usage"]["input_tokens"], 640);
    assert_eq!(runs_json(&repo)[0]["tokens"], 700);
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains("\"llm:response\""));
}

/// Resuming a finished run reuses every step, test steps included; `--rerun-tests` runs them
/// again, and so does a changed file they could read.
#[test]
fn test_steps_with_unchanged_inputs_are_not_rerun_unless_asked() {
    let s = Setup::new(PLAN);
    let repo = s.path("repo");
    let count = s.path("count");
    let plan = format!(
        r#"goal: "count"
steps:
  - id: fix
    module: edit
    config: {{ edits: [ {{ strategy: search-replace, path: src/lib.rs, search: "{{ 1 }}", replace: "{{ 10 }}" }} ] }}
  - id: tally
    module: execute
    depends_on: [fix]
    config: {{ command: "echo ran >> {}", sandbox: local }}
"#,
        count.display()
    );
    std::fs::write(s.path("count.yaml"), plan).unwrap();
    let out = s
        .nuvira()
        .arg("run")
        .arg(s.path("count.yaml"))
        .arg("--repo")
        .arg(&repo)
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (id, _) = only_run(&repo);
    let runs = |extra: &[&str]| {
        let out = s
            .nuvira()
            .args(["resume", &id, "-q", "--repo"])
            .arg(&repo)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&count).unwrap().lines().count()
    };
    assert_eq!(
        runs(&[]),
        1,
        "unchanged inputs: the command did not run again"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn a() -> u32 { 10 }\npub fn b() -> u32 { 2 }\n",
        "the edit was not applied twice"
    );
    assert_eq!(runs(&["--rerun-tests"]), 2);
    std::fs::write(repo.join("README"), "a file the command could read\n").unwrap();
    assert_eq!(
        runs(&[]),
        3,
        "a new file in the workspace changes its inputs"
    );
    assert_eq!(runs(&[]), 3);
}
