//! The bubblewrap sandbox: the local sandbox's workspace copy, with the command run inside
//! [bubblewrap](https://github.com/containers/bubblewrap) (`bwrap`, Debian's `bubblewrap`).
//!
//! What the command sees:
//! - the host's toolchain **read-only**, at the same paths ([`crate::host_toolchain`]: `/usr`,
//!   `/bin`, `/lib*`, `/sbin`, the folders on `PATH`, `$CARGO_HOME`, `$RUSTUP_HOME`); of `/etc`
//!   only what programs need to run ([`ETC_FILES`]: users and groups, the dynamic linker's cache,
//!   `alternatives`, certificates, time zone), never `shadow`, `ssh/` or other secrets;
//! - the workspace copy **read-write**, at the copy's own path (so absolute paths in the output
//!   point where the local sandbox would put them; with
//!   [`SandboxRequest::cache`](nuvira_api::SandboxRequest::cache), the project's synced
//!   persistent copy, as the local sandbox), the run's warm cache entries read-write at their
//!   paths ([`crate::cache::RunCache::binds`], the tools pointed at them by
//!   [`crate::cache::RunCache::env`], released by [`crate::cache::RunCache::finish`]), pnpm's
//!   recorded store read-only ([`crate::pnpm`]), the request's mounts, and the cache folders
//!   its `env` points tools at ([`CACHE_VARS`]: `CARGO_TARGET_DIR`, `PIP_CACHE_DIR`, ...);
//! - a private `/tmp` and a private, empty `$HOME` (tmpfs, gone with the run), `/dev` with only
//!   the harmless devices, a `/proc` of its own;
//! - `--unshare-all`: no network (`--share-net` only for `network: host|bridge`), its own pid,
//!   ipc, uts, cgroup and user namespaces; `--die-with-parent`, `--new-session` (no terminal
//!   injection), and as root every capability dropped.
//!
//! Limits are the local sandbox's: the timeout and process-group kill, and memory and process
//! limits through a cgroup that bubblewrap is started in ([`crate::limits`]).
//!
//! Whether bubblewrap works is probed once ([`BwrapSandbox::check`]): it needs to create
//! namespaces, which unprivileged users may not be allowed to do (e.g. in a container without
//! user namespaces, or Ubuntu's AppArmor restriction); the error says what to change.

use crate::{LocalSandbox, OnCreated};
use nuvira_api::{
    CancelSignal, NetworkMode, Sandbox, SandboxError, SandboxOutcome, SandboxRequest, async_trait,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The parts of `/etc` bound into the sandbox (read-only, when they exist): what programs need
/// to start, resolve users and load libraries. The rest of `/etc` (`shadow`, `ssh/`, `sudoers`,
/// credentials of system services) stays out.
pub const ETC_FILES: &[&str] = &[
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/mime.types",
    "/etc/gitconfig",
    "/etc/python3",
    "/etc/pip.conf",
    "/etc/npmrc",
];

/// Variables that point tools at a cache or build folder. When the request's `env` sets one to
/// an absolute path that exists, that folder is bound read-write (a warm build cache outside
/// the copy stays usable inside bubblewrap).
pub const CACHE_VARS: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_HOME",
    "PIP_CACHE_DIR",
    "UV_CACHE_DIR",
    "POETRY_CACHE_DIR",
    "npm_config_cache",
    "NPM_CONFIG_CACHE",
    "PNPM_STORE_DIR",
    "YARN_CACHE_FOLDER",
    "BUN_INSTALL_CACHE_DIR",
    "GOCACHE",
    "GOMODCACHE",
    "XDG_CACHE_HOME",
];

/// How to get bubblewrap working, appended to "unavailable" messages.
pub const BWRAP_HINT: &str = "install it with `apt-get install bubblewrap`; where it cannot create namespaces, allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 also `sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or use --sandbox docker or local";

/// Folders a run binds besides the copy, the toolchain and the request's mounts: the warm
/// cache entries it holds (read-write, at the same paths; [`crate::cache::RunCache::binds`])
/// and pnpm's store (read-only; [`crate::pnpm`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct ExtraBinds {
    /// Bound read-write at the same path.
    pub(crate) read_write: Vec<PathBuf>,
    /// `(host, at)`: bound read-only.
    pub(crate) read_only: Vec<(PathBuf, PathBuf)>,
}

/// The `bwrap` program, known to work on this machine (from [`BwrapSandbox::check`]).
#[derive(Debug)]
pub struct Bwrap {
    program: PathBuf,
}

impl Bwrap {
    /// The `bwrap` argv that runs `command` in `workdir` of the workspace copy `copy`.
    pub(crate) fn wrap(
        &self,
        request: &SandboxRequest,
        copy: &Path,
        workdir: &Path,
        extra: &ExtraBinds,
        command: Vec<String>,
    ) -> Result<Vec<String>, SandboxError> {
        let mut a: Vec<String> = vec![self.program.to_string_lossy().into_owned()];
        let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
        push(&["--die-with-parent", "--new-session", "--unshare-all"]);
        if request.network != NetworkMode::None {
            push(&["--share-net"]);
        }
        if nix::unistd::Uid::effective().is_root() {
            push(&["--cap-drop", "ALL"]);
        }
        let (toolchain, mut env) = crate::host_toolchain();
        let toolchain: Vec<_> = toolchain
            .into_iter()
            .filter(|m| m.container != "/etc" && !m.container.starts_with("/etc/"))
            .collect();

        // A private, empty home and /tmp first: toolchain folders under $HOME and the copy
        // under /tmp are bound on top of them.
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if let Some(home) = &home
            && home.is_absolute()
            && home.parent().is_some()
            && !toolchain
                .iter()
                .any(|m| home.starts_with(&m.container) && Path::new(&m.container) != home)
        {
            push(&["--tmpfs", &home.to_string_lossy()]);
        }
        push(&["--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]);
        for m in &toolchain {
            let at = Path::new(&m.container);
            match std::fs::read_link(at) {
                // A merged-/usr link (`/bin -> usr/bin`) stays a link.
                Ok(target) if at.parent() == Some(Path::new("/")) => {
                    push(&["--symlink", &target.to_string_lossy(), &m.container]);
                }
                _ => push(&["--ro-bind", &m.host.to_string_lossy(), &m.container]),
            }
        }
        for etc in ETC_FILES {
            push(&["--ro-bind-try", etc, etc]);
        }
        let copy = copy.to_string_lossy();
        push(&["--bind", &copy, &copy]);
        for m in &request.mounts {
            if !m.host.exists() {
                return Err(SandboxError::Failed(format!(
                    "mount {} at {}: the host path does not exist",
                    m.host.display(),
                    m.container
                )));
            }
            let flag = if m.read_only { "--ro-bind" } else { "--bind" };
            push(&[flag, &m.host.to_string_lossy(), &m.container]);
        }
        for (host, at) in &extra.read_only {
            push(&["--ro-bind", &host.to_string_lossy(), &at.to_string_lossy()]);
        }
        for dir in &extra.read_write {
            let dir = dir.to_string_lossy();
            push(&["--bind", &dir, &dir]);
        }
        for var in CACHE_VARS {
            if let Some(dir) = request.env.get(*var).map(Path::new)
                && dir.is_absolute()
                && dir.is_dir()
            {
                let dir = dir.to_string_lossy();
                push(&["--bind", &dir, &dir]);
            }
        }
        if request.network == NetworkMode::None {
            // Without a network, cargo must use the (read-only) registry cache as it is.
            env.insert("CARGO_NET_OFFLINE".into(), "true".into());
        }
        for (key, value) in env.iter().filter(|(k, _)| !request.env.contains_key(*k)) {
            push(&["--setenv", key, value]);
        }
        // The sandbox's own root (a tmpfs holding the mount points) read-only too: only the
        // copy, /tmp, $HOME and read-write mounts can be written.
        push(&["--remount-ro", "/"]);
        push(&["--chdir", &workdir.to_string_lossy(), "--"]);
        a.extend(command);
        Ok(a)
    }
}

/// Runs commands in a temporary copy of the workspace inside bubblewrap (see the module docs).
#[derive(Debug, Clone)]
pub struct BwrapSandbox {
    inner: LocalSandbox,
}

impl BwrapSandbox {
    /// A bubblewrap sandbox, once [`check`](Self::check) says that bubblewrap works here.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] as [`check`](Self::check).
    pub fn new() -> Result<Self, SandboxError> {
        let bwrap = Self::check()?;
        Ok(Self {
            inner: LocalSandbox::new().confined(bwrap),
        })
    }

    /// Keeps the warm caches of requests that ask for them under `root` (see
    /// [`LocalSandbox::with_cache_root`]).
    #[must_use]
    pub fn with_cache_root(mut self, root: crate::cache::CacheRoot) -> Self {
        self.inner = self.inner.with_cache_root(root);
        self
    }

    /// Whether bubblewrap is installed and can create its namespaces on this machine (probed
    /// once per process by running `true` in a sandbox like the runs'); returns its version.
    ///
    /// # Errors
    /// [`SandboxError::Unavailable`] saying whether `bwrap` is missing or what it answered, and
    /// how to fix it ([`BWRAP_HINT`]).
    pub fn check() -> Result<Arc<Bwrap>, SandboxError> {
        static PROBE: OnceLock<Result<Arc<Bwrap>, String>> = OnceLock::new();
        PROBE
            .get_or_init(probe)
            .clone()
            .map_err(SandboxError::Unavailable)
    }

    /// The `bwrap --version` line, when bubblewrap works.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub fn version() -> Result<String, SandboxError> {
        let bwrap = Self::check()?;
        let out = std::process::Command::new(&bwrap.program)
            .arg("--version")
            .output()
            .map_err(|e| SandboxError::Unavailable(format!("run bwrap --version: {e}")))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Runs a request, calling `on_created` once the workspace copy exists.
    ///
    /// # Errors
    /// As [`LocalSandbox::run_observed`].
    pub async fn run_observed(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        on_created: OnCreated<'_>,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.inner.run_observed(request, cancel, on_created).await
    }
}

fn probe() -> Result<Arc<Bwrap>, String> {
    let Some(program) = crate::local::find_on_path("bwrap") else {
        return Err(format!("bubblewrap (bwrap) is not on PATH: {BWRAP_HINT}"));
    };
    let mut cmd = std::process::Command::new(&program);
    cmd.args([
        "--die-with-parent",
        "--unshare-all",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--",
        "true",
    ]);
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(Arc::new(Bwrap { program })),
        Ok(out) => Err(format!(
            "bubblewrap ({}) cannot create its sandbox on this machine ({}): {BWRAP_HINT}",
            program.display(),
            nuvira_api::text::escape_control(String::from_utf8_lossy(&out.stderr).trim())
        )),
        Err(e) => Err(format!(
            "start bubblewrap ({}): {e}: {BWRAP_HINT}",
            program.display()
        )),
    }
}

#[async_trait]
impl Sandbox for BwrapSandbox {
    fn kind(&self) -> &str {
        "bwrap"
    }

    async fn run(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.run_observed(request, cancel, &|_| {}).await
    }
}
