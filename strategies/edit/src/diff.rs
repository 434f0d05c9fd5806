//! `unified-diff`: an exact applier for `diff -u` / git patches.
//!
//! Written here rather than taken from a crate because we need multi-file git patches, file
//! creation and deletion through `/dev/null`, and errors that name the hunk and the file line
//! that did not match. Hunks may apply at another line than their header says (the file moved
//! under them) but never with fuzz: every context and removed line must match exactly
//! (a trailing `\r` is ignored, so CRLF files take LF patches).

use crate::text::quote;
use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};

/// `unified-diff`: applies `patch`; `path` names the file for a patch without `---`/`+++`
/// headers and must agree with a single-file patch that has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnifiedDiff;

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// The old path (`a/` stripped), or `None` for `/dev/null` (the file is created).
    pub old_path: Option<String>,
    /// The new path (`b/` stripped), or `None` for `/dev/null` (the file is deleted).
    pub new_path: Option<String>,
    /// Whether the patch had `---`/`+++` headers for this file.
    pub has_header: bool,
    /// The hunks, in order.
    pub hunks: Vec<Hunk>,
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// The header line, for messages.
    pub header: String,
    /// 1-based first old line (as written; 0 for a bare `@@` hunk).
    pub old_start: usize,
    /// Whether the header gave line numbers. A bare `@@` hunk (common in model output) is
    /// placed by its context alone, which must then occur exactly once.
    pub anchored: bool,
    /// Number of old lines claimed by the header.
    pub old_count: usize,
    /// Body lines: `(' ' | '-' | '+', text)`.
    pub lines: Vec<(char, String)>,
    /// The old side ends without a newline at end of file.
    pub old_no_eol: bool,
    /// The new side ends without a newline at end of file.
    pub new_no_eol: bool,
}

impl Hunk {
    fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != '+')
            .map(|(_, l)| l.as_str())
            .collect()
    }

    fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != '-')
            .map(|(_, l)| l.as_str())
            .collect()
    }
}

fn parse_path(raw: &str) -> String {
    let raw = raw.split('\t').next().unwrap_or(raw).trim_end();
    raw.strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .unwrap_or(raw)
        .to_owned()
}

fn parse_range(s: &str) -> Option<(usize, usize)> {
    match s.split_once(',') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => Some((s.parse().ok()?, 1)),
    }
}

fn parse_header(line: &str) -> Option<(usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let (os, oc) = parse_range(old)?;
    let (_, nc) = parse_range(new)?;
    Some((os, oc, nc))
}

/// Parses a patch into per-file parts.
///
/// Header counts are checked loosely: the body runs to the next hunk or file header, and
/// trailing empty lines beyond the counts are dropped (models often add them).
///
/// # Errors
/// A message naming the patch line that could not be read.
pub fn parse_patch(patch: &str) -> Result<Vec<FilePatch>, String> {
    let lines: Vec<&str> = patch
        .lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut out: Vec<FilePatch> = Vec::new();
    let mut i = 0;
    let is_file_header = |i: usize| {
        lines[i].starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))
    };
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let (a, b) = rest.split_once(' ').unwrap_or((rest, rest));
            out.push(FilePatch {
                old_path: Some(parse_path(a.strip_prefix("a/").unwrap_or(a))),
                new_path: Some(parse_path(b.strip_prefix("b/").unwrap_or(b))),
                has_header: true,
                hunks: Vec::new(),
            });
            i += 1;
        } else if is_file_header(i) {
            let old = parse_path(&line[4..]);
            let new = parse_path(&lines[i + 1][4..]);
            let strip = (old.starts_with("a/") || old == "/dev/null")
                && (new.starts_with("b/") || new == "/dev/null");
            let clean = |p: String, prefix: &str| -> Option<String> {
                if p == "/dev/null" {
                    None
                } else if strip {
                    Some(p.strip_prefix(prefix).map(str::to_owned).unwrap_or(p))
                } else {
                    Some(p)
                }
            };
            let (old_path, new_path) = (clean(old, "a/"), clean(new, "b/"));
            match out.last_mut() {
                Some(f) if f.hunks.is_empty() && f.has_header => {
                    f.old_path = old_path;
                    f.new_path = new_path;
                }
                _ => out.push(FilePatch {
                    old_path,
                    new_path,
                    has_header: true,
                    hunks: Vec::new(),
                }),
            }
            i += 2;
        } else if line.starts_with("@@") {
            let anchored = line.starts_with("@@ -");
            let (old_start, old_count, new_count) = if anchored {
                parse_header(line).ok_or_else(|| {
                    format!(
                        "read patch line {}: `{}` is not a hunk header like `@@ -12,7 +12,8 @@`",
                        i + 1,
                        quote(line, 60)
                    )
                })?
            } else {
                (0, 0, 0)
            };
            let mut hunk = Hunk {
                header: line.to_owned(),
                old_start,
                anchored,
                old_count,
                lines: Vec::new(),
                old_no_eol: false,
                new_no_eol: false,
            };
            i += 1;
            while i < lines.len() {
                let l = lines[i];
                // A removed `-- x` line reads `--- x`: only a hunk whose counts are used up
                // can be followed by a file header.
                let counts_done = !anchored
                    || (hunk.old_lines().len() >= old_count && hunk.new_lines().len() >= new_count);
                if l.starts_with("@@")
                    || l.starts_with("diff --git ")
                    || (counts_done && is_file_header(i))
                {
                    break;
                }
                if l.starts_with('\\') {
                    // "\ No newline at end of file" for the line before.
                    match hunk.lines.last() {
                        Some(('+', _)) => hunk.new_no_eol = true,
                        Some(('-', _)) => hunk.old_no_eol = true,
                        _ => {
                            hunk.old_no_eol = true;
                            hunk.new_no_eol = true;
                        }
                    }
                } else if l.is_empty() {
                    hunk.lines.push((' ', String::new()));
                } else {
                    let kind = l.chars().next().unwrap_or(' ');
                    if !matches!(kind, ' ' | '-' | '+') {
                        return Err(format!(
                            "read patch line {}: `{}` starts with neither ` `, `-` nor `+` inside hunk `{}`; prefix context lines with a space",
                            i + 1,
                            quote(l, 60),
                            hunk.header
                        ));
                    }
                    hunk.lines.push((kind, l[1..].to_owned()));
                }
                i += 1;
            }
            // Drop trailing blank "context" beyond what the header claims.
            while hunk
                .lines
                .last()
                .is_some_and(|(k, l)| *k == ' ' && l.is_empty())
                && (!anchored
                    || (hunk.old_lines().len() > hunk.old_count
                        && hunk.new_lines().len() > new_count))
            {
                hunk.lines.pop();
            }
            match out.last_mut() {
                Some(f) => f.hunks.push(hunk),
                None => out.push(FilePatch {
                    old_path: None,
                    new_path: None,
                    has_header: false,
                    hunks: vec![hunk],
                }),
            }
        } else {
            i += 1; // preamble, `index`, `new file mode`, ...
        }
    }
    Ok(out)
}

fn same_line(a: &str, b: &str) -> bool {
    a.strip_suffix('\r').unwrap_or(a) == b.strip_suffix('\r').unwrap_or(b)
}

/// Applies a file's hunks to its text; `None` for a file that does not exist yet.
fn apply_hunks(path: &str, text: &str, hunks: &[Hunk]) -> Result<String, EditError> {
    let crlf = text.contains("\r\n");
    let mut file: Vec<&str> = text.split('\n').collect();
    let mut eol = text.ends_with('\n') || text.is_empty();
    if eol || text.is_empty() {
        file.pop();
    }
    let mut out: Vec<String> = Vec::with_capacity(file.len() + 16);
    let mut pos = 0;
    for hunk in hunks {
        let old = hunk.old_lines();
        let expected = if hunk.old_count == 0 {
            hunk.old_start
        } else {
            hunk.old_start.saturating_sub(1)
        };
        let fits = |p: usize| {
            p + old.len() <= file.len() && old.iter().zip(&file[p..]).all(|(a, b)| same_line(a, b))
        };
        let last_start = file.len().saturating_sub(old.len());
        let found = if !hunk.anchored {
            let places: Vec<usize> = (pos..=last_start).filter(|&p| fits(p)).collect();
            match places.as_slice() {
                [one] => Some(*one),
                [] => return Err(unplaced(path, hunk, &old)),
                many => {
                    let lines: Vec<u32> = many
                        .iter()
                        .map(|p| u32::try_from(p + 1).unwrap_or(u32::MAX))
                        .collect();
                    return Err(EditError::new(
                        Some(path.to_owned()),
                        format!(
                            "apply hunk `{}`: it has no line numbers and its context matches {} places (lines {}); add context lines or a `@@ -a,b +c,d @@` header",
                            hunk.header,
                            many.len(),
                            crate::text::line_list(&lines)
                        ),
                    )
                    .at_line(lines[0]));
                }
            }
        } else if old.is_empty() {
            Some(expected.clamp(pos, file.len()))
        } else {
            (0..=file.len())
                .flat_map(|d| {
                    [
                        expected.checked_add(d),
                        expected.checked_sub(d).filter(|_| d > 0),
                    ]
                })
                .flatten()
                .filter(|&p| p >= pos && p <= last_start)
                .find(|&p| fits(p))
        };
        let Some(at) = found else {
            return Err(mismatch(path, hunk, &file, &old, expected.max(pos)));
        };
        out.extend(file[pos..at].iter().map(|s| (*s).to_owned()));
        for l in hunk.new_lines() {
            if crlf && !l.ends_with('\r') {
                out.push(format!("{l}\r"));
            } else {
                out.push(l.to_owned());
            }
        }
        pos = at + old.len();
        if pos == file.len() && (hunk.new_no_eol || hunk.old_no_eol) {
            eol = !hunk.new_no_eol;
        }
    }
    out.extend(file[pos..].iter().map(|s| (*s).to_owned()));
    let mut result = out.join("\n");
    if eol && !out.is_empty() {
        result.push('\n');
    }
    Ok(result)
}

fn unplaced(path: &str, hunk: &Hunk, old: &[&str]) -> EditError {
    let first = old
        .iter()
        .find(|l| !l.trim().is_empty())
        .copied()
        .unwrap_or("");
    EditError::new(
        Some(path.to_owned()),
        format!(
            "apply hunk `{}`: its context and removed lines do not occur in the file (no fuzz is allowed; the first one is `{}`); regenerate the patch against the current file",
            hunk.header,
            quote(first, 80)
        ),
    )
}

fn mismatch(path: &str, hunk: &Hunk, file: &[&str], old: &[&str], at: usize) -> EditError {
    let err = |msg: String| EditError::new(Some(path.to_owned()), msg);
    if at >= file.len() {
        return err(format!(
            "apply hunk `{}`: its context was not found and the file has only {} lines; regenerate the patch against the current file",
            hunk.header,
            file.len()
        ));
    }
    let k = old
        .iter()
        .zip(&file[at..])
        .position(|(a, b)| !same_line(a, b))
        .unwrap_or(file.len() - at);
    let line = u32::try_from(at + k + 1).unwrap_or(u32::MAX);
    let found = file.get(at + k).map_or("<end of file>".to_owned(), |l| {
        format!("`{}`", quote(l, 80))
    });
    let wanted = old.get(k).map_or(String::new(), |l| quote(l, 80));
    err(format!(
        "apply hunk `{}`: its context does not match the file anywhere (no fuzz is allowed); at line {line} the patch expects `{wanted}` but the file has {found}; regenerate the patch against the current file",
        hunk.header
    ))
    .at_line(line)
    .with_candidate(file.get(at + k).copied().unwrap_or("").to_owned())
}

impl UnifiedDiff {
    fn files(entry: &EditEntry) -> Result<Vec<FilePatch>, EditError> {
        let patch = entry.require("patch", &entry.patch)?;
        let mut parts = parse_patch(patch)
            .map_err(|m| EditError::new(entry.path.clone(), format!("unified-diff: {m}")))?;
        if parts.is_empty()
            || parts
                .iter()
                .all(|p| p.hunks.is_empty() && p.old_path == p.new_path)
        {
            return Err(EditError::new(
                entry.path.clone(),
                "unified-diff: the patch has no hunks; give `diff -u` output with `@@ -a,b +c,d @@` hunks",
            ));
        }
        for part in &mut parts {
            if !part.has_header {
                let path = entry.path.clone().ok_or_else(|| {
                    EditError::new(
                        None,
                        "unified-diff: the patch has no `--- a/…` / `+++ b/…` header; add one or set `path`",
                    )
                })?;
                part.old_path = Some(path.clone());
                part.new_path = Some(path);
            }
        }
        if let (Some(path), [one]) = (&entry.path, parts.as_slice()) {
            let named = one.new_path.as_ref().or(one.old_path.as_ref());
            if named.is_some_and(|n| n != path) {
                return Err(EditError::new(
                    Some(path.clone()),
                    format!(
                        "unified-diff: the patch is for `{}` but the entry's `path` is `{path}`; make them agree or drop `path`",
                        named.map_or("", String::as_str)
                    ),
                ));
            }
        }
        Ok(parts)
    }
}

impl EditStrategy for UnifiedDiff {
    fn name(&self) -> &str {
        "unified-diff"
    }

    fn paths(&self, entry: &EditEntry) -> Vec<String> {
        match Self::files(entry) {
            Ok(parts) => {
                let mut v: Vec<String> = parts
                    .into_iter()
                    .flat_map(|p| [p.old_path, p.new_path])
                    .flatten()
                    .collect();
                v.dedup();
                v
            }
            Err(_) => entry.path.iter().cloned().collect(),
        }
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        for part in Self::files(entry)? {
            match (&part.old_path, &part.new_path) {
                (None, Some(new)) => {
                    if files.read(new)?.is_some() {
                        return Err(EditError::new(
                            Some(new.clone()),
                            "unified-diff: the patch creates this file (from /dev/null) but it already exists; patch it instead or delete it first",
                        ));
                    }
                    let text = apply_hunks(new, "", &part.hunks)?;
                    files.write(new, text)?;
                }
                (Some(old), None) => {
                    let text = existing(files, old)?;
                    let rest = apply_hunks(old, &text, &part.hunks)?;
                    if !rest.trim().is_empty() {
                        return Err(EditError::new(
                            Some(old.clone()),
                            "unified-diff: the patch deletes this file (to /dev/null) but does not remove all of its lines; regenerate the patch against the current file",
                        ));
                    }
                    files.delete(old)?;
                }
                (Some(old), Some(new)) => {
                    let text = existing(files, old)?;
                    let patched = apply_hunks(old, &text, &part.hunks)?;
                    if old != new {
                        files.rename(old, new)?;
                    }
                    if patched != text || old == new {
                        files.write(new, patched)?;
                    }
                }
                (None, None) => {}
            }
        }
        Ok(())
    }
}

fn existing(files: &mut dyn FileView, path: &str) -> Result<String, EditError> {
    files.read(path)?.ok_or_else(|| {
        EditError::new(
            Some(path.to_owned()),
            "unified-diff: the patch changes this file but it does not exist; check the path, or use `--- /dev/null` to create it",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_git_multi_file_patch() {
        let p = "diff --git a/x.rs b/x.rs\nindex 1..2 100644\n--- a/x.rs\n+++ b/x.rs\n@@ -1,2 +1,2 @@\n a\n-b\n+c\ndiff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+hi\n";
        let parts = parse_patch(p).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].old_path.as_deref(), Some("x.rs"));
        assert_eq!(parts[1].old_path, None);
        assert_eq!(parts[1].new_path.as_deref(), Some("n.txt"));
        assert_eq!(apply_hunks("n.txt", "", &parts[1].hunks).unwrap(), "hi\n");
    }

    #[test]
    fn hunk_moved_by_an_offset_still_applies_exactly() {
        let parts = parse_patch("@@ -1,2 +1,2 @@\n a\n-b\n+c\n").unwrap();
        assert_eq!(
            apply_hunks("f", "x\ny\na\nb\n", &parts[0].hunks).unwrap(),
            "x\ny\na\nc\n"
        );
    }

    #[test]
    fn no_newline_at_end_of_file_markers() {
        let parts = parse_patch("@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n").unwrap();
        assert_eq!(apply_hunks("f", "a", &parts[0].hunks).unwrap(), "b\n");
        let parts = parse_patch("@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n").unwrap();
        assert_eq!(apply_hunks("f", "a\n", &parts[0].hunks).unwrap(), "b");
    }

    #[test]
    fn crlf_files_take_lf_patches() {
        let parts = parse_patch("@@ -1,2 +1,2 @@\n a\n-b\n+c\n").unwrap();
        assert_eq!(
            apply_hunks("f", "a\r\nb\r\n", &parts[0].hunks).unwrap(),
            "a\r\nc\r\n"
        );
    }
}
