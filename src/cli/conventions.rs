//! What every subcommand does the same way, as ripgrep and cargo-nextest do it: `--color`
//! (with `NO_COLOR` and `CLICOLOR_FORCE`), `-` for standard input and output, the format of a
//! report file from its extension, the help text's closing section (exit codes and examples),
//! and writes to stdout that fail.

use nuvira_plan::{LoadError, LoadedPlan, PlanFormat};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::OnceLock;

/// When to colour output (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorArg {
    /// Colour when the stream is a terminal, unless `NO_COLOR` is set; `CLICOLOR_FORCE` forces
    /// it on.
    #[default]
    Auto,
    /// Always colour, even into a pipe or a file.
    Always,
    /// Never colour.
    Never,
}

impl ColorArg {
    /// Whether a stream gets colour: the flag first, then `NO_COLOR` (any non-empty value turns
    /// colour off), then `CLICOLOR_FORCE` (any non-empty value but `0` turns it on), then
    /// whether the stream is a terminal.
    pub(crate) fn enabled(self, is_terminal: bool) -> bool {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Auto if set("NO_COLOR") => false,
            Self::Auto
                if set("CLICOLOR_FORCE")
                    && std::env::var_os("CLICOLOR_FORCE") != Some("0".into()) =>
            {
                true
            }
            Self::Auto => is_terminal,
        }
    }

    /// clap's own setting for help and usage errors (clap's `auto` reads `NO_COLOR`,
    /// `CLICOLOR_FORCE` and whether each stream is a terminal the same way).
    pub(crate) fn clap(self) -> clap::ColorChoice {
        match self {
            Self::Auto => clap::ColorChoice::Auto,
            Self::Always => clap::ColorChoice::Always,
            Self::Never => clap::ColorChoice::Never,
        }
    }

    /// `--color` as given on a command line, read before clap parses it, so that clap's own
    /// errors follow it too. The last one wins, as clap would have it.
    pub(crate) fn from_args(args: &[std::ffi::OsString]) -> Self {
        let mut choice = Self::Auto;
        let mut it = args.iter().skip(1).map(|a| a.to_string_lossy());
        while let Some(a) = it.next() {
            if a == "--" {
                break;
            }
            let value = match a.strip_prefix("--color") {
                Some("") => it.next().map(|v| v.into_owned()),
                Some(rest) => rest.strip_prefix('=').map(str::to_owned),
                None => None,
            };
            choice = match value.as_deref() {
                Some("always") => Self::Always,
                Some("never") => Self::Never,
                Some("auto") => Self::Auto,
                _ => choice,
            };
        }
        choice
    }
}

/// The global options every command may read: set once in [`super::main`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Global {
    /// Whether stderr gets colour (log lines, progress).
    pub color_stderr: bool,
    /// `-v` count.
    pub verbose: u8,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// Records the global options (first call wins).
pub(crate) fn set_global(global: Global) {
    let _ = GLOBAL.set(global);
}

/// The global options (defaults before [`set_global`]: no colour, not verbose).
pub(crate) fn global() -> Global {
    GLOBAL.get().copied().unwrap_or(Global {
        color_stderr: false,
        verbose: 0,
    })
}

/// The closing section of every subcommand's help: its examples, then the exit codes they all
/// share. One function, so that every command says it the same way.
pub(crate) fn after_help(examples: &[(&str, &str)]) -> String {
    let mut out = String::from("Examples:\n");
    for (what, cmd) in examples {
        out.push_str(&format!("  # {what}\n  {cmd}\n"));
    }
    out.push_str(
        "\nExit codes:\n  0    success\n  1    the work failed (a step, a test, a check)\n  \
         2    invalid plan, edits, events file or arguments\n  \
         3    the environment lacks something (Docker engine, model key, lock held)\n  \
         129  hung up (SIGHUP), 130 cancelled (Ctrl-C), 143 terminated (SIGTERM)\n\n\
         `-` in place of a plan, edits or events file reads standard input; as an output path it \
         writes standard output.",
    );
    out
}

/// Whether a path argument is `-` (standard input or output).
pub(crate) fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// The name errors give standard input.
pub(crate) const STDIN_NAME: &str = "<stdin>";

/// Reads standard input as text, at most the plan crate's input cap, and guesses its format:
/// JSON when it starts with `{`, TOML when its first line is a table header or `key = value`,
/// else YAML.
fn read_stdin(what: &str) -> Result<(String, PlanFormat), LoadError> {
    let fail = |message: String| LoadError {
        file: STDIN_NAME.to_owned(),
        line: None,
        column: None,
        message,
        others: Vec::new(),
    };
    let cap = nuvira_plan::max_input_bytes().map_err(fail)?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| {
            fail(format!(
                "cannot read standard input: {}",
                super::io_reason(&e)
            ))
        })?;
    if bytes.len() as u64 > cap {
        return Err(fail(format!(
            "larger than the {cap}-byte input cap: {what} is rarely more than a few KB; if this one is right, raise the cap with {}=BYTES",
            nuvira_plan::MAX_INPUT_BYTES_ENV
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))?;
    let format = sniff(&text);
    Ok((text, format))
}

/// The format of text without a file name.
fn sniff(text: &str) -> PlanFormat {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('{') {
        return PlanFormat::Json;
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let toml = first.is_some_and(|l| {
        l.starts_with('[')
            || l.split_once('=').is_some_and(|(k, _)| {
                let k = k.trim();
                !k.is_empty()
                    && !k.contains(':')
                    && k.chars().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '"' | '.' | ' ')
                    })
            })
    });
    if toml {
        PlanFormat::Toml
    } else {
        PlanFormat::Yaml
    }
}

/// Loads a plan from a file, or from standard input for `-`.
///
/// # Errors
/// The plan crate's [`LoadError`], located.
pub(crate) fn load_plan(path: &Path) -> Result<LoadedPlan, LoadError> {
    if is_stdio(path) {
        let (text, format) = read_stdin("a plan")?;
        nuvira_plan::parse_str(&text, format, STDIN_NAME)
    } else {
        nuvira_plan::load_file(path)
    }
}

/// Loads an edits file, or edits from standard input for `-`.
///
/// # Errors
/// The plan crate's [`LoadError`], located.
pub(crate) fn load_edits<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<nuvira_plan::LoadedEdits<T>, LoadError> {
    if is_stdio(path) {
        let (text, format) = read_stdin("an edits file")?;
        nuvira_plan::parse_edits(&text, format, STDIN_NAME)
    } else {
        nuvira_plan::load_edits(path)
    }
}

/// Builds a report from a JSONL event file, or from standard input for `-`, with the same
/// caps on a line and on the whole as a file.
///
/// # Errors
/// The report crate's error naming the line that is not an event.
pub(crate) fn read_events(
    path: &Path,
) -> Result<nuvira_report::ExecutionReport, nuvira_report::ReportError> {
    if !is_stdio(path) {
        return nuvira_report::read_jsonl_file(path);
    }
    let max_total = std::env::var(nuvira_report::MAX_EVENTS_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(nuvira_report::DEFAULT_MAX_EVENTS_BYTES);
    let stdin = std::io::stdin().lock();
    let mut events = nuvira_report::EventReader::new(stdin, STDIN_NAME)
        .with_limits(nuvira_report::MAX_EVENT_LINE_BYTES, max_total);
    let mut b = nuvira_report::ReportBuilder::new();
    for ev in events.by_ref() {
        b.fold_owned(ev?);
    }
    let mut report = b.finish();
    for (_, kind) in events.unknown() {
        if !report.unknown_event_types.contains(kind) {
            report.unknown_event_types.push(kind.clone());
        }
    }
    Ok(report)
}

/// The report format a file name asks for: `.md`/`.markdown`, `.html`/`.htm`, `.json`,
/// `.sarif` (also `.sarif.json`), `.xml` (JUnit), `.txt` (text).
///
/// # Errors
/// A message naming the path and the extensions known, for any other name.
pub(crate) fn format_from_extension(path: &Path) -> Result<nuvira_report::Format, String> {
    use nuvira_report::Format;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    Ok(match ext {
        _ if name.ends_with(".sarif.json") => Format::Sarif,
        "md" | "markdown" => Format::Markdown,
        "html" | "htm" => Format::Html,
        "json" => Format::Json,
        "sarif" => Format::Sarif,
        "xml" => Format::Junit,
        "txt" => Format::Text,
        _ => {
            return Err(format!(
                "cannot tell the report format of `{}` from its extension: use .md, .html, .json, .sarif, .xml (JUnit) or .txt, or name it as FORMAT=PATH (e.g. html=report.out) or pass --format",
                path.display()
            ));
        }
    })
}

/// A report target: `FORMAT=PATH`, or a `PATH` whose extension names the format. `-` is
/// standard output. A prefix before `=` that is not a format name is part of the path.
///
/// # Errors
/// A message for an empty path or a path whose extension names no format.
pub(crate) fn parse_target(
    s: &str,
) -> Result<(Option<nuvira_report::Format>, std::path::PathBuf), String> {
    if let Some((format, path)) = s.split_once('=')
        && let Ok(format) = format.parse::<nuvira_report::Format>()
    {
        if path.is_empty() {
            return Err(format!("`{s}` has no path after `=`"));
        }
        return Ok((Some(format), path.into()));
    }
    if s.is_empty() {
        return Err("the report path is empty: give a file name such as report.html".into());
    }
    Ok((None, s.into()))
}

/// Writes text to a file, or to standard output for `-`.
///
/// # Errors
/// The I/O error; for standard output, a closed pipe is not one.
pub(crate) fn write_output(path: &Path, text: &str) -> std::io::Result<()> {
    if is_stdio(path) {
        return write_stdout(text);
    }
    std::fs::write(path, text)
}

/// Writes text to standard output and flushes it. A closed pipe (`| head`: the reader took all
/// it wanted) is success; any other failure (`> /dev/full`) is returned.
///
/// # Errors
/// The I/O error, except a broken pipe.
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The version of every JSON document the commands print (`schema_version`, the first key):
/// it changes only when an existing key changes meaning; new keys do not change it.
pub(crate) const JSON_SCHEMA_VERSION: u32 = 1;

/// A JSON object's text (compact or pretty) with `"schema_version"` as its first key; any
/// other text is returned as it is.
pub(crate) fn with_schema_version(text: &str) -> String {
    let Some(rest) = text.strip_prefix('{') else {
        return text.to_owned();
    };
    let key = format!("\"schema_version\": {JSON_SCHEMA_VERSION}");
    if let Some(body) = rest.strip_prefix('\n') {
        // Pretty: the key on its own line, indented like the next one.
        let indent: String = body.chars().take_while(|c| *c == ' ').collect();
        if body.trim_start().starts_with('}') {
            return format!("{{\n{indent}  {key}\n{body}");
        }
        return format!("{{\n{indent}{key},\n{body}");
    }
    let compact = key.replace(": ", ":");
    if rest.trim_start().starts_with('}') {
        return format!("{{{compact}{rest}");
    }
    format!("{{{compact},{rest}")
}

static STDOUT_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that a write to stdout failed (not a closed pipe), saying so on stderr the first
/// time: the command then exits 3 (the environment failed), whatever else it did.
pub(crate) fn note_stdout_failure(e: &std::io::Error) {
    use std::sync::atomic::Ordering;
    if !STDOUT_FAILED.swap(true, Ordering::SeqCst) {
        let _ = writeln!(
            std::io::stderr(),
            "error: failed to write to standard output: {}; the output is incomplete (free some space or write elsewhere)",
            super::io_reason(e)
        );
    }
}

/// Whether a write to stdout failed during this command.
pub(crate) fn stdout_failed() -> bool {
    STDOUT_FAILED.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_version_is_the_first_key_of_compact_and_pretty_objects() {
        for v in [
            serde_json::json!({"a": 1, "b": [1, 2]}),
            serde_json::json!({}),
        ] {
            for text in [v.to_string(), format!("{v:#}")] {
                let out = with_schema_version(&text);
                let back: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(back["schema_version"], JSON_SCHEMA_VERSION, "{out}");
                assert_eq!(
                    back.as_object().unwrap().len(),
                    v.as_object().unwrap().len() + 1
                );
                assert!(
                    out.starts_with("{\"schema_version\"")
                        || out.starts_with("{\n  \"schema_version\""),
                    "{out}"
                );
            }
        }
        assert_eq!(with_schema_version("[1]"), "[1]");
    }

    #[test]
    fn sniffs_json_toml_and_yaml() {
        assert_eq!(sniff("{\"steps\": []}"), PlanFormat::Json);
        assert_eq!(sniff("# c\ngoal = \"g\"\n[[steps]]\n"), PlanFormat::Toml);
        assert_eq!(sniff("[[edits]]\npath = \"a\""), PlanFormat::Toml);
        assert_eq!(sniff("goal: g\nsteps: []\n"), PlanFormat::Yaml);
        assert_eq!(sniff("goal: \"a = b\"\n"), PlanFormat::Yaml);
    }

    #[test]
    fn report_formats_come_from_extensions() {
        use nuvira_report::Format;
        for (name, f) in [
            ("a.md", Format::Markdown),
            ("a.HTML", Format::Html),
            ("a.json", Format::Json),
            ("a.sarif", Format::Sarif),
            ("a.sarif.json", Format::Sarif),
            ("junit.xml", Format::Junit),
            ("a.txt", Format::Text),
        ] {
            assert_eq!(format_from_extension(Path::new(name)), Ok(f), "{name}");
        }
        let err = format_from_extension(Path::new("out.pdf")).unwrap_err();
        assert!(err.contains("out.pdf") && err.contains(".sarif"), "{err}");
        assert!(format_from_extension(Path::new("noext")).is_err());
    }

    #[test]
    fn targets_split_only_at_a_format_name() {
        use nuvira_report::Format;
        assert_eq!(
            parse_target("html=out/r"),
            Ok((Some(Format::Html), "out/r".into()))
        );
        assert_eq!(parse_target("a=b.md"), Ok((None, "a=b.md".into())));
        assert_eq!(parse_target("-"), Ok((None, "-".into())));
        assert!(parse_target("json=").is_err());
    }

    #[test]
    fn color_flag_is_read_before_parsing() {
        let args = |a: &[&str]| {
            a.iter()
                .map(Into::into)
                .collect::<Vec<std::ffi::OsString>>()
        };
        assert_eq!(
            ColorArg::from_args(&args(&["nuvira", "--color", "never", "run"])),
            ColorArg::Never
        );
        assert_eq!(
            ColorArg::from_args(&args(&["nuvira", "x", "--color=always"])),
            ColorArg::Always
        );
        assert_eq!(
            ColorArg::from_args(&args(&["nuvira", "--", "--color=always"])),
            ColorArg::Auto
        );
    }
}
