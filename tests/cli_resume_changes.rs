//! `nuvira resume` after the user edited a file a finished step of the run wrote: it refuses
//! before anything runs (exit 3, naming the file and the step, saying what to do); with
//! `--accept-changes` the edit is kept, the steps that wrote the file are not run again (no
//! model call, no edit applied twice) and the steps that read it are. Real runs of the
//! scripted model (NUVIRA_SCRIPTED_LLM), a real git repository, real commands.

use crate::runs_setup::{LIB, Setup, WANT, run_folders, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A run of the scripted model's plan whose step `count` appends a line to `tally` and whose
/// step `check` one to `checked` each time they run; returns the setup, the repository and the
/// run's id once it succeeded (three model calls, each command once).
fn first_run() -> (Setup, PathBuf, String) {
    let s = Setup::without_plan();
    s.write_plan(&format!(
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
        s.path("tally").display(),
        s.path("checked").display()
    ));
    let repo = s.path("repo");
    let out = s.run(&repo, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(lib(&s), WANT);
    assert_eq!(counts(&s), (3, 1, 1));
    let id = run_folders(&repo).remove(0);
    (s, repo, id)
}

/// Lines of a file of the setup (0 when it does not exist).
fn lines(s: &Setup, rel: &str) -> usize {
    std::fs::read_to_string(s.path(rel))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Model calls, runs of step `count`, runs of step `check` so far.
fn counts(s: &Setup) -> (usize, usize, usize) {
    (
        lines(s, "calls.log"),
        lines(s, "tally"),
        lines(s, "checked"),
    )
}

fn lib(s: &Setup) -> String {
    std::fs::read_to_string(s.path("repo/src/lib.rs")).unwrap()
}

fn meta(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn resume_refuses_a_file_changed_since_a_finished_step_wrote_it_and_accept_changes_keeps_it() {
    let (s, repo, id) = first_run();
    let dir = repo.join(".nuvira/runs").join(&id);

    // Unchanged: a resume reruns nothing and refuses nothing.
    let out = s.resume(&repo, &id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(counts(&s), (3, 1, 1));

    // The user edits the file steps `one` and `two` wrote.
    let mine = format!("{WANT}// my note\n");
    std::fs::write(repo.join("src/lib.rs"), &mine).unwrap();
    let before = meta(&dir);
    let out = s.resume(&repo, &id, &[]);
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
    assert_eq!(lib(&s), mine);
    assert_eq!(counts(&s), (3, 1, 1));
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
    let out = s.resume(&repo, &id, &["--accept-changes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("keeping your version of `src/lib.rs`"),
        "{}",
        text(&out)
    );
    assert_eq!(lib(&s), mine, "the user's version was not kept as it is");
    assert_eq!(lines(&s, "calls.log"), 3, "the model was asked again");
    assert_eq!(
        (lines(&s, "tally"), lines(&s, "checked")),
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
    let out = s.resume(&repo, &id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(counts(&s), (3, 2, 2));
    assert_eq!(lib(&s), mine);
}

#[test]
fn resume_after_a_rollback_of_the_run_runs_its_edits_again_without_refusing() {
    let (s, repo, id) = first_run();
    // `nuvira rollback` (what the refusal suggests) undid the run's edits: the files differ
    // from what the run left, but nuvira, not the user, changed them (the journal knows).
    let out = s
        .command()
        .args(["rollback", "--repo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(lib(&s), LIB);
    let out = s.resume(&repo, &id, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(lib(&s), WANT, "the edits were not made again");
}
