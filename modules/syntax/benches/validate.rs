//! Syntax validation throughput against plain tree-sitter parsing of the same bytes.
//!
//! `parse` is the baseline: a parser created once, `parser.parse(text, None)`. `validate` is
//! what the edit module calls: `TreeSitterChecker::check` (cached per-thread parser, parse,
//! `has_error` gate, diagnostics). `introduced` is `introduced_errors` on an unchanged file.
//! `validate-broken` checks the same file with one deleted closing brace (the error path).
//! `parse-again` repeats the baseline last, to show drift under load. Target: validate ≤ 1.2 × parse.
#![allow(clippy::expect_used, reason = "a bench without its fixture cannot run")]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nuvira_api::SyntaxChecker;
use nuvira_syntax::{Language, TreeSitterChecker};
use std::hint::black_box;
use std::time::{Duration, Instant};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn bench(c: &mut Criterion) {
    let files = [
        ("rust_regex_automata_meta_regex.rs", Language::Rust),
        ("ts_zod_v3_types.ts", Language::TypeScript),
    ];
    let checker = TreeSitterChecker::new();
    for (name, lang) in files {
        let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("fixture");
        let broken = text.replacen("\n    }\n\n", "\n\n\n", 1);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(text.len() as u64));
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&lang.grammar().expect("grammar"))
            .expect("abi");
        group.bench_function("parse", |b| {
            b.iter(|| black_box(parser.parse(black_box(&text), None)))
        });
        group.bench_function("validate", |b| {
            b.iter(|| black_box(checker.check(name, black_box(&text))))
        });
        group.bench_function("introduced", |b| {
            b.iter(|| {
                black_box(nuvira_syntax::introduced_errors(
                    name,
                    &text,
                    black_box(&text),
                ))
            })
        });
        group.bench_function("validate-broken", |b| {
            b.iter(|| black_box(checker.check(name, black_box(&broken))))
        });
        // The baseline again: on a shared machine the first function of a group is often
        // measured under different load; report the two parse runs side by side.
        group.bench_function("parse-again", |b| {
            b.iter(|| black_box(parser.parse(black_box(&text), None)))
        });
        // Paired and interleaved: every iteration parses, then validates, the same bytes, so
        // load drift hits both alike. Criterion times the validate half; the ratio of the two
        // sums is printed (the number the 1.2x target is judged on).
        let (mut parse_total, mut validate_total) = (Duration::ZERO, Duration::ZERO);
        group.bench_function("validate-paired", |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    black_box(parser.parse(black_box(&text), None));
                    parse_total += t.elapsed();
                    let t = Instant::now();
                    black_box(checker.check(name, black_box(&text)));
                    spent += t.elapsed();
                }
                validate_total += spent;
                spent
            })
        });
        group.finish();
        println!(
            "{name}: paired validate/parse = {:.3} (parse {:.2?}, validate {:.2?} in total)",
            validate_total.as_secs_f64() / parse_total.as_secs_f64().max(f64::MIN_POSITIVE),
            parse_total,
            validate_total
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
