//! Warm build caches and persistent workspace copies, kept per project between runs.
//!
//! A sandbox run starts from a copy of the workspace, so without help every run is a cold
//! build. With [`SandboxRequest::cache`](nuvira_api::SandboxRequest::cache), a sandbox keeps
//! for each project:
//!
//! - one **cache entry per toolchain** ([`CacheKind`]): the cargo target dir
//!   (`CARGO_TARGET_DIR`), pip/uv caches (`PIP_CACHE_DIR`, `UV_CACHE_DIR`; not
//!   `PYTHONPYCACHEPREFIX`, which makes Python look for every module's bytecode there, the
//!   installed packages' too, and compile all of them where bytecode is not written), the
//!   npm/yarn/bun caches
//!   (`npm_config_cache`, `YARN_CACHE_FOLDER`, `BUN_INSTALL_CACHE_DIR`; pnpm's store is the one
//!   the project's `node_modules` records, see [`crate::pnpm`]),
//!   the Go build cache (`GOCACHE`). [`env_for`] gives the variables for a folder;
//! - one **workspace entry** ([`CacheKind::Workspace`]): the persistent copy of the workspace
//!   that [`crate::sync`] brings up to date (local), or the manifest of what the Docker
//!   workspace volume holds.
//!
//! The user's own download caches (`CARGO_HOME` with its registry and config, `GOMODCACHE`) are
//! not redirected: they hold the user's configuration and credentials and are what in-place
//! builds use, and redirecting them would make every new project download its dependencies
//! again (the Docker sandbox has no network to do it).
//!
//! # Keys
//! An entry is named `<project key>-<kind>` (`-<kind>-<slot>` for the second warm slot, see
//! *Concurrency*), the project key being `<name>-<16 hex digits of
//! SHA-256(canonical project path)>` ([`project_key`]). Two projects never share an entry: a
//! copy of a repository is another path, so another key (it starts cold); a moved repository
//! starts cold too, and the entry it left behind names a project that no longer exists, so it
//! is removed at the next eviction. A new project cloned where an old one was gets the old
//! entries: harmless, since cargo, pip, npm and Go check what they reuse by content and the
//! workspace copy is synced.
//!
//! # Concurrency: `flock` per entry
//! Each entry has a `lock` file. A run holds a **shared** `flock` on every toolchain entry it
//! uses: two runs of one project share the caches at once, which the tools allow (cargo locks
//! its build directory, Go's cache is documented safe for concurrent use, pip and npm write
//! atomically). Eviction and `nuvira cache clean` take the lock **exclusively** and without
//! waiting, so an entry in use is never deleted (it is left and said so).
//!
//! **Warm slots.** A project has up to [`WARM_SLOTS`] (2) warm copies: slot *n* is a workspace
//! entry (`<project key>-workspace`, then `-workspace-1`) and its own cargo target dir
//! (`-cargo`, `-cargo-1`). A run claims the first slot whose workspace entry it can lock
//! exclusively, so two runs of one project at once both get a synced copy with a warm build
//! (each warm from its slot's last run). The slots count against the cap and are listed and
//! cleaned like any entry. A run beyond the slots makes a fresh temporary copy instead, so
//! it still succeeds; it shares the download caches (pip, npm, Go's build cache: all checked
//! by content) but **not a cargo target dir**: cargo judges a build fresh when the sources are
//! not newer than it, by mtime and by paths relative to the package, so two source trees
//! sharing one target dir take each other's builds (the run on the persistent copy, synced
//! before an edit, would run the build the fresh copy made of the edited sources). The run on
//! the fresh copy builds cold in its own copy; a slot's target dir is only ever used with its
//! slot's copy.
//! Locks rather than copy-on-use because a target dir is gigabytes: copying it would cost more
//! than the build it saves.
//!
//! # Size cap and eviction
//! The cache folder is capped (default [`DEFAULT_MAX_BYTES`], 10 GiB; `NUVIRA_CACHE_MAX`, e.g.
//! `20g`). After each cached run, [`CacheRoot::evict`] removes entries whose project folder no
//! longer exists, then the least recently used entries until the total (apparent sizes of the
//! files) is at most the cap. Entries in use are skipped. A Docker volume's size is the
//! engine's (`docker system df`, which walks every volume of the engine): measured after its
//! first run (once the result is out), then again only when the measurement is older than
//! `docker_cache::MEASURE_EVERY` (10 minutes) or the recorded total reaches half
//! the cap; in between the last measurement is the estimate.
//!
//! # For other sandboxes
//! A sandbox that runs commands on this machine (local, bubblewrap) calls [`RunCache::open`]
//! with the request, binds [`RunCache::binds`] read-write at the same paths, adds
//! [`RunCache::env`] to the command's environment, uses [`RunCache::workspace`] as the
//! workspace copy when it is `Some` (after [`crate::sync::sync_tree`]), and calls
//! [`RunCache::finish`] after the run.
//!
//! ```no_run
//! # fn main() -> Result<(), nuvira_sandbox::cache::CacheError> {
//! use nuvira_sandbox::cache::{CacheRoot, RunCache};
//! let request = nuvira_api::SandboxRequest::new("/repo", vec!["cargo".into(), "test".into()]);
//! let root = CacheRoot::from_env()?;
//! let cache = RunCache::open(&root, &request)?;
//! for dir in cache.binds() { /* bind `dir` read-write at the same path */ }
//! let env = cache.env(); // CARGO_TARGET_DIR=..., ...
//! cache.finish();
//! # Ok(()) }
//! ```

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Overrides the cache folder. Unset: `$XDG_CACHE_HOME/nuvira` (when absolute), else
/// `~/.cache/nuvira`.
pub const CACHE_DIR_ENV: &str = "NUVIRA_CACHE_DIR";

/// Overrides the size cap ([`DEFAULT_MAX_BYTES`]): a size such as `20g` or `512m`.
pub const CACHE_MAX_ENV: &str = "NUVIRA_CACHE_MAX";

/// The default size cap of the cache folder: 10 GiB (a heavy crate's target dir is 1–2 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;

/// The sub-folder of the cache folder that holds the sandbox entries.
const SANDBOX_SUBDIR: &str = "sandbox";

/// Where a Docker container sees its cache volumes: `/nuvira-cache/<kind>`.
pub const CONTAINER_CACHE_DIR: &str = "/nuvira-cache";

/// The label every cache volume carries (`nuvira.cache=1`).
pub const VOLUME_LABEL: &str = "nuvira.cache";
/// The label holding a volume's entry key.
pub const VOLUME_KEY_LABEL: &str = "nuvira.cache.key";
/// The label holding a volume's project key (shared by every entry of a project).
pub const VOLUME_PROJECT_LABEL: &str = "nuvira.cache.project";
/// The label holding a volume's project path.
pub const VOLUME_PATH_LABEL: &str = "nuvira.cache.path";
/// The label holding the cache folder ([`CacheRoot::dir`]) a volume belongs to: `nuvira cache
/// clean` of one cache folder never removes the volumes of another (another user's, or a
/// test's private one) on the same engine.
pub const VOLUME_ROOT_LABEL: &str = "nuvira.cache.root";

/// How many warm copies (workspace entry + cargo target dir) a project keeps: so many runs of
/// it at once each get a warm copy; a run beyond them makes a fresh copy and builds cold.
pub const WARM_SLOTS: u32 = 2;

/// An entry's key: `<project key>-<kind>`, with `-<slot>` for slots above 0.
pub fn entry_key(project_key: &str, kind: CacheKind, slot: u32) -> String {
    // Slot 0's entries keep the names they had before there were slots.
    if slot == 0 {
        format!("{project_key}-{kind}")
    } else {
        format!("{project_key}-{kind}-{slot}")
    }
}

/// What a workspace copy's note adds for a warm slot other than the first (nothing for it).
pub(crate) fn slot_note(slot: u32) -> String {
    if slot == 0 {
        String::new()
    } else {
        format!(
            " (warm slot {} of {WARM_SLOTS}: another run holds the first)",
            slot + 1
        )
    }
}

/// The file of an entry's metadata.
const META_FILE: &str = "entry.json";
/// The file of an entry's lock.
const LOCK_FILE: &str = "lock";
/// The folder of an entry's data.
const DATA_DIR: &str = "data";

/// What an entry caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheKind {
    /// The cargo target dir.
    Cargo,
    /// pip and uv caches.
    Python,
    /// npm, yarn, pnpm and bun caches.
    Node,
    /// Go's build cache.
    Go,
    /// The persistent workspace copy (local) or the workspace volume's manifest (Docker).
    Workspace,
}

impl CacheKind {
    /// Every toolchain kind (not [`CacheKind::Workspace`]).
    pub const TOOLCHAINS: [CacheKind; 4] = [Self::Cargo, Self::Python, Self::Node, Self::Go];

    /// `cargo`, `python`, `node`, `go` or `workspace`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cargo => "cargo",
            Self::Python => "python",
            Self::Node => "node",
            Self::Go => "go",
            Self::Workspace => "workspace",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Self::Cargo,
            Self::Python,
            Self::Node,
            Self::Go,
            Self::Workspace,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for CacheKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The environment that points `kind`'s tools at the folder `dir` (a host path for the local
/// and bubblewrap sandboxes, a container path for Docker). Empty for
/// [`CacheKind::Workspace`].
///
/// ```
/// use nuvira_sandbox::cache::{CacheKind, env_for};
/// let env = env_for(CacheKind::Cargo, std::path::Path::new("/c"));
/// assert_eq!(env["CARGO_TARGET_DIR"], "/c/target");
/// ```
pub fn env_for(kind: CacheKind, dir: &Path) -> BTreeMap<String, String> {
    let at = |sub: &str| dir.join(sub).to_string_lossy().into_owned();
    let pairs: Vec<(&str, String)> = match kind {
        CacheKind::Cargo => vec![("CARGO_TARGET_DIR", at("target"))],
        CacheKind::Python => vec![("PIP_CACHE_DIR", at("pip")), ("UV_CACHE_DIR", at("uv"))],
        CacheKind::Node => vec![
            ("npm_config_cache", at("npm")),
            ("YARN_CACHE_FOLDER", at("yarn")),
            // Not pnpm's store: a `node_modules` pnpm installed is tied to the store it was
            // installed from, which every sandbox points pnpm at (crate::pnpm).
            ("BUN_INSTALL_CACHE_DIR", at("bun")),
        ],
        CacheKind::Go => vec![("GOCACHE", at("go-build"))],
        CacheKind::Workspace => Vec::new(),
    };
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The toolchains a command in `workspace` (run in its sub-folder `dir`) may use: those whose
/// marker files are in the folder or the workspace root (`Cargo.toml`; `pyproject.toml`,
/// `setup.py`, `setup.cfg`, `requirements.txt`, `tox.ini`, `pytest.ini`; `package.json`;
/// `go.mod`), and the one the program names (`cargo`, `python3`, `pytest`, `npm`, `go`, ...).
pub fn toolchains_for(workspace: &Path, dir: &Path, command: &[String]) -> Vec<CacheKind> {
    let mut found = Vec::new();
    let markers: [(CacheKind, &[&str]); 4] = [
        (CacheKind::Cargo, &["Cargo.toml"]),
        (
            CacheKind::Python,
            &[
                "pyproject.toml",
                "setup.py",
                "setup.cfg",
                "requirements.txt",
                "tox.ini",
                "pytest.ini",
            ],
        ),
        (CacheKind::Node, &["package.json"]),
        (CacheKind::Go, &["go.mod"]),
    ];
    for folder in [workspace.to_path_buf(), workspace.join(dir)] {
        for (kind, files) in &markers {
            if files.iter().any(|f| folder.join(f).is_file()) && !found.contains(kind) {
                found.push(*kind);
            }
        }
    }
    let program = command
        .first()
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
        .unwrap_or_default();
    let by_program = match program.as_str() {
        "cargo" | "cargo-nextest" | "rustc" => Some(CacheKind::Cargo),
        p if p.starts_with("python") || matches!(p, "pytest" | "py.test" | "uv" | "tox") => {
            Some(CacheKind::Python)
        }
        "npm" | "npx" | "pnpm" | "yarn" | "bun" | "node" | "vitest" | "jest" => {
            Some(CacheKind::Node)
        }
        "go" => Some(CacheKind::Go),
        _ => None,
    };
    if let Some(kind) = by_program
        && !found.contains(&kind)
    {
        found.push(kind);
    }
    found.sort();
    found
}

/// Why the cache could not be used or changed; each names the folder or entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// No cache folder is known.
    #[error(
        "find the cache folder: none of {CACHE_DIR_ENV}, XDG_CACHE_HOME and HOME is set; set {CACHE_DIR_ENV} to a folder of yours, or run with --no-cache"
    )]
    NoFolder,
    /// `NUVIRA_CACHE_MAX` is not a size.
    #[error("read {CACHE_MAX_ENV}=`{0}`: expected a size such as 20g or 512m")]
    BadMax(String),
    /// The project folder could not be resolved.
    #[error("resolve the project folder `{}`: {source}", path.display())]
    Project {
        /// The folder as given.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file or folder of the cache could not be used.
    #[error("{action} `{}`: {source}; remove it with `nuvira cache clean` or set {CACHE_DIR_ENV}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Something in the cache folder is a symbolic link or not a folder.
    #[error("use the cache folder `{}`: it is a symbolic link or not a folder; remove it or set {CACHE_DIR_ENV}", path.display())]
    NotAFolder {
        /// The path.
        path: PathBuf,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CacheError + 'a {
    move |source| CacheError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The project key of a folder: `<name>-<16 hex digits of SHA-256(canonical path)>`, the name
/// being the folder's own name reduced to `[A-Za-z0-9._-]` (at most 32 characters).
///
/// # Errors
/// [`CacheError::Project`] when the folder cannot be resolved (it does not exist).
pub fn project_key(project: &Path) -> Result<(PathBuf, String), CacheError> {
    let canonical = std::fs::canonicalize(project).map_err(|source| CacheError::Project {
        path: project.to_path_buf(),
        source,
    })?;
    Ok((canonical.clone(), key_of_canonical(&canonical)))
}

fn key_of_canonical(canonical: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(canonical.as_os_str().as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let name = name.trim_start_matches('.');
    if name.is_empty() {
        format!("root-{hex}")
    } else {
        format!("{name}-{hex}")
    }
}

/// The Docker volume of an entry: `nuvira-cache-<entry key>`.
pub fn volume_name(entry_key: &str) -> String {
    format!("nuvira-cache-{entry_key}")
}

/// The cache folder and its size cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRoot {
    dir: PathBuf,
    max_bytes: u64,
}

/// What is recorded about an entry (`entry.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMeta {
    /// The project key.
    pub project_key: String,
    /// The canonical project folder.
    pub project: PathBuf,
    /// What the entry caches.
    pub kind: CacheKind,
    /// When a run last used it (seconds since the Unix epoch).
    pub last_used: u64,
    /// The apparent size of its files, as last measured (bytes).
    pub size: u64,
    /// Whether a Docker volume belongs to it ([`volume_name`]).
    #[serde(default)]
    pub volume: bool,
    /// When its Docker volume's size was last measured (seconds since the Unix epoch; 0:
    /// never). Measuring walks every volume of the engine, so it is done only now and then
    /// (see `docker_cache`); `size` holds the last measurement in between.
    #[serde(default)]
    pub measured: u64,
    /// The warm slot it belongs to (0 to [`WARM_SLOTS`] − 1): the workspace entry and the cargo
    /// target dir of each slot are one warm copy of the project; the other toolchains' entries
    /// are shared by every slot and are slot 0's.
    #[serde(default)]
    pub slot: u32,
}

/// One entry, as [`CacheRoot::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryInfo {
    /// `<project key>-<kind>`.
    pub key: String,
    /// Its folder.
    pub dir: PathBuf,
    /// What is recorded about it.
    #[serde(flatten)]
    pub meta: EntryMeta,
    /// Whether the project folder still exists.
    pub project_exists: bool,
}

/// What [`CacheRoot::evict`] and [`CacheRoot::remove`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Removal {
    /// The entries removed.
    pub removed: Vec<EntryInfo>,
    /// The entries left because a run is using them.
    pub in_use: Vec<String>,
    /// The entries that could not be removed: `(key, why)`.
    pub failed: Vec<(String, String)>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl CacheRoot {
    /// The cache folder from the environment ([`CACHE_DIR_ENV`], else
    /// `$XDG_CACHE_HOME/nuvira`, else `~/.cache/nuvira`) and the cap ([`CACHE_MAX_ENV`], else
    /// [`DEFAULT_MAX_BYTES`]).
    ///
    /// # Errors
    /// [`CacheError::NoFolder`] when none is set, [`CacheError::BadMax`] for a bad cap.
    pub fn from_env() -> Result<Self, CacheError> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let base = if let Some(dir) = var(CACHE_DIR_ENV) {
            PathBuf::from(dir)
        } else if let Some(xdg) = var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
        {
            xdg.join("nuvira")
        } else if let Some(home) = var("HOME") {
            PathBuf::from(home).join(".cache/nuvira")
        } else {
            return Err(CacheError::NoFolder);
        };
        let max_bytes = match std::env::var(CACHE_MAX_ENV) {
            Ok(text) if !text.trim().is_empty() => {
                crate::parse_size(&text).map_err(|_| CacheError::BadMax(text))?
            }
            _ => DEFAULT_MAX_BYTES,
        };
        Ok(Self::at(base, max_bytes))
    }

    /// A cache under the folder `base` (entries in `base/sandbox/`) capped at `max_bytes`.
    pub fn at(base: impl Into<PathBuf>, max_bytes: u64) -> Self {
        Self {
            dir: base.into().join(SANDBOX_SUBDIR),
            max_bytes,
        }
    }

    /// The folder holding the entries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size cap in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Creates the folder (private, `0700`) if needed; refuses a symlink.
    fn ensure(&self) -> Result<(), CacheError> {
        ensure_private_dir(&self.dir, true)
    }

    /// Every entry, sorted by key. Folders that are not entries are ignored.
    ///
    /// # Errors
    /// [`CacheError::Io`] when the folder cannot be read.
    pub fn list(&self) -> Result<Vec<EntryInfo>, CacheError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read the cache folder", &self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let dir = entry.path();
            if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let Some(key) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Some(meta) = read_meta(&dir) else {
                continue;
            };
            let project_exists = meta.project.is_dir();
            out.push(EntryInfo {
                key,
                dir,
                meta,
                project_exists,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// The entries of one project (by its folder), or of every project (`None`).
    ///
    /// # Errors
    /// As [`list`](Self::list); [`CacheError::Project`] when the folder does not exist.
    pub fn list_for(&self, project: Option<&Path>) -> Result<Vec<EntryInfo>, CacheError> {
        let all = self.list()?;
        match project {
            None => Ok(all),
            Some(p) => {
                let (_, key) = project_key(p)?;
                Ok(all
                    .into_iter()
                    .filter(|e| e.meta.project_key == key)
                    .collect())
            }
        }
    }

    /// Removes the given entries' folders, except those a run holds (in
    /// [`Removal::in_use`]). Docker volumes are the caller's (see `volume` in [`EntryMeta`]).
    pub fn remove(&self, entries: &[EntryInfo]) -> Removal {
        self.sweep_doomed();
        self.remove_entries(entries)
    }

    /// [`remove`](Self::remove) without the sweep of `.removing-*` leftovers.
    fn remove_entries(&self, entries: &[EntryInfo]) -> Removal {
        let mut out = Removal::default();
        for e in entries {
            let removed = match try_lock(&e.dir, FlockArg::LockExclusiveNonblock) {
                Ok(Some(lock)) => {
                    let r = remove_entry_dir(&e.dir);
                    drop(lock);
                    r
                }
                Ok(None) => {
                    out.in_use.push(e.key.clone());
                    continue;
                }
                // A half-made entry without a lock file: nothing can be using it.
                Err(_) => remove_entry_dir(&e.dir),
            };
            match removed {
                Ok(()) => out.removed.push(e.clone()),
                Err(err) => out.failed.push((e.key.clone(), err.to_string())),
            }
        }
        out
    }

    /// Removes what an earlier removal renamed away (`.removing-*`) but could not delete.
    fn sweep_doomed(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in rd.flatten() {
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir
                && entry
                    .file_name()
                    .as_encoded_bytes()
                    .starts_with(b".removing-")
            {
                let _ = remove_doomed(&entry.path());
            }
        }
    }

    /// Removes entries whose project folder no longer exists, then the least recently used
    /// ones until the total recorded size is at most the cap; entries in use are skipped.
    ///
    /// # Errors
    /// [`CacheError::Io`] when the folder cannot be read.
    pub fn evict(&self) -> Result<Removal, CacheError> {
        let mut entries = self.list()?;
        let (gone, kept): (Vec<_>, Vec<_>) = entries.drain(..).partition(|e| !e.project_exists);
        let mut removal = self.remove(&gone);
        let mut kept = kept;
        // Oldest first; the key breaks ties so the order is the same on every run.
        kept.sort_by(|a, b| (a.meta.last_used, &a.key).cmp(&(b.meta.last_used, &b.key)));
        let mut total: u64 = kept.iter().map(|e| e.meta.size).sum();
        for entry in &kept {
            if total <= self.max_bytes {
                break;
            }
            let r = self.remove_entries(std::slice::from_ref(entry));
            if !r.removed.is_empty() {
                total = total.saturating_sub(entry.meta.size);
            }
            removal.removed.extend(r.removed);
            removal.in_use.extend(r.in_use);
            removal.failed.extend(r.failed);
        }
        Ok(removal)
    }

    /// Records the sizes of Docker volumes measured after their run released them (`bytes` by
    /// entry key; each entry's data folder is added): the entries' metadata files are replaced
    /// whole, so a run writing one meanwhile keeps a consistent file.
    pub fn record_volume_sizes(&self, bytes: &BTreeMap<String, u64>) {
        for (key, size) in bytes {
            let dir = self.dir.join(key);
            if let Some(mut meta) = read_meta(&dir)
                && meta.volume
            {
                meta.size = dir_size(&dir.join(DATA_DIR)).saturating_add(*size);
                meta.measured = now_secs();
                let _ = write_meta(&dir, &meta);
            }
        }
    }

    /// Opens (creating it if needed) the entry of `kind` for the project `project_key` at
    /// `project`, holding its lock (`exclusive` or shared); `Ok(None)` when `exclusive` and
    /// another run holds it. The entry's last use is set to now.
    ///
    /// # Errors
    /// [`CacheError::Io`] / [`CacheError::NotAFolder`] when the entry cannot be made.
    pub fn open_entry(
        &self,
        project: &Path,
        project_key: &str,
        kind: CacheKind,
        exclusive: bool,
    ) -> Result<Option<EntryLease>, CacheError> {
        self.open_slot_entry(project, project_key, kind, 0, exclusive)
    }

    /// [`open_entry`](Self::open_entry) for warm slot `slot` (below [`WARM_SLOTS`]).
    ///
    /// # Errors
    /// As [`open_entry`](Self::open_entry).
    pub fn open_slot_entry(
        &self,
        project: &Path,
        project_key: &str,
        kind: CacheKind,
        slot: u32,
        exclusive: bool,
    ) -> Result<Option<EntryLease>, CacheError> {
        self.ensure()?;
        let key = entry_key(project_key, kind, slot.min(WARM_SLOTS - 1));
        let dir = self.dir.join(&key);
        // A concurrent eviction may remove the folder between our creating it and locking it:
        // then the lock is on a deleted file, and we try again.
        for _ in 0..8 {
            ensure_private_dir(&dir, false)?;
            let arg = if exclusive {
                FlockArg::LockExclusiveNonblock
            } else {
                FlockArg::LockShared
            };
            let lock = match try_lock(&dir, arg)? {
                Some(lock) => lock,
                None => return Ok(None),
            };
            if !lock_is_current(&dir, &lock) {
                continue;
            }
            let data = dir.join(DATA_DIR);
            ensure_private_dir(&data, false)?;
            let mut meta = read_meta(&dir).unwrap_or(EntryMeta {
                project_key: project_key.to_owned(),
                project: project.to_path_buf(),
                kind,
                last_used: 0,
                size: 0,
                volume: false,
                measured: 0,
                slot: slot.min(WARM_SLOTS - 1),
            });
            meta.last_used = now_secs();
            write_meta(&dir, &meta)?;
            return Ok(Some(EntryLease {
                key,
                dir,
                data,
                kind,
                slot: meta.slot,
                _lock: lock,
            }));
        }
        Err(CacheError::Io {
            action: "lock the cache entry",
            path: dir,
            source: io::Error::other("it keeps being removed by another process"),
        })
    }
}

/// An entry a run holds (its `flock` is released on drop).
#[derive(Debug)]
pub struct EntryLease {
    key: String,
    dir: PathBuf,
    data: PathBuf,
    kind: CacheKind,
    slot: u32,
    _lock: Flock<File>,
}

impl EntryLease {
    /// The warm slot it belongs to ([`EntryMeta::slot`]).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// `<project key>-<kind>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What it caches.
    pub fn kind(&self) -> CacheKind {
        self.kind
    }

    /// The folder the tools write to (`<entry>/data`).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The entry's own folder (metadata, lock, data).
    pub fn entry_dir(&self) -> &Path {
        &self.dir
    }

    /// Records that a Docker volume belongs to the entry.
    ///
    /// # Errors
    /// [`CacheError::Io`] when the metadata cannot be written.
    pub fn mark_volume(&self) -> Result<(), CacheError> {
        if let Some(mut meta) = read_meta(&self.dir)
            && !meta.volume
        {
            meta.volume = true;
            write_meta(&self.dir, &meta)?;
        }
        Ok(())
    }

    /// Measures the entry's data and records the size (and `extra` bytes kept elsewhere, such
    /// as a Docker volume's) and the time of last use.
    pub fn record_size(&self, extra: u64) {
        self.record(Some(extra));
    }

    /// What is recorded about the entry (`None` when its metadata cannot be read).
    pub fn meta(&self) -> Option<EntryMeta> {
        read_meta(&self.dir)
    }

    /// Records the time of last use and the size: the data's plus `volume` bytes measured now
    /// (`Some`), or, for an entry with a volume that was not measured this time (`None`), the
    /// last recorded size (the volume's estimate).
    fn record(&self, volume: Option<u64>) {
        let Some(mut meta) = read_meta(&self.dir) else {
            return;
        };
        match volume {
            Some(extra) => {
                meta.size = dir_size(&self.data).saturating_add(extra);
                if meta.volume {
                    meta.measured = now_secs();
                }
            }
            None if meta.volume => {}
            None => meta.size = dir_size(&self.data),
        }
        meta.last_used = now_secs();
        let _ = write_meta(&self.dir, &meta);
    }
}

/// The caches of one run: the toolchain entries it uses (shared) and, when it got it, the
/// project's workspace entry (exclusive).
#[derive(Debug)]
pub struct RunCache {
    root: CacheRoot,
    project: PathBuf,
    project_key: String,
    toolchains: Vec<EntryLease>,
    workspace: Option<EntryLease>,
}

impl RunCache {
    /// Opens the caches for `request` (its workspace is the project; the toolchains come from
    /// [`toolchains_for`]). The workspace entry is `None` when another run holds it.
    ///
    /// # Errors
    /// [`CacheError`] when the project or an entry cannot be used.
    pub fn open(
        root: &CacheRoot,
        request: &nuvira_api::SandboxRequest,
    ) -> Result<Self, CacheError> {
        let (project, project_key) = project_key(&request.workspace)?;
        // The first free warm slot, claimed by its workspace entry's exclusive lock.
        let mut workspace = None;
        for slot in 0..WARM_SLOTS {
            workspace =
                root.open_slot_entry(&project, &project_key, CacheKind::Workspace, slot, true)?;
            if workspace.is_some() {
                break;
            }
        }
        let mut toolchains = Vec::new();
        for kind in toolchains_for(&project, &request.dir, &request.command) {
            // The target dir belongs to the slot's copy; a run on a fresh copy builds cold (see
            // the module docs, "Concurrency").
            let slot = match (kind, &workspace) {
                (CacheKind::Cargo, Some(ws)) => ws.slot(),
                (CacheKind::Cargo, None) => continue,
                _ => 0,
            };
            if let Some(lease) = root.open_slot_entry(&project, &project_key, kind, slot, false)? {
                toolchains.push(lease);
            }
        }
        Ok(Self {
            root: root.clone(),
            project,
            project_key,
            toolchains,
            workspace,
        })
    }

    /// The project key.
    pub fn project_key(&self) -> &str {
        &self.project_key
    }

    /// The cache folder the entries are in.
    pub fn root(&self) -> &CacheRoot {
        &self.root
    }

    /// The canonical project folder.
    pub fn project(&self) -> &Path {
        &self.project
    }

    /// The toolchain entries held.
    pub fn toolchains(&self) -> &[EntryLease] {
        &self.toolchains
    }

    /// The workspace entry, when this run holds it (else another run of the project does:
    /// use a fresh copy).
    pub fn workspace(&self) -> Option<&EntryLease> {
        self.workspace.as_ref()
    }

    /// The folders to bind read-write (at the same paths) in a sandbox on this machine: each
    /// toolchain entry's data folder.
    pub fn binds(&self) -> Vec<PathBuf> {
        self.toolchains
            .iter()
            .map(|l| l.data_dir().to_path_buf())
            .collect()
    }

    /// The environment pointing the tools at the toolchain entries (host paths).
    pub fn env(&self) -> BTreeMap<String, String> {
        self.toolchains
            .iter()
            .flat_map(|l| env_for(l.kind(), l.data_dir()))
            .collect()
    }

    /// Records the sizes of the entries used, releases them and evicts by the cap (see the
    /// [module docs](self)); returns what eviction removed (Docker volumes of removed entries
    /// are the caller's to remove).
    pub fn finish(self) -> Removal {
        self.finish_with_extra(&BTreeMap::new())
    }

    /// [`finish`](Self::finish), adding `extra[key]` bytes (e.g. a Docker volume's size) to
    /// the size recorded for entry `key`.
    pub fn finish_with_extra(self, extra: &BTreeMap<String, u64>) -> Removal {
        for lease in self.toolchains.iter().chain(self.workspace.iter()) {
            lease.record(Some(extra.get(lease.key()).copied().unwrap_or(0)));
        }
        let root = self.root.clone();
        drop(self);
        root.evict().unwrap_or_default()
    }

    /// [`finish`](Self::finish) for a run whose volumes were measured (`Some`: bytes by entry
    /// key, as [`finish_with_extra`](Self::finish_with_extra)) or not (`None`: an entry with a
    /// volume keeps its last recorded size as the estimate).
    pub fn finish_with_volumes(self, measured: Option<&BTreeMap<String, u64>>) -> Removal {
        if let Some(extra) = measured {
            return self.finish_with_extra(extra);
        }
        for lease in self.toolchains.iter().chain(self.workspace.iter()) {
            lease.record(None);
        }
        let root = self.root.clone();
        drop(self);
        root.evict().unwrap_or_default()
    }
}

/// Kills the process groups that runs which died (SIGKILL, a crash) left working in the
/// projects' persistent copies: for each workspace entry no live run holds, the group recorded
/// beside its copy is killed if one of its processes still works inside the copy (so a reused
/// group id is never signalled). [`crate::remove_stale`] calls it.
pub fn kill_stale_groups(root: &CacheRoot) {
    let Ok(entries) = root.list() else { return };
    for e in entries
        .iter()
        .filter(|e| e.meta.kind == CacheKind::Workspace)
    {
        let pgid_file = crate::local::pgid_file_of(&e.dir.join(DATA_DIR));
        if std::fs::symlink_metadata(&pgid_file).is_err() {
            continue;
        }
        // Held: its run is alive and will clean up itself.
        let Ok(Some(_lock)) = try_lock(&e.dir, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        kill_recorded_group(&e.dir);
    }
}

/// Kills the group recorded beside a workspace entry's copy (if it still works there) and
/// removes the record; the caller holds the entry exclusively.
fn kill_recorded_group(entry: &Path) {
    let copy = entry.join(DATA_DIR);
    let pgid_file = crate::local::pgid_file_of(&copy);
    if let Some(pgid) = std::fs::read_to_string(&pgid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| *p > 1)
        && crate::local::group_works_in(pgid, &copy)
    {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = std::fs::remove_file(&pgid_file);
}

/// Creates `dir` private if missing (with its parents when `parents`); refuses a symlink or a
/// non-folder.
fn ensure_private_dir(dir: &Path, parents: bool) -> Result<(), CacheError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(CacheError::NotAFolder {
                path: dir.to_path_buf(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspect", dir)(e)),
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(parents);
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    match b.create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
                Ok(())
            } else {
                Err(CacheError::NotAFolder {
                    path: dir.to_path_buf(),
                })
            }
        }
        Err(e) => Err(io_err("create", dir)(e)),
    }
}

/// Locks `<entry>/lock` (created if missing); `Ok(None)`: a non-blocking lock is held elsewhere.
fn try_lock(entry: &Path, arg: FlockArg) -> Result<Option<Flock<File>>, CacheError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = entry.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io_err("open the lock", &path))?;
    match Flock::lock(file, arg) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(CacheError::Io {
            action: "lock",
            path,
            source: io::Error::from(errno),
        }),
    }
}

/// Whether the locked file is still the entry's lock file (not removed by an eviction).
fn lock_is_current(entry: &Path, lock: &Flock<File>) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(held), Ok(now)) = (
        lock.metadata(),
        std::fs::symlink_metadata(entry.join(LOCK_FILE)),
    ) else {
        return false;
    };
    held.ino() == now.ino() && held.dev() == now.dev()
}

fn read_meta(entry: &Path) -> Option<EntryMeta> {
    let path = entry.join(META_FILE);
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return None;
    }
    let meta: EntryMeta = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    // An entry's metadata must agree with its name.
    let name = entry.file_name()?.to_str()?;
    (name == entry_key(&meta.project_key, meta.kind, meta.slot)
        && meta.slot < WARM_SLOTS
        && CacheKind::parse(meta.kind.as_str()).is_some())
    .then_some(meta)
}

fn write_meta(entry: &Path, meta: &EntryMeta) -> Result<(), CacheError> {
    use std::io::Write as _;
    let path = entry.join(META_FILE);
    let bytes = serde_json::to_vec_pretty(meta).map_err(|e| CacheError::Io {
        action: "write",
        path: path.clone(),
        source: io::Error::other(e),
    })?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".entry-")
        .tempfile_in(entry)
        .map_err(io_err("write", &path))?;
    tmp.write_all(&bytes).map_err(io_err("write", &path))?;
    tmp.persist(&path)
        .map_err(|e| io_err("write", &path)(e.error))?;
    Ok(())
}

/// Removes an entry folder: renamed away first (so a run opening it meanwhile makes a new one),
/// then deleted without following symlinks.
fn remove_entry_dir(dir: &Path) -> io::Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let doomed = parent.join(format!(
        ".removing-{}-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    std::fs::rename(dir, &doomed)?;
    remove_doomed(&doomed)
}

/// Deletes a folder renamed away for removal, trying again when something changed below it
/// during the walk.
fn remove_doomed(doomed: &Path) -> io::Result<()> {
    let mut last = Ok(());
    for _ in 0..3 {
        make_writable(doomed);
        match std::fs::remove_dir_all(doomed) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Err(e),
        }
    }
    last
}

/// Tools leave read-only folders (Go's module cache, `chmod -w` in a test): give the owner
/// write permission back so the folder can be emptied. Symlinks are not followed.
pub(crate) fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode | 0o700));
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
}

/// The apparent size of the regular files below `dir` (symlinks not followed).
pub fn dir_size(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file()
                && let Ok(m) = e.metadata()
            {
                total = total.saturating_add(m.len());
            }
        }
    }
    total
}

/// Where a local (or bubblewrap) run's workspace copy is.
#[derive(Debug)]
pub enum WorkCopy {
    /// A fresh temporary copy, removed on drop.
    Temp(tempfile::TempDir),
    /// The project's persistent copy (the workspace entry's data folder), synced.
    Persistent(PathBuf),
}

impl Drop for WorkCopy {
    fn drop(&mut self) {
        // A read-only folder (the workspace's own, or one a run made so) would keep
        // `TempDir`'s removal from emptying it: the owner's permissions come back first.
        if let Self::Temp(t) = self {
            make_writable(t.path());
        }
    }
}

impl WorkCopy {
    /// The copy's folder.
    pub fn path(&self) -> &Path {
        match self {
            Self::Temp(t) => t.path(),
            Self::Persistent(p) => p,
        }
    }
}

/// A workspace copy ready for a run on this machine, with the caches it holds.
#[derive(Debug)]
pub struct Prepared {
    /// The copy.
    pub copy: WorkCopy,
    /// Special files left out of it (workspace-relative, `/`-separated).
    pub special: Vec<String>,
    /// The caches, when the request asked for them and they could be opened.
    pub cache: Option<RunCache>,
    /// How the copy was made, for [`SandboxInfo::workspace_copy`](nuvira_api::SandboxInfo).
    pub note: Option<String>,
}

/// Makes the workspace copy for a run on this machine: without
/// [`cache`](nuvira_api::SandboxRequest::cache), a fresh temporary copy (as always); with it,
/// the project's persistent copy synced by [`crate::sync::sync_tree`], or a fresh copy when
/// another run holds it or the cache cannot be used (said in [`Prepared::note`]; a cache that
/// cannot be used is a warning, not an error). `root`: the cache folder, `None` for
/// [`CacheRoot::from_env`]. The local sandbox calls it; a bubblewrap sandbox can too.
///
/// # Errors
/// [`SandboxError::Failed`](nuvira_api::SandboxError::Failed) when the copy cannot be made.
pub async fn prepare_local(
    request: &nuvira_api::SandboxRequest,
    root: Option<&CacheRoot>,
) -> Result<Prepared, nuvira_api::SandboxError> {
    let request = request.clone();
    let root = root.cloned();
    tokio::task::spawn_blocking(move || prepare_local_blocking(&request, root))
        .await
        .map_err(|e| nuvira_api::SandboxError::Failed(format!("copy the workspace: {e}")))?
}

fn fresh_copy(
    request: &nuvira_api::SandboxRequest,
) -> Result<(WorkCopy, Vec<String>), nuvira_api::SandboxError> {
    // The owning pid in the name: a copy whose process died is removed at the next start
    // ([`crate::remove_stale`]).
    let copy = tempfile::Builder::new()
        .prefix(&format!(
            "{}{}-",
            crate::local::COPY_PREFIX,
            std::process::id()
        ))
        .tempdir()
        .map_err(|e| nuvira_api::SandboxError::Failed(format!("create a temporary folder: {e}")))?;
    // A `WorkCopy` at once: a copy that fails half-way (its read-only folders made so) is
    // still removed whole.
    let copy = WorkCopy::Temp(copy);
    let special =
        crate::local::copy_workspace(&request.workspace, copy.path(), request.include_ignored)?;
    Ok((copy, special))
}

fn prepare_local_blocking(
    request: &nuvira_api::SandboxRequest,
    root: Option<CacheRoot>,
) -> Result<Prepared, nuvira_api::SandboxError> {
    if !request.cache {
        let (copy, special) = fresh_copy(request)?;
        return Ok(Prepared {
            copy,
            special,
            cache: None,
            note: None,
        });
    }
    let root = match root {
        Some(r) => Ok(r),
        None => CacheRoot::from_env(),
    };
    let cache = match root.and_then(|root| RunCache::open(&root, request)) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("warm caches unused: {e}");
            let (copy, special) = fresh_copy(request)?;
            return Ok(Prepared {
                copy,
                special,
                cache: None,
                note: Some(format!("fresh copy: the cache cannot be used: {e}")),
            });
        }
    };
    let Some(ws) = cache.workspace() else {
        let (copy, special) = fresh_copy(request)?;
        return Ok(Prepared {
            copy,
            special,
            cache: Some(cache),
            note: Some(format!(
                "fresh copy: the project's {WARM_SLOTS} persistent copies are in use by other runs"
            )),
        });
    };
    // A run of this project that died may have left its command running in the copy.
    kill_recorded_group(ws.entry_dir());
    let dst = ws.data_dir().to_path_buf();
    let manifest = ws.entry_dir().join("manifest");
    let report = crate::sync::sync_tree(
        &request.workspace,
        &dst,
        crate::walk_options(request.include_ignored),
        &manifest,
    )
    .map_err(|e| nuvira_api::SandboxError::Failed(format!("sync the workspace copy: {e}")))?;
    Ok(Prepared {
        copy: WorkCopy::Persistent(dst),
        special: crate::special_names(&report.special),
        note: Some(format!("{}{}", report.summary(), slot_note(ws.slot()))),
        cache: Some(cache),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn keys_differ_by_path_and_name_the_folder() {
        let a = key_of_canonical(Path::new("/home/u/proj"));
        let b = key_of_canonical(Path::new("/home/v/proj"));
        assert_ne!(a, b);
        assert!(
            a.starts_with("proj-") && a.len() == "proj-".len() + 16,
            "{a}"
        );
        assert!(key_of_canonical(Path::new("/")).starts_with("root-"));
        let odd = key_of_canonical(Path::new("/x/.a b\u{1b}[31m"));
        assert!(
            odd.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "{odd}"
        );
    }

    #[test]
    fn toolchains_come_from_markers_and_the_program() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        std::fs::create_dir(dir.path().join("web")).unwrap();
        std::fs::write(dir.path().join("web/package.json"), "{}").unwrap();
        let kinds = toolchains_for(dir.path(), Path::new("web"), &["python3".into()]);
        assert_eq!(
            kinds,
            vec![CacheKind::Cargo, CacheKind::Python, CacheKind::Node]
        );
        assert!(toolchains_for(dir.path(), Path::new(""), &["make".into()]) == [CacheKind::Cargo]);
    }

    #[test]
    fn a_shared_lease_blocks_removal_and_an_exclusive_one_is_refused_twice() {
        let base = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = CacheRoot::at(base.path(), 1 << 30);
        let (p, key) = project_key(project.path()).unwrap();
        let shared = root
            .open_entry(&p, &key, CacheKind::Cargo, false)
            .unwrap()
            .unwrap();
        let ws = root
            .open_entry(&p, &key, CacheKind::Workspace, true)
            .unwrap()
            .unwrap();
        assert!(
            root.open_entry(&p, &key, CacheKind::Workspace, true)
                .unwrap()
                .is_none()
        );
        let all = root.list().unwrap();
        assert_eq!(all.len(), 2);
        let r = root.remove(&all);
        assert!(r.removed.is_empty() && r.in_use.len() == 2, "{r:?}");
        drop((shared, ws));
        let r = root.remove(&root.list().unwrap());
        assert_eq!(r.removed.len(), 2);
        assert!(root.list().unwrap().is_empty());
    }

    #[test]
    fn what_an_interrupted_removal_left_is_deleted_by_the_next_one() {
        let base = tempfile::tempdir().unwrap();
        let root = CacheRoot::at(base.path(), 1 << 30);
        root.ensure().unwrap();
        let doomed = root.dir().join(".removing-p-0123456789abcdef-cargo-1");
        std::fs::create_dir_all(doomed.join("data/deep")).unwrap();
        std::fs::write(doomed.join("data/deep/f"), "x").unwrap();
        // Not writable: the sweep makes it so first.
        std::fs::set_permissions(
            doomed.join("data"),
            std::os::unix::fs::PermissionsExt::from_mode(0o500),
        )
        .unwrap();
        let other = root.dir().join("removing-not-ours");
        std::fs::create_dir(&other).unwrap();
        let r = root.remove(&[]);
        assert!(r.failed.is_empty(), "{r:?}");
        assert!(!doomed.exists());
        assert!(other.exists(), "only `.removing-*` folders are swept");
    }
}
