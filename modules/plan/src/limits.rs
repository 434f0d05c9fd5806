//! Bounds on untrusted plan and edits files: their size and their nesting depth.
//!
//! A plan or edits file may come with a checkout, so it is data from whoever wrote the
//! repository. Two shapes made the loaders misbehave: an unbounded file (`/dev/zero`, a symlink
//! to it, a multi-gigabyte file) was read whole before anything failed, and deeply nested flow
//! sequences (`[[[[...`) take the YAML parser quadratic time. Files are therefore read through
//! [`std::io::Read::take`] with a cap ([`DEFAULT_MAX_INPUT_BYTES`], or
//! [`MAX_INPUT_BYTES_ENV`]), and the text's nesting depth is measured by a cheap scan
//! ([`check_depth`]) before any parser sees it.

use crate::file::PlanFormat;
use crate::index::Pos;

/// The largest plan or edits file read, in bytes (64 MiB), unless [`MAX_INPUT_BYTES_ENV`] says
/// otherwise.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// The environment variable that sets the largest plan or edits file read, in bytes.
pub const MAX_INPUT_BYTES_ENV: &str = "NUVIRA_MAX_INPUT_BYTES";

/// The deepest nesting of `[`/`{` (and, in TOML, of inline arrays and tables) accepted in a
/// plan or edits file. Real plans nest four or five levels deep.
pub const MAX_NESTING_DEPTH: usize = 128;

/// The input cap in force: [`MAX_INPUT_BYTES_ENV`] when it is set to a positive number of bytes,
/// else [`DEFAULT_MAX_INPUT_BYTES`].
///
/// # Errors
/// A message naming the variable when it is set but not a positive whole number.
pub fn max_input_bytes() -> Result<u64, String> {
    match std::env::var(MAX_INPUT_BYTES_ENV) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "{MAX_INPUT_BYTES_ENV}={v:?} is not a positive number of bytes: set it to e.g. 134217728 or unset it"
            )),
        },
        _ => Ok(DEFAULT_MAX_INPUT_BYTES),
    }
}

/// A byte count for messages: `64 MiB` when it is a whole number of MiB, else bytes.
pub(crate) fn human_bytes(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n % MIB == 0 {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

/// Where the nesting of `source` first goes deeper than `limit`, if it does.
///
/// Counts `[` and `{` outside quoted strings and comments (`#` to the end of the line for YAML
/// and TOML; JSON has none); the position is the 1-based line and character column of the
/// bracket that crossed the limit. One pass, no allocation: cheap enough to run before every
/// parse. The scan is deliberately simple (YAML block scalars and plain scalars containing
/// quotes or brackets may be miscounted); it only has to be right about nesting that a real
/// plan never reaches.
pub fn check_depth(source: &str, format: PlanFormat, limit: usize) -> Option<(u32, u32)> {
    let comments = format != PlanFormat::Json;
    let mut depth = 0usize;
    let (mut line, mut column) = (1u32, 0u32);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut in_comment = false;
    // `#` starts a YAML comment only at the start or after whitespace.
    let mut prev_space = true;
    for c in source.chars() {
        if c == '\n' {
            line = line.saturating_add(1);
            column = 0;
            in_comment = false;
            prev_space = true;
            // YAML and TOML basic strings do not span lines unquoted; a stray quote is ended
            // here so one odd scalar does not hide the rest of the file.
            if format != PlanFormat::Json {
                quote = None;
            }
            escaped = false;
            continue;
        }
        column = column.saturating_add(1);
        if in_comment {
            continue;
        }
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && q == '"' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            prev_space = false;
            continue;
        }
        match c {
            '"' | '\'' if format != PlanFormat::Json || c == '"' => quote = Some(c),
            '#' if comments && prev_space => in_comment = true,
            '[' | '{' => {
                depth += 1;
                if depth > limit {
                    return Some((line, column));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    None
}

/// The error of a file nested deeper than [`MAX_NESTING_DEPTH`]: its position and message.
pub(crate) fn depth_error(source: &str, format: PlanFormat) -> Option<(Pos, String)> {
    let (line, column) = check_depth(source, format, MAX_NESTING_DEPTH)?;
    Some((
        Pos { line, column },
        format!(
            "nested more than {MAX_NESTING_DEPTH} levels deep here: a plan or edits file needs only a few levels; flatten the lists and mappings"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_finds_where_nesting_crosses_the_limit() {
        let deep = format!("steps: {}", "[".repeat(200));
        assert_eq!(
            check_depth(&deep, PlanFormat::Yaml, 128),
            Some((1, 7 + 129))
        );
        let ok = "steps:\n  - {id: a, module: report, depends_on: [b]}\n";
        assert_eq!(check_depth(ok, PlanFormat::Yaml, 2), None);
        assert_eq!(check_depth(ok, PlanFormat::Yaml, 1), Some((2, 41)));
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let src = "goal: \"[[[[\" # {{{{\nx: '[[['\n";
        assert_eq!(check_depth(src, PlanFormat::Yaml, 0), None);
        let json = r#"{"goal": "[[[\"[[["}"#;
        assert_eq!(check_depth(json, PlanFormat::Json, 1), None);
        // JSON has no comments: a `#` is just a character.
        assert_eq!(check_depth("{\"a\":#[", PlanFormat::Json, 1), Some((1, 7)));
        let toml = "goal = \"[[\" # [[\n[[steps]]\n";
        assert_eq!(check_depth(toml, PlanFormat::Toml, 2), None);
    }

    #[test]
    fn byte_counts_read_as_mib_or_bytes() {
        assert_eq!(human_bytes(DEFAULT_MAX_INPUT_BYTES), "64 MiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
