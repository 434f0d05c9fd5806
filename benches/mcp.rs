//! `nuvira mcp`: the cost of MCP over stdio.
//!
//! - `preview_edits`: one `tools/call` round trip to a running `nuvira mcp` (the official Rust
//!   SDK as client, JSON over a pipe) against the same dry run called on the library directly,
//!   in the same run. The difference is the protocol's overhead per call (target ≤ 2 ms).
//! - `startup`: spawning `nuvira mcp` until `initialize` is answered (target < 50 ms), against
//!   spawning `nuvira --version` (process start and the binary's own start-up).
//!
//! `cargo bench --bench mcp`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use std::hint::black_box;
use std::path::Path;

const NUVIRA: &str = env!("CARGO_BIN_EXE_nuvira");

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    let body: String = (0..200)
        .map(|i| format!("pub fn f{i}() -> u32 {{ {i} }}\n"))
        .collect();
    std::fs::write(dir.path().join("src/lib.rs"), body).unwrap();
    dir
}

fn edits() -> serde_json::Value {
    json!([{ "strategy": "search-replace", "path": "src/lib.rs",
             "search": "pub fn f100() -> u32 { 100 }", "replace": "pub fn f100() -> u32 { 101 }" }])
}

fn server(repo: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(NUVIRA);
    cmd.args(["mcp", "--sandbox", "local", "--repo"]).arg(repo);
    cmd
}

fn preview(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = repo();
    let mut group = c.benchmark_group("mcp_preview_edits");
    group.sample_size(30);

    // The library call the tool makes.
    let ws = nuvira_workspace_open(dir.path());
    let editor = nuvira_edit::Editor::standard();
    let entries = nuvira_edit::parse_entries(edits().as_array().unwrap(), &editor).unwrap();
    group.bench_function("library", |b| {
        b.iter(|| {
            let p = editor.dry_run(&ws, &entries, &nuvira_edit::Emit::none());
            assert!(p.is_valid());
            black_box(p)
        });
    });

    // The same through `nuvira mcp` over stdio.
    let client = rt.block_on(async {
        let transport = rmcp::transport::TokioChildProcess::builder(server(dir.path()))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
            .0;
        ().serve(transport).await.unwrap()
    });
    let args = edits();
    group.bench_function("mcp_stdio", |b| {
        b.to_async(&rt).iter(|| async {
            let params = CallToolRequestParams::new("preview_edits").with_arguments(
                json!({ "edits": args.clone() })
                    .as_object()
                    .unwrap()
                    .clone(),
            );
            let r = client.call_tool(params).await.unwrap();
            assert_ne!(r.is_error, Some(true));
            black_box(r)
        });
    });
    group.finish();
    rt.block_on(async {
        let _ = client.cancel().await;
    });
}

fn nuvira_workspace_open(root: &Path) -> nuvira_edit::nuvira_workspace::Workspace {
    nuvira_edit::nuvira_workspace::Workspace::open(root).unwrap()
}

fn startup(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = repo();
    let mut group = c.benchmark_group("mcp_startup");
    group.sample_size(20);
    group.bench_function("nuvira_version", |b| {
        b.iter(|| {
            let out = std::process::Command::new(NUVIRA)
                .arg("--version")
                .output()
                .unwrap();
            assert!(out.status.success());
        });
    });
    group.bench_function("mcp_initialize", |b| {
        b.to_async(&rt).iter(|| async {
            let transport = rmcp::transport::TokioChildProcess::builder(server(dir.path()))
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
                .0;
            let client = ().serve(transport).await.unwrap();
            black_box(client.peer_info());
            let _ = client.cancel().await;
        });
    });
    group.finish();
}

criterion_group!(benches, preview, startup);
criterion_main!(benches);
