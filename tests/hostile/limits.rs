//! Unbounded and pathological inputs: `/dev/zero`, a 100 MB line, a 70 MB plan, 400 KB of
//! nesting. Each must end quickly in exit 2 with a message naming the file and the cap, never
//! in an abort or minutes of parsing.

use crate::support::nuvira;
use std::path::Path;
use std::time::Duration;

/// Far above what each case takes when it works, far below what it took when it did not.
const QUICK: Duration = Duration::from_secs(30);

fn stderr_of(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let out = nuvira()
        .args(args)
        .current_dir(dir)
        .timeout(QUICK)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A sparse file of `len` bytes whose content is `head` then zero bytes (one line, no newline).
fn sparse(path: &Path, head: &[u8], len: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(head).unwrap();
    f.set_len(len).unwrap();
}

#[test]
fn report_of_dev_zero_ends_in_exit_2_naming_the_line_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&["report", "/dev/zero"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/dev/zero") && err.contains("line 1"), "{err}");
    assert!(err.contains("longer than 16777216 bytes"), "{err}");
}

#[test]
fn report_of_one_100_mb_line_ends_in_exit_2_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    // A blank first line, then one line of 100 MB (sparse: no disk is written).
    sparse(&events, b"\n{\"type\":\"", 100 * 1024 * 1024);
    let (code, err) = stderr_of(&["report", events.to_str().unwrap()], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("events.jsonl, line 2"), "{err}");
    assert!(err.contains("the cap on one event"), "{err}");
}

#[test]
fn report_honours_the_total_cap_variable() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let line = "\n".repeat(100);
    std::fs::write(&events, line).unwrap();
    let out = nuvira()
        .args(["report", events.to_str().unwrap()])
        .env("NUVIRA_MAX_EVENTS_BYTES", "10")
        .timeout(QUICK)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("larger than 10 bytes") && err.contains("line 11"),
        "{err}"
    );
}

#[test]
fn validate_of_dev_zero_and_a_plan_linked_to_it_end_in_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&["validate", "/dev/zero"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("/dev/zero"), "{err}");
    let link = dir.path().join("plan.yaml");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let (code, err) = stderr_of(&["validate", "plan.yaml"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("plan.yaml"), "{err}");
    assert!(
        err.contains("64 MiB input cap") && err.contains("NUVIRA_MAX_INPUT_BYTES"),
        "{err}"
    );
    // `graph` and `apply` read through the same loader.
    let (code, err) = stderr_of(&["graph", "plan.yaml"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("64 MiB input cap"), "{err}");
}

#[test]
fn a_70_mb_plan_and_edits_file_are_refused_naming_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("big.yaml");
    sparse(&plan, b"goal: g\nsteps: []\n# ", 70 * 1024 * 1024);
    let (code, err) = stderr_of(&["validate", "big.yaml"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("big.yaml") && err.contains("64 MiB input cap"),
        "{err}"
    );
    let (code, err) = stderr_of(&["apply", "big.yaml"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("big.yaml") && err.contains("64 MiB input cap"),
        "{err}"
    );
    // The cap is configurable: a smaller one refuses a small file, naming it.
    std::fs::write(dir.path().join("small.yaml"), "goal: g\nsteps: []\n").unwrap();
    let out = nuvira()
        .args(["validate", "small.yaml"])
        .current_dir(dir.path())
        .env("NUVIRA_MAX_INPUT_BYTES", "4")
        .timeout(QUICK)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("larger than the 4 bytes input cap"), "{err}");
    let out = nuvira()
        .args(["validate", "small.yaml"])
        .current_dir(dir.path())
        .env("NUVIRA_MAX_INPUT_BYTES", "lots")
        .timeout(QUICK)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("NUVIRA_MAX_INPUT_BYTES=\"lots\" is not a positive number"),
        "{err}"
    );
}

#[test]
fn four_hundred_kb_of_nesting_is_refused_at_the_bracket_that_crossed_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        (
            "deep.yaml",
            format!("goal: g\nsteps: {}", "[".repeat(400_000)),
        ),
        ("deep.json", format!("{{\"steps\": {}", "[".repeat(400_000))),
        ("deep.toml", format!("steps = {}", "[".repeat(400_000))),
        ("flow.yaml", format!("steps: {}", "{a: ".repeat(100_000))),
    ] {
        std::fs::write(dir.path().join(name), &text).unwrap();
        let (code, err) = stderr_of(&["validate", name], dir.path());
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(
            err.contains("nested more than 128 levels deep"),
            "{name}: {err}"
        );
        assert!(err.contains(&format!("{name}:")), "{name}: {err}");
    }
    let (_, err) = stderr_of(&["validate", "deep.yaml"], dir.path());
    assert!(err.contains("deep.yaml:2:136"), "{err}");
    std::fs::write(
        dir.path().join("edits.yaml"),
        format!("edits: {}", "[".repeat(400_000)),
    )
    .unwrap();
    let (code, err) = stderr_of(&["apply", "edits.yaml"], dir.path());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("`edits.yaml` at line 1, column 136") && err.contains("nested more than 128"),
        "{err}"
    );
}
