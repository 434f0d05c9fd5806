//! What a client of `nuvira mcp` may ask for: paths inside the repository the server was
//! started on, and sandboxes no wider than its start flags.
//!
//! The server's flags are the most a client gets. A client may narrow them (ask for Docker when
//! the server runs tests locally, a lower memory limit, no network) but never widen them: a
//! `local` sandbox when the server was started with `--sandbox docker`, more memory, a network,
//! a host mount or another image are refused with a message that names the flag.

use serde_json::{Map, Value};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The widest sandbox a client may have: the server's `--sandbox`, `--image`, `--mount`,
/// `--network` and limit flags.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxPolicy {
    /// `auto`, `local`, `bwrap` or `docker`.
    pub sandbox: SandboxChoice,
    /// The Docker image steps use (the server's `--image`), `None` for the default.
    pub image: Option<String>,
    /// Host mounts (the server's `--mount`), as `HOST:CONTAINER[:ro]`.
    pub mounts: Vec<String>,
    /// The widest network: `none` (the default), `bridge` or `host`.
    pub network: String,
    /// Memory limit in bytes.
    pub memory_bytes: u64,
    /// CPUs.
    pub cpus: f64,
    /// Processes.
    pub pids: u32,
    /// Wall-clock limit of one test or command run.
    pub timeout: Duration,
}

/// A sandbox kind, ordered from the widest (`local`: a copy on this machine) to the narrowest
/// (`docker`). `auto` is wider than `bwrap`: it may fall back to `local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SandboxChoice {
    /// A temporary copy of the repository on this machine.
    Local,
    /// Docker when an engine answers and the image exists, else bubblewrap where it works,
    /// else local.
    Auto,
    /// A bubblewrap (`bwrap`) sandbox: namespaces on this machine, no network, the
    /// repository copy the only writable folder.
    Bwrap,
    /// A Docker container.
    Docker,
}

impl SandboxChoice {
    /// The name plans and flags use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Auto => "auto",
            Self::Bwrap => "bwrap",
            Self::Docker => "docker",
        }
    }

    /// Parses `auto`, `local`, `bwrap` (or `bubblewrap`) or `docker`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "local" => Some(Self::Local),
            "auto" => Some(Self::Auto),
            "bwrap" | "bubblewrap" => Some(Self::Bwrap),
            "docker" => Some(Self::Docker),
            _ => None,
        }
    }
}

impl Default for SandboxPolicy {
    /// `auto`, the default image, no mounts, no network, 512 MiB, 1 CPU, 256 processes, 300 s:
    /// the defaults of `nuvira test`.
    fn default() -> Self {
        let limits = nuvira_api::ResourceLimits::default();
        Self {
            sandbox: SandboxChoice::Auto,
            image: None,
            mounts: Vec::new(),
            network: "none".into(),
            memory_bytes: limits.memory_bytes,
            cpus: limits.cpus,
            pids: limits.pids,
            timeout: limits.timeout,
        }
    }
}

/// A request the policy refuses, or a path outside the repository.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

fn network_rank(n: &str) -> u8 {
    match n {
        "none" => 0,
        "bridge" => 1,
        _ => 2,
    }
}

impl SandboxPolicy {
    /// Checks a `test` or `execute` config (the keys of a plan step's `config`) against the
    /// policy and fills in what the client left out, so the step runs exactly in the
    /// server's sandbox or a narrower one.
    ///
    /// # Errors
    /// A [`PolicyError`] naming the key the client may not widen and the server flag that
    /// would allow it.
    pub fn confine(&self, config: &mut Map<String, Value>, what: &str) -> Result<(), PolicyError> {
        let refuse = |msg: String| Err(PolicyError(format!("{what}: {msg}")));
        match config.get("sandbox").and_then(Value::as_str) {
            None => {
                config.insert("sandbox".into(), Value::from(self.sandbox.name()));
            }
            Some(asked) => match SandboxChoice::parse(asked) {
                None => {
                    return refuse(format!(
                        "`sandbox: {asked}` is not a sandbox: use auto, local, bwrap or docker"
                    ));
                }
                Some(kind) if kind < self.sandbox => {
                    return refuse(format!(
                        "`sandbox: {asked}` is wider than this server allows (it was started with --sandbox {}); ask for {} or start `nuvira mcp --sandbox {asked}`",
                        self.sandbox.name(),
                        self.sandbox.name()
                    ));
                }
                Some(_) => {}
            },
        }
        match config.get("image").and_then(Value::as_str) {
            Some(image) if Some(image) != self.image.as_deref() => {
                return refuse(format!(
                    "`image: {image}`: the image is fixed when the server starts (`nuvira mcp --image IMAGE`)"
                ));
            }
            Some(_) => {}
            None => {
                if let Some(image) = &self.image {
                    config.insert("image".into(), Value::from(image.clone()));
                }
            }
        }
        match config.get("mounts") {
            Some(Value::Array(m)) if !m.is_empty() => {
                return refuse(
                    "`mounts`: host mounts are fixed when the server starts (`nuvira mcp --mount HOST:CONTAINER`)".into(),
                );
            }
            _ => {
                if !self.mounts.is_empty() {
                    config.insert("mounts".into(), Value::from(self.mounts.clone()));
                }
            }
        }
        match config.get("network").and_then(Value::as_str) {
            Some(net) if network_rank(net) > network_rank(&self.network) => {
                return refuse(format!(
                    "`network: {net}` is wider than this server allows (--network {}); start `nuvira mcp --network {net}` to allow it",
                    self.network
                ));
            }
            Some(_) => {}
            None => {
                // `none` is the runner's default; the local sandbox warns about a key it
                // cannot apply, so only a wider server network is written out.
                if self.network != "none" {
                    config.insert("network".into(), Value::from(self.network.clone()));
                }
            }
        }
        // The limits: parsed the way the runner parses them, compared with the server's.
        let parsed = nuvira_runner::TestConfig::from_value(&Value::Object(config.clone()))
            .map_err(|e| PolicyError(format!("{what}: {e}")))?;
        let sb = &parsed.sandbox;
        if let Some(m) = sb.memory
            && m > self.memory_bytes
        {
            return refuse(format!(
                "`memory` ({m} bytes) is more than this server allows ({} bytes, --memory)",
                self.memory_bytes
            ));
        }
        if let Some(c) = sb.cpus
            && c > self.cpus
        {
            return refuse(format!(
                "`cpus` ({c}) is more than this server allows ({}, --cpus)",
                self.cpus
            ));
        }
        if let Some(p) = sb.pids
            && p > self.pids
        {
            return refuse(format!(
                "`pids` ({p}) is more than this server allows ({}, --pids)",
                self.pids
            ));
        }
        if let Some(t) = sb.timeout
            && t > self.timeout
        {
            return refuse(format!(
                "`timeout` ({}s) is longer than this server allows ({}s, --timeout)",
                t.as_secs_f64(),
                self.timeout.as_secs_f64()
            ));
        }
        // The server's limits where the client gave none; the runner's defaults need not be
        // written (the local sandbox warns about limits it cannot apply).
        let defaults = nuvira_api::ResourceLimits::default();
        if sb.memory.is_none() && self.memory_bytes != defaults.memory_bytes {
            config.insert("memory".into(), Value::from(self.memory_bytes));
        }
        if sb.cpus.is_none() && self.cpus != defaults.cpus {
            config.insert("cpus".into(), Value::from(self.cpus));
        }
        if sb.pids.is_none() && self.pids != defaults.pids {
            config.insert("pids".into(), Value::from(self.pids));
        }
        if sb.timeout.is_none() && self.timeout != defaults.timeout {
            config.insert(
                "timeout".into(),
                Value::from(format!("{}ms", self.timeout.as_millis())),
            );
        }
        Ok(())
    }
}

/// Resolves a path a client gave (relative to the repository, or absolute inside it) to an
/// absolute path inside `repo`, following symbolic links the way the operating system will.
///
/// # Errors
/// A [`PolicyError`] when the path leaves the repository (`..`, an absolute path elsewhere, a
/// symbolic link pointing out) or does not exist.
pub fn confine_path(repo: &Path, asked: &str, what: &str) -> Result<PathBuf, PolicyError> {
    if asked.is_empty() {
        return Err(PolicyError(format!("{what}: the path is empty")));
    }
    let given = Path::new(asked);
    let joined = if given.is_absolute() {
        given.to_owned()
    } else {
        if given
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(PolicyError(format!(
                "{what}: `{asked}` leaves the repository (`..`); give a path inside `{}`",
                repo.display()
            )));
        }
        repo.join(given)
    };
    let real = std::fs::canonicalize(&joined).map_err(|e| {
        PolicyError(format!(
            "{what}: `{asked}` cannot be opened in `{}`: {}",
            repo.display(),
            io_reason(&e)
        ))
    })?;
    if !real.starts_with(repo) {
        return Err(PolicyError(format!(
            "{what}: `{asked}` is outside the repository `{}`; this server only reads and writes inside it",
            repo.display()
        )));
    }
    Ok(real)
}

/// An I/O error in words, without the `(os error N)` suffix.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn confine(policy: &SandboxPolicy, v: Value) -> Result<Map<String, Value>, PolicyError> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        policy.confine(&mut m, "run_tests").map(|()| m)
    }

    #[test]
    fn a_client_cannot_widen_a_docker_server_to_local() {
        let p = SandboxPolicy {
            sandbox: SandboxChoice::Docker,
            ..Default::default()
        };
        let e = confine(&p, json!({"sandbox": "local"})).unwrap_err();
        assert!(e.0.contains("--sandbox docker"), "{e}");
        assert!(confine(&p, json!({"sandbox": "auto"})).is_err());
        let ok = confine(&p, json!({})).unwrap();
        assert_eq!(ok["sandbox"], "docker");
    }

    #[test]
    fn a_local_server_lets_a_client_ask_for_docker() {
        let p = SandboxPolicy {
            sandbox: SandboxChoice::Local,
            ..Default::default()
        };
        assert_eq!(
            confine(&p, json!({"sandbox": "docker"})).unwrap()["sandbox"],
            "docker"
        );
    }

    #[test]
    fn a_bwrap_server_allows_bwrap_and_docker_but_not_auto_or_local() {
        let p = SandboxPolicy {
            sandbox: SandboxChoice::Bwrap,
            ..SandboxPolicy::default()
        };
        let filled = confine(&p, json!({})).unwrap();
        assert_eq!(filled["sandbox"], "bwrap");
        assert!(confine(&p, json!({"sandbox": "bubblewrap"})).is_ok());
        assert!(confine(&p, json!({"sandbox": "docker"})).is_ok());
        for wider in ["auto", "local"] {
            let e = confine(&p, json!({ "sandbox": wider })).unwrap_err();
            assert!(
                e.0.contains(
                    "is wider than this server allows (it was started with --sandbox bwrap)"
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn limits_network_mounts_and_images_cannot_grow() {
        let p = SandboxPolicy::default();
        for bad in [
            // Over the defaults (4 GiB, every core of the machine, 4096 processes).
            json!({"memory": "64g"}),
            json!({"cpus": 4096}),
            json!({"pids": 10000}),
            json!({"timeout": "1h"}),
            json!({"network": "host"}),
            json!({"mounts": ["/:/host"]}),
            json!({"image": "alpine"}),
        ] {
            assert!(confine(&p, bad.clone()).is_err(), "{bad} was accepted");
        }
        let ok = confine(&p, json!({"memory": "128m", "timeout": "10s"})).unwrap();
        assert_eq!(ok["memory"], "128m");
        let tight = SandboxPolicy {
            pids: 64,
            ..Default::default()
        };
        assert_eq!(confine(&tight, json!({})).unwrap()["pids"], 64);
    }

    #[test]
    fn paths_stay_inside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let repo = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(repo.join("a.yaml"), "steps: []").unwrap();
        assert_eq!(
            confine_path(&repo, "a.yaml", "plan").unwrap(),
            repo.join("a.yaml")
        );
        assert!(confine_path(&repo, "../x", "plan").is_err());
        assert!(confine_path(&repo, "/etc/passwd", "plan").is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", repo.join("out")).unwrap();
            let e = confine_path(&repo, "out/passwd", "plan").unwrap_err();
            assert!(e.0.contains("outside the repository"), "{e}");
        }
    }
}
