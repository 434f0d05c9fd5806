//! GitHub Actions mode for everything the CLI prints that is not a report: under
//! `GITHUB_ACTIONS=true` the runner reads workflow commands on stdout *and* stderr (a line
//! starting with `::` after its leading blanks, or `##[cmd]` anywhere), so every piece of
//! untrusted text the CLI prints (file content, test and model output, file names, error
//! messages quoting them) is made inert with [`nuvira_report::github::neutralise`], and so is
//! every line of the tracing log ([`SafeStderr`]). Secrets the shared scanner finds are masked
//! in the same places. The report's own annotations are printed as they are: they are the
//! only commands Nuvira means to give.

use std::borrow::Cow;
use std::io::Write;
use std::sync::LazyLock;

/// Whether the runner will read commands from our output (read once).
static ACTIONS: LazyLock<bool> = LazyLock::new(nuvira_report::github::is_actions);

/// Untrusted text for a terminal or a CI log: `escape` (control characters), secrets masked,
/// and in Actions mode no line a runner would take for a command.
pub(crate) fn safe<'a>(text: &'a str, escape: fn(&'a str) -> Cow<'a, str>) -> Cow<'a, str> {
    let escaped = escape(text);
    let masked = match nuvira_report::mask_secrets(&escaped) {
        Cow::Borrowed(_) => escaped,
        Cow::Owned(m) => Cow::Owned(m),
    };
    if !*ACTIONS {
        return masked;
    }
    match nuvira_report::github::neutralise(&masked) {
        Cow::Borrowed(_) => masked,
        Cow::Owned(n) => Cow::Owned(n),
    }
}

/// The tracing log's writer: one formatted event is buffered and written to stderr when the
/// writer is dropped, with secrets masked and, in Actions mode, its lines neutralised (a
/// WARN line quoting a file's content cannot become a command).
#[derive(Default)]
pub(crate) struct SafeStderr {
    buf: Vec<u8>,
}

impl Write for SafeStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        let masked = nuvira_report::mask_secrets(&text);
        let out = if *ACTIONS {
            nuvira_report::github::neutralise(&masked).into_owned()
        } else {
            masked.into_owned()
        };
        std::io::stderr().lock().write_all(out.as_bytes())
    }
}

impl Drop for SafeStderr {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// JSON for standard output: in Actions mode every `##[` is written `##\u005b` (the same JSON
/// string), so a value quoting the repository cannot be a command.
pub(crate) fn json_for_stdout(text: &str) -> Cow<'_, str> {
    report_for_stdout(text, nuvira_report::Format::Json)
}

/// A JSON document for standard output: `schema_version` first
/// ([`with_schema_version`](crate::cli::conventions::with_schema_version)), then made safe
/// for a runner's log ([`json_for_stdout`]).
pub(crate) fn json_stdout(text: &str) -> String {
    json_for_stdout(&crate::cli::conventions::with_schema_version(text)).into_owned()
}

/// A rendered report for standard output: as it is, or in Actions mode made safe for the
/// runner's log in a way that keeps the format ([`nuvira_report::github::for_log`]).
pub(crate) fn report_for_stdout(text: &str, format: nuvira_report::Format) -> Cow<'_, str> {
    if *ACTIONS {
        nuvira_report::github::for_log(text, format)
    } else {
        Cow::Borrowed(text)
    }
}
