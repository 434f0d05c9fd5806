//! Loading never panics, whatever the text, and every line it reports lies inside the file.

use nuvira_plan::{PlanFormat, parse_str};
use proptest::prelude::*;

const EXAMPLES: [(&str, PlanFormat); 3] = [
    (
        include_str!("../../../examples/plans/pipeline.yaml"),
        PlanFormat::Yaml,
    ),
    (
        include_str!("../../../examples/plans/pipeline.json"),
        PlanFormat::Json,
    ),
    (
        include_str!("../../../examples/plans/pipeline.toml"),
        PlanFormat::Toml,
    ),
];

/// Loads `text` and, when it parses, looks up every line the loader can report; each must be
/// a line of the file.
fn check(text: &str, format: PlanFormat) -> Result<(), TestCaseError> {
    let lines = text.lines().count().max(1) as u32 + 1;
    match parse_str(text, format, "p") {
        Ok(loaded) => {
            for i in 0..loaded.plan.steps.len() {
                if let Some(l) = loaded.line_of_step_index(i) {
                    prop_assert!(l >= 1 && l <= lines, "step {i} at line {l} of {lines}");
                }
            }
            for key in ["goal", "steps", "outputs"] {
                if let Some(l) = loaded.line_of_key(key) {
                    prop_assert!(l >= 1 && l <= lines);
                }
            }
            for id in loaded.plan.outputs.clone().unwrap_or_default() {
                if let Some(l) = loaded.line_of_output(&id) {
                    prop_assert!(l >= 1 && l <= lines);
                }
            }
        }
        Err(e) => {
            for err in e.all() {
                let shown = err.to_string();
                prop_assert!(!shown.contains("panicked"), "{shown}");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}", which in 0usize..3) {
        check(&text, EXAMPLES[which].1)?;
    }

    #[test]
    fn example_plans_with_random_damage_never_panic(
        which in 0usize..3,
        cuts in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..8, "[\\[\\]{}:,\"'#\\- \\n\\tx]{0,3}"), 1..5),
    ) {
        let (source, format) = EXAMPLES[which];
        let mut text = source.to_owned();
        for (at, len, insert) in cuts {
            if text.is_empty() {
                break;
            }
            let mut start = at.index(text.len());
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + len).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.replace_range(start..end, &insert);
        }
        check(&text, format)?;
    }
}
