//! `nuvira test` end to end: the real binary on the small real projects of nuvira-runner, in the
//! local sandbox and (when an engine answers, or always with NUVIRA_REQUIRE_DOCKER=1) in Docker.

use assert_cmd::Command;
use nuvira_test_support::env::{Requirement, pytest_ready, require};
use serde_json::Value;
use std::path::PathBuf;

fn project(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/modules/runner/tests/projects"
    ))
    .join(name)
}

fn nuvira() -> Command {
    let mut c = Command::cargo_bin("nuvira").unwrap();
    // The cargo project must not build into the shared target folder of this test run.
    c.env("CARGO_TARGET_DIR", "target");
    c
}

/// Whether the Docker sandbox can run here; prints why not (and fails under
/// NUVIRA_REQUIRE_DOCKER=1).
fn docker_ready() -> bool {
    let ok = std::process::Command::new("docker")
        .args([
            "image",
            "inspect",
            "nuvira-busybox:latest",
            "nuvira-host:latest",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    let found = if ok {
        Ok(())
    } else {
        Err("no Docker engine with the nuvira images answers")
    };
    require(Requirement::Docker, found).is_some()
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn json_on_a_failing_pytest_project_in_the_local_sandbox_exits_1() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .args(["test", "--sandbox", "local", "--format", "json", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 1);
    assert_eq!(v["total"], 2);
    assert_eq!(v["success"], false);
    assert_eq!(v["failures"][0]["file"], "test_math.py");
    assert_eq!(v["failures"][0]["line"], 13);
    let s = &v["sandbox"];
    assert_eq!(s["kind"], "local");
    assert_eq!(s["exit_code"], 1);
    assert_eq!(s["timed_out"], false);
    assert_eq!(s["oom_killed"], false);
    assert!(
        s.get("image").is_some() && s.get("container_id").is_some(),
        "{s}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sandbox: local: requested"), "{stderr}");
}

#[test]
fn text_lists_failures_and_ends_with_the_counts() {
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "local",
            "--framework",
            "cargo",
            "--repo",
        ])
        .arg(project("cargo-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("FAIL tests::fails_on_purpose (src/lib.rs:18)"),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("1 passed, 1 failed, 0 skipped"),
        "{stdout}"
    );
}

#[test]
fn github_format_annotates_each_failure_with_escaped_data() {
    let out = nuvira()
        .args(["test", "--sandbox", "local", "--format", "github", "--repo"])
        .arg(project("cargo-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("::error "))
        .unwrap_or_else(|| panic!("no annotation in {stdout}"));
    assert!(
        line.starts_with("::error file=src/lib.rs,line=18,title=tests%3A%3Afails_on_purpose::"),
        "{line}"
    );
    // The multi-line assertion message stays on one line, newlines escaped.
    assert!(line.contains("%0A  left: 4%0A right: 5"), "{line}");
}

#[test]
fn junit_format_is_valid_xml_with_the_counts() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .args(["test", "--sandbox", "local", "--format", "junit", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let xml = String::from_utf8(out.stdout).unwrap();
    let report =
        quick_junit::Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    assert_eq!(report.tests, 2);
    assert_eq!(report.failures, 1);
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), "pytest");
    assert!(
        suite
            .test_cases
            .iter()
            .any(|c| c.name.as_str() == "test_math.py::test_fails_on_purpose")
    );
}

#[test]
fn an_explicit_passing_command_exits_0() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "local",
            "--command",
            "pytest -k adds",
            "--repo",
        ])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed, 0 failed"));
}

#[test]
fn a_timeout_exits_1_and_says_so() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "local",
            "--command",
            "sleep 60",
            "--timeout",
            "1s",
        ])
        .args(["--format", "json", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["sandbox"]["timed_out"], true);
    assert_eq!(v["sandbox"]["exit_code"], Value::Null);
}

#[test]
fn docker_without_an_engine_exits_3_and_says_how_to_start_one() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["test", "--sandbox", "docker", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Docker engine answers"), "{stderr}");
    assert!(stderr.contains("scripts/docker-up.sh"), "{stderr}");
}

#[test]
fn auto_without_an_engine_falls_back_to_local_and_says_why() {
    if !pytest_ready() {
        return;
    }
    let out = nuvira()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["test", "--format", "json", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Without Docker, auto takes bubblewrap where it works, else the local sandbox.
    let kind = if nuvira_sandbox::BwrapSandbox::check().is_ok() {
        "bwrap"
    } else {
        "local"
    };
    assert_eq!(json_of(&out)["sandbox"]["kind"], kind);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("sandbox: {kind} (auto): ")),
        "{stderr}"
    );
    assert!(stderr.contains("no Docker engine answers"), "{stderr}");
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        vec!["--memory", "lots"],
        vec!["--framework", "mocha"],
        vec!["--sandbox", "vm"],
        vec!["--timeout", "soon"],
        vec!["--mount", "relative"],
        vec!["--mount", "/nonexistent/nuvira-sdk:/sdk"],
        vec!["--cpus", "-1"],
        vec!["--network", "wifi"],
        vec!["--repo", "/nonexistent/nuvira-repo"],
    ] {
        let out = nuvira().arg("test").args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn docker_json_reports_the_container_and_an_oom_kill() {
    if !pytest_ready() {
        return;
    }
    if !docker_ready() {
        return;
    }
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "docker",
            "--image",
            "nuvira-busybox:latest",
        ])
        .args([
            "--memory",
            "32m",
            "--command",
            "x=a; while true; do x=\"$x$x\"; done",
        ])
        .args(["--format", "json", "--repo"])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = json_of(&out)["sandbox"].clone();
    assert_eq!(s["kind"], "docker");
    assert_eq!(s["image"], "nuvira-busybox:latest");
    assert_eq!(s["oom_killed"], true);
    assert_eq!(s["exit_code"], 137);
    assert_eq!(s["container_id"].as_str().map(str::len), Some(64), "{s}");
}

/// Settings the engine does not take (a memory limit under its 6 MB minimum, a mount point
/// twice) are the user's to change: exit 2 with the engine's words and the flags to change, in
/// text and in JSON; not exit 1, which says the tests failed. More CPUs than it has are the
/// engine's count.
#[test]
fn docker_settings_the_engine_refuses_exit_2_naming_the_flags() {
    if !docker_ready() {
        return;
    }
    for (flag, value) in [("--memory", "1k")] {
        for json in [false, true] {
            let mut cmd = nuvira();
            cmd.args([
                "test",
                "--sandbox",
                "docker",
                "--image",
                "nuvira-busybox:latest",
            ])
            .args([flag, value, "--command", "true", "--repo"])
            .arg(project("pytest-basic"));
            if json {
                cmd.args(["--format", "json"]);
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
            assert!(
                stderr.contains("the engine refused the run's settings")
                    && stderr.contains("--memory, --cpus or --pids"),
                "{stderr}"
            );
            if json {
                assert_eq!(json_of(&out)["error"]["kind"], "invalid-input", "{stderr}");
            }
        }
    }
    // More CPUs than the engine has only slows nothing: the run gets the engine's count.
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "docker",
            "--image",
            "nuvira-busybox:latest",
        ])
        .args([
            "--cpus",
            "4096",
            "--command",
            "true",
            "--format",
            "json",
            "--repo",
        ])
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let limits = json_of(&out)["sandbox"]["limits"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !limits.contains("4096 CPUs") && limits.contains(" CPUs"),
        "{limits}"
    );
    // A mount where the workspace volume is: the same exit, and the flag to change is --mount.
    let host = tempfile::tempdir().unwrap();
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "docker",
            "--command",
            "true",
            "--mount",
        ])
        .arg(format!("{}:/workspace", host.path().display()))
        .arg("--repo")
        .arg(project("pytest-basic"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("change --mount"), "{stderr}");
}

#[test]
fn docker_runs_the_cargo_project_with_the_host_toolchain() {
    if !docker_ready() {
        return;
    }
    let out = nuvira()
        .args([
            "test",
            "--sandbox",
            "docker",
            "--memory",
            "1g",
            "--cpus",
            "2",
        ])
        .args(["--format", "json", "--repo"])
        .arg(project("cargo-basic"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(v["failures"][0]["file"], "src/lib.rs");
    assert_eq!(v["failures"][0]["line"], 18);
    assert_eq!(v["sandbox"]["kind"], "docker");
    assert_eq!(v["sandbox"]["image"], "nuvira-host:latest");
}

#[test]
fn docker_host_image_hides_the_hosts_secrets_behind_empty_files() {
    if !docker_ready() {
        return;
    }
    // A cargo home of its own (on PATH, so it is mounted) with a registry token in it.
    let cargo_home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cargo_home.path().join("bin")).unwrap();
    let creds = cargo_home.path().join("credentials.toml");
    std::fs::write(&creds, "[registry]\ntoken = \"SECRET-TOKEN\"\n").unwrap();
    std::fs::write(cargo_home.path().join("config.toml"), "# kept\n").unwrap();
    let repo = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        cargo_home.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "cat {creds} /etc/shadow /etc/gshadow 2>&1; echo; wc -c < {config}; echo done",
        creds = creds.display(),
        config = cargo_home.path().join("config.toml").display()
    );
    let out = nuvira()
        .env("CARGO_HOME", cargo_home.path())
        .env("PATH", path)
        .args(["test", "--sandbox", "docker", "--format", "json"])
        .args(["--command", &script, "--repo"])
        .arg(repo.path())
        .output()
        .unwrap();
    let v = json_of(&out);
    let output = v.to_string();
    assert!(output.contains("done"), "{output}");
    assert!(!output.contains("SECRET-TOKEN"), "{output}");
    if std::fs::read_to_string("/etc/shadow").is_ok_and(|s| s.contains("root:")) {
        assert!(!output.contains("root:"), "{output}");
    }
    // What is not a secret is still there.
    assert!(output.contains('7'), "{output}");
}

#[test]
fn ctrl_c_exits_130_and_kills_the_command() {
    if !pytest_ready() {
        return;
    }
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("pid");
    let bin = assert_cmd::cargo::cargo_bin("nuvira");
    let child = std::process::Command::new(bin)
        .args(["test", "--sandbox", "local", "--command"])
        .arg(r#"echo $$ > "$PIDFILE"; exec sleep 60"#)
        .arg("--repo")
        .arg(project("pytest-basic"))
        .env("PIDFILE", &pidfile)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded wait until the sandboxed command is up.
    let mut pid = None;
    for _ in 0..1000 {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            pid = Some(p);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let pid = pid.expect("the command never started");
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    // SIGKILL is delivered asynchronously: give the process a bounded moment to go.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    for _ in 0..500 {
        if !alive() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!alive(), "the sandboxed command {pid} survived Ctrl-C");
}

#[test]
fn no_detected_framework_says_what_was_looked_for_and_how_to_pass_a_command() {
    // Regression: `find a test framework in …: pass a command` named no marker file and no flag.
    let empty = tempfile::tempdir().unwrap();
    let out = nuvira()
        .args(["test", "--sandbox", "local", "--repo"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for marker in [
        "Cargo.toml",
        "pytest.ini",
        "package.json",
        "go.mod",
        "found none",
        "--command \"",
    ] {
        assert!(err.contains(marker), "{marker}: {err}");
    }

    let out = nuvira()
        .args(["test", "--sandbox", "local", "--framework", "go", "--repo"])
        .arg(project("cargo-basic"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for part in [
        "find a go project",
        "`go.mod`",
        "found only cargo",
        "--framework",
        "--command \"go test ./...\"",
    ] {
        assert!(err.contains(part), "{part}: {err}");
    }
}
