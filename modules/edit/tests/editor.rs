//! The editor: previews touch nothing, batches are all-or-nothing, only new syntax errors
//! reject, secrets warn or block, and every write is journaled.

use crate::support::{Recorder, editor, entry, repo, standard_editor, tree};
use nuvira_api::{ChangeKind, Severity};
use nuvira_edit::{EditFailure, EditOptions, Emit};
use nuvira_workspace::{Journal, Workspace};
use serde_json::json;

const LIB: &str = "pub fn parse_config() -> u32 {\n    1\n}\n";

#[test]
fn dry_run_previews_diffs_and_impact_and_touches_nothing() {
    let dir = repo(&[("src/lib.rs", LIB), ("README.md", "# demo\n")]);
    let before = tree(dir.path());
    let ws = Workspace::open(dir.path()).unwrap();
    let preview = editor().dry_run(
        &ws,
        &[
            entry(json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "parse_config", "replace": "load_config"})),
            entry(json!({"strategy": "whole-file", "path": "docs/new.md", "content": "hello\n"})),
        ],
        &Emit::none(),
    );
    assert!(preview.is_valid(), "{preview:?}");
    assert_eq!(preview.changes.len(), 2);
    let lib = &preview.changes[0];
    assert_eq!(lib.kind, ChangeKind::Modify);
    assert!(
        lib.diff.starts_with("--- a/src/lib.rs\n+++ b/src/lib.rs\n"),
        "{}",
        lib.diff
    );
    assert!(
        lib.diff
            .contains("-pub fn parse_config() -> u32 {\n+pub fn load_config() -> u32 {")
    );
    assert_eq!((lib.additions, lib.deletions), (1, 1));
    assert_eq!(preview.changes[1].kind, ChangeKind::Create);
    assert!(
        preview.changes[1]
            .diff
            .starts_with("--- /dev/null\n+++ b/docs/new.md")
    );
    assert_eq!(preview.estimated_impact.files, 2);
    assert_eq!(preview.estimated_impact.lines_added, 2);
    assert_eq!(preview.estimated_impact.level, "medium");
    assert!(preview.validation.syntax_valid);
    assert_eq!(tree(dir.path()), before, "a dry run wrote something");
    assert!(
        !dir.path().join(".nuvira").exists(),
        "a dry run created state"
    );
}

#[test]
fn when_the_third_edit_fails_nothing_is_written_and_every_reason_is_named() {
    let dir = repo(&[("a.txt", "one\n"), ("b.txt", "two\n"), ("c.txt", "three\n")]);
    let before = tree(dir.path());
    let ws = Workspace::open(dir.path()).unwrap();
    let entries = [
        entry(
            json!({"strategy": "search-replace", "path": "a.txt", "search": "one", "replace": "ONE"}),
        ),
        entry(
            json!({"strategy": "search-replace", "path": "b.txt", "search": "two", "replace": "TWO"}),
        ),
        entry(
            json!({"strategy": "search-replace", "path": "c.txt", "search": "four", "replace": "FOUR"}),
        ),
        entry(json!({"strategy": "delete-file", "path": "missing.txt"})),
    ];
    let events = Recorder::default();
    let err = editor()
        .edit(&ws, &entries, "run", &Emit::to(&events, Some("edit")))
        .unwrap_err();
    let EditFailure::Rejected(result) = err else {
        panic!("expected a rejection, got {err}");
    };
    assert_eq!(result.applied_count, 0);
    let reasons: Vec<_> = result
        .skipped_changes
        .iter()
        .map(|s| (s.path.as_str(), s.line, s.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, "c.txt");
    assert_eq!(reasons[0].1, Some(1));
    assert!(
        reasons[0]
            .2
            .starts_with("edit 3 (search-replace): search text not found")
    );
    assert_eq!(reasons[1].0, "missing.txt");
    assert!(reasons[1].2.contains("does not exist"), "{}", reasons[1].2);
    assert_eq!(tree(dir.path()), before, "a rejected batch wrote something");
    assert!(events.names().contains(&"edit:skipped"));
    assert!(!events.names().contains(&"edit:written"));
}

#[test]
fn an_edit_that_introduces_a_syntax_error_is_rejected_with_its_location() {
    for ed in [editor(), standard_editor()] {
        let dir = repo(&[("src/lib.rs", LIB)]);
        let before = tree(dir.path());
        let ws = Workspace::open(dir.path()).unwrap();
        let err = ed
            .edit(
                &ws,
                &[entry(json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "    1\n}", "replace": "    1\n"}))],
                "run",
                &Emit::none(),
            )
            .unwrap_err();
        let EditFailure::Rejected(result) = err else {
            panic!("expected a rejection");
        };
        assert!(!result.preview.validation.syntax_valid);
        let issue = &result.preview.validation.ast_issues[0];
        assert_eq!(issue.path, "src/lib.rs");
        assert_eq!(issue.node_kind, "MISSING");
        assert!(
            result.skipped_changes[0]
                .reason
                .contains("introduces a syntax error")
        );
        assert_eq!(tree(dir.path()), before);
    }
}

#[test]
fn a_file_that_was_already_broken_stays_editable() {
    let broken = "fn a() {\n    let = 1;\n}\n\nfn b() -> u32 {\n    2\n}\n";
    for ed in [editor(), standard_editor()] {
        let dir = repo(&[("src/broken.rs", broken)]);
        let ws = Workspace::open(dir.path()).unwrap();
        let result = ed
            .edit(
                &ws,
                &[entry(json!({"strategy": "search-replace", "path": "src/broken.rs", "search": "    2\n", "replace": "    // two\n    2\n"}))],
                "run",
                &Emit::none(),
            )
            .unwrap();
        assert_eq!(result.applied_count, 1);
        assert!(result.preview.validation.syntax_valid);
        let text = std::fs::read_to_string(dir.path().join("src/broken.rs")).unwrap();
        assert!(text.contains("// two"));
    }
}

/// Before the one rule, `Editor::standard()` compared errors with `nuvira_syntax::compare` and
/// an editor given only a checker (`editor()`: `with_checker`) with a rule of its own, so the
/// same edit got different verdicts.
#[test]
fn every_way_of_building_an_editor_gives_the_same_syntax_verdict() {
    // `(original, search, replace, introduces an error)`. The first moves an unclosed `{` down
    // a line (its message names the line), the second adds an error to a broken file, the
    // third keeps an old error while editing its line.
    let cases = [
        (
            "fn a() {\n    let x = 1;\n",
            "fn a",
            "// moved\nfn a",
            false,
        ),
        ("fn a() {\n    let = 1;\n}\n", "}\n", "}\nfn b( {}\n", true),
        ("fn a() {\n    let = 1;\n}\n", "let = 1", "let = 2", false),
    ];
    for (original, search, replace, introduces) in cases {
        let mut verdicts = Vec::new();
        for ed in [editor(), standard_editor()] {
            let dir = repo(&[("src/a.rs", original)]);
            let ws = Workspace::open(dir.path()).unwrap();
            let preview = ed.dry_run(
                &ws,
                &[entry(json!({"strategy": "search-replace", "path": "src/a.rs", "search": search, "replace": replace}))],
                &Emit::none(),
            );
            assert!(preview.errors.is_empty(), "{:?}", preview.errors);
            let lines: Vec<u32> = preview
                .validation
                .ast_issues
                .iter()
                .map(|d| d.line)
                .collect();
            verdicts.push((preview.validation.syntax_valid, lines));
        }
        assert_eq!(
            verdicts[0].0, !introduces,
            "{original:?} → {replace:?}: {verdicts:?}"
        );
        assert!(
            verdicts.iter().all(|v| *v == verdicts[0]),
            "{original:?} → {replace:?}: {verdicts:?}"
        );
    }
}

#[test]
fn secrets_in_added_lines_warn_by_default_and_block_when_asked() {
    let key = format!("AKIA{}", "IOSFODNN7EXAMPLE");
    let add = entry(
        json!({"strategy": "whole-file", "path": "config.py", "content": format!("KEY = \"{key}\"\n")}),
    );
    let dir = repo(&[]);
    let ws = Workspace::open(dir.path()).unwrap();

    let preview = editor().dry_run(&ws, std::slice::from_ref(&add), &Emit::none());
    assert!(preview.is_valid());
    let w = &preview.validation.security_warnings[0];
    assert_eq!(
        (w.rule.as_str(), w.line, w.severity),
        ("aws-access-key", 1, Severity::Warning)
    );
    assert!(
        !w.message.contains(&key),
        "a warning must never echo the secret"
    );

    let blocking = editor().with_options(EditOptions {
        block_on_secrets: true,
        format: false,
    });
    let err = blocking
        .edit(&ws, &[add], "run", &Emit::none())
        .unwrap_err();
    let EditFailure::Rejected(result) = err else {
        panic!("expected a rejection");
    };
    assert!(
        result.skipped_changes[0].reason.contains("aws access key")
            || result.skipped_changes[0].reason.contains("AWS access key")
    );
    assert!(!dir.path().join("config.py").exists());
}

#[test]
fn a_secret_that_was_already_there_does_not_warn_again() {
    let key = format!("ghp_{}", "a".repeat(36));
    let dir = repo(&[("env.sh", &format!("TOKEN={key}\nA=1\n"))]);
    let ws = Workspace::open(dir.path()).unwrap();
    let preview = editor().dry_run(
        &ws,
        &[entry(json!({"strategy": "search-replace", "path": "env.sh", "search": "A=1", "replace": "A=2"}))],
        &Emit::none(),
    );
    assert!(preview.validation.security_warnings.is_empty());
}

#[cfg(unix)]
#[test]
fn rename_and_delete_are_previewed_as_such_and_a_rename_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = repo(&[("bin/run.sh", "#!/bin/sh\necho hi\n"), ("old.txt", "x\n")]);
    std::fs::set_permissions(
        dir.path().join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let events = Recorder::default();
    let result = editor()
        .edit(
            &ws,
            &[
                entry(json!({"strategy": "rename-file", "path": "bin/run.sh", "to": "scripts/start.sh"})),
                entry(json!({"strategy": "delete-file", "path": "old.txt"})),
            ],
            "run",
            &Emit::to(&events, Some("edit")),
        )
        .unwrap();
    let kinds: Vec<_> = result
        .preview
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "scripts/start.sh",
                ChangeKind::Rename {
                    from: "bin/run.sh".into()
                }
            ),
            ("old.txt", ChangeKind::Delete),
        ]
    );
    assert!(!dir.path().join("bin/run.sh").exists());
    let mode = std::fs::metadata(dir.path().join("scripts/start.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    let written: Vec<_> = events
        .events()
        .iter()
        .filter_map(|(step, k)| match k {
            nuvira_api::EventKind::EditWritten { path, .. } => {
                assert_eq!(step.as_deref(), Some("edit"));
                Some(path.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(written, vec!["scripts/start.sh", "bin/run.sh", "old.txt"]);
}

#[test]
fn applied_batches_are_journaled_and_roll_back_byte_for_byte() {
    let dir = repo(&[("src/lib.rs", LIB), ("b.txt", "b\n")]);
    let before = tree(dir.path());
    let ws = Workspace::open(dir.path()).unwrap();
    editor()
        .edit(
            &ws,
            &[
                entry(json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "1", "replace": "2"})),
                entry(json!({"strategy": "whole-file", "path": "src/new.rs", "content": "fn n() {}\n"})),
                entry(json!({"strategy": "delete-file", "path": "b.txt"})),
            ],
            "run-j",
            &Emit::none(),
        )
        .unwrap();
    assert_ne!(tree(dir.path()), before);
    let done = Journal::new(&ws).rollback_run("run-j").unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(tree(dir.path()), before);
}

#[test]
fn paths_outside_the_workspace_and_into_state_folders_are_rejected_per_entry() {
    let dir = repo(&[("a.txt", "a\n")]);
    let ws = Workspace::open(dir.path()).unwrap();
    let preview = editor().dry_run(
        &ws,
        &[
            entry(json!({"strategy": "whole-file", "path": "../evil.txt", "content": "x"})),
            entry(json!({"strategy": "whole-file", "path": "/etc/passwd", "content": "x"})),
            entry(
                json!({"strategy": "whole-file", "path": ".git/hooks/pre-commit", "content": "x"}),
            ),
            entry(json!({"strategy": "whole-file", "path": ".nuvira/journal/x", "content": "x"})),
        ],
        &Emit::none(),
    );
    assert_eq!(preview.errors.len(), 4, "{:?}", preview.errors);
    assert!(preview.errors[0].message.contains("inside the workspace"));
    assert!(preview.errors[2].message.contains("off limits"));
    assert!(!dir.path().parent().unwrap().join("evil.txt").exists());
}

#[test]
fn binary_content_and_oversized_files_are_refused() {
    let dir = repo(&[("big.txt", &"x".repeat(64))]);
    let ws = Workspace::open(dir.path()).unwrap().with_max_file_size(32);
    let preview = editor().dry_run(
        &ws,
        &[
            entry(json!({"strategy": "whole-file", "path": "bin.dat", "content": "a\u{0}b"})),
            entry(json!({"strategy": "search-replace", "path": "big.txt", "search": "x", "replace": "y"})),
        ],
        &Emit::none(),
    );
    assert_eq!(preview.errors.len(), 2, "{:?}", preview.errors);
    assert!(preview.errors[0].message.contains("binary"));
    assert!(preview.errors[1].message.contains("limit"));
}

#[test]
fn rollback_run_restores_a_run_and_emits_rolled_back_per_step() {
    let dir = repo(&[("a.txt", "one\n")]);
    let before = tree(dir.path());
    let ws = Workspace::open(dir.path()).unwrap();
    let e = entry(
        json!({"strategy": "search-replace", "path": "a.txt", "search": "one", "replace": "two"}),
    );
    editor()
        .edit(
            &ws,
            &[e],
            "run-x",
            &Emit::to(&Recorder::default(), Some("step-1")),
        )
        .unwrap();
    let events = Recorder::default();
    let paths =
        nuvira_edit::rollback_run(&ws, "run-x", "run cancelled", &Emit::to(&events, None)).unwrap();
    assert_eq!(paths, vec!["a.txt"]);
    assert_eq!(tree(dir.path()), before);
    let got = events.events();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.as_deref(), Some("step-1"));
    assert!(
        matches!(&got[0].1, nuvira_api::EventKind::EditRolledBack { reason, .. } if reason == "run cancelled")
    );
}

#[test]
fn rollback_run_keeps_a_file_changed_during_the_run_and_says_so() {
    let dir = repo(&[("a.txt", "one\n"), ("b.txt", "bee\n")]);
    let ws = Workspace::open(dir.path()).unwrap();
    let edits = [
        entry(
            json!({"strategy": "search-replace", "path": "a.txt", "search": "one", "replace": "two"}),
        ),
        entry(
            json!({"strategy": "search-replace", "path": "b.txt", "search": "bee", "replace": "wasp"}),
        ),
    ];
    editor()
        .edit(
            &ws,
            &edits,
            "run-y",
            &Emit::to(&Recorder::default(), Some("s")),
        )
        .unwrap();
    // The user saves their own change to a.txt while the run goes on; then the run fails.
    std::fs::write(dir.path().join("a.txt"), "two, and mine\n").unwrap();
    let events = Recorder::default();
    let paths =
        nuvira_edit::rollback_run(&ws, "run-y", "run failed", &Emit::to(&events, None)).unwrap();
    assert_eq!(paths, vec!["b.txt"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "two, and mine\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "bee\n"
    );
    let got = events.events();
    assert!(
        matches!(&got[0].1, nuvira_api::EventKind::EditRolledBack { reason, .. }
            if reason.starts_with("run failed; not restored") && reason.ends_with(": a.txt")),
        "{:?}",
        got[0].1
    );
}

#[test]
fn format_runs_the_installed_formatter_before_the_atomic_write_and_a_missing_one_only_warns() {
    let dir = repo(&[
        ("src/lib.rs", "pub fn a() -> u8 {\n    1\n}\n"),
        ("tool.py", "X = 1\n"),
    ]);
    let ws = Workspace::open(dir.path()).unwrap();
    let formatting = editor().with_options(EditOptions {
        block_on_secrets: false,
        format: true,
    });
    let result = formatting
        .edit(
            &ws,
            &[
                entry(json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "    1\n", "replace": "    1\n}\npub fn   b( )->u8{2\n"})),
                entry(json!({"strategy": "search-replace", "path": "src/lib.rs", "search": "u8{2\n}", "replace": "u8{2}"})),
                entry(json!({"strategy": "search-replace", "path": "tool.py", "search": "X = 1", "replace": "X  =  2"})),
            ],
            "run-fmt",
            &Emit::none(),
        )
        .unwrap();
    let rust = std::fs::read_to_string(dir.path().join("src/lib.rs")).unwrap();
    let have = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if have("rustfmt") {
        assert_eq!(
            rust,
            "pub fn a() -> u8 {\n    1\n}\npub fn b() -> u8 {\n    2\n}\n"
        );
        let diff = &result.preview.changes[0].diff;
        assert!(
            diff.contains("+pub fn b() -> u8 {"),
            "the diff shows what was written: {diff}"
        );
    }
    if !have("ruff") {
        assert!(
            result
                .preview
                .warnings
                .iter()
                .any(|w| w.contains("tool.py") && w.contains("ruff")),
            "{:?}",
            result.preview.warnings
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("tool.py")).unwrap(),
            "X  =  2\n"
        );
    }
}

#[test]
fn the_standard_editor_applies_a_multi_file_patch_and_announces_each_file() {
    let dir = repo(&[("a.py", "A = 1\n"), ("b.py", "B = 1\n")]);
    let ws = Workspace::open(dir.path()).unwrap();
    let events = Recorder::default();
    let patch = "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-B = 1\n+B = (\n";
    let err = nuvira_edit::Editor::standard()
        .edit(
            &ws,
            &[entry(json!({"strategy": "unified-diff", "patch": patch}))],
            "run",
            &Emit::to(&events, Some("s")),
        )
        .unwrap_err();
    // b.py would gain a syntax error (an unclosed parenthesis): the whole patch is rejected.
    let EditFailure::Rejected(result) = err else {
        panic!("expected a rejection");
    };
    assert_eq!(result.skipped_changes[0].path, "b.py");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.py")).unwrap(),
        "A = 1\n"
    );
    let generating: Vec<_> = events
        .events()
        .iter()
        .filter_map(|(_, k)| match k {
            nuvira_api::EventKind::EditGenerating { path, language } => {
                Some((path.clone(), language.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        generating,
        vec![
            ("a.py".to_owned(), Some("python".to_owned())),
            ("b.py".to_owned(), Some("python".to_owned()))
        ]
    );
}
