//! `nuvira schema plan|edits|report|events`: the JSON Schema (draft 2020-12) of a plan file,
//! an edits file, the report JSON and one line of an events file, derived with `schemars` from
//! the types that read and write them, so that they cannot drift apart.
//!
//! The plan schema is the one the model planner sends ([`nuvira_plan::plan_schema`]). The
//! report and events schemas describe `schema_version` (see [`super::conventions`]); it is not
//! required, so that files written before it existed still validate.

use clap::ValueEnum;
use serde_json::{Value, json};

/// Arguments of `nuvira schema`.
#[derive(Debug, clap::Args)]
#[command(after_help = super::conventions::after_help(&[
    ("the plan schema, for an editor's YAML language server", "nuvira schema plan > nuvira-plan.schema.json"),
    ("check a report with a JSON Schema validator", "nuvira schema report > report.schema.json && check-jsonschema --schemafile report.schema.json report.json"),
]))]
pub struct Args {
    /// Which document.
    #[arg(value_enum)]
    pub kind: Kind,
}

/// The documents with a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// A plan file (`nuvira validate`, `nuvira run`).
    Plan,
    /// An edits file (`nuvira apply`).
    Edits,
    /// The report JSON (`nuvira report --format json`, `nuvira run --format json`).
    Report,
    /// One line of an events file (`nuvira run --events`).
    Events,
}

/// The schema of a document, as JSON.
pub(crate) fn schema(kind: Kind) -> Value {
    let generator = || schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let (mut schema, title, version) = match kind {
        Kind::Plan => (nuvira_plan::plan_schema(), "Nuvira plan file", None),
        Kind::Edits => (
            generator()
                .into_root_schema_for::<nuvira_edit::EditStepConfig>()
                .to_value(),
            "Nuvira edits file",
            None,
        ),
        Kind::Report => (
            generator()
                .into_root_schema_for::<nuvira_api::report::ExecutionReport>()
                .to_value(),
            "Nuvira report JSON",
            Some(nuvira_report::REPORT_SCHEMA_VERSION),
        ),
        Kind::Events => (
            generator()
                .into_root_schema_for::<nuvira_api::Event>()
                .to_value(),
            "Nuvira event (one line of an events file)",
            Some(crate::events::EVENTS_SCHEMA_VERSION),
        ),
    };
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("title".into(), json!(title));
        if let Some(version) = version
            && let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut)
        {
            props.insert(
                "schema_version".into(),
                json!({
                    "description": "The format's version; absent in files written before it existed.",
                    "type": "integer",
                    "const": version
                }),
            );
        }
    }
    schema
}

/// Prints the schema on stdout.
pub fn execute(args: Args) -> u8 {
    super::print_stdout(&format!("{:#}\n", schema(args.kind)));
    crate::exit::SUCCESS
}
