//! Memory and process limits on a whole run, through cgroups, for the local and bubblewrap
//! sandboxes.
//!
//! Per-process rlimits are the wrong tool for test runs: `RLIMIT_DATA` counts every private
//! mapping, thread stacks included, so it aborts `rustc` on a large crate and makes a test that
//! spawns hundreds of threads fail with "memory allocation failed" long before the machine is short
//! of memory; and `RLIMIT_NPROC` counts every process of the user on the machine. A cgroup bounds
//! what the run as a whole uses, whatever it forks, and tells afterwards whether a limit was hit.
//!
//! [`detect`] finds, once per process, how a run can get its own cgroup:
//! - **cgroup v2, delegated**: the unified hierarchy is mounted at `/sys/fs/cgroup` and this
//!   process's own cgroup (from `/proc/self/cgroup`) has `memory` and `pids` in its
//!   `cgroup.subtree_control` (or they can be enabled there): each run gets a child cgroup with
//!   `memory.max`, `memory.swap.max = 0` and `pids.max`.
//! - **cgroup v2 through systemd**: otherwise, when systemd runs the machine
//!   (`/run/systemd/system`) and `systemd-run` is on `PATH`, the command is started as
//!   `systemd-run --scope -p MemoryMax=… -p MemorySwapMax=0 -p TasksMax=…` (`--user` when not
//!   root); an out-of-memory kill is read from the scope's `Result` afterwards.
//! - **cgroup v1**: the `memory` and `pids` hierarchies are mounted (anywhere, found in
//!   `/proc/mounts`) and writable: each run gets a child of this process's cgroup in both, with
//!   `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so swap does not extend it) and
//!   `pids.max`.
//! - otherwise limits are **not enforced**, and every run's
//!   [`SandboxInfo::limits`](nuvira_api::SandboxInfo::limits) says so and why.
//!
//! The command joins its cgroup before it runs anything: it is started through `/bin/sh -c`,
//! which writes its own pid into the cgroup's `cgroup.procs` and then `exec`s the command, so
//! nothing it starts is ever outside (no `unsafe` `pre_exec` needed). When the run ends every
//! process left in the cgroup is killed — even one that left the process group with `setsid` —
//! and the cgroup is removed.
//!
//! On cgroup v1 that join costs 14–20 ms of kernel time per run, so by default a run takes a
//! *reused* pair of cgroups instead (`limits/pool.rs`): a thread of this process joined them once and
//! starts the command, which is born inside; between runs every other process in them is
//! killed and the limits are set again. `NUVIRA_CGROUP_POOL=0` gives every run a new cgroup.

mod pool;

pub use pool::release as release_pooled;

/// Whether runs reuse their cgroups here: cgroup v1, kernel 5.10 or later, and
/// `NUVIRA_CGROUP_POOL` is not `0`.
pub fn reuses_cgroups() -> bool {
    matches!(detect(), Cgroups::V1 { .. }) && pool::enabled()
}

use nuvira_api::ResourceLimits;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How runs of this process can be put in a cgroup of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cgroups {
    /// A delegated cgroup v2 folder (this process's own cgroup) under which each run gets a
    /// child with `memory` and `pids` limits.
    V2 {
        /// The parent of the runs' cgroups.
        parent: PathBuf,
    },
    /// cgroup v2 through `systemd-run --scope`.
    Systemd {
        /// The `systemd-run` program.
        systemd_run: PathBuf,
        /// Talk to the user's manager (`--user`): this process is not root.
        user: bool,
    },
    /// cgroup v1: the parents (this process's cgroups) in the `memory` and `pids` hierarchies.
    V1 {
        /// The parent in the memory hierarchy.
        memory: PathBuf,
        /// The parent in the pids hierarchy.
        pids: PathBuf,
    },
    /// No usable cgroup: limits are not enforced, for the reason given.
    Unavailable(String),
}

impl Cgroups {
    /// Whether memory and process limits are enforced.
    pub fn enforced(&self) -> bool {
        !matches!(self, Self::Unavailable(_))
    }

    /// A short description, as the sandbox reports it: `cgroup v1 (/sys/fs/cgroup/memory/…)`
    /// or `not enforced: …`.
    pub fn describe(&self) -> String {
        match self {
            Self::V2 { parent } => format!("cgroup v2 (delegated, under {})", parent.display()),
            Self::Systemd { user, .. } => format!(
                "cgroup v2 (systemd-run --scope{})",
                if *user { " --user" } else { "" }
            ),
            Self::V1 { memory, pids } => format!(
                "cgroup v1 (under {} and {})",
                memory.display(),
                pids.display()
            ),
            Self::Unavailable(why) => format!(
                "memory and process limits are not enforced: {why}; use the docker sandbox, or run where cgroup v2 is delegated to this user (systemd) or the cgroup v1 memory and pids hierarchies are writable"
            ),
        }
    }
}

/// How runs of this process get their cgroup (found once, on first use).
pub fn detect() -> &'static Cgroups {
    static FOUND: LazyLock<Cgroups> = LazyLock::new(|| {
        if std::env::var_os("NUVIRA_NO_CGROUPS").is_some_and(|v| v == "1") {
            return Cgroups::Unavailable("NUVIRA_NO_CGROUPS=1 is set".into());
        }
        detect_in(Path::new("/proc"), Path::new("/sys/fs/cgroup"))
    });
    &FOUND
}

fn detect_in(proc_: &Path, unified: &Path) -> Cgroups {
    let own = std::fs::read_to_string(proc_.join("self/cgroup")).unwrap_or_default();
    let mut reasons = Vec::new();
    if unified.join("cgroup.controllers").is_file() {
        // The unified hierarchy only: `0::/path`.
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/");
        let parent = unified.join(path.trim_start_matches('/'));
        match delegated_v2(&parent) {
            Ok(()) => return Cgroups::V2 { parent },
            Err(why) => reasons.push(why),
        }
        if Path::new("/run/systemd/system").is_dir() {
            if let Some(systemd_run) = crate::local::find_on_path("systemd-run") {
                let user = !nix::unistd::Uid::effective().is_root();
                // Probed once: a scope needs a reachable systemd manager (and, for --user, a
                // user session with delegated memory and pids controllers).
                match probe_systemd_run(&systemd_run, user) {
                    Ok(()) => return Cgroups::Systemd { systemd_run, user },
                    Err(why) => reasons.push(why),
                }
            } else {
                reasons.push("systemd-run is not on PATH".into());
            }
        } else {
            reasons.push("systemd does not run this machine (no /run/systemd/system)".into());
        }
        return Cgroups::Unavailable(reasons.join("; "));
    }
    let mounts = std::fs::read_to_string(proc_.join("mounts")).unwrap_or_default();
    let mount_of = |controller: &str| {
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller))
                .then(|| PathBuf::from(f[1]))
        })
    };
    let own_path = |controller: &str| {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',')
                .any(|c| c == controller)
                .then(|| path.to_owned())
        })
    };
    let v1_parent = |controller: &str| -> Result<PathBuf, String> {
        let root = mount_of(controller)
            .ok_or_else(|| format!("no cgroup v1 `{controller}` hierarchy is mounted"))?;
        let own = own_path(controller).unwrap_or_else(|| "/".into());
        let inside = root.join(own.trim_start_matches('/'));
        // In a container the path in /proc/self/cgroup may be the host's: use the mount's root.
        let parent = if inside.is_dir() { inside } else { root };
        probe_writable(&parent)?;
        Ok(parent)
    };
    match (v1_parent("memory"), v1_parent("pids")) {
        (Ok(memory), Ok(pids)) => Cgroups::V1 { memory, pids },
        (m, p) => {
            reasons.extend(m.err());
            reasons.extend(p.err());
            if reasons.is_empty() {
                reasons.push("no cgroup hierarchy found".into());
            }
            Cgroups::Unavailable(reasons.join("; "))
        }
    }
}

/// Runs `true` in a scope with the limits runs get, to know that runs can.
fn probe_systemd_run(systemd_run: &Path, user: bool) -> Result<(), String> {
    let mut cmd = std::process::Command::new(systemd_run);
    if user {
        cmd.arg("--user");
    }
    cmd.args([
        "--scope",
        "--quiet",
        "--collect",
        "--property=MemoryMax=1G",
        "--property=TasksMax=64",
        "--",
        "true",
    ])
    .stdin(std::process::Stdio::null());
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "systemd-run --scope{} failed: {}",
            if user { " --user" } else { "" },
            nuvira_api::text::escape_control(String::from_utf8_lossy(&out.stderr).trim())
        )),
        Err(e) => Err(format!("start {}: {e}", systemd_run.display())),
    }
}

/// Whether `parent` (a v2 cgroup) can hold children with memory and pids limits.
fn delegated_v2(parent: &Path) -> Result<(), String> {
    let has = |p: &Path| {
        let list = std::fs::read_to_string(p.join("cgroup.subtree_control")).unwrap_or_default();
        let words: Vec<&str> = list.split_whitespace().collect();
        words.contains(&"memory") && words.contains(&"pids")
    };
    if !has(parent) {
        // Possible only where no process sits in `parent` itself (the root, or a delegated
        // folder whose owner moved itself into a leaf).
        let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +pids");
    }
    if !has(parent) {
        return Err(format!(
            "cgroup v2 is mounted but {} does not delegate the memory and pids controllers",
            parent.display()
        ));
    }
    probe_writable(parent)
}

/// Creates and removes a child of `parent`, to know that runs can.
fn probe_writable(parent: &Path) -> Result<(), String> {
    let probe = parent.join(format!("nuvira-probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let _ = std::fs::remove_dir(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!(
            "cannot create a cgroup under {}: {e}",
            parent.display()
        )),
    }
}

/// Removes the run cgroups (`nuvira-run-<pid>-…`) of `nuvira` processes that died without doing
/// it (SIGKILL, a crash): every process still in one is killed, then it is removed. Cgroups of
/// live processes are left alone. Returns the cgroups removed. Called by
/// [`crate::remove_stale`].
pub fn remove_stale() -> Vec<PathBuf> {
    let parents: Vec<&Path> = match detect() {
        Cgroups::V2 { parent } => vec![parent],
        Cgroups::V1 { memory, pids } => vec![memory, pids],
        Cgroups::Systemd { .. } | Cgroups::Unavailable(_) => Vec::new(),
    };
    let mut removed = Vec::new();
    for parent in parents {
        removed.extend(remove_stale_in(parent));
    }
    removed
}

fn remove_stale_in(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nuvira-run-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if alive || pid == i32::try_from(std::process::id()).unwrap_or(-1) {
            continue;
        }
        let dir = entry.path();
        let run = RunCgroup {
            kind: RunKind::Dirs {
                v2: dir.join("cgroup.kill").exists() || dir.join("memory.max").exists(),
                dirs: vec![dir.clone()],
            },
            note: String::new(),
        };
        drop(run); // kills what is left and removes the folder
        if !dir.exists() {
            removed.push(dir);
        }
    }
    removed
}

/// What the run's cgroup saw: which limit, if any, stopped something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hits {
    /// The kernel killed a process for exceeding the memory limit.
    pub(crate) oom_killed: bool,
    /// The process limit refused at least one `fork`/`clone` (a process or a thread).
    pub(crate) pids_refused: bool,
}

/// One run's cgroup: created before the command starts, killed and removed when dropped.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    kind: RunKind,
    note: String,
}

#[derive(Debug)]
enum RunKind {
    /// Folders we created (v2: one; v1: memory and pids).
    Dirs { dirs: Vec<PathBuf>, v2: bool },
    /// A reused cgroup v1 pair whose starter thread starts the command ([`pool`]), with the
    /// counters at the run's start.
    Pooled {
        slot: Option<pool::Slot>,
        oom_kills: u64,
        pids_refused: u64,
    },
    /// A systemd scope unit.
    Scope {
        systemd_run: PathBuf,
        user: bool,
        unit: String,
        memory: u64,
        pids: u32,
    },
    /// Nothing enforced.
    None,
}

impl RunCgroup {
    /// A cgroup for one run under `limits`; when none can be made the run goes on without, and
    /// [`note`](Self::note) says that its limits are not enforced and why.
    pub(crate) fn create(cgroups: &Cgroups, limits: &ResourceLimits) -> Self {
        let memory = limits.memory_bytes;
        let pids = limits.pids;
        let what = format!(
            "memory {} and {pids} processes/threads",
            format_size(memory)
        );
        let name = run_name();
        let made = match cgroups {
            Cgroups::V2 { parent } => {
                make_v2(parent, &name, memory, pids).map(|dir| RunKind::Dirs {
                    dirs: vec![dir],
                    v2: true,
                })
            }
            Cgroups::V1 {
                memory: mem_parent,
                pids: pids_parent,
            } => pooled(mem_parent, pids_parent, &name, memory, pids).or_else(|_| {
                make_v1(mem_parent, pids_parent, &name, memory, pids)
                    .map(|dirs| RunKind::Dirs { dirs, v2: false })
            }),
            Cgroups::Systemd { systemd_run, user } => Ok(RunKind::Scope {
                systemd_run: systemd_run.clone(),
                user: *user,
                unit: format!("{name}.scope"),
                memory,
                pids,
            }),
            Cgroups::Unavailable(_) => {
                return Self {
                    kind: RunKind::None,
                    note: cgroups.describe(),
                };
            }
        };
        match made {
            Ok(kind) => Self {
                kind,
                note: format!("{what} enforced by {}", cgroups.describe()),
            },
            Err(e) => Self {
                kind: RunKind::None,
                note: format!(
                    "memory and process limits are not enforced: {e}; use the docker sandbox"
                ),
            },
        }
    }

    /// What the sandbox reports about the limits of this run.
    pub(crate) fn note(&self) -> &str {
        &self.note
    }

    /// `command`, wrapped so that it runs inside the cgroup from its first instruction.
    pub(crate) fn wrap(&self, command: Vec<String>) -> Vec<String> {
        match &self.kind {
            // Started by the slot's thread, the command is born inside.
            RunKind::None | RunKind::Pooled { .. } => command,
            RunKind::Dirs { dirs, .. } => {
                let mut argv = vec![
                    "/bin/sh".to_owned(),
                    "-c".to_owned(),
                    JOIN_SCRIPT.to_owned(),
                    "nuvira-cgroup".to_owned(),
                ];
                argv.extend(
                    dirs.iter()
                        .map(|d| d.join("cgroup.procs").to_string_lossy().into_owned()),
                );
                argv.push("--".to_owned());
                argv.extend(command);
                argv
            }
            RunKind::Scope {
                systemd_run,
                user,
                unit,
                memory,
                pids,
            } => {
                let mut argv = vec![systemd_run.to_string_lossy().into_owned()];
                if *user {
                    argv.push("--user".into());
                }
                argv.extend([
                    "--scope".to_owned(),
                    "--quiet".to_owned(),
                    format!("--unit={unit}"),
                    format!("--property=MemoryMax={memory}"),
                    "--property=MemorySwapMax=0".to_owned(),
                    format!("--property=TasksMax={pids}"),
                    "--".to_owned(),
                ]);
                argv.extend(command);
                argv
            }
        }
    }

    /// Starts the [wrapped](Self::wrap) command: from the slot's thread for a reused cgroup,
    /// from this thread otherwise.
    pub(crate) async fn spawn(
        &self,
        mut cmd: tokio::process::Command,
    ) -> std::io::Result<tokio::process::Child> {
        match &self.kind {
            RunKind::Pooled {
                slot: Some(slot), ..
            } => slot.spawn(cmd).await,
            _ => cmd.spawn(),
        }
    }

    /// Which limits stopped something, read after the command ended and before
    /// [`kill_all`](Self::kill_all).
    pub(crate) fn hits(&self) -> Hits {
        match &self.kind {
            RunKind::None | RunKind::Pooled { slot: None, .. } => Hits::default(),
            RunKind::Pooled {
                slot: Some(slot),
                oom_kills,
                pids_refused,
            } => {
                let (oom, refused) = v1_counters(&slot.dirs);
                Hits {
                    oom_killed: oom > *oom_kills,
                    pids_refused: refused > *pids_refused,
                }
            }
            RunKind::Dirs { dirs, v2: true } => {
                let dir = &dirs[0];
                Hits {
                    oom_killed: counter(&dir.join("memory.events"), "oom_kill") > 0,
                    pids_refused: counter(&dir.join("pids.events"), "max") > 0,
                }
            }
            RunKind::Dirs { dirs, v2: false } => {
                let mut hits = Hits::default();
                for dir in dirs {
                    hits.oom_killed |= counter(&dir.join("memory.oom_control"), "oom_kill") > 0;
                    hits.pids_refused |= counter(&dir.join("pids.events"), "max") > 0;
                }
                hits
            }
            RunKind::Scope { user, unit, .. } => {
                let mut cmd = std::process::Command::new("systemctl");
                if *user {
                    cmd.arg("--user");
                }
                let result = cmd
                    .args(["show", "--property=Result", "--value", unit])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                    .unwrap_or_default();
                Hits {
                    oom_killed: result == "oom-kill",
                    pids_refused: false,
                }
            }
        }
    }

    /// Kills every process still in the cgroup (`SIGKILL`), including ones that left the
    /// command's process group.
    pub(crate) fn kill_all(&self) {
        match &self.kind {
            RunKind::None | RunKind::Pooled { slot: None, .. } => {}
            RunKind::Pooled {
                slot: Some(slot), ..
            } => slot.kill_others(),
            RunKind::Dirs { dirs, v2 } => {
                if *v2 && std::fs::write(dirs[0].join("cgroup.kill"), "1").is_ok() {
                    return;
                }
                // No cgroup.kill: signal each process, until none is left (a fork bomb may add
                // some while we go; the pids limit bounds how many).
                for _ in 0..50 {
                    let mut any = false;
                    for dir in dirs {
                        let procs =
                            std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                            any = true;
                            let _ = nix::sys::signal::kill(
                                nix::unistd::Pid::from_raw(pid),
                                nix::sys::signal::Signal::SIGKILL,
                            );
                        }
                    }
                    if !any {
                        return;
                    }
                    std::thread::yield_now();
                }
            }
            RunKind::Scope { user, unit, .. } => {
                let mut cmd = std::process::Command::new("systemctl");
                if *user {
                    cmd.arg("--user");
                }
                let _ = cmd
                    .args(["kill", "--signal=SIGKILL", unit])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.kill_all();
        match &mut self.kind {
            RunKind::Pooled { slot, .. } => {
                if let Some(slot) = slot.take() {
                    slot.release();
                }
            }
            RunKind::Dirs { dirs, .. } => {
                for dir in dirs.iter() {
                    // A dying process keeps its cgroup busy for a moment.
                    for _ in 0..200 {
                        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
            }
            RunKind::Scope { user, unit, .. } => {
                // A scope that failed (OOM) stays loaded until reset.
                let mut cmd = std::process::Command::new("systemctl");
                if *user {
                    cmd.arg("--user");
                }
                let _ = cmd
                    .args(["reset-failed", unit])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            RunKind::None => {}
        }
    }
}

/// A reused cgroup v1 pair for a run under `memory` and `pids` ([`pool`]), when reuse is on.
fn pooled(
    mem_parent: &Path,
    pids_parent: &Path,
    name: &str,
    memory: u64,
    pids: u32,
) -> Result<RunKind, String> {
    if !pool::enabled() {
        return Err("reuse is off".into());
    }
    let slot = pool::take(mem_parent, pids_parent, name)?;
    if let Err(e) = slot.set_limits(memory, pids) {
        slot.discard();
        return Err(e);
    }
    let (oom_kills, pids_refused) = v1_counters(&slot.dirs);
    Ok(RunKind::Pooled {
        slot: Some(slot),
        oom_kills,
        pids_refused,
    })
}

/// The `oom_kill` count of a v1 memory cgroup and the `max` count of a pids cgroup.
fn v1_counters(dirs: &[PathBuf; 2]) -> (u64, u64) {
    (
        counter(&dirs[0].join("memory.oom_control"), "oom_kill"),
        counter(&dirs[1].join("pids.events"), "max"),
    )
}

/// Writes the shell's pid into each `cgroup.procs` given before `--`, then runs the rest.
const JOIN_SCRIPT: &str = r#"while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do echo $$ > "$1" || { echo "nuvira: could not join the sandbox cgroup $1" >&2; exit 125; }; shift; done; shift; exec "$@""#;

fn run_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "nuvira-run-{}-{}-{nanos:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn make_v2(parent: &Path, name: &str, memory: u64, pids: u32) -> Result<PathBuf, String> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).map_err(|e| format!("create the cgroup {}: {e}", dir.display()))?;
    let set = |file: &str, value: String| {
        std::fs::write(dir.join(file), value)
            .map_err(|e| format!("set {} of {}: {e}", file, dir.display()))
    };
    let result = set("memory.max", memory.to_string())
        .and_then(|()| {
            // Without swap accounting the file is missing: nothing to extend the limit with.
            if dir.join("memory.swap.max").exists() {
                set("memory.swap.max", "0".into())
            } else {
                Ok(())
            }
        })
        .and_then(|()| set("pids.max", pids.to_string()));
    if let Err(e) = result {
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

fn make_v1(
    mem_parent: &Path,
    pids_parent: &Path,
    name: &str,
    memory: u64,
    pids: u32,
) -> Result<Vec<PathBuf>, String> {
    let mem = mem_parent.join(name);
    let pid = pids_parent.join(name);
    let undo = |dirs: &[&Path]| {
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    };
    std::fs::create_dir(&mem).map_err(|e| format!("create the cgroup {}: {e}", mem.display()))?;
    if let Err(e) = std::fs::create_dir(&pid) {
        undo(&[&mem]);
        return Err(format!("create the cgroup {}: {e}", pid.display()));
    }
    let set = |dir: &Path, file: &str, value: String| {
        std::fs::write(dir.join(file), value)
            .map_err(|e| format!("set {} of {}: {e}", file, dir.display()))
    };
    let result = set(&mem, "memory.limit_in_bytes", memory.to_string())
        .and_then(|()| {
            if mem.join("memory.memsw.limit_in_bytes").exists() {
                set(&mem, "memory.memsw.limit_in_bytes", memory.to_string())
            } else {
                Ok(())
            }
        })
        .and_then(|()| set(&pid, "pids.max", pids.to_string()));
    if let Err(e) = result {
        undo(&[&mem, &pid]);
        return Err(e);
    }
    Ok(vec![mem, pid])
}

/// A size for people: `4.0 GiB`, `512 MiB`, `900 B`.
pub(crate) fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            return if bytes % size == 0 {
                format!("{} {unit}", bytes / size)
            } else {
                format!("{:.1} {unit}", bytes as f64 / size as f64)
            };
        }
    }
    format!("{bytes} B")
}

/// The value of `key` in a flat-keyed cgroup file (`key N` lines); 0 when missing.
fn counter(file: &Path, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn counters_read_flat_keyed_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.events");
        std::fs::write(&f, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(counter(&f, "oom_kill"), 1);
        assert_eq!(counter(&f, "max"), 3);
        assert_eq!(counter(&f, "missing"), 0);
        assert_eq!(counter(&dir.path().join("none"), "max"), 0);
    }

    #[test]
    fn detection_without_any_hierarchy_says_why() {
        let proc_ = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc_.path().join("self")).unwrap();
        std::fs::write(proc_.path().join("self/cgroup"), "0::/\n").unwrap();
        std::fs::write(proc_.path().join("mounts"), "proc /proc proc rw 0 0\n").unwrap();
        let unified = tempfile::tempdir().unwrap();
        let found = detect_in(proc_.path(), unified.path());
        assert!(!found.enforced());
        let text = found.describe();
        assert!(text.contains("not enforced"), "{text}");
        assert!(text.contains("memory"), "{text}");
    }

    #[test]
    fn a_delegated_v2_cgroup_is_found_and_a_runs_limits_and_events_are_read() {
        // The files of a cgroup v2 tree, on a plain folder: the paths and formats the kernel uses.
        let proc_ = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc_.path().join("self")).unwrap();
        std::fs::write(proc_.path().join("self/cgroup"), "0::/user.slice/me\n").unwrap();
        let unified = tempfile::tempdir().unwrap();
        std::fs::write(
            unified.path().join("cgroup.controllers"),
            "cpu memory pids\n",
        )
        .unwrap();
        let own = unified.path().join("user.slice/me");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), "memory pids\n").unwrap();
        let found = detect_in(proc_.path(), unified.path());
        assert_eq!(
            found,
            Cgroups::V2 {
                parent: own.clone()
            }
        );

        let mut limits = ResourceLimits::default();
        limits.memory_bytes = 64 << 20;
        limits.pids = 32;
        let run = RunCgroup::create(&found, &limits);
        let RunKind::Dirs { dirs, v2: true } = &run.kind else {
            panic!("{run:?}");
        };
        let dir = dirs[0].clone();
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.max")).unwrap(),
            "67108864"
        );
        assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap(), "32");
        assert!(
            run.note().contains("memory 64 MiB and 32 processes"),
            "{}",
            run.note()
        );
        assert_eq!(run.hits(), Hits::default());
        std::fs::write(
            dir.join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(dir.join("pids.events"), "max 7\n").unwrap();
        assert_eq!(
            run.hits(),
            Hits {
                oom_killed: true,
                pids_refused: true
            }
        );
        std::mem::forget(run); // not a real cgroup: its folder holds plain files
    }

    #[test]
    fn v2_without_delegated_controllers_and_without_systemd_is_not_enforced() {
        let proc_ = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc_.path().join("self")).unwrap();
        std::fs::write(proc_.path().join("self/cgroup"), "0::/busy\n").unwrap();
        let unified = tempfile::tempdir().unwrap();
        std::fs::write(unified.path().join("cgroup.controllers"), "memory pids\n").unwrap();
        std::fs::create_dir(unified.path().join("busy")).unwrap();
        let found = detect_in(proc_.path(), unified.path());
        if Path::new("/run/systemd/system").is_dir() {
            return; // this machine runs systemd: the scope path is taken
        }
        let text = found.describe();
        assert!(
            text.contains("does not delegate the memory and pids controllers"),
            "{text}"
        );
        assert!(text.contains("not enforced"), "{text}");
    }

    #[test]
    fn the_join_script_passes_arguments_through_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let procs = dir.path().join("cgroup.procs");
        let cg = RunCgroup {
            kind: RunKind::Dirs {
                dirs: vec![dir.path().to_path_buf()],
                v2: true,
            },
            note: String::new(),
        };
        let argv = cg.wrap(vec![
            "printf".into(),
            "%s|".into(),
            "a b".into(),
            "--".into(),
            "$HOME".into(),
        ]);
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b|--|$HOME|");
        let pid: u32 = std::fs::read_to_string(&procs)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(pid > 1);
        std::mem::forget(cg); // not a real cgroup: nothing to kill or remove
    }
}
