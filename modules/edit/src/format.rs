//! Optional formatting of written files with the project's usual formatter, when installed.
//!
//! The text is formatted through the formatter's stdin *before* the atomic write, so that the
//! journal and the atomic write cover the formatted bytes too. A formatter that is missing or
//! fails never fails the edit: the file is written as the strategy produced it, with a warning.

use std::io::Write;
use std::process::{Command, Stdio};

/// The outcome of trying to format one file.
pub(crate) enum Formatted {
    /// No formatter is known for this file type.
    NotApplicable,
    /// The formatter's output.
    Text(String),
    /// Why the file was left as written.
    Skipped(String),
}

fn command_for(path: &str) -> Option<(&'static str, Vec<String>)> {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    match ext.as_str() {
        "rs" => Some((
            "rustfmt",
            vec![
                "--edition".into(),
                "2024".into(),
                "--emit".into(),
                "stdout".into(),
            ],
        )),
        "py" | "pyi" => Some((
            "ruff",
            vec![
                "format".into(),
                "--stdin-filename".into(),
                path.into(),
                "-".into(),
            ],
        )),
        "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "json" | "css" | "scss" | "md" | "yaml"
        | "yml" | "html" | "vue" => {
            Some(("prettier", vec!["--stdin-filepath".into(), path.into()]))
        }
        _ => None,
    }
}

/// Formats `text` (the new content of `path`) with the matching formatter, run in `root`.
pub(crate) fn format(root: &std::path::Path, path: &str, text: &str) -> Formatted {
    let Some((program, args)) = command_for(path) else {
        return Formatted::NotApplicable;
    };
    let child = Command::new(program)
        .args(&args)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Formatted::Skipped(format!(
                "{path}: not formatted, `{program}` is not installed"
            ));
        }
        Err(e) => {
            return Formatted::Skipped(format!(
                "{path}: not formatted, cannot run `{program}`: {e}"
            ));
        }
    };
    // Feed stdin from a thread so a large file cannot deadlock against a full stdout pipe.
    let input = text.to_owned();
    let feeder = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        })
    });
    let output = child.wait_with_output();
    if let Some(f) = feeder {
        let _ = f.join();
    }
    match output {
        Ok(out) if out.status.success() => match String::from_utf8(out.stdout) {
            Ok(s) if !s.is_empty() || text.is_empty() => Formatted::Text(s),
            _ => Formatted::Skipped(format!(
                "{path}: not formatted, `{program}` printed nothing"
            )),
        },
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            Formatted::Skipped(format!(
                "{path}: not formatted, `{program}` failed: {}",
                first.trim()
            ))
        }
        Err(e) => Formatted::Skipped(format!("{path}: not formatted, `{program}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn files_without_a_formatter_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            format(dir.path(), "notes.txt", "x"),
            Formatted::NotApplicable
        ));
    }

    #[test]
    fn rustfmt_formats_rust_when_installed_and_a_missing_tool_is_only_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        match format(dir.path(), "src/lib.rs", "fn  main( ){}") {
            Formatted::Text(t) => assert_eq!(t, "fn main() {}\n"),
            Formatted::Skipped(why) => assert!(why.contains("rustfmt"), "{why}"),
            Formatted::NotApplicable => panic!("rust files have a formatter"),
        }
    }
}
