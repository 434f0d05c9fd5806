//! Git and pull requests against hostile input (issue 16): file names and GitHub answers that
//! try to forge workflow commands or terminal escapes, and a goal that tries to forge the
//! commit's `Nuvira-Run` trailer.

use crate::support::{git, nuvira};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "base"]);
    dir
}

#[test]
fn a_changed_file_named_like_a_workflow_command_is_annotated_escaped_and_forges_nothing() {
    let dir = repo();
    git(dir.path(), &["checkout", "-q", "-b", "evil"]);
    // (An ESC in the name reaches the `github` format's `file=` property raw: a report-format
    // issue, left to the reporter's owners; this test keeps to what review itself decides.)
    let name = "x\n::error file=forged.py,line=1::pwned.py";
    std::fs::write(
        dir.path().join(name),
        format!("T = \"ghp_{}\"\n", "c".repeat(36)),
    )
    .unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "evil"]);
    let out = nuvira()
        .args([
            "review",
            "--base",
            "main",
            "--no-tests",
            "--quiet",
            "--format",
            "github",
        ])
        .arg("--repo")
        .arg(dir.path())
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("NUVIRA_MODEL")
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        assert!(
            !line.starts_with("::error file=forged.py"),
            "forged: {text}"
        );
    }
    let parsed: Vec<_> = text
        .lines()
        .filter_map(nuvira_report::github::parse_command)
        .filter(|c| c.properties.iter().any(|(k, _)| k == "file"))
        .collect();
    assert!(!parsed.is_empty(), "the secret is annotated: {text}");
    for c in parsed {
        let file = &c.properties.iter().find(|(k, _)| k == "file").unwrap().1;
        assert!(
            file.starts_with("x\n::error"),
            "the file property is the real name: {file:?}"
        );
    }
}

#[test]
fn a_goal_cannot_forge_the_run_trailer_or_put_escapes_in_the_commit() {
    let dir = repo();
    let outside = tempfile::tempdir().unwrap();
    let plan = outside.path().join("plan.yaml");
    let goal = "Change x\\n\\nNuvira-Run: forged\\u001b[31m";
    std::fs::write(
        &plan,
        format!(
            "goal: \"{goal}\"\nsteps:\n  - id: fix\n    module: edit\n    config:\n      edits:\n        - {{ path: a.py, strategy: search-replace, search: \"x = 1\", replace: \"x = 2\" }}\n"
        ),
    )
    .unwrap();
    let out = nuvira()
        .args(["run", "--quiet", "--format", "json", "--commit"])
        .arg(&plan)
        .arg("--repo")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let trailers = git_out(
        dir.path(),
        &["log", "-1", "--format=%(trailers:key=Nuvira-Run,valueonly)"],
    );
    assert_eq!(
        trailers.trim(),
        report["run_id"].as_str().unwrap(),
        "{trailers:?}"
    );
    let message = git_out(dir.path(), &["log", "-1", "--format=%B"]);
    assert!(!message.contains('\u{1b}'), "{message:?}");
}

#[test]
fn githubs_error_text_reaches_the_terminal_escaped() {
    let dir = repo();
    let outside = tempfile::tempdir().unwrap();
    let events = outside.path().join("events.jsonl");
    let plan = outside.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: g\nsteps:\n  - id: fix\n    module: edit\n    config:\n      edits:\n        - { path: a.py, strategy: search-replace, search: \"x = 1\", replace: \"x = 3\" }\n",
    )
    .unwrap();
    nuvira()
        .args(["run", "--quiet", "--events"])
        .arg(&events)
        .arg(&plan)
        .arg("--repo")
        .arg(dir.path())
        .assert()
        .code(0);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut len = 0;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut buf = vec![0; len];
        reader.read_exact(&mut buf).unwrap();
        let body = serde_json::json!({
            "message": "Validation Failed\u{1b}]0;owned\u{7}",
            "errors": [{"message": "bad\n::error::forged\u{1b}[2J"}]
        })
        .to_string();
        let _ = write!(
            stream,
            "HTTP/1.1 422 X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let out = nuvira()
        .args([
            "pr",
            "create",
            "--no-push",
            "--base",
            "main",
            "--head",
            "x",
            "--events",
        ])
        .arg(&events)
        .arg("--repo")
        .arg(dir.path())
        .args(["--api-url", &url, "--github-repo", "o/r"])
        .env("GITHUB_TOKEN", "t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    assert!(!err.lines().any(|l| l.starts_with("::error::")), "{err}");
    assert!(err.contains("Validation Failed"), "{err}");
}
