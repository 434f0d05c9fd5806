//! # nuvira-plan — where plans come from
//!
//! A plan is read from a file ([`load_file`], [`FilePlanner`]) or produced by a planner. This
//! crate owns the file formats: YAML, JSON and TOML, chosen by extension, all deserialized into
//! the same [`ExecutionPlan`](nuvira_api::ExecutionPlan). Every parse error names the file, the
//! line and the column, and a [`LoadedPlan`] keeps the source text so that later validation
//! errors can point at the line where a step is defined.
//!
//! The edits files of `nuvira apply` (a top-level `edits` list) are read by the same code
//! ([`load_edits`]): the same formats, errors and byte order mark handling, and a
//! [`LoadedEdits`] says at which line each entry, and each field of an entry, is.
//!
//! YAML is read with `serde_yaml_ng`, a maintained fork of the deprecated `serde_yaml` with the
//! same data model and error locations; we chose it over `serde_yml` (unmaintained, unsound
//! releases) and over the younger `serde-saphyr` because it is a drop-in with a long track record.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod edits;
mod file;
mod index;
mod limits;
mod llm;
mod schema;
mod template;

pub use edits::{LoadedEdits, load_edits, parse_edits};
pub use file::{FilePlanner, LoadError, LoadedPlan, PlanFormat, load_file, parse_str};
pub use limits::{
    DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_BYTES_ENV, MAX_NESTING_DEPTH, check_depth, max_input_bytes,
};
pub use llm::{EXECUTION_PLAN, PlanValidator, check_plan, plan_schema};
#[cfg(feature = "llm")]
pub use llm::{LlmPlanner, McpToolHint, McpTools};
pub use template::TemplatePlanner;
