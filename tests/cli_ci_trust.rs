//! A CI step you can trust (issue 13): `nuvira run` under `GITHUB_ACTIONS=true` on a monorepo
//! whose files, file names and command output carry workflow commands. Both streams are read
//! the way the Actions runner reads them, and no command may come from the repository.

use assert_cmd::Command;
use std::path::Path;

/// One workflow command as the runner sees it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) props: String,
    pub(crate) line: String,
    pub(crate) old_syntax: bool,
}

/// Reads a stream by the runner's documented rules: leading whitespace trimmed, `::name
/// props::message` at the start of a line, `##[name]` anywhere in a line, nothing at all
/// between `::stop-commands::TOKEN` and `::TOKEN::`.
pub(crate) fn runner_commands(stream: &str) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut stopped: Option<String> = None;
    for raw in stream.split('\n') {
        let line = raw.trim_end_matches('\r');
        let t = line.trim_start();
        if let Some(token) = &stopped {
            if t == format!("::{token}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("::")
            && let Some(end) = rest.find("::")
        {
            let head = &rest[..end];
            let (name, props) = head.split_once(' ').unwrap_or((head, ""));
            if name == "stop-commands" {
                stopped = Some(rest[end + 2..].to_owned());
            }
            out.push(Seen {
                name: name.to_owned(),
                props: props.to_owned(),
                line: line.to_owned(),
                old_syntax: false,
            });
        } else if let Some(i) = line.find("##[")
            && let Some(end) = line[i + 3..].find(']')
        {
            let head = &line[i + 3..i + 3 + end];
            out.push(Seen {
                name: head.split([' ', ';']).next().unwrap_or_default().to_owned(),
                props: String::new(),
                line: line.to_owned(),
                old_syntax: true,
            });
        }
    }
    out
}

const HOSTILE: &str = "fn a() {}\n::error ::PWNED1\n  ::warning ::PWNED2\nx ##[error]PWNED3\n::add-mask::PWNED4\n::stop-commands::PWNEDTOK\n\t::notice ::PWNED6\nfn b() {}\n";

fn git(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn repository_text_never_becomes_a_workflow_command_and_paths_are_checkout_relative() {
    let dir = tempfile::tempdir().unwrap();
    let mono = dir.path().join("mono");
    let sub = mono.join("sub");
    std::fs::create_dir_all(sub.join("src")).unwrap();
    std::fs::write(sub.join("src/lib.rs"), HOSTILE).unwrap();
    std::fs::write(sub.join("src/::error ::PWNED5.rs"), "fn c() {}\n").unwrap();
    std::fs::write(sub.join("src/x ##[error]PWNED7.rs"), "fn d() {}\n").unwrap();
    git(&mono, &["init", "-q"]);
    git(&mono, &["add", "-A"]);
    git(&mono, &["commit", "-qm", "init"]);
    let aws = format!("AKIA{}", "Z7Q2".repeat(4));
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        format!(
            r#"goal: "show what the repository says"
outputs: [fix, named, show]
steps:
  - id: fix
    module: edit
    config:
      edits:
        - {{ path: src/lib.rs, strategy: search-replace, search: "fn a() {{}}\n::error ::PWNED1x\n  ::warning ::PWNED2\n", replace: "fn a() {{ 1 }}\n" }}
  - id: named
    module: edit
    config:
      edits:
        - {{ path: "src/::error ::PWNED5.rs", strategy: search-replace, search: "fn z() {{}}", replace: "fn y() {{}}" }}
        - {{ path: "src/x ##[error]PWNED7.rs", strategy: search-replace, search: "fn z() {{}} ##[warning]PWNED9", replace: "fn y() {{}}" }}
  - id: show
    module: execute
    config: {{ command: "cat src/lib.rs; echo '##[error]PWNED10 key {aws}'; exit 3", sandbox: local }}
"#
        ),
    )
    .unwrap();
    let summary = dir.path().join("summary.md");
    let sarif = dir.path().join("out.sarif");
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_WORKSPACE", &mono)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(&sub)
        .arg("--report")
        .arg(format!("sarif={}", sarif.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n---\n{stderr}");
    // The hostile text is in the output (as data), else the test proves nothing.
    assert!(
        format!("{stdout}{stderr}").contains("PWNED1"),
        "{stdout}\n---\n{stderr}"
    );
    for (name, stream) in [("stdout", &stdout), ("stderr", &stderr)] {
        for c in runner_commands(stream) {
            assert!(!c.old_syntax, "{name}: a `##[` command: {}", c.line);
            assert!(
                [
                    "error",
                    "warning",
                    "notice",
                    "group",
                    "endgroup",
                    "stop-commands"
                ]
                .contains(&c.name.as_str()),
                "{name}: command `{}` from untrusted text: {}",
                c.name,
                c.line
            );
            if ["error", "warning", "notice"].contains(&c.name.as_str()) {
                // Nuvira's annotations always have a title; a forged one has none.
                assert!(c.props.contains("title="), "{name}: forged: {}", c.line);
            }
            if c.name == "stop-commands" {
                assert!(!c.line.contains("PWNED"), "{name}: forged stop: {}", c.line);
            }
        }
        assert!(!stream.contains(&aws), "{name} shows the AWS key: {stream}");
    }
    // Annotations and SARIF name the file from the checkout's root.
    assert!(stdout.contains("::error file=sub/src/lib.rs"), "{stdout}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    let uris: Vec<&str> = doc["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(
        !uris.is_empty() && uris.iter().all(|u| u.starts_with("sub/src/")),
        "{uris:?}"
    );
    assert!(doc["runs"][0].get("automationDetails").is_none());
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(!md.contains(&aws));
}

/// A rejected edit in `sub/src/lib.rs`, run with `--repo <root>/sub` and `--format github`
/// outside Actions; the annotation's file.
fn annotated_file(root: &Path, repo: &Path, workspace: Option<&Path>) -> String {
    let plan = root.join("p.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - id: fix\n    module: edit\n    config:\n      edits:\n        - { path: src/lib.rs, strategy: search-replace, search: \"fn zz() {}\", replace: \"\" }\n",
    )
    .unwrap();
    let mut cmd = Command::cargo_bin("nuvira").unwrap();
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_WORKSPACE");
    if let Some(w) = workspace {
        cmd.env("GITHUB_WORKSPACE", w);
    }
    let out = cmd
        .arg("run")
        .arg(&plan)
        .arg("--repo")
        .arg(repo)
        // The test's git repository is dirty by design (nothing is committed).
        .args(["--format", "github", "--allow-dirty"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("::error file="))
        .and_then(|l| l.split(',').next())
        .unwrap_or_else(|| panic!("no annotation: {stdout}"))
        .to_owned()
}

#[test]
fn paths_are_relative_to_the_workspace_else_the_git_top_level_else_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let mono = dir.path().join("mono");
    let sub = mono.join("sub");
    std::fs::create_dir_all(sub.join("src")).unwrap();
    std::fs::write(sub.join("src/lib.rs"), "fn a() {}\n").unwrap();
    // Not a git repository, no workspace: relative to the repository folder.
    assert_eq!(annotated_file(dir.path(), &sub, None), "src/lib.rs");
    // A git repository: relative to its top level.
    git(&mono, &["init", "-q"]);
    assert_eq!(annotated_file(dir.path(), &sub, None), "sub/src/lib.rs");
    // GITHUB_WORKSPACE wins over the git top level.
    assert_eq!(
        annotated_file(dir.path(), &sub, Some(dir.path())),
        "mono/sub/src/lib.rs"
    );
}

#[test]
fn json_printed_in_actions_mode_carries_no_old_style_command() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "steps:\n  - id: \"a ##[error]FORGED\"\n    module: nosuch\n",
    )
    .unwrap();
    let run = |actions: bool| {
        let mut c = Command::cargo_bin("nuvira").unwrap();
        c.env_remove("GITHUB_ACTIONS");
        if actions {
            c.env("GITHUB_ACTIONS", "true");
        }
        let out = c
            .args(["validate", "--format", "json"])
            .arg(&plan)
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (plain, _) = run(false);
    assert!(
        plain.contains("##[error]FORGED"),
        "the test needs the text: {plain}"
    );
    let (stdout, stderr) = run(true);
    for (name, s) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            runner_commands(s).is_empty(),
            "{name}: {:?}",
            runner_commands(s)
                .iter()
                .map(|c| &c.line)
                .collect::<Vec<_>>()
        );
    }
    // The same JSON.
    let a: serde_json::Value = serde_json::from_str(&plain).unwrap();
    let b: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(a, b);
}
