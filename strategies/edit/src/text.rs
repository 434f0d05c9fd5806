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
