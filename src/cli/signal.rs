//! Ctrl-C, SIGTERM and SIGHUP as cancellation.
//!
//! All three stop a command the same way: its cancellation token fires, the running step (a
//! sandbox, a container) is stopped and removed, the run's edits are rolled back, and the
//! command exits with the signal's code ([`crate::exit::CANCELLED`] 130 for Ctrl-C,
//! [`crate::exit::TERMINATED`] 143 for SIGTERM, [`crate::exit::HANGUP`] 129 for SIGHUP), as a
//! shell reports a process the signal killed.

use crate::exit;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tokio_util::sync::CancellationToken;

/// Listens for the signals until dropped; remembers the first one that arrived.
pub(crate) struct Interrupt {
    code: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

impl Interrupt {
    /// Cancels `token` at the first Ctrl-C, SIGTERM or SIGHUP. Call it inside the runtime.
    pub(crate) fn listen(token: CancellationToken) -> Self {
        let code = Arc::new(AtomicU8::new(0));
        let seen = code.clone();
        let task = tokio::spawn(async move {
            let got = wait_for_signal().await;
            // Only the first signal counts; a second one while the run winds down is ignored.
            let _ = seen.compare_exchange(0, got, Ordering::SeqCst, Ordering::SeqCst);
            token.cancel();
        });
        Self { code, task }
    }

    /// The exit code of the signal that arrived, if one did.
    pub(crate) fn code(&self) -> Option<u8> {
        match self.code.load(Ordering::SeqCst) {
            0 => None,
            c => Some(c),
        }
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The exit code of the first of Ctrl-C, SIGTERM and SIGHUP to arrive. A signal whose handler
/// cannot be installed is not waited for (the others still are).
#[cfg(unix)]
async fn wait_for_signal() -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    let recv = |kind: SignalKind| async move {
        match signal(kind) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = recv(SignalKind::interrupt()) => exit::CANCELLED,
        () = recv(SignalKind::terminate()) => exit::TERMINATED,
        () = recv(SignalKind::hangup()) => exit::HANGUP,
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> u8 {
    match tokio::signal::ctrl_c().await {
        Ok(()) => exit::CANCELLED,
        Err(_) => std::future::pending().await,
    }
}

/// Lets the Docker sandboxes of this command remove finished runs' containers after their
/// results; the command calls [`wait_for_sandbox_cleanup`] before it exits.
pub(crate) fn sandbox_cleanup_before_exit() {
    #[cfg(feature = "docker")]
    nuvira_sandbox::remove_containers_in_background();
}

/// Waits (at most 30 s) for the removal of containers whose steps the cancellation dropped and
/// of finished runs' containers (removed in the background), so that exiting does not leave
/// them behind; says so when some removal did not finish.
pub(crate) async fn wait_for_sandbox_cleanup() {
    #[cfg(feature = "docker")]
    if !nuvira_sandbox::wait_for_removals(std::time::Duration::from_secs(30)).await {
        eprintln!(
            "warning: a sandbox container may be left behind: list them with `docker ps -a --filter label=nuvira.sandbox` and remove them with `docker rm -f ID`"
        );
    }
}
