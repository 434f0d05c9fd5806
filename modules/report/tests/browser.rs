//! The HTML report rendered in headless Chromium.

use super::live;
use nuvira_report::{Format, render, sample};
use nuvira_test_support::env::chromium;
use std::path::PathBuf;
use std::process::Command;

fn run(chrome: &PathBuf, extra: &[&str], page: &str) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chrome);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--window-size=1280,1400",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(extra)
    .arg(page);
    cmd.output().unwrap()
}

#[test]
fn the_html_report_renders_in_headless_chromium_with_the_dag() {
    let Some(chrome) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    std::fs::write(&html, render(&live(&sample::failing_run()), Format::Html)).unwrap();
    let url = format!("file://{}", html.display());

    let png = dir.path().join("shot.png");
    let out = run(&chrome, &[&format!("--screenshot={}", png.display())], &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // A blank 1280x1400 page compresses to a few KiB; the report is far richer.
    assert!(
        bytes.len() > 30_000,
        "screenshot is only {} bytes",
        bytes.len()
    );
    if let Some(keep) = std::env::var_os("NUVIRA_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }

    let out = run(&chrome, &["--dump-dom"], &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8(out.stdout).unwrap();
    assert!(dom.contains("<svg id=\"dag\""), "the DAG is in the DOM");
    assert_eq!(dom.matches("<g class=\"node ").count(), 6);
    assert!(dom.contains("<g class=\"node failed\" data-step=\"test\""));
    assert!(dom.contains("<g class=\"node skipped\" data-step=\"verify\""));
    assert_eq!(dom.matches("class=\"edge\"").count(), 6);
    assert!(dom.contains("id=\"timeline\""));
    assert!(dom.contains("config::tests::loads_defaults"));
}

#[test]
fn the_html_report_loads_nothing_from_anywhere() {
    let html = render(&live(&sample::failing_run()), Format::Html);
    assert!(html.contains("default-src 'none'"));
    for needle in [
        "<script",
        "<link",
        "<img",
        "@import",
        "url(http",
        "src=\"http",
        "href=\"http",
    ] {
        assert!(!html.contains(needle), "{needle}");
    }
}

#[test]
fn dag_layers_follow_dependencies() {
    let r = live(&sample::failing_run());
    let layers: Vec<Vec<&str>> = nuvira_report::html::layers(&r.steps)
        .into_iter()
        .map(|l| l.into_iter().map(|i| r.steps[i].id.as_str()).collect())
        .collect();
    assert_eq!(
        layers,
        [
            vec!["inspect"],
            vec!["edit", "edit-docs"],
            vec!["test"],
            vec!["verify"],
            vec!["report"]
        ]
    );
}
