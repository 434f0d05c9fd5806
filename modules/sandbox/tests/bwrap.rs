//! The bubblewrap sandbox on real commands: the escapes the Docker sandbox is tested against
//! (the network, writes outside the workspace, symbolic links out of it, host secrets) and the
//! toolchain it must still offer. Skipped (with the reason printed) where bubblewrap cannot
//! run, unless NUVIRA_REQUIRE_BWRAP=1.

use super::common::{bwrap, one_shot_server, sh};
use nuvira_api::{NetworkMode, NeverCancelled, Sandbox, SandboxRequest};
use std::path::{Path, PathBuf};

/// A folder in `$HOME` (outside the temporary folder, which bwrap replaces anyway), removed
/// when dropped.
fn home_dir() -> tempfile::TempDir {
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    tempfile::Builder::new()
        .prefix(".nuvira-bwrap-test-")
        .tempdir_in(home)
        .unwrap()
}

#[tokio::test]
async fn bwrap_blocks_the_network_that_host_networking_allows() {
    let Some(sandbox) = bwrap() else { return };
    let ws = tempfile::tempdir().unwrap();
    let (port, server) = one_shot_server().await;
    let script = format!(
        "import socket,sys\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\n    print('REACHED' if b'hello' in s.recv(100) else 'NO')\nexcept OSError as e:\n    print('BLOCKED', e)\n"
    );
    let req = SandboxRequest::new(ws.path(), vec!["python3".into(), "-c".into(), script]);
    let none = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(none.stdout.contains("BLOCKED"), "{none:?}");

    // The same call succeeds with the host's network: the check above is meaningful.
    let mut host_req = req.clone();
    host_req.network = NetworkMode::Host;
    let host = sandbox.run(&host_req, &NeverCancelled).await.unwrap();
    assert!(host.stdout.contains("REACHED"), "{host:?}");
    server.abort();
}

#[tokio::test]
async fn bwrap_writes_reach_only_the_copy_and_the_toolchain_is_read_only() {
    let Some(sandbox) = bwrap() else { return };
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("input.txt"), "from the host").unwrap();
    let outside = home_dir();
    let target = outside.path().join("written-from-the-sandbox");
    let script = format!(
        "cat input.txt; echo; echo x > here && echo COPY-OK; touch /tmp/t && echo TMP-OK; \
         touch \"$HOME/h\" && echo HOME-OK; touch /usr/nuvira-escape && echo USR-WRITABLE; \
         touch /etc/nuvira-escape && echo ETC-WRITABLE; echo x > '{}' && echo OUTSIDE-WRITABLE; \
         grep CapEff /proc/self/status",
        target.display()
    );
    let out = sandbox
        .run(&sh(ws.path(), &script), &NeverCancelled)
        .await
        .unwrap();
    let o = &out.stdout;
    assert!(o.contains("from the host"), "{out:?}");
    assert!(
        o.contains("COPY-OK") && o.contains("TMP-OK") && o.contains("HOME-OK"),
        "{out:?}"
    );
    for escape in ["USR-WRITABLE", "ETC-WRITABLE", "OUTSIDE-WRITABLE"] {
        assert!(!o.contains(escape), "{escape}: {out:?}");
    }
    assert!(o.contains("CapEff:\t0000000000000000"), "{o}");
    assert!(!target.exists(), "a file appeared outside the workspace");
    assert!(!Path::new("/usr/nuvira-escape").exists());
    assert!(!Path::new("/etc/nuvira-escape").exists());
    // Nothing the command wrote in the copy came back to the workspace.
    assert!(!ws.path().join("here").exists());
    assert_eq!(out.info.kind, "bwrap");
}

#[tokio::test]
async fn bwrap_hides_host_secrets_even_through_symlinks_in_the_workspace() {
    let Some(sandbox) = bwrap() else { return };
    let secrets = home_dir();
    let secret = secrets.path().join("id_rsa");
    std::fs::write(&secret, "PRIVATE-KEY-MATERIAL").unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&secret, ws.path().join("key")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", ws.path().join("shadow")).unwrap();
    std::os::unix::fs::symlink(secrets.path(), ws.path().join("dir")).unwrap();
    let script = format!(
        "cat key; cat shadow; ls dir; cat '{}'; cat /etc/shadow; ls -a \"$HOME\"; ls /etc/ssh; echo END",
        secret.display()
    );
    let out = sandbox
        .run(&sh(ws.path(), &script), &NeverCancelled)
        .await
        .unwrap();
    assert!(out.stdout.contains("END"), "{out:?}");
    assert!(!out.stdout.contains("PRIVATE-KEY-MATERIAL"), "{out:?}");
    assert!(!out.stdout.contains("id_rsa"), "{out:?}");
    assert!(
        !out.stdout.contains("root:"),
        "/etc/shadow was read: {out:?}"
    );
    assert!(
        !out.stdout.contains(".nuvira-bwrap-test-"),
        "the host's home was listed: {out:?}"
    );
}

#[tokio::test]
async fn bwrap_runs_the_host_toolchain_and_builds_a_crate_with_a_dependency_offline() {
    let Some(sandbox) = bwrap() else { return };
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
    let req = SandboxRequest::new(ws.path(), vec!["cargo".into(), "test".into()]);
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("test pid_is_positive ... ok"),
        "{}",
        out.stdout
    );
    // Paths in the output point into the copy, which the parsers strip.
    let workdir = out.workdir.unwrap();
    assert!(
        workdir.starts_with(std::env::temp_dir()),
        "{}",
        workdir.display()
    );
}

#[tokio::test]
async fn bwrap_binds_the_cache_folders_the_requests_env_points_tools_at() {
    let Some(sandbox) = bwrap() else { return };
    let ws = tempfile::tempdir().unwrap();
    let cache = home_dir();
    let mut req = sh(
        ws.path(),
        "echo warm > \"$CARGO_TARGET_DIR/marker\" && echo CACHE-OK",
    );
    req.env.insert(
        "CARGO_TARGET_DIR".into(),
        cache.path().display().to_string(),
    );
    let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
    assert!(out.stdout.contains("CACHE-OK"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(cache.path().join("marker")).unwrap(),
        "warm\n"
    );
}

/// Writes `dir/node_modules/.modules.yaml` recording `store` as pnpm's store.
fn record_pnpm_store(dir: &Path, store: &Path) {
    std::fs::create_dir_all(dir.join("node_modules")).unwrap();
    std::fs::write(dir.join("package.json"), "{}").unwrap();
    std::fs::write(
        dir.join("node_modules/.modules.yaml"),
        format!(
            "{{\"layoutVersion\": 5, \"storeDir\": \"{}\"}}",
            store.display()
        ),
    )
    .unwrap();
}

#[tokio::test]
async fn bwrap_binds_pnpms_recorded_store_read_only_and_no_other_folder_the_repo_names() {
    let Some(sandbox) = bwrap() else { return };
    let ws = tempfile::tempdir().unwrap();
    let outside = home_dir();
    let store = outside.path().join("pnpm/store/v11");
    std::fs::create_dir_all(store.join("files")).unwrap();
    std::fs::write(store.join("files/pkg"), "from the store").unwrap();
    // A folder of secrets whose name looks like a store version, but no pnpm store.
    let secret = outside.path().join("secret/v1");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("key"), "SECRET").unwrap();
    record_pnpm_store(ws.path(), &store);
    record_pnpm_store(&ws.path().join("pkg"), &secret);

    let s = store.display();
    let out = sandbox
        .run(
            &sh(
                ws.path(),
                &format!(
                    "echo \"store=$pnpm_config_store_dir npm=$npm_config_store_dir\"; cat {s}/files/pkg; echo; echo x > {s}/files/new && echo WROTE"
                ),
            ),
            &NeverCancelled,
        )
        .await
        .unwrap();
    let parent = store.parent().unwrap().display().to_string();
    assert!(
        out.stdout.contains(&format!("store={parent} npm={parent}")),
        "{out:?}"
    );
    assert!(out.stdout.contains("from the store"), "{out:?}");
    assert!(!out.stdout.contains("WROTE"), "{out:?}");
    assert!(!store.join("files/new").exists());

    let mut nested = sh(
        ws.path(),
        &format!("cat {}/key || echo UNSEEN", secret.display()),
    );
    nested.dir = PathBuf::from("pkg");
    let out = sandbox.run(&nested, &NeverCancelled).await.unwrap();
    assert!(!out.stdout.contains("SECRET"), "{out:?}");
    assert!(out.stdout.contains("UNSEEN"), "{out:?}");
}

// The host reads a run's reports after it: a report that is a link to a file the sandbox
// cannot see (in a folder of $HOME outside the copy) must not bring that file out.
#[test]
fn bwrap_collected_files_never_follow_a_link_out_of_the_copy() {
    let Some(sandbox) = bwrap() else { return };
    let outside = home_dir();
    std::fs::write(outside.path().join("secret.xml"), "HOST-SECRET").unwrap();
    // The sandbox itself cannot read it: collecting through the link would widen it.
    let ws = tempfile::tempdir().unwrap();
    let probe = format!(
        "cat '{}/secret.xml' || echo UNREADABLE",
        outside.path().display()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = rt
        .block_on(sandbox.run(&sh(ws.path(), &probe), &NeverCancelled))
        .unwrap();
    assert!(out.stdout.contains("UNREADABLE"), "{out:?}");
    super::local::check_hostile_reports(sandbox, outside.path(), None);
}
