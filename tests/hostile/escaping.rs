//! File names are data from whoever wrote the repository: one with an ESC sequence and a
//! newline (`evil\x1b[31m\nname.rs`, a real file) must not reach the terminal raw from
//! `inspect`, `apply` (applied and dry run) or `rollback`.

use crate::support::nuvira;

const EVIL: &str = "evil\x1b[31m\nname.rs";
const SHOWN: &str = "evil\\x1b[31m\\nname.rs";

/// Every line that mentions the file shows it escaped, and no output holds a raw ESC; the
/// name's own newline would split `evil...` from `name.rs`, so no line may end in `[31m`.
fn assert_escaped(what: &str, out: &std::process::Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains('\x1b'),
            "{what}: raw ESC on {stream}: {text:?}"
        );
        assert!(
            !text
                .lines()
                .any(|l| l.ends_with("[31m") || l.starts_with("name.rs")),
            "{what}: the name was split by its newline on {stream}: {text:?}"
        );
    }
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(EVIL), "fn name() -> u32 { 1 }\n").unwrap();
    dir
}

#[test]
fn inspect_prints_an_escape_sequence_file_name_escaped() {
    let dir = repo();
    let out = nuvira()
        .args(["inspect", "--goal", "name", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_escaped("inspect", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(SHOWN), "the file is listed, escaped: {text}");
}

#[test]
fn apply_dry_run_and_rollback_print_the_file_name_escaped() {
    let dir = repo();
    let edits = tempfile::tempdir().unwrap();
    let file = edits.path().join("edits.json");
    let batch = serde_json::json!({"edits": [{
        "strategy": "search-replace", "path": EVIL, "search": "{ 1 }", "replace": "{ 2 }"
    }]});
    std::fs::write(&file, batch.to_string()).unwrap();
    let out = nuvira()
        .args(["apply", "--dry-run", "--repo"])
        .arg(dir.path())
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_escaped("apply --dry-run", &out);
    let out = nuvira()
        .args(["apply", "--repo"])
        .arg(dir.path())
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_escaped("apply", &out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(SHOWN),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(EVIL)).unwrap(),
        "fn name() -> u32 { 2 }\n"
    );
    let out = nuvira()
        .args(["rollback", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_escaped("rollback", &out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(SHOWN),
        "{out:?}"
    );
}
