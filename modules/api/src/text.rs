//! Rendering untrusted text (file names, test output, model output) for a terminal.
//!
//! A file name is chosen by whoever wrote the repository: `evil\x1b[31m\nname.rs` would, printed
//! raw, recolour the terminal and forge a line of output. Every human output of Nuvira (text
//! formats, progress lines, error messages) passes such text through [`escape_control`], which
//! leaves ordinary text, including non-ASCII letters, alone and writes each control character
//! as an escape: `\n`, `\r` and `\t` as those two-character escapes, and
//! every other control character (C0, DEL, C1 and the bidirectional overrides) as `\xNN` or
//! `\u{NNNN}`. Machine formats (JSON, SARIF, JUnit) keep the raw text: their encoders escape it.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: C0 and C1 controls, DEL, and the Unicode
/// bidirectional controls that can reorder what a line appears to say.
pub fn is_hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character escaped: `\n`, `\r`, `\t` as those two-character
/// escapes, ESC as `\x1b`, other C0 controls and DEL as `\xNN`, C1 controls and bidirectional
/// overrides as `\u{NNNN}`. Borrowed, without copying, when there is nothing to escape.
///
/// ```
/// use nuvira_api::text::escape_control;
/// assert_eq!(escape_control("src/lib.rs"), "src/lib.rs");
/// assert_eq!(escape_control("evil\x1b[31m\nname.rs"), "evil\\x1b[31m\\nname.rs");
/// ```
pub fn escape_control(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hostile) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_hostile(c) && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_hostile(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Like [`escape_control`], but keeps newlines (and tabs): for multi-line untrusted text such
/// as a test's output or an error message, where the lines are wanted and only the terminal
/// escapes must go.
pub fn escape_control_keep_lines(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| is_hostile(c) && c != '\n' && c != '\t')
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        for part in body.split_inclusive('\t') {
            let (p, tab) = match part.strip_suffix('\t') {
                Some(p) => (p, "\t"),
                None => (part, ""),
            };
            out.push_str(&escape_control(p));
            out.push_str(tab);
        }
        out.push_str(nl);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        assert!(matches!(escape_control("héllo/wörld.rs"), Cow::Borrowed(_)));
        assert_eq!(escape_control("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape_control("a\r\n\tb\x7f\0"), "a\\r\\n\\tb\\x7f\\x00");
        assert_eq!(escape_control("a\u{9b}b"), "a\\u{009b}b");
        assert_eq!(escape_control("x\u{202e}y"), "x\\u{202e}y");
        let out = escape_control("evil\x1b[31m\nname.rs");
        assert!(!out.contains('\x1b') && !out.contains('\n'), "{out}");
    }

    #[test]
    fn the_multi_line_variant_keeps_lines_and_tabs() {
        assert_eq!(
            escape_control_keep_lines("one\n\ttwo\x1b[0m\r\n"),
            "one\n\ttwo\\x1b[0m\\r\n"
        );
        assert!(matches!(
            escape_control_keep_lines("a\nb"),
            Cow::Borrowed(_)
        ));
    }
}
