//! A warm slot's kept container (nuvira_sandbox::docker_keep), adversarially, on the real
//! engine: what a run leaves (processes, scratch files, writes to the container's own file
//! system) never reaches the next run, a run that kills PID 1, times out, fills the pids limit
//! or runs out of memory does not break the next one, and reuse is real and can be turned off.

use crate::common::{docker, mode_of, set_mode};
use nuvira_api::{NeverCancelled, Sandbox, SandboxOutcome, SandboxRequest};
use nuvira_sandbox::DockerSandbox;
use nuvira_sandbox::cache::CacheRoot;
use std::time::Duration;

const HOST: &str = "nuvira-host:latest";

/// A project, a sandbox with its own cache folder, and the kept containers removed at the end.
struct Slot {
    sandbox: DockerSandbox,
    project: tempfile::TempDir,
    base: tempfile::TempDir,
}

impl Slot {
    async fn new() -> Option<Self> {
        let sandbox = docker(HOST).await?;
        let base = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join("input.txt"), "in").unwrap();
        Some(Self {
            sandbox: sandbox
                .with_cache_root(CacheRoot::at(base.path(), u64::MAX))
                .with_reuse(true),
            project,
            base,
        })
    }

    fn request(&self, script: &str) -> SandboxRequest {
        let mut req = SandboxRequest::new(
            self.project.path(),
            vec!["sh".into(), "-c".into(), script.into()],
        );
        req.cache = true;
        req.limits.timeout = Duration::from_secs(60);
        req
    }

    async fn run(&self, script: &str) -> SandboxOutcome {
        self.sandbox
            .run(&self.request(script), &NeverCancelled)
            .await
            .unwrap()
    }

    /// The kept containers of this cache folder.
    async fn kept(&self) -> Vec<nuvira_sandbox::docker_keep::KeptContainer> {
        let root = CacheRoot::at(self.base.path(), u64::MAX);
        nuvira_sandbox::docker_keep::list_kept(self.sandbox.client(), root.dir())
            .await
            .unwrap()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The kept containers and the volumes of this test's cache folder.
        let root = CacheRoot::at(self.base.path(), u64::MAX);
        let base = root.dir().to_string_lossy().into_owned();
        for what in [["ps", "-aq"], ["volume", "ls"]] {
            let mut cmd = std::process::Command::new("docker");
            cmd.args(what);
            if what[0] == "volume" {
                cmd.arg("-q");
            }
            let out = cmd
                .args(["--filter", &format!("label=nuvira.cache.root={base}")])
                .output()
                .unwrap();
            let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .collect();
            if !ids.is_empty() {
                let mut rm = std::process::Command::new("docker");
                if what[0] == "volume" {
                    rm.args(["volume", "rm", "-f"]);
                } else {
                    rm.args(["rm", "-f"]);
                }
                let _ = rm.args(&ids).output();
            }
        }
    }
}

fn id(o: &SandboxOutcome) -> String {
    o.info.container_id.clone().unwrap()
}

/// `ps`-like: the command names of every process but PID 1 and the caller's own.
const PS: &str = "for p in /proc/[0-9]*; do [ \"$p\" = /proc/1 ] || [ \"$p\" = /proc/$$ ] || { c=$(tr '\\0\\n' '  ' < $p/cmdline 2>/dev/null); [ -n \"$c\" ] && echo \"PROC $c\"; }; done; true";

/// Shell: `n`, the kept report's marker, and `b`, the markers' prefix, read from the
/// wrapper's command line (exit 9 when not found).
const MARKERS: &str = "n=$(tr '\\0' '\\n' < /proc/$PPID/cmdline | grep -o 'nuvira-nuvira-sandbox-[0-9a-f-]*-kept' | head -n 1); \
                       [ -n \"$n\" ] || { echo no marker; exit 9; }; b=${n%-kept}";

/// Whether a file the look-up script checks was found.
fn found(o: &SandboxOutcome) -> bool {
    o.stdout.lines().any(|l| l.starts_with("FOUND /"))
}

fn procs(o: &SandboxOutcome) -> Vec<&str> {
    o.stdout
        .lines()
        .filter(|l| l.starts_with("PROC "))
        // PID 1's own `sleep 1`, and this run's wrapper and listing.
        .filter(|l| {
            *l != "PROC /bin/sleep 1 "
                && !l.contains("P=/workspace/.nuvira")
                && !l.contains("/proc/[0-9]")
        })
        .collect()
}

#[tokio::test]
async fn a_warm_run_reuses_the_container_and_sees_nothing_the_last_run_left() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    assert_eq!(first.exit_code, Some(0), "{first:?}");

    let limits = first.info.limits.clone().unwrap();
    assert!(
        limits.contains("container new, kept for the next run"),
        "{limits}"
    );
    // Processes: a background one, a setsid daemon, one that ignores SIGTERM, a stopped one;
    // scratch files in /tmp and /dev/shm. (Listed once all four have started: a child just
    // forked still shows its parent's command line.)
    let leave = slot
        .run(&format!(
            "sleep 1000 & setsid nohup sleep 1001 >/dev/null 2>&1 & \
             sh -c 'trap \"\" TERM HUP INT; exec sleep 1002' & \
             sh -c 'kill -STOP $$; sleep 1003' & \
             echo x > /tmp/x; echo x > /dev/shm/x; mkdir -p /tmp/d/e; \
             i=0; until [ $i -ge 2000 ] || [ \"$({{ {PS}; }} | grep -c -e '^PROC sleep 100[0-2] ' -e '^PROC sh -c kill -STOP')\" -ge 4 ]; do i=$((i+1)); done; \
             {PS}"
        ))
        .await;
    assert_eq!(leave.exit_code, Some(0), "{leave:?}");
    assert_eq!(id(&leave), id(&first), "not reused: {leave:?}");
    for n in ["sleep 1000", "sleep 1001", "sleep 1002", "sleep 1003"] {
        assert!(
            procs(&leave).iter().any(|p| p.contains(n)),
            "{n}: {leave:?}"
        );
    }
    let look = "ls -A /tmp /dev/shm; for f in /tmp/x /etc/x \"$HOME/x\" /var/tmp/x; do [ -e \"$f\" ] && echo \"FOUND $f\"; done; true";
    let next = slot.run(&format!("{PS}; {look}")).await;
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    assert_eq!(id(&next), id(&leave), "not reused: {next:?}");
    assert!(procs(&next).is_empty(), "left running: {next:?}");
    assert!(!found(&next), "{next:?}");
    let listed: Vec<&str> = next
        .stdout
        .lines()
        .filter(|l| ["x", "d"].contains(l))
        .collect();
    assert!(listed.is_empty(), "scratch kept: {next:?}");
    // Writes into the container's own file system ($HOME, /var/tmp; /etc is the host's,
    // read-only): that container is not kept (its changes differ), the next run gets a new one.
    let write = slot
        .run("mkdir -p \"$HOME\" /var/tmp; echo x > \"$HOME/x\"; echo x > /var/tmp/x; echo x > /etc/x; true")
        .await;
    assert_eq!(id(&write), id(&next));
    let limits = write.info.limits.clone().unwrap();
    assert!(limits.contains("removed after this run"), "{limits}");
    let after = slot.run(look).await;
    assert_eq!(after.exit_code, Some(0), "{after:?}");
    assert!(!found(&after), "{after:?}");
    assert_ne!(id(&after), id(&write), "{after:?}");
    // Kept again from there, and writing /tmp does not stop that.
    let again = slot.run("echo x > /tmp/y").await;
    assert_eq!(id(&again), id(&after));
    let clean = slot.run(&format!("{PS}; {look}")).await;
    assert_eq!(id(&clean), id(&after));
    assert!(procs(&clean).is_empty(), "{clean:?}");
    assert!(!clean.stdout.lines().any(|l| l == "y"), "{clean:?}");
    assert_eq!(slot.kept().await.len(), 1);
    // A change the engine's changes list cannot show: the mode of a folder the list names
    // already (`/root`, made for the toolchain's mounts). Seen where the container's overlay
    // folder can be read on this machine (a local engine, as root), which is what is compared
    // there instead of the engine's list.
    let upper = slot
        .sandbox
        .client()
        .inspect_container(
            &id(&clean),
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
        .graph_driver
        .filter(|d| d.name == "overlay2")
        .and_then(|d| d.data.get("UpperDir").cloned());
    if upper.is_some_and(|u| std::fs::read_dir(u).is_ok()) {
        let mode = slot.run("chmod 0700 /root && stat -c %a /root").await;
        assert_eq!(mode.stdout.trim(), "700", "{mode:?}");
        assert_eq!(id(&mode), id(&clean));
        let limits = mode.info.limits.clone().unwrap();
        assert!(
            limits
                .contains("removed after this run (the run wrote the container's own file system)"),
            "{limits}"
        );
        let fresh = slot.run("stat -c %a /root").await;
        assert_ne!(id(&fresh), id(&mode), "{fresh:?}");
        assert_ne!(fresh.stdout.trim(), "700", "{fresh:?}");
    } else {
        eprintln!(
            "the overlay upper folder is not readable here: the engine's changes list is used"
        );
    }
}

#[tokio::test]
async fn a_run_that_kills_pid_1_or_whose_container_dies_does_not_break_the_next_run() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    // Every signal a run can send PID 1 from inside.
    let killer = slot
        .run("for s in KILL TERM INT HUP QUIT USR1 USR2 ALRM PIPE; do kill -$s 1; done; true")
        .await;
    assert_eq!(id(&killer), id(&first), "{first:?}");
    let next = slot.run("cat input.txt").await;
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    assert_eq!(next.stdout, "in");
    // PID 1 killed from outside while the container waits.
    let kept = id(&next);
    let out = std::process::Command::new("docker")
        .args(["kill", &kept])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let after = slot.run("cat input.txt").await;
    assert_eq!(after.exit_code, Some(0), "{after:?}");
    assert_eq!(after.stdout, "in");
    assert_ne!(id(&after), kept);
    // Reused from then on.
    assert_eq!(id(&slot.run("true").await), id(&after));
}

// PID 1 is another user's: a run cannot signal it, `ptrace` it (which would let it outlive
// the cleanup inside PID 1) or change its limits with `prlimit`.
#[tokio::test]
async fn a_run_can_neither_signal_nor_trace_nor_limit_pid_1() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    let probe = slot
        .run(
            "grep '^Uid:' /proc/1/status; id -u; \
             kill -0 1 2>/dev/null && echo SIGNAL-OK || echo SIGNAL-DENIED; \
             prlimit --pid 1 --nofile=1:1 2>/dev/null && echo PRLIMIT-OK || echo PRLIMIT-DENIED; \
             python3 -c 'import ctypes; c=ctypes.CDLL(None, use_errno=True); r=c.ptrace(16, 1, 0, 0); print(\"PTRACE\", r, ctypes.get_errno())'",
        )
        .await;
    assert_eq!(probe.exit_code, Some(0), "{probe:?}");
    assert_eq!(id(&probe), id(&first), "{probe:?}");
    let lines: Vec<&str> = probe.stdout.lines().collect();
    assert!(
        lines[0].split_whitespace().nth(1) == Some("65534") && lines[1] == "0",
        "PID 1 is nobody, the run root: {probe:?}"
    );
    for want in ["SIGNAL-DENIED", "PRLIMIT-DENIED", "PTRACE -1 1"] {
        assert!(lines.contains(&want), "{want}: {probe:?}");
    }
    // Nothing of the probe changed the container: reused, and its PID 1 still there.
    let next = slot.run("grep '^Uid:' /proc/1/status").await;
    assert_eq!(id(&next), id(&first), "{next:?}");
    assert!(next.stdout.contains("65534"), "{next:?}");
}

// What a run can leave outside the engine's changes list and the scratch folders: a file in
// the /dev tmpfs, a POSIX message queue, a System V shared
// memory segment, /tmp's contents hidden behind `chmod 0`. Each gets its container replaced,
// and the next run sees none of it. A read-only folder left in /tmp is emptied: kept.
#[tokio::test]
async fn state_a_run_leaves_outside_the_file_system_gets_the_container_replaced() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let check = "grep -c evil /etc/hosts; ls -A /dev | grep -cx planted; ls -A /dev/mqueue | wc -l; \
                 wc -l < /proc/sysvipc/shm; stat -c %a /tmp; ls -A /tmp | wc -l";
    // The line counts of a clean container: no "evil", no "planted", no queue, the shm
    // header only, /tmp 1777 and empty.
    let clean = ["0", "0", "0", "1", "1777", "0"];
    let mut last = slot.run("true").await;
    // With the read-only root Docker mounts its /etc files read-only too (the state check
    // covers them for configs where they are not).
    let hosts = slot.run("echo '10.0.0.1 evil' >> /etc/hosts").await;
    assert_ne!(hosts.exit_code, Some(0), "{hosts:?}");
    assert!(hosts.stderr.contains("Read-only"), "{hosts:?}");
    assert_eq!(id(&hosts), id(&last));
    for (what, leave, replaced) in [
        ("/dev", "echo x > /dev/planted", true),
        (
            "a message queue",
            "touch /dev/mqueue/q && ls /dev/mqueue",
            true,
        ),
        (
            "a shared memory segment",
            "python3 -c 'import ctypes; c=ctypes.CDLL(None); print(c.shmget(0, 4096, 0o1600))' && wc -l < /proc/sysvipc/shm",
            true,
        ),
        ("chmod 0 /tmp", "echo h > /tmp/hidden; chmod 0 /tmp", true),
        (
            "a read-only folder in /tmp",
            "mkdir -p /tmp/ro/in && touch /tmp/ro/in/f && chmod -R a-w /tmp/ro",
            false,
        ),
    ] {
        let left = slot.run(leave).await;
        assert_eq!(left.exit_code, Some(0), "{what}: {left:?}");
        assert_eq!(
            id(&left),
            id(&last),
            "{what}: not run in the kept container"
        );
        let next = slot.run(check).await;
        assert_eq!(next.exit_code, Some(0), "{what}: {next:?}");
        let got: Vec<&str> = next.stdout.lines().map(str::trim).collect();
        assert_eq!(got, clean, "{what}: {next:?}");
        if replaced {
            assert_ne!(id(&next), id(&left), "{what}: the container was kept");
            let limits = left.info.limits.clone().unwrap();
            assert!(
                limits
                    .contains("removed after this run (the run left state outside the file system"),
                "{what}: {limits}"
            );
        } else {
            assert_eq!(id(&next), id(&left), "{what}: cleaned, so kept");
        }
        last = next;
    }
}

// The wrapper and the cleanup are the run's user's, so a run can trace them and fake their
// word that every process is gone; the host's look at the container's processes cannot be
// faked. A process of the run's user left in the kept container is seen, from the container's
// cgroup on this machine and from the engine's `top`, and its end is seen too.
#[tokio::test]
async fn the_host_sees_a_process_of_the_run_left_in_the_kept_container() {
    use nuvira_sandbox::docker_keep::{Who, only_keeper_left};
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    let kept = id(&first);
    let docker = slot.sandbox.client();
    let pid = docker
        .inspect_container(
            &kept,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
        .state
        .unwrap()
        .pid
        .unwrap();
    let local = Who {
        host_pid: Some(u32::try_from(pid).unwrap()),
        ..Who::new("0:0")
    };
    let engine = Who::new("0:0");
    for who in [&local, &engine] {
        assert_eq!(
            only_keeper_left(docker, &kept, who).await,
            Some(true),
            "{who:?}"
        );
    }
    // A process of the run's user that no wrapper killed.
    let out = std::process::Command::new("docker")
        .args(["exec", "-d", "-u", "0:0", &kept, "sleep", "1000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let left = || async {
        (
            only_keeper_left(docker, &kept, &local).await,
            only_keeper_left(docker, &kept, &engine).await,
        )
    };
    let mut seen = left().await;
    for _ in 0..200 {
        if seen == (Some(false), Some(false)) {
            break;
        }
        seen = left().await;
    }
    assert_eq!(
        seen,
        (Some(false), Some(false)),
        "the left process was not seen"
    );
    // The next run's wrapper kills it, and the host sees it gone.
    let next = slot.run("true").await;
    assert_eq!(id(&next), kept, "{next:?}");
    for who in [&local, &engine] {
        assert_eq!(
            only_keeper_left(docker, &kept, who).await,
            Some(true),
            "{who:?}"
        );
    }
    // Another container's cgroup is not taken for this one's.
    let other = Who {
        host_pid: Some(std::process::id()),
        ..Who::new("0:0")
    };
    assert_eq!(
        only_keeper_left(docker, &kept, &other).await,
        Some(true),
        "this process is no container's PID 1: the engine is asked instead"
    );
}

#[tokio::test]
async fn a_timed_out_run_is_killed_and_the_next_run_is_clean() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    slot.run("true").await;
    let mut req = slot.request("echo started; sh -c 'trap \"\" TERM; sleep 1000' & sleep 1000");
    req.limits.timeout = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let out = slot.sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.timed_out && out.exit_code.is_none(), "{out:?}");
    // Killed at its timeout, not at the end of its sleep: the second exec's `kill -9 -1` ended
    // the command and its output stream (else the output is given up after 10 s, empty).
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(out.stdout.trim(), "started", "{out:?}");
    let next = slot.run(PS).await;
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    assert!(procs(&next).is_empty(), "{next:?}");
    assert_ne!(id(&next), id(&out));
}

#[tokio::test]
async fn a_pids_limit_hit_is_reported_and_the_next_run_is_clean() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    slot.run("true").await;
    let mut req = slot.request("i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); done; wait");
    req.limits.pids = 32;
    req.limits.timeout = Duration::from_secs(30);
    let out = slot.sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.info.pids_limited, "{out:?}");
    let mut next = slot.request(PS);
    next.limits.pids = 32;
    let next = slot.sandbox.run(&next, &NeverCancelled).await.unwrap();
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    assert!(procs(&next).is_empty(), "{next:?}");
}

/// A fork the pids limit refused, with nothing said about it on standard error (the run's
/// errors go to /dev/null, as a test runner's captured output would keep them from it): the
/// pids cgroup's count says so, and a later run that forks within the limit is not marked.
#[tokio::test]
async fn a_pids_limit_hit_the_output_does_not_mention_is_still_reported() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let request = |script: &str| {
        let mut req = slot.request(script);
        req.limits.pids = 32;
        req
    };
    let first = slot
        .sandbox
        .run(&request("true"), &NeverCancelled)
        .await
        .unwrap();
    assert!(!first.info.pids_limited, "{first:?}");
    let hit = request(
        "i=0; while [ $i -lt 100 ]; do sleep 100 & i=$((i+1)); done 2>/dev/null; echo tried; exit 1",
    );
    let out = slot.sandbox.run(&hit, &NeverCancelled).await.unwrap();
    // (dash gives up at the refused fork: exit 2, and its word went to /dev/null.)
    assert_ne!(out.exit_code, Some(0), "{out:?}");
    assert!(!out.stderr.to_ascii_lowercase().contains("fork"), "{out:?}");
    assert!(out.info.pids_limited, "{out:?}");
    // The same container (the count is its cgroup's): a run within the limit is not marked.
    let within = request("sleep 0 & sleep 0 & wait; exit 1");
    let next = slot.sandbox.run(&within, &NeverCancelled).await.unwrap();
    assert_eq!(id(&next), id(&out), "{next:?}");
    assert!(!next.info.pids_limited, "{next:?}");
}

#[tokio::test]
async fn an_out_of_memory_kill_in_a_kept_container_is_reported_as_such() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let small = |script: &str| {
        let mut r = slot.request(script);
        r.limits.memory_bytes = 64 << 20;
        r
    };
    let first = slot
        .sandbox
        .run(&small("true"), &NeverCancelled)
        .await
        .unwrap();
    let hog = slot
        .sandbox
        .run(
            &small("head -c 400m /dev/zero | tail > /dev/null; echo survived"),
            &NeverCancelled,
        )
        .await
        .unwrap();
    assert!(hog.oom_killed && hog.info.oom_killed, "{hog:?}");
    assert_eq!(id(&hog), id(&first), "the hog ran in the kept container");
    let next = slot
        .sandbox
        .run(&small("echo fine"), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    assert!(!next.oom_killed, "{next:?}");
}

#[tokio::test]
async fn reuse_can_be_turned_off_and_a_different_config_gets_another_container() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let a = slot.run("true").await;
    assert_eq!(id(&slot.run("true").await), id(&a));
    // Other limits or environment: not the same container.
    let mut req = slot.request("echo $V");
    req.env.insert("V".into(), "other".into());
    let other = slot.sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_eq!(other.stdout.trim(), "other");
    assert_ne!(id(&other), id(&a));
    let mut req = slot.request("true");
    req.limits.memory_bytes = 3 << 30;
    assert_ne!(
        id(&slot.sandbox.run(&req, &NeverCancelled).await.unwrap()),
        id(&other)
    );
    // Off: a fresh container per run, none kept.
    let off = slot.sandbox.clone().with_reuse(false);
    let (x, y) = (
        off.run(&slot.request("true"), &NeverCancelled)
            .await
            .unwrap(),
        off.run(&slot.request("true"), &NeverCancelled)
            .await
            .unwrap(),
    );
    assert_ne!(id(&x), id(&y));
    assert!(!x.info.limits.clone().unwrap().contains("container"));
    off.wait_for_cleanup().await;
    assert!(
        slot.kept()
            .await
            .iter()
            .all(|k| k.id != id(&x) && k.id != id(&y)),
        "{:?}",
        slot.kept().await
    );
}

#[tokio::test]
async fn an_idle_kept_container_exits_by_itself_and_is_removed() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let sandbox = slot.sandbox.clone().with_reuse_idle(Duration::from_secs(2));
    let out = sandbox
        .run(&slot.request("true"), &NeverCancelled)
        .await
        .unwrap();
    let kept = id(&out);
    assert!(
        out.info
            .limits
            .clone()
            .unwrap()
            .contains("kept for the next run"),
        "{out:?}"
    );
    // Waits for it to stop (PID 1 exits once it has seen no other process for 2 s); the
    // engine then removes it (AutoRemove).
    let waited = std::process::Command::new("timeout")
        .args(["60", "docker", "wait", &kept])
        .output()
        .unwrap();
    assert_ne!(waited.status.code(), Some(124), "still running after 60 s");
    for _ in 0..100 {
        if slot.kept().await.iter().all(|k| k.id != kept) {
            return;
        }
        // The engine's removal after the exit is its own; poll its list.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the stopped kept container {kept} was not removed");
}

// With background removal (what the commands use), a run that exited 0 is cleaned after its
// result is out; the next run of the project in this process waits for that cleanup and gets
// the same warm slot and container, clean.
#[tokio::test]
async fn a_container_cleaned_after_the_result_is_clean_and_warm_for_the_next_run() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let sandbox = slot.sandbox.clone().with_background_removal();
    let run = |script: &str| {
        let req = slot.request(script);
        let sandbox = sandbox.clone();
        async move { sandbox.run(&req, &NeverCancelled).await.unwrap() }
    };
    let first = run("true").await;
    let leave = run(&format!(
        "setsid nohup sleep 1001 >/dev/null 2>&1 & sh -c 'trap \"\" TERM; exec sleep 1002' & echo x > /tmp/x; {PS}"
    ))
    .await;
    assert_eq!(id(&leave), id(&first), "{leave:?}");
    let limits = leave.info.limits.clone().unwrap();
    assert!(limits.contains("cleaned after this run"), "{limits}");
    let next = run(&format!("{PS}; ls -A /tmp")).await;
    assert_eq!(id(&next), id(&leave), "{next:?}");
    assert!(procs(&next).is_empty(), "{next:?}");
    assert!(!next.stdout.lines().any(|l| l == "x"), "{next:?}");
    assert!(
        !next
            .info
            .workspace_copy
            .clone()
            .unwrap()
            .contains("warm slot 2"),
        "the next run took the other slot"
    );
    // A run that writes the container's own file system: removed by the cleanup after it.
    let write = run("mkdir -p \"$HOME\"; echo x > \"$HOME/x\"").await;
    assert_eq!(id(&write), id(&next));
    let after = run("test ! -e \"$HOME/x\"").await;
    assert_eq!(after.exit_code, Some(0), "{after:?}");
    assert_ne!(id(&after), id(&write));
    sandbox.wait_for_cleanup().await;
}

// The wrapper cleans up at its end and reports it; a run that kills its wrapper and forges that
// report and the listings (their markers are in the wrapper's command line) gets the engine's
// exit code of the wrapper (a kill, not 0), so neither the report nor the listings are
// trusted: a second exec cleans up, the volume and the container are made again, and the
// daemon it left and what it wrote in /tmp are gone for the next run.
#[tokio::test]
async fn a_run_that_kills_its_wrapper_and_forges_its_report_is_still_cleaned() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    let forge = slot
        .run(&format!(
            "setsid sh -c 'sleep 0.3; echo j > /tmp/j; exec sleep 1004' >/dev/null 2>&1 & \
             {MARKERS}; printf '\\000%s-newer\\000' \"$b\" >&2; printf '\\000%s-all\\000' \"$b\" >&2; \
             find /workspace -xdev -print0 >&2; printf '\\000%s-end\\000' \"$b\" >&2; \
             printf '\\000%s\\000ok 0 0\\000' \"$n\" >&2; kill -9 $PPID"
        ))
        .await;
    assert_eq!(id(&forge), id(&first));
    assert_ne!(forge.exit_code, Some(0), "{forge:?}");
    assert_ne!(forge.exit_code, Some(9), "{forge:?}");
    let next = slot.run(&format!("{PS}; ls -A /tmp")).await;
    assert_eq!(next.exit_code, Some(0), "{next:?}");
    // The listings of a run whose report is not trusted are not either: the volume is made
    // again, and with it the container.
    assert_ne!(id(&next), id(&forge), "{next:?}");
    assert!(procs(&next).is_empty(), "{next:?}");
    assert!(!next.stdout.lines().any(|l| l == "j"), "{next:?}");
}

// A command cannot get a listing of its own trusted, with its wrapper alive: not by printing a
// whole fake listing and a new container's baseline marker after it (a reused container's
// runs never take one), nor by removing the mirror's mark first (the wrapper then says it made
// no listing). Either way what the command created is still found and undone.
#[tokio::test]
async fn a_listing_the_command_prints_itself_is_never_trusted() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let first = slot.run("true").await;
    let fake = |hide: &str| {
        format!(
            "{MARKERS}; \
             printf '\\000%s-newer\\000' \"$b\" >&2; printf '\\000%s-all\\000' \"$b\" >&2; \
             find /workspace -xdev ! -name {hide} -print0 >&2; printf '\\000%s-end\\000' \"$b\" >&2"
        )
    };
    for (what, script) in [
        (
            "a fake listing and base marker",
            format!(
                "echo x > evil1; {}; printf '\\000%s-base\\000x\\000' \"$b\" >&2",
                fake("evil1")
            ),
        ),
        (
            "the mark removed",
            format!(
                "echo x > evil2; rm -f /dev/shm/.nuvira-mark; {}",
                fake("evil2")
            ),
        ),
    ] {
        let forge = slot.run(&script).await;
        assert_eq!(forge.exit_code, Some(0), "{what}: {forge:?}");
        assert_eq!(
            id(&forge),
            id(&first),
            "{what}: not run in the kept container"
        );
        let next = slot.run("ls -A /workspace").await;
        assert_eq!(next.exit_code, Some(0), "{what}: {next:?}");
        assert!(
            !next.stdout.lines().any(|l| l.starts_with("evil")),
            "{what}: the created file survived: {next:?}"
        );
    }
}

// Two runs of one project at once hold the two warm slots: each its own kept container, never
// one exec'd into by both; each slot's container is reused by that slot's next run.
#[tokio::test]
async fn two_runs_at_once_never_share_a_kept_container() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    // The pip cache volume is shared by the slots: the two runs meet there.
    std::fs::write(slot.project.path().join("requirements.txt"), "").unwrap();
    let round = |r: u32| {
        let runs: Vec<_> = (0..2)
            .map(|i| {
                let q = "/nuvira-cache/python";
                let req = slot.request(&format!(
                    "touch {q}/r{r}-{i}; while [ ! -e {q}/r{r}-0 ] || [ ! -e {q}/r{r}-1 ]; do :; done"
                ));
                let sandbox = slot.sandbox.clone();
                tokio::spawn(async move { sandbox.run(&req, &NeverCancelled).await.unwrap() })
            })
            .collect();
        async move {
            let mut ids = Vec::new();
            for r in runs {
                let o = r.await.unwrap();
                assert_eq!(o.exit_code, Some(0), "{o:?}");
                ids.push(id(&o));
            }
            ids.sort();
            ids
        }
    };
    let first = round(1).await;
    assert_ne!(first[0], first[1]);
    assert_eq!(round(2).await, first);
    assert_eq!(slot.kept().await.len(), 2);
}

// A kept container's reports are read on this machine through its PID 1's root when the engine
// is a local one and this process is root (else downloaded from the engine): only regular files
// under the cap, never through a link, a FIFO never waited on; a path with a link on the way is
// left to the engine, which resolves it inside the container, as before (a link to a folder
// only this machine has gives nothing). Twice: the new container, then the reused one. Each run
// is on a thread of its own, so that a read that waits on the FIFO fails the test at its
// deadline instead of hanging it.
#[tokio::test]
async fn a_kept_containers_reports_are_read_as_the_run_left_them() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    // A folder of this machine's that the container does not have, with a report in it.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("ok.xml"), "HOST").unwrap();
    let script = format!(
        "mkdir -p pkg && cd pkg && echo '<ok/>' > ok.xml && ln -s /etc/passwd link.xml && \
         mkfifo fifo.xml && truncate -s {big} big.xml && ln -s pkg ../alias && \
         ln -s '{out}' ../abs",
        big = nuvira_sandbox::COLLECT_CAP + 1,
        out = outside.path().display()
    );
    let mut req = slot.request(&script);
    req.collect = [
        "pkg/ok.xml",
        "pkg/link.xml",
        "pkg/fifo.xml",
        "pkg/big.xml",
        "alias/ok.xml",
        "abs/ok.xml",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut ids = Vec::new();
    for round in ["new container", "reused container"] {
        let out = crate::common::run_within(
            slot.sandbox.clone(),
            req.clone(),
            Duration::from_secs(120),
            "collecting the reports waited on the FIFO",
        )
        .unwrap();
        assert_eq!(out.exit_code, Some(0), "{round}: {out:?}");
        assert_eq!(
            out.collected.keys().collect::<Vec<_>>(),
            ["alias/ok.xml", "pkg/ok.xml"],
            "{round}: collected through a link, a FIFO or past the cap"
        );
        assert_eq!(out.collected["pkg/ok.xml"], b"<ok/>\n", "{round}");
        assert_eq!(out.collected["alias/ok.xml"], b"<ok/>\n", "{round}");
        let from = out.info.collected_from.clone().unwrap();
        // Root, and the container's PID 1 is a process of this machine (in the container's
        // cgroup): its root can be read here.
        let pid = slot
            .sandbox
            .client()
            .inspect_container(
                &id(&out),
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .unwrap()
            .state
            .and_then(|s| s.pid)
            .unwrap_or_default();
        let local = nix::unistd::geteuid().is_root()
            && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|c| c.contains(&id(&out)));
        if local {
            assert_eq!(
                from,
                "4 read on this machine through the container's root, 2 downloaded from the engine",
                "{round}"
            );
        } else {
            eprintln!("{round}: not root or not a local engine: {from}");
        }
        ids.push(id(&out));
    }
    assert_eq!(ids[0], ids[1], "the container was not reused");
}

/// Root, and the engine a process of this machine's: a run's files can be written into its
/// volume's folder here (else the engine's archive upload does it, and the tests say so).
fn engine_is_local_and_root() -> bool {
    nix::unistd::geteuid().is_root()
        && std::env::var("DOCKER_HOST").map_or(true, |h| h.starts_with("unix://"))
}

/// The folder on this machine of the slot's workspace volume (the one this test's cache
/// folder has).
fn workspace_volume_folder(slot: &Slot) -> std::path::PathBuf {
    let root = CacheRoot::at(slot.base.path(), u64::MAX);
    let out = std::process::Command::new("docker")
        .args(["volume", "ls", "-q", "--filter"])
        .arg(format!("label=nuvira.cache.root={}", root.dir().display()))
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&out.stdout).into_owned();
    let name = names
        .lines()
        .find(|n| n.ends_with("-workspace"))
        .unwrap_or_else(|| panic!("no workspace volume among {names:?}"));
    let out = std::process::Command::new("docker")
        .args(["volume", "inspect", "--format", "{{.Mountpoint}}", name])
        .output()
        .unwrap();
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

// What changed since the slot's last run is written straight into its workspace volume's folder
// on this machine when that run wrote there (instead of the engine's archive upload into the
// running container), and the kept container sees exactly the new files; with direct writes
// off, the upload gives the same files.
#[tokio::test]
async fn a_kept_containers_changes_are_written_into_its_volume_here() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let show = "cat input.txt; echo; cat sub/new.txt 2>/dev/null || echo no-new; echo; stat -c '%a' sub/run.sh sub 2>/dev/null || true";
    let first = slot.run(show).await;
    assert_eq!(first.exit_code, Some(0), "{first:?}");
    assert!(first.stdout.starts_with("in\nno-new"), "{}", first.stdout);

    let p = slot.project.path();
    std::fs::write(p.join("input.txt"), "edited").unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    set_mode(&p.join("sub"), 0o755);
    std::fs::write(p.join("sub/new.txt"), "new").unwrap();
    std::fs::write(p.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
    set_mode(&p.join("sub/run.sh"), 0o750);
    let second = slot.run(show).await;
    assert_eq!(second.exit_code, Some(0), "{second:?}");
    assert_eq!(second.stdout, "edited\nnew\n750\n755\n");
    assert_eq!(id(&second), id(&first), "the kept container was not reused");
    let copy = second.info.workspace_copy.clone().unwrap();
    assert!(copy.contains("uploaded: 4 changed"), "{copy}");
    if engine_is_local_and_root() {
        assert!(
            copy.contains("written into the volume's folder on this machine"),
            "{copy}"
        );
    } else {
        eprintln!("not root or not a local engine: {copy}");
    }

    // The engine's upload, for the same kind of change, and a folder's mode changed alone.
    std::fs::write(p.join("input.txt"), "edited again").unwrap();
    set_mode(&p.join("sub"), 0o700);
    let uploaded = slot
        .sandbox
        .clone()
        .with_direct_write(false)
        .run(&slot.request(show), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(uploaded.stdout, "edited again\nnew\n750\n700\n");
    let copy = uploaded.info.workspace_copy.clone().unwrap();
    assert!(!copy.contains("written into"), "{copy}");
    assert_eq!(id(&uploaded), id(&first));
}

// Were a link into this machine's file system in the workspace volume's folder where an
// uploaded folder was (a run cannot put one there unnoticed: its listing makes the next run
// start from a new volume; here it is put there from the host, past the listing), the next
// run's changes are never written through it: its folder on this machine stays empty.
#[tokio::test]
async fn a_link_in_the_volumes_folder_is_never_written_through() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    if !engine_is_local_and_root() {
        eprintln!("SKIPPED: the volume's folder is not this machine's to write");
        return;
    }
    let p = slot.project.path();
    std::fs::create_dir(p.join("pkg")).unwrap();
    std::fs::write(p.join("pkg/mod.txt"), "v1").unwrap();
    let first = slot.run("cat pkg/mod.txt").await;
    assert_eq!(first.stdout, "v1");

    let outside = tempfile::tempdir().unwrap();
    let folder = workspace_volume_folder(&slot);
    std::fs::remove_dir_all(folder.join("pkg")).unwrap();
    std::os::unix::fs::symlink(outside.path(), folder.join("pkg")).unwrap();

    std::fs::write(p.join("pkg/mod.txt"), "v2").unwrap();
    std::fs::create_dir(p.join("pkg/new")).unwrap();
    std::fs::write(p.join("pkg/new/deep.txt"), "v2").unwrap();
    // The folder's own mode changes too: it must not land on the link's target.
    set_mode(&p.join("pkg"), 0o751);
    let before = mode_of(outside.path());
    assert_ne!(before, 0o751);
    let second = slot
        .sandbox
        .run(&slot.request("cat pkg/mod.txt"), &NeverCancelled)
        .await;
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "written through the link: {second:?}"
    );
    assert_eq!(
        mode_of(outside.path()),
        before,
        "mode set through the link: {second:?}"
    );
    // Not uploaded either (inside the container the engine would follow the link): the run
    // says so, and the next one starts from a new volume with the workspace as it is.
    match second {
        Err(nuvira_api::SandboxError::Failed(why)) => {
            assert!(why.contains("not what the last run left"), "{why}");
            assert!(why.contains("pkg is a link"), "{why}");
        }
        other => panic!("expected the run to refuse the volume: {other:?}"),
    }
    let third = slot.run("cat pkg/mod.txt pkg/new/deep.txt").await;
    assert_eq!(third.stdout, "v2v2", "{third:?}");
    let copy = third.info.workspace_copy.unwrap_or_default();
    assert!(copy.contains("into a new workspace volume"), "{copy}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

// PID 1's `sleep` is never looked up on the request's `PATH`: with a `PATH` that starts with a
// folder of the workspace (a plan's `env`), a `sleep` a run puts there would otherwise be run
// by PID 1, as PID 1's user, between and during runs, where no cleanup reaches it.
#[tokio::test]
async fn pid_1_never_runs_a_sleep_a_run_put_on_path() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let mut plant = slot.request(
        "mkdir -p bin && printf '#!/bin/sh\\necho pwned > /dev/shm/pwned-by-pid-1\\nexec /bin/sleep 1000\\n' > bin/sleep && \
         chmod 755 bin bin/sleep && /bin/sleep 2.5",
    );
    plant
        .env
        .insert("PATH".into(), "/workspace/bin:/usr/bin:/bin".into());
    let first = slot.sandbox.run(&plant, &NeverCancelled).await.unwrap();
    assert_eq!(first.exit_code, Some(0), "{first:?}");
    // PID 1 checks every second: give it two more between the runs.
    std::thread::sleep(Duration::from_millis(2500));
    let mut look = slot.request(&format!("ls -a /dev/shm /tmp; {PS}"));
    look.env = plant.env.clone();
    let second = slot.sandbox.run(&look, &NeverCancelled).await.unwrap();
    assert_eq!(id(&second), id(&first), "the kept container was not reused");
    assert!(!second.stdout.contains("pwned"), "{}", second.stdout);
    assert_eq!(procs(&second), Vec::<&str>::new(), "{}", second.stdout);
}

// A run whose user is PID 1's after all (here an image whose user is a name that its own
// `/etc/passwd` maps to PID 1's uid, 65534, which the choice of PID 1's user cannot see) could
// signal and trace PID 1: the container is never kept for the next run.
#[tokio::test]
async fn a_run_as_pid_1s_user_never_gets_its_container_kept() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let image = "nuvira-host:same-uid-test";
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // The engine finds the user in the image's own /etc/passwd (the host's /etc is mounted
    // over it when the container runs).
    let etc = tempfile::tempdir().unwrap();
    std::fs::create_dir(etc.path().join("etc")).unwrap();
    std::fs::write(
        etc.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nsameasnobody:x:65534:65534::/tmp:/bin/sh\n",
    )
    .unwrap();
    let from = docker(&["create", HOST, "/bin/true"]);
    docker(&[
        "cp",
        &format!("{}/etc", etc.path().display()),
        &format!("{from}:/"),
    ]);
    docker(&["commit", "--change", "USER sameasnobody", &from, image]);
    docker(&["rm", "-f", &from]);
    let mut req = slot.request("id -u");
    req.image = Some(image.into());
    let first = slot.sandbox.run(&req, &NeverCancelled).await;
    let kept = slot.kept().await;
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", image])
        .output();
    let first = first.unwrap();
    assert_eq!(first.stdout.trim(), "65534", "{first:?}");
    assert_eq!(
        kept.len(),
        0,
        "a container whose PID 1 the run could trace was kept: {:?}",
        first.info.limits
    );
}

/// A run that puts a `find` of its own first on the request's `PATH`: it runs the real one,
/// then takes `hidden.txt` out of the listings the wrapper sends, so that, were the wrapper to
/// run it, the file the run made would be neither pruned nor seen, and would reach the next
/// run.
const PLANT_FIND: &str = "mkdir -p bin && printf '#!/bin/sh\\n/usr/bin/find \"$@\"; s=$?\\nfor f in /workspace/.nuvira/all /workspace/.nuvira/newer; do [ -f \"$f\" ] && sed -z -i /hidden/d \"$f\"; done\\nexit $s\\n' > bin/find && \
     chmod 755 bin bin/find && echo x > hidden.txt && echo \"PATH=$PATH\"";

async fn planted_find_never_hides_a_file(slot: &Slot) {
    let path = "/workspace/bin:/usr/bin:/bin";
    let mut plant = slot.request(PLANT_FIND);
    plant.env.insert("PATH".into(), path.into());
    let first = slot.sandbox.run(&plant, &NeverCancelled).await.unwrap();
    assert_eq!(first.exit_code, Some(0), "{first:?}");
    // The command itself runs with the request's `PATH`.
    assert_eq!(first.stdout.trim(), format!("PATH={path}"), "{first:?}");
    let mut look = slot.request("ls -A");
    look.env = plant.env.clone();
    let second = slot.sandbox.run(&look, &NeverCancelled).await.unwrap();
    assert_eq!(second.stdout.trim(), "input.txt", "{second:?}");
    // Undone by the prune, not by a volume made again (which a wrapper that lists nothing
    // would also get).
    kept_volume(&second, 2);
}

/// The run's workspace volume was kept, and `pruned` entries the last run made removed.
fn kept_volume(o: &SandboxOutcome, pruned: usize) {
    let copy = o.info.workspace_copy.clone().unwrap_or_default();
    assert!(
        copy.starts_with("uploaded: 0 changed")
            && copy.contains(&format!(", {pruned} left by the last run removed")),
        "{copy}"
    );
}

// Before: the wrapper looked up its own `find`, `rm`, `cat`, `stat` on the request's `PATH`,
// after the run's processes were killed: a run's own `find` on it wrote the listing.
#[tokio::test]
async fn the_wrappers_own_tools_are_never_ones_a_run_put_on_path() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    planted_find_never_hides_a_file(&slot).await;
}

#[tokio::test]
async fn the_wrappers_own_tools_are_never_ones_a_run_put_on_path_in_a_fresh_container() {
    let Some(mut slot) = Slot::new().await else {
        return;
    };
    slot.sandbox = slot.sandbox.clone().with_reuse(false);
    planted_find_never_hides_a_file(&slot).await;
}

// Before: in a fresh container (reuse off) the wrapper listed `/workspace` while processes the
// command left were still running, so a file one of them made after the listing, before the
// container stopped, was neither pruned nor seen: the next run had it.
#[tokio::test]
async fn a_process_a_run_leaves_in_a_fresh_container_writes_nothing_the_next_run_sees() {
    let Some(mut slot) = Slot::new().await else {
        return;
    };
    slot.sandbox = slot.sandbox.clone().with_reuse(false);
    let leave = "( i=0; while [ $i -lt 200000 ]; do i=$((i+1)); : > late-$i; done ) > /dev/null 2>&1 & \
                 while ! [ -e late-50 ]; do :; done; echo started";
    for round in 0..3 {
        let left = slot.run(leave).await;
        assert_eq!(left.stdout.trim(), "started", "round {round}: {left:?}");
        let next = slot.run("ls -A | grep -c late- || true").await;
        assert_eq!(next.stdout.trim(), "0", "round {round}: {next:?}");
        // Pruned (at least the 50 the command waited for), the volume kept.
        let copy = next.info.workspace_copy.clone().unwrap_or_default();
        let pruned: usize = copy
            .split(", ")
            .find_map(|part| part.strip_suffix(" left by the last run removed"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            copy.starts_with("uploaded: 0 changed") && pruned >= 50,
            "round {round}: {copy}"
        );
    }
}

/// A run's `chmod` of an uploaded folder of its workspace volume never reaches the next run:
/// the wrapper's listing gives each folder it touched with its mode, and one whose mode is not
/// the uploaded one has the volume made again; a run that only makes a file in it keeps the
/// volume. `upload`: the engine's archive upload only (a remote engine's way).
async fn chmod_of_an_uploaded_folder_never_reaches_the_next_run(upload: bool) {
    let Some(mut slot) = Slot::new().await else {
        return;
    };
    if upload {
        slot.sandbox = slot.sandbox.clone().with_direct_write(false);
    }
    let p = slot.project.path();
    std::fs::create_dir(p.join("sub")).unwrap();
    set_mode(&p.join("sub"), 0o755);
    std::fs::write(p.join("sub/f.txt"), "f").unwrap();
    let show = "stat -c '%a' sub; chmod 0700 sub";
    let first = slot.run(show).await;
    assert_eq!(first.stdout.trim(), "755", "{first:?}");
    let second = slot.run(show).await;
    assert_eq!(second.stdout.trim(), "755", "{second:?}");
    let copy = second.info.workspace_copy.unwrap_or_default();
    assert!(copy.contains("into a new workspace volume"), "{copy}");
    if upload {
        assert!(!copy.contains("written into the volume"), "{copy}");
    }
    // A run that makes a file in the folder (its ctime changes) but leaves its mode alone
    // keeps the volume; the file is pruned.
    let third = slot.run("stat -c '%a' sub; echo n > sub/new.txt").await;
    let fourth = slot.run("stat -c '%a' sub; ls sub").await;
    assert_eq!(third.stdout.trim(), "755", "{third:?}");
    assert_eq!(fourth.stdout, "755\nf.txt\n", "{fourth:?}");
    let copy = fourth.info.workspace_copy.unwrap_or_default();
    assert!(copy.contains("0 changed"), "{copy}");
    assert!(copy.contains("1 left by the last run removed"), "{copy}");
}

#[tokio::test]
async fn a_runs_chmod_of_an_uploaded_folder_never_reaches_the_next_run() {
    chmod_of_an_uploaded_folder_never_reaches_the_next_run(false).await;
}

// Before: seen only in the volume's folder on this machine, after a direct write.
#[tokio::test]
async fn a_runs_chmod_of_an_uploaded_folder_never_reaches_the_next_run_through_the_upload() {
    chmod_of_an_uploaded_folder_never_reaches_the_next_run(true).await;
}

/// A shared object that, loaded into any program, leaves `target/loaded-<comm>-<uid>` in the
/// workspace (a kept build folder, so the next run sees it), compiled here.
fn preload_marker(into: &std::path::Path) {
    let src = into.join("marker.c");
    std::fs::write(
        &src,
        r#"#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char comm[64] = {0}, path[200];
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, sizeof comm - 1);
        close(fd);
        if (n > 0 && comm[n - 1] == '\n') comm[n - 1] = 0;
    }
    mkdir("/workspace/target", 0777);
    chmod("/workspace/target", 0777);
    snprintf(path, sizeof path, "/workspace/target/loaded-%s-%d", comm, (int)getuid());
    close(open(path, O_WRONLY | O_CREAT, 0666));
}
"#,
    )
    .unwrap();
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(into.join("marker.so"))
        .arg(&src)
        .output()
        .expect("cc, to build the test's shared object");
    assert!(out.status.success(), "cc: {out:?}");
    std::fs::remove_file(src).unwrap();
}

async fn preload_reaches_the_command_only(slot: &Slot, keeper_runs: bool) {
    preload_marker(slot.project.path());
    let mut first = slot.request("echo \"$LD_PRELOAD\"");
    first
        .env
        .insert("LD_PRELOAD".into(), "/workspace/marker.so".into());
    let first = slot.sandbox.run(&first, &NeverCancelled).await.unwrap();
    assert_eq!(first.stdout.trim(), "/workspace/marker.so", "{first:?}");
    if keeper_runs {
        // PID 1 runs its `sleep` every second: two of them, were it to load the object.
        std::thread::sleep(Duration::from_millis(2500));
    }
    let second = slot.run("ls target").await;
    // The command's own `sh` loaded it; nothing of the wrapper's or PID 1's did.
    assert_eq!(second.stdout, "loaded-sh-0\n", "{second:?}");
}

// Before: the request's `LD_PRELOAD` was the container's, so a run's object was loaded into
// the wrapper's tools after the kill (and into the kept container's PID 1 every second, as
// PID 1's user).
#[tokio::test]
async fn a_preload_of_the_request_reaches_the_command_alone() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    preload_reaches_the_command_only(&slot, true).await;
}

#[tokio::test]
async fn a_preload_of_the_request_reaches_the_command_alone_in_a_fresh_container() {
    let Some(mut slot) = Slot::new().await else {
        return;
    };
    slot.sandbox = slot.sandbox.clone().with_reuse(false);
    preload_reaches_the_command_only(&slot, false).await;
}

// A link of the workspace the user points elsewhere between runs is written into the kept
// volume as a link (the write replaces the old link, never follows it).
#[tokio::test]
async fn a_link_of_the_workspace_pointed_elsewhere_is_the_new_link_in_the_next_run() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    let p = slot.project.path();
    std::fs::write(p.join("a.txt"), "a").unwrap();
    std::fs::write(p.join("b.txt"), "b").unwrap();
    std::os::unix::fs::symlink("a.txt", p.join("l")).unwrap();
    let first = slot.run("cat l").await;
    assert_eq!(first.stdout, "a", "{first:?}");
    std::fs::remove_file(p.join("l")).unwrap();
    std::os::unix::fs::symlink("b.txt", p.join("l")).unwrap();
    let second = slot.run("readlink l; cat l a.txt").await;
    assert_eq!(second.stdout, "b.txt\nba", "{second:?}");
    let copy = second.info.workspace_copy.unwrap_or_default();
    assert!(copy.starts_with("uploaded: 1 changed"), "{copy}");
    if engine_is_local_and_root() {
        assert!(copy.contains("written into the volume"), "{copy}");
    }
}

/// A run that rewrites an uploaded file (as a build that regenerates a committed file, or a
/// test that rewrites its report), deletes one, makes one a link out of the volume and one link
/// a file: the next run has the workspace's back, in the same container and volume (uploaded
/// again, not made again). `upload`: the engine's archive upload only.
async fn uploaded_files_a_run_changed_are_uploaded_again(upload: bool) {
    let Some(mut slot) = Slot::new().await else {
        return;
    };
    if upload {
        slot.sandbox = slot.sandbox.clone().with_direct_write(false);
    }
    let p = slot.project.path();
    std::fs::create_dir(p.join("gen")).unwrap();
    std::fs::write(p.join("gen/out.txt"), "generated\n").unwrap();
    std::fs::write(p.join("gone.txt"), "gone\n").unwrap();
    std::fs::write(p.join("linked.txt"), "linked\n").unwrap();
    std::os::unix::fs::symlink("input.txt", p.join("l")).unwrap();
    let show = "cat gen/out.txt gone.txt linked.txt; readlink l";
    // A link to a file of this machine: a write that followed it would change the file.
    let victim = tempfile::tempdir().unwrap();
    let victim_file = victim.path().join("victim.txt");
    std::fs::write(&victim_file, "victim\n").unwrap();
    let spoil = format!(
        "echo rewritten > gen/out.txt; rm gone.txt; rm linked.txt; ln -s {} linked.txt; \
         rm l; echo file > l",
        victim_file.display()
    );
    let first = slot.run(&format!("{show}; {spoil}")).await;
    let want = "generated\ngone\nlinked\ninput.txt\n";
    assert_eq!(first.stdout, want, "{first:?}");
    for round in 0..3 {
        let next = slot.run(&format!("{show}; {spoil}")).await;
        assert_eq!(next.stdout, want, "round {round}: {next:?}");
        assert_eq!(
            id(&next),
            id(&first),
            "round {round}: the container was replaced"
        );
        let copy = next.info.workspace_copy.clone().unwrap_or_default();
        assert!(
            copy.starts_with("uploaded: 4 changed")
                && copy.contains("4 the last run changed or deleted uploaded again"),
            "round {round}: {copy}"
        );
        assert_eq!(
            copy.contains("written into the volume"),
            !upload,
            "round {round}: {copy}"
        );
        assert_eq!(std::fs::read_to_string(&victim_file).unwrap(), "victim\n");
    }
    // The workspace itself now drops one the run had changed and makes another a folder: the
    // volume is made again (before: the dropped one stayed in it, as the run had left it).
    std::fs::remove_file(p.join("gen/out.txt")).unwrap();
    std::fs::remove_file(p.join("linked.txt")).unwrap();
    std::fs::create_dir(p.join("linked.txt")).unwrap();
    let last = slot
        .run("test ! -e gen/out.txt && test -d linked.txt && echo ok")
        .await;
    assert_eq!(last.stdout, "ok\n", "{last:?}");
    let copy = last.info.workspace_copy.clone().unwrap_or_default();
    assert!(copy.contains("into a new workspace volume"), "{copy}");
}

#[tokio::test]
async fn uploaded_files_a_run_changed_are_uploaded_again_into_the_kept_volume() {
    uploaded_files_a_run_changed_are_uploaded_again(false).await;
}

#[tokio::test]
async fn uploaded_files_a_run_changed_are_uploaded_again_through_the_engines_upload() {
    uploaded_files_a_run_changed_are_uploaded_again(true).await;
}

/// A host folder mounted read-write in `/tmp` or `/dev/shm`: a kept container's cleanup
/// between runs empties those, so such a run's container is never kept, and nothing in the
/// host folder is removed or has its mode changed, over several runs.
#[tokio::test]
async fn a_host_folder_mounted_in_tmp_or_dev_shm_is_never_emptied() {
    let Some(slot) = Slot::new().await else {
        return;
    };
    for (target, at) in [
        ("/tmp/victim", "/tmp/victim"),
        ("/dev/shm/victim", "/dev/shm/victim"),
        ("/tmp/./v2", "/tmp/v2"),
    ] {
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("keep.txt"), "precious").unwrap();
        std::fs::create_dir(host.path().join("sub")).unwrap();
        std::fs::write(host.path().join("sub/deep.txt"), "deep").unwrap();
        set_mode(&host.path().join("sub"), 0o555);
        let mut ids = Vec::new();
        for i in 0..3 {
            let mut req = slot.request(&format!("echo {i} > {at}/run{i}.txt && ls {at}"));
            req.mounts.push(nuvira_api::test::Mount {
                host: host.path().to_path_buf(),
                container: target.into(),
                read_only: false,
            });
            let o = slot.sandbox.run(&req, &NeverCancelled).await.unwrap();
            assert_eq!(o.exit_code, Some(0), "{at}: {}{}", o.stdout, o.stderr);
            assert!(o.stdout.contains("keep.txt"), "{at}: {}", o.stdout);
            let limits = o.info.limits.clone().unwrap_or_default();
            assert!(limits.contains("not kept"), "{at}: {limits}");
            ids.push(id(&o));
            // What the runs wrote stays, with what was there.
            for j in 0..=i {
                assert!(
                    host.path().join(format!("run{j}.txt")).is_file(),
                    "{at}: run{j}"
                );
            }
            assert_eq!(
                std::fs::read_to_string(host.path().join("keep.txt")).unwrap(),
                "precious"
            );
            assert_eq!(
                std::fs::read_to_string(host.path().join("sub/deep.txt")).unwrap(),
                "deep"
            );
            assert_eq!(mode_of(&host.path().join("sub")) & 0o777, 0o555, "{at}");
        }
        ids.dedup();
        assert_eq!(ids.len(), 3, "{at}: a container per run: {ids:?}");
        assert!(slot.kept().await.is_empty(), "{at}: nothing kept");
        set_mode(&host.path().join("sub"), 0o755);
    }
    // A host folder at /dev/shm itself, where the wrapper of a tracked run keeps its marks:
    // such a run is not tracked, and files of those names are left as they were.
    let host = tempfile::tempdir().unwrap();
    for name in [".nuvira-mark", ".nuvira-tick"] {
        std::fs::write(host.path().join(name), "precious").unwrap();
    }
    for _ in 0..2 {
        let mut req = slot.request("ls -a /dev/shm");
        req.mounts.push(nuvira_api::test::Mount {
            host: host.path().to_path_buf(),
            container: "/dev/shm/".into(),
            read_only: false,
        });
        let o = slot.sandbox.run(&req, &NeverCancelled).await.unwrap();
        assert_eq!(o.exit_code, Some(0), "{}{}", o.stdout, o.stderr);
        assert!(o.stdout.contains(".nuvira-mark"), "{}", o.stdout);
        for name in [".nuvira-mark", ".nuvira-tick"] {
            assert_eq!(
                std::fs::read_to_string(host.path().join(name)).unwrap(),
                "precious"
            );
        }
    }
}
