//! The conventions every subcommand shares, on the real binary: `--color` (with `NO_COLOR` and
//! `CLICOLOR_FORCE`) for every stream, one line per failure, `-` for standard input and output,
//! report formats from extensions, failed writes to stdout, completions, the manual page, the
//! help's closing section, flag aliases, and `schema_version` in every JSON output.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn nuvira() -> Command {
    let mut c = Command::cargo_bin("nuvira").unwrap();
    c.env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("RUST_LOG");
    c
}

/// A plan whose one step fails (a local command that exits 1): the run logs warning lines.
fn failing_plan(dir: &Path) -> PathBuf {
    let plan = dir.join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: fail\nsteps:\n  - id: boom\n    module: execute\n    config: { command: \"exit 1\", sandbox: local }\n",
    )
    .unwrap();
    plan
}

fn has_esc(bytes: &[u8]) -> bool {
    bytes.contains(&0x1b)
}

/// `nuvira run -q` of the failing plan, which logs its failure as a warning on stderr.
fn failing_run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let plan = failing_plan(dir);
    let mut c = nuvira();
    c.args(["run", "-q", "--sandbox", "local", "--repo"])
        .arg(dir)
        .arg(&plan)
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Logged as the commands' own warnings are (`warning: ...`), not as a timestamped log line.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning:") && !stderr.contains(" WARN "),
        "no warning line to colour: {out:?}"
    );
    out
}

#[test]
fn no_color_and_color_never_keep_escape_bytes_off_both_streams_even_with_a_warn_line() {
    let dir = tempfile::tempdir().unwrap();
    for (args, env) in [
        (vec![], vec![("NO_COLOR", "1")]),
        (vec![], vec![("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")]),
        (vec!["--color", "never"], vec![("CLICOLOR_FORCE", "1")]),
        (vec!["--color=never"], vec![]),
        (vec![], vec![]),
    ] {
        let out = failing_run(dir.path(), &args, &env);
        assert!(!has_esc(&out.stderr), "{args:?} {env:?}: {out:?}");
        assert!(!has_esc(&out.stdout), "{args:?} {env:?}: {out:?}");
    }
}

#[test]
fn color_always_and_clicolor_force_colour_the_log_even_into_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    for (args, env) in [
        (vec!["--color", "always"], vec![]),
        (vec!["--color", "always"], vec![("NO_COLOR", "1")]),
        (vec![], vec![("CLICOLOR_FORCE", "1")]),
    ] {
        let out = failing_run(dir.path(), &args, &env);
        assert!(has_esc(&out.stderr), "{args:?} {env:?}: {out:?}");
    }
}

#[test]
fn clap_errors_follow_color_too() {
    let out = nuvira()
        .args(["--color", "never", "validate", "--no-such-flag"])
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!has_esc(&out.stderr), "{out:?}");
    let out = nuvira()
        .args(["--color", "always", "validate", "--no-such-flag"])
        .output()
        .unwrap();
    assert!(has_esc(&out.stderr), "{out:?}");
}

#[test]
fn a_failed_step_is_said_once_not_as_a_failed_line_and_a_warn_line() {
    // Regression: the progress line `FAILED boom ...` was followed by a WARN log line of the
    // same failure (and a WARN for the run), the event log repeating the progress.
    let dir = tempfile::tempdir().unwrap();
    let plan = failing_plan(dir.path());
    let out = nuvira()
        .args(["run", "--sandbox", "local", "--repo"])
        .arg(dir.path())
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("FAILED   boom").count(), 1, "{err}");
    assert!(!err.contains("WARN"), "{err}");
    assert!(!err.contains("step:failed"), "{err}");
}

#[test]
fn a_dash_reads_plans_from_stdin_in_every_format() {
    let yaml = "goal: g\nsteps:\n  - id: a\n    module: inspect\n";
    let json = r#"{"steps": [{"id": "a", "module": "inspect"}]}"#;
    let toml = "goal = \"g\"\n[[steps]]\nid = \"a\"\nmodule = \"inspect\"\n";
    for text in [yaml, json, toml] {
        let out = nuvira()
            .args(["validate", "-"])
            .write_stdin(text)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{text}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("valid, 1 step(s)"));
        let out = nuvira()
            .args(["graph", "-", "--format", "json"])
            .write_stdin(text)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{text}: {out:?}");
    }
    // Problems on stdin are located in `<stdin>`.
    let out = nuvira()
        .args(["validate", "-"])
        .write_stdin("goal: g\nsteps:\n  - id: a\n    module: nope\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<stdin>:3:"), "{err}");
}

#[test]
fn a_dash_reads_edits_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let edits = r#"{"edits": [{"strategy": "search-replace", "path": "a.txt", "search": "hello", "replace": "bye"}]}"#;
    let out = nuvira()
        .args(["apply", "-", "--repo"])
        .arg(dir.path())
        .write_stdin(edits)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "bye\n"
    );
}

#[test]
fn events_and_reports_go_to_stdout_for_a_dash_and_report_reads_events_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let plan = failing_plan(dir.path());
    // `--events -`: the event stream on stdout, one JSON event per line, and nothing else.
    let out = nuvira()
        .args(["run", "-q", "--sandbox", "local", "--events", "-", "--repo"])
        .arg(dir.path())
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let events = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() > 3, "{events}");
    assert!(lines.iter().all(|e| e["schema_version"] == 1), "{events}");
    assert_eq!(lines.last().unwrap()["type"], "run:completed");
    // `report -` reads them back, and `-o -` writes the report to stdout.
    let out = nuvira()
        .args(["report", "-", "--format", "json", "-o", "-"])
        .write_stdin(events.clone())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["status"], "failed");
    // `run -o json=-`: that report in place of the text one.
    let out = nuvira()
        .args(["run", "-q", "--sandbox", "local", "-o", "json=-", "--repo"])
        .arg(dir.path())
        .arg(&plan)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "failed");
}

#[test]
fn report_output_takes_its_format_from_the_extension_unless_format_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let text: String = nuvira_report::sample::failing_run()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&events, text).unwrap();
    let expected = nuvira_report::read_jsonl_file(&events).unwrap();
    for (name, format) in [
        ("r.md", "markdown"),
        ("r.html", "html"),
        ("r.json", "json"),
        ("r.sarif", "sarif"),
        ("junit.xml", "junit"),
        ("r.txt", "text"),
    ] {
        let path = dir.path().join(name);
        nuvira()
            .arg("report")
            .arg(&events)
            .arg("-o")
            .arg(&path)
            .assert()
            .code(0)
            .stdout("");
        let f: nuvira_report::Format = format.parse().unwrap();
        let got = std::fs::read_to_string(&path).unwrap();
        if f == nuvira_report::Format::Sarif || f == nuvira_report::Format::Json {
            // Same document (SARIF carries no run-specific randomness; compare parsed).
            let a: Value = serde_json::from_str(&got).unwrap();
            let b: Value = serde_json::from_str(&nuvira_report::render(&expected, f)).unwrap();
            assert_eq!(a, b, "{name}");
        } else if f != nuvira_report::Format::Html {
            assert_eq!(got, nuvira_report::render(&expected, f), "{name}");
        } else {
            assert!(got.starts_with("<!DOCTYPE html>"), "{name}");
        }
    }
    // --format wins over the extension; FORMAT=PATH over both; `--report` is the same flag.
    let path = dir.path().join("x.html");
    nuvira()
        .arg("report")
        .arg(&events)
        .args(["--format", "json", "-o"])
        .arg(&path)
        .assert()
        .code(0);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    let out = dir.path().join("any.out");
    nuvira()
        .arg("report")
        .arg(&events)
        .arg("--report")
        .arg(format!("markdown={}", out.display()))
        .assert()
        .code(0);
    assert!(std::fs::read_to_string(&out).unwrap().contains('|'));
    // An extension that names no format is an error before anything is written.
    let pdf = dir.path().join("r.pdf");
    let o = nuvira()
        .arg("report")
        .arg(&events)
        .arg("-o")
        .arg(&pdf)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("r.pdf") && err.contains(".html"), "{err}");
    assert!(!pdf.exists());
}

#[test]
fn a_failed_write_to_stdout_exits_3_and_a_closed_pipe_exits_0() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let text: String = nuvira_report::sample::failing_run()
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    std::fs::write(&events, text).unwrap();
    let plan = failing_plan(dir.path());
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["report".into(), events.clone().into()],
        vec!["graph".into(), plan.clone().into()],
        vec![
            "validate".into(),
            plan.clone().into(),
            "--format".into(),
            "json".into(),
        ],
        vec!["schema".into(), "report".into()],
        vec![
            "inspect".into(),
            "--repo".into(),
            dir.path().into(),
            "--goal".into(),
            "fail".into(),
        ],
        vec!["completions".into(), "bash".into()],
        vec!["man".into()],
    ];
    for args in &cases {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
    // A reader that stops early (`| head`) is not a failure.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("nuvira"))
        .args(["schema", "events"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn bash_sources_the_completion_script_and_every_shell_gets_one() {
    let out = nuvira().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8(out.stdout).unwrap();
    // bash is there wherever the test suite runs (`.ci/run` is a bash script).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nuvira.bash");
    std::fs::write(&file, &script).unwrap();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && complete -p nuvira", file.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("-F _nuvira nuvira"),
        "{out:?}"
    );
    for (shell, marker) in [
        ("zsh", "#compdef nuvira"),
        ("fish", "complete -c nuvira"),
        ("elvish", "edit:completion:arg-completer[nuvira]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let out = nuvira().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell}: {text}");
        // Every subcommand is offered.
        assert!(
            text.contains("schema") && text.contains("completions"),
            "{shell}"
        );
    }
}

#[test]
fn the_manual_page_is_roff_that_man_renders() {
    let out = nuvira().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH nuvira 1"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nuvira.1");
    std::fs::write(&file, &page).unwrap();
    if which("man") {
        let out = std::process::Command::new("man")
            .arg("-l")
            .arg(&file)
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("nuvira"), "{text}");
    }
    // --dir writes one page per command.
    let pages = dir.path().join("man1");
    nuvira().args(["man", "--dir"]).arg(&pages).assert().code(0);
    for name in [
        "nuvira.1",
        "nuvira-run.1",
        "nuvira-report.1",
        "nuvira-schema.1",
    ] {
        let text = std::fs::read_to_string(pages.join(name)).unwrap();
        assert!(text.contains(".TH"), "{name}");
    }
}

fn which(tool: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_subcommand_help_ends_with_two_examples_and_the_exit_codes() {
    // Every subcommand `nuvira --help` lists (a new one is covered without editing this).
    let top = nuvira().arg("--help").output().unwrap();
    let top = String::from_utf8(top.stdout).unwrap();
    let listed = top
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    let subcommands: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .collect();
    for expected in ["validate", "run", "mcp", "ui", "pr-body"] {
        assert!(subcommands.contains(&expected), "{subcommands:?}");
    }
    for sub in subcommands {
        for flag in ["-h", "--help"] {
            let out = nuvira().args([sub, flag]).output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{sub}");
            let text = String::from_utf8(out.stdout).unwrap();
            let examples = text
                .find("Examples:")
                .unwrap_or_else(|| panic!("{sub} {flag}: {text}"));
            let codes = text.find("Exit codes:").unwrap();
            assert!(examples < codes, "{sub}");
            assert_eq!(
                text[examples..codes].matches("\n  nuvira ").count()
                    + text[examples..codes].matches("| nuvira ").count()
                    + text[examples..codes].matches("<(nuvira ").count(),
                2,
                "{sub}: {text}"
            );
            let tail = &text[codes..];
            for code in ["0 ", "1 ", "2 ", "3 ", "130"] {
                assert!(tail.contains(code), "{sub}: {tail}");
            }
        }
    }
}

#[test]
fn old_flag_names_stay_as_visible_aliases_of_the_consistent_ones() {
    let help =
        String::from_utf8(nuvira().args(["run", "--help"]).output().unwrap().stdout).unwrap();
    assert!(help.contains("--timeout"), "{help}");
    assert!(help.contains("step-timeout"), "{help}");
    assert!(help.contains("--output"), "{help}");
    assert!(help.contains("report"), "{help}");
    // Both spellings run; a bad duration fails the same way under both names.
    for flag in ["--timeout", "--step-timeout"] {
        let out = nuvira()
            .args(["run", "x.yaml", flag, "soon"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("soon"));
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = failing_plan(dir.path());
    for (flag, value) in [
        ("--report", "markdown=a.md"),
        ("-o", "b.md"),
        ("--output", "html=c.out"),
    ] {
        nuvira()
            .args([
                "run",
                "-q",
                "--sandbox",
                "local",
                "--timeout",
                "30s",
                "--repo",
            ])
            .arg(dir.path())
            .arg(&plan)
            .arg(flag)
            .arg(
                dir.path()
                    .join(value.split('=').next_back().unwrap())
                    .to_str()
                    .map(|p| {
                        if value.contains('=') {
                            format!("{}={p}", value.split('=').next().unwrap())
                        } else {
                            p.to_owned()
                        }
                    })
                    .unwrap(),
            )
            .assert()
            .code(1);
    }
    assert!(
        std::fs::read_to_string(dir.path().join("a.md"))
            .unwrap()
            .contains('|')
    );
    assert!(
        std::fs::read_to_string(dir.path().join("b.md"))
            .unwrap()
            .contains('|')
    );
    assert!(
        std::fs::read_to_string(dir.path().join("c.out"))
            .unwrap()
            .starts_with("<!DOCTYPE html>")
    );
    // A report path whose extension names no format fails before the run.
    let out = nuvira()
        .args(["run", "-q", "--sandbox", "local", "-o", "r.pdf", "--repo"])
        .arg(dir.path())
        .arg(&plan)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("r.pdf"));
}

#[test]
fn every_json_output_starts_with_its_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "goal: g\nsteps:\n  - id: a\n    module: inspect\n").unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "steps:\n  - id: a\n    module: nope\n").unwrap();
    let edits = dir.path().join("edits.json");
    std::fs::write(
        &edits,
        r#"{"edits": [{"strategy": "search-replace", "path": "a.txt", "search": "hello", "replace": "bye"}]}"#,
    )
    .unwrap();
    let repo = dir.path().to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["validate", good.to_str().unwrap(), "--format", "json"],
        vec!["validate", bad.to_str().unwrap(), "--format", "json"],
        vec!["graph", good.to_str().unwrap(), "--format", "json"],
        vec!["graph", bad.to_str().unwrap(), "--format", "json"],
        vec![
            "apply",
            edits.to_str().unwrap(),
            "--repo",
            repo,
            "--dry-run",
            "--format",
            "json",
        ],
        vec![
            "inspect", "--repo", repo, "--goal", "hello", "--format", "json",
        ],
        vec![
            "test",
            "--repo",
            repo,
            "--sandbox",
            "local",
            "--command",
            "true",
            "--format",
            "json",
        ],
        vec![
            "run",
            good.to_str().unwrap(),
            "--repo",
            repo,
            "-q",
            "--format",
            "json",
        ],
        vec![
            "run",
            bad.to_str().unwrap(),
            "--repo",
            repo,
            "-q",
            "--format",
            "json",
        ],
    ];
    for args in cases {
        let out = nuvira().args(&args).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
        assert_eq!(v["schema_version"], 1, "{args:?}: {text}");
        let first_key = text.trim_start_matches(['{', '\n', ' ']);
        assert!(
            first_key.starts_with("\"schema_version\""),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn a_modules_warning_reads_as_a_commands_warning_and_as_a_log_line_with_v() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Makefile"), "test:\n\ttrue\n").unwrap();
    let run = |extra: &[&str]| {
        let out = nuvira()
            .args([
                "test",
                "--sandbox",
                "local",
                "--cpus",
                "1",
                "--command",
                "true",
            ])
            .args(extra)
            .arg("--repo")
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let plain = run(&[]);
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("warning: the local sandbox does not apply: cpus")),
        "{plain}"
    );
    // With -v the log keeps its timestamps and levels.
    let verbose = run(&["-v"]);
    assert!(
        verbose
            .lines()
            .any(|l| l.contains(" WARN ") && l.contains("does not apply: cpus")),
        "{verbose}"
    );
}
