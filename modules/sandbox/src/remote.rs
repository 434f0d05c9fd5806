//! Which Docker engine to talk to, and how: the local socket, or a remote engine over TCP
//! (with TLS) or SSH, configured as the `docker` CLI is.
//!
//! - `DOCKER_HOST` unset or `unix:///path`: the local socket.
//! - `DOCKER_HOST=tcp://HOST:PORT` (or `https://…`) with `DOCKER_TLS_VERIFY` set (to anything
//!   but empty or `0`): TLS, verifying the engine against `ca.pem` and authenticating with
//!   `cert.pem`/`key.pem`, all three in `DOCKER_CERT_PATH` (default `~/.docker`). Without
//!   `DOCKER_TLS_VERIFY`, `tcp://` is plain HTTP (as `docker` does: only on a trusted network).
//! - `DOCKER_HOST=ssh://[USER@]HOST[:PORT]`: through `ssh … HOST docker system dial-stdio`, as
//!   the `docker` CLI does (see docs/sandbox.md for why not bollard's transport): the keys,
//!   `~/.ssh/config` and `known_hosts` of the OpenSSH client decide, never a prompt
//!   (`BatchMode=yes`), and an unknown or changed host key is refused. The host needs the
//!   `docker` CLI on the user's `PATH`.
//!
//! The workspace is uploaded into the container, never bind-mounted, so runs work the same on a
//! remote engine; only the `nuvira-host` image's read-only toolchain mounts name paths on the
//! engine's machine, which must have the same toolchain (use a real image otherwise).

use bollard::{API_DEFAULT_VERSION, Docker};
use nuvira_api::SandboxError;
use std::path::{Path, PathBuf};

/// Seconds a request to the engine may take (bollard's default).
const REQUEST_TIMEOUT: u64 = 120;

/// How to reach a Docker engine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineConfig {
    /// The engine's address, as `DOCKER_HOST` gives it (`unix:///var/run/docker.sock`,
    /// `tcp://127.0.0.1:2376`, `ssh://user@host`).
    pub host: String,
    /// Use TLS and verify the engine (`DOCKER_TLS_VERIFY`; always for `https://`).
    pub tls_verify: bool,
    /// The folder with `ca.pem`, `cert.pem` and `key.pem` (`DOCKER_CERT_PATH`, default
    /// `~/.docker`).
    pub cert_path: PathBuf,
    /// The ssh client run for `ssh://` (default `ssh`, found on `PATH`).
    pub ssh_program: PathBuf,
    /// An ssh configuration file used instead of `~/.ssh/config` and `/etc/ssh/ssh_config`
    /// (`ssh -F`), for `ssh://`; `None` (the default) leaves ssh's own.
    pub ssh_config: Option<PathBuf>,
}

/// The local socket's address.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

impl EngineConfig {
    /// The engine `DOCKER_HOST`, `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` name.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables read through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let host = var("DOCKER_HOST")
            .filter(|h| !h.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_HOST.to_owned());
        let verify = var("DOCKER_TLS_VERIFY").is_some_and(|v| !v.is_empty() && v != "0");
        let cert_path = var("DOCKER_CERT_PATH")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".docker")))
            .unwrap_or_else(|| PathBuf::from(".docker"));
        Self {
            tls_verify: verify || host.starts_with("https://"),
            host,
            cert_path,
            ssh_program: PathBuf::from("ssh"),
            ssh_config: None,
        }
    }

    /// An engine at `host` over TLS with the certificates in `cert_path`.
    pub fn tls(host: impl Into<String>, cert_path: impl Into<PathBuf>) -> Self {
        Self {
            host: host.into(),
            tls_verify: true,
            cert_path: cert_path.into(),
            ssh_program: PathBuf::from("ssh"),
            ssh_config: None,
        }
    }

    /// An engine at `host` (`ssh://[USER@]HOST[:PORT]`) reached with ssh configured by
    /// `config` (`ssh -F`) instead of `~/.ssh/config`.
    pub fn ssh(host: impl Into<String>, config: Option<PathBuf>) -> Self {
        Self {
            host: host.into(),
            tls_verify: false,
            cert_path: PathBuf::from(".docker"),
            ssh_program: PathBuf::from("ssh"),
            ssh_config: config,
        }
    }

    /// Whether the engine is on this machine (a Unix socket).
    pub fn is_local(&self) -> bool {
        self.host.starts_with("unix://")
    }

    /// `tcp://127.0.0.1:2376 (TLS, certificates in DOCKER_CERT_PATH=/certs)`, for messages.
    pub fn describe(&self) -> String {
        if self.uses_tls() {
            format!(
                "{} (TLS, certificates in DOCKER_CERT_PATH={})",
                self.host,
                self.cert_path.display()
            )
        } else {
            self.host.clone()
        }
    }

    fn uses_tls(&self) -> bool {
        self.tls_verify && (self.host.starts_with("tcp://") || self.host.starts_with("https://"))
    }

    /// A client for this engine (no request is made yet).
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] for an address bollard cannot use, or TLS material that
    /// is missing or unreadable: the message names `DOCKER_CERT_PATH` and the file.
    pub fn client(&self) -> Result<Docker, SandboxError> {
        let host = self.host.as_str();
        let fail = |e: String| {
            SandboxError::Unavailable(format!(
                "connect to the Docker engine at {}: {e}",
                self.describe()
            ))
        };
        if self.uses_tls() {
            let (key, cert, ca) = self.tls_files()?;
            return Docker::connect_with_ssl(
                host,
                &key,
                &cert,
                &ca,
                REQUEST_TIMEOUT,
                API_DEFAULT_VERSION,
            )
            .map_err(|e| fail(format!("{e}; {}", self.cert_hint())));
        }
        let client = if host.starts_with("unix://") {
            Docker::connect_with_unix(host, REQUEST_TIMEOUT, API_DEFAULT_VERSION)
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            Docker::connect_with_http(host, REQUEST_TIMEOUT, API_DEFAULT_VERSION)
        } else if host.starts_with("ssh://") {
            let target =
                crate::ssh::Target::parse(host, self.ssh_program.clone(), self.ssh_config.clone())
                    .map_err(fail)?;
            crate::ssh::client(target, REQUEST_TIMEOUT)
        } else {
            return Err(fail(
                "DOCKER_HOST must be unix://PATH, tcp://HOST:PORT, https://HOST:PORT or ssh://[USER@]HOST".into(),
            ));
        };
        client.map_err(|e| {
            SandboxError::Unavailable(format!(
                "no Docker engine answers at {} ({e}): {}",
                self.describe(),
                crate::DOCKER_HINT
            ))
        })
    }

    /// `key.pem`, `cert.pem`, `ca.pem` of [`cert_path`](Self::cert_path), each checked to be
    /// readable.
    fn tls_files(&self) -> Result<(PathBuf, PathBuf, PathBuf), SandboxError> {
        let file = |name: &str| -> Result<PathBuf, SandboxError> {
            let path = self.cert_path.join(name);
            match std::fs::File::open(&path) {
                Ok(_) => Ok(path),
                Err(e) => Err(SandboxError::Unavailable(format!(
                    "connect to the Docker engine at {} over TLS (DOCKER_TLS_VERIFY is set): read {}: {e}; DOCKER_CERT_PATH must name a folder with ca.pem (the CA that signed the engine's certificate), cert.pem and key.pem (a client certificate the engine's --tlscacert trusts)",
                    self.host,
                    path.display()
                ))),
            }
        };
        Ok((file("key.pem")?, file("cert.pem")?, file("ca.pem")?))
    }

    /// Appended to errors of a TLS or ssh engine (empty for the others, which get
    /// [`DOCKER_HINT`](crate::DOCKER_HINT)).
    pub(crate) fn cert_hint(&self) -> String {
        if self.host.starts_with("ssh://") {
            let manual = crate::ssh::Target::parse(&self.host, self.ssh_program.clone(), None)
                .map_or_else(|_| "ssh HOST docker version".to_owned(), |t| t.manual());
            format!(
                "check that `{manual}` works without a prompt (Nuvira runs ssh with BatchMode=yes and your ~/.ssh/config, keys and known_hosts)"
            )
        } else if self.uses_tls() {
            format!(
                "check the TLS material in DOCKER_CERT_PATH={}: ca.pem must be the CA that signed the engine's certificate (for this host name or IP), cert.pem and key.pem a client certificate signed by the CA the engine trusts (--tlscacert)",
                self.cert_path.display()
            )
        } else {
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_environment_is_read_as_the_docker_cli_reads_it() {
        let local = EngineConfig::from_vars(vars(&[("HOME", "/home/u")]));
        assert_eq!(local.host, DEFAULT_HOST);
        assert!(local.is_local() && !local.tls_verify);
        assert_eq!(local.cert_path, Path::new("/home/u/.docker"));

        let tls = EngineConfig::from_vars(vars(&[
            ("DOCKER_HOST", "tcp://127.0.0.1:2376"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("DOCKER_CERT_PATH", "/certs"),
        ]));
        assert!(tls.tls_verify && !tls.is_local());
        assert!(tls.describe().contains("DOCKER_CERT_PATH=/certs"));

        let plain = EngineConfig::from_vars(vars(&[
            ("DOCKER_HOST", "tcp://127.0.0.1:2375"),
            ("DOCKER_TLS_VERIFY", "0"),
        ]));
        assert!(!plain.tls_verify);
        let https = EngineConfig::from_vars(vars(&[("DOCKER_HOST", "https://h:2376")]));
        assert!(https.tls_verify);
    }

    #[test]
    fn missing_tls_material_names_docker_cert_path_and_the_file() {
        let empty = tempfile::tempdir().unwrap();
        let config = EngineConfig::tls("tcp://127.0.0.1:1", empty.path());
        let err = config.client().unwrap_err().to_string();
        assert!(err.contains("DOCKER_CERT_PATH"), "{err}");
        assert!(err.contains("key.pem"), "{err}");
        assert!(matches!(config.client(), Err(SandboxError::Unavailable(_))));
    }

    #[test]
    fn ssh_and_unknown_schemes() {
        let ssh = EngineConfig::from_vars(vars(&[("DOCKER_HOST", "ssh://nuvira@127.0.0.1")]));
        assert!(ssh.client().is_ok(), "bollard's ssh transport is built in");
        let bad = EngineConfig::from_vars(vars(&[("DOCKER_HOST", "ftp://x")]));
        let err = bad.client().unwrap_err().to_string();
        assert!(err.contains("ssh://"), "{err}");
    }
}
