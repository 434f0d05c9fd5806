//! Review mode's inspect part on a 10,000-file repository with a 20-file diff: proportional to
//! the diff, not the repository.
//!
//! In the same run, on repositories of 1,000 and 10,000 files with the same 20 files changed
//! on a branch:
//! - `git diff --name-only main...HEAD` (the `git` binary; the baseline: what any review must
//!   at least do);
//! - `Repo::changed_names` (the same list through libgit2, no process);
//! - `review inspect`: what `nuvira review` does before its checks: the diffs and added lines
//!   since the merge base (`Repo::changed_since`), the `.gitattributes` generated filter, and
//!   inspect restricted to the changed files;
//! - `inspect whole repo`: inspect over every file, for scale.
//!
//! `cargo bench --bench review`
#![allow(
    clippy::expect_used,
    reason = "a benchmark whose setup fails must stop loudly"
)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `files` source files in 100 folders on `main`; branch `feature` changes 20 of them.
fn repo(files: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    for i in 0..files {
        let folder = root.join(format!("pkg{:03}", i % 100));
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(
            folder.join(format!("mod{i:05}.rs")),
            format!(
                "//! Module {i}.\n\npub fn value_{i}() -> u64 {{\n    {i}\n}}\n\npub fn widget_{i}(x: u64) -> u64 {{\n    x + value_{i}()\n}}\n"
            ),
        )
        .expect("file");
    }
    std::fs::write(root.join(".gitattributes"), "gen/** linguist-generated\n").expect("attrs");
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "base"]);
    git(root, &["checkout", "-q", "-b", "feature"]);
    for k in 0..20 {
        let i = k * (files / 20);
        let path = root.join(format!("pkg{:03}/mod{i:05}.rs", i % 100));
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str(&format!(
            "\npub fn review_widget_{i}() -> u64 {{\n    widget_{i}(1)\n}}\n"
        ));
        std::fs::write(&path, text).expect("write");
    }
    git(root, &["commit", "-q", "-am", "change 20 files"]);
    dir
}

fn review_inspect(root: &Path) -> usize {
    let repo = nuvira::git::Repo::open(root).expect("repo");
    let changed = repo.changed_since("main").expect("diff");
    let names: Vec<String> = changed.iter().map(|c| c.path.clone()).collect();
    let generated = repo.generated(&names);
    let paths: Vec<String> = names
        .into_iter()
        .filter(|n| !generated.contains(n))
        .collect();
    let options = nuvira_inspect::InspectOptions::default().with_paths(paths);
    let result = nuvira_inspect::inspect(
        root,
        "review widget",
        &options,
        &nuvira_inspect::Hooks::none(),
    )
    .expect("inspect");
    result.artifacts.len() + changed.iter().map(|c| c.added_lines.len()).sum::<usize>()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("review");
    group.sample_size(10);
    for files in [1_000usize, 10_000] {
        let dir = repo(files);
        let root = dir.path();
        assert_eq!(
            git(root, &["diff", "--name-only", "main...HEAD"])
                .lines()
                .count(),
            20
        );
        group.bench_with_input(
            BenchmarkId::new("git diff --name-only", files),
            &files,
            |b, _| {
                b.iter(|| black_box(git(root, &["diff", "--name-only", "main...HEAD"]).len()));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("Repo::changed_names", files),
            &files,
            |b, _| {
                b.iter(|| {
                    let repo = nuvira::git::Repo::open(root).expect("repo");
                    black_box(repo.changed_names("main").expect("names").len())
                });
            },
        );
        group.bench_with_input(BenchmarkId::new("review inspect", files), &files, |b, _| {
            b.iter(|| black_box(review_inspect(root)));
        });
        group.bench_with_input(
            BenchmarkId::new("inspect whole repo", files),
            &files,
            |b, _| {
                b.iter(|| {
                    let r = nuvira_inspect::inspect(
                        root,
                        "review widget",
                        &nuvira_inspect::InspectOptions::default(),
                        &nuvira_inspect::Hooks::none(),
                    )
                    .expect("inspect");
                    black_box(r.artifacts.len())
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
