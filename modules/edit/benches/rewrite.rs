//! A batch of 60 whole-file rewrites of 200 KB text files (12 MB, every line changed), written
//! for real with `Editor::edit` (journal, durable writes, fsyncs), against the baseline of the
//! same run: `git diff --no-index` over the same old and new files plus writing the 60 new
//! files with an fsync each. Issue 17's target: ≤ 3× the baseline.
//!
//! The files are put back to their old content between iterations (not timed).
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a bench without its files cannot run"
)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use nuvira_api::EditEntry;
use nuvira_edit::{Editor, Emit};
use nuvira_workspace::Workspace;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const FILES: usize = 60;
const LINES: usize = 4_000;

/// ~200 KB of text: `LINES` lines of ~50 bytes, each naming its file, line and `tag`.
fn text(file: usize, tag: &str) -> String {
    (0..LINES)
        .map(|l| format!("{tag} file {file:03} line {l:05}: lorem ipsum dolor sit amet\n"))
        .collect()
}

fn write_all(dir: &Path, tag: &str) {
    for f in 0..FILES {
        std::fs::write(dir.join(format!("f{f:03}.txt")), text(f, tag)).unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let repo = tempfile::tempdir().expect("temporary folder");
    let old = tempfile::tempdir().expect("temporary folder");
    let new = tempfile::tempdir().expect("temporary folder");
    let out = tempfile::tempdir().expect("temporary folder");
    write_all(repo.path(), "old");
    write_all(old.path(), "old");
    write_all(new.path(), "new");
    let entries: Vec<EditEntry> = (0..FILES)
        .map(|f| EditEntry {
            strategy: "whole-file".into(),
            path: Some(format!("f{f:03}.txt")),
            content: Some(text(f, "new")),
            ..EditEntry::default()
        })
        .collect();
    let news: Vec<String> = (0..FILES).map(|f| text(f, "new")).collect();
    let ws = Workspace::open(repo.path()).expect("workspace");
    let editor = Editor::standard();

    let mut group = c.benchmark_group("rewrite_60x200k");
    group.sample_size(10);
    group.bench_function("git-diff-no-index+fsync", |b| {
        b.iter(|| {
            let st = Command::new("git")
                .args(["diff", "--no-index", "--no-color"])
                .arg(old.path())
                .arg(new.path())
                .stdout(std::process::Stdio::null())
                .status()
                .expect("git runs");
            assert_eq!(st.code(), Some(1), "git diff found the changes");
            for (f, content) in news.iter().enumerate() {
                let mut file =
                    std::fs::File::create(out.path().join(format!("f{f:03}.txt"))).unwrap();
                file.write_all(content.as_bytes()).unwrap();
                file.sync_all().unwrap();
            }
        });
    });
    let mut run = 0u64;
    group.bench_function("nuvira-edit", |b| {
        b.iter_batched(
            || write_all(repo.path(), "old"),
            |()| {
                run += 1;
                let r = editor
                    .edit(&ws, &entries, &format!("bench-{run}"), &Emit::none())
                    .expect("the batch applies");
                assert_eq!(r.applied_count, FILES);
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(10));
    targets = bench
}
criterion_main!(benches);
