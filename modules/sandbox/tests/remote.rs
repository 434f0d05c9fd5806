//! The Docker sandbox against a second, "remote" engine: a real `dockerd` of its own (its own
//! data root, exec root and pid file) listening on a loopback TCP port with `--tlsverify`, and
//! certificates this test makes with the openssl CLI. The workspace is uploaded (never
//! bind-mounted), so a run works there as on the local socket; wrong or missing certificates
//! are a clear error naming DOCKER_CERT_PATH.
//!
//! Needs root, `dockerd`, `docker` and `openssl` (CI has them); skipped with the reason
//! otherwise, unless NUVIRA_REQUIRE_DOCKER=1.

use nuvira_api::{NeverCancelled, Sandbox, SandboxError, SandboxRequest};
use nuvira_sandbox::DockerSandbox;
use nuvira_sandbox::remote::EngineConfig;
use nuvira_test_support::env::{Requirement, is_root, on_path, require};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BUSYBOX: &str = "nuvira-busybox:latest";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA in `dir` (`ca.pem`), and a client certificate it signed (`cert.pem`, `key.pem`); with
/// `server`, also a server certificate for 127.0.0.1 (`server-cert.pem`, `server-key.pem`).
fn make_certs(dir: &Path, server: bool) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca-key.pem",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=nuvira-test-ca",
        ],
    );
    let sign = |name: &str, cn: &str, ext: &str| {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}-key.pem"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-out",
                &format!("{name}-cert.pem"),
                "-days",
                "1",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    };
    if server {
        sign(
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
    }
    sign("client", "nuvira-client", "extendedKeyUsage=clientAuth\n");
    std::fs::rename(dir.join("client-cert.pem"), dir.join("cert.pem")).unwrap();
    std::fs::rename(dir.join("client-key.pem"), dir.join("key.pem")).unwrap();
}

/// A second dockerd, stopped (with its containerd) when dropped.
struct SecondEngine {
    child: std::process::Child,
    host: String,
    certs: tempfile::TempDir,
    _root: tempfile::TempDir,
}

impl SecondEngine {
    fn start() -> Result<Self, String> {
        if !is_root() {
            return Err("a second dockerd needs root".into());
        }
        for tool in ["dockerd", "docker", "openssl"] {
            if !on_path(tool) {
                return Err(format!("{tool} is not on PATH"));
            }
        }
        let certs = tempfile::tempdir().unwrap();
        make_certs(certs.path(), true);
        let root = tempfile::Builder::new()
            .prefix("nuvira-dockerd-")
            .tempdir()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("tcp://127.0.0.1:{port}");
        let r = root.path();
        let c = certs.path();
        let log = std::fs::File::create(r.join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--data-root")
            .arg(r.join("data"))
            .arg("--exec-root")
            .arg(r.join("exec"))
            .arg("--pidfile")
            .arg(r.join("dockerd.pid"))
            .args(["-H", &host, "--tlsverify"])
            .arg("--tlscacert")
            .arg(c.join("ca.pem"))
            .arg("--tlscert")
            .arg(c.join("server-cert.pem"))
            .arg("--tlskey")
            .arg(c.join("server-key.pem"))
            .args(["--bridge=none", "--iptables=false", "--ip-forward=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("start dockerd: {e}"))?;
        Ok(Self {
            child,
            host,
            certs,
            _root: root,
        })
    }

    fn config(&self) -> EngineConfig {
        EngineConfig::tls(self.host.clone(), self.certs.path())
    }

    /// The docker CLI pointed at this engine.
    fn cli(&self) -> Command {
        let c = self.certs.path();
        let mut cmd = Command::new("docker");
        cmd.arg("--tlsverify")
            .arg("--tlscacert")
            .arg(c.join("ca.pem"))
            .arg("--tlscert")
            .arg(c.join("cert.pem"))
            .arg("--tlskey")
            .arg(c.join("key.pem"))
            .args(["-H", &self.host]);
        cmd
    }

    /// Copies `image` from the local engine into this one.
    fn load(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let status = self
            .cli()
            .arg("load")
            .stdin(save.stdout.take().unwrap())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(
            save.wait().unwrap().success() && status.success(),
            "docker save | load of {image}"
        );
    }
}

impl Drop for SecondEngine {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_remote_engine_over_tls_runs_an_uploaded_workspace_and_refuses_wrong_certificates() {
    if super::common::docker(BUSYBOX).await.is_none() {
        return; // the image is copied from the local engine
    }
    let Some(engine) = require(Requirement::Docker, SecondEngine::start()) else {
        return;
    };
    // Wait (bounded) until the new engine answers over TLS.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (sandbox, version) = loop {
        match DockerSandbox::connect_to(&engine.config()).await {
            Ok(pair) => break pair,
            Err(e) if Instant::now() > deadline => panic!("the second engine never answered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert!(!version.is_empty());

    // It is the second engine: an empty one, without the image until it is loaded.
    let missing = sandbox.check_image(BUSYBOX).await.unwrap_err().to_string();
    assert!(missing.contains(BUSYBOX), "{missing}");
    engine.load(BUSYBOX);
    sandbox.check_image(BUSYBOX).await.unwrap();

    // A run: the workspace is uploaded, output and a collected file come back, limits hold.
    super::common::assert_runs_an_uploaded_workspace(&sandbox, BUSYBOX, &engine.host).await;
    let ws = tempfile::tempdir().unwrap();
    let mut hog = SandboxRequest::new(
        ws.path(),
        vec![
            "sh".into(),
            "-c".into(),
            r#"x=a; while true; do x="$x$x"; done"#.into(),
        ],
    );
    hog.image = Some(BUSYBOX.into());
    hog.limits.memory_bytes = 32 << 20;
    hog.limits.timeout = Duration::from_secs(60);
    let out = sandbox.run(&hog, &NeverCancelled).await.unwrap();
    assert!(out.oom_killed && out.exit_code == Some(137), "{out:?}");
    // More CPUs than the engine has (the default is this machine's cores, which a remote
    // engine may not have): the run gets the engine's, not a refused create.
    let mut wide = SandboxRequest::new(ws.path(), vec!["true".into()]);
    wide.image = Some(BUSYBOX.into());
    wide.limits.cpus = 4096.0;
    let out = sandbox.run(&wide, &NeverCancelled).await.unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let limits = out.info.limits.unwrap_or_default();
    assert!(
        !limits.contains("4096 CPUs") && limits.contains(" CPUs"),
        "{limits}"
    );

    // Nothing left behind on the remote engine.
    let left = engine
        .cli()
        .args(["ps", "-aq", "--filter", "label=nuvira.sandbox"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "containers left behind"
    );

    // A client certificate from another CA: refused, and the error names DOCKER_CERT_PATH.
    let other = tempfile::tempdir().unwrap();
    make_certs(other.path(), false);
    let wrong = EngineConfig::tls(engine.host.clone(), other.path());
    match DockerSandbox::connect_to(&wrong).await {
        Err(SandboxError::Unavailable(msg)) => {
            assert!(msg.contains("DOCKER_CERT_PATH"), "{msg}");
            assert!(msg.contains(&engine.host), "{msg}");
        }
        other => panic!(
            "wrong certificates were accepted: {:?}",
            other.map(|(_, v)| v)
        ),
    }
    // No certificates at all.
    let none = tempfile::tempdir().unwrap();
    match DockerSandbox::connect_to(&EngineConfig::tls(engine.host.clone(), none.path())).await {
        Err(SandboxError::Unavailable(msg)) => {
            assert!(
                msg.contains("DOCKER_CERT_PATH") && msg.contains("key.pem"),
                "{msg}"
            );
        }
        other => panic!("{:?}", other.map(|(_, v)| v)),
    }
    // Plain HTTP to the TLS port: no engine answers.
    let plain = EngineConfig::from_vars(|k| (k == "DOCKER_HOST").then(|| engine.host.clone()));
    assert!(matches!(
        DockerSandbox::connect_to(&plain).await,
        Err(SandboxError::Unavailable(_))
    ));
}
