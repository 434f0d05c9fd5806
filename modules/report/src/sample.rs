//! Realistic event streams of whole runs, for documentation, examples, tests and benchmarks.
//!
//! They are built from the same [`Event`] values the engine emits, so they exercise the
//! report exactly as a real run does: a plan in `run:started`, typed outputs in
//! `step:succeeded` / `step:failed`, streamed `test:failure` and `verify:check` events.

use nuvira_api::{
    ChangeKind, CheckStatus, EditPreview, EditResult, ErrorCategory, Event, EventKind,
    ExecutionPlan, FileChange, InspectionResult, PlanStep, RunStatus, SecurityWarning, Severity,
    StepOutput, SyntaxDiagnostic, TestFailure, TestResult, VerificationCheck, VerificationResult,
};
use serde_json::json;
use std::sync::Arc;

/// The Unix time (ms) the sample runs start at.
pub const T0: u64 = 1_764_480_000_000;

struct Stream {
    run: Arc<str>,
    events: Vec<Event>,
}

impl Stream {
    fn new(run: &str) -> Self {
        Self {
            run: run.into(),
            events: Vec::new(),
        }
    }

    fn at(&mut self, ms: u64, step: Option<&str>, kind: EventKind) {
        self.events.push(Event {
            seq: self.events.len() as u64,
            ts: T0 + ms,
            run_id: self.run.clone(),
            step_id: step.map(Into::into),
            kind,
        });
    }

    fn started(&mut self, ms: u64, step: &str, module: &str) {
        self.at(ms, Some(step), EventKind::StepReady);
        self.at(
            ms,
            Some(step),
            EventKind::StepStarted {
                module: module.into(),
                attempt: 1,
            },
        );
    }
}

const CONFIG_DIFF: &str = "--- a/src/config.rs\n+++ b/src/config.rs\n@@ -10,7 +10,7 @@\n use std::path::Path;\n \n-pub fn parse_config(path: &Path) -> Result<Config, Error> {\n+pub fn load_config(path: &Path) -> Result<Config, Error> {\n     let text = std::fs::read_to_string(path)?;\n     toml::from_str(&text).map_err(Error::from)\n }\n";
const MAIN_DIFF: &str = "--- a/src/main.rs\n+++ b/src/main.rs\n@@ -3,6 +3,7 @@\n fn main() -> anyhow::Result<()> {\n-    let cfg = config::parse_config(Path::new(\"app.toml\"))?;\n+    let cfg = config::load_config(Path::new(\"app.toml\"))?;\n+    let token = \"AKIAIOSFODNN7EXAMPLE\";\n     run(cfg)\n }\n";

fn plan(goal: &str) -> ExecutionPlan {
    let steps = vec![
        PlanStep::new("inspect", "inspect").with_config(json!({ "keywords": ["parse_config"] })),
        PlanStep::new("edit", "edit").depends_on(["inspect"]),
        PlanStep::new("edit-docs", "edit").depends_on(["inspect"]),
        PlanStep::new("test", "test").depends_on(["edit"]),
        PlanStep::new("verify", "verify").depends_on(["test", "edit-docs"]),
        PlanStep::new("report", "report").depends_on(["verify"]),
    ];
    ExecutionPlan {
        goal: goal.into(),
        steps,
        ..ExecutionPlan::default()
    }
}

fn inspection() -> StepOutput {
    let mut r = InspectionResult::default();
    r.relevant_paths = vec!["src/config.rs".into(), "src/main.rs".into()];
    r.stats.total_files = 42;
    StepOutput::Inspection(r)
}

fn edit_result() -> StepOutput {
    let mut preview = EditPreview::default();
    preview.changes = vec![
        FileChange::new("src/config.rs", ChangeKind::Modify, CONFIG_DIFF, 1, 1),
        FileChange::new("src/main.rs", ChangeKind::Modify, MAIN_DIFF, 2, 1),
    ];
    preview.validation.syntax_valid = true;
    preview.validation.security_warnings = vec![SecurityWarning::new(
        "src/main.rs",
        5,
        "aws-access-key",
        "an AWS access key id was added",
        Severity::Warning,
    )];
    preview.estimated_impact.files = 2;
    preview.estimated_impact.lines_added = 3;
    preview.estimated_impact.lines_removed = 2;
    preview.estimated_impact.level = "low".into();
    let mut r = EditResult::default();
    r.preview = preview;
    r.applied_count = 2;
    StepOutput::Edit(r)
}

fn docs_preview() -> StepOutput {
    let mut preview = EditPreview::default();
    preview.changes = vec![FileChange::new(
        "src/lib.rs",
        ChangeKind::Modify,
        "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -8,3 +8,3 @@\n-/// Parses the config.\n-pub use config::parse_config;\n+/// Loads the config.\n+pub use config::{load_config;\n",
        2,
        2,
    )];
    preview.validation.ast_issues = vec![SyntaxDiagnostic::new(
        "src/lib.rs",
        (9, 17),
        (9, 30),
        "MISSING",
        "expected `}` to close the `use` group",
    )];
    StepOutput::EditPreview(preview)
}

fn failures() -> Vec<TestFailure> {
    vec![
        TestFailure::new(
            "config::tests::loads_defaults",
            "assertion `left == right` failed\n  left: 8080\n right: 80",
        )
        .at("src/config.rs", Some(42))
        .with_output(
            "thread 'config::tests::loads_defaults' panicked at src/config.rs:42:9:\nassertion `left == right` failed\n::set-output name=pwned::1\n::add-mask::x\n",
        ),
        TestFailure::new("cli::tests::help_mentions_load", "help text still says `parse`")
            .at("tests/cli.rs", Some(17)),
    ]
}

/// Every test of a run by name: `passed` passing ones (a few milliseconds each), one skipped
/// when `skipped`, and the failures of [`failures`] when `failing`.
fn cases(passed: u32, skipped: bool, failing: bool) -> Vec<nuvira_api::TestCase> {
    use nuvira_api::{TestCase, TestOutcome};
    let mut out: Vec<TestCase> = (0..passed)
        .map(|i| {
            let mut c = TestCase::new(format!("config::tests::case_{i:02}"), TestOutcome::Passed);
            c.duration_ms = Some(u64::from(i) * 3 + 1);
            c
        })
        .collect();
    if skipped {
        out.push(TestCase::new(
            "net::tests::needs_network",
            TestOutcome::Skipped,
        ));
    }
    if failing {
        for f in failures() {
            let mut c = TestCase::new(f.name, TestOutcome::Failed);
            c.duration_ms = Some(12);
            out.push(c);
        }
    }
    out
}

fn test_result() -> StepOutput {
    let mut t = TestResult::default();
    t.success = false;
    t.passed = 12;
    t.failed = 2;
    t.skipped = 1;
    t.total = 14;
    t.failures = failures();
    t.cases = cases(12, true, true);
    t.duration_ms = 1840;
    t.framework = Some("cargo".into());
    t.command = Some("cargo test --no-fail-fast".into());
    StepOutput::Test(t)
}

/// A run where an edit introduces a secret, a second edit is rejected for a syntax error, two
/// tests fail, and verification and the report step are skipped.
pub fn failing_run() -> Vec<Event> {
    let mut s = Stream::new("run-7f3a");
    s.at(
        0,
        None,
        EventKind::RunStarted {
            plan: plan("Rename parse_config to load_config").into(),
            max_parallel: 4,
            dry_run: false,
        },
    );
    s.started(1, "inspect", "inspect");
    s.at(
        90,
        Some("inspect"),
        EventKind::InspectCompleted {
            artifacts: 2,
            total_bytes: 5120,
        },
    );
    s.at(
        95,
        Some("inspect"),
        EventKind::StepSucceeded {
            duration_ms: 94,
            output: Arc::new(inspection()),
        },
    );
    s.started(96, "edit", "edit");
    s.started(96, "edit-docs", "edit");
    s.at(
        180,
        Some("edit"),
        EventKind::EditWritten {
            path: "src/config.rs".into(),
            bytes: 2048,
            change: None,
        },
    );
    s.at(
        181,
        Some("edit"),
        EventKind::EditWritten {
            path: "src/main.rs".into(),
            bytes: 512,
            change: None,
        },
    );
    s.at(
        190,
        Some("edit"),
        EventKind::StepSucceeded {
            duration_ms: 94,
            output: Arc::new(edit_result()),
        },
    );
    s.at(
        200,
        Some("edit-docs"),
        EventKind::StepFailed {
            category: ErrorCategory::EditRejected,
            message: "edit of src/lib.rs introduces a syntax error at line 9: fix the `use` line"
                .into(),
            recoverable: false,
            evidence: vec!["src/lib.rs:9:17: MISSING }".into()],
            duration_ms: 104,
            output: Some(Arc::new(docs_preview())),
        },
    );
    s.at(
        201,
        Some("verify"),
        EventKind::StepSkipped {
            reason: "dependency `edit-docs` failed".into(),
            cause: Some("edit-docs".into()),
        },
    );
    s.started(202, "test", "test");
    s.at(
        210,
        Some("test"),
        EventKind::TestStarted {
            framework: "cargo".into(),
            sandbox: "local".into(),
            command: "cargo test --no-fail-fast".into(),
        },
    );
    for f in failures() {
        s.at(1500, Some("test"), EventKind::TestFailed { failure: f });
    }
    s.at(
        2050,
        Some("test"),
        EventKind::TestCompleted {
            success: false,
            passed: 12,
            failed: 2,
            skipped: 1,
            duration_ms: 1840,
            cases: cases(12, true, true),
        },
    );
    s.at(
        2060,
        Some("test"),
        EventKind::StepFailed {
            category: ErrorCategory::TestFailure,
            message: "2 of 14 tests failed".into(),
            recoverable: true,
            evidence: vec![
                "config::tests::loads_defaults".into(),
                "cli::tests::help_mentions_load".into(),
            ],
            duration_ms: 1858,
            output: Some(Arc::new(test_result())),
        },
    );
    s.at(
        2061,
        Some("report"),
        EventKind::StepSkipped {
            reason: "dependency `verify` was skipped".into(),
            cause: Some("verify".into()),
        },
    );
    s.at(
        2065,
        None,
        EventKind::RunCompleted {
            status: RunStatus::Failed,
            succeeded: 2,
            failed: 2,
            skipped: 2,
            duration_ms: 2065,
        },
    );
    s.events
}

/// A run where every step succeeds.
pub fn passing_run() -> Vec<Event> {
    let mut s = Stream::new("run-0c1d");
    let mut p = plan("Rename parse_config to load_config");
    p.steps.retain(|st| st.id != "edit-docs");
    if let Some(v) = p.steps.iter_mut().find(|st| st.id == "verify") {
        v.depends_on = vec!["test".into()];
    }
    s.at(
        0,
        None,
        EventKind::RunStarted {
            plan: p.into(),
            max_parallel: 4,
            dry_run: false,
        },
    );
    s.started(1, "inspect", "inspect");
    s.at(
        80,
        Some("inspect"),
        EventKind::StepSucceeded {
            duration_ms: 79,
            output: Arc::new(inspection()),
        },
    );
    s.started(81, "edit", "edit");
    let mut edit = EditResult::default();
    edit.preview.changes = vec![FileChange::new(
        "src/config.rs",
        ChangeKind::Modify,
        CONFIG_DIFF,
        1,
        1,
    )];
    edit.preview.validation.syntax_valid = true;
    edit.applied_count = 1;
    s.at(
        150,
        Some("edit"),
        EventKind::StepSucceeded {
            duration_ms: 69,
            output: Arc::new(StepOutput::Edit(edit)),
        },
    );
    s.started(151, "test", "test");
    let mut t = TestResult::default();
    t.success = true;
    t.passed = 14;
    t.total = 14;
    t.cases = cases(14, false, false);
    t.duration_ms = 1700;
    t.framework = Some("cargo".into());
    s.at(
        1900,
        Some("test"),
        EventKind::StepSucceeded {
            duration_ms: 1749,
            output: Arc::new(StepOutput::Test(t)),
        },
    );
    s.started(1901, "verify", "verify");
    let mut v = VerificationResult::default();
    v.passed = true;
    v.overall_score = 0.92;
    v.checks = vec![
        VerificationCheck::new("syntax", CheckStatus::Passed, true, "no syntax errors"),
        VerificationCheck::new("tests", CheckStatus::Passed, true, "14 passed"),
        {
            let mut c =
                VerificationCheck::new("lint", CheckStatus::Warning, false, "1 clippy warning");
            c.findings = vec![
                nuvira_api::CheckFinding::new("this function could be `const`")
                    .at("src/config.rs", Some(12)),
            ];
            c
        },
    ];
    v.suggestions = vec!["add a test for a missing config file".into()];
    for c in &v.checks {
        s.at(
            1950,
            Some("verify"),
            EventKind::VerifyCheck { check: c.clone() },
        );
    }
    s.at(
        2000,
        Some("verify"),
        EventKind::StepSucceeded {
            duration_ms: 99,
            output: Arc::new(StepOutput::Verification(v)),
        },
    );
    s.started(2001, "report", "report");
    s.at(
        2010,
        Some("report"),
        EventKind::StepSucceeded {
            duration_ms: 9,
            output: Arc::new(StepOutput::Empty),
        },
    );
    s.at(
        2011,
        None,
        EventKind::RunCompleted {
            status: RunStatus::Succeeded,
            succeeded: 5,
            failed: 0,
            skipped: 0,
            duration_ms: 2011,
        },
    );
    s.events
}

/// A large run of about `events` events (for benchmarks): a chain of steps, each a test step
/// with streamed failures or an edit step with a diff, ending in `run:completed`.
pub fn large_run(events: usize) -> impl Iterator<Item = Event> {
    // Each step produces 6 events: ready, started, 2 test:failure or edit:written, progress,
    // terminal.
    let steps = (events.saturating_sub(2) / 6).max(1);
    let run: Arc<str> = "run-bench".into();
    let plan = ExecutionPlan {
        goal: "benchmark".into(),
        steps: (0..steps)
            .map(|i| {
                let s = PlanStep::new(format!("s{i}"), if i % 2 == 0 { "test" } else { "edit" });
                if i == 0 {
                    s
                } else {
                    s.depends_on([format!("s{}", i - 1)])
                }
            })
            .collect(),
        ..ExecutionPlan::default()
    };
    let mut seq = 0u64;
    let mut next = move |step: Option<String>, kind: EventKind| {
        let e = Event {
            seq,
            ts: T0 + seq,
            run_id: run.clone(),
            step_id: step.map(Into::into),
            kind,
        };
        seq += 1;
        e
    };
    let first = next(
        None,
        EventKind::RunStarted {
            plan: plan.into(),
            max_parallel: 8,
            dry_run: false,
        },
    );
    let body = (0..steps).flat_map(move |i| {
        let id = format!("s{i}");
        let mut out = Vec::with_capacity(6);
        out.push(next(Some(id.clone()), EventKind::StepReady));
        out.push(next(
            Some(id.clone()),
            EventKind::StepStarted {
                module: if i % 2 == 0 { "test" } else { "edit" }.into(),
                attempt: 1,
            },
        ));
        if i % 2 == 0 {
            let fails: Vec<TestFailure> = (0..2)
                .map(|k| {
                    TestFailure::new(format!("mod{i}::case{k}"), "assertion failed: x == y")
                        .at(format!("src/m{i}.rs"), Some(10 + k))
                        .with_output("thread panicked at src/lib.rs:10:5\nleft: 1\nright: 2\n")
                })
                .collect();
            for f in &fails {
                out.push(next(
                    Some(id.clone()),
                    EventKind::TestFailed { failure: f.clone() },
                ));
            }
            out.push(next(
                Some(id.clone()),
                EventKind::TestCompleted {
                    success: false,
                    passed: 40,
                    failed: 2,
                    skipped: 0,
                    duration_ms: 100,
                    cases: Vec::new(),
                },
            ));
            let mut t = TestResult::default();
            t.passed = 40;
            t.failed = 2;
            t.total = 42;
            t.failures = fails;
            t.framework = Some("cargo".into());
            out.push(next(
                Some(id),
                EventKind::StepSucceeded {
                    duration_ms: 100,
                    output: Arc::new(StepOutput::Test(t)),
                },
            ));
        } else {
            let path = format!("src/m{i}.rs");
            for _ in 0..2 {
                out.push(next(
                    Some(id.clone()),
                    EventKind::EditWritten {
                        path: path.clone(),
                        bytes: 900,
                        change: None,
                    },
                ));
            }
            out.push(next(
                Some(id.clone()),
                EventKind::EditValidating {
                    path: path.clone(),
                    syntax_valid: true,
                    issues: 0,
                },
            ));
            let mut e = EditResult::default();
            e.preview.changes = vec![FileChange::new(path, ChangeKind::Modify, CONFIG_DIFF, 1, 1)];
            e.applied_count = 1;
            out.push(next(
                Some(id),
                EventKind::StepSucceeded {
                    duration_ms: 20,
                    output: Arc::new(StepOutput::Edit(e)),
                },
            ));
        }
        out
    });
    let total = steps as u64;
    std::iter::once(first)
        .chain(body)
        .chain(std::iter::once(Event {
            seq: 1 + total * 6,
            ts: T0 + 1 + total * 6,
            run_id: "run-bench".into(),
            step_id: None,
            kind: EventKind::RunCompleted {
                status: RunStatus::Failed,
                succeeded: steps,
                failed: 0,
                skipped: 0,
                duration_ms: 1 + total * 6,
            },
        }))
}
