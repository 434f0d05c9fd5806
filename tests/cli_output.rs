//! Output that cannot be written (a closed pipe, a full disk) ends the command cleanly: no
//! panic, no backtrace, a documented exit code.

use std::io::Read;
use std::process::{Command, Stdio};

/// A valid plan big enough that `nuvira graph` writes far more than a pipe buffer holds.
fn big_plan(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let mut text = String::from("goal: a long chain\nsteps:\n");
    for i in 0..20_000 {
        text.push_str(&format!("  - id: step-{i}\n    module: inspect\n"));
        if i > 0 {
            text.push_str(&format!("    depends_on: [step-{}]\n", i - 1));
        }
    }
    let p = dir.path().join("big.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

fn nuvira() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nuvira"));
    // A backtrace would show up if the command panicked; make sure it would be visible.
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

#[test]
fn a_reader_that_closes_the_pipe_early_gets_exit_0_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let plan = big_plan(&dir);
    for format in ["dot", "mermaid", "json"] {
        let mut child = nuvira()
            .args(["graph", "--format", format])
            .arg(&plan)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read a little, then close our end, like `| head -c 16`.
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 16];
        stdout.read_exact(&mut first).unwrap();
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {stderr}");
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn a_full_disk_on_stdout_exits_3_with_one_line_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let plan = big_plan(&dir);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(&plan)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.starts_with("error: failed printing to stdout"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn log_lines_on_a_pipe_carry_no_colour_codes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = nuvira()
        .arg("-v")
        .arg("run")
        .arg(root.join("examples/quickstart/plan.yaml"))
        .arg("--repo")
        .arg(root.join("examples/quickstart"))
        .args(["--scratch", "--dry-run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("INFO") && stderr.contains("run:started"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
    // A scratch run says where its copy is left.
    let left = stderr
        .lines()
        .find_map(|l| l.strip_prefix("the scratch copy stays at "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let dir = left.trim_end_matches(" (delete it when you are done)");
    assert!(
        std::path::Path::new(dir).join("plan.yaml").is_file(),
        "{dir}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn json_stdout(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {:?}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn json_format_prints_an_error_object_when_run_graph_or_test_fail_early() {
    // Regression: `--format json` printed nothing on stdout when these failed early.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "steps:\n  - id: a\n    module: nope\n  - id: r\n    module: report\n    depends_on: [a]\n",
    )
    .unwrap();
    let missing = dir.path().join("no-such-repo");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart");
    let cases: Vec<(Vec<std::ffi::OsString>, i32, &str)> = vec![
        (
            vec![
                "graph".into(),
                bad.clone().into(),
                "--format".into(),
                "json".into(),
            ],
            2,
            "invalid-plan",
        ),
        (
            vec![
                "run".into(),
                bad.clone().into(),
                "--repo".into(),
                example.into(),
                "--format".into(),
                "json".into(),
            ],
            2,
            "invalid-plan",
        ),
        (
            vec![
                "run".into(),
                bad.clone().into(),
                "--repo".into(),
                missing.clone().into(),
                "--format".into(),
                "json".into(),
            ],
            2,
            "repository",
        ),
        (
            vec![
                "test".into(),
                "--repo".into(),
                missing.clone().into(),
                "--format".into(),
                "json".into(),
            ],
            2,
            "repository",
        ),
        (
            vec![
                "test".into(),
                "--repo".into(),
                example.into(),
                "--sandbox".into(),
                "docker".into(),
                "--format".into(),
                "json".into(),
            ],
            3,
            "environment",
        ),
    ];
    for (args, code, kind) in cases {
        let out = nuvira()
            .args(&args)
            .env("DOCKER_HOST", "unix:///tmp/nuvira-no-such-engine.sock")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}");
        let v = json_stdout(&out);
        assert_eq!(v["ok"], false, "{args:?}: {v}");
        assert_eq!(v["error"]["kind"], kind, "{args:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(!message.is_empty());
        // The human message still goes to stderr.
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
        if kind == "invalid-plan" {
            let problems = v["error"]["problems"].as_array().unwrap();
            assert!(
                problems
                    .iter()
                    .any(|p| p["kind"] == "unknown-module" && p["line"] == 2),
                "{v}"
            );
        }
    }
}

#[test]
fn every_command_with_repo_words_a_missing_or_file_repository_the_same_way() {
    // Regression: four wordings, a duplicated cause and a raw `(os error 2)`.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-repo");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let edits = dir.path().join("e.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - { strategy: whole-file, path: a.txt, content: x }\n",
    )
    .unwrap();
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart/plan.yaml");
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["apply".into(), edits.clone().into()],
        vec!["rollback".into()],
        vec!["run".into(), plan.into()],
        vec!["test".into()],
        vec!["inspect".into(), "--goal".into(), "x".into()],
    ];
    for args in commands {
        for (repo, expected) in [
            (
                &missing,
                format!(
                    "error: repository `{}` does not exist; pass the repository folder with --repo DIR\n",
                    missing.display()
                ),
            ),
            (
                &file,
                format!(
                    "error: repository `{}` is a file, not a folder; pass the repository folder with --repo DIR\n",
                    file.display()
                ),
            ),
        ] {
            let out = nuvira()
                .args(&args)
                .arg("--repo")
                .arg(repo)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{args:?} {}", repo.display());
            assert_eq!(String::from_utf8_lossy(&out.stderr), expected, "{args:?}");
        }
    }
}

#[test]
fn a_repository_path_with_a_newline_or_escape_stays_on_the_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("a\nerror: forged\x1b[31m");
    let file = dir.path().join("b\nerror: forged");
    std::fs::write(&file, "x").unwrap();
    for (repo, what) in [(&missing, "does not exist"), (&file, "is a file")] {
        let out = nuvira()
            .args(["test", "--repo"])
            .arg(repo)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("\\nerror: forged"), "{stderr}");
        assert!(stderr.contains(what), "{stderr}");
        assert!(!stderr.contains('\x1b'), "{stderr}");
    }
}

#[test]
fn a_usage_error_with_format_json_still_prints_one_json_object() {
    for args in [
        vec!["test", "--format", "json", "--memory", "1x"],
        vec!["run", "--format=json", "--no-such-flag"],
    ] {
        let out = nuvira().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["kind"], "invalid-input");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
        // The human message still goes to stderr.
        assert!(String::from_utf8_lossy(&out.stderr).contains("error:"));
    }
}
