//! Reusing a running container per warm slot: a warm Docker run costs an `exec`, not a
//! container.
//!
//! A fresh container per run costs the engine's create + start + exit (about 200 ms on Docker
//! 20.10), more than a whole warm `cargo test` of a heavy crate in place. So a run that holds a
//! project's warm slot ([`crate::cache`]) with a mirrored workspace volume (the `nuvira-host`
//! image, `docker_track`) runs its command with the engine's exec API in a container
//! kept for that slot, and the container stays for the slot's next run.
//!
//! **A kept container must be indistinguishable, for the next run, from a fresh one:**
//! - It is created from the run's own container config (image, limits, network, mounts,
//!   environment, labels) with `keeper` as PID 1 instead of the command, `/tmp` a tmpfs, one
//!   process more in its pids limit (PID 1's own) and [`KEEP_LABEL`]. The config (minus the
//!   command and the folder the command runs in, which the exec gives) and the image's id are
//!   hashed into [`KEEP_CONFIG_LABEL`]; a run whose hash differs replaces the container.
//! - After each run every process but PID 1 is killed (`kill -9 -1`, which reaches daemons,
//!   `setsid` ones and those that ignore `SIGTERM`) and waited for, `/tmp` and `/dev/shm` are
//!   emptied, and the memory cgroup's `oom_kill` count is read: by the command's wrapper
//!   right after the command (`docker_track`'s kept mode; its report is trusted only when the
//!   engine says the wrapper exited 0), else by a second exec (`cleanup_script`). Then the
//!   container's own file system must be as it was right after the start: its overlay upper folder read on this machine (`upper_listing`, when the engine
//!   is local and the folder readable: a folder that cannot be read then counts as changed),
//!   else the engine's changes list (`GET /containers/{id}/changes`). A run that wrote into the
//!   container's own file system (`$HOME`, `/var/tmp`, ...) gets it discarded. What `/workspace` holds is
//!   the mirror's business, as for a fresh container.
//! - A command that exited 0 is cleaned after its result is returned when the sandbox removes
//!   containers in the background (the commands' setting): the background task holds the slot
//!   until the cleanup is done, and a next run of the project in this process waits for it
//!   (`wait_for_pending`) so that it gets the same slot.
//! - Anything off (the cleanup fails or finds processes it cannot kill, the changes differ,
//!   PID 1 died, the run timed out, was cancelled or failed) and the container is removed
//!   (in the background, as a fresh one's); the next run creates a new one.
//! - A timeout kills the run's processes with that `kill -9 -1` exec (the engine has no kill for
//!   an exec), or, when even that cannot start (the pids limit is full), the container.
//!   An out-of-memory kill of an exec'd process leaves the container running and its state's
//!   `OOMKilled` unset: it is read from the cgroup's `oom_kill` count, which rose.
//!
//! **Nothing lingers.** PID 1 (`keeper`) exits once no other process has run in the
//! container for the idle period ([`IDLE_ENV`], default [`DEFAULT_IDLE`]), and the engine
//! removes the container (`AutoRemove`). A run does not reuse a container within
//! [`IDLE_MARGIN`] of that exit. Kept containers carry the cache folder's and the project's
//! labels, so `nuvira cache list` shows them and `nuvira cache clean [--repo]` removes them
//! ([`list_kept`], [`remove_kept`]).
//!
//! **PID 1 is another user's** (`keeper_user`): a run cannot signal, `ptrace` or `prlimit`
//! it. **State outside the file system** (`STATE`: Docker's `/etc/hosts`, `/etc/resolv.conf`
//! and `/etc/hostname`, the `/dev` tmpfs, the modes of `/tmp` and `/dev/shm`, POSIX message
//! queues, System V IPC) must be what it was when the container started (read by its first
//! run's wrapper before the prune and the command, and sent first on standard error), or the
//! container goes. The wrapper and the cleanup are the
//! run's user's (a run can trace them), so the host checks that no process of the run is left
//! ([`only_keeper_left`]) before the listings are trusted and the container kept. A wrapper
//! that exits 0 without its report is an error (the command's status is unknown), never a pass.
//!
//! **On by default**; `NUVIRA_DOCKER_REUSE=0` ([`REUSE_ENV`]) or
//! [`DockerSandbox::with_reuse(false)`](crate::DockerSandbox::with_reuse) gives every run a
//! fresh container, as does a run without the warm caches (`--no-cache`). What reuse leaves open
//! (a run can `ptrace` its own wrapper, as it can poison its caches) is in docs/sandbox.md.
//!
//! The record of a slot's kept container (`KeptState`: its id, config hash, changes baseline,
//! upper folder listing, `oom_kill` count, last use) is a file in the slot's workspace entry folder, removed before a
//! run uses the container and written back only once the cleanup passed: two runs never exec
//! into one container (the slot's lock is exclusive), and a run that dies half-way leaves no
//! record, so the next run starts a new container (its removal guard removes the old one).

use crate::cache::{VOLUME_PATH_LABEL, VOLUME_PROJECT_LABEL, VOLUME_ROOT_LABEL};
use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `0`, `false`, `no` or `off` gives every warm Docker run a fresh container; `1`, `true`, `yes`
/// or `on` lets them reuse their slot's kept container (the default).
pub const REUSE_ENV: &str = "NUVIRA_DOCKER_REUSE";
/// How long (seconds) a kept container waits for its next run before it exits by itself.
pub const IDLE_ENV: &str = "NUVIRA_DOCKER_REUSE_IDLE";
/// The default idle period: 10 minutes.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);
/// A container this close to its idle exit is replaced rather than reused.
pub const IDLE_MARGIN: Duration = Duration::from_secs(30);

/// The label of kept containers (`nuvira.keep=1`).
pub const KEEP_LABEL: &str = "nuvira.keep";
/// The label holding a kept container's config hash.
pub const KEEP_CONFIG_LABEL: &str = "nuvira.keep.config";
/// The label holding a kept container's warm slot.
pub const KEEP_SLOT_LABEL: &str = "nuvira.keep.slot";

/// Per project (canonical path): held (read) by each cleanup of its kept containers that
/// runs after its result was returned; a new run of the project in this process takes it
/// (write) first, so it finds its slot free rather than taking the other, colder one.
type Pending =
    std::sync::Mutex<HashMap<std::path::PathBuf, std::sync::Arc<tokio::sync::RwLock<()>>>>;
static PENDING: std::sync::LazyLock<Pending> = std::sync::LazyLock::new(Default::default);

fn pending_lock(project: &Path) -> Option<std::sync::Arc<tokio::sync::RwLock<()>>> {
    let mut map = PENDING.lock().ok()?;
    Some(map.entry(project.to_path_buf()).or_default().clone())
}

/// A hold on `project` for a cleanup after the result (`None`: a run is waiting for the
/// project's cleanups: clean now instead).
pub(crate) fn pending(project: &Path) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
    pending_lock(project)?.try_read_owned().ok()
}

/// Waits until no cleanup of `workspace`'s kept containers is going in this process.
pub(crate) async fn wait_for_pending(workspace: &Path) {
    let Ok(project) = std::fs::canonicalize(workspace) else {
        return;
    };
    let lock = match PENDING.lock() {
        Ok(map) => map.get(&project).cloned(),
        Err(_) => None,
    };
    if let Some(lock) = lock {
        drop(lock.write().await);
    }
}

/// The file of a slot's `KeptState` in its workspace entry folder.
const STATE_FILE: &str = "kept.json";

/// Whether runs may reuse kept containers: [`REUSE_ENV`] when it is set to an on or off word,
/// else `default` (the sandbox's [`with_reuse`](crate::DockerSandbox::with_reuse), on unless
/// the library user turned it off).
pub fn reuse_enabled(default: bool) -> bool {
    match std::env::var(REUSE_ENV) {
        Ok(v) if is_off(&v) => false,
        Ok(v) if is_on(&v) => true,
        _ => default,
    }
}

fn is_on(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

fn is_off(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "0" | "false" | "no" | "off"
    )
}

/// The idle period ([`IDLE_ENV`], else [`DEFAULT_IDLE`]; at least 1 s).
pub fn idle() -> Duration {
    std::env::var(IDLE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_IDLE, |s| Duration::from_secs(s.max(1)))
}

/// PID 1 of a kept container: ignores the signals a run could send it, and exits once no
/// other process has been seen for `idle` (checked every second; a run in progress is a
/// process). Its `sleep` also reaps what runs leave to it: killed orphans are gone as soon as
/// the `kill -9 -1` of the cleanup reaches that `sleep`. The `sleep` is `/bin/sleep`, never
/// looked up on `PATH`: a `PATH` of the request's with a folder a run can write (one in a
/// volume, or an empty or relative entry, which is `/workspace`) would let a run's own `sleep`
/// run as PID 1's user, out of reach of the cleanup. (A run that replaces `/bin/sleep` in the
/// container's own file system changes it, and the container goes.)
pub(crate) fn keeper(idle: Duration) -> Vec<String> {
    let script = format!(
        "trap '' INT HUP TERM QUIT USR1 USR2 ALRM PIPE
n=0
while [ \"$n\" -lt {} ]; do
  /bin/sleep 1
  b=0
  for p in /proc/[0-9]*; do [ \"$p\" = /proc/1 ] || b=1; done
  if [ $b = 1 ]; then n=0; else n=$((n+1)); fi
done
",
        idle.as_secs().max(1)
    );
    vec![
        "/bin/sh".into(),
        "-c".into(),
        script,
        "nuvira-keeper".into(),
    ]
}

/// What the cleanup prints on success, before the `oom_kill` count.
const CLEAN_OK: &str = "nuvira-clean ok oom=";

/// The user PID 1 of a kept container runs as: not the run's (`run_user`, the image's), so
/// that the run can neither signal, `ptrace` nor `prlimit` it (that takes the same user or
/// capabilities the run does not have); `nobody` (65534), or 65533 when the run is `nobody`.
pub fn keeper_user(run_user: &str) -> String {
    let name = run_user.split(':').next().unwrap_or_default();
    if matches!(name, "65534" | "nobody" | "nfsnobody") {
        "65533:65533".to_owned()
    } else {
        "65534:65534".to_owned()
    }
}

/// Shell: the `PATH` the wrapper's and the cleanup's own tools (`find`, `rm`, `stat`, `cat`,
/// `sleep`...) are looked up on: the image's system folders (read-only binds with `nuvira-host`),
/// never the request's, which can name a folder a run writes (one in a volume, `/tmp`, or an
/// empty or relative entry, which is `/workspace`): a run's own `find` would write the listing
/// the next run's mirror is made from, after every process of the run was killed.
pub(crate) const TOOLS_PATH: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n";

/// The kill and wait of [`KILL_ALL`] and [`KILL_RUN`]: `kill -9 -1` (twice: a process with a
/// pending `SIGKILL` cannot fork), then every process but PID 1 and this shell, looked for
/// again at each check (one forked before the kill is seen too), that `$own` (shell, `$u` the
/// process's real uid from its `status`, which anyone can read) does not skip, waited for until
/// it is gone or a zombie.
macro_rules! kill_loop {
    ($own:literal) => {
        concat!(
            r#"kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null
i=0
while :; do
  l=
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    { [ "$p" = 1 ] || [ "$p" = $$ ]; } && continue
    z=; u=; while read -r k v r; do case $k in State:) [ "$v" = Z ] && z=1;; Uid:) u=$v; break;; esac; done 2>/dev/null < "/proc/$p/status"
"#,
            $own,
            r#"    [ -n "$z" ] || ! [ -d "/proc/$p" ] || l="$l $p"
  done
  [ -z "$l" ] && break
  i=$((i+1))
  if [ $i -gt 1000 ]; then K=left; break; fi
  # Most are gone within a few checks; then a pause between checks.
  [ $i -gt 200 ] && sleep 0.01
  kill -9 -1 2>/dev/null
done
"#
        )
    };
}

/// Shell: every process of the run's user but PID 1 and this shell killed (`kill -9 -1`,
/// twice: a process with a pending `SIGKILL` cannot fork) and waited for; `K` is `ok`, or
/// `left` when one is still there after 1,000 checks. Every process but PID 1's user's is
/// waited for, whoever its `/proc` folder looks to be (a process of the run that made itself not
/// dumpable has a `/proc` folder of root's; PID 1's `sleep` is PID 1's user's: the
/// kill cannot reach it, nor could the run); a zombie counts as gone (it runs nothing, and PID
/// 1 reaps it within a second; its state is read from `status`, whose name line is escaped,
/// not from `stat`, whose raw name can hold a newline). This is the fast path only: a run can
/// `ptrace` this shell, so the processes left are checked again from the host
/// ([`only_keeper_left`]). A run whose user turns out to be PID 1's (a user name that the
/// image maps to PID 1's uid: [`keeper_user`] sees names, not uids) could signal and trace PID
/// 1: `K` is `left` from the start, and the container goes.
pub(crate) const KILL_ALL: &str = concat!(
    "K=ok\n[ -O /proc/1 ] && K=left\n",
    "u1=; while read -r k v r; do [ \"$k\" = Uid: ] && { u1=$v; break; }; done 2>/dev/null < /proc/1/status\n",
    kill_loop!("    [ -n \"$u1\" ] && [ \"$u\" = \"$u1\" ] && continue\n")
);

/// [`KILL_ALL`] for a wrapper that is PID 1 itself (a fresh container's, where every other
/// process is the run's): every other process is waited for, whoever's its `/proc` folder
/// looks (a process that made itself not dumpable has a `/proc` folder of root's); `K` is `ok`,
/// or `left` when one is still there after 1,000 checks.
pub(crate) const KILL_RUN: &str = concat!("K=ok\n", kill_loop!(""));

/// Shell: `/tmp` and `/dev/shm` emptied, their folders made writable first (a test may leave
/// a read-only one; `chmod -R` follows no link, and links are not given to it), and `$R` too
/// when set (the wrapper's listings, once sent); `K=scratch` when something is left and `K`
/// was `ok`. A run that changes the mode of `/tmp` or `/dev/shm` (`chmod 0` hides what they
/// hold) changes [`STATE`]: its container is not kept.
pub(crate) const SCRATCH: &str = r#"set --
for f in /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*; do
  [ -d "$f" ] && [ ! -L "$f" ] && set -- "$@" "$f"
done
[ $# -gt 0 ] && chmod -R u+rwX -- "$@" 2>/dev/null
set --
[ -n "$R" ] && set -- "$R"
for f in /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*; do
  [ -e "$f" ] || [ -L "$f" ] && set -- "$@" "$f"
done
[ $# -gt 0 ] && rm -rf -- "$@" 2>/dev/null
for f in /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then [ "$K" = ok ] && K=scratch; fi
done
"#;

/// The folders [`SCRATCH`] empties in a kept container after each run.
pub(crate) const SCRATCH_DIRS: [&str; 2] = ["/tmp", "/dev/shm"];

/// The first mount target at or under a [`SCRATCH_DIRS`] folder, if any: a container with
/// one is never kept, since the cleanup between runs (`rm -rf`, `chmod -R`) would reach
/// into the mount, a host folder for a bind mount.
pub(crate) fn mount_in_scratch<'a>(targets: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    targets.into_iter().find(|t| {
        let clean = container_path(t);
        SCRATCH_DIRS.iter().any(|d| clean.starts_with(d))
    })
}

/// A mount target as the engine takes it: cleaned by name (`/tmp/./x`, `/x/../tmp/y`,
/// `//tmp/`, `/usr/` are `/tmp/x`, `/tmp/y`, `/tmp`, `/usr`), so that two spellings of one
/// place compare equal.
pub(crate) fn container_path(target: &str) -> PathBuf {
    let mut clean = PathBuf::from("/");
    for c in Path::new(target).components() {
        match c {
            std::path::Component::Normal(n) => clean.push(n),
            std::path::Component::ParentDir => {
                clean.pop();
            }
            _ => {}
        }
    }
    clean
}

/// Shell: `o`, the memory cgroup's `oom_kill` count, and `q`, the pids cgroup's count of
/// refused forks (`max` of `pids.events`); each empty when unknown.
pub(crate) const OOM: &str = r#"o=
for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do
  [ -z "$o" ] && [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && o=$v; done < "$f"
done
q=
for f in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do
  [ -z "$q" ] && [ -r "$f" ] && while read -r k v; do [ "$k" = max ] && q=$v; done < "$f"
done
"#;

/// Shell: `S`, the state a run can leave outside the file system's changes list and the
/// scratch folders: Docker's `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname` (bind
/// mounts, writable by the run unless the root is read-only: their checksums, modes, owners
/// and inodes; the engine touches them after the start, so not their times), the folders
/// `/dev`, `/dev/mqueue`, `/dev/pts`, `/tmp`, `/dev/shm` (mode, owner, inode: their times
/// change when a healthy run opens and unlinks a message queue or a temporary file), every
/// entry in the first three (type and mode, owner, size, inode, links, device numbers, change
/// time to the nanosecond: a swap of two device nodes changes the inodes), and the number of
/// System V IPC objects. A kept container is kept only while `S` is what it was right after it
/// started. (In the wrapper it is read while the `find` of `/workspace` runs in the
/// background: no file of its own that a run could plant.)
pub(crate) const STATE: &str = r#"set --
for f in /dev/* /dev/.[!.]* /dev/..?* /dev/mqueue/* /dev/mqueue/.[!.]* /dev/mqueue/..?* /dev/pts/* /dev/pts/.[!.]* /dev/pts/..?*; do
  case $f in /dev/shm|/dev/mqueue|/dev/pts) continue;; esac
  if [ -e "$f" ] || [ -L "$f" ]; then set -- "$@" "$f"; fi
done
S=$(cksum /etc/hosts /etc/resolv.conf /etc/hostname 2>&1
stat -c '%n %f %u %g %i' -- /etc/hosts /etc/resolv.conf /etc/hostname /dev /dev/mqueue /dev/pts /tmp /dev/shm 2>&1
stat -c '%n %f %u %g %s %i %h %t %T %.9Z' -- "$@" 2>&1)
for f in shm sem msg; do
  n=0
  while read -r l; do n=$((n+1)); done 2>/dev/null < "/proc/sysvipc/$f"
  S="$S
ipc $f $n"
done
"#;

/// The cleanup after a run (an exec) when the wrapper's own did not pass: [`KILL_ALL`] (exit
/// 3 when processes are left), [`SCRATCH`] (exit 4 when something is left), then prints the
/// [`STATE`] text and, last, `CLEAN_OK` with the memory cgroup's `oom_kill` count and
/// `pids=` the pids cgroup's count of refused forks (each `?` when unknown).
pub(crate) fn cleanup_script() -> Vec<String> {
    let script = format!(
        r#"{TOOLS_PATH}{KILL_ALL}[ "$K" = ok ] || {{ echo "nuvira-clean: processes left"; exit 3; }}
cd /
R=
{SCRATCH}[ "$K" = ok ] || {{ echo "nuvira-clean: scratch not emptied"; exit 4; }}
{OOM}{STATE}printf '%s\n' "$S"
echo "nuvira-clean ok oom=${{o:-?}} pids=${{q:-?}}"
"#
    );
    vec!["/bin/sh".into(), "-c".into(), script]
}

/// Kills every process but PID 1 (a timed-out run's), twice.
pub(crate) fn kill_script() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null; exit 0".into(),
    ]
}

/// A slot's kept container, as recorded between runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeptState {
    /// The container's id.
    pub(crate) id: String,
    /// Its config hash (`config_hash`).
    pub(crate) config: String,
    /// Its changes list right after it started, sorted (`kind path`).
    pub(crate) baseline: Vec<String>,
    /// The memory cgroup's `oom_kill` count after the last cleanup.
    pub(crate) oom: u64,
    /// The pids cgroup's count of refused forks after the last cleanup.
    #[serde(default)]
    pub(crate) pids: u64,
    /// The [`STATE`] text right after it started (read by its first run's wrapper before the
    /// command).
    #[serde(default)]
    pub(crate) state: String,
    /// PID 1's pid on this machine (`None`: unknown, e.g. a remote engine's).
    #[serde(default)]
    pub(crate) pid: Option<u32>,
    /// The container's overlay upper folder on this machine and its [`upper_listing`] right
    /// after it started (`None`: not readable here; the engine's changes list is compared).
    #[serde(default)]
    pub(crate) upper: Option<(PathBuf, Vec<String>)>,
    /// When a run last finished in it (seconds since the epoch).
    pub(crate) used: u64,
}

/// Takes the slot's record (removing it: it is written back only after a clean run).
pub(crate) fn take_state(entry_dir: &Path) -> Option<KeptState> {
    let path = entry_dir.join(STATE_FILE);
    let bytes = std::fs::read(&path).ok();
    let _ = std::fs::remove_file(&path);
    serde_json::from_slice(&bytes?).ok()
}

/// Records the slot's kept container for its next run.
pub(crate) fn save_state(entry_dir: &Path, state: &KeptState) {
    let path = entry_dir.join(STATE_FILE);
    let tmp = entry_dir.join(format!("{STATE_FILE}.tmp"));
    let ok = serde_json::to_vec(state)
        .ok()
        .is_some_and(|b| std::fs::write(&tmp, b).is_ok() && std::fs::rename(&tmp, &path).is_ok());
    if !ok {
        tracing::warn!(
            "the next run will use a new container: the record of container {} could not be written in {}",
            state.id,
            entry_dir.display()
        );
    }
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The version of what a kept container is (its keeper, its user, its checks), in its hash: a
/// container an older Nuvira kept is replaced, not reused.
const KEEP_VERSION: &str = "keep-4";

/// The hash of what makes a container what it is for a run: its create body without the
/// command and working folder (the exec gives those), the image's id (a tag rebuilt is another
/// image), the keeper's idle period and [`KEEP_VERSION`].
pub(crate) fn config_hash(body: &ContainerCreateBody, image_id: &str, idle: Duration) -> String {
    let mut body = body.clone();
    body.cmd = None;
    body.working_dir = None;
    let mut h = Sha256::new();
    h.update(KEEP_VERSION.as_bytes());
    h.update([0]);
    h.update(idle.as_secs().to_le_bytes());
    h.update(image_id.as_bytes());
    h.update([0]);
    // Environment order does not matter to a process; maps serialize in arbitrary order.
    if let Some(env) = body.env.as_mut() {
        env.sort();
    }
    let labels: Option<std::collections::BTreeMap<_, _>> = body
        .labels
        .take()
        .map(|l| l.into_iter().collect::<std::collections::BTreeMap<_, _>>());
    let tmpfs: Option<std::collections::BTreeMap<_, _>> = body
        .host_config
        .as_mut()
        .and_then(|h| h.tmpfs.take())
        .map(|t| t.into_iter().collect());
    let volumes: Option<Vec<String>> = body
        .volumes
        .take()
        .map(|v| v.into_keys().collect::<std::collections::BTreeSet<_>>())
        .map(|s| s.into_iter().collect());
    h.update(serde_json::to_vec(&body).unwrap_or_default());
    h.update(serde_json::to_vec(&(labels, tmpfs, volumes)).unwrap_or_default());
    let digest = h.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Turns a run's container body into its kept container's: `keeper` as PID 1, run as
/// [`keeper_user`] of `run_user`, `/tmp` a tmpfs, PID 1 and its `sleep` added to the pids
/// limit, removed by the engine when it exits, and the labels that [`list_kept`] and `nuvira
/// cache clean` go by.
pub(crate) fn kept_body(
    mut body: ContainerCreateBody,
    hash: &str,
    labels: &[(&str, String)],
    idle: Duration,
    run_user: &str,
) -> ContainerCreateBody {
    body.cmd = Some(keeper(idle));
    body.user = Some(keeper_user(run_user));
    body.attach_stdout = Some(false);
    body.attach_stderr = Some(false);
    let host = body.host_config.get_or_insert_with(Default::default);
    host.tmpfs.get_or_insert_with(HashMap::new).insert(
        "/tmp".to_owned(),
        "rw,exec,nosuid,nodev,mode=1777".to_owned(),
    );
    if let Some(p) = host.pids_limit.as_mut() {
        *p = p.saturating_add(2);
    }
    host.auto_remove = Some(true);
    let l = body.labels.get_or_insert_with(HashMap::new);
    l.insert(KEEP_LABEL.to_owned(), "1".to_owned());
    l.insert(KEEP_CONFIG_LABEL.to_owned(), hash.to_owned());
    for (k, v) in labels {
        l.insert((*k).to_owned(), v.clone());
    }
    body
}

/// The labels of a slot's kept container: the cache folder, the project, the slot.
pub(crate) fn slot_labels(run: &crate::cache::RunCache, slot: u32) -> Vec<(&'static str, String)> {
    vec![
        (
            VOLUME_ROOT_LABEL,
            run.root().dir().to_string_lossy().into_owned(),
        ),
        (VOLUME_PROJECT_LABEL, run.project_key().to_owned()),
        (
            VOLUME_PATH_LABEL,
            run.project().to_string_lossy().into_owned(),
        ),
        (KEEP_SLOT_LABEL, slot.to_string()),
    ]
}

/// The container's changes list, sorted (`kind path`); `None` when the engine did not answer
/// (within 20 s).
pub(crate) async fn changes(docker: &Docker, id: &str) -> Option<Vec<String>> {
    let list = tokio::time::timeout(Duration::from_secs(20), docker.container_changes(id))
        .await
        .ok()?
        .ok()?;
    let mut out: Vec<String> = list
        .unwrap_or_default()
        .into_iter()
        .map(|c| format!("{:?} {}", c.kind, c.path))
        .collect();
    out.sort();
    Some(out)
}

/// What an exec printed and how it ended.
pub(crate) struct ExecEnd {
    pub(crate) stdout: Vec<u8>,
    pub(crate) exit_code: Option<i64>,
}

/// Runs `cmd` in the container as an exec of `user` (the run's: PID 1's is another) and waits
/// for it (at most `limit`), keeping its standard output (up to 64 KiB); `None` when it could
/// not start or did not end in time.
pub(crate) async fn exec_small(
    docker: &Docker,
    id: &str,
    user: &str,
    cmd: Vec<String>,
    limit: Duration,
) -> Option<ExecEnd> {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    let run = async {
        let exec = docker
            .create_exec(
                id,
                CreateExecOptions {
                    cmd: Some(cmd),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    working_dir: Some("/".to_owned()),
                    user: Some(user.to_owned()),
                    ..Default::default()
                },
            )
            .await
            .ok()?;
        let StartExecResults::Attached { mut output, .. } =
            docker.start_exec(&exec.id, None).await.ok()?
        else {
            return None;
        };
        let mut stdout = Vec::new();
        while let Some(Ok(chunk)) = output.next().await {
            if let bollard::container::LogOutput::StdOut { message } = chunk
                && stdout.len() < 64 * 1024
            {
                stdout.extend_from_slice(&message);
            }
        }
        let inspect = docker.inspect_exec(&exec.id).await.ok()?;
        Some(ExecEnd {
            stdout,
            exit_code: inspect.exit_code,
        })
    };
    tokio::time::timeout(limit, run).await.ok().flatten()
}

/// Who runs in a kept container: the run's user (of every exec), PID 1's uid, and PID 1's pid
/// on this machine (when the engine is local), for [`only_keeper_left`].
#[derive(Debug, Clone, Default)]
pub struct Who {
    /// The run's user (`uid[:gid]` or a name), of every exec.
    pub user: String,
    /// PID 1's uid.
    pub keeper_uid: u32,
    /// PID 1's pid on this machine.
    pub host_pid: Option<u32>,
}

impl Who {
    /// For a run as `run_user`: PID 1's uid is [`keeper_user`]'s; the host pid unknown.
    pub fn new(run_user: &str) -> Self {
        let keeper = keeper_user(run_user);
        Self {
            user: run_user.to_owned(),
            keeper_uid: keeper
                .split(':')
                .next()
                .and_then(|u| u.parse().ok())
                .unwrap_or(65534),
            host_pid: None,
        }
    }
}

/// Whether every process left in the container is PID 1's user's (a zombie of one thread
/// aside), as the **host** sees them: a run can `ptrace` the wrapper and the cleanup (they
/// are its user's) and fake their report, never this. Read from the container's cgroup on
/// this machine when PID 1's pid is known and its cgroup names the container (`cgroup.procs`,
/// then each process's `status`: well under a millisecond), else from the engine (`top`).
/// `None`: neither could tell.
pub async fn only_keeper_left(docker: &Docker, id: &str, who: &Who) -> Option<bool> {
    if let Some(pids) = who.host_pid.and_then(|p| cgroup_procs(p, id)) {
        return Some(pids.iter().all(|&p| keeper_or_gone(p, who.keeper_uid)));
    }
    let top = tokio::time::timeout(
        Duration::from_secs(20),
        docker.top_processes(
            id,
            Some(bollard::query_parameters::TopOptions {
                ps_args: "-o pid,uid,stat,nlwp".to_owned(),
            }),
        ),
    )
    .await
    .ok()?
    .ok()?;
    let titles = top.titles?;
    let col = |name: &str| titles.iter().position(|t| t.eq_ignore_ascii_case(name));
    let (uid, stat, nlwp) = (col("UID")?, col("STAT")?, col("NLWP")?);
    Some(top.processes.unwrap_or_default().iter().all(|row| {
        let field = |i: usize| row.get(i).map_or("", String::as_str);
        field(uid).trim() == who.keeper_uid.to_string()
            || field(stat).starts_with('Z') && field(nlwp).trim() == "1"
    }))
}

/// Whether the container `id`'s PID 1 is `host_pid` on this machine (its cgroup names the
/// container: the engine is this machine's).
pub(crate) fn is_local(host_pid: u32, id: &str) -> bool {
    cgroup_procs(host_pid, id).is_some()
}

/// The root folder of the container `id` as its PID 1 (`host_pid` on this machine) sees it,
/// open (`/proc/PID/root`: the container's own mounts, its `/workspace` volume among them).
/// `/proc/PID` is opened first; its cgroup, read through that handle, must name the container
/// and its status say it is pid 1 of its pid namespace: a PID 1 gone and its pid reused
/// after the check leaves the handle on the dead process (the open fails), never on another.
/// `None` on another machine's engine, without the right to look into another process's
/// root, or when the container is gone.
pub(crate) fn open_root(host_pid: u32, id: &str) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::Mode;
    use std::io::Read;
    if id.len() < 12 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let proc_ = open(format!("/proc/{host_pid}").as_str(), flags, Mode::empty()).ok()?;
    // A file of that process, through the handle.
    let read = |name: &str| -> Option<String> {
        let fd = openat(
            &proc_,
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let mut text = String::new();
        std::fs::File::from(fd)
            .take(64 * 1024)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    };
    let text = read("cgroup")?;
    let named = text.lines().any(|line| {
        line.splitn(3, ':')
            .nth(2)
            .is_some_and(|path| path.contains(id) && !path.contains(".."))
    });
    // And it is the container's PID 1 (the last pid namespace's pid), not another of its
    // processes.
    let text = read("status")?;
    let pid_1 = text
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|pids| pids.split_whitespace().last())
        == Some("1");
    if !named || !pid_1 {
        return None;
    }
    // `root` is the kernel's link to the process's root: followed on purpose.
    openat(&proc_, "root", flags, Mode::empty()).ok()
}

/// The overlay upper folder of a container as the engine's inspect tells it (`overlay2`).
pub(crate) fn upper_dir(driver: Option<&bollard::models::DriverData>) -> Option<PathBuf> {
    let driver = driver.filter(|d| d.name == "overlay2")?;
    let dir = PathBuf::from(driver.data.get("UpperDir")?);
    dir.is_absolute().then_some(dir)
}

/// The most entries [`upper_listing`] reads (more: `None`, and the engine's list is asked).
const UPPER_CAP: usize = 10_000;

/// Every entry of a container's own file system changes, read from its overlay upper folder on
/// this machine (what the engine's changes list is made from, so a few hundred microseconds
/// instead of the engine's milliseconds): path, type and mode, owner, size, inode and change
/// time to the nanosecond (a change time cannot be set back), sorted; no link is followed.
/// `None` when it cannot be read (another machine's engine, not root) or is too large.
pub(crate) fn upper_listing(upper: &Path) -> Option<Vec<String>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut dirs = vec![(upper.to_path_buf(), 0usize)];
    let top = std::fs::symlink_metadata(upper).ok()?;
    if !top.is_dir() {
        return None;
    }
    // The folder itself is the container's `/`: its mode, owner and inode (not its change
    // time: the kernel's overlay sets its own attributes on it after the start).
    out.push(format!(
        "/ {:o} {} {} {}",
        top.mode(),
        top.uid(),
        top.gid(),
        top.ino()
    ));
    while let Some((dir, depth)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).ok()?;
            let rel = path.strip_prefix(upper).ok()?;
            out.push(format!(
                "{:?} {:o} {} {} {} {} {} {}.{:09}",
                rel.as_os_str(),
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.ino(),
                meta.rdev(),
                meta.ctime(),
                meta.ctime_nsec()
            ));
            if out.len() > UPPER_CAP || depth > 256 {
                return None;
            }
            if meta.file_type().is_dir() {
                dirs.push((path, depth + 1));
            }
        }
    }
    out.sort();
    Some(out)
}

/// Whether `upper` holds every entry of the engine's changes list `changes` (`kind path`
/// lines, [`changes`]): the folder read here is the container's, not a folder of the same
/// name in another mount namespace.
pub(crate) fn upper_matches(upper: &Path, changes: &[String]) -> bool {
    changes.iter().all(|c| {
        c.split_once(' ').is_some_and(|(_, path)| {
            let rel = path.trim_start_matches('/');
            !rel.is_empty()
                && !rel.split('/').any(|p| p == "..")
                && std::fs::symlink_metadata(upper.join(rel)).is_ok()
        })
    })
}

/// The processes of the container `id` whose PID 1 is `host_pid` on this machine, from its
/// cgroup (v2, or v1's `pids` or `memory` controller); `None` when that cgroup is not this
/// container's (another machine's engine, another pid namespace, PID 1 gone and its pid reused).
fn cgroup_procs(host_pid: u32, id: &str) -> Option<Vec<u32>> {
    let cgroups = std::fs::read_to_string(format!("/proc/{host_pid}/cgroup")).ok()?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !path.contains(id) || path.contains("..") {
            continue;
        }
        let file = if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/cgroup.procs")
        } else if controllers.split(',').any(|c| c == "pids" || c == "memory") {
            format!("/sys/fs/cgroup/{controllers}{path}/cgroup.procs")
        } else {
            continue;
        };
        if let Ok(text) = std::fs::read_to_string(&file) {
            return Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect());
        }
    }
    None
}

/// Whether process `pid` (on this machine) is gone, a zombie of one thread, or `uid`'s.
fn keeper_or_gone(pid: u32, uid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .unwrap_or_default()
    };
    field("Uid:") == uid.to_string() || field("State:") == "Z" && field("Threads:") == "1"
}

/// What a cleanup found: the memory cgroup's `oom_kill` count (`None`: unknown here) and the
/// [`STATE`] text.
pub(crate) struct Cleaned {
    pub(crate) oom: Option<u64>,
    /// The pids cgroup's count of refused forks (`None`: unknown here).
    pub(crate) pids: Option<u64>,
    pub(crate) state: String,
}

/// Cleans the container after a run (`cleanup_script`, as `user`): what it found when it
/// passed, or why not.
pub(crate) async fn clean(docker: &Docker, id: &str, user: &str) -> Result<Cleaned, String> {
    let end = exec_small(docker, id, user, cleanup_script(), Duration::from_secs(20))
        .await
        .ok_or_else(|| "the cleanup could not run".to_owned())?;
    let text = String::from_utf8_lossy(&end.stdout);
    if end.exit_code != Some(0) {
        return Err(format!(
            "the cleanup failed ({}): {}",
            end.exit_code
                .map_or("killed".into(), |c| format!("exit {c}")),
            text.trim()
        ));
    }
    // The state text, then the line of `CLEAN_OK` last.
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let (state, last) = body.rsplit_once('\n').unwrap_or(("", body));
    let count = last
        .strip_prefix(CLEAN_OK)
        .ok_or_else(|| format!("the cleanup said: {}", text.trim()))?;
    let mut counts = count.trim().split(' ');
    let oom = counts.next().and_then(|c| c.parse().ok());
    let pids = counts
        .next()
        .and_then(|c| c.strip_prefix("pids="))
        .and_then(|c| c.parse().ok());
    Ok(Cleaned {
        oom,
        pids,
        state: state.to_owned(),
    })
}

/// A kept container, as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeptContainer {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its project key.
    pub project_key: String,
    /// Its project folder.
    pub project: String,
    /// Its warm slot.
    pub slot: u32,
    /// The cache folder it belongs to.
    pub root: String,
    /// The engine's status text (e.g. `Up 3 minutes`).
    pub status: String,
}

/// Every kept container of cache folder `root` on the engine.
///
/// # Errors
/// The engine's error as text.
pub async fn list_kept(docker: &Docker, root: &Path) -> Result<Vec<KeptContainer>, String> {
    list_kept_where(docker, |k| Path::new(&k.root) == root).await
}

/// The kept containers whose cache folder no longer exists on this machine (see
/// [`crate::docker_cache::list_orphaned_volumes`]).
///
/// # Errors
/// The engine's error as text.
pub async fn list_orphaned_kept(docker: &Docker) -> Result<Vec<KeptContainer>, String> {
    list_kept_where(docker, |k| crate::docker_cache::root_is_gone(&k.root)).await
}

async fn list_kept_where(
    docker: &Docker,
    keep: impl Fn(&KeptContainer) -> bool,
) -> Result<Vec<KeptContainer>, String> {
    let filters = HashMap::from([("label".to_owned(), vec![format!("{KEEP_LABEL}=1")])]);
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| e.to_string())?;
    let mut out: Vec<KeptContainer> = list
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let kept = KeptContainer {
                id: c.id?,
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                project_key: label(VOLUME_PROJECT_LABEL),
                project: label(VOLUME_PATH_LABEL),
                slot: label(KEEP_SLOT_LABEL).parse().unwrap_or(0),
                root: label(VOLUME_ROOT_LABEL),
                status: c.status.unwrap_or_default(),
            };
            keep(&kept).then_some(kept)
        })
        .collect();
    out.sort_by(|a, b| (&a.project_key, a.slot).cmp(&(&b.project_key, b.slot)));
    Ok(out)
}

/// Removes containers (forced, with their anonymous volumes); a missing one is fine.
///
/// # Errors
/// The first engine error, naming the container.
pub async fn remove_kept(docker: &Docker, ids: &[String]) -> Result<(), String> {
    for id in ids {
        match docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => {}
            Err(e) => return Err(format!("remove the kept container {id}: {e}")),
        }
    }
    Ok(())
}

/// Removes the kept containers that hold volume `name` (they are idle: a run in one holds the
/// volume's entry, which is then not removed); for a volume about to be removed.
pub(crate) async fn remove_kept_holding(docker: &Docker, name: &str) {
    let filters = HashMap::from([
        ("volume".to_owned(), vec![name.to_owned()]),
        ("label".to_owned(), vec![format!("{KEEP_LABEL}=1")]),
    ]);
    let Ok(list) = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
    else {
        return;
    };
    let ids: Vec<String> = list.into_iter().filter_map(|c| c.id).collect();
    let _ = remove_kept(docker, &ids).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn mounts_in_the_scratch_folders_are_found_however_the_target_is_spelled() {
        for t in [
            "/tmp",
            "/tmp/",
            "/tmp/victim",
            "/tmp/./victim",
            "//tmp/victim",
            "/x/../tmp/victim",
            "/dev/shm",
            "/dev/shm/a/b",
        ] {
            assert_eq!(mount_in_scratch(["/usr", t]), Some(t), "{t}");
        }
        for t in [
            "/tmpx",
            "/var/tmp",
            "/workspace/tmp",
            "/dev/shmx",
            "/tmp/../usr",
        ] {
            assert_eq!(mount_in_scratch(["/usr", t]), None, "{t}");
        }
    }

    #[test]
    fn the_config_hash_ignores_the_command_and_folder_and_order_but_not_limits_or_env() {
        let mut a = ContainerCreateBody {
            image: Some("nuvira-host:latest".into()),
            cmd: Some(vec!["true".into()]),
            working_dir: Some("/workspace".into()),
            env: Some(vec!["A=1".into(), "B=2".into()]),
            host_config: Some(bollard::models::HostConfig {
                memory: Some(1 << 30),
                ..Default::default()
            }),
            ..Default::default()
        };
        let h = config_hash(&a, "sha256:1", DEFAULT_IDLE);
        let mut b = a.clone();
        b.cmd = Some(vec!["false".into()]);
        b.working_dir = Some("/workspace/sub".into());
        b.env = Some(vec!["B=2".into(), "A=1".into()]);
        assert_eq!(config_hash(&b, "sha256:1", DEFAULT_IDLE), h);
        assert_ne!(config_hash(&a, "sha256:2", DEFAULT_IDLE), h);
        // Another idle period: another keeper.
        assert_ne!(config_hash(&b, "sha256:1", Duration::from_secs(5)), h);
        a.env = Some(vec!["A=1".into(), "B=3".into()]);
        assert_ne!(config_hash(&a, "sha256:1", DEFAULT_IDLE), h);
        b.host_config.as_mut().unwrap().memory = Some(2 << 30);
        assert_ne!(config_hash(&b, "sha256:1", DEFAULT_IDLE), h);
    }

    #[test]
    fn reuse_is_turned_on_and_off_by_the_usual_words() {
        for (v, on) in [
            ("1", true),
            (" ON", true),
            ("yes", true),
            ("0", false),
            ("", false),
        ] {
            assert_eq!(is_on(v), on, "{v}");
        }
        for (v, off) in [
            ("0", true),
            (" off", true),
            ("False", true),
            ("no", true),
            ("1", false),
            ("", false),
        ] {
            assert_eq!(is_off(v), off, "{v}");
        }
    }

    #[test]
    fn pid_1_runs_as_another_user_than_the_run() {
        assert_eq!(keeper_user("0:0"), "65534:65534");
        assert_eq!(keeper_user("1000"), "65534:65534");
        assert_eq!(keeper_user("65534:65534"), "65533:65533");
        assert_eq!(keeper_user("nobody"), "65533:65533");
        let body = kept_body(
            ContainerCreateBody {
                host_config: Some(bollard::models::HostConfig {
                    pids_limit: Some(32),
                    ..Default::default()
                }),
                ..Default::default()
            },
            "h",
            &[],
            DEFAULT_IDLE,
            "0:0",
        );
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        // PID 1 and its `sleep`: the run keeps the limit it asked for.
        assert_eq!(body.host_config.unwrap().pids_limit, Some(34));
    }

    // The upper folder's listing sees a new entry, a rewrite in place, a change of mode, and
    // a link swapped for a file, never follows a link out, and gives up past its cap.
    #[test]
    fn the_upper_listing_sees_every_change_and_follows_no_link() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path();
        std::fs::create_dir_all(upper.join("root/.cargo")).unwrap();
        std::fs::write(upper.join("root/f"), "one").unwrap();
        std::os::unix::fs::symlink(outside.path(), upper.join("out")).unwrap();
        let base = upper_listing(upper).unwrap();
        assert_eq!(base.len(), 5, "{base:?}");
        assert!(upper_matches(
            upper,
            &["Modified /root".into(), "Added /root/.cargo".into()]
        ));
        assert!(!upper_matches(upper, &["Added /var".into()]));
        assert!(!upper_matches(upper, &["Added /root/../root".into()]));
        assert!(!base.iter().any(|l| l.contains("secret")), "{base:?}");
        assert_eq!(upper_listing(upper).unwrap(), base, "read twice, the same");
        let changed = |what: &str| {
            let now = upper_listing(upper).unwrap();
            assert_ne!(now, base, "{what} not seen");
        };
        std::fs::write(upper.join("root/new"), "").unwrap();
        changed("a new file");
        std::fs::remove_file(upper.join("root/new")).unwrap();
        // Same size, same inode: only the change time tells. The file system's clock ticks
        // first (a run rewrites a file long after the baseline; here it could be the same tick).
        let then = std::fs::metadata(upper.join("root/f"))
            .unwrap()
            .modified()
            .unwrap();
        let probe = outside.path().join("probe");
        while std::fs::write(&probe, "").is_ok()
            && std::fs::metadata(&probe).unwrap().modified().unwrap() <= then
        {
            std::hint::spin_loop();
        }
        std::fs::write(upper.join("root/f"), "two").unwrap();
        changed("a rewrite in place");
        let base = upper_listing(upper).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(upper.join("root/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let now = upper_listing(upper).unwrap();
        assert_ne!(now, base, "a change of mode not seen");
        std::fs::remove_file(upper.join("out")).unwrap();
        std::fs::write(upper.join("out"), "").unwrap();
        let swapped = upper_listing(upper).unwrap();
        assert_ne!(swapped, now, "a link swapped for a file not seen");
        // The container's `/` itself: its mode.
        std::fs::set_permissions(upper, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_ne!(
            upper_listing(upper).unwrap(),
            swapped,
            "a mode of / not seen"
        );
        // Past the cap: unknown, so the engine's list is asked instead.
        for i in 0..=UPPER_CAP {
            std::fs::write(upper.join(format!("root/.cargo/{i}")), "").unwrap();
        }
        assert_eq!(upper_listing(upper), None);
        assert_eq!(upper_listing(&upper.join("missing")), None);
        assert_eq!(upper_dir(None), None);
    }

    #[test]
    fn the_state_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = KeptState {
            id: "abc".into(),
            config: "h".into(),
            baseline: vec!["Added /usr".into()],
            oom: 2,
            pids: 3,
            state: "/etc/hosts 81a4 0 0 174 1".into(),
            pid: Some(7),
            upper: Some((
                "/u".into(),
                vec!["\"root\" 40755 0 0 4096 12 0 1.000000002".into()],
            )),
            used: 5,
        };
        save_state(dir.path(), &s);
        assert_eq!(take_state(dir.path()), Some(s));
        assert_eq!(take_state(dir.path()), None);
    }
}
