//! The plan: an [`ExecutionPlan`] of [`PlanStep`]s forming a dependency graph, and the
//! [`Planner`] trait that produces one.
//!
//! Plans are plain data. Validation (cycles, dangling references, orphans, unknown modules)
//! lives in the engine, which has the module registry and a graph library; a plan produced at run
//! time by a planner passes the same validation as one read from a file.

use crate::{ConfigError, async_trait};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// A whole plan: the goal, the steps and (optionally) which steps the goal is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(transform = schema::plan_aliases))]
#[serde(deny_unknown_fields)]
pub struct ExecutionPlan {
    /// What the plan is for, in words.
    #[serde(default)]
    pub goal: String,
    /// The steps the goal is about. When absent, every step whose module's kind is an output by
    /// default is one (`verify` and `report`, see [`ModuleKind`](crate::ModuleKind)); when
    /// there are none, the single sink of the graph is.
    ///
    /// `outputs: sinks` makes every final step (one that no step depends on) an output, for
    /// general graphs with several ends; in memory it is the list
    /// `[`[`ExecutionPlan::SINKS`]`]`, which may also stand beside named steps.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "outputs_serde::serialize",
        deserialize_with = "outputs_serde::deserialize"
    )]
    pub outputs: Option<Vec<String>>,
    /// The steps, in any order; dependencies decide when each runs.
    #[serde(default)]
    pub steps: Vec<PlanStep>,
    /// How hard the planner judged the goal to be.
    #[serde(
        default,
        alias = "estimatedComplexity",
        skip_serializing_if = "Option::is_none"
    )]
    pub estimated_complexity: Option<Complexity>,
    /// A model the planner suggests for the work (`provider:model`).
    #[serde(
        default,
        alias = "suggestedProvider",
        skip_serializing_if = "Option::is_none"
    )]
    pub suggested_provider: Option<String>,
    /// MCP servers the plan's `mcp` steps call, by name: `{command, args, env}` (started on
    /// stdio) or `{url}` (streamable HTTP). Declared once, shared by the steps; the `mcp`
    /// module (nuvira-mcp) reads them.
    #[serde(
        default,
        alias = "mcpServers",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub mcp_servers: std::collections::BTreeMap<String, serde_json::Value>,
}

impl ExecutionPlan {
    /// The entry of [`outputs`](Self::outputs) that stands for every final step (`outputs:
    /// sinks` in a plan file). It can never be a step id (ids are `[A-Za-z0-9_.-]+`).
    pub const SINKS: &'static str = "*";

    /// The step with this id, if any.
    pub fn step(&self, id: &str) -> Option<&PlanStep> {
        self.steps.iter().find(|s| s.id == id)
    }
}

/// How complex a goal is, as judged by a planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Complexity {
    /// One or two files, an obvious change.
    Simple,
    /// A handful of files.
    Moderate,
    /// Many files or a design decision.
    Complex,
}

/// One node of the plan graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(transform = schema::step_aliases))]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// Unique id, matching `[A-Za-z0-9_.-]+`. A null or blank id does not deserialize (YAML
    /// would otherwise read `id: null` as the id `"null"`).
    #[serde(deserialize_with = "present_id")]
    #[cfg_attr(
        feature = "schemars",
        schemars(with = "String", pattern(r"^[A-Za-z0-9_.-]+$"))
    )]
    pub id: String,
    /// The module that runs the step (`inspect`, `edit`, `test`, `verify`, `execute`,
    /// `report`, or any registered name).
    #[cfg_attr(feature = "schemars", schemars(length(min = 1)))]
    pub module: String,
    /// What the step is for, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Ids of the steps that must succeed before this one starts (`dependsOn` is accepted).
    #[serde(default, alias = "dependsOn", skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Module-specific configuration.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[cfg_attr(
        feature = "schemars",
        schemars(with = "Option<serde_json::Map<String, Value>>")
    )]
    pub config: Value,
    /// The longest the step may run (`"120s"`, `"2m"`, or seconds); the engine's default applies
    /// when absent.
    #[serde(
        default,
        with = "crate::duration::serde_opt_nonzero",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(
        feature = "schemars",
        schemars(schema_with = "crate::duration::timeout_schema")
    )]
    pub timeout: Option<Duration>,
    /// Paths (relative to the workspace root) this step writes, for modules that cannot derive
    /// their write set from the config. Steps whose write sets overlap never run together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
}

/// A step id that is there: not null (`id: null`, `id: ~`, `id:` in YAML) and not blank.
fn present_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error as _;
    match Option::<String>::deserialize(d)? {
        Some(id) if !id.trim().is_empty() => Ok(id),
        _ => Err(D::Error::custom(
            "the step has no id: give it a unique `id` of letters, digits, `_`, `.` or `-`",
        )),
    }
}

impl PlanStep {
    /// A step with an id and a module and nothing else.
    pub fn new(id: impl Into<String>, module: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            module: module.into(),
            description: None,
            depends_on: Vec::new(),
            config: Value::Null,
            timeout: None,
            writes: Vec::new(),
        }
    }

    /// Builder-style: adds dependencies.
    #[must_use]
    pub fn depends_on<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.depends_on.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Builder-style: sets the config.
    #[must_use]
    pub fn with_config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }

    /// Builder-style: declares paths the step writes (its `writes:`), so that steps writing
    /// elsewhere may run beside it. A module's own [`write_set`](crate::Module::write_set), if
    /// it has one, decides instead.
    ///
    /// ```
    /// let step = nuvira_api::PlanStep::new("fmt", "execute").with_writes(["src/", "Cargo.lock"]);
    /// assert_eq!(step.writes, ["src/", "Cargo.lock"]);
    /// ```
    #[must_use]
    pub fn with_writes<I, S>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.writes.extend(paths.into_iter().map(Into::into));
        self
    }

    /// Builder-style: sets the timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// A config value by key, if the config is an object that has it.
    pub fn config_value(&self, key: &str) -> Option<&Value> {
        self.config.as_object().and_then(|m| m.get(key))
    }

    /// A string config value by key.
    pub fn config_str(&self, key: &str) -> Option<&str> {
        self.config_value(key).and_then(Value::as_str)
    }

    /// The step's config read into a module's config type. A step without config (`null`)
    /// reads as an empty object, so fields with `#[serde(default)]` take their defaults.
    ///
    /// Call it from both [`Module::validate`](crate::Module::validate) and
    /// [`Module::run`](crate::Module::run), so the run reads exactly what validation accepted.
    ///
    /// # Errors
    /// A [`ConfigError`] naming this step, with serde's message (which names an unknown or
    /// missing field and the expected type).
    ///
    /// ```
    /// use nuvira_api::PlanStep;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, Debug, PartialEq)]
    /// #[serde(deny_unknown_fields)]
    /// struct Config {
    ///     #[serde(default)]
    ///     keywords: Vec<String>,
    /// }
    ///
    /// let step = PlanStep::new("look", "inspect");
    /// assert_eq!(step.config_as::<Config>().unwrap(), Config { keywords: vec![] });
    ///
    /// let typo = step.with_config(json!({ "keyword": ["x"] }));
    /// let err = typo.config_as::<Config>().unwrap_err();
    /// assert_eq!(err.to_string(), "step `look`: unknown field `keyword`, expected `keywords`");
    /// ```
    pub fn config_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let parsed = if self.config.is_null() {
            T::deserialize(serde_json::json!({}))
        } else {
            T::deserialize(&self.config)
        };
        parsed.map_err(|e| ConfigError::from_serde(&self.id, &e))
    }
}

/// What a [`Planner`] is asked for.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct PlanRequest {
    /// The user's goal.
    pub goal: String,
    /// A rendering of the repository's file tree, if inspected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_tree: Option<String>,
    /// Extra context (previous runs, user notes). Treated as untrusted data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

impl PlanRequest {
    /// A request for a goal and nothing else.
    pub fn new(goal: impl Into<String>) -> Self {
        Self {
            goal: goal.into(),
            ..Self::default()
        }
    }
}

/// Why a planner could not produce a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The plan source could not be read or parsed.
    #[error("failed to read plan {source_name}: {message}")]
    Source {
        /// The file or source the plan came from.
        source_name: String,
        /// What was wrong, with line and column where known.
        message: String,
    },
    /// The planner produced a plan that does not validate.
    #[error("the planner produced an invalid plan: {0}")]
    Invalid(String),
    /// The model behind the planner failed.
    #[error("the planner's model failed: {0}")]
    Llm(#[from] crate::LlmError),
}

/// Produces an [`ExecutionPlan`] for a goal.
///
/// The engine validates every plan a planner returns before anything runs.
///
/// # Errors
/// Implementations return [`PlanError`] when no plan can be produced.
///
/// ```
/// use nuvira_api::{async_trait, ExecutionPlan, PlanError, PlanRequest, PlanStep, Planner};
///
/// struct OneStep;
///
/// #[async_trait]
/// impl Planner for OneStep {
///     fn name(&self) -> &str { "one-step" }
///     async fn plan(&self, req: &PlanRequest) -> Result<ExecutionPlan, PlanError> {
///         Ok(ExecutionPlan { goal: req.goal.clone(), steps: vec![PlanStep::new("report", "report")], ..Default::default() })
///     }
/// }
/// ```
#[async_trait]
pub trait Planner: Send + Sync {
    /// The planner's name (`file`, `template`, `llm`, ...).
    fn name(&self) -> &str;
    /// Produces a plan for the request.
    async fn plan(&self, request: &PlanRequest) -> Result<ExecutionPlan, PlanError>;
}

/// Schema transforms: the aliases serde accepts (`dependsOn`, `estimatedComplexity`,
/// `suggestedProvider`) as properties of their own, since `deny_unknown_fields` makes the schema
/// refuse every other key.
#[cfg(feature = "schemars")]
mod schema {
    use schemars::Schema;

    fn alias(schema: &mut Schema, field: &str, alias: &str) {
        if let Some(props) = schema
            .get_mut("properties")
            .and_then(serde_json::Value::as_object_mut)
            && let Some(v) = props.get(field).cloned()
        {
            props.insert(alias.to_owned(), v);
        }
    }

    /// `estimatedComplexity`, `suggestedProvider`; `steps` required with at least one step
    /// (a plan without steps does not validate).
    pub(super) fn plan_aliases(schema: &mut Schema) {
        alias(schema, "estimated_complexity", "estimatedComplexity");
        alias(schema, "suggested_provider", "suggestedProvider");
        if let Some(steps) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut("steps"))
            .and_then(serde_json::Value::as_object_mut)
        {
            steps.insert("minItems".into(), 1.into());
        }
        let required = schema
            .ensure_object()
            .entry("required")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let Some(list) = required.as_array_mut()
            && !list.iter().any(|v| v == "steps")
        {
            list.push("steps".into());
        }
    }

    /// `dependsOn`.
    pub(super) fn step_aliases(schema: &mut Schema) {
        alias(schema, "depends_on", "dependsOn");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_on_alias_and_timeout_text_are_accepted() {
        let step: PlanStep =
            serde_json::from_str(r#"{"id":"t","module":"test","dependsOn":["e"],"timeout":"2m"}"#)
                .unwrap();
        assert_eq!(step.depends_on, vec!["e"]);
        assert_eq!(step.timeout, Some(Duration::from_secs(120)));
    }

    #[test]
    fn a_null_or_blank_id_or_a_zero_timeout_is_refused() {
        for text in [r#"{"id":null,"module":"x"}"#, r#"{"id":"  ","module":"x"}"#] {
            let err = serde_json::from_str::<PlanStep>(text).unwrap_err();
            assert!(err.to_string().contains("no id"), "{err}");
        }
        let err = serde_json::from_str::<PlanStep>(r#"{"id":"a","module":"x","timeout":"0s"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("0s"), "{err}");
    }

    #[test]
    fn unknown_fields_are_rejected_so_typos_surface() {
        let err = serde_json::from_str::<PlanStep>(r#"{"id":"t","module":"x","depend_on":["e"]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("depend_on"), "{err}");
    }
}

/// `outputs:` is a list of step ids or the word `sinks`.
mod outputs_serde {
    use super::ExecutionPlan;
    use serde::{Deserializer, Serializer};

    struct Outputs;

    impl<'de> serde::de::Visitor<'de> for Outputs {
        type Value = Option<Vec<String>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of step ids, or `sinks` for every final step")
        }

        fn visit_str<E: serde::de::Error>(self, w: &str) -> Result<Self::Value, E> {
            if w == "sinks" {
                Ok(Some(vec![ExecutionPlan::SINKS.to_owned()]))
            } else {
                Err(E::custom(format!(
                    "`outputs` is `{w}`: use a list of step ids, or `sinks` for every final step"
                )))
            }
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(id) = seq.next_element::<String>()? {
                ids.push(id);
            }
            Ok(Some(ids))
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<String>>, D::Error> {
        d.deserialize_option(Outputs)
    }

    #[allow(
        clippy::ref_option,
        reason = "serde's serialize_with hands the field by reference"
    )]
    pub(super) fn serialize<S: Serializer>(
        v: &Option<Vec<String>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(ids) if ids.len() == 1 && ids[0] == ExecutionPlan::SINKS => {
                s.serialize_str("sinks")
            }
            Some(ids) => s.collect_seq(ids),
            None => s.serialize_none(),
        }
    }
}
