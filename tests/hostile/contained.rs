//! Runaway test commands, run through `nuvira test` in every sandbox that can contain them:
//! each is stopped by a limit, and the result names that limit and the flag that raises it —
//! never a bare "failed". The bubblewrap sandbox also keeps credentials from the command, as
//! the local one does.
//!
//! bwrap cases skip (saying why) where bubblewrap cannot run unless NUVIRA_REQUIRE_BWRAP=1;
//! local and bwrap memory/process cases need a cgroup (NUVIRA_REQUIRE_CGROUPS=1 makes its
//! absence a failure); Docker cases need the engine (NUVIRA_REQUIRE_DOCKER=1).

use crate::support::{docker_ready, nuvira};
use nuvira_test_support::env::{Requirement, require};

const SECRETS: &[(&str, &str)] = &[
    ("NUVIRA_LLM_API_KEY", "sk-test-leak"),
    ("OPENAI_API_KEY", "sk-openai-leak"),
    ("GITHUB_TOKEN", "ghp_x"),
    ("DEPLOY_SECRET", "deploy-leak"),
    ("DB_PASSWORD", "db-leak"),
];

fn bwrap_ready() -> bool {
    require(
        Requirement::Bwrap,
        nuvira_sandbox::BwrapSandbox::check().map(|_| ()),
    )
    .is_some()
}

fn cgroups_ready() -> bool {
    let found = nuvira_sandbox::limits::detect();
    let result = if found.enforced() {
        Ok(())
    } else {
        Err(found.describe())
    };
    require(Requirement::Cgroups, result).is_some()
}

/// The sandboxes that enforce memory and process limits here: bwrap and local with a cgroup,
/// docker (with the host image, for python3) with an engine.
fn limiting_sandboxes() -> Vec<&'static str> {
    let mut all = Vec::new();
    if cgroups_ready() {
        all.push("local");
        if bwrap_ready() {
            all.push("bwrap");
        }
    }
    if docker_ready() {
        all.push("docker");
    }
    all
}

/// `nuvira test --sandbox KIND --format json` of `command` with `flags`; the exit code and the
/// JSON result.
fn run(kind: &str, command: &str, flags: &[&str]) -> (Option<i32>, serde_json::Value) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("README"), "x\n").unwrap();
    let out = nuvira()
        .args(["test", "--sandbox", kind, "--image", "nuvira-host:latest"])
        .args(flags)
        .args(["--command", command, "--format", "json", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{kind}: not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

fn messages(v: &serde_json::Value) -> String {
    v["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["message"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn nuvira_test_in_the_bwrap_sandbox_does_not_pass_credentials_on() {
    if !bwrap_ready() {
        return;
    }
    let repo = tempfile::tempdir().unwrap();
    let mut cmd = nuvira();
    cmd.args(["test", "--sandbox", "bwrap", "--format", "json", "--repo"])
        .arg(repo.path())
        .args(["--command", "env; exit 1"])
        .env("NUVIRA_KEEP_PATH_MARK", "still-here");
    for (name, value) in SECRETS {
        cmd.env(name, value);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sandbox"]["kind"], "bwrap", "{stdout}");
    let log = v["log"].as_str().unwrap();
    assert!(log.contains("NUVIRA_KEEP_PATH_MARK=still-here"), "{log}");
    for (name, value) in SECRETS {
        assert!(
            !stdout.contains(value),
            "{name} reached the command:\n{log}"
        );
    }
}

#[test]
fn a_memory_hog_is_one_failure_that_names_the_memory_limit_in_every_sandbox() {
    for kind in limiting_sandboxes() {
        let (code, v) = run(
            kind,
            "python3 -c \"b = b'a' * (400 << 20); print('allocated')\"",
            &["--memory", "64m", "--timeout", "120s"],
        );
        assert_eq!(code, Some(1), "{kind}: {v:#}");
        assert_eq!(v["sandbox"]["oom_killed"], true, "{kind}: {v:#}");
        let failures = v["failures"].as_array().unwrap();
        assert_eq!(failures.len(), 1, "{kind}: exactly one failure: {v:#}");
        let m = messages(&v);
        assert!(
            m.contains("memory limit") && m.contains("--memory"),
            "{kind}: {m}"
        );
    }
}

#[test]
fn tests_the_process_limit_stops_fail_naming_the_pids_limit_in_every_sandbox() {
    // A healthy test that needs 200 threads, under a process limit of 64.
    let threads = "import threading\nev = threading.Event()\nts = [threading.Thread(target=ev.wait) for _ in range(200)]\ntry:\n    [t.start() for t in ts]\nfinally:\n    ev.set()\n";
    let command = format!("python3 -c '{threads}'");
    for kind in limiting_sandboxes() {
        let (code, v) = run(kind, &command, &["--pids", "64", "--timeout", "120s"]);
        assert_eq!(code, Some(1), "{kind}: {v:#}");
        assert_eq!(v["sandbox"]["pids_limited"], true, "{kind}: {v:#}");
        let m = messages(&v);
        assert!(
            m.contains("process limit") && m.contains("--pids"),
            "{kind}: {m}"
        );
        // Under the default limit the same test passes.
        let (code, v) = run(kind, &command, &["--timeout", "120s"]);
        assert_eq!(code, Some(0), "{kind} with the default limits: {v:#}");
    }
}

#[test]
fn a_hanging_test_names_the_timeout_and_how_to_raise_it() {
    let mut kinds = vec!["local"];
    if bwrap_ready() {
        kinds.push("bwrap");
    }
    for kind in kinds {
        let (code, v) = run(kind, "echo started; sleep 600", &["--timeout", "2s"]);
        assert_eq!(code, Some(1), "{kind}: {v:#}");
        assert_eq!(v["sandbox"]["timed_out"], true, "{kind}: {v:#}");
        let m = messages(&v);
        assert!(
            m.contains("timeout") && m.contains("--timeout"),
            "{kind}: {m}"
        );
    }
}

#[test]
fn every_result_says_how_the_sandboxs_limits_were_enforced() {
    let (_, v) = run("local", "true", &[]);
    let note = v["sandbox"]["limits"].as_str().unwrap();
    if nuvira_sandbox::limits::detect().enforced() {
        assert!(note.contains("enforced by cgroup"), "{note}");
    } else {
        assert!(note.contains("not enforced"), "{note}");
    }
}
