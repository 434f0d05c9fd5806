//! A fuzz target over the three parsers that read files a repository can bring: plan files,
//! edits batches (the loader and `parse_entries`) and JSONL event files. Inputs up to a few KB,
//! with deep nesting, huge numbers and arbitrary bytes mixed in. What must hold: no panic, no
//! abort, and every case ends within [`PER_CASE`].
//!
//! `NUVIRA_FUZZ_CASES` sets the number of cases of each property (default 64, so `cargo test`
//! stays fast; `.ci/run` sets a larger budget).

use nuvira_edit::{EditStepConfig, Editor, parse_entries};
use nuvira_plan::{PlanFormat, parse_edits, parse_str};
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// The most one case may take (a debug build, on a loaded 2-core machine): a regression to
/// quadratic or exponential parsing takes far longer on these inputs.
const PER_CASE: Duration = Duration::from_secs(5);

fn cases() -> u32 {
    std::env::var("NUVIRA_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text shaped like the files: fragments of plans and edits, brackets nested deep, huge
/// numbers, quotes, control characters, all glued together.
fn hostile_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("goal: g\nsteps:\n  - id: a\n    module: report\n".to_owned()),
        Just("{\"steps\": [{\"id\": \"a\", \"module\": \"report\"}]}".to_owned()),
        Just("[[steps]]\nid = \"a\"\nmodule = \"report\"\n".to_owned()),
        Just(
            "edits:\n  - strategy: search-replace\n    path: a\n    search: x\n    replace: y\n"
                .to_owned()
        ),
        Just("timeout: 99999999999999999999999999s\n".to_owned()),
        Just("n: 1e999999\nm: -99999999999999999999999999999999999999\n".to_owned()),
        Just("a: &x [*x, *x]\nb: *x\n".to_owned()),
        (1usize..600).prop_map(|n| "[".repeat(n)),
        (1usize..300).prop_map(|n| "{a: ".repeat(n)),
        (1usize..300).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        (1usize..200).prop_map(|n| "9".repeat(n * 10)),
        "[\\PC\\s\"'#:\\[\\]{},\\-]{0,64}",
        any::<String>().prop_map(|s| s.chars().take(64).collect()),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| {
        let mut s = v.concat();
        s.truncate(boundary(&s, 4096));
        s
    })
}

/// The largest char boundary of `s` at or below `n`.
fn boundary(s: &str, n: usize) -> usize {
    (0..=n.min(s.len()))
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

fn timed<T>(what: &str, input: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    assert!(
        start.elapsed() < PER_CASE,
        "{what} took {:?} on {} bytes: {:?}",
        start.elapsed(),
        input.len(),
        &input[..boundary(input, 200)]
    );
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn plan_files_never_panic_and_end_quickly(text in hostile_text()) {
        for format in [PlanFormat::Yaml, PlanFormat::Json, PlanFormat::Toml] {
            let result = timed("parse_str", &text, || parse_str(&text, format, "fuzz"));
            if let Err(e) = result {
                // Every error names the file.
                prop_assert!(e.to_string().starts_with("fuzz"), "{e}");
            }
        }
    }

    #[test]
    fn edits_batches_never_panic_and_end_quickly(text in hostile_text()) {
        let editor = Editor::standard();
        for format in [PlanFormat::Yaml, PlanFormat::Json, PlanFormat::Toml] {
            timed("parse_edits", &text, || {
                if let Ok(loaded) = parse_edits::<serde_json::Value>(&text, format, "fuzz") {
                    if let Some(list) = loaded.config.get("edits").and_then(|v| v.as_array()) {
                        let _ = parse_entries(list, &editor);
                    }
                }
                let _ = parse_edits::<EditStepConfig>(&text, format, "fuzz");
            });
        }
    }

    #[test]
    fn event_files_never_panic_and_end_quickly(
        lines in proptest::collection::vec(
            prop_oneof![
                hostile_text(),
                Just(r#"{"type":"run:started","run_id":"r","ts":1}"#.to_owned()),
                (1usize..600).prop_map(|n| format!("{{\"type\":{}", "[".repeat(n))),
            ],
            0..8,
        ),
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut input = lines.join("\n").into_bytes();
        input.extend_from_slice(&bytes);
        let text = String::from_utf8_lossy(&input).into_owned();
        timed("read_jsonl", &text, || {
            let _ = nuvira_report::read_jsonl(&input[..], std::path::Path::new("fuzz.jsonl"));
            // Small caps too, so the cap paths are fuzzed as well.
            let reader = nuvira_report::EventReader::new(&input[..], "fuzz.jsonl").with_limits(64, 1024);
            for item in reader {
                if let Err(e) = item {
                    prop_assert!(e.to_string().contains("fuzz.jsonl"), "{e}");
                }
            }
            Ok(())
        })?;
    }
}
