//! The local sandbox: process-group kill at the timeout and on cancellation, what the copy
//! holds, and that the original workspace is never touched.

use nuvira_api::{NeverCancelled, Sandbox, SandboxError, SandboxRequest};
use nuvira_sandbox::LocalSandbox;
use nuvira_test_support::Trigger;
use nuvira_test_support::env::process_is_dead;
use std::path::Path;
use std::time::{Duration, Instant};

fn sh(workspace: &Path, script: &str) -> SandboxRequest {
    SandboxRequest::new(workspace, vec!["sh".into(), "-c".into(), script.into()])
}

/// A child that ignores SIGTERM and records its pid in `$PIDFILE`, under a parent that waits.
const STUBBORN: &str = r#"sh -c 'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 1000' & wait"#;

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group_even_a_child_ignoring_sigterm() {
    let ws = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("child.pid");
    let mut req = sh(ws.path(), STUBBORN);
    req.env
        .insert("PIDFILE".into(), pidfile.display().to_string());
    req.limits.timeout = Duration::from_secs(1);

    let started = Instant::now();
    let out = LocalSandbox::new()
        .run(&req, &NeverCancelled)
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(out.info.timed_out);
    assert_eq!(out.exit_code, None);
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid = read_pid(&pidfile);
    assert!(process_is_dead(pid), "child {pid} survived the timeout");
}

#[tokio::test]
async fn cancellation_kills_the_process_group_and_says_cancelled() {
    let ws = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("child.pid");
    let mut req = sh(ws.path(), STUBBORN);
    req.env
        .insert("PIDFILE".into(), pidfile.display().to_string());
    req.limits.timeout = Duration::from_secs(60);

    let cancel = Trigger::default();
    let sandbox = LocalSandbox::new();
    let run = sandbox.run(&req, &cancel);
    let fire = async {
        // Cancel once the stubborn child is up (bounded wait for its pid file).
        for _ in 0..1000 {
            if std::fs::metadata(&pidfile).is_ok_and(|m| m.len() > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.fire();
    };
    let (result, ()) = tokio::join!(run, fire);
    assert!(matches!(result, Err(SandboxError::Cancelled)), "{result:?}");
    let pid = read_pid(&pidfile);
    assert!(process_is_dead(pid), "child {pid} survived cancellation");
}

#[tokio::test]
async fn dropping_the_run_kills_the_process_group() {
    let ws = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let pidfile = marks.path().join("child.pid");
    let mut req = sh(ws.path(), STUBBORN);
    req.env
        .insert("PIDFILE".into(), pidfile.display().to_string());
    let sandbox = LocalSandbox::new();
    {
        let run = sandbox.run(&req, &NeverCancelled);
        tokio::pin!(run);
        for _ in 0..1000 {
            tokio::select! {
                _ = &mut run => panic!("the sleeping command finished"),
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            if std::fs::metadata(&pidfile).is_ok_and(|m| m.len() > 0) {
                break;
            }
        }
    } // the run's future is dropped here
    let pid = read_pid(&pidfile);
    assert!(process_is_dead(pid), "child {pid} survived the dropped run");
}

fn sample_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    for (file, text) in [
        ("src/a.txt", "original"),
        ("keep.txt", "keep"),
        (".gitignore", "*.log\nsecret/\n"),
        ("debug.log", "ignored"),
        ("secret/key", "ignored"),
        ("target/debug/big.bin", "build output"),
        ("sub/target/x", "nested build output"),
        ("node_modules/pkg/index.js", "dependency"),
        (".git/HEAD", "ref: refs/heads/main"),
        (".env.example", "hidden but not ignored"),
    ] {
        std::fs::create_dir_all(p.join(file).parent().unwrap()).unwrap();
        std::fs::write(p.join(file), text).unwrap();
    }
    ws
}

const LIST_AND_SCRIBBLE: &str =
    "find . -type f | sort; echo changed > src/a.txt; touch new.txt; rm -f keep.txt; rm -rf target";

#[tokio::test]
async fn the_copy_leaves_out_target_node_modules_git_and_ignored_files() {
    let ws = sample_workspace();
    let out = LocalSandbox::new()
        .run(&sh(ws.path(), LIST_AND_SCRIBBLE), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let files: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        files,
        [
            "./.env.example",
            "./.gitignore",
            "./keep.txt",
            "./src/a.txt"
        ],
        "{}",
        out.stdout
    );

    // The original is untouched.
    let p = ws.path();
    assert_eq!(
        std::fs::read_to_string(p.join("src/a.txt")).unwrap(),
        "original"
    );
    assert!(p.join("keep.txt").exists());
    assert!(!p.join("new.txt").exists());
    assert!(p.join("target/debug/big.bin").exists());
}

#[tokio::test]
async fn include_ignored_copies_everything_but_git() {
    let ws = sample_workspace();
    let mut req = sh(ws.path(), "find . -type f | sort");
    req.include_ignored = true;
    let out = LocalSandbox::new()
        .run(&req, &NeverCancelled)
        .await
        .unwrap();
    let files: Vec<&str> = out.stdout.lines().collect();
    for f in [
        "./debug.log",
        "./secret/key",
        "./target/debug/big.bin",
        "./node_modules/pkg/index.js",
    ] {
        assert!(files.contains(&f), "{f} missing from {files:?}");
    }
    assert!(!files.iter().any(|f| f.starts_with("./.git/")), "{files:?}");
}

/// Regression: the sandbox walk copied `.nuvira/` (the journal's copies of original files)
/// into every sandbox, and entered a nested repository's `.git` only by luck of its name.
#[tokio::test]
async fn the_journal_in_dot_nuvira_is_never_copied_into_the_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    for (file, text) in [
        ("src/a.rs", "fn a() {}"),
        (".nuvira/journal/0001/files/src/a.rs", "the original"),
        ("sub/.nuvira/last-run.json", "{}"),
        (".git/HEAD", "ref: refs/heads/main"),
        ("vendor/lib/.git/HEAD", "ref: refs/heads/main"),
        ("vendor/lib/lib.rs", "pub fn lib() {}"),
        ("module/.git", "gitdir: ../.git/modules/module"),
    ] {
        std::fs::create_dir_all(p.join(file).parent().unwrap()).unwrap();
        std::fs::write(p.join(file), text).unwrap();
    }
    for include_ignored in [false, true] {
        let mut req = sh(p, "find . | sort");
        req.include_ignored = include_ignored;
        let out = LocalSandbox::new()
            .run(&req, &NeverCancelled)
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        let found: Vec<&str> = out.stdout.lines().collect();
        assert!(found.contains(&"./src/a.rs"), "{found:?}");
        assert!(found.contains(&"./vendor/lib/lib.rs"), "{found:?}");
        let leaked: Vec<&&str> = found
            .iter()
            .filter(|f| f.split('/').any(|c| c == ".nuvira" || c == ".git"))
            .collect();
        assert!(leaked.is_empty(), "copied into the sandbox: {leaked:?}");
    }
}

#[tokio::test]
async fn exit_codes_output_dir_and_collected_files_come_back() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("pkg")).unwrap();
    let mut req = sh(
        ws.path(),
        "pwd; echo to-stderr >&2; echo '<xml/>' > report.xml; exit 3",
    );
    req.dir = "pkg".into();
    req.collect = vec!["pkg/report.xml".into(), "pkg/missing.xml".into()];
    let out = LocalSandbox::new()
        .run(&req, &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.info.exit_code, Some(3));
    assert_eq!(out.info.kind, "local");
    assert!(out.stdout.trim_end().ends_with("/pkg"), "{}", out.stdout);
    assert_eq!(out.stderr.trim(), "to-stderr");
    assert_eq!(out.collected.get("pkg/report.xml").unwrap(), b"<xml/>\n");
    assert!(!out.collected.contains_key("pkg/missing.xml"));
    assert_eq!(
        out.workdir.as_deref().map(|w| w.ends_with("pkg")),
        Some(true)
    );
}

#[tokio::test]
async fn the_opt_in_memory_rlimit_stops_a_heap_hog() {
    let sandbox = LocalSandbox::new().with_rlimit_data();
    if !sandbox.applies_rlimits() {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed, so no rlimits are applied");
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    // python3 allocating 200 MiB under a 64 MiB data limit fails with MemoryError.
    let mut req = SandboxRequest::new(
        ws.path(),
        vec![
            "python3".into(),
            "-c".into(),
            "b = bytearray(200 * 1024 * 1024); print('allocated')".into(),
        ],
    );
    req.limits.memory_bytes = 64 << 20;
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(out.stderr.contains("MemoryError"), "{}", out.stderr);
    assert!(!out.stdout.contains("allocated"));
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() {
    let ws = tempfile::tempdir().unwrap();
    let req = SandboxRequest::new(ws.path(), vec!["no-such-program-xyz".into()]);
    let out = LocalSandbox::without_rlimits()
        .run(&req, &NeverCancelled)
        .await;
    match out {
        Err(SandboxError::Failed(msg)) => assert!(msg.contains("no-such-program-xyz"), "{msg}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// The script that leaves, in `pkg/`, a report that is fine and four that must not be read: a
/// link to a file outside the sandbox, a report inside a folder that is a link out, a FIFO (a
/// read would wait forever) and a sparse file over the cap.
fn hostile_reports(outside: &Path) -> String {
    format!(
        "echo '<ok/>' > ok.xml; ln -s '{o}/secret.xml' link.xml; ln -s '{o}' out; \
         mkfifo fifo.xml; truncate -s {big} big.xml",
        o = outside.display(),
        big = nuvira_sandbox::COLLECT_CAP + 1
    )
}

/// The reports [`hostile_reports`] leaves, as the request collects them.
const HOSTILE: [&str; 5] = [
    "pkg/ok.xml",
    "pkg/link.xml",
    "pkg/out/secret.xml",
    "pkg/fifo.xml",
    "pkg/big.xml",
];

/// Runs [`hostile_reports`] (in `image` when given) and checks that only the regular report
/// comes back. The run is on a thread of its own, so that a read that waits on the FIFO makes
/// the test fail at its deadline instead of hanging it.
pub(crate) fn check_hostile_reports<S>(sandbox: S, outside: &Path, image: Option<&str>)
where
    S: Sandbox + Send + 'static,
{
    std::fs::write(outside.join("secret.xml"), "HOST-SECRET").unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("pkg")).unwrap();
    let mut req = sh(ws.path(), &hostile_reports(outside));
    req.dir = "pkg".into();
    req.image = image.map(str::to_owned);
    req.collect = HOSTILE.iter().map(|s| (*s).to_owned()).collect();
    let out = super::common::run_within(
        sandbox,
        req,
        Duration::from_secs(120),
        "collecting the reports waited on the FIFO",
    )
    .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        out.collected.keys().collect::<Vec<_>>(),
        ["pkg/ok.xml"],
        "collected through a link, a FIFO or past the cap"
    );
    assert_eq!(out.collected["pkg/ok.xml"], b"<ok/>\n");
}

#[test]
fn collected_files_are_read_as_the_run_left_them_never_through_a_link_or_a_fifo() {
    let outside = tempfile::tempdir().unwrap();
    check_hostile_reports(LocalSandbox::new(), outside.path(), None);
}
