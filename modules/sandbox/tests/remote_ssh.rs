//! The Docker sandbox through `DOCKER_HOST=ssh://USER@127.0.0.1:PORT`: a private sshd on
//! loopback (nuvira-test-support's `Sshd`: its own host key, one authorized client key, an ssh
//! configuration that never reads the real `~/.ssh`), whose `docker system dial-stdio` reaches
//! this machine's engine. A real job runs through it; a changed or unknown host key, a key the
//! server refuses, nothing listening, a listener that never speaks and a host without the
//! `docker` CLI are each one line naming
//! the host and what to do, within the connect timeout.
//!
//! Needs the Docker engine (NUVIRA_REQUIRE_DOCKER) and sshd + ssh-keygen
//! (NUVIRA_REQUIRE_SSHD); skipped with the reason otherwise.

use nuvira_api::SandboxError;
use nuvira_sandbox::DockerSandbox;
use nuvira_sandbox::remote::EngineConfig;
use nuvira_test_support::env::{Requirement, require};
use nuvira_test_support::sshd::{ClientKey, HostKey, Sshd, free_port};
use std::time::Duration;

const BUSYBOX: &str = "nuvira-busybox:latest";

/// The engine and a private sshd, or `None` after printing why the test is skipped.
async fn setup() -> Option<Sshd> {
    super::common::docker(BUSYBOX).await?;
    require(Requirement::Sshd, Sshd::start())
}

#[tokio::test]
async fn an_engine_over_ssh_runs_an_uploaded_workspace() {
    let Some(sshd) = setup().await else {
        return;
    };
    let host = sshd.docker_host();
    let config = EngineConfig::ssh(
        host.clone(),
        Some(sshd.client_config(HostKey::Right, ClientKey::Authorized)),
    );
    let (sandbox, version) = DockerSandbox::connect_to(&config)
        .await
        .unwrap_or_else(|e| panic!("{host}: {e}"));
    assert!(!version.is_empty());
    sandbox.check_image(BUSYBOX).await.unwrap();
    super::common::assert_runs_an_uploaded_workspace(&sandbox, BUSYBOX, &host).await;
}

/// The error connecting with `config`, bounded (a hang fails the test).
async fn refusal(config: EngineConfig) -> String {
    match tokio::time::timeout(Duration::from_secs(30), DockerSandbox::connect_to(&config)).await {
        Err(_) => panic!("connecting to {} hung", config.host),
        Ok(Ok(_)) => panic!("{} was accepted", config.host),
        Ok(Err(SandboxError::Unavailable(msg))) => msg,
        Ok(Err(other)) => panic!("{}: not unavailable: {other}", config.host),
    }
}

#[tokio::test]
async fn ssh_failures_are_one_line_naming_the_host_and_what_to_do() {
    let Some(sshd) = setup().await else {
        return;
    };
    let host = sshd.docker_host();
    let with = |h, k| EngineConfig::ssh(host.clone(), Some(sshd.client_config(h, k)));
    let right = sshd.client_config(HostKey::Right, ClientKey::Authorized);
    let closed = format!("ssh://root@127.0.0.1:{}", free_port());
    // A port that accepts connections and never says a word: ssh waits for its banner.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_host = format!(
        "ssh://root@127.0.0.1:{}",
        silent.local_addr().unwrap().port()
    );
    let no_docker = sshd.docker_host_without_docker();
    let (changed, unknown, refused, nothing, mute, missing) = tokio::join!(
        refusal(with(HostKey::Wrong, ClientKey::Authorized)),
        refusal(with(HostKey::Unknown, ClientKey::Authorized)),
        refusal(with(HostKey::Right, ClientKey::Other)),
        refusal(EngineConfig::ssh(closed.clone(), Some(right.clone()))),
        refusal(EngineConfig::ssh(silent_host.clone(), Some(right.clone()))),
        refusal(EngineConfig::ssh(no_docker.clone(), Some(right))),
    );
    let port = sshd.port().to_string();
    for (case, msg, addr, says) in [
        (
            "a changed host key",
            &changed,
            &host,
            format!("ssh-keygen -R '[127.0.0.1]:{port}'"),
        ),
        (
            "an unknown host key",
            &unknown,
            &host,
            "is not in known_hosts".to_owned(),
        ),
        (
            "a refused key",
            &refused,
            &host,
            "authorized_keys".to_owned(),
        ),
        (
            "nothing listening",
            &nothing,
            &closed,
            "(connection refused): start sshd there".to_owned(),
        ),
        (
            "a silent listener",
            &mute,
            &silent_host,
            "(timed out): check that `ssh -p".to_owned(),
        ),
        (
            "no docker CLI there",
            &missing,
            &no_docker,
            "has no docker CLI on the PATH".to_owned(),
        ),
    ] {
        assert!(msg.contains(addr.as_str()), "{case}: the host: {msg}");
        assert!(msg.contains(&says), "{case}: {says:?}: {msg}");
        assert!(!msg.contains('\n'), "{case}: one line: {msg}");
        assert!(
            !msg.contains("@@@") && !msg.contains("client error (Connect)"),
            "{case}: no dump: {msg}"
        );
        assert!(msg.len() < 700, "{case}: short: {msg}");
    }
    // A wrong host key is never accepted, not even "for now".
    assert!(changed.contains("intercepting"), "{changed}");
}
