//! SARIF 2.1.0, shaped for GitHub code scanning.
//!
//! - every property GitHub requires: `$schema`, `version`, `runs[].tool.driver.name`,
//!   `runs[].results[]` with `ruleId`, `message.text` and a `physicalLocation` whose
//!   `artifactLocation.uri` is repo-relative (`uriBaseId: "%SRCROOT%"`) and whose `region` has a
//!   `startLine`; rules with `id`, descriptions, `defaultConfiguration.level` and `help`;
//! - stable rule ids (`nuvira/test-failure`, `nuvira/security/<rule>`,
//!   `nuvira/verification/<check>`, `nuvira/syntax/<node-kind>`,
//!   `nuvira/step-failure/<category>`), so alerts match across runs;
//! - `partialFingerprints` (`nuvira/v1`) from the rule, the path and the title — not the line, so
//!   an alert survives edits above it;
//! - findings without a file become `toolExecutionNotifications` of the run's invocation,
//!   which is where SARIF puts results that have no location (GitHub rejects results without
//!   one).

use crate::{ExecutionReport, Finding, stable_hash};
use nuvira_api::Severity;
use nuvira_api::report::FindingKind;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The `$schema` GitHub recommends.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// Renders the report as a SARIF 2.1.0 log.
pub fn render(report: &ExecutionReport) -> String {
    let mut s = serde_json::to_string_pretty(&to_value(report)).unwrap_or_default();
    s.push('\n');
    s
}

/// The SARIF log as a JSON value.
pub fn to_value(report: &ExecutionReport) -> Value {
    let mut rules: BTreeMap<&str, &Finding> = BTreeMap::new();
    for (_, f) in report.findings() {
        if f.path.is_some() {
            rules.entry(f.rule_id.as_str()).or_insert(f);
        }
    }
    let index: BTreeMap<&str, usize> = rules.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let rules_json: Vec<Value> = rules.values().map(|f| rule(f)).collect();

    let mut results = Vec::new();
    let mut notifications = Vec::new();
    for (step, f) in report.findings() {
        let Some(path) = &f.path else {
            notifications.push(json!({
                "level": level(f.severity),
                "message": { "text": format!("{}: {} [step {}]", f.title, f.message, step.id) },
                "descriptor": { "id": f.rule_id },
            }));
            continue;
        };
        let mut region = serde_json::Map::new();
        region.insert("startLine".into(), json!(f.line.unwrap_or(1).max(1)));
        if let Some(c) = f.column {
            region.insert("startColumn".into(), json!(c.max(1)));
        }
        if let Some(l) = f.end_line {
            region.insert("endLine".into(), json!(l.max(f.line.unwrap_or(1)).max(1)));
            if let Some(c) = f.end_column {
                region.insert("endColumn".into(), json!(c.max(1)));
            }
        }
        let (uri, base) = repo_uri(path);
        let mut artifact = json!({ "uri": uri });
        if base {
            artifact["uriBaseId"] = json!("%SRCROOT%");
        }
        let mut text = f.message.clone();
        if text.trim().is_empty() {
            text.clone_from(&f.title);
        }
        results.push(json!({
            "ruleId": f.rule_id,
            "ruleIndex": index.get(f.rule_id.as_str()).copied().unwrap_or(0),
            "level": level(f.severity),
            "message": { "text": format!("{}: {text}", f.title) },
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": artifact,
                    "region": Value::Object(region),
                }
            }],
            "partialFingerprints": {
                "nuvira/v1": stable_hash(&[&f.rule_id, path, &f.title]),
            },
            "properties": { "step": step.id, "kind": f.kind.as_str() },
        }));
    }

    let mut invocation = json!({
        "executionSuccessful": report.status != Some(nuvira_api::RunStatus::Cancelled),
    });
    if !notifications.is_empty() {
        invocation["toolExecutionNotifications"] = Value::Array(notifications);
    }
    let mut properties = json!({
        "reportId": report.report_id,
        "goal": report.goal,
        "summary": report.summary,
    });
    if let Some(u) = &report.usage {
        properties["modelUsage"] = json!(u);
        let steps: serde_json::Map<String, Value> = report
            .steps
            .iter()
            .filter_map(|s| Some((s.id.clone(), json!(s.usage.as_ref()?))))
            .collect();
        properties["stepModelUsage"] = Value::Object(steps);
    }
    if let Some(b) = &report.budget_exceeded {
        properties["budgetExceeded"] = json!(b);
    }
    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "nuvira",
                    "semanticVersion": env!("CARGO_PKG_VERSION"),
                    "version": env!("CARGO_PKG_VERSION"),
                    "informationUri": "https://example.invalid/nuvira",
                    "rules": rules_json,
                }
            },
            // GitHub reads `category/run`: a stable category, so alerts match across runs.
            "automationDetails": { "id": format!("nuvira/{}", report.run_id) },
            "originalUriBaseIds": {
                "%SRCROOT%": { "description": { "text": "The root of the workspace the run worked in." } }
            },
            "invocations": [invocation],
            "results": results,
            "properties": properties,
        }]
    })
}

fn rule(f: &Finding) -> Value {
    let (short, full, tags): (String, String, Vec<&str>) = match f.kind {
        FindingKind::TestFailure => (
            "A test failed".into(),
            "A test run by a Nuvira test step failed.".into(),
            vec!["tests"],
        ),
        FindingKind::Syntax => (
            "An edit introduced a syntax error".into(),
            "A Nuvira edit would leave this file with a syntax error that it did not have before."
                .into(),
            vec!["correctness", "syntax"],
        ),
        FindingKind::Security => {
            let name = f.rule_id.rsplit('/').next().unwrap_or("security");
            (
                format!("Security: {name}"),
                format!("An edit introduced a possible secret or dangerous pattern ({name})."),
                vec!["security"],
            )
        }
        FindingKind::Verification => {
            let name = f.rule_id.rsplit('/').next().unwrap_or("check");
            (
                format!("Verification check `{name}`"),
                format!("The `{name}` verification check did not pass."),
                vec!["verification"],
            )
        }
        FindingKind::StepFailure | _ => (
            "A step failed".into(),
            "A Nuvira step failed.".into(),
            vec!["nuvira"],
        ),
    };
    let mut props = json!({ "tags": tags, "precision": "high" });
    if f.kind == FindingKind::Security {
        props["security-severity"] = json!(match f.severity {
            Severity::Error => "8.0",
            Severity::Warning => "5.0",
            Severity::Info => "2.0",
        });
    }
    json!({
        "id": f.rule_id,
        "name": f.rule_id.trim_start_matches("nuvira/").replace('/', "-"),
        "shortDescription": { "text": short },
        "fullDescription": { "text": full },
        "defaultConfiguration": { "level": level(f.severity) },
        "help": { "text": full.clone(), "markdown": full },
        "properties": props,
    })
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A repo-relative URI for a workspace path (`./a\b c.rs` → `a/b%20c.rs`), and whether it is
/// relative to `%SRCROOT%`. Absolute paths become `file://` URIs.
pub fn repo_uri(path: &str) -> (String, bool) {
    let p = path.replace('\\', "/");
    let absolute = p.starts_with('/') || p.as_bytes().get(1) == Some(&b':');
    let mut p = p.as_str();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let encoded = encode(p);
    if absolute {
        let slash = if encoded.starts_with('/') { "" } else { "/" };
        (format!("file://{slash}{encoded}"), false)
    } else {
        (encoded, true)
    }
}

fn encode(p: &str) -> String {
    let mut o = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/:@!$&'()*+=".contains(&b) {
            o.push(char::from(b));
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_repo_relative_and_percent_encoded() {
        assert_eq!(repo_uri("./src/a b.rs"), ("src/a%20b.rs".into(), true));
        assert_eq!(repo_uri("src\\win.rs"), ("src/win.rs".into(), true));
        assert_eq!(
            repo_uri("/abs/x#y.rs"),
            ("file:///abs/x%23y.rs".into(), false)
        );
    }
}
