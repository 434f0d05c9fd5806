//! SARIF 2.1.0, shaped for GitHub code scanning.
//!
//! - every property GitHub requires: `$schema`, `version`, `runs[].tool.driver.name`,
//!   `runs[].results[]` with `ruleId`, `message.text` and a `physicalLocation` whose
//!   `artifactLocation.uri` is repo-relative (`uriBaseId: "%SRCROOT%"`) and whose `region` has a
//!   `startLine`; rules with `id`, descriptions, `defaultConfiguration.level` and `help`;
//! - stable rule ids (`nuvira/test-failure`, `nuvira/security/<rule>`,
//!   `nuvira/verification/<check>`, `nuvira/syntax/<node-kind>`,
//!   `nuvira/step-failure/<category>`), so alerts match across runs;
//! - `partialFingerprints` (`nuvira/v1`) from the rule, the path, the title, the normalised
//!   text of the line (whitespace collapsed; read from the checkout when [`Options::source_root`]
//!   is given, else taken from the report's diff of that file) and an occurrence index among
//!   results alike in all of those — not the line number, so an alert survives edits above it,
//!   and two findings on lines 1 and 2 of one file never share one;
//! - findings without a file become `toolExecutionNotifications` of the run's invocation,
//!   which is where SARIF puts results that have no location (GitHub rejects results without
//!   one);
//! - at most [`MAX_RESULTS`] results per run (GitHub's limit), the most severe first, with a
//!   notification saying how many were dropped;
//! - no `automationDetails` unless a category is given ([`Options::category`], the CLI's
//!   `--sarif-category`): an `automationDetails.id` overrides the `category:` of the upload;
//! - `informationUri` from the crate's `repository` (or `homepage`) metadata, left out when
//!   there is none; `versionControlProvenance` from `GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`,
//!   `GITHUB_SHA` and `GITHUB_REF` when [`Options::from_env`] finds them.

use crate::{ExecutionReport, Finding, stable_hash};
use nuvira_api::Severity;
use nuvira_api::report::FindingKind;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The `$schema` GitHub recommends.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// GitHub code scanning accepts at most this many results per run.
pub const MAX_RESULTS: usize = 25_000;

/// How a SARIF log is made beyond the report itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// `automationDetails.id` is `CATEGORY/RUN-ID` when set; left out otherwise, so the
    /// upload's own `category:` decides.
    pub category: Option<String>,
    /// The checkout the result paths are relative to: the text of a finding's line is read
    /// from here for its fingerprint.
    pub source_root: Option<std::path::PathBuf>,
    /// `versionControlProvenance`: the repository URI, the revision and the branch.
    pub provenance: Option<Provenance>,
}

/// The repository a run's results belong to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Provenance {
    /// `https://github.com/OWNER/REPO`.
    pub repository_uri: String,
    /// The commit.
    pub revision_id: Option<String>,
    /// The ref (`refs/heads/main`).
    pub branch: Option<String>,
}

impl Options {
    /// Options with the provenance taken from the GitHub Actions environment
    /// (`GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`, `GITHUB_SHA`, `GITHUB_REF`) when it is set.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let provenance = match (var("GITHUB_SERVER_URL"), var("GITHUB_REPOSITORY")) {
            (Some(server), Some(repo)) => Some(Provenance {
                repository_uri: format!("{}/{repo}", server.trim_end_matches('/')),
                revision_id: var("GITHUB_SHA"),
                branch: var("GITHUB_REF"),
            }),
            _ => None,
        };
        Self {
            provenance,
            ..Self::default()
        }
    }

    /// The same options with a category.
    #[must_use]
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// The same options with a source root.
    #[must_use]
    pub fn source_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.source_root = Some(root.into());
        self
    }
}

/// Renders the report as a SARIF 2.1.0 log, with default [`Options`].
pub fn render(report: &ExecutionReport) -> String {
    render_with(report, &Options::default())
}

/// Renders the report as a SARIF 2.1.0 log.
pub fn render_with(report: &ExecutionReport, options: &Options) -> String {
    let mut s = serde_json::to_string_pretty(&to_value_with(report, options)).unwrap_or_default();
    s.push('\n');
    s
}

/// The SARIF log as a JSON value, with default [`Options`].
pub fn to_value(report: &ExecutionReport) -> Value {
    to_value_with(report, &Options::default())
}

/// The crate's `repository` (else `homepage`) URL, unless it is a placeholder.
fn information_uri() -> Option<&'static str> {
    [env!("CARGO_PKG_REPOSITORY"), env!("CARGO_PKG_HOMEPAGE")]
        .into_iter()
        .find(|u| u.starts_with("https://") && !u.contains("example.invalid"))
}

/// The line's text with its whitespace collapsed (empty when unknown).
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Line `line` (1-based) of `path` after the change, from a unified diff of that file.
fn line_from_diff(diff: &str, line: u64) -> Option<String> {
    let mut new_line: Option<u64> = None;
    for l in diff.lines() {
        if let Some(rest) = l.strip_prefix("@@ ") {
            // `@@ -a,b +c,d @@`
            new_line = rest
                .split_whitespace()
                .find_map(|p| p.strip_prefix('+'))
                .and_then(|p| p.split(',').next())
                .and_then(|n| n.parse().ok());
            continue;
        }
        let Some(n) = new_line else { continue };
        if l.starts_with("+++") || l.starts_with("---") || l.starts_with('\\') {
            continue;
        }
        if l.starts_with('-') {
            continue;
        }
        if n == line {
            return Some(l.get(1..).unwrap_or_default().to_owned());
        }
        new_line = Some(n + 1);
    }
    None
}

/// The text of a finding's line: from the checkout, else from a diff of the file.
fn line_text(report: &ExecutionReport, options: &Options, path: &str, line: u64) -> String {
    if let Some(root) = &options.source_root {
        let file = root.join(path);
        if std::fs::metadata(&file).is_ok_and(|m| m.is_file() && m.len() <= 8 * 1024 * 1024)
            && let Ok(bytes) = std::fs::read(&file)
            && let Some(l) = String::from_utf8_lossy(&bytes)
                .lines()
                .nth(usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX))
        {
            return normalised(l);
        }
    }
    report
        .file_changes()
        .filter(|(_, c)| c.path == path)
        .find_map(|(_, c)| line_from_diff(&c.diff, line))
        .map(|l| normalised(&l))
        .unwrap_or_default()
}

/// The SARIF log as a JSON value.
pub fn to_value_with(report: &ExecutionReport, options: &Options) -> Value {
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
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    // The most severe first, so that the cap drops notes before errors; otherwise in order.
    let mut findings: Vec<_> = report.findings().collect();
    let located = findings.iter().filter(|(_, f)| f.path.is_some()).count();
    let dropped = located.saturating_sub(MAX_RESULTS);
    if dropped > 0 {
        findings.sort_by_key(|(_, f)| std::cmp::Reverse(f.severity));
    }
    let mut kept = 0usize;
    for (step, f) in findings {
        let Some(path) = &f.path else {
            notifications.push(json!({
                "level": level(f.severity),
                "message": { "text": format!("{}: {} [step {}]", f.title, f.message, step.id) },
                "descriptor": { "id": f.rule_id },
            }));
            continue;
        };
        if kept == MAX_RESULTS {
            continue;
        }
        kept += 1;
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
        let text_of_line = f
            .line
            .map(|l| line_text(report, options, path, u64::from(l)))
            .unwrap_or_default();
        let alike = stable_hash(&[&f.rule_id, path, &f.title, &text_of_line]);
        let occurrence = seen.entry(alike).or_insert(0);
        let fingerprint = stable_hash(&[
            &f.rule_id,
            path,
            &f.title,
            &text_of_line,
            &occurrence.to_string(),
        ]);
        *occurrence += 1;
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
                "nuvira/v1": fingerprint,
            },
            "properties": { "step": step.id, "kind": f.kind.as_str() },
        }));
    }

    let mut invocation = json!({
        "executionSuccessful": report.status != Some(nuvira_api::RunStatus::Cancelled),
    });
    if dropped > 0 {
        notifications.push(json!({
            "level": "warning",
            "message": { "text": format!(
                "{dropped} of {located} result(s) were dropped: GitHub code scanning accepts at most {MAX_RESULTS} per run (the most severe were kept); see the full report"
            ) },
            "descriptor": { "id": "nuvira/results-capped" },
        }));
    }
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
    let mut driver = json!({
        "name": "nuvira",
        "semanticVersion": env!("CARGO_PKG_VERSION"),
        "version": env!("CARGO_PKG_VERSION"),
        "rules": rules_json,
    });
    if let Some(uri) = information_uri() {
        driver["informationUri"] = json!(uri);
    }
    let mut run = json!({
        "tool": { "driver": driver },
        "originalUriBaseIds": {
            "%SRCROOT%": { "description": { "text": "The root of the checkout the run worked in." } }
        },
        "invocations": [invocation],
        "results": results,
        "properties": properties,
    });
    // GitHub reads `category/run`: everything before the last `/` is the category.
    if let Some(category) = options.category.as_deref().filter(|c| !c.trim().is_empty()) {
        run["automationDetails"] = json!({
            "id": format!("{}/{}", category.trim_end_matches('/'), report.run_id)
        });
    }
    if let Some(p) = &options.provenance {
        let mut v =
            json!({ "repositoryUri": p.repository_uri, "mappedTo": { "uriBaseId": "%SRCROOT%" } });
        if let Some(r) = &p.revision_id {
            v["revisionId"] = json!(r);
        }
        if let Some(b) = &p.branch {
            v["branch"] = json!(b);
        }
        run["versionControlProvenance"] = json!([v]);
    }
    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [run]
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

/// What a URI path segment keeps as-is: RFC 3986 unreserved characters, `/` and the
/// sub-delimiters that are safe in a path; everything else is percent-encoded.
const PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/')
    .remove(b':')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b'=');

fn encode(p: &str) -> String {
    percent_encoding::utf8_percent_encode(p, PATH).to_string()
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
