//! `nuvira schema`: the schemas the binary prints accept every example plan and edits file, a
//! real report and a real event stream (old lines without `schema_version` too), and the plan
//! schema (the one the model planner sends) accepts exactly the plans `nuvira validate` does:
//! a corpus both ways, and random schema-valid plans that must load and validate.

use assert_cmd::Command;
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn schema(kind: &str) -> Value {
    let out = Command::cargo_bin("nuvira")
        .unwrap()
        .args(["schema", kind])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn validator(kind: &str) -> jsonschema::Validator {
    jsonschema::validator_for(&schema(kind)).unwrap()
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

/// A YAML, JSON or TOML document as JSON, the way the plan loader reads the file.
fn read_doc(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => serde_json::from_str(&text).unwrap(),
        Some("toml") => {
            let t: toml::Value = toml::from_str(&text).unwrap();
            serde_json::to_value(t).unwrap()
        }
        _ => serde_yaml_ng::from_str(&text).unwrap(),
    }
}

fn example_plans() -> Vec<PathBuf> {
    let mut plans: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("examples/plans"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("invalid.yaml"))
        .collect();
    plans.push(Path::new(ROOT).join("examples/quickstart/plan.yaml"));
    plans.push(Path::new(ROOT).join("examples/agent/plan.yaml"));
    plans.sort();
    plans
}

#[test]
fn every_example_plan_validates_against_the_plan_schema() {
    let v = validator("plan");
    let plans = example_plans();
    assert!(plans.len() >= 6, "{plans:?}");
    for p in &plans {
        let doc = read_doc(p);
        assert!(
            errors(&v, &doc).is_empty(),
            "{}: {:?}",
            p.display(),
            errors(&v, &doc)
        );
    }
    // The printed schema is the one the planner sends.
    assert_eq!(
        schema("plan").get("properties"),
        nuvira::plan::plan_schema().get("properties")
    );
}

#[test]
fn every_edits_example_validates_against_the_edits_schema() {
    let v = validator("edits");
    let mut docs: Vec<(String, Value)> = Vec::new();
    // The edit strategies' scenario requests (the shape `nuvira apply` reads).
    let scenarios = Path::new(ROOT).join("strategies/edit/tests/scenarios");
    for entry in std::fs::read_dir(&scenarios).unwrap() {
        let request = entry.unwrap().path().join("request.yaml");
        if request.exists() {
            docs.push((request.display().to_string(), read_doc(&request)));
        }
    }
    assert!(docs.len() > 20, "{}", docs.len());
    docs.push((
        "examples/edits.yaml".into(),
        read_doc(&Path::new(ROOT).join("examples/edits.yaml")),
    ));
    // The config of every edit step of the example plans.
    for p in example_plans() {
        let plan = read_doc(&p);
        for step in plan["steps"].as_array().unwrap() {
            if step["module"] == "edit" {
                docs.push((
                    format!("{} step {}", p.display(), step["id"]),
                    step["config"].clone(),
                ));
            }
        }
    }
    for (name, doc) in &docs {
        assert!(errors(&v, doc).is_empty(), "{name}: {:?}", errors(&v, doc));
    }
    for bad in [
        json!({"edits": [{"path": "a"}]}),
        json!({"edits": "x"}),
        json!({"edit": []}),
    ] {
        assert!(!v.is_valid(&bad), "accepted {bad}");
    }
}

#[test]
fn a_real_report_and_real_events_validate_against_their_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.yaml");
    std::fs::write(
        &plan,
        "goal: g\nsteps:\n  - id: look\n    module: inspect\n  - id: boom\n    module: execute\n    depends_on: [look]\n    config: { command: \"exit 1\", sandbox: local }\n",
    )
    .unwrap();
    let events = dir.path().join("events.jsonl");
    let report = dir.path().join("report.json");
    Command::cargo_bin("nuvira")
        .unwrap()
        .args(["run", "-q", "--sandbox", "local", "--repo"])
        .arg(dir.path())
        .arg(&plan)
        .arg("--events")
        .arg(&events)
        .arg("-o")
        .arg(&report)
        .assert()
        .code(1);
    let ev = validator("events");
    let lines = std::fs::read_to_string(&events).unwrap();
    let mut types = std::collections::BTreeSet::new();
    for line in lines.lines() {
        let mut doc: Value = serde_json::from_str(line).unwrap();
        assert!(
            errors(&ev, &doc).is_empty(),
            "{line}: {:?}",
            errors(&ev, &doc)
        );
        types.insert(doc["type"].as_str().unwrap().to_owned());
        // A line written before `schema_version` existed is still an event.
        doc.as_object_mut().unwrap().remove("schema_version");
        assert!(ev.is_valid(&doc), "{doc}");
        // A wrong version is not.
        doc["schema_version"] = json!(99);
        assert!(!ev.is_valid(&doc), "{doc}");
    }
    assert!(
        types.contains("step:failed") && types.contains("run:completed"),
        "{types:?}"
    );
    let rep = validator("report");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert!(errors(&rep, &doc).is_empty(), "{:?}", errors(&rep, &doc));
    // The sample runs the report crate renders, passing and failing.
    for sample in [
        nuvira_report::sample::failing_run(),
        nuvira_report::sample::passing_run(),
    ] {
        let mut b = nuvira_report::ReportBuilder::new();
        for e in &sample {
            b.fold(e);
            let line: Value = serde_json::to_value(e).unwrap();
            assert!(ev.is_valid(&line), "{line}");
        }
        let text = nuvira_report::render(&b.finish(), nuvira_report::Format::Json);
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert!(errors(&rep, &doc).is_empty(), "{:?}", errors(&rep, &doc));
    }
}

/// Whether `nuvira validate` accepts a plan: it loads (the file's schema) and validates (ids,
/// modules, graph) against the registry `nuvira run` uses.
fn validate_accepts(plan: &Value) -> Result<(), String> {
    let text = plan.to_string();
    let loaded = nuvira::plan::parse_str(&text, nuvira::plan::PlanFormat::Json, "plan.json")
        .map_err(|e| e.to_string())?;
    let registry = nuvira::agent::registry();
    nuvira::validate::validate(&loaded.plan, Some(&registry))
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
}

static PLAN: LazyLock<jsonschema::Validator> =
    LazyLock::new(|| jsonschema::validator_for(&nuvira::plan::plan_schema()).unwrap());

fn with_step(extra: Value) -> Value {
    let mut step = json!({"id": "a", "module": "inspect"});
    for (k, v) in extra.as_object().unwrap() {
        step[k] = v.clone();
    }
    json!({"goal": "g", "steps": [step]})
}

#[test]
fn the_planner_schema_accepts_exactly_what_validate_accepts() {
    // Regression: the schema the model planner sent refused `timeout: 1h30m` and a plan
    // without `goal`, both of which `nuvira validate` takes.
    let mut cases = vec![
        json!({"steps": [{"id": "a", "module": "inspect"}]}),
        json!({"goal": "g", "steps": []}),
        json!({"goal": "g"}),
        json!({"goal": 5, "steps": [{"id": "a", "module": "inspect"}]}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}], "extra": 1}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}], "estimatedComplexity": "simple"}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}], "estimated_complexity": "huge"}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}], "suggestedProvider": "openai:x"}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}, {"id": "b", "module": "report", "dependsOn": ["a"]}]}),
        json!({"goal": "g", "steps": [{"id": "a", "module": "inspect"}], "outputs": ["a"]}),
        json!({"goal": "g", "steps": "a"}),
    ];
    for extra in [
        json!({"id": "a b"}),
        json!({"id": ""}),
        json!({"id": 5}),
        json!({"module": ""}),
        json!({"depend_on": []}),
        json!({"description": "d"}),
        json!({"description": null}),
        json!({"config": {"keywords": ["x"]}}),
        json!({"config": null}),
        json!({"writes": ["a.txt"]}),
        json!({"writes": "a.txt"}),
    ] {
        cases.push(with_step(extra));
    }
    for timeout in [
        json!("1h30m"),
        json!("90s"),
        json!("500ms"),
        json!("1.5s"),
        json!("90"),
        json!(" 10s "),
        json!("1h 30m"),
        json!("2 mins"),
        json!("1m30s"),
        json!(".5s"),
        json!("5."),
        json!("1e3"),
        json!(90),
        json!(1.5),
        json!(null),
        json!("0s"),
        json!("0"),
        json!("0m0.0s"),
        json!(0),
        json!(-1),
        json!("-5"),
        json!("soon"),
        json!("1m30"),
        json!("1 h"),
        json!("1.2.3s"),
        json!("10 days"),
        json!("inf"),
        json!(""),
        json!("ms"),
        json!(true),
    ] {
        cases.push(with_step(json!({ "timeout": timeout })));
    }
    let mut accepted = 0;
    for plan in &cases {
        let by_validate = validate_accepts(plan);
        let by_schema = PLAN.is_valid(plan);
        assert_eq!(
            by_schema,
            by_validate.is_ok(),
            "{plan}: schema {by_schema}, validate {by_validate:?}, schema errors {:?}",
            errors(&PLAN, plan)
        );
        accepted += usize::from(by_schema);
    }
    // Both directions were exercised.
    assert!(
        accepted > 15 && accepted < cases.len() - 15,
        "{accepted} of {}",
        cases.len()
    );
}

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.-]{1,12}"
}

fn timeout() -> impl Strategy<Value = Value> {
    let unit = prop::sample::select(vec![
        "ms", "s", "sec", "secs", "m", "min", "mins", "h", "hr", "hours",
    ]);
    let part = (
        1u32..500,
        prop::option::of(0u32..100),
        unit,
        prop::bool::ANY,
    )
        .prop_map(|(n, frac, unit, space)| {
            let num = frac.map_or(n.to_string(), |f| format!("{n}.{f}"));
            format!("{num}{}{unit}", if space { " " } else { "" })
        });
    prop_oneof![
        prop::collection::vec(part, 1..4).prop_map(|parts| json!(parts.join(""))),
        (1u32..100_000).prop_map(|n| json!(n)),
        (1u32..100_000).prop_map(|n| json!(n.to_string())),
        (0.001f64..1e6).prop_map(|x| json!(x)),
    ]
}

/// Random plans the schema accepts: a chain of unique ids over registered modules, with
/// every optional key, both spellings of aliased keys, and every timeout form.
fn plan() -> impl Strategy<Value = Value> {
    let modules = prop::sample::select(vec!["inspect", "verify", "report"]);
    let step = (
        modules,
        prop::option::of("[ -~]{0,20}"),
        prop::option::of(timeout()),
        prop::bool::ANY,
        prop::option::of(prop::collection::vec("[a-z]{1,5}\\.txt", 0..3)),
    );
    (
        prop::collection::btree_set(id(), 1..6),
        prop::collection::vec(step, 6),
        prop::option::of("[ -~]{0,30}"),
        prop::option::of(prop::sample::select(vec!["simple", "moderate", "complex"])),
        prop::bool::ANY,
        prop::option::of("[a-z]{1,8}:[a-z0-9.-]{1,8}"),
    )
        .prop_map(|(ids, steps, goal, complexity, camel, provider)| {
            let ids: Vec<String> = ids.into_iter().collect();
            let mut out = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                let (module, description, timeout, camel_dep, writes) = steps[i].clone();
                // The chain ends in a report, so every step leads to an output.
                let module = if i + 1 == ids.len() { "report" } else { module };
                let mut s = json!({ "id": id, "module": module });
                if let Some(d) = description {
                    s["description"] = json!(d);
                }
                if let Some(t) = timeout {
                    s["timeout"] = t;
                }
                if i > 0 {
                    let key = if camel_dep { "dependsOn" } else { "depends_on" };
                    s[key] = json!([ids[i - 1]]);
                }
                if let Some(w) = writes {
                    s["writes"] = json!(w);
                }
                out.push(s);
            }
            let mut plan = json!({ "steps": out });
            if let Some(g) = goal {
                plan["goal"] = json!(g);
            }
            if let Some(c) = complexity {
                plan[if camel {
                    "estimatedComplexity"
                } else {
                    "estimated_complexity"
                }] = json!(c);
            }
            if let Some(p) = provider {
                plan[if camel {
                    "suggestedProvider"
                } else {
                    "suggested_provider"
                }] = json!(p);
            }
            plan
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn schema_valid_random_plans_load_and_validate(plan in plan()) {
        prop_assert!(PLAN.is_valid(&plan), "{plan}: {:?}", errors(&PLAN, &plan));
        prop_assert!(validate_accepts(&plan).is_ok(), "{plan}: {:?}", validate_accepts(&plan));
        // The same plan as YAML loads too.
        let yaml = serde_yaml_ng::to_string(&plan).unwrap();
        let loaded = nuvira::plan::parse_str(&yaml, nuvira::plan::PlanFormat::Yaml, "plan.yaml");
        prop_assert!(loaded.is_ok(), "{yaml}: {:?}", loaded.err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Any short text over the duration alphabet is a valid `timeout` for the schema exactly
    /// when the plan loader takes it (short enough to stay below the 10¹² s range limit, which
    /// only the loader checks).
    #[test]
    fn the_timeout_pattern_agrees_with_the_duration_parser(text in "[0-9. mshinrocu+-]{0,8}") {
        let plan = with_step(json!({ "timeout": text }));
        prop_assert_eq!(
            PLAN.is_valid(&plan),
            validate_accepts(&plan).is_ok(),
            "{:?}: {:?}",
            text,
            validate_accepts(&plan)
        );
    }
}
