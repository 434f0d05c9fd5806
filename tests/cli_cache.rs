//! `nuvira test`'s warm caches and `nuvira cache list|clean`, end to end: real processes, a
//! real Docker engine (skipped without one unless NUVIRA_REQUIRE_DOCKER=1).

use assert_cmd::Command;
use nuvira_test_support::env::{Requirement, require};
use serde_json::Value;
use std::path::Path;

/// `nuvira` with its cache in `cache`.
fn nuvira(cache: &Path) -> Command {
    let mut c = Command::cargo_bin("nuvira").unwrap();
    c.env("NUVIRA_CACHE_DIR", cache);
    c
}

fn project() -> tempfile::TempDir {
    let p = tempfile::tempdir().unwrap();
    std::fs::write(
        p.path().join("Cargo.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n",
    )
    .unwrap();
    std::fs::create_dir(p.path().join("src")).unwrap();
    std::fs::write(p.path().join("src/lib.rs"), "").unwrap();
    p
}

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

#[test]
fn two_nuvira_test_at_once_on_one_project_both_succeed() {
    let cache = tempfile::tempdir().unwrap();
    let p = project();
    let marks = tempfile::tempdir().unwrap();
    let m = marks.path().display();
    // Each run says it started and waits for the other: the two are in the sandbox at once.
    let spawn = |me: &str, other: &str| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
            .env("NUVIRA_CACHE_DIR", cache.path())
            .args([
                "test",
                "--sandbox",
                "local",
                "--format",
                "json",
                "--timeout",
                "60s",
            ])
            .arg("--command")
            .arg(format!(
                "touch {m}/{me}; while [ ! -e {m}/{other} ]; do :; done; echo {me} ok"
            ))
            .arg("--repo")
            .arg(p.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (one, two) = (spawn("one", "two"), spawn("two", "one"));
    let (one, two) = (
        one.wait_with_output().unwrap(),
        two.wait_with_output().unwrap(),
    );
    let mut notes = Vec::new();
    for (out, me) in [(&one, "one"), (&two, "two")] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json_of(&out.stdout);
        assert_eq!(v["success"], true);
        assert!(v["log"].as_str().unwrap().contains(&format!("{me} ok")));
        notes.push(v["sandbox"]["workspace_copy"].as_str().unwrap().to_owned());
    }
    // Both on a persistent copy: one in each warm slot.
    assert!(notes.iter().all(|n| n.starts_with("synced")), "{notes:?}");
    assert!(
        notes.iter().any(|n| n.contains("warm slot 2 of 2")),
        "{notes:?}"
    );
}

#[test]
fn no_cache_runs_in_a_fresh_copy_and_leaves_no_cache() {
    let cache = tempfile::tempdir().unwrap();
    let p = project();
    let out = nuvira(cache.path())
        .args([
            "test",
            "--sandbox",
            "local",
            "--no-cache",
            "--format",
            "json",
        ])
        .args(["--command", "echo \"[$CARGO_TARGET_DIR]\""])
        .arg("--repo")
        .arg(p.path())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let v = json_of(&out.stdout);
    assert_eq!(v["success"], true, "{v}");
    assert!(v["log"].as_str().unwrap().starts_with("[]"), "{v}");
    assert!(v["sandbox"].get("cache_key").is_none(), "{v}");
    assert!(!cache.path().join("sandbox").exists());
}

fn volumes_of(project_key: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["volume", "ls", "-q", "--filter"])
        .arg(format!("label=nuvira.cache.project={project_key}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", "nuvira-busybox:latest"])
        .output()
        .is_ok_and(|o| o.status.success());
    require(
        Requirement::Docker,
        if ok {
            Ok(())
        } else {
            Err("no Docker engine with the nuvira images answers")
        },
    )
    .is_some()
}

#[test]
fn cache_list_shows_entries_and_clean_removes_folders_and_volumes() {
    if !docker_ready() {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let (a, b) = (project(), project());
    for repo in [a.path(), b.path()] {
        for sandbox in ["local", "docker"] {
            let out = nuvira(cache.path())
                .args([
                    "test",
                    "--sandbox",
                    sandbox,
                    "--image",
                    "nuvira-busybox:latest",
                ])
                .args([
                    "--format",
                    "json",
                    "--command",
                    "touch $CARGO_TARGET_DIR-x || true",
                ])
                .arg("--repo")
                .arg(repo)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{sandbox}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let list = nuvira(cache.path())
        .args(["cache", "list", "--json"])
        .output()
        .unwrap();
    let v = json_of(&list.stdout);
    let entries = v["entries"].as_array().unwrap();
    // Each project: a cargo entry and a workspace entry, each with a volume.
    assert_eq!(entries.len(), 4, "{v:#}");
    for e in entries {
        for key in ["key", "project", "toolchain", "size", "last_used"] {
            assert!(e.get(key).is_some(), "{key} missing: {e}");
        }
        assert!(e["volume"].as_str().unwrap().starts_with("nuvira-cache-"));
    }
    let key_of = |repo: &Path| {
        let canon = std::fs::canonicalize(repo).unwrap();
        entries
            .iter()
            .find(|e| e["project"] == canon.to_string_lossy().as_ref())
            .unwrap()["project_key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (key_a, key_b) = (key_of(a.path()), key_of(b.path()));
    assert_eq!(volumes_of(&key_a).len(), 2);
    assert_eq!(volumes_of(&key_b).len(), 2);
    // One repository's list says its size is its own, the cap the folder's.
    let one = nuvira(cache.path())
        .args(["cache", "list", "--repo"])
        .arg(a.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&one.stdout);
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains("this repository's entries: ") && header.contains("the folder's cap: "),
        "{text}"
    );
    assert!(text.contains(&key_a) && !text.contains(&key_b), "{text}");

    // Clean one repository: its folders and volumes go, the other's stay.
    let clean = nuvira(cache.path())
        .args(["cache", "clean", "--repo"])
        .arg(a.path())
        .output()
        .unwrap();
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert!(volumes_of(&key_a).is_empty());
    assert_eq!(volumes_of(&key_b).len(), 2);
    let left: Vec<String> = std::fs::read_dir(cache.path().join("sandbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.iter().all(|n| !n.starts_with(&key_a)), "{left:?}");
    assert_eq!(left.iter().filter(|n| n.starts_with(&key_b)).count(), 2);

    // Clean everything: everything of this cache folder. A cache volume of another cache
    // folder on the same engine (another user's, another test's) is not its to remove.
    let other_key = format!("other-{}", std::process::id());
    let other = format!("nuvira-cache-{other_key}-test");
    let made = std::process::Command::new("docker")
        .args(["volume", "create", "--label", "nuvira.cache=1", "--label"])
        .arg(format!("nuvira.cache.project={other_key}"))
        .args([
            "--label",
            "nuvira.cache.root=/elsewhere/nuvira-cache",
            &other,
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let clean = nuvira(cache.path())
        .args(["cache", "clean"])
        .output()
        .unwrap();
    let kept = volumes_of(&other_key);
    let _ = std::process::Command::new("docker")
        .args(["volume", "rm", "-f", &other])
        .output();
    assert_eq!(
        kept,
        vec![other.clone()],
        "another cache folder's volume was removed:\n{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert!(volumes_of(&key_b).is_empty());
    let left: Vec<String> = std::fs::read_dir(cache.path().join("sandbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.is_empty(),
        "{left:?}\n{}",
        String::from_utf8_lossy(&clean.stdout)
    );
}

#[test]
fn run_no_cache_turns_the_caches_off_for_every_test_and_execute_step() {
    let cache = tempfile::tempdir().unwrap();
    let p = project();
    let plan = p.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: print the target dir\nsteps:\n  - id: test\n    module: test\n    config: { sandbox: local, command: 'echo \"[$CARGO_TARGET_DIR]\"' }\n  - id: exec\n    module: execute\n    depends_on: [test]\n    config: { sandbox: local, command: 'echo \"[$CARGO_TARGET_DIR]\"' }\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = nuvira(cache.path())
            .args(["run", "--quiet", "--no-history", "--format", "json"])
            .args(extra)
            .arg(&plan)
            .arg("--repo")
            .arg(p.path())
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let cold = run(&["--no-cache"]);
    assert!(!cache.path().join("sandbox").exists(), "{cold}");
    // Without the flag the same plan uses the caches: the check above is meaningful.
    let warm = run(&[]);
    let entries: Vec<String> = std::fs::read_dir(cache.path().join("sandbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        entries.iter().any(|e| e.ends_with("-cargo")),
        "{entries:?}\n{warm}"
    );
}

/// The ids of the kept containers of the project `project_key` (nuvira_sandbox::docker_keep).
fn kept_of(project_key: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter", "label=nuvira.keep=1"])
        .arg("--filter")
        .arg(format!("label=nuvira.cache.project={project_key}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_warm_docker_run_reuses_its_kept_container_which_cache_list_shows_and_clean_removes() {
    if !docker_ready() {
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let (a, b) = (project(), project());
    let run = |repo: &Path, reuse: Option<&str>, extra: &[&str]| {
        let mut cmd = nuvira(cache.path());
        cmd.args(["test", "--sandbox", "docker", "--format", "json"])
            .args(["--command", "true"])
            .args(extra)
            .arg("--repo")
            .arg(repo);
        if let Some(v) = reuse {
            cmd.env("NUVIRA_DOCKER_REUSE", v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json_of(&out.stdout);
        v["sandbox"]["container_id"].as_str().unwrap().to_owned()
    };
    let test = |repo: &Path, reuse: Option<&str>| run(repo, reuse, &[]);
    // Reuse is the default: the second run execs into the container kept by the first.
    let first = test(a.path(), None);
    assert_eq!(test(a.path(), None), first, "the second run did not reuse");
    assert_eq!(test(a.path(), Some("1")), first);
    // Off: a fresh container each run, and the kept one is left for the next run that may use
    // it. `--no-cache` (no warm slot) never uses one either.
    let off = test(a.path(), Some("0"));
    assert_ne!(off, first);
    assert_ne!(test(a.path(), Some("off")), off);
    let cold = run(a.path(), None, &["--no-cache"]);
    assert!(![first.as_str(), off.as_str()].contains(&cold.as_str()));
    assert_ne!(run(a.path(), None, &["--no-cache"]), cold);
    assert_eq!(test(a.path(), None), first);
    test(b.path(), None);
    let list = nuvira(cache.path())
        .args(["cache", "list", "--json"])
        .output()
        .unwrap();
    let v = json_of(&list.stdout);
    let kept = v["kept_containers"].as_array().unwrap();
    assert_eq!(kept.len(), 2, "{v:#}");
    let key_a = kept
        .iter()
        .find(|k| k["id"] == first.as_str())
        .unwrap_or_else(|| panic!("{v:#}"))["project_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let key_b = kept
        .iter()
        .map(|k| k["project_key"].as_str().unwrap().to_owned())
        .find(|k| *k != key_a)
        .unwrap();
    let text = nuvira(cache.path())
        .args(["cache", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("container nuvira-keep-"), "{text}");
    assert_eq!(kept_of(&key_a), vec![first.clone()]);

    let clean = nuvira(cache.path())
        .args(["cache", "clean", "--repo"])
        .arg(a.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{out}");
    assert!(out.contains("removed container nuvira-keep-"), "{out}");
    assert!(kept_of(&key_a).is_empty(), "{out}");
    assert!(volumes_of(&key_a).is_empty(), "{out}");
    assert_eq!(kept_of(&key_b).len(), 1);
    let clean = nuvira(cache.path())
        .args(["cache", "clean"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&clean.stdout);
    assert_eq!(clean.status.code(), Some(0), "{out}");
    assert!(kept_of(&key_b).is_empty(), "{out}");
    assert!(volumes_of(&key_b).is_empty(), "{out}");
}

// A cache folder deleted (a temporary NUVIRA_CACHE_DIR, a test's) leaves its Docker volumes and
// kept container behind, which no `--repo` or folder-scoped clean reaches: `cache list` shows
// them, `cache clean --deleted-folders` removes exactly those, never a live folder's.
#[test]
fn the_volumes_and_kept_container_of_a_deleted_cache_folder_are_listed_and_cleaned() {
    if !docker_ready() {
        return;
    }
    let (live, gone) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (project(), project());
    let run = |cache: &Path, repo: &Path| {
        let out = nuvira(cache)
            .args(["test", "--sandbox", "docker", "--format", "json"])
            .args(["--command", "true", "--repo"])
            .arg(repo)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json_of(&out.stdout)["sandbox"]["cache_key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let key_live = run(live.path(), a.path());
    let key_gone = run(gone.path(), b.path());
    assert!(!volumes_of(&key_gone).is_empty() && !kept_of(&key_gone).is_empty());
    let gone_dir = gone.path().to_path_buf();
    drop(gone);
    assert!(!gone_dir.exists());

    let list = nuvira(live.path())
        .args(["cache", "list", "--json"])
        .output()
        .unwrap();
    let v = json_of(&list.stdout);
    let names = |key: &str, field: &str| -> Vec<String> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: {v:#}"))
            .iter()
            .map(|x| x[field].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = names("volumes_of_deleted_cache_folders", "name");
    for name in volumes_of(&key_gone) {
        assert!(listed.contains(&name), "{name} not listed: {v:#}");
    }
    for name in volumes_of(&key_live) {
        assert!(!listed.contains(&name), "a live folder's {name} listed");
    }
    let kept = names("containers_of_deleted_cache_folders", "id");
    assert!(kept.contains(&kept_of(&key_gone)[0]), "{v:#}");
    assert!(!kept.contains(&kept_of(&key_live)[0]), "{v:#}");
    let text = nuvira(live.path())
        .args(["cache", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("of a deleted cache folder")
            && text.contains("nuvira cache clean --deleted-folders"),
        "{text}"
    );

    let clean = nuvira(live.path())
        .args(["cache", "clean", "--deleted-folders", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let c = json_of(&clean.stdout);
    assert!(c["docker"].is_null(), "{c:#}");
    assert!(volumes_of(&key_gone).is_empty(), "{c:#}");
    assert!(kept_of(&key_gone).is_empty(), "{c:#}");
    // The live folder's are untouched, and its entries still listed.
    assert!(!volumes_of(&key_live).is_empty());
    assert_eq!(kept_of(&key_live).len(), 1);
    let after = json_of(
        &nuvira(live.path())
            .args(["cache", "list", "--json"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        !after["entries"].as_array().unwrap().is_empty(),
        "{after:#}"
    );
    // And they go with the folder's own clean.
    let own = nuvira(live.path())
        .args(["cache", "clean"])
        .output()
        .unwrap();
    assert_eq!(own.status.code(), Some(0));
    assert!(volumes_of(&key_live).is_empty());
    assert!(kept_of(&key_live).is_empty());
}

#[test]
fn cache_with_a_repo_that_is_a_file_exits_2_and_touches_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for action in ["list", "clean"] {
        let out = nuvira(cache.path())
            .args(["cache", action, "--repo"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{action}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is a file, not a folder"), "{stderr}");
    }
    assert!(file.is_file());
}
