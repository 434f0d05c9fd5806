//! Peak memory (VmHWM) of building a report from a 100,000-event JSONL file, against just
//! reading and parsing every line into a `serde_json::Value`. Each measurement runs in a fresh
//! process, since the high-water mark never goes down.
//!
//! `cargo run --release -p nuvira-report --example peak_rss`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::time::Instant;

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 {
        let path = std::path::Path::new(&args[2]);
        let before = vm_hwm_kib();
        let t = Instant::now();
        match args[1].as_str() {
            "baseline" => {
                let mut r = std::io::BufReader::new(std::fs::File::open(path)?);
                let mut line = String::new();
                let mut n = 0u64;
                while r.read_line(&mut line)? > 0 {
                    let v: serde_json::Value = serde_json::from_str(&line)?;
                    n += u64::from(v.is_object());
                    line.clear();
                }
                assert!(n > 0);
            }
            "events" => {
                let n = nuvira_report::EventReader::new(
                    std::io::BufReader::new(std::fs::File::open(path)?),
                    path,
                )
                .map(|e| e.map(|e| e.seq))
                .collect::<Result<Vec<_>, _>>()?
                .len();
                assert!(n > 0);
            }
            "report" => {
                let report = nuvira_report::read_jsonl_file(path)?;
                assert!(report.counts.steps > 0);
            }
            other => anyhow::bail!("unknown mode {other}"),
        }
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        println!(
            "{:<9} {ms:>8.1} ms  peak RSS {:>7} KiB (process start {before} KiB)",
            args[1],
            vm_hwm_kib()
        );
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("events.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut n = 0;
    for ev in nuvira_report::sample::large_run(100_000) {
        serde_json::to_writer(&mut w, &ev)?;
        w.write_all(b"\n")?;
        n += 1;
    }
    w.flush()?;
    drop(w);
    println!("{n} events, {} bytes", std::fs::metadata(&path)?.len());
    let me = std::env::current_exe()?;
    for mode in [
        "baseline", "events", "report", "baseline", "events", "report",
    ] {
        let status = std::process::Command::new(&me)
            .arg(mode)
            .arg(&path)
            .status()?;
        anyhow::ensure!(status.success(), "{mode} failed");
    }
    Ok(())
}
