//! Registering a custom module next to the built-ins and running a plan that uses it.
//!
//! `cargo run --example custom_module`
//!
//! The module, `count-markers`, counts a marker (default `TODO`) in the files its dependency (`inspect`)
//! found relevant. It depends on `nuvira-api` alone, as a third-party module would.

use nuvira::{EventBus, RunSettings};
use nuvira_api::{
    ConfigError, ErrorCategory, EventKind, ExecutionPlan, Module, ModuleError, ModuleKind,
    PlanStep, StepContext, StepOutput, WriteSet, async_trait,
};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// A `count-markers` step's config: `{ marker?: text }`. `validate` and `run` both read it with
/// `PlanStep::config_as`, so the run reads exactly what validation accepted.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CountConfig {
    /// The text to count.
    #[serde(default = "todo")]
    marker: String,
}

fn todo() -> String {
    "TODO".into()
}

impl CountConfig {
    fn of(step: &PlanStep) -> Result<Self, ConfigError> {
        let config: Self = step.config_as()?;
        if config.marker.is_empty() {
            return Err(
                ConfigError::new(&step.id, "`marker` is empty: give the text to count")
                    .at("marker"),
            );
        }
        Ok(config)
    }
}

/// Counts a marker (`TODO` unless configured) in the files the upstream `inspect` step found.
struct CountMarkers;

#[async_trait]
impl Module for CountMarkers {
    fn name(&self) -> &str {
        "count-markers"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Verify
    }

    // It only reads, so it may run beside anything.
    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        CountConfig::of(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let config = CountConfig::of(step)?;
        let marker = config.marker.as_str();
        let paths = ctx
            .find_upstream(|out| match out {
                StepOutput::Inspection(r) => Some(r.relevant_paths.clone()),
                _ => None,
            })
            .ok_or_else(|| {
                ModuleError::fatal(
                    ErrorCategory::InvalidConfig,
                    format!(
                        "step `{}` needs an inspect step among its dependencies",
                        step.id
                    ),
                )
            })?;
        let mut counts = serde_json::Map::new();
        for path in &paths {
            let text = std::fs::read_to_string(ctx.workspace_root().join(path)).unwrap_or_default();
            let n = text.matches(marker).count();
            if n > 0 {
                counts.insert(path.clone(), json!(n));
            }
        }
        ctx.emit(EventKind::Custom {
            name: "markers:counted".into(),
            data: json!({ "files": counts.len() }),
        });
        Ok(StepOutput::Value(
            json!({ "marker": marker, "counts": counts }),
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
    let engine = nuvira::defaults::engine()
        .workspace(&repo)
        .module(Arc::new(CountMarkers))
        .try_build()?;
    let plan = ExecutionPlan {
        goal: "Count the assertions in the statistics crate".into(),
        steps: vec![
            PlanStep::new("inspect", "inspect").with_config(json!({ "keywords": ["average"] })),
            PlanStep::new("markers", "count-markers")
                .depends_on(["inspect"])
                .with_config(json!({ "marker": "assert_eq!" })),
        ],
        ..Default::default()
    };
    let bus = EventBus::new("custom-module-example");
    let summary = engine
        .run(plan, bus.clone(), RunSettings::default())
        .await?;
    for event in bus.history() {
        println!(
            "{:>3} {:<20} {}",
            event.seq,
            event.kind.name(),
            event.step_id.as_deref().unwrap_or("")
        );
    }
    let counted = summary.step("markers").and_then(|s| s.output.clone());
    println!("status: {:?}", summary.status);
    if let Some(out) = counted {
        println!("output: {}", serde_json::to_string_pretty(&*out)?);
    }
    std::process::exit(summary.exit_code().into());
}
