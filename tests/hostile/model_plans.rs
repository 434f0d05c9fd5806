//! Model-made plans cannot widen the sandbox (issue 11, item 5).
//!
//! A plan from `--planner llm` is model output. Its `execute` step asks for `sandbox: local`,
//! `network: host` and a read-write mount of a folder outside the repository, and its command
//! writes into that folder both through the mount and by its host path. What must hold:
//! without flags, the command runs in the run's sandbox with no mount and no network, nothing
//! outside the repository changes, and stderr names the step and what was narrowed; with
//! `--allow-mount` the mount is kept and the line says so. And whoever wrote the plan, a
//! `verify` lint command runs in the sandbox: it cannot write into the real repository.

use crate::support::{Sentinel, git, nuvira};
use nuvira_test_support::env::{Requirement, require};
use std::path::Path;

const GOAL: &str = "Run the project's housekeeping command";

/// A small git repository outside every sentinel.
fn repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "# demo\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "init"]);
    repo
}

/// The scripted model's transcript: its plan is one `execute` step asking for the host.
fn transcript(dir: &Path, sentinel: &Path) -> std::path::PathBuf {
    let command = format!(
        "echo \"net: $(ls /sys/class/net | tr '\\n' ' ')\"; echo pwned > /data/owned; echo pwned > {}/owned-by-path; true",
        sentinel.display()
    );
    let text = serde_json::json!([{
        "match": { "schema": "execution_plan", "last_user_contains": GOAL },
        "response": { "json": {
            "goal": GOAL,
            "steps": [{
                "id": "housekeeping",
                "module": "execute",
                "config": {
                    "command": command,
                    "sandbox": "local",
                    "network": "host",
                    "mounts": [format!("{}:/data:rw", sentinel.display())],
                }
            }]
        }}
    }]);
    let path = dir.join("transcript.yaml");
    // JSON is YAML.
    std::fs::write(&path, text.to_string()).unwrap();
    path
}

/// Whether the Docker sandbox can run here (a model plan's default sandbox when it can).
fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "nuvira-host:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    let found = if ok {
        Ok(())
    } else {
        Err("no Docker engine with the nuvira-host image answers")
    };
    require(Requirement::Docker, found).is_some()
}

fn run_model_plan(
    dir: &Path,
    repo: &Path,
    sentinel: &Path,
    flags: &[&str],
) -> (i32, String, String) {
    let events = dir.join("events.jsonl");
    let out = nuvira()
        .env("NUVIRA_SCRIPTED_LLM", transcript(dir, sentinel))
        .args(["run", "--goal", GOAL, "--planner", "llm", "--quiet"])
        .args(flags)
        .arg("--repo")
        .arg(repo)
        .arg("--events")
        .arg(&events)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let events = std::fs::read_to_string(&events).unwrap_or_default();
    (out.status.code().unwrap_or(-1), stderr, events)
}

/// The `step:succeeded` event of the step, as text.
fn succeeded<'a>(events: &'a str, step: &str) -> &'a str {
    events
        .lines()
        .find(|l| {
            l.contains("\"step:succeeded\"") && l.contains(&format!("\"step_id\":\"{step}\""))
        })
        .unwrap_or_else(|| panic!("no step:succeeded for {step}:\n{events}"))
}

#[test]
fn a_model_plan_asking_for_the_host_runs_in_the_runs_sandbox_without_mount_or_network() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious.txt"), "keep me\n").unwrap();
    let repo = repo(dir.path());
    let before = Sentinel::of(outside.path());

    let (code, stderr, events) = run_model_plan(dir.path(), &repo, outside.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    // Nothing outside the repository changed: no mount, and not on the host.
    before.assert_unchanged(outside.path());
    // It ran in the run's sandbox (Docker here), with no network but the loopback.
    assert!(
        stderr.contains("model plan: test and execute steps run in the docker sandbox"),
        "{stderr}"
    );
    let ran = succeeded(&events, "housekeeping");
    assert!(ran.contains("net: lo "), "{ran}");
    assert!(ran.contains("\"kind\":\"docker\""), "{ran}");
    // One line naming the step and each setting it narrowed.
    let line = stderr
        .lines()
        .find(|l| l.contains("step `housekeeping` widens the sandbox"))
        .unwrap_or_else(|| panic!("no narrowing line: {stderr}"));
    assert!(
        line.contains("sandbox local -> docker (pass --allow-host-exec to keep it)"),
        "{line}"
    );
    assert!(
        line.contains("network host -> none (pass --allow-host-exec to keep it)"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "mounts {}:/data:rw dropped (pass --allow-mount to keep it)",
            outside.path().display()
        )),
        "{line}"
    );
}

#[test]
fn allow_mount_keeps_a_model_plans_mount_and_says_so() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());

    let (code, stderr, events) =
        run_model_plan(dir.path(), &repo, outside.path(), &["--allow-mount"]);
    assert_eq!(code, 0, "{stderr}");
    // The mount was kept: the command wrote through it; but not by the host path (still not
    // on the host), and still without network.
    assert_eq!(
        std::fs::read_to_string(outside.path().join("owned")).unwrap(),
        "pwned\n"
    );
    assert!(!outside.path().join("owned-by-path").exists());
    assert!(succeeded(&events, "housekeeping").contains("net: lo "));
    let line = stderr
        .lines()
        .find(|l| l.contains("step `housekeeping` widens the sandbox"))
        .unwrap_or_else(|| panic!("no narrowing line: {stderr}"));
    assert!(
        line.contains(&format!(
            "mounts {}:/data:rw kept (--allow-mount)",
            outside.path().display()
        )),
        "{line}"
    );
    assert!(line.contains("network host -> none"), "{line}");
}

/// A plan whose verify step's lint command tries to create a file in the repository.
fn lint_plan(dir: &Path) -> std::path::PathBuf {
    let plan = dir.join("lint-plan.yaml");
    std::fs::write(
        &plan,
        "goal: lint\nsteps:\n  - id: check\n    module: verify\n    config:\n      checks: [lint]\n      lint: [\"touch created-by-lint && echo linted\"]\n",
    )
    .unwrap();
    plan
}

#[test]
fn a_lint_command_runs_in_the_sandbox_and_cannot_write_into_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let plan = lint_plan(dir.path());
    let mut sandboxes = vec!["local"];
    if docker_ready() {
        sandboxes.push("docker");
    }
    for sandbox in sandboxes {
        let before = Sentinel::of_repo(&repo);
        let out = nuvira()
            .args(["run", "--quiet", "--format", "json", "--sandbox", sandbox])
            .arg(&plan)
            .arg("--repo")
            .arg(&repo)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{sandbox}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The command ran (it passed), in the sandbox, and the repository is as it was.
        assert!(
            stdout.contains(&format!("passed ({sandbox} sandbox)")),
            "{sandbox}: {stdout}"
        );
        before.assert_repo_unchanged(&repo);
        assert!(!repo.join("created-by-lint").exists());
    }
}

/// A formatter an edit starts (`format: true`) loads what it finds where it runs (a
/// `prettier.config.js` is code): it must not run in the repository. The `prettier` here is a
/// stand-in on PATH that writes into the folder it was started in and echoes its input.
#[test]
fn a_formatter_runs_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    std::fs::write(repo.join("prettier.config.js"), "module.exports = {};\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "config"]);
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("prettier");
    std::fs::write(
        &fake,
        "#!/bin/sh\n{ pwd; ls -a; } > \"$FAKE_LOG\"\nls -a > started-here.txt\ncat\necho '<!-- formatted -->'\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let edits = dir.path().join("edits.yaml");
    std::fs::write(
        &edits,
        "format: true\nedits:\n  - { strategy: whole-file, path: notes.md, content: \"# notes\\n\" }\n",
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = dir.path().join("formatter.log");
    let out = nuvira()
        .env("PATH", path)
        .env("FAKE_LOG", &log)
        .arg("apply")
        .arg(&edits)
        .arg("--repo")
        .arg(&repo)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The formatter ran (the file went through it), but not in the repository, and without
    // the repository's code config.
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.md")).unwrap(),
        "# notes\n<!-- formatted -->\n"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains(&repo.display().to_string()), "{log}");
    assert!(!log.contains("prettier.config.js"), "{log}");
    assert!(
        !repo.join("started-here.txt").exists(),
        "the formatter ran in the repository"
    );
}

/// `nuvira run`: a `format: true` edit step's formatter runs in the run's sandbox (here the
/// local one: its own temporary copy), its output is applied, and what it writes where it runs
/// never reaches the repository.
#[test]
fn a_run_formats_in_the_runs_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr, log) = format_run(dir.path(), &["--sandbox", "local"]);
    let repo = dir.path().join("repo");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.md")).unwrap(),
        "# notes\n<!-- formatted -->\n",
        "the formatter's output is applied"
    );
    let log = log.unwrap();
    assert!(
        log.contains("nuvira-sandbox-"),
        "the formatter ran in the local sandbox's copy: {log}"
    );
    assert!(!log.contains(&repo.display().to_string()), "{log}");
    assert!(
        !repo.join("started-here.txt").exists(),
        "the formatter wrote into the repository"
    );
}

/// With `--sandbox docker` the formatter runs in the container: the stand-in is visible there
/// (the `nuvira-host` image mounts the host's PATH folders read-only), but the host's
/// environment (`FAKE_LOG`) is not, and what it leaves where it runs stays in the container.
#[test]
fn a_run_on_docker_formats_in_the_container() {
    if !docker_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr, log) = format_run(dir.path(), &["--sandbox", "docker"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("repo/notes.md")).unwrap(),
        "# notes\n<!-- formatted -->\n",
        "the formatter's output is applied"
    );
    assert_eq!(
        log, None,
        "the formatter ran with this machine's environment"
    );
    assert!(!dir.path().join("repo/started-here.txt").exists());
}

/// Runs a plan whose edit step writes `notes.md` with `format: true`, a stand-in `prettier`
/// first on PATH (it logs where it runs and leaves a file there): the exit code, stderr and
/// the log, if it ran.
fn format_run(dir: &Path, flags: &[&str]) -> (Option<i32>, String, Option<String>) {
    let repo = repo(dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("prettier");
    std::fs::write(
        &fake,
        "#!/bin/sh\npwd > \"$FAKE_LOG\"\nls -a > started-here.txt\ncat\necho '<!-- formatted -->'\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let plan = dir.join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: g\nsteps:\n  - id: write\n    module: edit\n    config:\n      format: true\n      edits:\n        - { strategy: whole-file, path: notes.md, content: \"# notes\\n\" }\n",
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = dir.join("formatter.log");
    let out = nuvira()
        .env("PATH", path)
        .env("FAKE_LOG", &log)
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .args(flags)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&log).ok(),
    )
}
