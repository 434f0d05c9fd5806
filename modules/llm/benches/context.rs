//! `context::reduce` packing a 5 MB inspection into a 32k-token budget, against the baseline
//! of concatenating the same file contents into one string.
//!
//! `cargo bench -p nuvira-llm --bench context -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, criterion_group, criterion_main};
use nuvira_api::Artifact;
use std::hint::black_box;

/// About 5 MB of Rust-like source in 1,000 files of ~5 KB, with scores in a scrambled order.
fn inspection() -> Vec<Artifact> {
    (0..1000u64)
        .map(|i| {
            let mut a = Artifact::default();
            a.path = format!("src/module_{i}/mod.rs");
            a.score = ((i * 7919) % 1000) as f64 / 1000.0;
            let mut text = String::with_capacity(5300);
            let mut line = 0;
            while text.len() < 5200 {
                text.push_str(&format!(
                    "    let value_{line} = compute_{i}(input, {line}); // step {line} of module {i}\n"
                ));
                line += 1;
            }
            a.size = text.len() as u64;
            a.content = Some(text);
            a
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let arts = inspection();
    let total: usize = arts
        .iter()
        .filter_map(|a| a.content.as_ref())
        .map(String::len)
        .sum();
    assert!(total >= 5_000_000, "{total}");
    let mut g = c.benchmark_group("context_5MB_into_32k_tokens");
    g.bench_function("baseline_concatenate_all", |b| {
        b.iter(|| {
            let mut s = String::new();
            for a in black_box(&arts) {
                if let Some(t) = &a.content {
                    s.push_str(t);
                }
            }
            black_box(s)
        })
    });
    g.bench_function("reduce", |b| {
        b.iter(|| black_box(nuvira_llm::context::reduce(black_box(&arts), 32_000)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
