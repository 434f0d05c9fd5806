//! `nuvira resume` after the user edited a file a finished step of the run wrote: it refuses
//! before anything runs (exit 3, naming the file and the step, saying what to do); with
//! `--accept-changes` the edit is kept, the steps that wrote the file are not run again (no
//! model call, no edit applied twice) and the steps that read it are. Real runs of the
//! scripted model (NUVIRA_SCRIPTED_LLM), a real git repository, real commands.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LIB: &str = "pub fn a() -> u32 { 1 }\npub fn b() -> u32 { 2 }\n";
const WANT: &str = "pub fn a() -> u32 { 10 }\npub fn b() -> u32 { 20 }\n";

const SCRIPT: &str = r#"- match: { schema: relevant_files }
  response:
    usage: { input_tokens: 50, output_tokens: 5 }
    json: { paths: [src/lib.rs] }
- match: { schema: edit_batch, last_user_contains: "make a return 10" }
  response:
    usage: { input_tokens: 100, output_tokens: 10 }
    json: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 1 }", replace: "{ 10 }" } ], explanation: "a" }
- match: { schema: edit_batch, last_user_contains: "make b return 20" }
  response:
    usage: { input_tokens: 200, output_tokens: 20 }
    json: { edits: [ { strategy: search-replace, path: src/lib.rs, search: "{ 2 }", replace: "{ 20 }" } ], explanation: "b" }
"#;

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let s = Self { dir };
        let tally = s.path("tally");
        let checked = s.path("checked");
        let plan = format!(
            r#"goal: "make a and b return 10 and 20"
steps:
  - {{ id: look, module: inspect, config: {{ keywords: [fn], paths: [src] }} }}
  - {{ id: one, module: edit, depends_on: [look], config: {{ instructions: "make a return 10" }} }}
  - {{ id: count, module: execute, depends_on: [one], config: {{ command: "echo ran >> {}", sandbox: local }} }}
  - {{ id: two, module: edit, depends_on: [count], config: {{ instructions: "make b return 20" }} }}
  - id: check
    module: execute
    depends_on: [two]
    config: {{ command: "grep -q '{{ 10 }}' src/lib.rs && grep -q '{{ 20 }}' src/lib.rs && echo ok >> {}", sandbox: local }}
"#,
            tally.display(),
            checked.display()
        );
        std::fs::write(s.path("plan.yaml"), plan).unwrap();
        std::fs::write(s.path("script.yaml"), SCRIPT).unwrap();
        let repo = s.path("repo");
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join("src/lib.rs"), LIB).unwrap();
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "commit",
                "-qm",
                "init",
            ],
        ] {
            assert!(
                Command::new("git")
                    .args(args)
                    .current_dir(&repo)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn nuvira(&self) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("nuvira"));
        c.env("NUVIRA_SCRIPTED_LLM", self.path("script.yaml"))
            .env("NUVIRA_SCRIPTED_LLM_SKIP", "1")
            .env("NUVIRA_SCRIPTED_LLM_LOG", self.path("calls.log"))
            .env_remove("NUVIRA_MODEL")
            .env_remove("NUVIRA_HISTORY")
            .env_remove("NUVIRA_CONFIG")
            .env("XDG_CONFIG_HOME", self.path("xdg"));
        c
    }

    fn resume(&self, id: &str, extra: &[&str]) -> Output {
        self.nuvira()
            .args(["resume", id, "-q", "--repo"])
            .arg(self.path("repo"))
            .args(extra)
            .output()
            .unwrap()
    }

    /// Lines of a file (0 when it does not exist).
    fn lines(&self, rel: &str) -> usize {
        std::fs::read_to_string(self.path(rel))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    fn lib(&self) -> String {
        std::fs::read_to_string(self.path("repo/src/lib.rs")).unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn meta(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn resume_refuses_a_file_changed_since_a_finished_step_wrote_it_and_accept_changes_keeps_it() {
    let s = Setup::new();
    let repo = s.path("repo");
    let out = s
        .nuvira()
        .arg("run")
        .arg(s.path("plan.yaml"))
        .arg("--repo")
        .arg(&repo)
        .arg("-q")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.lib(), WANT);
    assert_eq!(
        (s.lines("calls.log"), s.lines("tally"), s.lines("checked")),
        (3, 1, 1)
    );
    let runs = repo.join(".nuvira/runs");
    let id = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let dir = runs.join(&id);

    // Unchanged: a resume reruns nothing and refuses nothing.
    let out = s.resume(&id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        (s.lines("calls.log"), s.lines("tally"), s.lines("checked")),
        (3, 1, 1)
    );

    // The user edits the file steps `one` and `two` wrote.
    let mine = format!("{WANT}// my note\n");
    std::fs::write(repo.join("src/lib.rs"), &mine).unwrap();
    let before = meta(&dir);
    let out = s.resume(&id, &[]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        err.contains("`src/lib.rs` (written by step `two`"),
        "names the file and the step: {err}"
    );
    assert!(
        err.contains(&format!("nuvira resume {id} --accept-changes")),
        "{err}"
    );
    assert!(err.contains("nuvira rollback"), "{err}");
    // Nothing ran, nothing changed: the file, the model, the commands, the run folder.
    assert_eq!(s.lib(), mine);
    assert_eq!(
        (s.lines("calls.log"), s.lines("tally"), s.lines("checked")),
        (3, 1, 1)
    );
    assert_eq!(meta(&dir), before, "the refused resume changed run.json");
    assert!(
        !dir.join(format!(
            "events.{}.jsonl",
            before["resumes"].as_u64().unwrap() + 1
        ))
        .exists()
    );

    // --accept-changes: the edit stays, the edit steps are not run again (no model call, no
    // edit applied twice), the commands that read the file are.
    let out = s.resume(&id, &["--accept-changes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("keeping your version of `src/lib.rs`"),
        "{}",
        text(&out)
    );
    assert_eq!(s.lib(), mine, "the user's version was not kept as it is");
    assert_eq!(s.lines("calls.log"), 3, "the model was asked again");
    assert_eq!(
        (s.lines("tally"), s.lines("checked")),
        (2, 2),
        "the steps that read the file did not run again"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let status = |id: &str| {
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()["status"]
            .clone()
    };
    for step in ["look", "one", "count", "two", "check"] {
        assert_eq!(status(step), "succeeded", "{step}: {report:#}");
    }
    // The run now knows the user's version: the next resume refuses nothing, reruns nothing.
    let out = s.resume(&id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        (s.lines("calls.log"), s.lines("tally"), s.lines("checked")),
        (3, 2, 2)
    );
    assert_eq!(s.lib(), mine);
}

#[test]
fn resume_after_a_rollback_of_the_run_runs_its_edits_again_without_refusing() {
    let s = Setup::new();
    let repo = s.path("repo");
    let out = s
        .nuvira()
        .arg("run")
        .arg(s.path("plan.yaml"))
        .arg("--repo")
        .arg(&repo)
        .arg("-q")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // `nuvira rollback` (what the refusal suggests) undid the run's edits: the files differ
    // from what the run left, but nuvira, not the user, changed them (the journal knows).
    let out = s
        .nuvira()
        .args(["rollback", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.lib(), LIB);
    let id = std::fs::read_dir(repo.join(".nuvira/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    let out = s.resume(&id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.lib(), WANT, "the edits were not made again");
}
