//! Sandboxes: where a test command runs, isolated from the workspace it tests.
//!
//! Three implementations of [`nuvira_api::Sandbox`]:
//! - [`LocalSandbox`]: a temporary copy of the workspace, the command in its own process group,
//!   killed with all its children at the timeout or on cancellation, with memory and process
//!   limits on the whole run through a cgroup where this machine offers one ([`limits`]).
//!   Cheap, but not a security boundary.
//! - [`BwrapSandbox`]: the same copy and limits, with the command inside bubblewrap: the
//!   toolchain read-only, the copy read-write, no network, private `/tmp` and `$HOME`.
//! - `DockerSandbox` (cargo feature `docker`, on by default): the workspace uploaded as a tar
//!   into a fresh, labelled, hardened container (no network, all capabilities dropped, memory,
//!   CPU and process limits), removed in every case.
//!
//! [`select`] implements `sandbox: auto|local|bwrap|docker`: `auto` picks Docker when an engine
//! answers and the image exists, else bubblewrap when it works here, else the local sandbox,
//! and says which it picked and why.
//!
//! Both sandboxes use the one workspace walk,
//! [`nuvira_workspace::walk`](mod@nuvira_workspace::walk): the same files (those `git` would not
//! ignore, minus `target/` and `node_modules/` unless asked, and never `.git` or `.nuvira` at any
//! depth) go into the local copy and into the container's tar.

#![deny(missing_docs)]

pub mod bwrap;
pub mod cache;
#[cfg(feature = "docker")]
pub mod docker;
#[cfg(feature = "docker")]
pub mod docker_cache;
#[cfg(feature = "docker")]
pub mod docker_keep;
#[cfg(feature = "docker")]
mod docker_track;
pub mod limits;
pub mod local;
pub mod pnpm;
#[cfg(feature = "docker")]
pub mod remote;
#[cfg(feature = "docker")]
mod ssh;
pub mod sync;

pub use bwrap::BwrapSandbox;
#[cfg(feature = "docker")]
pub use docker::{DockerSandbox, wait_for_removals};
pub use local::{LocalSandbox, is_credential, remove_stale};

use nuvira_api::{
    CancelSignal, NetworkMode, Sandbox, SandboxError, SandboxInfo, SandboxOutcome, SandboxRequest,
    async_trait, test::Mount,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nuvira_workspace::WalkOptions;

/// The label every container Nuvira creates carries (`nuvira.sandbox=1`), so leftovers can be
/// found with `docker ps -a --filter label=nuvira.sandbox`.
pub const CONTAINER_LABEL: &str = "nuvira.sandbox";

/// The image used when none is given: an empty image run with the host's toolchain mounted
/// read-only (built by `scripts/docker-up.sh`).
pub const DEFAULT_IMAGE: &str = "nuvira-host:latest";

/// Where the workspace is put inside a container.
pub const CONTAINER_WORKDIR: &str = "/workspace";

/// Standard output and standard error are each kept up to this many bytes (the end is kept:
/// runners print their summaries last).
pub const OUTPUT_CAP: usize = 16 * 1024 * 1024;

/// Which sandbox to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    /// Docker when an engine answers and the image exists, else bwrap when it works, else
    /// local.
    #[default]
    Auto,
    /// A temporary copy of the workspace on this machine.
    Local,
    /// A Docker container.
    Docker,
    /// A temporary copy of the workspace, the command inside bubblewrap.
    Bwrap,
}

impl SandboxKind {
    /// `auto`, `local`, `bwrap` or `docker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Local => "local",
            Self::Docker => "docker",
            Self::Bwrap => "bwrap",
        }
    }
}

/// Why a sandbox setting (kind, network, size, mount) could not be parsed; each names the text
/// and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not `auto`, `local`, `bwrap` or `docker`.
    #[error("unknown sandbox `{0}`: expected auto, local, bwrap or docker")]
    Kind(String),
    /// Not `none`, `host` or `bridge`.
    #[error("unknown network `{0}`: expected none, host or bridge")]
    Network(String),
    /// Not a size.
    #[error("invalid size `{0}`: expected a number with an optional unit, e.g. 512m, 1g, 256MiB")]
    Size(String),
    /// Not a mount.
    #[error("invalid mount `{text}`: {reason}")]
    Mount {
        /// The mount as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl std::str::FromStr for SandboxKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "local" => Ok(Self::Local),
            "docker" => Ok(Self::Docker),
            "bwrap" | "bubblewrap" => Ok(Self::Bwrap),
            other => Err(ParseError::Kind(other.to_owned())),
        }
    }
}

impl std::fmt::Display for SandboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a network mode: `none`, `host` or `bridge`.
///
/// # Errors
/// [`ParseError::Network`] naming the value and the accepted ones.
pub fn parse_network(s: &str) -> Result<NetworkMode, ParseError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" => Ok(NetworkMode::None),
        "host" => Ok(NetworkMode::Host),
        "bridge" => Ok(NetworkMode::Bridge),
        other => Err(ParseError::Network(other.to_owned())),
    }
}

/// Parses a memory size: a number of bytes, or a number with a unit, `k`, `m`, `g`, `t`
/// (binary, as Docker reads them: `512m` is 512 MiB), also written `KiB`/`MiB`/`GiB`/`TiB`,
/// `kb`/`mb`/`gb` or `b`; case does not matter, fractions are allowed (`1.5g`).
///
/// ```
/// use nuvira_sandbox::parse_size;
/// assert_eq!(parse_size("512m"), Ok(512 * 1024 * 1024));
/// assert_eq!(parse_size("1g"), Ok(1 << 30));
/// assert_eq!(parse_size("256MiB"), Ok(256 << 20));
/// assert!(parse_size("12 parsecs").is_err());
/// ```
///
/// # Errors
/// [`ParseError::Size`] naming the text and showing accepted forms.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || ParseError::Size(text.to_owned());
    let value: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Parses a mount: `HOST:CONTAINER` or `HOST:CONTAINER:ro|rw` (read-only unless `rw`). The host
/// path must exist; the container path must be absolute.
///
/// # Errors
/// [`ParseError::Mount`] naming the mount and what is wrong with it.
pub fn parse_mount(text: &str) -> Result<Mount, ParseError> {
    let bad = |reason: String| ParseError::Mount {
        text: text.to_owned(),
        reason,
    };
    let parts: Vec<&str> = text.split(':').collect();
    let (host, container, read_only) = match parts.as_slice() {
        [h, c] => (*h, *c, true),
        [h, c, "ro"] => (*h, *c, true),
        [h, c, "rw"] => (*h, *c, false),
        [_, _, mode] => return Err(bad(format!("mode `{mode}` must be ro or rw"))),
        _ => {
            return Err(bad(
                "expected HOST:CONTAINER or HOST:CONTAINER:ro".to_owned()
            ));
        }
    };
    if host.is_empty() || !container.starts_with('/') {
        return Err(bad(
            "the host path must be given and the container path must be absolute".to_owned(),
        ));
    }
    Ok(Mount {
        host: PathBuf::from(host),
        container: container.to_owned(),
        read_only,
    })
}

/// Files of the host that [`host_toolchain`] hides from a container behind `/dev/null`.
pub const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
];

/// The read-only mounts and environment that make [`DEFAULT_IMAGE`] (`nuvira-host`, an empty
/// image) run this machine's toolchains: `/usr`, `/lib`, `/lib64`, `/bin`, `/sbin`, `/etc`, and
/// every folder on `PATH` outside them (for a folder under `$HOME`, the top folder below
/// `$HOME`, e.g. `~/.cargo` for `~/.cargo/bin`, `~/.pyenv` for `~/.pyenv/shims`), plus
/// `$RUSTUP_HOME` (default `~/.rustup`). Each is mounted at the same path. The environment
/// carries `PATH` and `HOME`, `CARGO_HOME` and `RUSTUP_HOME` when set. (The Docker sandbox also
/// sets `CARGO_NET_OFFLINE=true` when the container has no network.)
///
/// Only folders that exist are mounted; symlinked ones (`/bin` on merged-`/usr` systems) are
/// resolved first. Secrets inside them are covered by `/dev/null` (read-only, after the
/// folder's mount): [`SECRET_FILES`], the SSH host keys, and cargo's `credentials.toml` /
/// `credentials` in `$CARGO_HOME` (default `~/.cargo`).
pub fn host_toolchain() -> (Vec<Mount>, BTreeMap<String, String>) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut roots: Vec<PathBuf> = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let path_var = std::env::var("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path_var) {
        let under_home = home
            .as_ref()
            .and_then(|h| dir.strip_prefix(h).ok().map(|rest| (h, rest)));
        let root = match under_home {
            Some((h, rest)) => match rest.components().next() {
                Some(first) => h.join(first),
                None => continue,
            },
            None => dir.clone(),
        };
        roots.push(root);
    }
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".rustup")));
    roots.extend(rustup);
    if let Some(cargo) = std::env::var_os("CARGO_HOME") {
        roots.push(PathBuf::from(cargo));
    }

    let mut mounts: Vec<Mount> = Vec::new();
    for root in roots {
        if !root.is_absolute() || !root.is_dir() {
            continue;
        }
        let covered = mounts
            .iter()
            .any(|m| root.starts_with(&m.host) || root.starts_with(&m.container));
        if covered {
            continue;
        }
        let host = std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
        mounts.push(Mount {
            host,
            container: root.to_string_lossy().into_owned(),
            read_only: true,
        });
    }

    // Secrets inside the mounted folders are hidden behind an empty file: test output is
    // printed in reports and pull-request annotations, so what the tests can read can leak.
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".cargo")));
    let mut secrets: Vec<PathBuf> = SECRET_FILES.iter().map(PathBuf::from).collect();
    if let Ok(rd) = std::fs::read_dir("/etc/ssh") {
        secrets.extend(rd.flatten().map(|e| e.path()).filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
        }));
    }
    if let Some(cargo) = &cargo_home {
        secrets.extend(["credentials.toml", "credentials"].map(|n| cargo.join(n)));
    }
    for secret in secrets {
        let is_file = std::fs::symlink_metadata(&secret).is_ok_and(|m| m.is_file());
        let covered = mounts.iter().any(|m| secret.starts_with(&m.container));
        if is_file && covered {
            mounts.push(Mount {
                host: PathBuf::from("/dev/null"),
                container: secret.to_string_lossy().into_owned(),
                read_only: true,
            });
        }
    }

    let mut env = BTreeMap::new();
    for key in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME"] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_owned(), v);
        }
    }
    (mounts, env)
}

/// Whether an image is the host-toolchain image that needs [`host_toolchain`] mounts.
pub fn is_host_image(image: &str) -> bool {
    let name = image.rsplit('/').next().unwrap_or(image);
    name == "nuvira-host" || name.starts_with("nuvira-host:")
}

/// Called once the sandbox exists (the container is created, or the local copy is made), before
/// the command starts; it is given what the run will report as its [`SandboxInfo`].
pub type OnCreated<'a> = &'a (dyn Fn(&SandboxInfo) + Send + Sync);

/// A sandbox picked by [`select`]: one of the implementations, with the reason it was picked.
#[derive(Clone)]
pub struct Selection {
    /// The sandbox.
    pub sandbox: AnySandbox,
    /// Why this one (e.g. "docker: engine 20.10.24 answers and image nuvira-host:latest exists").
    pub reason: String,
}

impl std::fmt::Debug for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selection")
            .field("kind", &self.sandbox.kind())
            .field("reason", &self.reason)
            .finish()
    }
}

/// One of the built-in sandboxes; runs requests with an [`OnCreated`] hook.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnySandbox {
    /// The local sandbox.
    Local(Arc<LocalSandbox>),
    /// The bubblewrap sandbox.
    Bwrap(Arc<BwrapSandbox>),
    /// The Docker sandbox.
    #[cfg(feature = "docker")]
    Docker(Arc<DockerSandbox>),
}

impl AnySandbox {
    /// Runs a request, calling `on_created` once the sandbox exists.
    ///
    /// # Errors
    /// As [`Sandbox::run`].
    pub async fn run_observed(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        on_created: OnCreated<'_>,
    ) -> Result<SandboxOutcome, SandboxError> {
        match self {
            Self::Local(s) => s.run_observed(request, cancel, on_created).await,
            Self::Bwrap(s) => s.run_observed(request, cancel, on_created).await,
            #[cfg(feature = "docker")]
            Self::Docker(s) => s.run_observed(request, cancel, on_created).await,
        }
    }
}

#[async_trait]
impl Sandbox for AnySandbox {
    fn kind(&self) -> &str {
        match self {
            Self::Local(s) => s.kind(),
            Self::Bwrap(s) => s.kind(),
            #[cfg(feature = "docker")]
            Self::Docker(s) => s.kind(),
        }
    }

    async fn run(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.run_observed(request, cancel, &|_| {}).await
    }
}

/// How to start a Docker engine, appended to "no engine" messages.
pub const DOCKER_HINT: &str = "start one with `sudo scripts/docker-up.sh` from Nuvira's source tree (installs docker.io, starts dockerd and builds the local nuvira-busybox/nuvira-host images), or set DOCKER_HOST to a reachable engine";

/// Picks a sandbox for `kind` and `image` (default [`DEFAULT_IMAGE`]).
///
/// `local` always succeeds. `docker` fails with [`SandboxError::Unavailable`] when no engine
/// answers or the image is missing, `bwrap` when bubblewrap is missing or cannot create its
/// namespaces here, each with a message saying how to get one. `auto` uses Docker when it would
/// succeed, else bubblewrap when it would, else the local sandbox; [`Selection::reason`] says
/// which and why (with the reasons the others were passed over).
///
/// # Errors
/// [`SandboxError::Unavailable`] for `docker` and `bwrap` as above.
pub async fn select(kind: SandboxKind, image: Option<&str>) -> Result<Selection, SandboxError> {
    let local = || AnySandbox::Local(Arc::new(LocalSandbox::new()));
    let bwrap = || -> Result<(AnySandbox, String), SandboxError> {
        let sandbox = BwrapSandbox::new()?;
        let version = BwrapSandbox::version().unwrap_or_else(|_| "bubblewrap".into());
        Ok((AnySandbox::Bwrap(Arc::new(sandbox)), version))
    };
    match kind {
        SandboxKind::Local => Ok(Selection {
            sandbox: local(),
            reason: "local: requested".into(),
        }),
        SandboxKind::Bwrap => bwrap().map(|(sandbox, version)| Selection {
            sandbox,
            reason: format!("bwrap: requested, {version} works here"),
        }),
        SandboxKind::Docker => docker(image).await.map(|(sandbox, why)| Selection {
            sandbox,
            reason: format!("docker: {why}"),
        }),
        SandboxKind::Auto => {
            let docker_err = match docker(image).await {
                Ok((sandbox, why)) => {
                    return Ok(Selection {
                        sandbox,
                        reason: format!("docker: {why} (auto)"),
                    });
                }
                Err(e) => e,
            };
            match bwrap() {
                Ok((sandbox, version)) => Ok(Selection {
                    sandbox,
                    reason: format!("bwrap (auto): {version} works here; not docker: {docker_err}"),
                }),
                Err(bwrap_err) => Ok(Selection {
                    sandbox: local(),
                    reason: format!(
                        "local (auto): {docker_err}; not bwrap: {bwrap_err}; memory and process limits: {}",
                        limits::detect().describe()
                    ),
                }),
            }
        }
    }
}

/// Whether [`select`] gives Docker sandboxes [`DockerSandbox::with_background_removal`].
#[cfg(feature = "docker")]
static BACKGROUND_REMOVAL: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Makes the Docker sandboxes [`select`] returns from now on, in this process, remove each
/// finished run's container after returning its result ([`DockerSandbox::with_background_removal`]).
/// Only for a process that calls [`wait_for_removals`] before it exits (the commands do):
/// otherwise the containers of its last runs are left behind, stopped.
#[cfg(feature = "docker")]
pub fn remove_containers_in_background() {
    BACKGROUND_REMOVAL.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The Docker sandbox and why it was picked, or why not.
#[cfg(feature = "docker")]
async fn docker(image: Option<&str>) -> Result<(AnySandbox, String), SandboxError> {
    let image = image.unwrap_or(DEFAULT_IMAGE);
    let (sandbox, version) = DockerSandbox::connect_checked(image).await?;
    let sandbox = if BACKGROUND_REMOVAL.load(std::sync::atomic::Ordering::Relaxed) {
        sandbox.with_background_removal()
    } else {
        sandbox
    };
    Ok((
        AnySandbox::Docker(Arc::new(sandbox)),
        format!("engine {version} answers and image {image} exists"),
    ))
}

#[cfg(not(feature = "docker"))]
async fn docker(_image: Option<&str>) -> Result<(AnySandbox, String), SandboxError> {
    Err(SandboxError::Unavailable(
        "this build has no Docker support: rebuild with the `docker` feature".into(),
    ))
}

/// The walk rules for what goes into a sandbox: those of
/// [`nuvira_workspace::walk`](mod@nuvira_workspace::walk) (never `.git` nor `.nuvira`, at any
/// depth); unless `include_ignored`, files `git` would ignore and every `target/` and
/// `node_modules/` folder are left out too.
pub(crate) fn walk_options(include_ignored: bool) -> WalkOptions {
    WalkOptions {
        include_ignored,
        skip_build_dirs: !include_ignored,
    }
}

/// The entries of `root` that go into a sandbox ([`walk_options`]), as workspace-relative paths
/// (folders included, parents before children), for the Docker tar's tests.
#[cfg(all(test, feature = "docker"))]
pub(crate) fn workspace_entries(
    root: &Path,
    include_ignored: bool,
) -> Result<Vec<PathBuf>, SandboxError> {
    workspace_entries_noting_special(root, include_ignored).map(|(entries, _)| entries)
}

/// The entries of `root` that go into a sandbox ([`walk_options`]), as workspace-relative paths
/// (folders included, parents before children), and the special files left out (see
/// [`special_names`]). The Docker tar is built from them.
#[cfg(feature = "docker")]
pub(crate) fn workspace_entries_noting_special(
    root: &Path,
    include_ignored: bool,
) -> Result<(Vec<PathBuf>, Vec<String>), SandboxError> {
    nuvira_workspace::walk::walk_noting_special(root, walk_options(include_ignored))
        .map(|(entries, special)| {
            (
                entries.into_iter().map(|e| e.rel).collect(),
                special_names(&special),
            )
        })
        .map_err(|e| SandboxError::Failed(format!("list the workspace: {e}")))
}

/// Workspace-relative names of skipped special files, as [`SandboxInfo`](nuvira_api::SandboxInfo)
/// reports them (`/`-separated).
pub(crate) fn special_names(special: &[PathBuf]) -> Vec<String> {
    special
        .iter()
        .map(|p| p.to_string_lossy().replace('\\', "/"))
        .collect()
}

/// Collects a stream's bytes, keeping only the last [`OUTPUT_CAP`] (runners print their
/// summaries last), so a command printing without end cannot exhaust memory.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    buf: Vec<u8>,
    cut: u64,
    /// The first bytes, up to `head_cap` (kept only when asked for, [`Tail::with_head`]).
    head: Vec<u8>,
    head_cap: usize,
}

impl Tail {
    /// A tail that also keeps the stream's first `cap` bytes ([`Tail::take_head`]).
    #[cfg(feature = "docker")]
    pub(crate) fn with_head(cap: usize) -> Self {
        Self {
            head_cap: cap,
            ..Self::default()
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let n = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > 2 * OUTPUT_CAP {
            let excess = self.buf.len() - OUTPUT_CAP;
            self.buf.drain(..excess);
            self.cut += excess as u64;
        }
    }

    /// When the stream began with `marker`, what followed it up to the next NUL, taken off the
    /// kept bytes too (when they still start there).
    #[cfg(feature = "docker")]
    pub(crate) fn take_head(&mut self, marker: &[u8]) -> Option<Vec<u8>> {
        let rest = self.head.strip_prefix(marker)?;
        let end = rest.iter().position(|&b| b == 0)?;
        let taken = rest[..end].to_vec();
        let whole = marker.len() + end + 1;
        if self.cut == 0 && self.buf.len() >= whole {
            self.buf.drain(..whole);
        }
        self.head.clear();
        Some(taken)
    }

    /// Splits off what follows the last `marker` (the marker too), if it is still kept.
    #[cfg(feature = "docker")]
    pub(crate) fn take_trailer(
        &mut self,
        marker: &[u8],
        whole: impl Fn(&[u8]) -> bool,
    ) -> Option<Vec<u8>> {
        if marker.is_empty() || self.buf.len() < marker.len() {
            return None;
        }
        let pos = (0..=self.buf.len() - marker.len())
            .rev()
            .find(|&i| self.buf[i..].starts_with(marker))?;
        let trailer = self.buf[pos + marker.len()..].to_vec();
        if !whole(&trailer) {
            return None;
        }
        self.buf.truncate(pos);
        Some(trailer)
    }

    /// The kept bytes as text, starting with `[... N bytes cut ...]` when some were dropped.
    pub(crate) fn into_text(self) -> String {
        let mut cut = self.cut;
        let mut kept = self.buf.as_slice();
        if kept.len() > OUTPUT_CAP {
            cut += (kept.len() - OUTPUT_CAP) as u64;
            kept = &kept[kept.len() - OUTPUT_CAP..];
        }
        let text = String::from_utf8_lossy(kept);
        if cut == 0 {
            text.into_owned()
        } else {
            format!("[... {cut} bytes cut ...]\n{text}")
        }
    }
}

/// Checks that the folder to run in is workspace-relative and stays inside (empty is the root).
pub(crate) fn check_dir(dir: &Path) -> Result<PathBuf, SandboxError> {
    if dir.as_os_str().is_empty() {
        return Ok(PathBuf::new());
    }
    check_collect_path(&dir.to_string_lossy()).map_err(|_| {
        SandboxError::Failed(format!(
            "run in `{}`: the folder must be relative and stay inside the workspace",
            dir.display()
        ))
    })
}

/// The most a collected file may hold: what a run writes is not trusted, and a bigger file is
/// not collected (a report that large is read by no parser here).
pub const COLLECT_CAP: u64 = 64 << 20;

/// Reads the collected file `rel` (checked by [`check_collect_path`]) of a run's workspace copy
/// `root` as the run left it: each folder on the way is opened without following a symlink,
/// the file only when it is a regular file (a FIFO is never waited on, a device node never
/// opened), and at most [`COLLECT_CAP`] bytes. `None` when any of that fails: a run that made
/// its report a link to a file outside its sandbox gets nothing collected.
pub(crate) fn read_collected(root: &Path, rel: &Path) -> Option<Vec<u8>> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let dir = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    read_collected_at(&dir, rel).ok().flatten()
}

/// [`read_collected`] from the open folder `root`: `Ok(None)` when there is nothing to
/// collect (missing, a file on the way, not a regular file, a link, over the cap), `Err` when
/// the walk stopped at a link on the way, or the kernel refused (a caller with another way to
/// read it, the Docker engine's, asks that one).
///
/// The file is opened first as a path only (`O_PATH`, no link followed): only once that
/// handle is a regular file is the same inode opened for reading (`/proc/self/fd`, without
/// waiting: a file under another process's lease is not read), so a run that made its report a
/// device node never gets the node opened (the open of some devices acts: a watchdog arms) and
/// a FIFO never blocks.
pub(crate) fn read_collected_at(
    root: &impl std::os::fd::AsFd,
    rel: &Path,
) -> std::io::Result<Option<Vec<u8>>> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, SFlag, fstat};
    use std::io::Read;
    use std::os::fd::{AsFd, AsRawFd};
    // `pkg/report.xml/` names a folder's entry, not a file (as for a container).
    let bytes = rel.as_os_str().as_encoded_bytes();
    if bytes.ends_with(b"/") || bytes.ends_with(b"/.") {
        return Ok(None);
    }
    let mut names: Vec<&std::ffi::OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(n) => names.push(n),
            std::path::Component::CurDir => {}
            _ => return Ok(None),
        }
    }
    let Some((file, folders)) = names.split_last() else {
        return Ok(None);
    };
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let mut dir: Option<std::os::fd::OwnedFd> = None;
    for name in folders {
        let at = dir.as_ref().map_or_else(|| root.as_fd(), AsFd::as_fd);
        match openat(at, *name, dir_flags, Mode::empty()) {
            Ok(fd) => dir = Some(fd),
            Err(Errno::ENOENT) => return Ok(None),
            // A link and a file on the way both give ENOTDIR: only a link is the caller's.
            Err(Errno::ENOTDIR)
                if nix::sys::stat::fstatat(at, *name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| {
                        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFLNK
                    }) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let at = dir.as_ref().map_or_else(|| root.as_fd(), AsFd::as_fd);
    let handle = match openat(
        at,
        *file,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let stat = fstat(&handle)?;
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFREG || u64::try_from(stat.st_size).map_or(true, |n| n > COLLECT_CAP) {
        return Ok(None);
    }
    // Non-blocking: a process of the run holding a lease on the file would make a blocking
    // open wait for the lease's break time (45 s by default); it gets its report not read.
    let fd = match open(
        format!("/proc/self/fd/{}", handle.as_raw_fd()).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::EWOULDBLOCK) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let reopened = fstat(&fd)?;
    if (reopened.st_dev, reopened.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(std::io::Error::other(
            "the file changed while it was opened",
        ));
    }
    let mut bytes = Vec::new();
    // The file may grow while it is read (a process of the run still writing).
    std::fs::File::from(fd)
        .take(COLLECT_CAP + 1)
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= COLLECT_CAP).then_some(bytes))
}

/// Checks that a path to collect is workspace-relative and stays inside.
pub(crate) fn check_collect_path(p: &str) -> Result<PathBuf, SandboxError> {
    let path = Path::new(p);
    let ok = !p.is_empty()
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
    if ok {
        Ok(path.to_path_buf())
    } else {
        Err(SandboxError::Failed(format!(
            "collect `{p}`: paths to collect must be relative and stay inside the workspace"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collected_path_names_one_regular_file_inside_the_copy() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("pkg")).unwrap();
        std::fs::write(root.path().join("pkg/ok.xml"), "ok").unwrap();
        std::os::unix::fs::symlink("pkg", root.path().join("alias")).unwrap();
        let read = |p: &str| read_collected(root.path(), Path::new(p));
        assert_eq!(read("pkg/ok.xml").as_deref(), Some(&b"ok"[..]));
        assert_eq!(read("./pkg/./ok.xml").as_deref(), Some(&b"ok"[..]));
        for refused in [
            "pkg/ok.xml/",
            ".",
            "pkg",
            "pkg/.",
            "alias/ok.xml",
            "../pkg/ok.xml",
            "/pkg/ok.xml",
            "",
        ] {
            assert_eq!(read(refused), None, "{refused}");
        }
    }

    // A FIFO or a device node in place of a report is looked at (a path-only handle), never
    // opened: an open would wait on the FIFO, and the open of some devices acts (a watchdog
    // arms). Opens are watched with inotify, which sees every open but a path-only one; the
    // control opens prove the watch sees them.
    #[test]
    fn a_collected_fifo_or_device_node_is_never_opened() {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::write(dir.join("ok.xml"), "ok").unwrap();
        nix::unistd::mkfifo(&dir.join("fifo.xml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // A device node needs root (CAP_MKNOD) and a file system that lets it be opened.
        let device = nix::unistd::geteuid().is_root()
            && nix::sys::stat::mknod(
                &dir.join("null.xml"),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
                nix::sys::stat::makedev(1, 3),
            )
            .is_ok()
            && std::fs::File::open(dir.join("null.xml")).is_ok();
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        watch.add_watch(dir, AddWatchFlags::IN_OPEN).unwrap();
        let opened = || -> Vec<String> {
            let mut names = Vec::new();
            while let Ok(events) = watch.read_events() {
                if events.is_empty() {
                    break;
                }
                names.extend(
                    events
                        .into_iter()
                        .filter_map(|e| e.name.map(|n| n.to_string_lossy().into_owned())),
                );
            }
            names
        };
        let read = |p: &str| read_collected(dir, Path::new(p));
        // On a thread with a deadline: a read that waits on the FIFO fails the test.
        let owned = dir.to_path_buf();
        let special = within(move || {
            let read = |p: &str| read_collected(&owned, Path::new(p));
            (read("fifo.xml"), device.then(|| read("null.xml")))
        });
        assert_eq!(special, (None, device.then_some(None)));
        if !device {
            eprintln!("no device node here (not root, or devices cannot be opened): FIFO only");
        }
        assert_eq!(opened(), Vec::<String>::new(), "a special file was opened");
        // The controls: a report read, and a plain open of the special files, are seen.
        assert_eq!(read("ok.xml").as_deref(), Some(&b"ok"[..]));
        use std::os::unix::fs::OpenOptionsExt;
        let _fifo = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(dir.join("fifo.xml"))
            .unwrap();
        let mut want = vec!["ok.xml".to_owned(), "fifo.xml".to_owned()];
        if device {
            let _null = std::fs::File::open(dir.join("null.xml")).unwrap();
            want.push("null.xml".to_owned());
        }
        assert_eq!(opened(), want);
    }

    /// `f`'s value, or a failure when it takes over 20 s (a read that waits).
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("the read waited")
    }

    // A process of the run that holds a lease on its report (any process may, on a file it
    // owns) would make an open wait for the lease's break time, 45 s by default: the report is
    // not read instead. The lease is taken by another process (python3's fcntl) that ignores
    // the lease-break signal, as a hostile one would.
    #[test]
    fn a_collected_file_under_a_lease_is_not_waited_on() {
        use std::io::BufRead;
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("leased.xml");
        std::fs::write(&file, "<r/>").unwrap();
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                "import fcntl, os, signal, sys\n\
                 signal.signal(signal.SIGIO, signal.SIG_IGN)\n\
                 fd = os.open(sys.argv[1], os.O_RDWR)\n\
                 fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n\
                 print('leased', flush=True)\n\
                 sys.stdin.read()",
            ])
            .arg(&file)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 takes the lease");
        let mut line = String::new();
        std::io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "leased");
        let dir = root.path().to_path_buf();
        let read = within(move || read_collected(&dir, Path::new("leased.xml")));
        drop(holder.stdin.take());
        holder.wait().unwrap();
        assert_eq!(read, None);
        // The lease gone, the same file is read.
        assert_eq!(
            read_collected(root.path(), Path::new("leased.xml")).as_deref(),
            Some(&b"<r/>"[..])
        );
    }

    // The cap is inclusive: a sparse file of exactly COLLECT_CAP bytes is read, one byte more
    // is not.
    #[test]
    fn a_collected_file_of_the_cap_is_read_and_one_byte_more_is_not() {
        let root = tempfile::tempdir().unwrap();
        for (name, len) in [("cap.xml", COLLECT_CAP), ("over.xml", COLLECT_CAP + 1)] {
            std::fs::File::create(root.path().join(name))
                .unwrap()
                .set_len(len)
                .unwrap();
        }
        let read = |p: &str| read_collected(root.path(), Path::new(p));
        assert_eq!(read("cap.xml").map(|b| b.len() as u64), Some(COLLECT_CAP));
        assert_eq!(read("over.xml"), None);
        assert_eq!(read("cap.xml/."), None);
    }

    // What the container reader tells its caller: nothing to collect, or ask the engine (a
    // link on the way, which the engine resolves inside the container).
    #[test]
    fn a_link_on_the_way_is_left_to_the_caller_and_a_missing_file_is_nothing() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("pkg")).unwrap();
        std::fs::write(root.path().join("pkg/ok.xml"), "ok").unwrap();
        std::os::unix::fs::symlink("pkg", root.path().join("alias")).unwrap();
        std::os::unix::fs::symlink("pkg/ok.xml", root.path().join("link.xml")).unwrap();
        let dir = std::fs::File::open(root.path()).unwrap();
        let read = |p: &str| read_collected_at(&dir, Path::new(p));
        assert_eq!(read("pkg/ok.xml").unwrap().as_deref(), Some(&b"ok"[..]));
        assert!(read("alias/ok.xml").is_err());
        assert_eq!(read("link.xml").unwrap(), None);
        assert_eq!(read("pkg/missing.xml").unwrap(), None);
        assert_eq!(read("missing/ok.xml").unwrap(), None);
        // A file on the way is nothing to collect (the kernel says ENOTDIR as for a link).
        assert_eq!(read("pkg/ok.xml/inner").unwrap(), None);
    }

    // A new kept container's baseline is taken only from the very start of standard error: a
    // command that prints the marker later gets nothing taken, and output before it (or none
    // at all) means no baseline.
    #[cfg(feature = "docker")]
    #[test]
    fn the_baseline_is_taken_only_from_the_start_of_standard_error() {
        let marker = b"\0nuvira-n-base\0";
        let mut t = Tail::with_head(64);
        t.push(marker);
        t.push(b"state text\0rest ");
        t.push(b"of the output");
        assert_eq!(t.take_head(marker).as_deref(), Some(&b"state text"[..]));
        assert_eq!(t.into_text(), "rest of the output");
        let mut late = Tail::with_head(64);
        late.push(b"x");
        late.push(marker);
        late.push(b"forged\0");
        assert_eq!(late.take_head(marker), None);
        // Unterminated within the head kept: nothing.
        let mut long = Tail::with_head(20);
        long.push(marker);
        long.push(&[b'a'; 40]);
        long.push(b"\0");
        assert_eq!(long.take_head(marker), None);
        // Not asked for: nothing kept, nothing taken.
        let mut none = Tail::default();
        none.push(marker);
        none.push(b"s\0");
        assert_eq!(none.take_head(marker), None);
    }

    #[test]
    fn sizes_parse_in_docker_units() {
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("64 kb").unwrap(), 64 << 10);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        for bad in ["", "m", "12 parsecs", "-1m", "0"] {
            let err = parse_size(bad).unwrap_err().to_string();
            assert!(err.contains("512m"), "{err}");
        }
    }

    #[test]
    fn mounts_parse_read_only_by_default() {
        let m = parse_mount("/usr:/usr").unwrap();
        assert!(m.read_only);
        assert_eq!(m.container, "/usr");
        assert!(!parse_mount("/data:/data:rw").unwrap().read_only);
        assert!(parse_mount("/data:/data:ro").unwrap().read_only);
        let err = |text: &str| parse_mount(text).unwrap_err().to_string();
        assert!(err("/data:rel").contains("absolute"));
        assert!(err("/data:/d:xx").contains("ro or rw"));
        assert!(err("/data").contains("HOST:CONTAINER"));
    }

    #[test]
    fn kinds_and_networks_parse() {
        assert_eq!(
            "Docker".parse::<SandboxKind>().unwrap(),
            SandboxKind::Docker
        );
        assert!(
            "vm".parse::<SandboxKind>()
                .unwrap_err()
                .to_string()
                .contains("auto, local, bwrap or docker")
        );
        assert_eq!(parse_network("bridge").unwrap(), NetworkMode::Bridge);
        assert!(parse_network("wifi").is_err());
    }

    #[test]
    fn host_image_is_recognised_by_name() {
        assert!(is_host_image("nuvira-host:latest"));
        assert!(is_host_image("nuvira-host"));
        assert!(is_host_image("registry.local/nuvira-host:1"));
        assert!(!is_host_image("nuvira-busybox:latest"));
        assert!(!is_host_image("nuvira-hostile:1"));
    }

    #[test]
    fn host_toolchain_mounts_system_folders_read_only() {
        let (mounts, env) = host_toolchain();
        assert!(mounts.iter().any(|m| m.container == "/usr"));
        assert!(mounts.iter().all(|m| m.read_only));
        assert!(env.contains_key("PATH"));
    }

    #[test]
    fn collect_paths_must_stay_inside() {
        assert!(check_collect_path("target/junit.xml").is_ok());
        assert!(check_collect_path("../x").is_err());
        assert!(check_collect_path("/etc/passwd").is_err());
        assert!(check_collect_path("").is_err());
    }

    #[test]
    fn output_tail_keeps_the_end() {
        let mut t = Tail::default();
        for _ in 0..5 {
            t.push(&vec![b'a'; OUTPUT_CAP / 2]);
        }
        t.push(b"END");
        let s = t.into_text();
        assert!(
            s.starts_with(&format!("[... {} bytes cut ...]", OUTPUT_CAP * 3 / 2 + 3)),
            "{}",
            &s[..40]
        );
        assert!(s.ends_with("END"));
        let mut short = Tail::default();
        short.push(b"short");
        assert_eq!(short.into_text(), "short");
    }
}
