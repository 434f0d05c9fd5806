//! The walk alone against `rg --files` of the same tree, in the same run.
//!
//! Trees: `NUVIRA_BENCH_TREES` (colon-separated) or, by default, `~/.cargo/registry/src`,
//! `/usr/share` and `/usr/lib` (whichever exist). ripgrep runs with the same rules as our walk
//! (`--no-require-git --no-ignore-parent --no-ignore-global`); its output goes to a pipe that
//! the bench drains, which is what an inspection would have to do with it.
//!
//! ```text
//! cargo bench -p nuvira-inspect --bench walk -- --warm-up-time 1 --measurement-time 3
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use nuvira_inspect::walk::{WalkOptions, walk};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn trees() -> Vec<PathBuf> {
    if let Ok(list) = std::env::var("NUVIRA_BENCH_TREES") {
        return list.split(':').map(PathBuf::from).collect();
    }
    let mut out = Vec::new();
    if let Some(home) = std::env::var_os("HOME") {
        out.push(PathBuf::from(home).join(".cargo/registry/src"));
    }
    out.push("/usr/share".into());
    out.push("/usr/lib".into());
    out.into_iter()
        .filter(|p| p.is_dir())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

fn rg_files(root: &std::path::Path) -> usize {
    let out = Command::new("rg")
        .args([
            "--files",
            "--no-require-git",
            "--no-ignore-parent",
            "--no-ignore-global",
        ])
        .arg(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("rg is installed (apt-get install -y ripgrep)");
    out.stdout.iter().filter(|b| **b == b'\n').count()
}

fn bench(c: &mut Criterion) {
    let have_rg = Command::new("rg").arg("--version").output().is_ok();
    let mut group = c.benchmark_group("walk");
    group.sample_size(10);
    for root in trees() {
        let name = root.display().to_string();
        let ours = walk(&root, &WalkOptions::default(), &|| false).files.len();
        let theirs = if have_rg { rg_files(&root) } else { 0 };
        eprintln!("{name}: nuvira walk lists {ours} files, rg --files {theirs}");
        group.bench_with_input(BenchmarkId::new("nuvira", &name), &root, |b, root| {
            b.iter(|| walk(root, &WalkOptions::default(), &|| false).files.len());
        });
        if have_rg {
            group.bench_with_input(BenchmarkId::new("rg-files", &name), &root, |b, root| {
                b.iter(|| rg_files(root));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
