//! JSX tag pairs: the grammars accept `<div></span>` without an error, so closing tags are
//! compared with their opening tags here.

use crate::check::position;
use nuvira_api::SyntaxDiagnostic;
use tree_sitter::{Node, Tree};

/// A closing tag whose name differs from its element's opening tag, for every `jsx_element`
/// of the tree, in source order. Walks the whole tree (JSX and TSX files only).
pub(crate) fn mismatched_tags(tree: &Tree, path: &str, source: &str) -> Vec<SyntaxDiagnostic> {
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    loop {
        let node = cursor.node();
        if node.kind() == "jsx_element"
            && let Some(d) = mismatch(node, path, source)
        {
            out.push(d);
        }
        if cursor.goto_first_child() {
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return out;
            }
        }
    }
}

fn mismatch(element: Node<'_>, path: &str, source: &str) -> Option<SyntaxDiagnostic> {
    let open = element.child_by_field_name("open_tag")?;
    let close = element.child_by_field_name("close_tag")?;
    if close.is_missing() || close.has_error() || open.has_error() {
        return None;
    }
    let name = |tag: Node<'_>| {
        tag.child_by_field_name("name")
            .and_then(|n| source.get(n.byte_range()))
            .map(|t| t.split_whitespace().collect::<String>())
            .unwrap_or_default()
    };
    let (opened, closed) = (name(open), name(close));
    if opened == closed {
        return None;
    }
    let start = position(source, close.start_byte(), close.start_position());
    let end = position(source, close.end_byte(), close.end_position());
    let open_line = open.start_position().row + 1;
    Some(SyntaxDiagnostic::new(
        path,
        start,
        end,
        "ERROR",
        format!(
            "mismatched JSX tag: `</{closed}>` closes `<{opened}>` (opened on line {open_line})"
        ),
    ))
}
