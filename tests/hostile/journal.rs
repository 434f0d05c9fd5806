//! The journal and `.nuvira/` of a cloned repository are the attacker's data.
//!
//! - A `.nuvira/journal` symlink (absolute or relative) is never followed: `apply --dry-run`,
//!   `run` and `rollback` leave its target as it was and name the link.
//! - A planted transaction (valid structure, no or a foreign signature) is never recovered or
//!   rolled back: `.env` stays, no file gets the attacker's bytes, and a warning names the folder.
//!   A genuine crash on this machine is still recovered.
//! - Copies of originals are no more readable than the originals; every folder under `.nuvira/`
//!   is `0700`.

use crate::support::{Sentinel, git, nuvira};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const LIB: &str = "pub fn answer() -> u32 {\n    42\n}\n";
const SECRET: &str = "API_TOKEN=the-users-own-secret\n";

/// A scratch area: the attacker's `origin`, a folder `outside` the repositories, this machine's
/// state folder (`NUVIRA_STATE_DIR`), and a folder for edits and plans.
struct Area {
    dir: tempfile::TempDir,
}

impl Area {
    fn new() -> Self {
        let area = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in [
            "origin/src",
            "outside/one/deep",
            "outside/two",
            "state",
            "files",
        ] {
            std::fs::create_dir_all(area.path(d)).unwrap();
        }
        std::fs::write(area.path("outside/one/deep/keep.txt"), "keep me\n").unwrap();
        std::fs::write(area.path("outside/two/also.txt"), "and me\n").unwrap();
        std::fs::write(area.path("origin/src/lib.rs"), LIB).unwrap();
        std::fs::write(area.path("origin/README.md"), "# demo\n").unwrap();
        git(&area.path("origin"), &["init", "-q"]);
        area
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Commits everything in `origin` (forced past ignore files) and clones it to `clone`;
    /// the user then has an untracked secret `.env` in the clone.
    fn commit_and_clone(&self) -> PathBuf {
        let origin = self.path("origin");
        git(&origin, &["add", "-A", "-f", "."]);
        git(&origin, &["commit", "-q", "-m", "hostile"]);
        git(self.dir.path(), &["clone", "-q", "origin", "clone"]);
        let clone = self.path("clone");
        std::fs::write(clone.join(".env"), SECRET).unwrap();
        clone
    }

    /// `nuvira` with this machine's state folder.
    fn nuvira(&self) -> assert_cmd::Command {
        let mut cmd = nuvira();
        cmd.env("NUVIRA_STATE_DIR", self.path("state"));
        cmd
    }

    /// An edits file that changes only README.md.
    fn unrelated_edits(&self) -> PathBuf {
        let p = self.path("files/edits.yaml");
        std::fs::write(
            &p,
            "edits:\n  - {strategy: search-replace, path: README.md, search: '# demo', replace: '# Demo'}\n",
        )
        .unwrap();
        p
    }

    /// A plan with no edit step (inspect, then a report), which runs without Docker.
    fn plan_without_edits(&self) -> PathBuf {
        let p = self.path("files/plan.yaml");
        std::fs::write(
            &p,
            "goal: look around\nsteps:\n  - id: inspect\n    module: inspect\n    config: { keywords: [answer] }\n  - id: report\n    module: report\n    depends_on: [inspect]\n",
        )
        .unwrap();
        p
    }

    /// Runs `nuvira apply --dry-run`, `nuvira run` (no edit step) and `nuvira rollback` in
    /// `repo`, calling `check` with each one's name and stderr after it.
    fn every_command(&self, repo: &Path, mut check: impl FnMut(&str, &str)) {
        let edits = self.unrelated_edits();
        let plan = self.plan_without_edits();
        let runs: [(&str, Vec<std::ffi::OsString>); 3] = [
            (
                "apply --dry-run",
                vec![
                    "apply".into(),
                    "--dry-run".into(),
                    "--repo".into(),
                    repo.into(),
                    edits.into(),
                ],
            ),
            (
                "run",
                vec![
                    "run".into(),
                    "--quiet".into(),
                    "--sandbox".into(),
                    "local".into(),
                    plan.into(),
                    "--repo".into(),
                    repo.into(),
                ],
            ),
            (
                "rollback",
                vec!["rollback".into(), "--repo".into(), repo.into()],
            ),
        ];
        for (name, args) in runs {
            let out = self.nuvira().args(args).output().unwrap();
            check(name, &String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// Commits a symlink at `link` (`.nuvira` or `.nuvira/journal`) to `target`, clones, and runs
/// every command: the folder outside stays as it was, and each command names the link.
fn a_committed_state_symlink_is_never_followed(link: &str, target: &dyn Fn(&Area) -> PathBuf) {
    let area = Area::new();
    let at = area.path("origin").join(link);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target(&area), &at).unwrap();
    let clone = area.commit_and_clone();
    let cloned = clone.join(link);
    assert!(
        std::fs::symlink_metadata(&cloned)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the clone must carry the link"
    );
    assert!(cloned.join("one").is_dir(), "the link must lead outside");
    let outside = area.path("outside");
    let sentinel = Sentinel::of(&outside);
    area.every_command(&clone, |name, stderr| {
        sentinel.assert_unchanged(&outside);
        assert!(
            stderr.contains(&format!("`{link}`")) && stderr.contains("symlink"),
            "{name}: the error must name the link: {stderr}"
        );
        assert!(stderr.contains("remove the link"), "{name}: {stderr}");
    });
    assert_eq!(std::fs::read_to_string(clone.join(".env")).unwrap(), SECRET);
}

#[test]
fn a_committed_absolute_journal_symlink_is_never_followed() {
    a_committed_state_symlink_is_never_followed(".nuvira/journal", &|area| area.path("outside"));
}

#[test]
fn a_committed_relative_journal_symlink_is_never_followed() {
    // From `<repo>/.nuvira/`, two levels up is the scratch area.
    a_committed_state_symlink_is_never_followed(".nuvira/journal", &|_| {
        PathBuf::from("../../outside")
    });
}

#[test]
fn a_committed_state_folder_symlink_is_never_followed_by_the_journal_nor_the_report() {
    // The plan's report step would write `.nuvira/reports/<run>/` through it.
    a_committed_state_symlink_is_never_followed(".nuvira", &|_| PathBuf::from("../outside"));
}

/// Makes a real pending transaction on another machine (its own state folder) by crashing
/// `nuvira apply` mid-batch in a copy of the attacker's repository, and returns its folder: a
/// batch that rewrote `src/lib.rs` (whose original there holds the attacker's bytes) and
/// created `.env`.
fn pending_transaction_from_another_machine(area: &Area) -> PathBuf {
    let lab = area.path("lab");
    std::fs::create_dir_all(lab.join("src")).unwrap();
    std::fs::write(lab.join("src/lib.rs"), "ATTACKER BYTES\n").unwrap();
    let edits = area.path("files/crash.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - {strategy: whole-file, path: src/lib.rs, content: \"pub fn x() {}\\n\"}\n  - {strategy: whole-file, path: .env, content: \"y\\n\"}\n",
    )
    .unwrap();
    let out = nuvira()
        .env("NUVIRA_STATE_DIR", area.path("attacker-state"))
        .env(nuvira_workspace::FAULT_CRASH_AFTER_WRITES_ENV, "2")
        .args(["apply", "--repo"])
        .arg(&lab)
        .arg(&edits)
        .output()
        .unwrap();
    assert!(!out.status.success(), "meant to crash: {out:?}");
    let journal = lab.join(".nuvira/journal");
    let mut txns: Vec<PathBuf> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(txns.len(), 1, "{txns:?}");
    txns.pop().unwrap()
}

/// Copies a real pending transaction into `origin/.nuvira/journal/`, edited as an attacker
/// would: `.env` without the record of what the batch wrote (so its removal is unchecked) and
/// `src/lib.rs` recorded as left exactly as the repository has it (so its "original", the
/// attacker's bytes, would be restored over it). `strip_mac`: drop the signature (else the
/// other machine's one stays, now stale).
fn plant(area: &Area, strip_mac: bool) -> String {
    use sha2::Digest as _;
    let real = pending_transaction_from_another_machine(area);
    let id = real.file_name().unwrap().to_string_lossy().into_owned();
    let planted = area.path("origin/.nuvira/journal").join(&id);
    std::fs::create_dir_all(&planted).unwrap();
    for e in std::fs::read_dir(&real).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), planted.join(e.file_name())).unwrap();
    }
    let manifest = planted.join("txn.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["state"], "pending", "{m}");
    for e in m["entries"].as_array_mut().unwrap() {
        let e = e.as_object_mut().unwrap();
        match e["path"].as_str().unwrap() {
            ".env" => {
                assert!(e["original"].is_null(), "the batch created it: {e:?}");
                e.remove("after");
            }
            "src/lib.rs" => {
                e.insert(
                    "after".into(),
                    serde_json::json!({
                        "kind": "file",
                        "len": LIB.len(),
                        "sha256": format!("{:x}", sha2::Sha256::digest(LIB.as_bytes())),
                    }),
                );
            }
            other => panic!("unexpected entry {other}"),
        }
    }
    if strip_mac {
        m.as_object_mut().unwrap().remove("mac");
    }
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    id
}

fn a_planted_pending_transaction_is_never_applied(strip_mac: bool) {
    let area = Area::new();
    let id = plant(&area, strip_mac);
    let clone = area.commit_and_clone();
    let planted = clone.join(".nuvira/journal").join(&id);
    assert!(planted.join("txn.json").is_file(), "the clone carries it");
    let before = Sentinel::of(&planted);
    area.every_command(&clone, |name, stderr| {
        assert_eq!(
            std::fs::read_to_string(clone.join(".env")).ok().as_deref(),
            Some(SECRET),
            "{name} touched .env: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(clone.join("src/lib.rs")).unwrap(),
            LIB,
            "{name} wrote the attacker's bytes: {stderr}"
        );
        assert!(
            stderr.contains(&format!("`.nuvira/journal/{id}`")) && stderr.contains("left"),
            "{name} must warn about the planted folder: {stderr}"
        );
    });
    // Left alone: the planted transaction is exactly as it came.
    before.assert_unchanged(&planted);
}

#[test]
fn a_planted_unsigned_pending_transaction_is_never_applied() {
    a_planted_pending_transaction_is_never_applied(true);
}

#[test]
fn a_planted_pending_transaction_signed_elsewhere_is_never_applied() {
    a_planted_pending_transaction_is_never_applied(false);
}

#[test]
fn a_crash_on_this_machine_is_recovered_and_only_with_this_machines_key() {
    let area = Area::new();
    let repo = area.path("origin");
    std::fs::write(repo.join(".env"), SECRET).unwrap();
    let edits = area.path("files/crash.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - {strategy: whole-file, path: src/lib.rs, content: \"pub fn x() {}\\n\"}\n  - {strategy: whole-file, path: README.md, content: \"y\\n\"}\n",
    )
    .unwrap();
    let out = area
        .nuvira()
        .env(nuvira_workspace::FAULT_CRASH_AFTER_WRITES_ENV, "2")
        .args(["apply", "--repo"])
        .arg(&repo)
        .arg(&edits)
        .output()
        .unwrap();
    assert!(!out.status.success(), "meant to crash: {out:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn x() {}\n"
    );

    // Another machine (another key) leaves it alone and says so.
    let out = nuvira()
        .env("NUVIRA_STATE_DIR", area.path("elsewhere"))
        .args(["apply", "--dry-run", "--repo"])
        .arg(&repo)
        .arg(area.unrelated_edits())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("left the journal transaction"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn x() {}\n"
    );

    // This machine recovers it.
    let out = area
        .nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(&repo)
        .arg(area.unrelated_edits())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("rolled back an interrupted batch"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        LIB
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "# demo\n"
    );
    assert_eq!(std::fs::read_to_string(repo.join(".env")).unwrap(), SECRET);
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn folders_below(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.push(e.path());
            folders_below(&e.path(), out);
        }
    }
}

#[test]
fn copies_of_originals_are_no_wider_than_the_originals_and_state_folders_are_private() {
    let area = Area::new();
    let repo = area.path("origin");
    std::fs::create_dir_all(repo.join("private")).unwrap();
    std::fs::write(repo.join("private/token.txt"), "token = 1\n").unwrap();
    std::fs::set_permissions(
        repo.join("private/token.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(repo.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        repo.join("README.md"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    // A `.nuvira/` that came with a checkout, world-readable.
    std::fs::create_dir_all(repo.join(".nuvira/journal")).unwrap();
    for d in [".nuvira", ".nuvira/journal"] {
        std::fs::set_permissions(repo.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let edits = area.path("files/edit.yaml");
    std::fs::write(
        &edits,
        "edits:\n  - {strategy: search-replace, path: private/token.txt, search: '1', replace: '2'}\n  - {strategy: search-replace, path: README.md, search: '# demo', replace: '# Demo'}\n",
    )
    .unwrap();
    area.nuvira()
        .args(["apply", "--repo"])
        .arg(&repo)
        .arg(&edits)
        .assert()
        .code(0);

    let state = repo.join(".nuvira");
    let mut folders = vec![state.clone()];
    folders_below(&state, &mut folders);
    assert!(folders.len() >= 3, "{folders:?}");
    for f in &folders {
        assert_eq!(mode(f), 0o700, "{} is not private", f.display());
    }
    let txn = folders.last().unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(txn.join("txn.json")).unwrap()).unwrap();
    let mut seen = 0;
    for e in manifest["entries"].as_array().unwrap() {
        let original = mode(&repo.join(e["path"].as_str().unwrap()));
        let blob = txn.join(e["original"]["blob"].as_str().unwrap());
        let copy = mode(&blob);
        assert_eq!(
            copy & !original,
            0,
            "{} is {copy:o}, wider than its original's {original:o}",
            blob.display()
        );
        assert_eq!(copy & 0o077, 0, "{} is readable by others", blob.display());
        seen += 1;
    }
    assert_eq!(seen, 2);
    assert_eq!(mode(&repo.join("private/token.txt")), 0o600);
}

#[test]
fn a_new_state_folder_is_ignored_by_git() {
    let area = Area::new();
    let repo = area.path("origin");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    area.nuvira()
        .args(["apply", "--repo"])
        .arg(&repo)
        .arg(area.unrelated_edits())
        .assert()
        .code(0);
    assert_eq!(
        std::fs::read_to_string(repo.join(".nuvira/.gitignore")).unwrap(),
        "*\n"
    );
    let out = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(&repo)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(!status.contains(".nuvira"), "{status}");
    assert!(status.contains("README.md"), "{status}");
}
