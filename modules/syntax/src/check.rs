//! Locating `ERROR` and `MISSING` nodes.

use crate::language::{Language, parse};
use nuvira_api::{SyntaxDiagnostic, SyntaxReport};
use tree_sitter::{Node, Tree};

/// The longest source excerpt quoted in an `unexpected ...` message, in characters.
const SNIPPET_CHARS: usize = 40;

/// Checks a file, picking the grammar from its path. Files no compiled-in grammar covers get
/// [`SyntaxReport::unchecked`] (a report with `checked: false`: no check ran).
///
/// ```
/// let report = nuvira_syntax::check("a.py", "def f(:\n    pass\n");
/// assert!(report.checked);
/// assert_eq!(report.diagnostics[0].line, 1);
/// assert!(!nuvira_syntax::check("notes.txt", "anything").checked);
/// ```
pub fn check(path: &str, source: &str) -> SyntaxReport {
    match Language::for_path(path) {
        Some(lang) => check_as(lang, path, source),
        None => SyntaxReport::unchecked(),
    }
}

/// Checks a text as a given language; `path` only labels the diagnostics. When the grammar is
/// not compiled in or cannot be loaded, the report is unchecked.
///
/// Beyond the grammar's `ERROR` and `MISSING` nodes: in JSX and TSX a closing tag must name
/// its opening tag (`<div></span>` is an error), and a Python file the grammar accepts is
/// compiled by `python3` when one is installed (an `IndentationError` is an error; see the
/// crate docs). Without `python3` the first Python report says so in its `note`.
pub fn check_as(lang: Language, path: &str, source: &str) -> SyntaxReport {
    let Ok(tree) = parse(lang, source) else {
        return SyntaxReport::unchecked();
    };
    let mut found = diagnostics(&tree, path, source);
    let mut note = None;
    match lang {
        // Only a file with a closing tag can have a mismatched one: no tree walk otherwise.
        Language::Tsx | Language::JavaScript if source.contains("</") => {
            let tags = crate::jsx::mismatched_tags(&tree, path, source);
            if !tags.is_empty() {
                found.extend(tags);
                found.sort_by_key(|d| (d.line, d.column));
            }
        }
        Language::Python if found.is_empty() => match crate::python::compile_check(path, source) {
            crate::python::Compiled::Error(d) => found.push(d),
            crate::python::Compiled::NoInterpreter(first) => note = first.map(str::to_owned),
            crate::python::Compiled::Clean => {}
        },
        _ => {}
    }
    let mut report = SyntaxReport::checked(lang.name(), found);
    report.note = note;
    report
}

/// The `ERROR` and `MISSING` nodes of a parsed tree, in source order.
///
/// Costs nothing beyond `root.has_error()` on a clean tree; otherwise it descends only into
/// children whose `has_error()` is true. An `ERROR` node is reported once (its inside is not
/// searched further).
pub fn diagnostics(tree: &Tree, path: &str, source: &str) -> Vec<SyntaxDiagnostic> {
    let root = tree.root_node();
    let mut out = Vec::new();
    if root.has_error() {
        collect(root, path, source, &mut out);
        let mut unclosed = crate::brackets::unclosed(root, path, source);
        unclosed.retain(|u| !out.iter().any(|d| u.superseded_by(d)));
        if !unclosed.is_empty() {
            // tree-sitter's recovery around an unclosed bracket is an `ERROR` node spanning from
            // the opener to far below, or a `MISSING` closer at the end of the file: both
            // describe the same problem worse than the bracket scan does.
            out.retain(|d| !unclosed.iter().any(|u| u.explains(d)));
            out.extend(unclosed.into_iter().map(|u| u.diagnostic));
            out.sort_by_key(|d| (d.line, d.column));
        }
    }
    out
}

fn collect(node: Node<'_>, path: &str, source: &str, out: &mut Vec<SyntaxDiagnostic>) {
    if node.is_error() {
        out.push(diagnostic(
            node,
            path,
            source,
            "ERROR",
            unexpected(node, source),
        ));
        return;
    }
    if node.is_missing() {
        let kind = node.kind();
        let message = if node.is_named() {
            format!("missing {kind}")
        } else {
            format!("missing `{kind}`")
        };
        out.push(diagnostic(node, path, source, "MISSING", message));
        return;
    }
    let mut cursor = node.walk();
    if !cursor.goto_first_child() {
        return;
    }
    loop {
        let child = cursor.node();
        if child.has_error() {
            collect(child, path, source, out);
        }
        if !cursor.goto_next_sibling() {
            break;
        }
    }
}

fn unexpected(node: Node<'_>, source: &str) -> String {
    let text = source.get(node.byte_range()).unwrap_or("");
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        None if node.start_byte() >= source.trim_end().len() => "unexpected end of input".into(),
        None => "unexpected text".into(),
        Some(line) => {
            let mut snippet: String = line.chars().take(SNIPPET_CHARS).collect();
            if snippet.len() < line.len() {
                snippet.push('…');
            }
            format!("unexpected `{snippet}`")
        }
    }
}

fn diagnostic(
    node: Node<'_>,
    path: &str,
    source: &str,
    kind: &str,
    message: String,
) -> SyntaxDiagnostic {
    let start = position(source, node.start_byte(), node.start_position());
    let end = position(source, node.end_byte(), node.end_position());
    SyntaxDiagnostic::new(path, start, end, kind, message)
}

/// A 1-based (line, character column) for a byte offset whose tree-sitter point is known.
pub(crate) fn position(source: &str, byte: usize, point: tree_sitter::Point) -> (u32, u32) {
    let line_start = byte.saturating_sub(point.column);
    let column = source
        .get(line_start..byte)
        .map_or(point.column, |s| s.chars().count());
    (saturate(point.row + 1), saturate(column + 1))
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(all(test, feature = "rust"))]
mod tests {
    use super::*;

    #[test]
    fn clean_rust_has_no_diagnostics() {
        let r = check("a.rs", "fn main() {\n    println!(\"hi\");\n}\n");
        assert!(r.checked);
        assert!(r.is_clean(), "{:?}", r.diagnostics);
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        // `é` is two bytes; the stray `@` is the 15th character of line 1.
        let r = check("a.rs", "fn f() { \"é\"; @ }\n");
        let d = &r.diagnostics[0];
        assert_eq!((d.line, d.column), (1, 15), "{d:?}");
    }

    #[cfg(feature = "typescript")]
    #[test]
    fn a_mismatched_tsx_tag_is_an_error() {
        let r = check(
            "a.tsx",
            "export const A = () => (\n  <div>\n    <p>x</p>\n  </span>\n);\n",
        );
        assert_eq!(r.diagnostics.len(), 1, "{:?}", r.diagnostics);
        let d = &r.diagnostics[0];
        assert_eq!((d.line, d.column), (4, 3), "{d:?}");
        assert_eq!(
            d.message,
            "mismatched JSX tag: `</span>` closes `<div>` (opened on line 2)"
        );
        let ok = check("a.tsx", "const A = () => <a.B><>x</></a.B>;\n");
        assert!(ok.is_clean(), "{:?}", ok.diagnostics);
    }

    #[cfg(feature = "javascript")]
    #[test]
    fn a_mismatched_jsx_tag_is_an_error() {
        let r = check("a.jsx", "const A = () => <div></span>;\n");
        assert_eq!(r.diagnostics.len(), 1, "{:?}", r.diagnostics);
        assert!(
            r.diagnostics[0]
                .message
                .contains("`</span>` closes `<div>`")
        );
    }

    #[cfg(feature = "python")]
    #[test]
    fn a_python_indentation_error_is_an_error_when_python3_is_installed() {
        let r = check("a.py", "def f():\n    x = 1\n      y = 2\n");
        if r.note.as_deref() == Some(crate::python::NO_PYTHON_NOTE) {
            return;
        }
        assert_eq!(r.diagnostics.len(), 1, "{:?}", r.diagnostics);
        assert_eq!(r.diagnostics[0].line, 3);
        assert!(r.diagnostics[0].message.starts_with("IndentationError"));
    }

    #[test]
    fn unknown_extension_is_unchecked() {
        let r = check("Makefile", "all:\n\techo");
        assert!(!r.checked);
        assert_eq!(r.language, None);
    }
}
