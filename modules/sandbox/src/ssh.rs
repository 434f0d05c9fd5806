//! `DOCKER_HOST=ssh://[USER@]HOST[:PORT]`: the engine's API through
//! `ssh … HOST docker system dial-stdio`, as the `docker` CLI reaches an engine over ssh.
//!
//! Why our own transport and not bollard's `ssh` feature: bollard's starts a detached OpenSSH
//! control master per connection with `ControlPersist=yes` (left running when the process is
//! killed), accepts unknown host keys (`StrictHostKeyChecking=accept-new`), has no connect
//! timeout, and reports every failure as "client error (Connect)". Here each connection is one
//! `ssh` child (killed with the connection), run with `BatchMode=yes` (never a prompt) and a
//! connect timeout, and with the user's own `~/.ssh/config` and `known_hosts` deciding the
//! rest; when it fails, its stderr is read into one line that names the host and says what to
//! do (a changed or unknown host key, no accepted key, nothing listening, no `docker` there).

use bollard::{API_DEFAULT_VERSION, BollardRequest, Docker};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use nuvira_api::text::escape_control;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Seconds `ssh` may take to reach the host and exchange banners (`ConnectTimeout`).
const CONNECT_TIMEOUT_SECS: u64 = 10;
/// How long a failed request waits for the failed `ssh` to exit and explain itself.
const EXPLAIN_WAIT: Duration = Duration::from_secs(2);
/// How long a connection we close has to end on its own before its `ssh` is killed.
const CLOSE_GRACE: Duration = Duration::from_millis(300);
/// The most of a failed `ssh`'s stderr that is kept.
const STDERR_TAIL: usize = 16 * 1024;
/// The host name in the requests (never resolved; the docker CLI uses the same one).
const DUMMY_HOST: &str = "http://api.moby.localhost";

/// Where `ssh` connects: the parts of `ssh://[USER@]HOST[:PORT]`, and how `ssh` is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    user: Option<String>,
    host: String,
    port: Option<u16>,
    program: PathBuf,
    config: Option<PathBuf>,
}

impl Target {
    /// Parses `ssh://[USER@]HOST[:PORT]` (an IPv6 host in brackets), as the docker CLI does:
    /// no path, no password.
    pub(crate) fn parse(
        addr: &str,
        program: PathBuf,
        config: Option<PathBuf>,
    ) -> Result<Self, String> {
        let usage = "DOCKER_HOST=ssh://[USER@]HOST[:PORT], with no path";
        let rest = addr
            .strip_prefix("ssh://")
            .ok_or_else(|| usage.to_owned())?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) || rest.chars().any(char::is_control) {
            return Err(format!(
                "{usage}: {addr:?} has a path or a control character"
            ));
        }
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((user, hostport)) => (Some(user), hostport),
            None => (None, rest),
        };
        if let Some(user) = user
            && (user.is_empty() || user.contains(':') || user.starts_with('-'))
        {
            return Err(format!(
                "{usage}: the user in {addr:?} must be a plain name (no password: ssh uses keys)"
            ));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, tail) = v6
                .split_once(']')
                .ok_or_else(|| format!("{usage}: {addr:?} has no closing ']'"))?;
            (host, tail.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.starts_with('-') || host.contains(char::is_whitespace) {
            return Err(format!("{usage}: {addr:?} names no host"));
        }
        // A host name or an address, nothing a shell or a `ProxyCommand %h` could read as
        // more (OpenSSH before 9.6 passed such names on: CVE-2023-51385).
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '%'))
        {
            return Err(format!(
                "{usage}: the host in {addr:?} has characters a host name cannot have (letters, digits, `.`, `-`, `_`, and `:` in an IPv6 address)"
            ));
        }
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| format!("{usage}: the port in {addr:?} is not a number 1-65535"))
            })
            .transpose()?;
        Ok(Self {
            user: user.map(str::to_owned),
            host: host.to_owned(),
            port,
            program,
            config,
        })
    }

    /// `root@127.0.0.1 port 2222`, for messages.
    fn describe(&self) -> String {
        let mut s = match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        };
        if let Some(p) = self.port {
            s.push_str(&format!(" port {p}"));
        }
        s
    }

    /// The command a user can try by hand: `ssh -p 2222 root@127.0.0.1 docker version`.
    pub(crate) fn manual(&self) -> String {
        let mut s = String::from("ssh ");
        if let Some(p) = self.port {
            s.push_str(&format!("-p {p} "));
        }
        if let Some(u) = &self.user {
            s.push_str(&format!("{u}@"));
        }
        s.push_str(&self.host);
        s.push_str(" docker version");
        s
    }

    /// The host as `known_hosts` and `ssh-keygen -R` name it: `[127.0.0.1]:2222`, or the bare
    /// host on port 22.
    fn known_hosts_name(&self) -> String {
        match self.port {
            Some(p) if p != 22 => format!("[{}]:{p}", self.host),
            _ => self.host.clone(),
        }
    }

    /// `ssh [-F CONFIG] -o BatchMode=yes -o ConnectTimeout=10 -T [-l USER] [-p PORT] -- HOST
    /// docker system dial-stdio`.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        if let Some(config) = &self.config {
            cmd.arg("-F").arg(config);
        }
        cmd.args(["-o", "BatchMode=yes", "-o"])
            .arg(format!("ConnectTimeout={CONNECT_TIMEOUT_SECS}"))
            .arg("-T");
        if let Some(u) = &self.user {
            cmd.arg("-l").arg(u);
        }
        if let Some(p) = self.port {
            cmd.arg("-p").arg(p.to_string());
        }
        cmd.arg("--")
            .arg(&self.host)
            .args(["docker", "system", "dial-stdio"]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}

/// The one-line reason a connection failed, from the failed `ssh`'s stderr and exit code.
pub(crate) fn diagnose(target: &Target, stderr: &str, code: Option<i32>) -> String {
    let dest = target.describe();
    let last = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| {
            !l.is_empty()
                && !l.starts_with("Warning: Permanently added")
                && !l.chars().all(|c| c == '@')
        })
        .unwrap_or("");
    let last = escape_control(last);
    let manual = target.manual();
    let known = target.known_hosts_name();
    if stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || stderr.contains("has changed and you have requested strict checking")
    {
        format!(
            "the host key {dest} sent is not the one known_hosts has for {known} (ssh: host key verification failed): if that host was reinstalled, remove the old key with `ssh-keygen -R '{known}'` and check and accept the new one with `{manual}`; otherwise someone may be intercepting the connection"
        )
    } else if stderr.contains("Host key verification failed") {
        format!(
            "the host key of {dest} is not in known_hosts (ssh: host key verification failed; Nuvira never accepts one on its own): check and accept it once with `{manual}`"
        )
    } else if stderr.contains("Permission denied") {
        format!(
            "{dest} accepted none of the keys ssh offered ({last}): add your public key to that user's ~/.ssh/authorized_keys there, or name the key with IdentityFile in ~/.ssh/config or load it with ssh-add (no password prompt is possible: ssh runs with BatchMode=yes)"
        )
    } else if stderr.contains("Connection refused") {
        format!(
            "nothing accepts ssh connections at {dest} (connection refused): start sshd there, or fix the host or port in DOCKER_HOST"
        )
    } else if stderr.contains("timed out") {
        format!(
            "{dest} did not answer ssh within {CONNECT_TIMEOUT_SECS} s ({last}): check the host and port in DOCKER_HOST and that nothing between blocks ssh"
        )
    } else if stderr.contains("Could not resolve hostname") {
        format!("the host of {dest} is unknown ({last}): fix the host in DOCKER_HOST")
    } else if code == Some(127) || stderr.contains("command not found") {
        format!(
            "{dest} has no docker CLI on the PATH of that user ({last}): install it there; Nuvira talks to that engine through `docker system dial-stdio`"
        )
    } else {
        let code = code.map_or_else(|| "killed".to_owned(), |c| format!("exit {c}"));
        let detail = if last.is_empty() {
            code
        } else {
            format!("{code}: {last}")
        };
        format!("ssh to {dest} failed ({detail}): check that `{manual}` works without a prompt")
    }
}

/// Failed connections, reported by the task watching each `ssh`, read by the request that
/// failed.
#[derive(Default)]
struct Failures {
    last: Mutex<Option<(Instant, String)>>,
    notify: tokio::sync::Notify,
}

impl Failures {
    fn report(&self, message: String) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), message));
        self.notify.notify_waiters();
    }

    /// The failure reported at or after `since`, waiting for it up to [`EXPLAIN_WAIT`].
    async fn since(&self, since: Instant) -> Option<String> {
        let deadline = tokio::time::Instant::now() + EXPLAIN_WAIT;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
                if last.as_ref().is_some_and(|(at, _)| *at >= since) {
                    return last.take().map(|(_, m)| m);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// Opens connections: one `ssh` child each.
#[derive(Clone)]
struct Connector {
    target: Arc<Target>,
    failures: Arc<Failures>,
}

impl tower_service::Service<hyper::Uri> for Connector {
    type Response = Stream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        let target = Arc::clone(&self.target);
        let failures = Arc::clone(&self.failures);
        Box::pin(async move {
            let mut child = target.command().spawn().map_err(|e| {
                let message = format!(
                    "run {} to reach {}: {e}: install the OpenSSH client (apt-get install openssh-client)",
                    target.program.display(),
                    target.describe()
                );
                failures.report(message.clone());
                io::Error::new(e.kind(), message)
            })?;
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(io::Error::other("ssh was started without its pipes"));
            };
            let (closed, on_close) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(watch(child, stderr, on_close, target, failures));
            Ok(Stream {
                stdin: TokioIo::new(stdin),
                stdout: TokioIo::new(stdout),
                _closed: closed,
            })
        })
    }
}

/// Waits for `child` to end: on its own (a failure is reported with its stderr) or because
/// its connection was dropped (it then has [`CLOSE_GRACE`] to end before it is killed).
async fn watch(
    mut child: Child,
    mut stderr: tokio::process::ChildStderr,
    on_close: tokio::sync::oneshot::Receiver<()>,
    target: Arc<Target>,
    failures: Arc<Failures>,
) {
    let tail = tokio::spawn(async move {
        let mut kept = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&chunk[..n]);
            if kept.len() > STDERR_TAIL {
                kept.drain(..kept.len() - STDERR_TAIL);
            }
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    let status = tokio::select! {
        status = child.wait() => status.ok(),
        _ = on_close => match tokio::time::timeout(CLOSE_GRACE, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.kill().await;
                return;
            }
        },
    };
    if let Some(status) = status
        && !status.success()
    {
        let stderr = tokio::time::timeout(EXPLAIN_WAIT, tail)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        failures.report(diagnose(&target, &stderr, status.code()));
    }
}

/// One connection: the pipes of its `ssh`; dropping it ends the `ssh`.
struct Stream {
    stdin: TokioIo<ChildStdin>,
    stdout: TokioIo<ChildStdout>,
    _closed: tokio::sync::oneshot::Sender<()>,
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdout).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stdin).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdin).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stdin).poll_shutdown(cx)
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// A client for the engine at `target`: each connection an `ssh` child (see the module docs).
pub(crate) fn client(target: Target, timeout: u64) -> Result<Docker, bollard::errors::Error> {
    let failures = Arc::new(Failures::default());
    let connector = Connector {
        target: Arc::new(target),
        failures: Arc::clone(&failures),
    };
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector),
    );
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = Arc::clone(&client);
            let failures = Arc::clone(&failures);
            async move {
                let started = Instant::now();
                match client.request(req).await {
                    Ok(response) => Ok(response),
                    Err(e) => Err(match failures.since(started).await {
                        Some(message) => bollard::errors::Error::IOError {
                            err: io::Error::other(message),
                        },
                        None => bollard::errors::Error::from(e),
                    }),
                }
            }
        },
        Some(DUMMY_HOST),
        timeout,
        API_DEFAULT_VERSION,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(addr: &str) -> Result<Target, String> {
        Target::parse(addr, PathBuf::from("ssh"), None)
    }

    #[test]
    fn addresses_parse_as_the_docker_cli_parses_them() {
        let t = parse("ssh://root@127.0.0.1:2222").unwrap();
        assert_eq!(
            (t.user.as_deref(), t.host.as_str(), t.port),
            (Some("root"), "127.0.0.1", Some(2222))
        );
        assert_eq!(t.known_hosts_name(), "[127.0.0.1]:2222");
        assert_eq!(t.manual(), "ssh -p 2222 root@127.0.0.1 docker version");
        let t = parse("ssh://build.example.org/").unwrap();
        assert_eq!((t.user.as_deref(), t.port), (None, None));
        assert_eq!(t.known_hosts_name(), "build.example.org");
        let t = parse("ssh://me@[::1]:22").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", Some(22)));
        assert_eq!(t.known_hosts_name(), "::1");
    }

    #[test]
    fn hostile_addresses_are_refused_before_ssh_runs() {
        for addr in [
            "ssh://",
            "ssh://-oProxyCommand=touch%20x",
            "ssh://-oProxyCommand=x@host",
            "ssh://u:password@host",
            "ssh://host:99999",
            "ssh://host:0",
            "ssh://host/var/run/docker.sock",
            "ssh://ho st",
            "ssh://host\n",
            "ssh://[::1",
            "ssh://host;touch%20x",
            "ssh://$(touch x)",
            "ssh://u@`id`",
            "ssh://ho'st",
        ] {
            let err = parse(addr).unwrap_err();
            assert!(err.contains("ssh://[USER@]HOST[:PORT]"), "{addr:?}: {err}");
        }
    }

    #[test]
    fn the_command_is_the_docker_clis_with_batch_mode_and_a_timeout() {
        let t = Target::parse(
            "ssh://root@127.0.0.1:2222",
            PathBuf::from("/usr/bin/ssh"),
            Some(PathBuf::from("/tmp/cfg")),
        )
        .unwrap();
        let cmd = t.command();
        let std = cmd.as_std();
        let args: Vec<_> = std.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(std.get_program(), "/usr/bin/ssh");
        assert_eq!(
            args.join(" "),
            "-F /tmp/cfg -o BatchMode=yes -o ConnectTimeout=10 -T -l root -p 2222 -- 127.0.0.1 docker system dial-stdio"
        );
    }

    #[test]
    fn an_unknown_failure_keeps_ssh_s_last_line_escaped() {
        let t = parse("ssh://root@h").unwrap();
        let m = diagnose(&t, "debug\nsomething \x1b[31mbroke\n", Some(255));
        assert!(
            m.contains("ssh to root@h failed (exit 255: something \\x1b[31mbroke)"),
            "{m}"
        );
        assert!(!m.contains('\x1b') && !m.contains('\n'), "{m}");
    }
}
