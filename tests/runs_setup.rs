//! What the run-history tests (`cli_runs`, `cli_resume_changes`, `cli_runs_gc`) set up the
//! same way: a git repository, the scripted model's script, and `nuvira` in an environment of
//! the test's own (no model, history, retention or configuration variables of the caller; an
//! empty user configuration folder).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `src/lib.rs` before a run.
pub const LIB: &str = "pub fn a() -> u32 { 1 }\npub fn b() -> u32 { 2 }\n";
/// `src/lib.rs` after a run of a plan that makes `a` return 10 and `b` 20.
pub const WANT: &str = "pub fn a() -> u32 { 10 }\npub fn b() -> u32 { 20 }\n";

/// The scripted model of those plans: the inspect step's files, then the two edits.
pub const SCRIPT: &str = r#"- match: { schema: relevant_files }
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

/// Makes `repo` a git repository holding `files` (path, content), committed.
pub fn git_repo(repo: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = repo.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "init"],
    ] {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(repo)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }
}

/// `nuvira` without a model and without the caller's history, retention, configuration and
/// fault-injection variables; `xdg` is the user's configuration folder (empty unless a test
/// writes one).
pub fn nuvira(xdg: &Path) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("nuvira"));
    c.env_remove("NUVIRA_MODEL")
        .env_remove("NUVIRA_SCRIPTED_LLM")
        .env_remove("NUVIRA_HISTORY")
        .env_remove("NUVIRA_RUNS_KEEP")
        .env_remove("NUVIRA_RUNS_KEEP_DAYS")
        .env_remove("NUVIRA_CONFIG")
        .env_remove(nuvira_workspace::FAULT_PAUSE_AT_ENV)
        .env("XDG_CONFIG_HOME", xdg);
    c
}

/// A command's stdout then stderr, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The entries of `repo`'s `.nuvira/runs`, sorted.
pub fn run_folders(repo: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo.join(".nuvira/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A folder with a plan (`plan.yaml`), the [`SCRIPT`] (`script.yaml`) and a git repository
/// `repo/` holding `src/lib.rs` ([`LIB`]); `nuvira` runs with the scripted model, logging its
/// calls to `calls.log`.
pub struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// With `plan` as `plan.yaml`.
    pub fn new(plan: &str) -> Self {
        let s = Self::without_plan();
        s.write_plan(plan);
        s
    }

    /// Without a plan yet (one that names the folder's own paths: [`write_plan`](Self::write_plan)).
    pub fn without_plan() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("script.yaml"), SCRIPT).unwrap();
        let s = Self { dir };
        s.fresh_repo("repo");
        s
    }

    /// Writes `plan.yaml`.
    pub fn write_plan(&self, plan: &str) {
        std::fs::write(self.path("plan.yaml"), plan).unwrap();
    }

    /// A path in the folder.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Another git repository `name/` like `repo/`.
    pub fn fresh_repo(&self, name: &str) -> PathBuf {
        let repo = self.path(name);
        git_repo(&repo, &[("src/lib.rs", LIB)]);
        repo
    }

    /// `nuvira` with the scripted model (entries of finished steps skipped), its call log, and
    /// the user's configuration folder `xdg/`.
    pub fn command(&self) -> Command {
        let mut c = nuvira(&self.path("xdg"));
        c.env("NUVIRA_SCRIPTED_LLM", self.path("script.yaml"))
            .env("NUVIRA_SCRIPTED_LLM_SKIP", "1")
            .env("NUVIRA_SCRIPTED_LLM_LOG", self.path("calls.log"));
        c
    }

    /// [`command`](Self::command) as an `assert_cmd` command.
    pub fn nuvira(&self) -> assert_cmd::Command {
        assert_cmd::Command::from_std(self.command())
    }

    /// `nuvira run plan.yaml --repo REPO -q EXTRA`.
    pub fn run(&self, repo: &Path, extra: &[&str]) -> Output {
        self.command()
            .arg("run")
            .arg(self.path("plan.yaml"))
            .arg("--repo")
            .arg(repo)
            .arg("-q")
            .args(extra)
            .output()
            .unwrap()
    }

    /// `nuvira resume ID -q --repo REPO EXTRA`.
    pub fn resume(&self, repo: &Path, id: &str, extra: &[&str]) -> Output {
        self.command()
            .args(["resume", id, "-q", "--repo"])
            .arg(repo)
            .args(extra)
            .output()
            .unwrap()
    }
}
