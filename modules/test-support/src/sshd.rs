//! A private OpenSSH server on loopback, for the `DOCKER_HOST=ssh://` tests.
//!
//! [`Sshd::start`] makes a host key and a client key with `ssh-keygen` in a temporary folder
//! and runs `/usr/sbin/sshd -D -e -f CONFIG` listening on `127.0.0.1` only, on a free port,
//! accepting only that client key, for the current user. The client side never reads the real
//! `~/.ssh`: [`Sshd::client_config`] writes an ssh configuration (`ssh -F`) naming the key and
//! a known_hosts of its own, and [`Sshd::ssh_on_path`] a folder whose `ssh` runs the real one
//! with that configuration (OpenSSH finds `~` through the password database, not `$HOME`, so a
//! private `$HOME` alone would not keep it away from the real `~/.ssh`).
//!
//! The server is killed when the value is dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where the Debian package `openssh-server` puts the server.
pub const SSHD: &str = "/usr/sbin/sshd";

/// What the client's known_hosts says about the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKey {
    /// The server's real host key.
    Right,
    /// Another key for the same host and port (a "changed" host key).
    Wrong,
    /// Nothing: the host is unknown.
    Unknown,
}

/// Which key the client offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKey {
    /// The key the server accepts.
    Authorized,
    /// A key the server has never seen.
    Other,
}

/// A running private sshd (see the module docs).
pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    no_docker_port: u16,
    user: String,
}

fn keygen(path: &Path) -> Result<(), String> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "nuvira-test", "-f"])
        .arg(path)
        .output()
        .map_err(|e| format!("ssh-keygen is not installed ({e})"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ssh-keygen failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A TCP port on 127.0.0.1 nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

fn current_user() -> Result<String, String> {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .map_err(|e| format!("id -un: {e}"))?;
    let user = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if user.is_empty() {
        Err("the current user has no name".into())
    } else {
        Ok(user)
    }
}

impl Sshd {
    /// Starts the server and waits (at most 20 s) until it listens.
    ///
    /// # Errors
    /// Why it cannot run here (no sshd or ssh-keygen, or sshd refused to start), for
    /// [`require`](crate::env::require) with [`Requirement::Sshd`](crate::env::Requirement::Sshd).
    pub fn start() -> Result<Self, String> {
        if !Path::new(SSHD).is_file() {
            return Err(format!("{SSHD} is missing"));
        }
        let user = current_user()?;
        let dir = tempfile::Builder::new()
            .prefix("nuvira-sshd-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let d = dir.path();
        keygen(&d.join("host_key"))?;
        keygen(&d.join("other_host_key"))?;
        keygen(&d.join("client_key"))?;
        keygen(&d.join("other_client_key"))?;
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys"))
            .map_err(|e| e.to_string())?;
        // sshd refuses to start without its privilege separation folder (the package's
        // service unit makes it at boot).
        if crate::env::is_root() {
            let _ = std::fs::create_dir_all("/run/sshd");
        }
        let port = free_port();
        let no_docker_port = free_port();
        let config = format!(
            "Port {port}\nPort {no_docker_port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile none\n\
             AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             PermitRootLogin prohibit-password\nStrictModes no\nAllowUsers {user}\n\
             AllowTcpForwarding no\nX11Forwarding no\nPrintMotd no\nLogLevel INFO\n\
             Match LocalPort {no_docker_port}\n  SetEnv PATH=/nonexistent\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).map_err(|e| e.to_string())?;
        let mut child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start {SSHD}: {e}"))?;
        // It says "Server listening on 127.0.0.1 port N." once it listens on each port; its
        // later log lines are drained in the background.
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut listening = 0;
            let mut lines = BufReader::new(stderr).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if line.contains("Server listening on") {
                    listening += 1;
                    if listening == 2 {
                        let _ = tx.send(Ok(()));
                        break;
                    }
                }
                seen.push(line);
            }
            let _ = tx.send(Err(seen.join("\n")));
            for _ in lines {}
        });
        let mut sshd = Self {
            child,
            dir,
            port,
            no_docker_port,
            user,
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => Ok(sshd),
            Ok(Err(log)) => {
                let _ = sshd.child.wait();
                Err(format!("{SSHD} did not start: {log}"))
            }
            Err(_) => Err(format!("{SSHD} did not listen within 20 s")),
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ssh://USER@127.0.0.1:PORT`, for `DOCKER_HOST`.
    pub fn docker_host(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}", self.user, self.port)
    }

    /// The same server on another port, where a session's `PATH` has no `docker`:
    /// `ssh://USER@127.0.0.1:PORT`.
    pub fn docker_host_without_docker(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}", self.user, self.no_docker_port)
    }

    /// An ssh configuration file (`ssh -F`) for this server: `known_hosts` as `host_key`
    /// says, offering only `key`, no agent, nothing from `/etc/ssh` or the real `~/.ssh`.
    pub fn client_config(&self, host_key: HostKey, key: ClientKey) -> PathBuf {
        let d = self.dir.path();
        let name = format!("client-{host_key:?}-{key:?}");
        let known = d.join(format!("{name}.known_hosts"));
        let pub_key = |file: &str| {
            let text = std::fs::read_to_string(d.join(file)).expect("read a public host key");
            let mut parts = text.split_whitespace();
            let (kind, key) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            format!(
                "[127.0.0.1]:{} {kind} {key}\n[127.0.0.1]:{} {kind} {key}\n",
                self.port, self.no_docker_port
            )
        };
        let known_text = match host_key {
            HostKey::Right => pub_key("host_key.pub"),
            HostKey::Wrong => pub_key("other_host_key.pub"),
            HostKey::Unknown => String::new(),
        };
        std::fs::write(&known, known_text).expect("write known_hosts");
        let identity = match key {
            ClientKey::Authorized => d.join("client_key"),
            ClientKey::Other => d.join("other_client_key"),
        };
        let config = d.join(format!("{name}.config"));
        std::fs::write(
            &config,
            format!(
                "Host *\n  UserKnownHostsFile {}\n  GlobalKnownHostsFile /dev/null\n  \
                 IdentityFile {}\n  IdentitiesOnly yes\n  IdentityAgent none\n  \
                 StrictHostKeyChecking yes\n  UpdateHostKeys no\n  ControlMaster no\n  \
                 ControlPath none\n  LogLevel ERROR\n",
                known.display(),
                identity.display()
            ),
        )
        .expect("write the ssh config");
        config
    }

    /// A folder with an `ssh` that runs the real one with
    /// [`client_config`](Self::client_config)`(host_key, key)`: put it first on a child's
    /// `PATH`.
    pub fn ssh_on_path(&self, host_key: HostKey, key: ClientKey) -> PathBuf {
        let bin = self.dir.path().join(format!("bin-{host_key:?}-{key:?}"));
        std::fs::create_dir_all(&bin).expect("make the bin folder");
        let config = self.client_config(host_key, key);
        let real = ["/usr/bin/ssh", "/usr/local/bin/ssh", "/bin/ssh"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or("/usr/bin/ssh");
        let script = bin.join("ssh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\nexec {real} -F '{}' \"$@\"\n", config.display()),
        )
        .expect("write the ssh wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("make the ssh wrapper executable");
        bin
    }

    /// `PATH` with [`ssh_on_path`](Self::ssh_on_path)`(host_key, key)` first.
    pub fn path_with_ssh(&self, host_key: HostKey, key: ClientKey) -> std::ffi::OsString {
        let mut dirs = vec![self.ssh_on_path(host_key, key)];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        std::env::join_paths(dirs).expect("a PATH")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
