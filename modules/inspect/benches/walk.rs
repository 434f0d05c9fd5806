//! The walk alone against `rg --files` of the same tree, in the same run.
//!
//! Trees: `NUVIRA_BENCH_TREES` (colon-separated) or, by default, `~/.cargo/registry/src`,
//! `/usr/share` and `/usr/lib` (whichever exist). ripgrep runs with the same rules as our walk
//! (`--no-require-git --no-ignore-parent --no-ignore-global`); its output goes to a pipe that
//! the bench drains, which is what an inspection would have to do with it.
//!
//! A second group times a whole inspection of the first tree against `rg -l -i` of the goal's
//! keywords (ripgrep reading every file too).
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

/// A whole inspection (walk, read, score, parse the matches) against ripgrep listing the files
/// that contain any of the same keywords: the cheapest baseline that also reads every file.
fn bench_inspect(c: &mut Criterion) {
    let have_rg = Command::new("rg").arg("--version").output().is_ok();
    let goal = "make the tokio runtime builder configurable";
    let keywords: Vec<String> = nuvira_inspect::keywords::keywords(goal, &[])
        .into_iter()
        .map(|k| k.text)
        .collect();
    let mut group = c.benchmark_group("inspect");
    group.sample_size(10);
    for root in trees().into_iter().take(1) {
        let name = root.display().to_string();
        let options = nuvira_inspect::InspectOptions::default();
        let hooks = nuvira_inspect::Hooks::none();
        group.bench_with_input(BenchmarkId::new("nuvira", &name), &root, |b, root| {
            b.iter(|| {
                nuvira_inspect::inspect(root, goal, &options, &hooks)
                    .unwrap()
                    .artifacts
                    .len()
            });
        });
        if have_rg {
            group.bench_with_input(
                BenchmarkId::new("rg-files-with-matches", &name),
                &root,
                |b, root| {
                    b.iter(|| {
                        let mut cmd = Command::new("rg");
                        cmd.args([
                            "-l",
                            "-i",
                            "-F",
                            "--max-filesize",
                            "100K",
                            "--no-require-git",
                            "--no-ignore-parent",
                            "--no-ignore-global",
                        ]);
                        for k in &keywords {
                            cmd.arg("-e").arg(k);
                        }
                        let out = cmd
                            .arg(root)
                            .stdin(Stdio::null())
                            .stderr(Stdio::null())
                            .output()
                            .unwrap();
                        out.stdout.len()
                    });
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench, bench_inspect);
criterion_main!(benches);
