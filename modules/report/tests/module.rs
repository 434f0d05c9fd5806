use nuvira_api::{EventKind, Module, ModuleKind, PlanStep, StepContext, StepOutput, WriteSet};
use nuvira_report::{Format, ReportModule, sample};
use nuvira_test_support::{Recorder, Upstream};
use std::sync::Arc;

/// The successful step outputs of the passing sample run, in order.
fn upstream() -> Upstream {
    Upstream(
        sample::passing_run()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::StepSucceeded { output, .. }
                    if e.step_id.as_deref() != Some("report") =>
                {
                    Some((e.step_id.unwrap().to_string(), output))
                }
                _ => None,
            })
            .collect(),
    )
}

fn ctx(root: &std::path::Path, sink: Arc<Recorder>, dry_run: bool) -> StepContext {
    StepContext::standalone(root)
        .with_identity("run-9", "report", "Rename parse_config")
        .with_inputs(Arc::new(upstream()))
        .with_events(sink)
        .with_execution(dry_run, 1, Arc::new(nuvira_api::NeverCancelled), None, None)
}

fn step(config: serde_json::Value) -> PlanStep {
    PlanStep::new("report", "report")
        .depends_on(["verify"])
        .with_config(config)
}

#[tokio::test]
async fn a_report_step_writes_each_format_and_emits_report_generated() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Recorder::default());
    let m = ReportModule;
    assert_eq!((m.name(), m.kind()), ("report", ModuleKind::Report));
    let st = step(
        serde_json::json!({ "formats": ["html", "sarif", "json"], "output_dir": "out/reports" }),
    );
    assert_eq!(m.write_set(&st), WriteSet::ReadOnly);
    m.validate(&st).unwrap();
    let out = m
        .run(&st, &ctx(dir.path(), sink.clone(), false))
        .await
        .unwrap();
    let StepOutput::Report(report) = out else {
        panic!("not a report")
    };
    assert_eq!(report.run_id, "run-9");
    assert_eq!(report.goal, "Rename parse_config");
    assert_eq!(report.counts.steps, 4);
    assert_eq!(report.counts.tests_passed, 14);
    for f in [Format::Html, Format::Sarif, Format::Json] {
        let path = dir.path().join("out/reports").join(f.file_name());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            nuvira_report::render(&report, f),
            "{}",
            path.display()
        );
    }
    let events = sink.events();
    let generated: Vec<_> = events
        .iter()
        .filter_map(|(s, k)| match k {
            EventKind::ReportGenerated {
                report_id,
                format,
                path,
            } => {
                assert_eq!(s.as_deref(), Some("report"));
                assert_eq!(report_id, &report.report_id);
                Some((format.clone(), path.clone().unwrap()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        generated,
        [
            ("html".into(), "out/reports/report.html".into()),
            ("sarif".into(), "out/reports/report.sarif".into()),
            ("json".into(), "out/reports/report.json".into()),
        ]
    );
}

#[tokio::test]
async fn the_default_is_json_under_dot_nuvira_and_a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Recorder::default());
    ReportModule
        .run(
            &step(serde_json::Value::Null),
            &ctx(dir.path(), sink.clone(), false),
        )
        .await
        .unwrap();
    assert!(
        dir.path()
            .join(".nuvira/reports/run-9/report.json")
            .is_file()
    );

    let dry = tempfile::tempdir().unwrap();
    let out = ReportModule
        .run(&step(serde_json::Value::Null), &ctx(dry.path(), sink, true))
        .await
        .unwrap();
    assert!(matches!(out, StepOutput::Report(_)));
    assert_eq!(std::fs::read_dir(dry.path()).unwrap().count(), 0);
}

#[test]
fn bad_config_is_rejected_before_the_run_with_the_key_named() {
    let m = ReportModule;
    let err = m
        .validate(&step(serde_json::json!({ "formats": ["pdf"] })))
        .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("formats[0]"));
    let err = err.to_string();
    assert!(err.contains("formats[0]") && err.contains("`pdf`"), "{err}");
    let err = m
        .validate(&step(serde_json::json!({ "output_dir": "../elsewhere" })))
        .unwrap_err()
        .to_string();
    assert!(err.contains("leaves the workspace"), "{err}");
    let err = m
        .validate(&step(serde_json::json!({ "output_dir": "/tmp/x" })))
        .unwrap_err()
        .to_string();
    assert!(err.contains("absolute"), "{err}");
    let err = m
        .validate(&step(serde_json::json!({ "format": ["json"] })))
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown config key `format`"), "{err}");
    // Regression: a config that is not a mapping was accepted and ignored.
    let err = m
        .validate(&step(serde_json::json!("json")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected a mapping such as"), "{err}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlinked_output_dir_leading_outside_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
    let err = ReportModule
        .run(
            &step(serde_json::json!({ "output_dir": "link" })),
            &ctx(dir.path(), Arc::new(Recorder::default()), false),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outside the workspace"), "{err}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

/// The plan of the sample run, as the engine hands it to every step's context.
fn sample_plan() -> Arc<nuvira_api::ExecutionPlan> {
    sample::passing_run()
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::RunStarted { plan, .. } => Some(plan),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn a_report_step_draws_the_edges_between_its_upstream_steps_from_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = sample_plan();
    let st = step(serde_json::json!({ "formats": ["json"] }));
    let with_plan =
        ctx(dir.path(), Arc::new(Recorder::default()), true).with_plan(Some(plan.clone()));
    let StepOutput::Report(report) = ReportModule.run(&st, &with_plan).await.unwrap() else {
        panic!("not a report")
    };
    let reported: Vec<&str> = report.steps.iter().map(|s| s.id.as_str()).collect();
    let mut edges = 0;
    for rec in &report.steps {
        let planned = plan.steps.iter().find(|s| s.id == rec.id).unwrap();
        // Every edge between reported steps is there, and none to a step the report lacks.
        let expected: Vec<&String> = planned
            .depends_on
            .iter()
            .filter(|d| reported.contains(&d.as_str()))
            .collect();
        assert_eq!(
            rec.depends_on.iter().collect::<Vec<_>>(),
            expected,
            "{}",
            rec.id
        );
        edges += rec.depends_on.len();
    }
    assert!(
        edges > 0,
        "the sample plan has edges between its upstream steps"
    );
    // Without the plan the same step knows no edges.
    let StepOutput::Report(plain) = ReportModule
        .run(&st, &ctx(dir.path(), Arc::new(Recorder::default()), true))
        .await
        .unwrap()
    else {
        panic!("not a report")
    };
    assert!(plain.steps.iter().all(|s| s.depends_on.is_empty()));
}
