//! The local sandbox: a temporary copy of the workspace and a process group.
//!
//! The command runs in a fresh copy of the workspace (see the [`super`] module docs for what
//! is copied) so that whatever it writes (build output, caches, stray files) never touches the
//! original. It is started as the leader of its own process group; at the timeout, on
//! cancellation, when the run's future is dropped, and after it exits (to reap background
//! children it left behind) the whole group gets `SIGKILL`, which a child ignoring `SIGTERM`
//! cannot survive. Only a process that deliberately leaves the group (`setsid`) escapes.
//!
//! Resource limits: memory and process limits on the whole run come from a cgroup of its own
//! when this machine offers one ([`crate::limits`]: cgroup v2 delegated or through
//! `systemd-run --scope`, or writable cgroup v1 hierarchies); otherwise each run's
//! [`SandboxInfo::limits`] says that they are not enforced. Without `unsafe` (`pre_exec`): when
//! util-linux's `prlimit` is on `PATH` the command is started as `prlimit --core=0 -- …`, which
//! sets the limit on itself and `exec`s the command. `RLIMIT_DATA` is not set by default: it
//! counts thread stacks and every private mapping, so it aborted `rustc` and failed
//! thread-heavy tests that had memory to spare; [`LocalSandbox::with_rlimit_data`] brings it
//! back. `RLIMIT_NPROC` is never set: Linux counts it per user across the whole machine.
//!
//! Credentials stay out: the command inherits this process's environment minus every variable
//! [`is_credential`] names (model keys, `GITHUB_TOKEN`, anything ending in `_API_KEY`, `_TOKEN`,
//! `_SECRET` or `_PASSWORD`), since a test command from a hostile repository could read them. A
//! variable the request's own `env` sets is passed as set: the plan chose to pass it.

use super::{OnCreated, Tail, check_collect_path, check_dir, walk_options};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nuvira_api::{
    CancelSignal, Sandbox, SandboxError, SandboxInfo, SandboxOutcome, SandboxRequest, async_trait,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// Runs commands in a temporary copy of the workspace, in their own process group.
#[derive(Debug, Clone)]
pub struct LocalSandbox {
    prlimit: Option<PathBuf>,
    rlimit_data: bool,
    bwrap: Option<std::sync::Arc<crate::bwrap::Bwrap>>,
    cache_root: Option<crate::cache::CacheRoot>,
}

impl Default for LocalSandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalSandbox {
    /// A local sandbox that applies rlimits when `prlimit` is installed.
    pub fn new() -> Self {
        Self {
            prlimit: find_on_path("prlimit"),
            rlimit_data: false,
            bwrap: None,
            cache_root: None,
        }
    }

    /// A local sandbox that applies no rlimits (only the timeout, the process group and the
    /// cgroup limits).
    pub fn without_rlimits() -> Self {
        Self {
            prlimit: None,
            rlimit_data: false,
            bwrap: None,
            cache_root: None,
        }
    }

    /// Also bounds each process's data segment (`RLIMIT_DATA`) by the memory limit, as the
    /// local sandbox did before it used cgroups. Off by default: the limit counts thread stacks
    /// and every private mapping, so it fails healthy builds and thread-heavy tests.
    #[must_use]
    pub fn with_rlimit_data(mut self) -> Self {
        self.rlimit_data = true;
        self
    }

    /// The same sandbox, with the command run inside bubblewrap (the bwrap sandbox).
    pub(crate) fn confined(mut self, bwrap: std::sync::Arc<crate::bwrap::Bwrap>) -> Self {
        self.bwrap = Some(bwrap);
        self
    }

    /// `local`, or `bwrap` when the command runs inside bubblewrap.
    fn kind_name(&self) -> &'static str {
        if self.bwrap.is_some() {
            "bwrap"
        } else {
            "local"
        }
    }

    /// Keeps the warm caches of requests that ask for them
    /// ([`SandboxRequest::cache`](nuvira_api::SandboxRequest::cache)) under `root` instead of
    /// [`CacheRoot::from_env`](crate::cache::CacheRoot::from_env).
    pub fn with_cache_root(mut self, root: crate::cache::CacheRoot) -> Self {
        self.cache_root = Some(root);
        self
    }

    /// Whether rlimits are applied (`prlimit` was found).
    pub fn applies_rlimits(&self) -> bool {
        self.prlimit.is_some()
    }

    /// Runs a request, calling `on_created` once the workspace copy exists.
    ///
    /// # Errors
    /// [`SandboxError::Failed`] when the copy or the spawn fails (e.g. the command is not
    /// found), [`SandboxError::Cancelled`] when `cancel` fires (the process group is killed
    /// first).
    pub async fn run_observed(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
        on_created: OnCreated<'_>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let started = Instant::now();
        let Some(program) = request.command.first() else {
            return Err(SandboxError::Failed("run an empty command".into()));
        };
        if cancel.is_cancelled() {
            return Err(SandboxError::Cancelled);
        }

        let prepared = crate::cache::prepare_local(request, self.cache_root.as_ref()).await?;
        let (copy, special, cache) = (prepared.copy, prepared.special, prepared.cache);

        let mut info = SandboxInfo::default();
        info.kind = self.kind_name().into();
        info.skipped_special_files = special;
        info.cache_key = cache.as_ref().map(|c| c.project_key().to_owned());
        info.workspace_copy = prepared.note;
        on_created(&info);

        let rel_dir = check_dir(&request.dir)?;
        let workdir = copy.path().join(&rel_dir);
        // pnpm's recorded store, so that pnpm keeps the copied node_modules (crate::pnpm).
        let pnpm_store = crate::pnpm::recorded_store(&request.workspace, &rel_dir);
        // Resolve the program first, so that a missing one is the same clear error with or
        // without the prlimit wrapper.
        if !program.contains('/') {
            let path = request
                .env
                .get("PATH")
                .cloned()
                .or_else(|| std::env::var("PATH").ok())
                .unwrap_or_default();
            if !std::env::split_paths(&path).any(|d| d.join(program).is_file()) {
                return Err(SandboxError::Failed(format!(
                    "start `{program}`: no such program on PATH; install it or give its full path"
                )));
            }
        }
        // Innermost first: bubblewrap, then the cgroup (joined outside bubblewrap, which does
        // not mount /sys/fs/cgroup), then the rlimits.
        let mut argv = request.command.clone();
        if let Some(bwrap) = &self.bwrap {
            let mut extra = crate::bwrap::ExtraBinds::default();
            if let Some(cache) = &cache {
                extra.read_write = cache.binds();
            }
            if let Some(store) = &pnpm_store
                && let Some(host) = &store.host
            {
                extra
                    .read_only
                    .push((host.clone(), store.store_dir.clone()));
            }
            argv = bwrap.wrap(request, copy.path(), &workdir, &extra, argv)?;
        }
        // Made and (at the end) removed on a blocking thread: the first join of a reused pair
        // and the removal of a cgroup a dying process still holds take milliseconds to a
        // second, which would stall the runtime's other tasks (a plan's parallel steps).
        let limits = request.limits.clone();
        let cgroup = tokio::task::spawn_blocking(move || {
            crate::limits::RunCgroup::create(crate::limits::detect(), &limits)
        })
        .await
        .map_err(|e| SandboxError::Failed(format!("set up the run's limits: {e}")))?;
        argv = cgroup.wrap(argv);
        if let Some(prlimit) = &self.prlimit {
            let mut wrapped = vec![prlimit.to_string_lossy().into_owned(), "--core=0".into()];
            if self.rlimit_data {
                wrapped.push(format!("--data={}", request.limits.memory_bytes));
            }
            wrapped.push("--".into());
            wrapped.extend(argv);
            argv = wrapped;
        }
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        for (key, _) in std::env::vars_os() {
            let Some(name) = key.to_str() else { continue };
            if is_credential(name) && !request.env.contains_key(name) {
                cmd.env_remove(&key);
            }
        }
        if let Some(cache) = &cache {
            // The request's own variables win: a plan that sets CARGO_TARGET_DIR keeps it.
            cmd.envs(cache.env());
        }
        if let Some(store) = &pnpm_store {
            cmd.envs(store.env());
        }
        cmd.current_dir(&workdir)
            .envs(&request.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cgroup
            .spawn(cmd)
            .await
            .map_err(|e| SandboxError::Failed(format!("start `{program}`: {e}")))?;
        let group = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
        // The group, for the next start to kill should this process die without doing it.
        let _pgid_file = group.0.map(|pgid| PgidFile::write(copy.path(), pgid));

        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let out_task = tokio::spawn(async move { read_all(stdout.as_mut()).await });
        let err_task = tokio::spawn(async move { read_all(stderr.as_mut()).await });

        let mut timed_out = false;
        let status = tokio::select! {
            status = child.wait() => status,
            () = tokio::time::sleep(request.limits.timeout) => {
                timed_out = true;
                group.kill();
                cgroup.kill_all();
                child.wait().await
            }
            () = cancel.cancelled() => {
                group.kill();
                let _ = child.wait().await;
                out_task.abort();
                err_task.abort();
                return Err(SandboxError::Cancelled);
            }
        }
        .map_err(|e| SandboxError::Failed(format!("wait for `{program}`: {e}")))?;
        // Background children the command left behind die with it (with a cgroup, even those
        // that left the process group).
        let hits = cgroup.hits();
        group.kill();
        cgroup.kill_all();

        // A process that left the group may still hold the pipes open: stop reading after a
        // short grace period rather than waiting for it.
        let grace = Duration::from_secs(2);
        let stdout = join_output(out_task, grace).await;
        let stderr = join_output(err_task, grace).await;

        let exit_code = if timed_out {
            None
        } else {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .map(i64::from)
                .or_else(|| status.signal().map(|s| 128 + i64::from(s)))
        };

        let mut collected = BTreeMap::new();
        for p in &request.collect {
            let rel = check_collect_path(p)?;
            let root = copy.path().to_path_buf();
            let read = tokio::task::spawn_blocking(move || crate::read_collected(&root, &rel));
            if let Ok(Some(bytes)) = read.await {
                collected.insert(p.clone(), bytes);
            }
        }

        if let Some(cache) = cache {
            // Records sizes, releases the entries and evicts by the cap.
            let _ = tokio::task::spawn_blocking(move || cache.finish()).await;
        }

        info.timed_out = timed_out;
        info.exit_code = exit_code;
        info.oom_killed = hits.oom_killed;
        info.pids_limited = hits.pids_refused;
        info.limits = Some(cgroup.note().to_owned());
        let _ = tokio::task::spawn_blocking(move || drop(cgroup)).await;
        let mut outcome = SandboxOutcome::default();
        outcome.exit_code = exit_code;
        outcome.stdout = stdout.into_text();
        outcome.stderr = stderr.into_text();
        outcome.timed_out = timed_out;
        outcome.oom_killed = hits.oom_killed;
        outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        outcome.info = info;
        outcome.collected = collected;
        outcome.workdir = Some(workdir);
        Ok(outcome)
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn kind(&self) -> &str {
        self.kind_name()
    }

    async fn run(
        &self,
        request: &SandboxRequest,
        cancel: &dyn CancelSignal,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.run_observed(request, cancel, &|_| {}).await
    }
}

/// The credential variables Nuvira knows by name: the model keys `nuvira-llm` reads and the
/// tokens of CI systems. [`is_credential`] also matches any name with a [`CREDENTIAL_SUFFIXES`]
/// ending.
pub const CREDENTIAL_VARS: &[&str] = &[
    "NUVIRA_LLM_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "ACTIONS_RUNTIME_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
];

/// Endings (compared ignoring ASCII case) that make a variable a credential.
pub const CREDENTIAL_SUFFIXES: &[&str] = &["_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD"];

/// Whether the variable `name` holds a credential, which the local sandbox does not pass on to
/// the command unless the request's `env` sets it: one of [`CREDENTIAL_VARS`] or a name ending
/// in one of [`CREDENTIAL_SUFFIXES`].
pub fn is_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_VARS.contains(&upper.as_str())
        || CREDENTIAL_SUFFIXES.iter().any(|s| upper.ends_with(s))
}

/// How the folders of workspace copies begin: `nuvira-sandbox-<owning pid>-<random>` in the
/// temporary folder.
pub const COPY_PREFIX: &str = "nuvira-sandbox-";

/// The file beside a copy (`<copy>.pgid`) that holds the process group of the command running
/// in it; removed when the run ends.
struct PgidFile(PathBuf);

impl PgidFile {
    fn write(copy: &Path, pgid: i32) -> Self {
        use std::io::Write;
        let path = pgid_file_of(copy);
        // Best effort: without it, only the copy (not the group) is cleaned after a crash. A
        // new file only: anything already at that name (a planted symlink) is not written to.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(pgid.to_string().as_bytes()));
        Self(path)
    }
}

impl Drop for PgidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(crate) fn pgid_file_of(copy: &Path) -> PathBuf {
    let mut name = copy.as_os_str().to_owned();
    name.push(".pgid");
    PathBuf::from(name)
}

/// Cleans up after local sandboxes of `nuvira` processes that died without doing it (SIGKILL,
/// a crash): in the temporary folder, each `nuvira-sandbox-<pid>-*` copy whose pid is not a
/// live process is removed, after its command's process group (recorded beside the copy) is
/// killed. Copies of live processes, and folders of other names, are left alone. Call it when a
/// command starts. Returns the copies removed, and the run cgroups of dead processes
/// ([`crate::limits::remove_stale`]).
///
/// The group is killed only while one of its processes still works inside the copy, so a
/// process group id the system has since given to an unrelated program is never signalled.
///
/// The same is done for the projects' persistent copies (see [`crate::cache`]): a copy whose
/// run died still has its process group recorded, and that group is killed.
pub fn remove_stale() -> Vec<PathBuf> {
    if let Ok(root) = crate::cache::CacheRoot::from_env() {
        crate::cache::kill_stale_groups(&root);
    }
    let mut removed = remove_stale_in(&std::env::temp_dir());
    removed.extend(crate::limits::remove_stale());
    removed
}

/// [`remove_stale`] in `dir` instead of the temporary folder.
pub fn remove_stale_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix(COPY_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if name.ends_with(".pgid") || pid == std::process::id() || process_alive(pid) {
            continue;
        }
        let copy = entry.path();
        // A real folder only: a symlink planted under that name is not followed.
        if !std::fs::symlink_metadata(&copy).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let pgid_file = pgid_file_of(&copy);
        if let Some(pgid) = std::fs::read_to_string(&pgid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|p| *p > 1)
            && group_works_in(pgid, &copy)
        {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
        let _ = std::fs::remove_file(&pgid_file);
        crate::cache::make_writable(&copy);
        if std::fs::remove_dir_all(&copy).is_ok() {
            removed.push(copy);
        }
    }
    removed
}

fn process_alive(pid: u32) -> bool {
    // Signal 0 checks existence; EPERM means it exists but belongs to someone else.
    i32::try_from(pid).is_ok_and(|p| {
        !matches!(
            nix::sys::signal::kill(Pid::from_raw(p), None),
            Err(nix::errno::Errno::ESRCH)
        )
    })
}

/// Whether a process of group `pgid` has its working folder inside `copy` (Linux `/proc`;
/// elsewhere the group is not looked for, and so not killed).
pub(crate) fn group_works_in(pgid: i32, copy: &Path) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let dir = p.path();
        // `/proc/<pid>/stat`: `pid (comm) state ppid pgrp ...`; comm may hold spaces and `)`.
        let pgrp = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 1..];
                rest.split_whitespace().nth(2)?.parse::<i32>().ok()
            });
        pgrp == Some(pgid)
            && std::fs::read_link(dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(copy))
    })
}

/// Kills the process group on drop (the run's future being dropped counts as cancellation).
struct GroupGuard(Option<i32>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH (the group is already gone) is the expected case after a clean exit.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn read_all<R: tokio::io::AsyncRead + Unpin>(r: Option<&mut R>) -> Tail {
    let mut tail = Tail::default();
    let mut chunk = vec![0u8; 64 * 1024];
    if let Some(r) = r {
        while let Ok(n) = r.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            tail.push(&chunk[..n]);
        }
    }
    tail
}

async fn join_output(task: tokio::task::JoinHandle<Tail>, grace: Duration) -> Tail {
    let abort = task.abort_handle();
    match tokio::time::timeout(grace, task).await {
        Ok(Ok(tail)) => tail,
        _ => {
            abort.abort();
            Tail::default()
        }
    }
}

/// Copies the workspace into `dst` by the sandbox's walk rules ([`walk_options`]): folders,
/// files (with their permissions) and symbolic links (as links).
/// Returns the special files (FIFOs, sockets) left out.
pub(crate) fn copy_workspace(
    src: &Path,
    dst: &Path,
    include_ignored: bool,
) -> Result<Vec<String>, SandboxError> {
    nuvira_workspace::walk::copy_tree_noting_special(src, dst, walk_options(include_ignored))
        .map(|special| crate::special_names(&special))
        .map_err(|e| SandboxError::Failed(format!("copy the workspace: {e}")))
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A pid that is not running any more (a child that exited and was reaped).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn credentials_are_named_by_list_and_suffix() {
        for name in [
            "NUVIRA_LLM_API_KEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            "AWS_SECRET",
            "DB_PASSWORD",
            "npm_token",
        ] {
            assert!(is_credential(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "TOKENIZERS_PARALLELISM",
            "RUST_BACKTRACE",
        ] {
            assert!(!is_credential(name), "{name}");
        }
    }

    #[test]
    fn stale_copies_of_dead_pids_go_and_others_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let stale = tmp.path().join(format!("{COPY_PREFIX}{dead}-abc"));
        std::fs::create_dir_all(stale.join("src")).unwrap();
        std::fs::write(stale.join("src/a.txt"), "a").unwrap();
        std::fs::write(pgid_file_of(&stale), "999999").unwrap();
        // pid 1 is alive; so is this process.
        let live = tmp.path().join(format!("{COPY_PREFIX}1-abc"));
        std::fs::create_dir(&live).unwrap();
        let ours = tmp
            .path()
            .join(format!("{COPY_PREFIX}{}-abc", std::process::id()));
        std::fs::create_dir(&ours).unwrap();
        // A planted symlink under a stale name is not followed.
        let target = tempfile::tempdir().unwrap();
        std::fs::write(target.path().join("keep.txt"), "k").unwrap();
        let link = tmp.path().join(format!("{COPY_PREFIX}{dead}-lnk"));
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let other = tmp.path().join("nuvira-sandbox-old");
        std::fs::create_dir(&other).unwrap();

        let removed = remove_stale_in(tmp.path());
        assert_eq!(removed, std::slice::from_ref(&stale));
        assert!(!stale.exists() && !pgid_file_of(&stale).exists());
        assert!(live.exists() && ours.exists() && other.exists());
        assert!(target.path().join("keep.txt").exists());
    }
}
