//! Which syntax errors an edit introduced: the one rule, for every checker.

use crate::TreeSitterChecker;
use nuvira_api::{SyntaxChecker, SyntaxDiagnostic, SyntaxReport};

/// The syntax errors of an edited file, split into those the edit introduced and those that
/// were already there.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SyntaxChange {
    /// The language checked, or `None` when no check ran (no grammar covers the file).
    pub language: Option<String>,
    /// Errors in the new text that the original did not have.
    pub introduced: Vec<SyntaxDiagnostic>,
    /// Errors in the new text that were already in the original (located in the new text).
    pub preexisting: Vec<SyntaxDiagnostic>,
}

impl SyntaxChange {
    /// The introduced errors as a report (unchecked when no grammar covers the file).
    pub fn into_report(self) -> SyntaxReport {
        match self.language {
            Some(lang) => SyntaxReport::checked(lang, self.introduced),
            None => SyntaxReport::unchecked(),
        }
    }
}

/// Only the syntax errors `new` introduces compared with `original`, as a report on the new
/// text, checked with the tree-sitter grammars. A file that was already broken can still be
/// edited as long as the edit adds no error.
///
/// Shortcut: when the new text parses cleanly the original is not parsed at all.
///
/// ```
/// use nuvira_syntax::introduced_errors;
/// let broken = "fn a() {\n    let = 1;\n}\n";
/// // Moving the broken function down two lines introduces nothing...
/// assert!(introduced_errors("a.rs", broken, &format!("// x\n// y\n{broken}")).is_clean());
/// // ...but a second broken line does.
/// let worse = "fn a() {\n    let = 1;\n    let y = ;\n}\n";
/// let r = introduced_errors("a.rs", broken, worse);
/// assert_eq!(r.diagnostics.len(), 1);
/// assert_eq!(r.diagnostics[0].line, 3);
/// ```
pub fn introduced_errors(path: &str, original: &str, new: &str) -> SyntaxReport {
    compare(path, Some(original), new).into_report()
}

/// [`introduced_by`] with the tree-sitter checker ([`TreeSitterChecker`]).
pub fn compare(path: &str, original: Option<&str>, new: &str) -> SyntaxChange {
    introduced_by(&TreeSitterChecker, path, original, new)
}

/// Splits the errors `checker` finds in `new` into those the edit introduced and those that
/// were already in `original` (`None` means the file is new, so every error is introduced).
///
/// This is the one rule Nuvira uses for "which syntax errors did this edit introduce": the
/// edit module calls it for every checker (the tree-sitter one or a plugged-in one), so the
/// verdict does not depend on how the editor was built. `original` is checked only when `new`
/// has errors. See [`split_errors`] for how errors are matched.
///
/// ```
/// use nuvira_api::{SyntaxChecker, SyntaxDiagnostic, SyntaxReport};
///
/// /// Flags every line containing `!!`.
/// struct Bangs;
/// impl SyntaxChecker for Bangs {
///     fn language_for(&self, _: &str) -> Option<&'static str> { Some("bangs") }
///     fn check(&self, path: &str, text: &str) -> SyntaxReport {
///         let found = text.lines().enumerate().filter(|(_, l)| l.contains("!!"));
///         let diags = found.map(|(i, _)| {
///             let at = (i as u32 + 1, 1);
///             SyntaxDiagnostic::new(path, at, at, "ERROR", "unexpected `!!`")
///         });
///         SyntaxReport::checked("bangs", diags.collect())
///     }
/// }
/// // The old `a !!` moved down a line: not new. `b !!` is.
/// let c = nuvira_syntax::introduced_by(&Bangs, "f", Some("a !!\n"), "x\na !!\nb !!\n");
/// assert_eq!(c.preexisting.len(), 1);
/// assert_eq!(c.introduced.len(), 1);
/// assert_eq!(c.introduced[0].line, 3);
/// ```
pub fn introduced_by(
    checker: &dyn SyntaxChecker,
    path: &str,
    original: Option<&str>,
    new: &str,
) -> SyntaxChange {
    let after = checker.check(path, new);
    if !after.checked {
        return SyntaxChange::default();
    }
    let mut change = SyntaxChange {
        language: after
            .language
            .or_else(|| checker.language_for(path).map(str::to_owned)),
        ..SyntaxChange::default()
    };
    if after.diagnostics.is_empty() {
        return change;
    }
    let before = original
        .map(|o| checker.check(path, o))
        .filter(|r| r.checked)
        .map(|r| r.diagnostics)
        .unwrap_or_default();
    (change.introduced, change.preexisting) =
        split_errors(original.unwrap_or(""), &before, new, after.diagnostics);
    change
}

/// The matching behind [`introduced_by`]: splits `after` (the errors of `new`) into
/// `(introduced, preexisting)` given `before` (the errors of `original`).
///
/// Errors are matched without trusting line numbers, which shift with the edit. Two errors are
/// "the same error" when they have the same node kind and the same message once digits are
/// removed (messages such as "the `{` on line 3 is not closed" carry positions).
///
/// 1. **By context.** An error of the new text matches an unmatched error of the original that
///    is the same error and has the same (trimmed) text on its line. Each original error
///    matches at most once, so a second copy of an old error counts as new.
/// 2. **By count, inside the edit.** An error still unmatched whose lines overlap the edited
///    region (everything between the common prefix and the common suffix of the two texts)
///    matches an unmatched original error that is the same error and overlapped the edited
///    region too: the edit touched that line, so its text may differ, but the error is the
///    same one as before.
///
/// Everything else is introduced.
pub fn split_errors(
    original: &str,
    before: &[SyntaxDiagnostic],
    new: &str,
    after: Vec<SyntaxDiagnostic>,
) -> (Vec<SyntaxDiagnostic>, Vec<SyntaxDiagnostic>) {
    if before.is_empty() {
        return (after, Vec::new());
    }
    let (old_lines, new_lines) = (Lines::new(original), Lines::new(new));
    let (old_region, new_region) = edited_lines(original, new, &old_lines, &new_lines);

    let mut used = vec![false; before.len()];
    let mut matched = vec![false; after.len()];
    // 1. The same error, with the same line text.
    for (i, d) in after.iter().enumerate() {
        let ctx = new_lines.text(new, d.line);
        if let Some(j) = (0..before.len()).find(|&j| {
            !used[j] && same_error(&before[j], d) && old_lines.text(original, before[j].line) == ctx
        }) {
            used[j] = true;
            matched[i] = true;
        }
    }
    // 2. The same error, both overlapping the edited region.
    for (i, d) in after.iter().enumerate() {
        if matched[i] || !overlaps(d, new_region) {
            continue;
        }
        if let Some(j) = (0..before.len())
            .find(|&j| !used[j] && same_error(&before[j], d) && overlaps(&before[j], old_region))
        {
            used[j] = true;
            matched[i] = true;
        }
    }
    let (mut introduced, mut preexisting) = (Vec::new(), Vec::new());
    for (d, m) in after.into_iter().zip(matched) {
        if m {
            preexisting.push(d);
        } else {
            introduced.push(d);
        }
    }
    (introduced, preexisting)
}

fn same_error(a: &SyntaxDiagnostic, b: &SyntaxDiagnostic) -> bool {
    let digitless = |m: &str| {
        m.chars()
            .filter(|c| !c.is_ascii_digit())
            .collect::<String>()
    };
    a.node_kind == b.node_kind
        && (a.message == b.message || digitless(&a.message) == digitless(&b.message))
}

fn overlaps(d: &SyntaxDiagnostic, (first, last): (u32, u32)) -> bool {
    d.line <= last && d.end_line >= first
}

/// The 1-based inclusive line ranges of the edited region in the original and the new text.
fn edited_lines(old: &str, new: &str, old_l: &Lines, new_l: &Lines) -> ((u32, u32), (u32, u32)) {
    let prefix = old
        .bytes()
        .zip(new.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let max_suffix = old.len().min(new.len()) - prefix;
    let suffix = old
        .bytes()
        .rev()
        .zip(new.bytes().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();
    let region = |l: &Lines, len: usize| (l.line_of(prefix), l.line_of(len - suffix));
    (region(old_l, old.len()), region(new_l, new.len()))
}

/// Line start offsets, for line text and byte → line lookups.
struct Lines(Vec<usize>);

impl Lines {
    fn new(s: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(s.match_indices('\n').map(|(i, _)| i + 1));
        Lines(starts)
    }

    /// The 1-based line of a byte offset.
    fn line_of(&self, byte: usize) -> u32 {
        let idx = self.0.partition_point(|&s| s <= byte);
        u32::try_from(idx.max(1)).unwrap_or(u32::MAX)
    }

    /// The trimmed text of a 1-based line.
    fn text<'a>(&self, s: &'a str, line: u32) -> &'a str {
        let i = (line as usize).saturating_sub(1);
        let start = self.0.get(i).copied().unwrap_or(s.len());
        let end = self.0.get(i + 1).copied().unwrap_or(s.len());
        s.get(start..end).unwrap_or("").trim()
    }
}

#[cfg(all(test, feature = "rust"))]
mod tests {
    use super::*;

    #[test]
    fn lines_map_bytes_to_lines() {
        let l = Lines::new("ab\ncd\n");
        assert_eq!(l.line_of(0), 1);
        assert_eq!(l.line_of(2), 1);
        assert_eq!(l.line_of(3), 2);
        assert_eq!(l.line_of(6), 3);
        assert_eq!(l.text("ab\ncd\n", 2), "cd");
    }

    #[test]
    fn new_file_errors_are_all_introduced() {
        let c = compare("a.rs", None, "fn a( {}\n");
        assert!(!c.introduced.is_empty());
        assert!(c.preexisting.is_empty());
    }

    #[test]
    fn a_second_copy_of_an_old_error_is_new() {
        let old = "fn a() { let = 1; }\n";
        let new = "fn a() { let = 1; }\nfn a() { let = 1; }\n";
        let c = compare("a.rs", Some(old), new);
        assert_eq!(c.preexisting.len(), 1, "{c:?}");
        assert_eq!(c.introduced.len(), 1, "{c:?}");
        assert_eq!(c.introduced[0].line, 2);
    }

    #[test]
    fn editing_the_broken_line_without_fixing_it_is_not_new() {
        let old = "fn a() {\n    let = 1;\n}\n";
        let new = "fn a() {\n    let = 2;\n}\n";
        let c = compare("a.rs", Some(old), new);
        assert!(c.introduced.is_empty(), "{c:?}");
        assert_eq!(c.preexisting.len(), 1);
    }

    #[test]
    fn an_unclosed_bracket_moved_down_is_not_new() {
        // The message names the opener's line, which the edit shifts.
        let old = "fn a() {\n    let x = 1;\n";
        let new = "// added\nfn a() {\n    let x = 1;\n";
        let c = compare("a.rs", Some(old), new);
        assert!(c.introduced.is_empty(), "{c:?}");
        assert_eq!(c.preexisting.len(), 1, "{c:?}");
    }

    #[test]
    fn fixing_the_error_leaves_nothing() {
        let c = compare("a.rs", Some("fn a( {}\n"), "fn a() {}\n");
        assert!(c.introduced.is_empty() && c.preexisting.is_empty());
    }
}
