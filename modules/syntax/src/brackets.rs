//! Locating unclosed brackets, the most common syntax error an edit introduces.
//!
//! tree-sitter recovers from a deleted `}` by wrapping everything from the opener to far below
//! in one `ERROR` node, or by inserting a `MISSING }` at the end of the file: neither points at
//! the line where the brace is missing. Here the bracket tokens of the tree (so brackets in
//! strings and comments do not count) are matched with a stack that also trusts indentation:
//! a closer that starts its line and is indented less than its opener's line closes an outer
//! block, so the inner opener is the unclosed one. The missing closer is then placed before the
//! first later line indented no deeper than the opener's line. Runs only on trees with errors.

use crate::check::position;
use nuvira_api::SyntaxDiagnostic;
use tree_sitter::Node;

/// An unclosed opener and where its closer is missing.
pub(crate) struct Unclosed {
    pub(crate) diagnostic: SyntaxDiagnostic,
    /// 1-based (line, column) of the opener.
    opener: (u32, u32),
    closer: &'static str,
}

impl Unclosed {
    /// Whether a tree-sitter diagnostic is a symptom of this unclosed bracket: it covers the
    /// place of the missing closer, it spans several lines from around the opener, or it is a `MISSING` closer of the same kind
    /// after the opener.
    /// Whether tree-sitter already placed a `MISSING` closer for this opener before the place
    /// found here: its guess is then the better one.
    pub(crate) fn superseded_by(&self, d: &SyntaxDiagnostic) -> bool {
        let at = (self.diagnostic.line, self.diagnostic.column);
        self.is_missing_closer(d) && (d.line, d.column) < at
    }

    fn is_missing_closer(&self, d: &SyntaxDiagnostic) -> bool {
        d.node_kind == "MISSING"
            && d.message == format!("missing `{}`", self.closer)
            && (d.line, d.column) >= self.opener
    }

    pub(crate) fn explains(&self, d: &SyntaxDiagnostic) -> bool {
        let covers = |(line, col): (u32, u32)| {
            (d.line, d.column) <= (line, col) && (line, col) <= (d.end_line, d.end_column)
        };
        let at = (self.diagnostic.line, self.diagnostic.column);
        covers(at) || (covers(self.opener) && d.end_line > d.line) || self.is_missing_closer(d)
    }
}

struct Open {
    closer: &'static str,
    byte: usize,
    pos: (u32, u32),
    indent: usize,
    line_start: usize,
}

fn closer_of(kind: &str) -> Option<&'static str> {
    match kind {
        "{" | "${" | "#{" => Some("}"),
        "(" => Some(")"),
        "[" | "#[" | "#![" => Some("]"),
        _ => None,
    }
}

fn is_closer(kind: &str) -> bool {
    matches!(kind, "}" | ")" | "]")
}

/// Indentation width of the line starting at `line_start` (a tab counts 4).
fn indent_at(source: &str, line_start: usize) -> usize {
    source
        .get(line_start..)
        .unwrap_or("")
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .map(|c| if c == '\t' { 4 } else { 1 })
        .sum()
}

/// The unclosed brackets of a tree, in source order.
pub(crate) fn unclosed(root: Node<'_>, path: &str, source: &str) -> Vec<Unclosed> {
    let mut stack: Vec<Open> = Vec::new();
    let mut lost: Vec<Open> = Vec::new();
    let mut cursor = root.walk();
    'walk: loop {
        let node = cursor.node();
        if node.child_count() == 0 && !node.is_missing() {
            let kind = node.kind();
            let byte = node.start_byte();
            let point = node.start_position();
            let line_start = byte.saturating_sub(point.column);
            if let Some(closer) = closer_of(kind) {
                stack.push(Open {
                    closer,
                    byte,
                    pos: position(source, byte, point),
                    indent: indent_at(source, line_start),
                    line_start,
                });
            } else if is_closer(kind) {
                let first_on_line = source
                    .get(line_start..byte)
                    .is_some_and(|s| s.trim().is_empty());
                let indent = indent_at(source, line_start);
                while let Some(top) = stack.last() {
                    let dedented = first_on_line && indent < top.indent;
                    if !dedented && top.closer == kind {
                        stack.pop();
                        break;
                    }
                    if dedented || stack.iter().any(|o| o.closer == kind) {
                        lost.extend(stack.pop());
                    } else {
                        break; // a stray closer: tree-sitter reports it
                    }
                }
            }
        }
        if cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    lost.extend(stack);
    lost.sort_by_key(|o| o.byte);
    lost.into_iter().map(|o| report(o, path, source)).collect()
}

fn report(open: Open, path: &str, source: &str) -> Unclosed {
    let (line, _) = open.pos;
    let opener_text = source
        .get(open.byte..)
        .and_then(|s| s.chars().next())
        .unwrap_or('{');
    // The first later non-blank line indented no deeper than the opener's line.
    let after = source
        .get(open.line_start..)
        .and_then(|s| s.find('\n'))
        .map(|i| open.line_start + i + 1);
    let mut offset = after;
    let mut target = None;
    let (mut n, mut last_content) = (line, line);
    while let Some(start) = offset {
        n += 1;
        let rest = source.get(start..).unwrap_or("");
        let text = rest.split('\n').next().unwrap_or("");
        if !text.trim().is_empty() {
            if indent_at(source, start) <= open.indent {
                // Right after the block's last line: where a deleted closing line was.
                let col = u32::try_from(open.indent + 1).unwrap_or(u32::MAX);
                target = Some((last_content + 1, col));
                break;
            }
            last_content = n;
        }
        offset = rest.find('\n').map(|i| start + i + 1);
    }
    let closer = open.closer;
    let (at, message) = match target {
        Some(at) => (
            at,
            format!("missing `{closer}` (the `{opener_text}` on line {line} is not closed)"),
        ),
        None => {
            let end = source.trim_end();
            let last_line = u32::try_from(end.lines().count().max(1)).unwrap_or(u32::MAX);
            let last_col = end.rsplit('\n').next().map_or(0, |l| l.chars().count());
            (
                (last_line, u32::try_from(last_col + 1).unwrap_or(u32::MAX)),
                format!(
                    "missing `{closer}` at the end of the file (the `{opener_text}` on line {line} is not closed)"
                ),
            )
        }
    };
    Unclosed {
        diagnostic: SyntaxDiagnostic::new(path, at, at, "MISSING", message),
        opener: open.pos,
        closer,
    }
}
