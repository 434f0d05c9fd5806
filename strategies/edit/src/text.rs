//! Small text helpers shared by the strategies.

use nuvira_api::{EditEntry, EditError, FileView};

/// The 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, byte: usize) -> u32 {
    let n = text
        .get(..byte)
        .map_or(0, |s| s.bytes().filter(|b| *b == b'\n').count());
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

/// Reads a file that must exist.
pub(crate) fn read_existing(
    files: &mut dyn FileView,
    entry: &EditEntry,
    path: &str,
) -> Result<String, EditError> {
    files.read(path)?.ok_or_else(|| {
        EditError::new(
            Some(path.to_owned()),
            format!(
                "apply `{}`: the file does not exist; check the path, or create it with `whole-file`",
                entry.strategy
            ),
        )
    })
}

/// A short, one-line quote of a text for messages.
pub(crate) fn quote(text: &str, max: usize) -> String {
    let one_line = text.trim().replace('\n', "⏎");
    let mut q: String = one_line.chars().take(max).collect();
    if q.len() < one_line.len() {
        q.push('…');
    }
    q
}

/// "lines 3, 9 and 14" style list (at most 10 shown).
pub(crate) fn line_list(lines: &[u32]) -> String {
    let shown: Vec<String> = lines.iter().take(10).map(u32::to_string).collect();
    let more = lines.len().saturating_sub(10);
    let mut s = shown.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// Whether a file's lines end in CRLF: more `\r\n` than bare `\n` endings. Text a strategy
/// inserts into such a file gets CRLF endings ([`with_ending`]), so an edit never leaves a
/// Windows file with mixed endings.
pub(crate) fn is_crlf(text: &str) -> bool {
    let lf = text.bytes().filter(|b| *b == b'\n').count();
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf >= lf - crlf
}

/// `s` with every line ending made CRLF when `crlf` (a `\r\n` already there stays one),
/// unchanged otherwise.
pub(crate) fn with_ending(s: &str, crlf: bool) -> String {
    if !crlf || !s.contains('\n') {
        return s.to_owned();
    }
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_files_are_those_where_crlf_endings_are_the_most() {
        assert!(is_crlf("a\r\nb\r\n"));
        assert!(is_crlf("a\r\nb\r\nc\n"));
        assert!(!is_crlf("a\nb\nc\r\n"));
        assert!(!is_crlf("a\nb\n"));
        assert!(!is_crlf("no newline"));
    }

    #[test]
    fn inserted_text_gets_the_file_ending_without_doubling_cr() {
        assert_eq!(with_ending("a\nb\r\nc", true), "a\r\nb\r\nc");
        assert_eq!(with_ending("a\nb", false), "a\nb");
    }
}
