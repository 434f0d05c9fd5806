#![expect(
    clippy::expect_used,
    reason = "benchmark setup on a fixture file: failing loudly is the right thing"
)]
//! Parsing a 10,000-test JUnit report, against a baseline that only tokenizes the same bytes
//! with quick-xml (no results built). The report is generated from the structure of the real
//! nextest fixture (`tests/fixtures/nextest/basic-junit.junit.xml`): 100 suites of 100 test
//! cases, every tenth one failing with the fixture's panic text in `<failure>`,
//! `<system-out>` and `<system-err>`.
//!
//! Run: `cargo bench -p nuvira-runner --bench parse_junit -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nuvira_runner::detect::Framework;
use nuvira_runner::parse::{Ctx, junit};
use quick_xml::Reader;
use quick_xml::events::Event;
use std::hint::black_box;
use std::path::Path;

const TESTS: usize = 10_000;
const PER_SUITE: usize = 100;

/// Cuts the fixture into its failing-testcase and passing-testcase templates and repeats them.
fn generate() -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nextest/basic-junit.junit.xml");
    let fixture =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let start = fixture.find("<testcase").expect("a testcase");
    let end_fail = fixture[start..]
        .find("</testcase>")
        .expect("failing testcase end")
        + start
        + "</testcase>".len();
    let failing = &fixture[start..end_fail];
    let pass_start = fixture[end_fail..]
        .find("<testcase")
        .expect("passing testcase")
        + end_fail;
    let pass_end = fixture[pass_start..].find("/>").expect("empty testcase") + pass_start + 2;
    let passing = &fixture[pass_start..pass_end];
    let mut xml = String::with_capacity(TESTS * 700);
    xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!("<testsuites name=\"nextest-run\" tests=\"{TESTS}\" failures=\"{}\" errors=\"0\" time=\"1.0\">\n", TESTS / 10));
    for s in 0..TESTS / PER_SUITE {
        xml.push_str(&format!(
            "<testsuite name=\"suite_{s}\" tests=\"{PER_SUITE}\" failures=\"10\" errors=\"0\">\n"
        ));
        for t in 0..PER_SUITE {
            let template = if t % 10 == 0 { failing } else { passing };
            xml.push_str(&template.replace("tests::add_", &format!("tests::t{t}_")));
            xml.push('\n');
        }
        xml.push_str("</testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

fn tokenize_only(xml: &str) -> usize {
    let mut reader = Reader::from_str(xml);
    let mut events = 0;
    loop {
        match reader.read_event() {
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => events += 1,
        }
    }
    events
}

fn bench(c: &mut Criterion) {
    let xml = generate();
    let ctx = Ctx::new(Some(Path::new("/home/dev/projects/nextest/basic")));
    let check = junit::parse_with(&xml, &ctx, Some(Framework::Nextest)).expect("parses");
    assert_eq!((check.passed, check.failed), (9_000, 1_000));
    let mut group = c.benchmark_group("junit_10k_tests");
    group.throughput(Throughput::Elements(TESTS as u64));
    group.bench_function("baseline_quick_xml_tokenize", |b| {
        b.iter(|| tokenize_only(black_box(&xml)))
    });
    group.bench_function("parse_to_test_result", |b| {
        b.iter(|| junit::parse_with(black_box(&xml), &ctx, Some(Framework::Nextest)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
