//! Optional formatting of written files with the project's usual formatter, when installed.
//!
//! The text is formatted through the formatter's stdin *before* the atomic write, so that the
//! journal and the atomic write cover the formatted bytes too. A formatter that is missing or
//! fails never fails the edit: the file is written as the strategy produced it, with a warning.
//!
//! The formatter never runs in the repository: the repository may be hostile, and a formatter
//! started there loads what it finds (a `prettier.config.js` is code, a `.prettierrc` can name
//! plugins to load) and may write next to it. It runs in a fresh temporary folder holding
//! copies of the project's *data* config files only ([`CONFIGS`]: `rustfmt.toml`,
//! `pyproject.toml`, `.prettierrc.json`, ...; regular files at the repository's root, at most
//! 64 KiB, and no prettier config that names `plugins`), so the project's style still applies.
//!
//! Given a sandbox ([`crate::EditModule::with_sandbox`]: `nuvira run` gives the run's), that
//! folder is the sandbox's workspace: the text goes in as a file, the formatter runs there
//! (`sh -c '"$0" "$@" < input > output'`, no network, a timeout) and the output file is
//! collected back. Without one, the formatter runs on the host in the temporary folder.

use nuvira_api::{CancelSignal, Sandbox, SandboxRequest};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// How long one formatter may run in a sandbox.
const SANDBOX_TIMEOUT: Duration = Duration::from_secs(60);
/// The file the text goes into, in the sandbox's workspace.
const INPUT: &str = "nuvira-format-input";
/// The file the formatter's output goes into, collected back.
const OUTPUT: &str = "nuvira-format-output";

/// A sandbox to run formatters in, driven from the blocking thread the edit batch runs on.
#[derive(Clone)]
pub(crate) struct FormatSandbox {
    /// The sandbox.
    pub(crate) sandbox: Arc<dyn Sandbox>,
    /// The runtime the edit module runs on (the batch runs in `spawn_blocking`, where
    /// `Handle::block_on` is allowed).
    pub(crate) handle: tokio::runtime::Handle,
    /// The step's cancel signal.
    pub(crate) cancel: Arc<dyn CancelSignal>,
}

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

/// The data config files copied, per formatter, from the repository's root into the folder the
/// formatter runs in. Code configs (`prettier.config.js`, `.prettierrc.cjs`, ...) never are.
pub(crate) const CONFIGS: &[(&str, &[&str])] = &[
    ("rustfmt", &["rustfmt.toml", ".rustfmt.toml"]),
    ("ruff", &["ruff.toml", ".ruff.toml", "pyproject.toml"]),
    (
        "prettier",
        &[
            ".prettierrc",
            ".prettierrc.json",
            ".prettierrc.json5",
            ".prettierrc.yaml",
            ".prettierrc.yml",
            ".prettierrc.toml",
            ".editorconfig",
        ],
    ),
];

/// Largest config file copied.
const MAX_CONFIG: u64 = 64 * 1024;

/// Copies `program`'s data config files from `root` into `into` (see [`CONFIGS`]).
fn copy_configs(program: &str, root: &std::path::Path, into: &std::path::Path) {
    let names = CONFIGS
        .iter()
        .find(|(p, _)| *p == program)
        .map_or(&[][..], |(_, n)| *n);
    for name in names {
        let from = root.join(name);
        // A symlink could point anywhere: only regular files, not followed.
        let Ok(meta) = std::fs::symlink_metadata(&from) else {
            continue;
        };
        if !meta.is_file() || meta.len() > MAX_CONFIG {
            continue;
        }
        let Ok(bytes) = std::fs::read(&from) else {
            continue;
        };
        // Plugins are code, loaded by name or path.
        if program == "prettier" && String::from_utf8_lossy(&bytes).contains("plugins") {
            continue;
        }
        let _ = std::fs::write(into.join(name), bytes);
    }
}

/// Formats `text` (the new content of `path`) with the matching formatter, using the data
/// config files of `root` (see the module docs: it runs in a temporary folder, not in `root`,
/// inside `sandbox` when one is given). Must not be called on an async runtime's worker thread
/// with a sandbox.
pub(crate) fn format(
    root: &std::path::Path,
    path: &str,
    text: &str,
    sandbox: Option<&FormatSandbox>,
) -> Formatted {
    let Some((program, args)) = command_for(path) else {
        return Formatted::NotApplicable;
    };
    let scratch = match tempfile::Builder::new().prefix("nuvira-format-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            return Formatted::Skipped(format!(
                "{path}: not formatted, cannot create a folder to run `{program}` in: {e}"
            ));
        }
    };
    copy_configs(program, root, scratch.path());
    if let Some(sandbox) = sandbox {
        return in_sandbox(sandbox, scratch.path(), program, args, path, text);
    }
    let child = Command::new(program)
        .args(&args)
        .current_dir(scratch.path())
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

/// Runs `program` in `sandbox` with `scratch` as its workspace (see the module docs).
fn in_sandbox(
    sandbox: &FormatSandbox,
    scratch: &std::path::Path,
    program: &str,
    args: Vec<String>,
    path: &str,
    text: &str,
) -> Formatted {
    let kind = sandbox.sandbox.kind().to_owned();
    if let Err(e) = std::fs::write(scratch.join(INPUT), text) {
        return Formatted::Skipped(format!(
            "{path}: not formatted, cannot write the text for `{program}`: {e}"
        ));
    }
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!("\"$0\" \"$@\" < {INPUT} > {OUTPUT}"),
        program.to_owned(),
    ];
    command.extend(args);
    let mut request = SandboxRequest::new(scratch, command);
    request.limits.timeout = SANDBOX_TIMEOUT;
    request.collect = vec![OUTPUT.to_owned()];
    let ran = sandbox
        .handle
        .block_on(sandbox.sandbox.run(&request, sandbox.cancel.as_ref()));
    let out = match ran {
        Ok(out) => out,
        Err(e) => {
            return Formatted::Skipped(format!(
                "{path}: not formatted, the {kind} sandbox could not run `{program}`: {e}"
            ));
        }
    };
    if out.timed_out {
        return Formatted::Skipped(format!(
            "{path}: not formatted, `{program}` timed out after {}s in the {kind} sandbox",
            SANDBOX_TIMEOUT.as_secs()
        ));
    }
    match out.exit_code {
        Some(0) => match out
            .collected
            .get(OUTPUT)
            .map(|b| String::from_utf8(b.clone()))
        {
            Some(Ok(s)) if !s.is_empty() || text.is_empty() => Formatted::Text(s),
            _ => Formatted::Skipped(format!(
                "{path}: not formatted, `{program}` printed nothing"
            )),
        },
        Some(127) => Formatted::Skipped(format!(
            "{path}: not formatted, `{program}` is not installed in the {kind} sandbox"
        )),
        _ => {
            let first = out
                .stderr
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            Formatted::Skipped(format!(
                "{path}: not formatted, `{program}` failed in the {kind} sandbox: {}",
                first.trim()
            ))
        }
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
            format(dir.path(), "notes.txt", "x", None),
            Formatted::NotApplicable
        ));
    }

    #[test]
    fn the_formatter_runs_outside_the_repository_with_its_data_configs_only() {
        let repo = tempfile::tempdir().unwrap();
        std::fs::write(repo.path().join("rustfmt.toml"), "hard_tabs = true\n").unwrap();
        std::fs::write(
            repo.path().join("prettier.config.js"),
            "module.exports = {}",
        )
        .unwrap();
        std::fs::write(
            repo.path().join(".prettierrc.json"),
            r#"{"plugins": ["./evil.js"]}"#,
        )
        .unwrap();
        std::fs::write(repo.path().join("pyproject.toml"), "[tool.ruff]\n").unwrap();
        let into = tempfile::tempdir().unwrap();
        copy_configs("rustfmt", repo.path(), into.path());
        copy_configs("prettier", repo.path(), into.path());
        let mut copied: Vec<String> = std::fs::read_dir(into.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        copied.sort();
        assert_eq!(copied, ["rustfmt.toml"]);
        // The project's style still applies (rustfmt, when installed).
        let before: Vec<_> = std::fs::read_dir(repo.path()).unwrap().collect();
        match format(
            repo.path(),
            "src/lib.rs",
            "fn main() {\n    let x = 1;\n}\n",
            None,
        ) {
            Formatted::Text(t) => assert_eq!(t, "fn main() {\n\tlet x = 1;\n}\n"),
            Formatted::Skipped(why) => assert!(why.contains("rustfmt"), "{why}"),
            Formatted::NotApplicable => panic!("rust files have a formatter"),
        }
        let after: Vec<_> = std::fs::read_dir(repo.path()).unwrap().collect();
        assert_eq!(
            before.len(),
            after.len(),
            "nothing is written into the repository"
        );
    }

    #[test]
    fn rustfmt_formats_rust_when_installed_and_a_missing_tool_is_only_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        match format(dir.path(), "src/lib.rs", "fn  main( ){}", None) {
            Formatted::Text(t) => assert_eq!(t, "fn main() {}\n"),
            Formatted::Skipped(why) => assert!(why.contains("rustfmt"), "{why}"),
            Formatted::NotApplicable => panic!("rust files have a formatter"),
        }
    }
}
