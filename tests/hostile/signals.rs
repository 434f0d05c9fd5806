//! Signals and kills: SIGTERM and SIGHUP stop a run like Ctrl-C does (edits rolled back,
//! sandbox removed, exit 143 / 129); a SIGKILL leaves nothing the next start does not clean up
//! or name (temp files, sandbox copies, process groups, a run whose edits stayed).
//!
//! Real `nuvira` processes and real signals. Every wait for another process is a bounded poll
//! of a condition (a pid file the sandboxed command writes, a container appearing), never a
//! sleep standing in for the work.

use crate::support::{nuvira, nuvira_path};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every user file below `dir` (not `.nuvira/`) with its bytes.
fn user_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".nuvira" {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every `.nuvira-tmp-*` file below `dir`, `.nuvira/` included.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(temp_files(&path));
        } else if e.file_name().to_string_lossy().starts_with(".nuvira-tmp-") {
            out.push(path);
        }
    }
    out
}

/// Polls `f` every 10 ms until it returns `Some`, for at most `limit`.
fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a live (not zombie) process of process group `pgid` exists.
fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read_to_string(p.path().join("stat")).is_ok_and(|stat| {
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 2 && f[0] != "Z" && f[2].parse::<i32>().ok() == Some(pgid)
        })
    })
}

/// Waits (bounded) until group `pgid` is gone; kills it and panics when it is not.
fn assert_group_gone(pgid: i32, what: &str) {
    let gone = poll(Duration::from_secs(5), || {
        (!group_alive(pgid)).then_some(())
    });
    if gone.is_none() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        panic!("{what}: process group {pgid} survived");
    }
}

/// The pid a sandboxed command wrote to `file` (`echo $$ > file`), once it is there.
fn wait_for_pid(file: &Path, child: &mut Child) -> i32 {
    poll(Duration::from_secs(60), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("nuvira ended ({status}) before the command started");
        }
        std::fs::read_to_string(file)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse::<i32>().ok())
    })
    .expect("the sandboxed command never started")
}

/// A repository with one file, and a plan whose edit step changes it and whose next step runs
/// `command` for a long time.
fn repo_and_plan(command: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/lib.txt"), "one\n").unwrap();
    std::fs::write(repo.join("README"), "a repo\n").unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        format!(
            r#"steps:
  - id: fix
    module: edit
    config:
      edits:
        - {{ path: src/lib.txt, strategy: search-replace, search: "one", replace: "two" }}
  - id: wait
    module: execute
    depends_on: [fix]
    config: {{ command: {command:?}, timeout: 5m }}
"#
        ),
    )
    .unwrap();
    (dir, repo, plan)
}

fn spawn_run(plan: &Path, repo: &Path, extra: &[&str], tmp: &Path) -> Child {
    Command::new(nuvira_path())
        .arg("run")
        .arg(plan)
        .arg("--repo")
        .arg(repo)
        .args(extra)
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the rest of a child's stderr and waits for it.
fn finish(mut child: Child) -> (Option<i32>, String) {
    let err: Vec<String> = BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .collect();
    let status = child.wait().unwrap();
    (status.code(), err.join("\n"))
}

/// SIGTERM / SIGHUP during the local sandbox's command: the exit code of the signal, the tree
/// as before, the command's process group gone.
fn signal_stops_a_local_run(signal: Signal, code: i32) {
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("pid");
    let (_dir, repo, plan) =
        repo_and_plan(&format!("echo $$ > {}; exec sleep 300", pidfile.display()));
    let before = user_tree(&repo);
    let mut child = spawn_run(&plan, &repo, &["--sandbox", "local"], marks.path());
    let pgid = wait_for_pid(&pidfile, &mut child);
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.txt")).unwrap(),
        "two\n",
        "the edit step committed before the command ran"
    );
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), signal).unwrap();
    let (status, err) = finish(child);
    assert_eq!(status, Some(code), "{signal}: {err}");
    assert!(err.contains("rolled back 1 file(s)"), "{err}");
    assert_eq!(user_tree(&repo), before, "{signal} left the run's edits");
    assert_group_gone(pgid, &format!("{signal} of nuvira run"));
}

#[test]
fn sigterm_stops_a_local_run_rolls_back_and_exits_143() {
    signal_stops_a_local_run(Signal::SIGTERM, 143);
}

#[test]
fn sighup_stops_a_local_run_rolls_back_and_exits_129() {
    signal_stops_a_local_run(Signal::SIGHUP, 129);
}

fn docker_ready() -> bool {
    let ok = Command::new("docker")
        .args(["image", "inspect", "nuvira-busybox:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    let found = if ok {
        Ok(())
    } else {
        Err("no Docker engine with the nuvira-busybox image answers")
    };
    nuvira_test_support::env::require(nuvira_test_support::env::Requirement::Docker, found)
        .is_some()
}

/// The ids of the `nuvira.sandbox` containers (running or not) whose command has `token`.
fn containers_with(token: &str, all: bool) -> Vec<String> {
    let mut cmd = Command::new("docker");
    cmd.arg("ps");
    if all {
        cmd.arg("-a");
    }
    let out = cmd
        .args(["--no-trunc", "--filter", "label=nuvira.sandbox"])
        .args(["--format", "{{.ID}}\t{{.Command}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(token))
        .filter_map(|l| l.split('\t').next().map(str::to_owned))
        .collect()
}

fn signal_stops_a_docker_run(signal: Signal, code: i32) {
    if !docker_ready() {
        return;
    }
    let token = format!("nuvira-signal-test-{}-{}", std::process::id(), code);
    let (_dir, repo, plan) = repo_and_plan(&format!("sleep 300; echo {token}"));
    let before = user_tree(&repo);
    let tmp = tempfile::tempdir().unwrap();
    let mut child = spawn_run(
        &plan,
        &repo,
        &["--sandbox", "docker", "--image", "nuvira-busybox:latest"],
        tmp.path(),
    );
    let ids = poll(Duration::from_secs(120), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("nuvira ended ({status}) before its container ran");
        }
        let ids = containers_with(&token, false);
        (!ids.is_empty()).then_some(ids)
    })
    .expect("the run's container never ran");
    kill(Pid::from_raw(i32::try_from(child.id()).unwrap()), signal).unwrap();
    let (status, err) = finish(child);
    assert_eq!(status, Some(code), "{signal}: {err}");
    assert_eq!(user_tree(&repo), before, "{signal} left the run's edits");
    let left = containers_with(&token, true);
    if !left.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&left)
            .output();
        panic!("{signal} left the run's container(s) {ids:?}: {left:?}");
    }
}

#[test]
fn sigterm_stops_a_docker_run_and_removes_its_container() {
    signal_stops_a_docker_run(Signal::SIGTERM, 143);
}

#[test]
fn sighup_stops_a_docker_run_and_removes_its_container() {
    signal_stops_a_docker_run(Signal::SIGHUP, 129);
}

/// The run ids the journal of `repo` records.
fn journal_runs(repo: &Path) -> Vec<String> {
    let mut runs = Vec::new();
    for e in std::fs::read_dir(repo.join(".nuvira/journal"))
        .unwrap()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(e.path().join("txn.json")) {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            runs.push(v["run_id"].as_str().unwrap().to_owned());
        }
    }
    runs.sort();
    runs.dedup();
    runs
}

#[test]
fn a_run_killed_after_its_edits_is_named_at_the_next_start_and_rollback_restores_it() {
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("pid");
    let (dir, repo, plan) =
        repo_and_plan(&format!("echo $$ > {}; exec sleep 300", pidfile.display()));
    let before = user_tree(&repo);
    let mut child = spawn_run(&plan, &repo, &["--sandbox", "local"], marks.path());
    let pgid = wait_for_pid(&pidfile, &mut child);
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let runs = journal_runs(&repo);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.txt")).unwrap(),
        "two\n",
        "a committed edit survives a kill until it is rolled back"
    );

    // The next `nuvira run` (a dry run of another plan) and `nuvira apply` name it, once each.
    let other = dir.path().join("other.yaml");
    std::fs::write(
        &other,
        "steps:\n  - id: look\n    module: edit\n    config:\n      edits:\n        - { path: README, strategy: search-replace, search: a, replace: b }\n",
    )
    .unwrap();
    let message = format!("run {run} was interrupted after its edits: `nuvira rollback");
    let out = nuvira()
        .env("TMPDIR", marks.path())
        .args(["run", "--dry-run", "--quiet", "--repo"])
        .arg(&repo)
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches(&message).count(), 1, "{err}");
    // That start also killed the dead run's sandboxed command and removed its copy.
    assert_group_gone(pgid, "the next start after a SIGKILL of nuvira run");
    let edits = dir.path().join("edits.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - { strategy: search-replace, path: README, search: a, replace: b }\n",
    )
    .unwrap();
    let out = nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(&repo)
        .arg(&edits)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches(&message).count(), 1, "{err}");

    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(run.as_str()));
    assert_eq!(user_tree(&repo), before);
    // Undone, it is not named again.
    let out = nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(&repo)
        .arg(&edits)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("was interrupted"), "{err}");
}

#[test]
fn a_killed_local_test_leaves_no_sandbox_copy_or_process_group_after_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("pid");
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
    // A fresh temporary copy (--no-cache): the persistent copy's case is the next test.
    let mut child = Command::new(nuvira_path())
        .args(["test", "--sandbox", "local", "--no-cache", "--command"])
        .arg(format!("echo $$ > {}; exec sleep 300", pidfile.display()))
        .arg("--repo")
        .arg(repo.path())
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pgid = wait_for_pid(&pidfile, &mut child);
    let copy = std::fs::read_link(format!("/proc/{pgid}/cwd")).unwrap();
    assert!(copy.starts_with(tmp.path()), "{}", copy.display());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        group_alive(pgid),
        "the kill itself is what leaves the group behind"
    );

    let out = nuvira()
        .env("TMPDIR", tmp.path())
        .args(["test", "--sandbox", "local", "--command", "true", "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_group_gone(pgid, "the next start after a SIGKILL of nuvira test");
    assert!(
        !copy.exists(),
        "the dead test's copy {} stayed",
        copy.display()
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nuvira-sandbox-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A small deterministic generator (the seed is printed, so a failure can be replayed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

#[test]
fn sigkill_of_apply_at_random_moments_leaves_no_temp_file_after_the_next_start() {
    const TRIALS: usize = 80;
    let repo = tempfile::tempdir().unwrap();
    let mut edits = String::from("edits:\n");
    let body = "x".repeat(4 * 1024);
    for d in 0..4 {
        std::fs::create_dir_all(repo.path().join(format!("d{d}"))).unwrap();
        for f in 0..15 {
            let rel = format!("d{d}/f{f}.txt");
            std::fs::write(repo.path().join(&rel), format!("old\n{body}\n")).unwrap();
            edits.push_str(&format!(
                "  - {{ strategy: search-replace, path: {rel}, search: old, replace: new }}\n"
            ));
        }
    }
    let files = tempfile::tempdir().unwrap();
    let edits_path = files.path().join("edits.yaml");
    std::fs::write(&edits_path, edits).unwrap();
    let before = user_tree(repo.path());
    let apply = || {
        let mut c = Command::new(nuvira_path());
        c.args(["apply", "--repo"])
            .arg(repo.path())
            .arg(&edits_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let rollback = |why: &str| {
        let out = nuvira()
            .args(["rollback", "--repo"])
            .arg(repo.path())
            .output()
            .unwrap();
        assert!(
            out.status.success()
                || String::from_utf8_lossy(&out.stderr).contains("nothing to roll back"),
            "{why}: {out:?}"
        );
    };
    // How long one whole batch takes here: the kills land anywhere in it.
    let started = Instant::now();
    assert!(apply().status().unwrap().success());
    let full = u64::try_from(started.elapsed().as_micros())
        .unwrap()
        .max(1000);
    rollback("the timing batch");
    assert_eq!(user_tree(repo.path()), before);

    let seed = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_007,
    )
    .unwrap();
    eprintln!("seed {seed}, one batch takes {full} µs");
    let mut rng = Lcg(seed);
    let deadline = Instant::now() + Duration::from_secs(420);
    let mut left_by_kills = 0;
    for trial in 0..TRIALS {
        assert!(Instant::now() < deadline, "trial {trial}: out of time");
        let mut child = apply().spawn().unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(full)));
        let _ = child.kill();
        child.wait().unwrap();
        if !temp_files(repo.path()).is_empty() {
            left_by_kills += 1;
        }
        // The next start: every other trial a dry-run apply first, then the rollback.
        if trial % 2 == 0 {
            let out = nuvira()
                .args(["apply", "--dry-run", "--repo"])
                .arg(repo.path())
                .arg(&edits_path)
                .output()
                .unwrap();
            let left = temp_files(repo.path());
            assert!(
                left.is_empty(),
                "trial {trial} (seed {seed}): after the next apply: {left:?}, {out:?}"
            );
        }
        rollback(&format!("trial {trial}"));
        let left = temp_files(repo.path());
        assert!(
            left.is_empty(),
            "trial {trial} (seed {seed}): after rollback: {left:?}"
        );
        assert_eq!(
            user_tree(repo.path()),
            before,
            "trial {trial} (seed {seed}): an edit stayed"
        );
    }
    eprintln!("{left_by_kills} of {TRIALS} kills left temp files that the next start removed");
}

/// A tmpfs of `size` mounted on a new folder (root only); `None`, saying why, where it cannot be.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self(dir)),
            other => {
                eprintln!("skipped: cannot mount a tmpfs here ({other:?})");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_batch_that_runs_out_of_space_leaves_no_partial_journal() {
    let Some(fs) = Tmpfs::mount("128k") else {
        return;
    };
    let repo = fs.0.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    // Recording the original (a copy in the journal) does not fit next to it.
    std::fs::write(
        repo.join("big.txt"),
        format!("old\n{}\n", "x".repeat(80 * 1024)),
    )
    .unwrap();
    let before = user_tree(&repo);
    let files = tempfile::tempdir().unwrap();
    let edits = files.path().join("edits.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - { strategy: search-replace, path: big.txt, search: old, replace: new }\n",
    )
    .unwrap();
    let out = nuvira()
        .args(["apply", "--repo"])
        .arg(&repo)
        .arg(&edits)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("space"), "the error names the cause: {err}");
    assert_eq!(user_tree(&repo), before);
    let journal = repo.join(".nuvira/journal");
    let left: Vec<_> = std::fs::read_dir(&journal)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a partial journal stayed: {left:?}");
    assert!(temp_files(&repo).is_empty(), "{:?}", temp_files(&repo));
}

#[test]
fn a_planted_running_folder_symlink_is_not_written_or_cleaned_through() {
    let outside = tempfile::tempdir().unwrap();
    // A file named like a marker of a dead run, where the symlink points.
    std::fs::write(outside.path().join("run-1-0"), "1\n").unwrap();
    let sentinel = crate::support::Sentinel::of(outside.path());
    let (_dir, repo, plan) = repo_and_plan("true");
    std::fs::create_dir_all(repo.join(".nuvira")).unwrap();
    std::os::unix::fs::symlink(outside.path(), repo.join(".nuvira/running")).unwrap();
    let out = nuvira()
        .args(["run", "--quiet", "--sandbox", "local", "--repo"])
        .arg(&repo)
        .arg(&plan)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("is not a folder"),
        "the warning names the cause: {err}"
    );
    sentinel.assert_unchanged(outside.path());
}

#[test]
fn a_killed_cached_local_test_has_its_group_in_the_persistent_copy_killed_at_the_next_start() {
    let cache = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("pid");
    let (repo, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(repo.path().join("a.txt"), "a\n").unwrap();
    let mut child = Command::new(nuvira_path())
        .args(["test", "--sandbox", "local", "--command"])
        .arg(format!("echo $$ > {}; exec sleep 300", pidfile.display()))
        .arg("--repo")
        .arg(repo.path())
        .env("NUVIRA_CACHE_DIR", cache.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pgid = wait_for_pid(&pidfile, &mut child);
    let copy = std::fs::read_link(format!("/proc/{pgid}/cwd")).unwrap();
    assert!(copy.starts_with(cache.path()), "{}", copy.display());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(group_alive(pgid), "the kill itself leaves the group behind");

    // The next start, even for another project, kills it: its copy's lock is free.
    let out = nuvira()
        .env("NUVIRA_CACHE_DIR", cache.path())
        .args(["test", "--sandbox", "local", "--command", "true", "--repo"])
        .arg(other.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_group_gone(
        pgid,
        "the next start after a SIGKILL of a cached nuvira test",
    );
}
