//! Integration tests of nuvira-report: one binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod browser;
mod builder;
mod ci_trust;
mod formats;
mod github;
mod module;
mod recorded;
mod sarif;

use nuvira_api::Event;
use nuvira_report::{ExecutionReport, ReportBuilder};

/// Folds events the way a live run does (borrowed, from the bus).
pub fn live(events: &[Event]) -> ExecutionReport {
    let mut b = ReportBuilder::new();
    for e in events {
        b.fold(e);
    }
    b.finish()
}

/// Writes events as JSONL, the way `nuvira run --events` stores them.
pub fn jsonl(events: &[Event]) -> String {
    let mut s = String::new();
    for e in events {
        s.push_str(&serde_json::to_string(e).unwrap());
        s.push('\n');
    }
    s
}
