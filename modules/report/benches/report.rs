//! Report generation from a 100,000-event JSONL file, against the baseline of just reading
//! and parsing every line into a `serde_json::Value`.
//!
//! `cargo bench -p nuvira-report --bench report -- --warm-up-time 1 --measurement-time 3`
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

const EVENTS: usize = 100_000;

fn write_events(path: &Path) -> u64 {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut n = 0;
    for ev in nuvira_report::sample::large_run(EVENTS) {
        serde_json::to_writer(&mut w, &ev).unwrap();
        w.write_all(b"\n").unwrap();
        n += 1;
    }
    w.flush().unwrap();
    n
}

fn baseline(path: &Path) -> usize {
    let mut r = BufReader::new(std::fs::File::open(path).unwrap());
    let mut line = String::new();
    let mut n = 0;
    while r.read_line(&mut line).unwrap() > 0 {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        n += usize::from(v.is_object());
        line.clear();
    }
    n
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let n = write_events(&path);
    let bytes = std::fs::metadata(&path).unwrap().len();
    eprintln!("{n} events, {bytes} bytes");
    let mut g = c.benchmark_group("report_100k_events");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function("baseline_parse_to_value", |b| b.iter(|| baseline(&path)));
    g.bench_function("build_report", |b| {
        b.iter(|| nuvira_report::read_jsonl_file(&path).unwrap())
    });
    let report = nuvira_report::read_jsonl_file(&path).unwrap();
    for f in [
        nuvira_report::Format::Json,
        nuvira_report::Format::Sarif,
        nuvira_report::Format::Html,
    ] {
        g.bench_function(format!("render_{f}"), |b| {
            b.iter(|| nuvira_report::render(&report, f).len())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
