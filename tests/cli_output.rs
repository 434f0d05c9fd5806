//! Output that cannot be written (a closed pipe, a full disk) ends the command cleanly: no
//! panic, no backtrace, a documented exit code.

use std::io::Read;
use std::process::{Command, Stdio};

/// A valid plan big enough that `nuvira graph` writes far more than a pipe buffer holds.
fn big_plan(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let mut text = String::from("goal: a long chain\nsteps:\n");
    for i in 0..20_000 {
        text.push_str(&format!("  - id: step-{i}\n    module: inspect\n"));
        if i > 0 {
            text.push_str(&format!("    depends_on: [step-{}]\n", i - 1));
        }
    }
    let p = dir.path().join("big.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

fn nuvira() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nuvira"));
    // A backtrace would show up if the command panicked; make sure it would be visible.
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

#[test]
fn a_reader_that_closes_the_pipe_early_gets_exit_0_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let plan = big_plan(&dir);
    for format in ["dot", "mermaid", "json"] {
        let mut child = nuvira()
            .args(["graph", "--format", format])
            .arg(&plan)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read a little, then close our end, like `| head -c 16`.
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 16];
        stdout.read_exact(&mut first).unwrap();
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {stderr}");
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn a_full_disk_on_stdout_exits_3_with_one_line_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let plan = big_plan(&dir);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = nuvira()
        .args(["validate", "--format", "json"])
        .arg(&plan)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.starts_with("error: failed printing to stdout"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn log_lines_on_a_pipe_carry_no_colour_codes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = nuvira()
        .arg("-v")
        .arg("run")
        .arg(root.join("examples/quickstart/plan.yaml"))
        .arg("--repo")
        .arg(root.join("examples/quickstart"))
        .args(["--scratch", "--dry-run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("INFO") && stderr.contains("run:started"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}
