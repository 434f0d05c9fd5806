//! Docker sandbox overhead: one `DockerSandbox::run` of a trivial command (create, upload the
//! workspace, attach, start, wait, inspect, collect, remove) against `docker run --rm` of the same
//! image and command, in the same run. Target: the sandbox within 1.2x of `docker run --rm`.
//! Also `DockerSandbox::connect` against one `/version` request (`docker_connect`).
//!
//! `cargo bench -p nuvira-sandbox --bench docker_overhead -- --warm-up-time 1 --measurement-time 5`
//! (needs an engine and nuvira-busybox:latest: `scripts/docker-up.sh`; skipped otherwise).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use nuvira_api::{NeverCancelled, Sandbox, SandboxRequest};
use nuvira_sandbox::DockerSandbox;

const IMAGE: &str = "nuvira-busybox:latest";

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sandbox = match rt.block_on(DockerSandbox::connect_checked(IMAGE)) {
        Ok((s, _)) => s,
        Err(e) => {
            eprintln!("SKIPPED docker_overhead: {e}");
            return;
        }
    };
    // A small workspace, as a test run would have.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    std::fs::write(ws.path().join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    let mut req = SandboxRequest::new(ws.path(), vec!["true".into()]);
    req.image = Some(IMAGE.into());

    let mut group = c.benchmark_group("docker_overhead");
    group.sample_size(20);
    group.bench_function("docker run --rm (baseline)", |b| {
        b.iter(|| {
            let status = std::process::Command::new("docker")
                .args(["run", "--rm", "--network", "none", IMAGE, "true"])
                .status()
                .unwrap();
            assert!(status.success());
        });
    });
    group.bench_function("DockerSandbox::run", |b| {
        b.to_async(&rt).iter(|| async {
            let out = sandbox.run(&req, &NeverCancelled).await.unwrap();
            assert_eq!(out.exit_code, Some(0));
        });
    });
    group.finish();

    // Connecting: `DockerSandbox::connect` (the API version agreed and the engine's version
    // read) against the least it could do, one `/version` request on a new client.
    let mut group = c.benchmark_group("docker_connect");
    group.sample_size(30);
    group.bench_function("one /version request (baseline)", |b| {
        b.to_async(&rt).iter(|| async {
            let docker = nuvira_sandbox::remote::EngineConfig::from_env()
                .client()
                .unwrap();
            assert!(docker.version().await.unwrap().version.is_some());
        });
    });
    group.bench_function("DockerSandbox::connect", |b| {
        b.to_async(&rt).iter(|| async {
            let (_, version) = DockerSandbox::connect().await.unwrap();
            assert!(!version.is_empty());
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
