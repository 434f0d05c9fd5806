//! Writes the sample failing run as a JSONL event file plus a report in every format.
//!
//! `cargo run -p nuvira-report --example sample_report -- OUT_DIR`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

fn main() -> anyhow::Result<()> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "sample-report".into()),
    );
    std::fs::create_dir_all(&dir)?;
    let mut events = std::io::BufWriter::new(std::fs::File::create(dir.join("events.jsonl"))?);
    let mut builder = nuvira_report::ReportBuilder::new();
    for ev in nuvira_report::sample::failing_run() {
        serde_json::to_writer(&mut events, &ev)?;
        events.write_all(b"\n")?;
        builder.fold_owned(ev);
    }
    events.flush()?;
    let report = builder.finish();
    let written = nuvira_report::write_reports(&report, &nuvira_report::Format::ALL, &dir)?;
    for (format, path) in written {
        println!("{format:<9} {}", path.display());
    }
    Ok(())
}
