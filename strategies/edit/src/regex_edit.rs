//! `regex`: regular-expression replacement with capture references.

use crate::text::{is_crlf, line_list, line_of, quote, read_existing, with_ending};
use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};
use regex::{Regex, RegexBuilder};

/// `regex`: replaces matches of `pattern` with `replace`, where `$1` and `${name}` refer to
/// capture groups (`$$` is a literal `$`; write `${1}a` rather than `$1a`).
///
/// The pattern is compiled in multi-line mode (`^`/`$` match at line boundaries) with the
/// syntax of the `regex` crate, in CRLF mode: `$` matches before a `\r\n` as well as before a
/// `\n`, so `^line$` finds a line of a Windows file. In a CRLF file, the line endings of
/// `replace` become CRLF. Like `search-replace`, it must match exactly once unless
/// `all: true`; no match is an error. A reference to a group the pattern does not have is an
/// error rather than an empty string.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegexReplace;

impl EditStrategy for RegexReplace {
    fn name(&self) -> &str {
        "regex"
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = entry.require_path()?;
        let pattern = entry.require("pattern", &entry.pattern)?;
        let replace = entry.require("replace", &entry.replace)?;
        let err = |msg: String| EditError::new(Some(path.to_owned()), msg);
        let re = RegexBuilder::new(pattern)
            .multi_line(true)
            .crlf(true)
            .size_limit(1 << 22)
            .build()
            .map_err(|e| {
                err(format!(
                    "regex: compile `pattern`: {}; fix the expression (regex crate syntax, no look-around)",
                    last_line(&e.to_string())
                ))
            })?;
        check_references(&re, replace).map_err(err)?;
        let text = read_existing(files, entry, path)?;
        let replace = &with_ending(replace, is_crlf(&text));
        let starts: Vec<usize> = re.find_iter(&text).map(|m| m.start()).collect();
        let new = match starts.len() {
            0 => {
                return Err(err(format!(
                    "regex: `pattern` `{}` matches nothing; check it against the current text of the file",
                    quote(pattern, 60)
                )));
            }
            1 => re.replacen(&text, 1, replace).into_owned(),
            _ if entry.all => re.replace_all(&text, replace).into_owned(),
            n => {
                let lines: Vec<u32> = starts.iter().map(|&i| line_of(&text, i)).collect();
                return Err(err(format!(
                    "regex: `pattern` matches {n} times (lines {}); make it more specific, or set `all: true` to replace every match",
                    line_list(&lines)
                ))
                .at_line(lines[0]));
            }
        };
        files.write(path, new)
    }
}

fn last_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_owned()
}

/// Every `$n`, `${n}`, `$name`, `${name}` in `replace` must name a group of `re`.
fn check_references(re: &Regex, replace: &str) -> Result<(), String> {
    let names: Vec<&str> = re.capture_names().flatten().collect();
    let groups = re.captures_len();
    let bytes = replace.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'$') {
            i += 2;
            continue;
        }
        let rest = &replace[i + 1..];
        let (name, used) = if let Some(braced) = rest.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => return Err("regex: `replace` has an unclosed `${`; write `${name}` or `$$` for a literal `$`".into()),
            }
        } else {
            let len = rest
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            (&rest[..len], len)
        };
        i += 1 + used;
        if name.is_empty() {
            continue;
        }
        let ok = match name.parse::<usize>() {
            Ok(n) => n < groups,
            Err(_) => names.contains(&name),
        };
        if !ok {
            return Err(format!(
                "regex: `replace` refers to `${name}` but the pattern has {} group(s){}; use `$$` for a literal `$`",
                groups - 1,
                if names.is_empty() {
                    String::new()
                } else {
                    format!(" and the named groups {}", names.join(", "))
                }
            ));
        }
    }
    Ok(())
}
