//! `nuvira run --branch/--commit/--allow-dirty`, `nuvira rollback` after a commit,
//! `nuvira pr-body` and `nuvira review`, on real git repositories made by the tests.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn nuvira() -> Command {
    Command::cargo_bin("nuvira").unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn init(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["config", "user.name", "Test User"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
}

/// The quickstart example copied to `repo` in a new temporary folder, not yet a git
/// repository.
fn quickstart_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    nuvira::scratch::copy_tree(&src, &repo).unwrap();
    std::fs::write(repo.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(repo.join("notes.txt"), "mine\n").unwrap();
    (dir, repo)
}

/// The quickstart example as a git repository with one commit.
fn quickstart_repo() -> (tempfile::TempDir, PathBuf) {
    let (dir, repo) = quickstart_copy();
    init(&repo);
    (dir, repo)
}

const FIX: (&str, &str) = (
    "Some(sum / (xs.len() - 1) as f64)",
    "Some(sum / xs.len() as f64)",
);
const NO_FIX: (&str, &str) = ("let sum: f64", "let sum: f64 = 0.0; let _s: f64");

fn plan(dir: &Path, (search, replace): (&str, &str), with_tests: bool) -> PathBuf {
    let tests = if with_tests {
        "  - id: test\n    module: test\n    depends_on: [fix]\n    timeout: 5m\n    config: { sandbox: local }\n"
    } else {
        ""
    };
    let text = format!(
        r#"goal: "Fix the off-by-one error in average()"
steps:
  - id: fix
    module: edit
    config:
      edits:
        - {{ path: src/lib.rs, strategy: search-replace, search: "{search}", replace: "{replace}" }}
{tests}"#
    );
    let path = dir.join("plan.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn stderr(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stderr).to_string()
}

/// Fails unless the command's stderr contains `says`, printing all of it.
fn assert_says(out: &assert_cmd::assert::Assert, says: &str) {
    let err = stderr(out);
    assert!(err.contains(says), "stderr lacks {says:?}: {err}");
}

fn stdout(out: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&out.get_output().stdout).to_string()
}

#[test]
fn run_commit_on_a_new_branch_commits_exactly_the_files_the_run_wrote_with_the_run_trailer() {
    let (dir, repo) = quickstart_repo();
    // The user's own staged change must stay out of the commit.
    std::fs::write(repo.join("notes.txt"), "staged by me\n").unwrap();
    git(&repo, &["add", "notes.txt"]);
    let events = dir.path().join("events.jsonl");
    let report_json = dir.path().join("report.json");
    let out = nuvira()
        .args(["run", "--quiet", "--format", "json", "--allow-dirty"])
        .args(["--branch", "nuvira/fix-average", "--commit"])
        .arg(plan(dir.path(), FIX, true))
        .arg("--repo")
        .arg(&repo)
        .arg("--events")
        .arg(&events)
        .arg("--report")
        .arg(format!("json={}", report_json.display()))
        .assert()
        .code(0);
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let err = stderr(&out);
    assert!(
        err.contains("switched to the new branch `nuvira/fix-average`"),
        "{err}"
    );
    assert!(err.contains("committed 1 file(s)"), "{err}");
    assert_eq!(
        git(&repo, &["branch", "--show-current"]).trim(),
        "nuvira/fix-average"
    );
    let stat = git(&repo, &["show", "--stat=200", "--format=", "HEAD"]);
    let files: Vec<&str> = stat
        .lines()
        .filter(|l| l.contains('|'))
        .map(|l| l.split('|').next().unwrap().trim())
        .collect();
    assert_eq!(files, vec!["src/lib.rs"], "{stat}");
    assert_eq!(
        git(
            &repo,
            &["log", "-1", "--format=%(trailers:key=Nuvira-Run,valueonly)"]
        )
        .trim(),
        run_id
    );
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s"]).trim(),
        "Fix the off-by-one error in average()"
    );
    let body = git(&repo, &["log", "-1", "--format=%b"]);
    assert!(
        body.contains("Steps: 2 succeeded") && body.contains("Tests: "),
        "{body}"
    );
    assert_eq!(
        git(&repo, &["diff", "--cached", "--name-only"]).trim(),
        "notes.txt"
    );
    assert_eq!(
        git(&repo, &["rev-parse", "main"]),
        git(&repo, &["rev-parse", "HEAD~1"])
    );

    // Rollback does not touch the commit: it says to revert it.
    let sha = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let lib_after = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let rb = nuvira()
        .arg("rollback")
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(1);
    assert_says(&rb, &format!("git revert {sha}"));
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        lib_after
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]).trim(), sha);

    // The pull-request body, from the event file, from stdin and from the report JSON.
    let from_events = nuvira()
        .arg("pr-body")
        .arg("--events")
        .arg(&events)
        .assert()
        .code(0);
    let md = stdout(&from_events);
    assert!(
        md.starts_with("## Fix the off-by-one error in average()"),
        "{md}"
    );
    assert!(
        md.contains("| `src/lib.rs` | modified | 1 | 1 | `fix` |"),
        "{md}"
    );
    assert!(md.contains("| `test` | after the edits |"), "{md}");
    assert!(md.contains(&format!("Nuvira run `{run_id}`")), "{md}");
    assert!(md.contains("```diff"), "{md}");
    let piped = nuvira()
        .args(["pr-body", "--events", "-"])
        .pipe_stdin(&events)
        .unwrap()
        .assert()
        .code(0);
    assert_eq!(stdout(&piped), md);
    let from_json = nuvira().arg("pr-body").arg(&report_json).assert().code(0);
    assert_eq!(stdout(&from_json), md);
    // A run id resolves through .nuvira/runs/<id>/report.json when the run history has it.
    let runs = repo.join(".nuvira/runs").join(&run_id);
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::copy(&report_json, runs.join("report.json")).unwrap();
    let by_id = nuvira()
        .args(["pr-body", &run_id, "--repo"])
        .arg(&repo)
        .assert()
        .code(0);
    assert_eq!(stdout(&by_id), md);
    let missing = nuvira()
        .args(["pr-body", "run-nope", "--repo"])
        .arg(&repo)
        .assert()
        .code(2);
    assert_says(&missing, "no run `run-nope`");
}

#[test]
fn a_dirty_tree_is_refused_before_any_edit_naming_the_files_escaped_and_nuvira_state_never_counts()
{
    let (dir, repo) = quickstart_repo();
    std::fs::write(repo.join("evil\u{1b}[2J.txt"), "x").unwrap();
    std::fs::write(repo.join("notes.txt"), "changed\n").unwrap();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let plan = plan(dir.path(), FIX, false);
    let out = nuvira()
        .args(["run", "--quiet", "--branch", "nuvira/x", "--commit"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(3);
    let err = stderr(&out);
    assert!(err.contains("2 uncommitted change(s)"), "{err}");
    assert!(err.contains("notes.txt (modified)"), "{err}");
    assert!(err.contains("evil\\x1b[2J.txt (untracked)"), "{err}");
    assert!(!err.contains('\u{1b}'), "escaped: {err:?}");
    assert!(err.contains("--allow-dirty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    assert!(
        git(&repo, &["branch", "--list", "nuvira/x"])
            .trim()
            .is_empty()
    );

    // Clean again, with only Nuvira's own state around: the run starts.
    std::fs::remove_file(repo.join("evil\u{1b}[2J.txt")).unwrap();
    git(&repo, &["checkout", "--", "notes.txt"]);
    std::fs::create_dir_all(repo.join(".nuvira/junk")).unwrap();
    std::fs::write(repo.join(".nuvira/junk/state"), "x").unwrap();
    nuvira()
        .args(["run", "--quiet", "--commit"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(0);
    assert_eq!(
        git(&repo, &["show", "--name-only", "--format=", "HEAD"]).trim(),
        "src/lib.rs"
    );
}

#[test]
fn a_failed_run_never_commits() {
    let (dir, repo) = quickstart_repo();
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let out = nuvira()
        .args(["run", "--quiet", "--commit"])
        .arg(plan(dir.path(), NO_FIX, true))
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(1);
    assert_says(&out, "nothing was committed");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
}

#[test]
fn git_flags_outside_a_repository_or_with_a_taken_branch_are_refused_before_the_run() {
    let (dir, repo) = quickstart_copy();
    let before = std::fs::read_to_string(repo.join("src/lib.rs")).unwrap();
    let plan = plan(dir.path(), FIX, false);
    let out = nuvira()
        .args(["run", "--quiet", "--commit"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    assert_says(&out, "need a git repository");
    init(&repo);
    git(&repo, &["branch", "taken"]);
    let out = nuvira()
        .args(["run", "--quiet", "--branch", "taken"])
        .arg(&plan)
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    assert_says(&out, "branch `taken` already exists");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        before
    );
    nuvira()
        .args(["run", "--quiet", "--sign"])
        .arg(&plan)
        .assert()
        .code(2);
}

/// main has a valid `app.py`, `settings.py` with an old secret on line 1, and `legacy.py` with
/// an old syntax error on line 1. The branch adds a syntax error on `app.py`'s line 6, a secret
/// on `settings.py`'s line 3, a valid function at the end of `legacy.py`, and a generated file
/// with a secret (skipped).
fn review_repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let old_key = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
    std::fs::write(
        repo.join("app.py"),
        "def ok():\n    return 1\n\n\ndef other():\n    return 2\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("settings.py"),
        format!("OLD = \"{old_key}\"\nDEBUG = False\n"),
    )
    .unwrap();
    std::fs::write(
        repo.join("legacy.py"),
        "x = (1 +\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n",
    )
    .unwrap();
    std::fs::write(repo.join(".gitattributes"), "gen/** linguist-generated\n").unwrap();
    init(&repo);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    let new_key = format!("ghp_{}", "b".repeat(36));
    std::fs::write(
        repo.join("app.py"),
        "def ok():\n    return 1\n\n\ndef other():\n    return [2,\n",
    )
    .unwrap();
    let mut legacy = std::fs::read_to_string(repo.join("legacy.py")).unwrap();
    legacy.push_str("\n\ndef c():\n    return 3\n");
    std::fs::write(repo.join("legacy.py"), legacy).unwrap();
    std::fs::write(
        repo.join("settings.py"),
        format!("OLD = \"{old_key}\"\nDEBUG = False\nTOKEN = \"{new_key}\"\n"),
    )
    .unwrap();
    std::fs::create_dir_all(repo.join("gen")).unwrap();
    std::fs::write(repo.join("gen/out.py"), format!("K = \"{new_key}\"\n")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "feature"]);
    (dir, repo)
}

#[test]
fn review_annotates_exactly_the_added_syntax_error_and_secret_and_nothing_on_unchanged_lines() {
    let (dir, repo) = review_repo();
    let sarif = dir.path().join("out/review.sarif");
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
        .arg(&repo)
        .arg("--report")
        .arg(format!("sarif={}", sarif.display()))
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_EVENT_PATH")
        .env_remove("NUVIRA_MODEL")
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .assert()
        .code(1);
    let text = stdout(&out);
    let mut located: Vec<(String, String)> = text
        .lines()
        .filter_map(nuvira_report::github::parse_command)
        .filter_map(|c| {
            let file = c.properties.iter().find(|(k, _)| k == "file")?.1.clone();
            let line = c.properties.iter().find(|(k, _)| k == "line")?.1.clone();
            Some((file, line))
        })
        .collect();
    located.sort();
    located.dedup();
    assert_eq!(
        located,
        vec![
            ("app.py".to_owned(), "6".to_owned()),
            ("settings.py".to_owned(), "3".to_owned())
        ],
        "{text}"
    );
    assert!(
        !text.contains("gen/out.py"),
        "generated files are skipped: {text}"
    );
    assert!(sarif.is_file(), "the other formats are written too");
    for format in ["text", "json", "markdown", "sarif", "junit", "html"] {
        nuvira()
            .args([
                "review",
                "--base",
                "main",
                "--no-tests",
                "--quiet",
                "--format",
                format,
            ])
            .arg("--repo")
            .arg(&repo)
            .env_remove("GITHUB_STEP_SUMMARY")
            .env_remove("NUVIRA_MODEL")
            .env_remove("NUVIRA_SCRIPTED_LLM")
            .assert()
            .code(1);
    }
    assert_eq!(
        git(&repo, &["status", "--porcelain"]).trim(),
        "",
        "review writes nothing"
    );
}

#[test]
fn review_of_a_clean_branch_passes_and_an_unknown_base_is_refused() {
    let (_dir, repo) = review_repo();
    git(&repo, &["checkout", "-q", "-b", "clean", "main"]);
    std::fs::write(repo.join("more.py"), "def fine():\n    return 3\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "clean"]);
    nuvira()
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
        .arg(&repo)
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("NUVIRA_MODEL")
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .assert()
        .code(0);
    let out = nuvira()
        .args(["review", "--base", "nope", "--no-tests", "--quiet"])
        .arg("--repo")
        .arg(&repo)
        .assert()
        .code(2);
    assert_says(&out, "`nope` is not a known commit");
}

#[test]
fn run_inspect_ranks_the_branchs_changed_files_first_and_skips_generated_ones() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("gen")).unwrap();
    for f in ["a.rs", "b.rs", "gen/c.rs"] {
        std::fs::write(repo.join(f), "fn widget_count() -> usize { 1 }\n").unwrap();
    }
    std::fs::write(repo.join(".gitattributes"), "gen/** linguist-generated\n").unwrap();
    init(&repo);
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    std::fs::write(repo.join("b.rs"), "fn widget_count() -> usize { 2 }\n").unwrap();
    git(&repo, &["commit", "-qam", "change b"]);
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: fix widget_count\nsteps:\n  - id: inspect\n    module: inspect\n    config: { keywords: [widget_count] }\n",
    )
    .unwrap();
    let artifacts = |extra: &[&str]| -> Vec<String> {
        let out = nuvira()
            .args(["run", "--quiet", "--format", "json"])
            .args(extra)
            .arg(&plan)
            .arg("--repo")
            .arg(&repo)
            .assert()
            .code(0);
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        report["steps"][0]["output"]["data"]["artifacts"]
            .as_array()
            .unwrap_or_else(|| panic!("{report:#}"))
            .iter()
            .map(|a| a["path"].as_str().unwrap().to_owned())
            .collect()
    };
    // `main` is the default base: the branch changed b.rs.
    assert_eq!(artifacts(&[]), vec!["b.rs", "a.rs"]);
    assert_eq!(artifacts(&["--base", "main"]), vec!["b.rs", "a.rs"]);
}

/// One request the local GitHub received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A GitHub REST API on 127.0.0.1 answering `replies` (status, JSON) in order, one per
/// connection, recording each request.
fn local_github(
    replies: Vec<(u16, Value)>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Seen>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (status, reply) in replies {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("").to_owned();
            let path = parts.next().unwrap_or("").to_owned();
            let (mut headers, mut len) = (Vec::new(), 0);
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap();
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap();
                }
                headers.push((k.to_owned(), v.trim().to_owned()));
            }
            let mut buf = vec![0; len];
            reader.read_exact(&mut buf).unwrap();
            let body = serde_json::from_slice(&buf).unwrap_or(Value::Null);
            log.lock().unwrap().push(Seen {
                method,
                path,
                headers,
                body,
            });
            let text = reply.to_string();
            let out = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            stream.write_all(out.as_bytes()).unwrap();
        }
    });
    (url, seen)
}

/// A committed run on branch `nuvira/fix` of a repository whose `origin` is a local bare
/// repository; returns the temp dir, the repository, the bare remote and the event file.
fn committed_run() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let (dir, repo) = quickstart_repo();
    let remote = dir.path().join("remote.git");
    git(
        dir.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    git(
        &repo,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(&repo, &["push", "-q", "origin", "main"]);
    let events = dir.path().join("events.jsonl");
    nuvira()
        .args(["run", "--quiet", "--branch", "nuvira/fix", "--commit"])
        .arg(plan(dir.path(), FIX, false))
        .arg("--repo")
        .arg(&repo)
        .arg("--events")
        .arg(&events)
        .assert()
        .code(0);
    (dir, repo, remote, events)
}

#[test]
fn pr_create_pushes_the_branch_and_sends_exactly_the_documented_requests() {
    let (_dir, repo, remote, events) = committed_run();
    let (api, seen) = local_github(vec![
        (
            201,
            serde_json::json!({"number": 7, "html_url": "https://github.com/octo/hello/pull/7", "draft": true}),
        ),
        (
            200,
            serde_json::json!([{"name": "bug"}, {"name": "nuvira"}]),
        ),
        (201, serde_json::json!({"number": 7})),
    ]);
    let out = nuvira()
        .args(["pr", "create", "--events"])
        .arg(&events)
        .arg("--repo")
        .arg(&repo)
        .args([
            "--base", "main", "--draft", "--label", "bug", "--label", "nuvira",
        ])
        .args([
            "--reviewer",
            "octocat",
            "--api-url",
            &format!("{api}/api/v3"),
        ])
        .env("GITHUB_TOKEN", "ghp_test")
        .env("GITHUB_REPOSITORY", "octo/hello")
        .assert()
        .code(0);
    assert_eq!(stdout(&out).trim(), "https://github.com/octo/hello/pull/7");
    assert_says(&out, "opened pull request #7 on octo/hello (draft)");
    // The push used git and the remote has the branch at HEAD.
    let pushed = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&remote)
        .args(["rev-parse", "refs/heads/nuvira/fix"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&pushed.stdout).trim(),
        git(&repo, &["rev-parse", "HEAD"]).trim()
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.method, "POST");
        assert_eq!(s.header("authorization"), Some("Bearer ghp_test"));
        assert_eq!(s.header("accept"), Some("application/vnd.github+json"));
        assert_eq!(s.header("x-github-api-version"), Some("2022-11-28"));
    }
    assert_eq!(seen[0].path, "/api/v3/repos/octo/hello/pulls");
    let body = nuvira()
        .arg("pr-body")
        .arg("--events")
        .arg(&events)
        .assert()
        .code(0);
    assert_eq!(
        seen[0].body,
        serde_json::json!({
            "title": "Fix the off-by-one error in average()",
            "head": "nuvira/fix",
            "base": "main",
            "body": stdout(&body),
            "draft": true
        })
    );
    assert_eq!(seen[1].path, "/api/v3/repos/octo/hello/issues/7/labels");
    assert_eq!(
        seen[1].body,
        serde_json::json!({"labels": ["bug", "nuvira"]})
    );
    assert_eq!(
        seen[2].path,
        "/api/v3/repos/octo/hello/pulls/7/requested_reviewers"
    );
    assert_eq!(seen[2].body, serde_json::json!({"reviewers": ["octocat"]}));
}

#[test]
fn pr_create_says_what_github_refused_and_needs_a_token() {
    let (_dir, repo, _remote, events) = committed_run();
    let no_token = nuvira()
        .args(["pr", "create", "--no-push", "--events"])
        .arg(&events)
        .arg("--repo")
        .arg(&repo)
        .env_remove("GITHUB_TOKEN")
        .assert()
        .code(3);
    assert_says(&no_token, "GITHUB_TOKEN is not set");
    let (api, seen) = local_github(vec![(
        422,
        serde_json::json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom", "message": "No commits between main and nuvira/fix"}],
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
        }),
    )]);
    let out = nuvira()
        .args(["pr", "create", "--no-push", "--base", "main", "--events"])
        .arg(&events)
        .arg("--repo")
        .arg(&repo)
        .args(["--api-url", &api, "--github-repo", "octo/hello"])
        .env("GITHUB_TOKEN", "ghp_test")
        .env_remove("GITHUB_REPOSITORY")
        .assert()
        .code(1);
    let err = stderr(&out);
    assert!(
        err.contains("422 Validation Failed")
            && err.contains("No commits between main and nuvira/fix"),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn review_with_a_model_checks_the_change_against_the_pull_requests_title_and_body_from_the_event() {
    let (dir, repo) = review_repo();
    let main = git(&repo, &["rev-parse", "main"]).trim().to_owned();
    git(&repo, &["checkout", "-q", "-b", "clean", "main"]);
    std::fs::write(repo.join("more.py"), "def fine():\n    return 3\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "clean"]);
    let event = dir.path().join("event.json");
    std::fs::write(
        &event,
        serde_json::json!({
            "action": "opened",
            "pull_request": {"number": 3, "title": "Add a multiply function", "body": "Adds multiply(a, b).", "base": {"ref": "main", "sha": main}}
        })
        .to_string(),
    )
    .unwrap();
    let transcript = dir.path().join("model.yaml");
    std::fs::write(
        &transcript,
        r#"- match: { schema: goal_alignment, contains: "Add a multiply function" }
  response:
    json: { aligned: false, score: 0.1, reasons: ["the diff adds fine(), not multiply()"], suggestions: ["add multiply"] }
- match: { schema: goal_alignment }
  response:
    json: { aligned: true, score: 0.9, reasons: ["ok"], suggestions: [] }
"#,
    )
    .unwrap();
    let review = |extra: &[&str]| {
        nuvira()
            .args(["review", "--no-tests", "--quiet", "--format", "json"])
            .args(extra)
            .arg("--repo")
            .arg(&repo)
            .env("GITHUB_EVENT_PATH", &event)
            .env("NUVIRA_SCRIPTED_LLM", &transcript)
            .env_remove("GITHUB_STEP_SUMMARY")
            .assert()
    };
    let out = review(&[]).code(1);
    let text = stdout(&out);
    assert!(text.contains("goal-alignment"), "{text}");
    assert!(
        text.contains("the diff adds fine(), not multiply()"),
        "{text}"
    );
    // The flags win over the event: this title is judged aligned.
    review(&["--title", "Add fine()", "--body", "A helper."]).code(0);
}
