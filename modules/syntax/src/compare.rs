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
    /// What the checker said about the check of the new text besides errors (e.g. that
    /// Python got the tree-sitter check only, as no `python3` is installed), for a warning.
    pub note: Option<String>,
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
        note: after.note,
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
/// Line numbers shift with an edit, so positions are compared through a line diff of the two
/// texts: every line the edit left alone maps to its new line number, and every run of lines
/// it changed (a hunk) maps to the run that replaced it. Two errors are "the same error" when
/// they have the same node kind, the same message once digits are removed (messages such as
/// "the `{` on line 3 is not closed" carry positions), **and** the same place:
///
/// 1. **Unchanged line.** The original error starts on a line the edit did not touch, and the
///    new one starts where that line is now.
/// 2. **Inside the edit.** The original error starts inside a hunk, and the new one starts
///    inside what replaced that hunk: the edit touched that line, so its text may differ, but
///    the error is the same one as before.
///
/// Each original error matches at most once, so a second copy of an old error counts as new,
/// and an edit that fixes one error and makes another of the same message elsewhere in the
/// file is caught: the new one is not where the old one was.
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
    let map = LineMap::new(original, new);
    let mut used = vec![false; before.len()];
    let mut matched = vec![false; after.len()];
    // 1. The same error, on the same unchanged line.
    for (i, d) in after.iter().enumerate() {
        if let Some(j) = (0..before.len()).find(|&j| {
            !used[j] && same_error(&before[j], d) && map.unchanged(before[j].line) == Some(d.line)
        }) {
            used[j] = true;
            matched[i] = true;
        }
    }
    // 2. The same error, inside the same hunk.
    for (i, d) in after.iter().enumerate() {
        if matched[i] {
            continue;
        }
        if let Some(j) = (0..before.len()).find(|&j| {
            !used[j] && same_error(&before[j], d) && map.same_hunk(before[j].line, d.line)
        }) {
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

/// Old line → new line, from a line diff (1-based lines; a line past the end is the end of
/// the file, which maps to the new end).
struct LineMap {
    /// For each old line (0-based): its new line (0-based) when the edit left it alone.
    equal: Vec<Option<usize>>,
    /// The changed runs: (old lines, new lines), 0-based half-open.
    hunks: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    old_len: usize,
    new_len: usize,
}

impl LineMap {
    fn new(old: &str, new: &str) -> Self {
        // imara-diff's Histogram diff: near linear even when every line changed (the Myers
        // search used before needed a deadline to stay usable on large rewrites).
        let input = imara_diff::InternedInput::new(old, new);
        let mut diff = imara_diff::Diff::compute(imara_diff::Algorithm::Histogram, &input);
        diff.postprocess_lines(&input);
        let hunks: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = diff
            .hunks()
            .map(|h| {
                (
                    h.before.start as usize..h.before.end as usize,
                    h.after.start as usize..h.after.end as usize,
                )
            })
            .collect();
        let old_len = old.lines().count();
        let new_len = new.lines().count();
        let mut equal = vec![None; old_len];
        let (mut o, mut n) = (0, 0);
        let keep = |equal: &mut Vec<Option<usize>>, from: usize, to: usize, n: &mut usize| {
            for line in from..to {
                if let Some(slot) = equal.get_mut(line) {
                    *slot = Some(*n);
                }
                *n += 1;
            }
        };
        for (ho, hn) in &hunks {
            keep(&mut equal, o, ho.start, &mut n);
            (o, n) = (ho.end, hn.end);
        }
        keep(&mut equal, o, old_len, &mut n);
        Self {
            equal,
            hunks,
            old_len,
            new_len,
        }
    }

    /// The new 1-based line of an old 1-based line the edit left alone.
    fn unchanged(&self, old_line: u32) -> Option<u32> {
        let i = (old_line as usize).checked_sub(1)?;
        if i >= self.old_len {
            // Past the last line: the end of the file, when the end was left alone.
            let tail_changed = self
                .hunks
                .last()
                .is_some_and(|(o, _)| o.end >= self.old_len);
            return (!tail_changed)
                .then(|| u32::try_from(self.new_len + (i - self.old_len) + 1).ok())
                .flatten();
        }
        self.equal[i].and_then(|n| u32::try_from(n + 1).ok())
    }

    /// Whether an old 1-based line lies in a hunk whose replacement holds the new 1-based
    /// line (a hunk that only deleted lines is replaced by the line after it; the end of
    /// the file counts as a line).
    fn same_hunk(&self, old_line: u32, new_line: u32) -> bool {
        let (Some(o), Some(n)) = (
            (old_line as usize).checked_sub(1),
            (new_line as usize).checked_sub(1),
        ) else {
            return false;
        };
        self.hunks.iter().any(|(ho, hn)| {
            let in_old = ho.contains(&o) || (ho.is_empty() && o == ho.start);
            let in_new = hn.contains(&n) || (hn.is_empty() && n == hn.start);
            // An error at the very end belongs to a hunk that reaches the end.
            let at_old_end = o >= self.old_len && ho.end >= self.old_len;
            let at_new_end = n >= self.new_len && hn.end >= self.new_len;
            (in_old || at_old_end) && (in_new || at_new_end)
        })
    }
}

#[cfg(all(test, feature = "rust"))]
mod tests {
    use super::*;

    #[test]
    fn lines_map_through_the_diff() {
        let m = LineMap::new("a\nb\nc\nd\n", "x\na\nB\nc\nd\n");
        assert_eq!(m.unchanged(1), Some(2));
        assert_eq!(m.unchanged(2), None);
        assert_eq!(m.unchanged(4), Some(5));
        assert_eq!(m.unchanged(5), Some(6), "the end of the file moves too");
        assert!(m.same_hunk(2, 3));
        assert!(!m.same_hunk(2, 4));
    }

    #[test]
    fn fixing_one_error_and_making_the_same_one_elsewhere_is_new() {
        let old = "fn a() {\n    let = 1;\n}\n\nfn b() {\n    let x = 2;\n}\n";
        let new = "fn a() {\n    let y = 1;\n}\n\nfn b() {\n    let = 2;\n}\n";
        let before = compare("a.rs", None, old).introduced;
        let after = compare("a.rs", None, new).introduced;
        assert_eq!(before.len(), 1, "{before:?}");
        assert_eq!(after.len(), 1, "{after:?}");
        assert!(
            same_error(&before[0], &after[0]),
            "the test needs the same message"
        );
        let c = compare("a.rs", Some(old), new);
        assert_eq!(c.introduced.len(), 1, "{c:?}");
        assert_eq!(c.introduced[0].line, 6);
        assert!(c.preexisting.is_empty(), "{c:?}");
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
