//! The `nuvira` command line. Each subcommand lives in its own file with an `Args` struct and
//! an `execute` function returning the process exit code (see [`crate::exit`]).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod actions;
mod apply;
mod cache;
mod completions;
pub(crate) mod conventions;
mod git_run;
mod graph;
mod history;
mod inflight;
mod inspect;
mod mcp;
mod pr;
mod progress;
mod replay;
mod report;
mod resume;
mod review;
mod rollback;
mod run;
mod runs;
mod schema;
mod signal;
mod test;
mod ui;
mod validate;

/// Run coding work as a validated dependency graph.
#[derive(Debug, Parser)]
#[command(name = "nuvira", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace). `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// When to colour output, log lines included: auto (a terminal, unless NO_COLOR is set;
    /// CLICOLOR_FORCE=1 forces it), always or never.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = conventions::ColorArg::Auto, global = true)]
    color: conventions::ColorArg,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a plan file and list every problem.
    Validate(validate::Args),
    /// Render a plan's dependency graph as DOT, Mermaid or JSON.
    Graph(graph::Args),
    /// Apply a batch of edits all-or-nothing (or preview it with --dry-run).
    Apply(apply::Args),
    /// Restore the files changed by the last apply or run.
    Rollback(rollback::Args),
    /// Run a repository's tests in a sandbox.
    Test(test::Args),
    /// Find the files relevant to a goal.
    Inspect(inspect::Args),
    /// Run a plan (or a goal) through the whole pipeline.
    Run(Box<run::Args>),
    /// Build a report from a stored event file.
    Report(report::Args),
    /// List or clean the sandboxes' warm build caches.
    Cache(cache::Args),
    /// Print a run's pull-request description (Markdown) on stdout.
    #[command(name = "pr-body")]
    PrBody(pr::BodyArgs),
    /// Pull requests on GitHub: `nuvira pr create`.
    Pr(pr::PrArgs),
    /// Check a branch's changes since its merge base: syntax, security, tests (CI for PRs).
    Review(review::Args),
    /// Print the JSON Schema of plan files, edit batches, the report JSON or events.
    Schema(schema::Args),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions(completions::Args),
    /// Print the manual page (roff), or write one page per command into a folder.
    Man(completions::ManArgs),
    /// The run history: list runs, show a run's report, collect old runs.
    Runs(runs::Args),
    /// Resume a recorded run: only what did not finish (or whose inputs changed) runs again.
    Resume(resume::Args),
    /// Re-execute a recorded run with its recorded model answers, offline; report divergences.
    Replay(replay::Args),
    /// Serve Nuvira's tools over the Model Context Protocol (stdio, or --http).
    Mcp(mcp::Args),
    /// Browse the run history in a web page on 127.0.0.1 (live for a run in progress).
    Ui(ui::Args),
}

/// The whole command line definition (for completions and the manual page).
pub(crate) fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Parses the command line, runs the command and returns its exit code.
pub fn main() -> ExitCode {
    exit_quietly_when_output_fails();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // clap's own help and errors follow `--color` too, so it is read before clap parses.
    let command = command().color(conventions::ColorArg::from_args(&args).clap());
    let parsed = command
        .try_get_matches_from(&args)
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() {
                crate::exit::INVALID
            } else {
                crate::exit::SUCCESS
            };
            let _ = err.print();
            // A script that asked for JSON gets its one object on stdout for a usage error too.
            if err.use_stderr() && asks_for_json(&args) {
                let message = err.render().to_string();
                let message = message.trim().trim_start_matches("error: ");
                print_stdout(&json_error("invalid-input", message, None));
            }
            return ExitCode::from(code);
        }
    };
    use std::io::IsTerminal;
    let color_stderr = cli.color.enabled(std::io::stderr().is_terminal());
    conventions::set_global(conventions::Global {
        color_stderr,
        verbose: cli.verbose,
    });
    init_tracing(cli.verbose, color_stderr);
    let code = match cli.command {
        Command::Validate(a) => validate::execute(a),
        Command::Graph(a) => graph::execute(a),
        Command::Apply(a) => apply::execute(a),
        Command::Rollback(a) => rollback::execute(a),
        Command::Test(a) => test::execute(a),
        Command::Inspect(a) => inspect::execute(a),
        Command::Run(a) => run::execute(*a),
        Command::Report(a) => report::execute(a),
        Command::Cache(a) => cache::execute(a),
        Command::PrBody(a) => pr::execute_body(a),
        Command::Pr(a) => pr::execute(a),
        Command::Review(a) => review::execute(a),
        Command::Schema(a) => schema::execute(a),
        Command::Completions(a) => completions::execute(a),
        Command::Man(a) => completions::execute_man(a),
        Command::Runs(a) => runs::execute(a),
        Command::Resume(a) => resume::execute(a),
        Command::Replay(a) => replay::execute(a),
        Command::Mcp(a) => mcp::execute(a),
        Command::Ui(a) => ui::execute(a),
    };
    // The run cgroups that local and bwrap runs reused are removed before the process goes
    // (the next start would remove them otherwise).
    nuvira_sandbox::limits::release_pooled();
    if conventions::stdout_failed() {
        return ExitCode::from(code.max(crate::exit::ENVIRONMENT));
    }
    ExitCode::from(code)
}

/// Whether the command line asks for JSON output (`--format json`, `--format=json`), read
/// before clap has parsed it.
fn asks_for_json(args: &[std::ffi::OsString]) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        a == "--format=json"
            || (a == "--format" && args.get(i + 1).is_some_and(|next| next == "json"))
    })
}

/// Output that cannot be written must not end in a panic. std's `print!`/`eprint!` panic when
/// stdout or stderr fails (`nuvira graph big.yaml | head` closes the pipe; `> /dev/full` has no
/// space), so this hook turns exactly those panics into an exit: 0 for a closed pipe (the
/// reader took all it wanted, as `head` expects), 3 (the environment failed) for any other write
/// error, with one line on stderr if stderr still works. Every other panic keeps the default
/// hook.
fn exit_quietly_when_output_fails() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let stream = ["stdout", "stderr"]
            .into_iter()
            .find(|s| msg.starts_with(&format!("failed printing to {s}")));
        let Some(stream) = stream else {
            return default(info);
        };
        if msg.contains("Broken pipe") {
            std::process::exit(i32::from(crate::exit::SUCCESS));
        }
        if stream == "stdout" {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "error: {msg}; the output is incomplete (free some space or write elsewhere)"
            );
        }
        std::process::exit(i32::from(crate::exit::ENVIRONMENT));
    }));
}

fn init_tracing(verbose: u8, ansi: bool) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let from_env = EnvFilter::try_from_default_env().ok();
    // Without -v or RUST_LOG only warnings and errors show: as the commands' own
    // (`warning: ...`, `error: ...`), not as log lines with a timestamp.
    let plain = verbose == 0 && from_env.is_none();
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::cli::actions::SafeStderr::default)
        // `--color`, NO_COLOR and CLICOLOR_FORCE decide; by default colour codes only for a
        // terminal, not for a pipe or a CI log file.
        .with_ansi(ansi)
        .with_target(false);
    let _ = if plain {
        builder.event_format(PlainEvent { ansi }).try_init()
    } else {
        builder.try_init()
    };
}

/// A log event as a command's own message: `warning: ` (yellow) or `error: ` (red) and the
/// message with its fields.
struct PlainEvent {
    ansi: bool,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for PlainEvent
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let (word, colour) = match *event.metadata().level() {
            tracing::Level::ERROR => ("error", "31"),
            tracing::Level::WARN => ("warning", "33"),
            tracing::Level::INFO => ("info", "32"),
            _ => ("debug", "34"),
        };
        if self.ansi {
            write!(writer, "\x1b[1;{colour}m{word}:\x1b[0m ")?;
        } else {
            write!(writer, "{word}: ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A file name or other untrusted one-line text for a terminal: control characters escaped
/// (`\x1b`, `\n`), see [`nuvira_api::text::escape_control`].
pub(crate) fn esc(text: &str) -> std::borrow::Cow<'_, str> {
    crate::cli::actions::safe(text, nuvira_api::text::escape_control)
}

/// Untrusted multi-line text (an error message, a diff) for a terminal: newlines kept, every
/// other control character escaped.
pub(crate) fn esc_lines(text: &str) -> std::borrow::Cow<'_, str> {
    crate::cli::actions::safe(text, nuvira_api::text::escape_control_keep_lines)
}

/// Prints an error the way every command does: `error: ...` on stderr, with its causes. A cause
/// whose text the message above it already contains (many errors print their source) is not
/// repeated.
pub(crate) fn print_error(err: &anyhow::Error) {
    eprintln!("error: {}", esc_lines(&err.to_string()));
    let mut shown = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !shown.contains(&text) {
            eprintln!("  caused by: {}", esc_lines(&text));
        }
        shown = text;
    }
}

/// Takes the repository's lock (`.nuvira/lock`) for this command, so that two commands never
/// write one repository at once. With `wait`, queues behind the holder, saying so in one line
/// on stderr; without, fails naming the holder (the caller exits 3).
///
/// # Errors
/// A [`nuvira_edit::nuvira_workspace::LockError`], whose message is printed after `error: `.
pub(crate) fn lock_repo(
    ws: &nuvira_edit::nuvira_workspace::Workspace,
    wait: bool,
) -> Result<nuvira_edit::nuvira_workspace::RepoLock, nuvira_edit::nuvira_workspace::LockError> {
    use nuvira_edit::nuvira_workspace::{LockWait, RepoLock};
    let command = std::iter::once("nuvira".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let mode = if wait { LockWait::Wait } else { LockWait::Fail };
    RepoLock::acquire(ws, &command, mode, |holder| {
        let who = holder.map_or_else(|| "another process".to_owned(), ToString::to_string);
        eprintln!(
            "waiting for {who} to release the lock on `{}` (--wait)",
            ws.root().display()
        );
    })
}

/// What to do about a bad `--repo`.
const REPO_HINT: &str = "pass the repository folder with --repo DIR";

/// Checks the folder a command's `--repo` names: `repository `X` does not exist` or
/// `repository `X` is a file, not a folder` (every command exits 2 for these).
///
/// # Errors
/// A [`RepoError`], whose message is printed after `error: `.
pub(crate) fn check_repo(repo: &std::path::Path) -> Result<(), RepoError> {
    let path = repo.to_owned();
    match std::fs::metadata(repo) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(RepoError::NotAFolder(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RepoError::Missing(path)),
        Err(source) => Err(RepoError::Unreadable { path, source }),
    }
}

/// Why `--repo DIR` cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RepoError {
    /// The path is a file.
    #[error("repository `{}` is a file, not a folder; {REPO_HINT}", one_line(.0))]
    NotAFolder(std::path::PathBuf),
    /// Nothing is there.
    #[error("repository `{}` does not exist; {REPO_HINT}", one_line(.0))]
    Missing(std::path::PathBuf),
    /// It cannot be read.
    #[error(
        "repository `{}` cannot be read: {}",
        one_line(path),
        io_reason(source)
    )]
    Unreadable {
        /// The path.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// A path in an error message, on one line: its newlines and other control characters
/// escaped (the message is printed with its own lines kept).
fn one_line(path: &std::path::Path) -> String {
    nuvira_api::text::escape_control(&path.to_string_lossy()).into_owned()
}

/// An I/O error in words, without the `(os error N)` suffix.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// The JSON object a command with `--format json` prints on stdout when it fails before it
/// has its normal output: `{"ok": false, "error": {"kind", "message"}}`, plus
/// `error.problems` (the objects of `nuvira validate --format json`'s `errors`) for an invalid
/// plan. Kinds: `invalid-plan`, `invalid-input`, `repository`, `environment`, `failed`,
/// `cancelled`.
pub(crate) fn json_error(kind: &str, message: &str, problems: Option<serde_json::Value>) -> String {
    let mut error = serde_json::json!({ "kind": kind, "message": message });
    if let Some(p) = problems {
        error["problems"] = p;
    }
    conventions::with_schema_version(&format!(
        "{:#}\n",
        serde_json::json!({ "ok": false, "error": error })
    ))
}

/// Validation problems as the objects `nuvira validate --format json` lists.
pub(crate) fn problems_json(
    file: &std::path::Path,
    problems: &[crate::validate::Problem],
) -> serde_json::Value {
    let file = file.display().to_string();
    problems
        .iter()
        .map(|p| {
            let mut v = serde_json::json!({
                "kind": p.kind, "steps": p.steps, "message": p.message, "file": file
            });
            if let Some(l) = p.line {
                v["line"] = serde_json::json!(l);
            }
            if let Some(c) = p.column {
                v["column"] = serde_json::json!(c);
            }
            v
        })
        .collect()
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error worth reporting. Any
/// other failure (`> /dev/full`) is said once on stderr and makes the command exit 3 when it
/// is done (see [`conventions::stdout_failed`]).
pub(crate) fn print_stdout(text: &str) {
    if let Err(e) = conventions::write_stdout(text) {
        conventions::note_stdout_failure(&e);
    }
}

/// A multi-threaded tokio runtime for commands that need one.
#[allow(dead_code, reason = "used by the subcommands as they land")]
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
