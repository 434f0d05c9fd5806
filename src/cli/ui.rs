//! `nuvira ui [--repo DIR] [--port P]`: the trace viewer. A read-only web page over the run
//! history (`.nuvira/runs/`, see docs/runs.md): the runs, and for each its DAG coloured by
//! status, timeline, steps, model calls with their tokens, diffs and findings; a run in
//! progress updates live from its `events.jsonl` (server-sent events).
//!
//! It listens on 127.0.0.1 only (`--host` accepts nothing else) and answers only requests
//! addressed to that address; the page loads nothing from anywhere else (its script and style
//! are embedded in the binary) and shows every text of a run folder as text. The first line on
//! stdout is the page's address (`--port 0` picks a free port). Exit codes: 0 when Ctrl-C or
//! SIGTERM stopped it, 2 for bad arguments or repository, 3 when the port cannot be listened on
//! or the history cannot be read.

mod live;
mod server;

use crate::exit;
use crate::runs::RunStore;
use std::path::PathBuf;

/// The default port.
const DEFAULT_PORT: u16 = 7420;

/// Arguments of `nuvira ui`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("browse this repository's runs at http://127.0.0.1:7420/", "nuvira ui"),
    ("another repository, on a free port (its address is the first line printed)", "nuvira ui --repo ../app --port 0"),
]))]
pub struct Args {
    /// The repository whose run history is shown.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The port to listen on (0: a free one).
    #[arg(long, value_name = "P", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The address to listen on: only 127.0.0.1 is accepted (the history holds file contents,
    /// test output and model answers; it is never served to the network).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub host: String,
}

/// Runs the command.
pub fn execute(args: Args) -> u8 {
    if args.host.trim() != "127.0.0.1" {
        eprintln!(
            "error: `nuvira ui` listens on 127.0.0.1 only, not on `{}`: the run history holds file contents, test output and model answers (reach it from elsewhere through an SSH tunnel: ssh -L 7420:127.0.0.1:7420 HOST)",
            super::esc(&args.host)
        );
        return exit::INVALID;
    }
    if let Err(e) = super::check_repo(&args.repo) {
        eprintln!("error: {e}");
        return exit::INVALID;
    }
    let store = match RunStore::open(&args.repo) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", super::esc_lines(&e.to_string()));
            return exit::ENVIRONMENT;
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    rt.block_on(async move {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], args.port));
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "error: failed to listen on {addr}: {} (pick another with --port P, or --port 0 for a free one)",
                    super::io_reason(&e)
                );
                return exit::ENVIRONMENT;
            }
        };
        let port = match listener.local_addr() {
            Ok(a) => a.port(),
            Err(e) => {
                eprintln!("error: failed to read the listening address: {}", super::io_reason(&e));
                return exit::ENVIRONMENT;
            }
        };
        super::print_stdout(&format!("http://127.0.0.1:{port}/\n"));
        eprintln!(
            "nuvira ui: the runs of {} at http://127.0.0.1:{port}/ (Ctrl-C stops)",
            super::esc(&store.workspace().root().display().to_string())
        );
        let app = server::router(store, port);
        tokio::select! {
            r = axum::serve(listener, app) => match r {
                Ok(()) => exit::SUCCESS,
                Err(e) => {
                    eprintln!("error: the server stopped: {}", super::io_reason(&e));
                    exit::ENVIRONMENT
                }
            },
            () = stopped() => exit::SUCCESS,
        }
    })
}

/// Ctrl-C or SIGTERM.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
