use super::live;
use nuvira_report::{Format, render, sample};
use serde_json::Value;

fn schema() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sarif-schema-2.1.0.json"
    ))
    .unwrap();
    // The shipped schema is the official 2.1.0 one (rtm.5, as published on schemastore and
    // bundled by @microsoft/jest-sarif), byte for byte. Its `run.language` pattern has a stray
    // `]` that ECMA-262 regexes accept but Rust's `regex` rejects; the OASIS errata fixed it to
    // this form, which accepts the same language tags.
    let text = text.replace(
        r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$""#,
        r#""^[a-zA-Z]{2}(-[a-zA-Z]{2})?$""#,
    );
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn validate(doc: &Value) {
    let validator = jsonschema::draft4::new(&schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "SARIF does not validate:\n{}",
        errors.join("\n")
    );
}

#[test]
fn sarif_validates_against_the_official_2_1_0_schema() {
    for events in [sample::failing_run(), sample::passing_run()] {
        let doc: Value = serde_json::from_str(&render(&live(&events), Format::Sarif)).unwrap();
        validate(&doc);
    }
}

#[test]
fn the_schema_check_catches_a_broken_log() {
    let mut doc: Value =
        serde_json::from_str(&render(&live(&sample::failing_run()), Format::Sarif)).unwrap();
    doc["runs"][0]["results"][0]["level"] = "fatal".into();
    let validator = jsonschema::draft4::new(&schema()).unwrap();
    assert!(!validator.is_valid(&doc));
}

#[test]
fn sarif_has_every_property_github_requires() {
    let doc: Value =
        serde_json::from_str(&render(&live(&sample::failing_run()), Format::Sarif)).unwrap();
    assert_eq!(doc["version"], "2.1.0");
    assert!(doc["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let run = &doc["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "nuvira");
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    for rule in rules {
        assert!(rule["id"].as_str().unwrap().starts_with("nuvira/"));
        assert!(rule["shortDescription"]["text"].is_string());
        assert!(rule["fullDescription"]["text"].is_string());
        assert!(rule["help"]["text"].is_string());
        assert!(rule["defaultConfiguration"]["level"].is_string());
    }
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        let id = r["ruleId"].as_str().unwrap();
        let idx = r["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[idx]["id"], id, "ruleIndex points at the rule");
        assert!(!r["message"]["text"].as_str().unwrap().is_empty());
        let loc = &r["locations"][0]["physicalLocation"];
        let uri = loc["artifactLocation"]["uri"].as_str().unwrap();
        assert!(
            !uri.starts_with('/') && !uri.contains("://"),
            "repo-relative: {uri}"
        );
        assert_eq!(loc["artifactLocation"]["uriBaseId"], "%SRCROOT%");
        assert!(loc["region"]["startLine"].as_u64().unwrap() >= 1);
        assert!(r["partialFingerprints"]["nuvira/v1"].is_string());
    }
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["ruleId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "nuvira/security/aws-access-key",
            "nuvira/syntax/missing",
            "nuvira/test-failure",
            "nuvira/test-failure"
        ]
    );
    let sec = rules
        .iter()
        .find(|r| r["id"] == "nuvira/security/aws-access-key")
        .unwrap();
    assert_eq!(sec["properties"]["security-severity"], "5.0");
}

#[test]
fn fingerprints_survive_line_moves_but_not_a_different_test() {
    let fp = |events: &[nuvira_api::Event]| -> Vec<String> {
        let doc: Value = serde_json::from_str(&render(&live(events), Format::Sarif)).unwrap();
        doc["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["partialFingerprints"]["nuvira/v1"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let base = fp(&sample::failing_run());
    let mut moved = sample::failing_run();
    for e in &mut moved {
        if let nuvira_api::EventKind::StepFailed {
            output: Some(out), ..
        } = &mut e.kind
            && let nuvira_api::StepOutput::Test(t) = std::sync::Arc::make_mut(out)
        {
            t.failures[0].line = Some(50);
            t.failures[1].name = "cli::tests::other".into();
        }
    }
    let after = fp(&moved);
    assert_eq!(base[2], after[2], "same test, moved line: same fingerprint");
    assert_ne!(
        base[3], after[3],
        "a different test: a different fingerprint"
    );
    assert_eq!(base.len(), after.len());
}

#[test]
fn unlocated_findings_become_tool_notifications() {
    let mut events = sample::passing_run();
    events.retain(|e| !matches!(e.kind, nuvira_api::EventKind::RunCompleted { .. }));
    let seq = events.len() as u64;
    events.push(nuvira_api::Event {
        seq,
        ts: sample::T0 + 3000,
        run_id: "run-0c1d".into(),
        step_id: Some("late".into()),
        kind: nuvira_api::EventKind::StepFailed {
            category: nuvira_api::ErrorCategory::SandboxUnavailable,
            message: "no docker engine answered: start Docker or use --sandbox local".into(),
            recoverable: false,
            evidence: vec![],
            duration_ms: 3,
            output: None,
        },
    });
    let doc: Value = serde_json::from_str(&render(&live(&events), Format::Sarif)).unwrap();
    validate(&doc);
    let notes = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(
        notes[0]["descriptor"]["id"],
        "nuvira/step-failure/sandbox-unavailable"
    );
}

#[test]
fn the_automation_category_is_only_written_when_asked_for() {
    let report = live(&sample::failing_run());
    let doc: Value = serde_json::from_str(&render(&report, Format::Sarif)).unwrap();
    // An `automationDetails.id` overrides the upload's `category:`: none by default.
    assert!(doc["runs"][0].get("automationDetails").is_none());
    let opts = nuvira_report::sarif::Options::default().category("nuvira");
    let doc: Value =
        serde_json::from_str(&nuvira_report::sarif::render_with(&report, &opts)).unwrap();
    validate(&doc);
    // GitHub takes everything before the last `/` as the category: it must not hold the run id.
    let id = doc["runs"][0]["automationDetails"]["id"].as_str().unwrap();
    assert_eq!(id, "nuvira/run-7f3a");
    assert_eq!(id.rsplit_once('/').unwrap().0, "nuvira");
}
