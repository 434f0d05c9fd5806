//! Reused cgroup v1 pairs, each joined once by a thread of this process that starts the runs.
//!
//! Moving a process into a cgroup v1 (`cgroup.procs`) takes the kernel's
//! `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace period: 14–20 ms on a
//! loaded machine, paid by every run that joins a new cgroup before its command starts
//! (BENCHMARKS.md, session 26). A process started by a thread is born in that thread's
//! cgroups, with no migration. So a [`Slot`] is a pair of run cgroups (memory and pids) and a
//! thread of ours that moved itself into both once (`tasks`, that one thread only); each run
//! that gets the slot has its command started by that thread, and later runs of this process
//! pay nothing for the join.
//!
//! What keeps a reused slot as contained as a new cgroup:
//! - **Nothing outlives a run into the next**: when a run ends every process in the cgroups
//!   but this one is killed, and the slot goes back to the pool only once `cgroup.procs` lists
//!   no other process (a start still queued on the thread, from a run abandoned meanwhile,
//!   is waited for first) and no memory that reclaim cannot free (`shmem`, `unevictable` in
//!   `memory.stat`: a file left in `/dev/shm`) stays charged to it; otherwise it is retired
//!   (its thread ends and the folders are removed). A slot taken from the pool is checked
//!   again.
//! - **Limits are set for each run** (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`,
//!   `pids.max`, plus one for our thread), and which limit stopped something is the rise of
//!   the cgroup's `oom_kill` and `pids.events` counters over the run.
//! - **This process is never the OOM killer's victim**: the kernel picks a victim among the
//!   cgroup's thread-group leaders only (`CSS_TASK_ITER_PROCS`), and our thread is not one;
//!   our memory is charged to the cgroup of our main thread (`mm->owner`), not the run's.
//!   (Tested: small processes that fill the limit are killed, the test process lives.)
//! - Slots are per process: a `nuvira` that dies leaves folders named `nuvira-run-<pid>-…`,
//!   which the next start removes ([`super::remove_stale`]); [`release`] removes them at once.
//!
//! The OOM killer scans thread-group leaders only since Linux 5.3 (before, every thread, and
//! ours would be scored by this whole process's memory): reuse needs kernel 5.10 or later.
//!
//! Only for cgroup v1: on v2 a thread cannot sit in another cgroup than its process's for the
//! memory controller. `NUVIRA_CGROUP_POOL=0` turns reuse off (a new cgroup per run, joined by
//! the command's `/bin/sh` wrapper as before).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// A pair of cgroups joined by a starter thread of this process.
#[derive(Debug)]
pub(super) struct Slot {
    /// The memory cgroup, then the pids cgroup.
    pub(super) dirs: [PathBuf; 2],
    /// The starter thread's id.
    tid: String,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The slots no run holds.
static FREE: Mutex<Vec<Slot>> = Mutex::new(Vec::new());

/// Whether runs reuse slots: `NUVIRA_CGROUP_POOL` is not `0` and the kernel is 5.10 or later.
pub(super) fn enabled() -> bool {
    static NEW_ENOUGH: LazyLock<bool> = LazyLock::new(|| {
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .is_ok_and(|r| kernel_at_least(&r, 5, 10))
    });
    std::env::var_os("NUVIRA_CGROUP_POOL").is_none_or(|v| v != "0") && *NEW_ENOUGH
}

/// Whether a kernel release such as `6.1.0-18-amd64` is at least `major.minor`.
fn kernel_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// A free slot, or a new one made under `mem_parent` and `pids_parent` (its thread has joined
/// both cgroups when this returns).
pub(super) fn take(mem_parent: &Path, pids_parent: &Path, name: &str) -> Result<Slot, String> {
    loop {
        let Some(mut slot) = FREE.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
            break;
        };
        // Checked again: nothing may have come in while the slot was free.
        if slot.joined() && slot.others().is_empty() {
            return Ok(slot);
        }
        slot.kill_others();
        slot.retire();
    }
    let dirs = [mem_parent.join(name), pids_parent.join(name)];
    std::fs::create_dir(&dirs[0])
        .map_err(|e| format!("create the cgroup {}: {e}", dirs[0].display()))?;
    if let Err(e) = std::fs::create_dir(&dirs[1]) {
        let _ = std::fs::remove_dir(&dirs[0]);
        return Err(format!("create the cgroup {}: {e}", dirs[1].display()));
    }
    let (jobs, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready) = mpsc::sync_channel::<Result<String, String>>(1);
    let tasks: Vec<PathBuf> = dirs.iter().map(|d| d.join("tasks")).collect();
    let thread = std::thread::Builder::new()
        .name("nuvira-cgroup".into())
        .spawn(move || {
            let tid = nix::unistd::gettid().to_string();
            for file in &tasks {
                if let Err(e) = std::fs::write(file, &tid) {
                    let _ = ready_tx.send(Err(format!("join the cgroup {}: {e}", file.display())));
                    return;
                }
            }
            let _ = ready_tx.send(Ok(tid));
            drop(ready_tx);
            while let Ok(job) = rx.recv() {
                job();
            }
        })
        .map_err(|e| format!("start the cgroup's starter thread: {e}"))?;
    let mut slot = Slot {
        dirs,
        tid: String::new(),
        jobs: Some(jobs),
        thread: Some(thread),
    };
    match ready.recv() {
        Ok(Ok(tid)) => {
            slot.tid = tid;
            Ok(slot)
        }
        Ok(Err(e)) => {
            slot.retire();
            Err(e)
        }
        Err(_) => {
            slot.retire();
            Err("the cgroup's starter thread ended before joining".into())
        }
    }
}

impl Slot {
    /// Sets the limits of the next run: `memory` bytes (swap not extending it) and `pids`
    /// processes and threads besides our starter thread.
    pub(super) fn set_limits(&self, memory: u64, pids: u32) -> Result<(), String> {
        let set = |dir: &Path, file: &str, value: String| {
            std::fs::write(dir.join(file), value)
                .map_err(|e| format!("set {} of {}: {e}", file, dir.display()))
        };
        let mem = &self.dirs[0];
        let limit = mem.join("memory.limit_in_bytes");
        let current: u64 = std::fs::read_to_string(&limit)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u64::MAX);
        let memsw = mem.join("memory.memsw.limit_in_bytes").exists();
        // memsw must stay at or above the memory limit: raise it first, lower it last.
        if memsw && memory > current {
            set(mem, "memory.memsw.limit_in_bytes", memory.to_string())?;
        }
        set(mem, "memory.limit_in_bytes", memory.to_string())?;
        if memsw && memory <= current {
            set(mem, "memory.memsw.limit_in_bytes", memory.to_string())?;
        }
        set(&self.dirs[1], "pids.max", (u64::from(pids) + 1).to_string())
    }

    /// Starts `cmd` from the slot's thread, so that it is born in the slot's cgroups.
    pub(super) async fn spawn(
        &self,
        mut cmd: tokio::process::Command,
    ) -> std::io::Result<tokio::process::Child> {
        let gone = || std::io::Error::other("the cgroup's starter thread is gone");
        let handle = tokio::runtime::Handle::current();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _runtime = handle.enter();
            let _ = tx.send(cmd.spawn());
        });
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(job)
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// The pids in the slot's cgroups other than this process.
    pub(super) fn others(&self) -> Vec<i32> {
        let me = i32::try_from(std::process::id()).unwrap_or(-1);
        let mut pids = Vec::new();
        for dir in &self.dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            pids.extend(
                procs
                    .lines()
                    .filter_map(|l| l.trim().parse::<i32>().ok())
                    .filter(|&p| p != me),
            );
        }
        pids
    }

    /// Whether our starter thread (that thread, not another of this process) is still in
    /// both cgroups.
    fn joined(&self) -> bool {
        let Some(thread) = &self.thread else {
            return false;
        };
        if thread.is_finished() || self.tid.is_empty() {
            return false;
        }
        self.dirs.iter().all(|d| {
            std::fs::read_to_string(d.join("tasks"))
                .unwrap_or_default()
                .lines()
                .any(|l| l.trim() == self.tid)
        })
    }

    /// Kills every process in the slot's cgroups but this one, a few rounds (what a dying
    /// process forks is caught by the next).
    pub(super) fn kill_others(&self) {
        for _ in 0..50 {
            let others = self.others();
            if others.is_empty() {
                return;
            }
            for pid in others {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::yield_now();
        }
    }

    /// Whether memory that reclaim cannot free is still charged to the slot (a file left in a
    /// tmpfs such as `/dev/shm`, locked pages): it would count against the next run, so such
    /// a slot is retired (a removed cgroup keeps its charges to itself).
    fn holds_memory(&self) -> bool {
        let stat = self.dirs[0].join("memory.stat");
        super::counter(&stat, "shmem") > 0 || super::counter(&stat, "unevictable") > 0
    }

    /// Gives the slot back for another run when no other process is left in it (waiting a
    /// little for killed ones to go) and nothing unreclaimable stays charged; otherwise
    /// retires it.
    pub(super) fn release(mut self) {
        // A start still queued (its run was abandoned while waiting) is over once the thread
        // answers: jobs run in order.
        let (ack, acked) = mpsc::sync_channel::<()>(1);
        let queued = self.jobs.as_ref().is_some_and(|jobs| {
            jobs.send(Box::new(move || {
                let _ = ack.send(());
            }))
            .is_ok()
        });
        if !queued || acked.recv_timeout(Duration::from_secs(10)).is_err() {
            self.kill_others();
            self.retire();
            return;
        }
        for _ in 0..200 {
            self.kill_others();
            if self.others().is_empty() {
                if self.joined() && !self.holds_memory() {
                    FREE.lock().unwrap_or_else(|e| e.into_inner()).push(self);
                } else {
                    self.retire();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.retire();
    }

    /// Retires the slot (e.g. its limits could not be set).
    pub(super) fn discard(mut self) {
        self.retire();
    }

    /// Ends the thread and removes the folders.
    fn retire(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for dir in &self.dirs {
            // The thread's task leaves the cgroup a moment after it ends.
            for _ in 0..200 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Removes every free slot of this process (its thread ends, its folders go). A slot that a
/// run holds goes back to the pool when the run ends: call this when no run is going, e.g.
/// before the process exits.
pub fn release() {
    let slots = std::mem::take(&mut *FREE.lock().unwrap_or_else(|e| e.into_inner()));
    for mut slot in slots {
        slot.retire();
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_at_least;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(kernel_at_least("6.18.0-1-cloud-amd64\n", 5, 10));
        assert!(kernel_at_least("5.10.0-28-amd64", 5, 10));
        assert!(kernel_at_least("5.15", 5, 10));
        assert!(!kernel_at_least("5.4.0-150-generic", 5, 10));
        assert!(!kernel_at_least("4.19.0-26-amd64", 5, 10));
        assert!(!kernel_at_least("3.10.0-1160.el7.x86_64", 5, 10));
        assert!(!kernel_at_least("", 5, 10));
        assert!(!kernel_at_least("garbage", 5, 10));
    }
}
