//! The Docker sandbox against a real engine: limits, network, timeouts, OOM, hardening.
//! Skipped (with the reason printed) when no engine answers, unless NUVIRA_REQUIRE_DOCKER=1.

use super::common::{docker, one_shot_server};
use nuvira_api::{NetworkMode, NeverCancelled, Sandbox, SandboxError, SandboxRequest};
use nuvira_test_support::Trigger;
use std::path::Path;
use std::time::{Duration, Instant};

const BUSYBOX: &str = "nuvira-busybox:latest";

/// [`sh`](super::common::sh) in the busybox image.
fn sh(workspace: &Path, script: &str) -> SandboxRequest {
    let mut req = super::common::sh(workspace, script);
    req.image = Some(BUSYBOX.into());
    req
}

#[tokio::test]
async fn a_memory_hog_is_reported_as_oom_killed_with_exit_137() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(ws.path(), r#"x=a; while true; do x="$x$x"; done"#);
    req.limits.memory_bytes = 32 << 20;
    req.limits.timeout = Duration::from_secs(60);
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.oom_killed, "{out:?}");
    assert!(out.info.oom_killed);
    assert_eq!(out.exit_code, Some(137));
    assert!(!out.timed_out);
}

#[tokio::test]
async fn a_sleeping_command_is_killed_at_the_timeout() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(ws.path(), "echo started; sleep 600");
    req.limits.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(out.info.timed_out);
    assert_eq!(out.exit_code, None);
    assert!(!out.oom_killed);
    assert_eq!(out.stdout.trim(), "started");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn network_none_blocks_a_call_that_host_networking_allows() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let (port, server) = one_shot_server().await;
    let script = format!(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 127.0.0.1 {port} | grep -q hello && echo REACHED"
    );

    let none = sandbox
        .run(&sh(ws.path(), &script), &NeverCancelled)
        .await
        .unwrap();
    let interfaces: Vec<&str> = none
        .stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "REACHED")
        .collect();
    assert_eq!(interfaces, ["lo"], "{none:?}");
    assert!(!none.stdout.contains("REACHED"), "{none:?}");
    assert_ne!(none.exit_code, Some(0));

    // The same call succeeds with the host's network: the check above is meaningful.
    let mut req = sh(ws.path(), &script);
    req.network = NetworkMode::Host;
    let host = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(host.stdout.contains("REACHED"), "{host:?}");
    server.abort();
}

#[tokio::test]
async fn a_fork_bomb_is_stopped_by_the_pids_limit() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    // A recursive fork bomb, bounded at depth 9 (at most 1023 processes) so that it cannot hurt
    // the machine even if the limit were missing; under pids=32 it hits "can't fork".
    let mut req = sh(
        ws.path(),
        "bomb() { if [ $1 -gt 0 ]; then bomb $(($1-1)) & bomb $(($1-1)) & wait; fi; sleep 1; }; bomb 9; echo done",
    );
    req.limits.pids = 32;
    req.limits.timeout = Duration::from_secs(60);
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(!out.timed_out, "{out:?}");
    assert!(out.stderr.contains("can't fork"), "stderr: {}", out.stderr);
    // Inferred from the output: the engine does not report it.
    assert!(out.info.pids_limited, "{out:?}");
}

#[tokio::test]
async fn the_container_is_hardened_and_labelled() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("input.txt"), "from the host").unwrap();
    let mut req = sh(
        ws.path(),
        "grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; cat input.txt; echo; pwd; echo $GREETING; touch /root-write && echo ROOT-WRITABLE; touch /tmp/t && echo TMP-OK; touch here && echo WORKDIR-OK",
    );
    req.env.insert("GREETING".into(), "hi".into());
    req.read_only_root = true;
    let ids = std::sync::Mutex::new(Vec::new());
    let on_created = |info: &nuvira_api::SandboxInfo| {
        ids.lock().unwrap().push(info.container_id.clone().unwrap());
    };
    let out = sandbox
        .run_observed(&req, &NeverCancelled, &on_created)
        .await
        .unwrap();
    let o = &out.stdout;
    assert!(o.contains("CapEff:\t0000000000000000"), "{o}");
    assert!(o.contains("NoNewPrivs:\t1"), "{o}");
    assert!(o.contains("from the host"), "{o}");
    assert!(o.contains("/workspace\nhi\n"), "{o}");
    assert!(!o.contains("ROOT-WRITABLE"), "{o}");
    assert!(o.contains("TMP-OK") && o.contains("WORKDIR-OK"), "{o}");
    // The workspace was uploaded, not mounted: nothing came back to the host.
    assert!(!ws.path().join("here").exists());
    let id = ids.lock().unwrap().pop().unwrap();
    assert_eq!(out.info.container_id.as_deref(), Some(id.as_str()));
    assert_eq!(out.info.image.as_deref(), Some(BUSYBOX));
    // Removed after the run.
    let gone = sandbox
        .client()
        .inspect_container(
            &id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await;
    assert!(gone.is_err(), "container {id} still exists");
}

#[tokio::test]
async fn limits_reach_the_engine() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let mut req = sh(ws.path(), "sleep 30");
    req.limits.memory_bytes = 96 << 20;
    req.limits.cpus = 0.5;
    req.limits.pids = 40;
    let cancel = Trigger::default();
    let seen = std::sync::Mutex::new(None);
    // Inspect the container while it runs, then cancel.
    let client = sandbox.client().clone();
    let on_created = |info: &nuvira_api::SandboxInfo| {
        *seen.lock().unwrap() = info.container_id.clone();
    };
    let run = sandbox.run_observed(&req, &cancel, &on_created);
    tokio::pin!(run);
    let id = loop {
        tokio::select! {
            r = &mut run => panic!("finished early: {r:?}"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if let Some(id) = seen.lock().unwrap().clone() {
            break id;
        }
    };
    let inspect = client
        .inspect_container(
            &id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    let hc = inspect.host_config.unwrap();
    assert_eq!(hc.memory, Some(96 << 20));
    assert_eq!(hc.memory_swap, Some(96 << 20));
    assert_eq!(hc.nano_cpus, Some(500_000_000));
    assert_eq!(hc.pids_limit, Some(40));
    assert_eq!(hc.network_mode.as_deref(), Some("none"));
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_string()]));
    let labels = inspect.config.unwrap().labels.unwrap();
    assert_eq!(labels.get("nuvira.sandbox").map(String::as_str), Some("1"));
    cancel.fire();
    let r = run.await;
    assert!(matches!(r, Err(SandboxError::Cancelled)), "{r:?}");
    assert!(
        client
            .inspect_container(
                &id,
                None::<bollard::query_parameters::InspectContainerOptions>
            )
            .await
            .is_err(),
        "cancelled container {id} still exists"
    );
}

#[tokio::test]
async fn collected_files_come_back_from_the_container() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("pkg")).unwrap();
    let mut req = sh(ws.path(), "pwd; echo '<r/>' > report.xml; exit 4");
    req.dir = "pkg".into();
    req.collect = vec!["pkg/report.xml".into(), "pkg/none.xml".into()];
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_eq!(out.exit_code, Some(4));
    assert_eq!(out.stdout.trim(), "/workspace/pkg");
    assert_eq!(out.collected.get("pkg/report.xml").unwrap(), b"<r/>\n");
    assert!(!out.collected.contains_key("pkg/none.xml"));
}

// Links resolve inside the container (never to this machine's files), a FIFO is not a file,
// and a report over the cap is not collected.
#[test]
fn collected_files_from_the_container_are_regular_files_under_the_cap() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(sandbox) = rt.block_on(docker(BUSYBOX)) else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    super::local::check_hostile_reports(sandbox, outside.path(), Some(BUSYBOX));
}

/// Regression: the sandbox walk put `.nuvira/` (the journal's copies of original files) into
/// every container's tar.
#[tokio::test]
async fn the_journal_in_dot_nuvira_is_never_uploaded_into_the_container() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("src/a.rs", "fn a() {}"),
        (".nuvira/journal/0001/files/src/a.rs", "the original"),
        ("sub/.nuvira/last-run.json", "{}"),
        ("vendor/lib/.git/HEAD", "ref: refs/heads/main"),
        ("vendor/lib/lib.rs", "pub fn lib() {}"),
    ] {
        let p = ws.path().join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let out = sandbox
        .run(&sh(ws.path(), "find . | sort"), &NeverCancelled)
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let found: Vec<&str> = out.stdout.lines().collect();
    assert!(found.contains(&"./src/a.rs"), "{found:?}");
    assert!(found.contains(&"./vendor/lib/lib.rs"), "{found:?}");
    let leaked: Vec<&&str> = found
        .iter()
        .filter(|f| f.split('/').any(|c| c == ".nuvira" || c == ".git"))
        .collect();
    assert!(leaked.is_empty(), "uploaded into the container: {leaked:?}");
}

#[tokio::test]
async fn a_missing_image_is_unavailable_with_a_hint() {
    let Some(_) = docker(BUSYBOX).await else {
        return;
    };
    let err = nuvira_sandbox::DockerSandbox::connect_checked("nuvira-no-such-image:0")
        .await
        .unwrap_err();
    match err {
        SandboxError::Unavailable(msg) => {
            assert!(msg.contains("nuvira-no-such-image:0"), "{msg}");
            assert!(msg.contains("docker-up.sh"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_host_image_builds_a_crate_with_a_dependency_offline_on_a_read_only_root() {
    let Some(sandbox) = docker("nuvira-host:latest").await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    // libc is in this machine's cargo registry cache: Nuvira's own workspace depends on it.
    std::fs::write(
        ws.path().join("Cargo.toml"),
        "[package]\nname = \"depdemo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nlibc = \"0.2\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("src/lib.rs"),
        "#[test]\nfn pid_is_positive() {\n    assert!(unsafe { libc::getpid() } > 0);\n}\n",
    )
    .unwrap();
    let mut req = SandboxRequest::new(ws.path(), vec!["cargo".into(), "test".into()]);
    req.read_only_root = true;
    req.limits.memory_bytes = 1 << 30;
    req.limits.cpus = 2.0;
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("test pid_is_positive ... ok"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn a_panic_during_the_run_still_removes_the_container() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let req = sh(ws.path(), "sleep 60");
    let id = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (task_sandbox, task_id) = (sandbox.clone(), id.clone());
    let joined = tokio::spawn(async move {
        let on_created = |info: &nuvira_api::SandboxInfo| {
            *task_id.lock().unwrap() = info.container_id.clone();
            panic!("a bug in the caller's hook");
        };
        task_sandbox
            .run_observed(&req, &NeverCancelled, &on_created)
            .await
    })
    .await;
    assert!(joined.unwrap_err().is_panic());
    sandbox.wait_for_cleanup().await;
    let id = id
        .lock()
        .unwrap()
        .clone()
        .expect("the container was created");
    let gone = sandbox
        .client()
        .inspect_container(
            &id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await;
    assert!(gone.is_err(), "container {id} survived the panic");
}

#[tokio::test]
async fn a_large_workspace_arrives_intact_through_the_streamed_upload() {
    let Some(sandbox) = docker(BUSYBOX).await else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    // Larger than many upload chunks, and not a multiple of the chunk size.
    let data: Vec<u8> = (0..5_000_003u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::create_dir_all(ws.path().join("deep/er")).unwrap();
    std::fs::write(ws.path().join("deep/er/blob.bin"), &data).unwrap();
    for i in 0..200 {
        std::fs::write(ws.path().join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    let host_sum = std::process::Command::new("md5sum")
        .arg(ws.path().join("deep/er/blob.bin"))
        .output()
        .unwrap();
    let host_sum = String::from_utf8_lossy(&host_sum.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let out = sandbox
        .run(
            &sh(
                ws.path(),
                "md5sum deep/er/blob.bin; ls f*.txt | wc -l; cat f199.txt",
            ),
            &NeverCancelled,
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0].split_whitespace().next(), Some(host_sum.as_str()));
    assert_eq!(lines[1].trim(), "200");
    assert_eq!(lines[2], "199");
}
