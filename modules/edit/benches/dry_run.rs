//! `Editor::dry_run` of batches of file creations, 10,000 and 40,000 entries side by side.
//!
//! The figure to read is the ratio: a linear dry run takes about 4× as long for 4× the
//! entries. (Before the overlay kept an undo log, every entry copied the whole overlay, and
//! 40,000 creations took 115 s against 15.8 s for 20,000.) Throughput is in entries.
#![allow(
    clippy::expect_used,
    reason = "a bench without its workspace cannot run"
)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nuvira_api::EditEntry;
use nuvira_edit::{Editor, Emit};
use nuvira_workspace::Workspace;
use std::hint::black_box;
use std::time::Duration;

fn creations(n: usize) -> Vec<EditEntry> {
    (0..n)
        .map(|i| EditEntry {
            strategy: "whole-file".into(),
            path: Some(format!("d{}/f{i}.txt", i % 100)),
            content: Some(format!("file {i}\n")),
            ..EditEntry::default()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let ws = Workspace::open(dir.path()).expect("workspace");
    let editor = Editor::standard();
    let mut group = c.benchmark_group("dry_run_creations");
    group.sample_size(10);
    for n in [10_000, 40_000] {
        let entries = creations(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("{n}"), |b| {
            b.iter(|| {
                let preview = editor.dry_run(&ws, black_box(&entries), &Emit::none());
                assert!(preview.is_valid());
                preview.changes.len()
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
