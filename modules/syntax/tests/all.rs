//! Integration tests: real source files from published packages (tests/fixtures, see its
//! README) must pass unchanged; injected errors must be caught on the right line.

#![cfg(all(
    feature = "rust",
    feature = "typescript",
    feature = "python",
    feature = "javascript"
))]
#![allow(clippy::expect_used, reason = "tests fail loudly on missing fixtures")]
use nuvira_api::{SyntaxChecker, SyntaxDiagnostic};
use nuvira_syntax::{TreeSitterChecker, compare, introduced_errors};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("fixture exists")
}

fn show(ds: &[SyntaxDiagnostic]) -> String {
    ds.iter()
        .map(|d| {
            format!(
                "{}:{}:{} {} {}",
                d.path, d.line, d.column, d.node_kind, d.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines of `text` with line `i` (0-based) replaced by `with` (`None` deletes it).
fn replace_line(text: &str, i: usize, with: Option<&str>) -> String {
    let mut lines: Vec<&str> = text.lines().collect();
    match with {
        Some(w) => lines[i] = w,
        None => {
            lines.remove(i);
        }
    }
    lines.join("\n") + "\n"
}

/// The 0-based index of the first line satisfying `pred` on (line, next line, line after).
fn find_line(text: &str, pred: impl Fn(&str, &str, &str) -> bool) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len() - 2)
        .find(|&i| pred(lines[i], lines[i + 1], lines[i + 2]))
        .expect("a matching line in the fixture")
}

#[test]
fn every_fixture_parses_clean_with_the_right_language() {
    let expected = [
        ("rust_regex_automata_meta_regex.rs", "rust"),
        ("rust_serde_json_de.rs", "rust"),
        ("rust_tokio_mpsc_chan.rs", "rust"),
        ("ts_zod_v3_types.ts", "typescript"),
        ("ts_query_core_query.ts", "typescript"),
        ("tsx_react_query_QueryClientProvider.tsx", "tsx"),
        ("tsx_react_query_HydrationBoundary.tsx", "tsx"),
        ("js_zod_v4_core_checks.js", "javascript"),
        ("py_json_decoder.py", "python"),
    ];
    let checker = TreeSitterChecker::new();
    for (name, lang) in expected {
        let report = checker.check(name, &fixture(name));
        assert!(report.checked, "{name} was not checked");
        assert_eq!(report.language.as_deref(), Some(lang), "{name}");
        assert!(report.is_clean(), "{name}:\n{}", show(&report.diagnostics));
    }
}

#[test]
fn tsx_grammar_is_needed_for_jsx() {
    // The same JSX text is an error as plain TypeScript: the extension picks the grammar.
    let text = fixture("tsx_react_query_QueryClientProvider.tsx");
    assert!(!TreeSitterChecker::new().check("x.ts", &text).is_clean());
}

#[test]
fn deleted_closing_brace_is_reported_where_it_was() {
    for name in ["rust_tokio_mpsc_chan.rs", "rust_serde_json_de.rs"] {
        let text = fixture(name);
        // A method's closing brace followed by a blank line and the next method.
        let i = find_line(&text, |a, b, c| {
            a == "    }" && b.is_empty() && c.trim_start().starts_with("fn ")
        });
        let broken = replace_line(&text, i, None);
        let r = TreeSitterChecker::new().check(name, &broken);
        let d = r
            .diagnostics
            .iter()
            .find(|d| d.message.starts_with("missing `}`"))
            .unwrap_or_else(|| panic!("{name}: no missing brace in\n{}", show(&r.diagnostics)));
        assert_eq!(d.line as usize, i + 1, "{name}:\n{}", show(&r.diagnostics));
        assert_eq!(d.node_kind, "MISSING");
        assert_eq!(d.column, 5, "indented like the opener's line");
    }
}

#[test]
fn deleted_closing_brace_in_typescript_is_reported_where_it_was() {
    let name = "ts_query_core_query.ts";
    let text = fixture(name);
    let i = find_line(&text, |a, b, c| {
        a == "  }" && b.is_empty() && c.starts_with("  ") && c.ends_with('{')
    });
    let broken = replace_line(&text, i, None);
    let r = TreeSitterChecker::new().check(name, &broken);
    let d = r
        .diagnostics
        .iter()
        .find(|d| d.message.starts_with("missing `}`"))
        .unwrap_or_else(|| panic!("no missing brace in\n{}", show(&r.diagnostics)));
    assert_eq!(d.line as usize, i + 1, "{}", show(&r.diagnostics));
}

#[test]
fn stray_token_is_reported_on_its_line() {
    let cases = [
        (
            "rust_regex_automata_meta_regex.rs",
            "        let x = 1 $ 2;",
        ),
        ("ts_zod_v3_types.ts", "    const x = 1 2;"),
        ("tsx_react_query_HydrationBoundary.tsx", "  const x = 1 2;"),
        ("js_zod_v4_core_checks.js", "    const x = 1 2;"),
        ("py_json_decoder.py", "    x = = 2"),
    ];
    for (name, stray) in cases {
        let text = fixture(name);
        // Replace a statement line well inside the file.
        let start = text.lines().count() / 2;
        let i = start
            + text
                .lines()
                .skip(start)
                .position(|l| {
                    let t = l.trim_start();
                    let indent = l.len() - t.len();
                    indent == stray.len() - stray.trim_start().len()
                        && (t.starts_with("let ")
                            || t.starts_with("const ")
                            || t.starts_with("return "))
                        && (t.ends_with(';') || t.ends_with(')'))
                        || name.ends_with(".py") && indent == 4 && t.starts_with("return ")
                })
                .unwrap_or_else(|| panic!("{name}: no statement line"));
        let broken = replace_line(&text, i, Some(stray));
        let r = TreeSitterChecker::new().check(name, &broken);
        assert!(
            r.diagnostics.iter().any(|d| d.line as usize == i + 1),
            "{name}: expected an error on line {}:\n{}",
            i + 1,
            show(&r.diagnostics)
        );
    }
}

#[test]
fn unterminated_string_is_reported_on_its_line() {
    let cases = [
        ("ts_query_core_query.ts", "    const s = 'abc;"),
        ("py_json_decoder.py", "    s = 'abc"),
        ("rust_tokio_mpsc_chan.rs", "        let s = \"abc;"),
    ];
    for (name, bad) in cases {
        let text = fixture(name);
        let indent = bad.len() - bad.trim_start().len();
        let i = text
            .lines()
            .position(|l| {
                let t = l.trim_start();
                l.len() - t.len() == indent
                    && (t.starts_with("let ")
                        || t.starts_with("const ")
                        || t.starts_with("return "))
            })
            .unwrap_or_else(|| panic!("{name}: no statement line"));
        let broken = replace_line(&text, i, Some(bad));
        let r = TreeSitterChecker::new().check(name, &broken);
        assert!(
            r.diagnostics
                .first()
                .is_some_and(|d| d.line as usize == i + 1),
            "{name}: expected the first error on line {}:\n{}",
            i + 1,
            show(&r.diagnostics)
        );
    }
}

#[test]
fn editing_an_already_broken_real_file_introduces_nothing() {
    let name = "rust_tokio_mpsc_chan.rs";
    let text = fixture(name);
    let i = text
        .lines()
        .position(|l| l.trim_start().starts_with("let "))
        .expect("a let");
    let broken = replace_line(&text, i, Some("        let = ;"));
    assert!(!TreeSitterChecker::new().check(name, &broken).is_clean());
    // An unrelated edit above the error shifts its line.
    let edited = format!("// a new first line\n{broken}").replace("fn send(", "fn send_value(");
    let report = introduced_errors(name, &broken, &edited);
    assert!(report.checked);
    assert!(report.is_clean(), "{}", show(&report.diagnostics));
    let change = compare(name, Some(&broken), &edited);
    assert!(!change.preexisting.is_empty());
}

#[test]
fn a_new_error_in_a_broken_file_is_reported_alone() {
    let name = "ts_query_core_query.ts";
    let text = fixture(name);
    let broken = replace_line(&text, 10, Some("import { = from 'x'"));
    let j = broken.lines().count() - 5;
    let worse = replace_line(&broken, j, Some("const y = ;"));
    let r = introduced_errors(name, &broken, &worse);
    assert_eq!(r.diagnostics.len(), 1, "{}", show(&r.diagnostics));
    assert_eq!(r.diagnostics[0].line as usize, j + 1);
}

#[test]
fn files_without_a_grammar_pass_unchecked() {
    let checker = TreeSitterChecker::new();
    for path in ["README.md", "Cargo.toml", "Makefile", "x.go"] {
        let r = checker.check(path, "}}} not code {{{");
        assert!(!r.checked && r.language.is_none() && r.is_clean(), "{path}");
        assert_eq!(
            r.note.as_deref(),
            Some(nuvira_api::SyntaxReport::NO_CHECK_NOTE)
        );
        assert_eq!(checker.language_for(path), None);
        assert!(introduced_errors(path, "", "}}}").is_clean());
    }
}
