//! Run folders a run killed before its first write leaves (no `run.json`): `nuvira runs`
//! shows them as incomplete, `nuvira runs gc` removes them once no process holds their lock
//! and they are idle for the grace period — never a live run's, never through a symlink,
//! never outside `.nuvira/runs`. Real processes: a `nuvira run` stopped (by the test build's
//! `fault-injection` hook) right after it made its folder, then SIGKILLed.

use crate::runs_setup::{git_repo, run_folders as entries, text};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `nuvira` (see [`crate::runs_setup::nuvira`]) for `repo`, with a user configuration folder
/// that does not exist.
fn nuvira(repo: &Path) -> Command {
    crate::runs_setup::nuvira(&repo.join(".no-config"))
}

/// A git repository with `src/lib.rs`, and a plan whose one step edits it (no model).
fn repo(dir: &Path) -> (PathBuf, PathBuf) {
    let repo = dir.join("repo");
    git_repo(&repo, &[("src/lib.rs", "pub fn a() -> u32 { 1 }\n")]);
    let plan = dir.join("plan.yaml");
    std::fs::write(
        &plan,
        r#"goal: "a returns 10"
steps:
  - id: fix
    module: edit
    config: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 1 }", replace: "{ 10 }" } ] }
"#,
    )
    .unwrap();
    (repo, plan)
}

/// `nuvira run PLAN --repo REPO -q` to its end.
fn run(repo: &Path, plan: &Path) -> Output {
    nuvira(repo)
        .arg("run")
        .arg(plan)
        .arg("--repo")
        .arg(repo)
        .arg("-q")
        .output()
        .unwrap()
}

fn runs_json(repo: &Path) -> Vec<Value> {
    let out = nuvira(repo)
        .args(["runs", "--json", "--repo"])
        .arg(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// `nuvira runs gc --repo REPO ARGS`: its stderr (it must succeed).
fn gc(repo: &Path, args: &[&str]) -> String {
    let out = nuvira(repo)
        .args(["runs", "gc", "--repo"])
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Sets a folder's modification time `secs_ago` seconds back.
fn age(dir: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    std::fs::File::open(dir).unwrap().set_modified(t).unwrap();
}

#[test]
fn a_run_killed_at_its_very_start_is_listed_as_incomplete_kept_while_live_and_removed_once_dead() {
    let d = tempfile::tempdir().unwrap();
    let (repo, plan) = repo(d.path());
    // A real run, stopped right after it made (and locked) its folder, before any write.
    let mut child = paused(&repo, &["run", plan.to_str().unwrap(), "-q"], "run-folder");
    let names = entries(&repo);
    assert_eq!(names.len(), 1, "{names:?}");
    let id = names[0].clone();
    let dir = repo.join(".nuvira/runs").join(&id);
    assert!(
        !dir.join("run.json").exists(),
        "paused before its first write"
    );

    // While it lives: listed as incomplete and live; gc keeps it even with no grace at all.
    let rows = runs_json(&repo);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["id"], id.as_str());
    assert_eq!(rows[0]["status"], "incomplete");
    assert_eq!(rows[0]["incomplete"], true);
    assert_eq!(rows[0]["live"], true);
    let said = gc(&repo, &["--grace", "0s"]);
    assert!(said.contains("kept 1 incomplete"), "{said}");
    assert!(dir.is_dir(), "gc removed the folder of a live run");

    // SIGKILL: the folder stays as the killed run left it.
    child.kill().unwrap();
    child.wait().unwrap();
    let rows = runs_json(&repo);
    assert_eq!(rows[0]["status"], "incomplete");
    assert_eq!(rows[0]["live"], false);
    let listed = nuvira(&repo)
        .args(["runs", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    let listed = text(&listed);
    assert!(
        listed.contains(&id)
            && listed.contains("incomplete")
            && listed.contains("0 run(s), 1 incomplete"),
        "{listed}"
    );
    // Within the grace period (5 minutes by default) it is kept: a run of an older Nuvira
    // takes no lock and may be about to write it.
    let said = gc(&repo, &[]);
    assert!(said.contains("kept 1 incomplete"), "{said}");
    assert!(dir.is_dir());
    let said = gc(&repo, &["--grace", "0s", "--dry-run"]);
    assert!(said.contains(&format!("would remove {id}")), "{said}");
    assert!(dir.is_dir(), "a dry run removed it");
    let said = gc(&repo, &["--grace", "0s"]);
    assert!(said.contains(&format!("removed {id}")), "{said}");
    assert!(!dir.exists(), "the abandoned folder is still there: {said}");
    assert!(runs_json(&repo).is_empty());

    // A run after it is recorded as usual (and its own gc does not touch the repository's
    // other files).
    let out = run(&repo, &plan);
    assert!(out.status.success(), "{}", text(&out));
    let rows = runs_json(&repo);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "succeeded");
    assert_eq!(rows[0]["incomplete"], false);
}

#[cfg(unix)]
#[test]
fn gc_never_follows_a_symlinked_run_folder_nor_removes_a_planted_file_or_anything_outside() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = repo(d.path());
    let runs = repo.join(".nuvira/runs");
    std::fs::create_dir_all(&runs).unwrap();
    // Outside the history: two folders an attacker would like gone.
    let victim = d.path().join("victim");
    let victim2 = d.path().join("victim2");
    for v in [&victim, &victim2] {
        std::fs::create_dir_all(v).unwrap();
        std::fs::write(v.join("keep.txt"), "mine\n").unwrap();
    }
    // A run id that is a symlink to a folder without run.json, a planted file named like a
    // run, a folder that is no run id, and an abandoned folder holding a symlink out.
    std::os::unix::fs::symlink(&victim, runs.join("run-1-link")).unwrap();
    std::fs::write(runs.join("run-2-file"), "not a run\n").unwrap();
    std::fs::create_dir(runs.join("not-a-run")).unwrap();
    let dead = runs.join("run-3-dead");
    std::fs::create_dir(&dead).unwrap();
    std::os::unix::fs::symlink(&victim2, dead.join("escape")).unwrap();
    std::os::unix::fs::symlink(victim2.join("keep.txt"), dead.join("file-escape")).unwrap();
    std::fs::write(dead.join("events.jsonl"), "").unwrap();
    let said = gc(&repo, &["--grace", "0s", "--keep", "0", "--keep-days", "0"]);
    assert!(said.contains("removed run-3-dead"), "{said}");
    assert!(
        said.contains("left alone: run-1-link (a symlink, never followed)"),
        "{said}"
    );
    assert!(
        said.contains("left alone: run-2-file (not a folder)"),
        "{said}"
    );
    assert_eq!(entries(&repo), ["not-a-run", "run-1-link", "run-2-file"]);
    for v in [&victim, &victim2] {
        assert_eq!(
            std::fs::read_to_string(v.join("keep.txt")).unwrap(),
            "mine\n",
            "gc reached outside .nuvira/runs"
        );
    }
    assert!(
        std::fs::symlink_metadata(runs.join("run-1-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The list shows neither the symlink nor the file as a run.
    assert!(runs_json(&repo).is_empty());
}

#[test]
fn gc_keeps_exactly_what_the_policy_says_with_abandoned_folders_around() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = repo(d.path());
    let runs = repo.join(".nuvira/runs");
    let now = nuvira::api::now_ms();
    for i in 0..4u64 {
        let id = format!("run-{i}");
        let dir = runs.join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let meta = serde_json::json!({
            "format": 1, "id": id, "goal": "g", "status": "succeeded",
            "started_ms": now - (4 - i) * 60_000, "pid": 0, "steps": 1
        });
        std::fs::write(dir.join("run.json"), meta.to_string()).unwrap();
    }
    // An abandoned folder idle for an hour, and a fresh one (within the grace period).
    let old = runs.join("run-9-old");
    std::fs::create_dir(&old).unwrap();
    age(&old, 3600);
    let young = runs.join("run-9-young");
    std::fs::create_dir(&young).unwrap();
    // A run killed between its plan.json and its run.json: incomplete too.
    let half = runs.join("run-9-half");
    std::fs::create_dir(&half).unwrap();
    let plan = half.join("plan.json");
    std::fs::write(&plan, "{}").unwrap();
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&plan)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    age(&half, 3600);
    let rows = runs_json(&repo);
    let incomplete: Vec<&str> = rows
        .iter()
        .filter(|r| r["incomplete"] == true)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(incomplete.len(), 3, "{rows:#?}");
    // The complete runs come first, newest first, as before.
    let complete: Vec<&str> = rows
        .iter()
        .take(4)
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(complete, ["run-3", "run-2", "run-1", "run-0"]);
    let said = gc(&repo, &["--keep", "2"]);
    assert!(said.contains("removed 2 run(s), kept 2"), "{said}");
    assert!(
        said.contains("removed 2 abandoned run folder(s), kept 1 incomplete"),
        "{said}"
    );
    assert_eq!(entries(&repo), ["run-2", "run-3", "run-9-young"]);
    // Abandoned folders do not count as runs: --keep 1 keeps one run, the young folder stays.
    let said = gc(&repo, &["--keep", "1"]);
    assert!(said.contains("removed 1 run(s), kept 1"), "{said}");
    assert_eq!(entries(&repo), ["run-3", "run-9-young"]);
}

/// A plan whose step `fix` edits `src/lib.rs` and whose step `wait` then waits (at most 60 s)
/// for the file `stop`, after touching `started`: a real run that is live, recorded and holds
/// its folder while the test acts.
fn waiting_plan(dir: &Path) -> PathBuf {
    let plan = dir.join("waiting.yaml");
    let started = dir.join("started");
    let stop = dir.join("stop");
    std::fs::write(
        &plan,
        format!(
            r#"goal: "a returns 10, then wait"
steps:
  - id: fix
    module: edit
    config: {{ edits: [ {{ strategy: search-replace, path: src/lib.rs, search: "{{ 1 }}", replace: "{{ 10 }}" }} ] }}
  - id: wait
    module: execute
    depends_on: [fix]
    config:
      sandbox: local
      command: "touch '{}'; i=0; while [ ! -f '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
"#,
            started.display(),
            stop.display()
        ),
    )
    .unwrap();
    plan
}

/// Waits (at most 60 s) until `path` exists.
fn wait_for(path: &Path) {
    let t = std::time::Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Every file under `dir` with its content (sorted by path).
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn resume_refuses_a_run_still_going_on_in_another_process_and_changes_no_file() {
    let d = tempfile::tempdir().unwrap();
    let (repo, _) = repo(d.path());
    let plan = waiting_plan(d.path());
    // A real run: its edit committed, then waiting in step `wait` while it holds its folder.
    let mut child = nuvira(&repo)
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .arg("-q")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&d.path().join("started"));
    let names = entries(&repo);
    assert_eq!(names.len(), 1, "{names:?}");
    let id = names[0].clone();
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn a() -> u32 { 10 }\n"
    );
    let before = snapshot(&repo);

    let out = nuvira(&repo)
        .args(["resume", &id, "-q", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!("run {id} is still running in another process"))
            && said.contains("wait for it or stop it, then resume"),
        "{said}"
    );
    assert_eq!(
        snapshot(&repo),
        before,
        "the refused resume changed a file of the repository or of the live run"
    );

    // The live run goes on and ends as usual, recorded.
    std::fs::write(d.path().join("stop"), "").unwrap();
    assert!(child.wait().unwrap().success());
    let rows = runs_json(&repo);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["status"], "succeeded");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn a() -> u32 { 10 }\n"
    );
}

/// Spawns `nuvira ARGS --repo REPO` stopped at fault point `point` (returns once it paused).
fn paused(repo: &Path, args: &[&str], point: &str) -> std::process::Child {
    let mut child = nuvira(repo)
        .args(args)
        .arg("--repo")
        .arg(repo)
        .env(nuvira_workspace::FAULT_PAUSE_AT_ENV, point)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "nuvira {args:?} ended before its pause point {point}"
        );
        if line.trim() == format!("nuvira: paused at {point}") {
            break;
        }
    }
    // The rest of its stderr is drained, so that it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    child
}

/// Lets a [`paused`] process go on and waits for it.
fn go_on(mut child: std::process::Child) -> std::process::ExitStatus {
    use std::io::Write as _;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\n").unwrap();
    drop(stdin);
    child.wait().unwrap()
}

#[test]
fn gc_never_removes_an_old_run_a_resume_reopened_after_gc_looked() {
    let d = tempfile::tempdir().unwrap();
    let (repo, plan) = repo(d.path());
    let out = run(&repo, &plan);
    assert!(out.status.success(), "{}", text(&out));
    let id = entries(&repo).remove(0);
    let dir = repo.join(".nuvira/runs").join(&id);
    // The run is 40 days old: retention (`--keep-days 1`) would remove it.
    let meta_path = dir.join("run.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["started_ms"] = (nuvira::api::now_ms() - 40 * 86_400_000).into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();

    // A gc that has looked at the history (the run is old and done), then a resume of the
    // run that reopened its folder (holding its lock), then the gc goes on.
    let gc = paused(&repo, &["runs", "gc", "--keep-days", "1"], "gc-scanned");
    let resume = paused(&repo, &["resume", &id, "-q"], "resume-reopened");
    assert!(go_on(gc).success());
    assert!(
        dir.join("run.json").is_file(),
        "gc removed the folder of a run a live resume holds"
    );
    assert!(go_on(resume).success());
    let rows = runs_json(&repo);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["id"], id.as_str());
    assert_eq!(rows[0]["resumes"], 1);
}
