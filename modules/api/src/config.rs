//! Step configuration: [`PlanStep::config_as`](crate::PlanStep::config_as) reads a step's
//! `config` into the module's own type, and [`ConfigError`] says what is wrong with it.
//!
//! A module parses its config with the same call in [`Module::validate`](crate::Module::validate)
//! (before the run starts) and [`Module::run`](crate::Module::run), so what validation accepts is
//! exactly what the run reads.

/// Why a step's config is rejected: the step, the config field where known, and what is wrong.
///
/// [`Display`](std::fmt::Display) gives `` step `<id>`: <message> ``. The message is complete on
/// its own (it names the field itself, as in `` `paths[0]` `../` is rejected: ... ``); `field`
/// repeats the field's path for tools and is never printed a second time. There is no `source`:
/// a serde error's text is the message, so it is printed once.
///
/// ```
/// use nuvira_api::{ConfigError, PlanStep};
/// use serde_json::json;
///
/// #[derive(serde::Deserialize, Debug)]
/// #[serde(deny_unknown_fields)]
/// struct Config { #[allow(dead_code)] marker: Option<String> }
///
/// let step = PlanStep::new("count", "markers").with_config(json!({ "marker": 3 }));
/// let err = step.config_as::<Config>().unwrap_err();
/// assert_eq!(err.step, "count");
/// assert_eq!(err.to_string(), "step `count`: invalid type: integer `3`, expected a string");
///
/// let err = ConfigError::new("count", "`marker` must not be empty").at("marker");
/// assert_eq!(err.field.as_deref(), Some("marker"));
/// assert_eq!(err.to_string(), "step `count`: `marker` must not be empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step `{step}`: {message}")]
#[non_exhaustive]
pub struct ConfigError {
    /// The id of the step whose config is wrong.
    pub step: String,
    /// The path of the offending value inside `config` (`paths[0]`, `edits[1].path`), when the
    /// module knows it.
    pub field: Option<String>,
    /// What is wrong and what to write instead: a lowercase fragment, without the step.
    pub message: String,
}

impl ConfigError {
    /// An error for step `step` with a message (which names the field itself, if there is one).
    pub fn new(step: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            step: step.into(),
            field: None,
            message: message.into(),
        }
    }

    /// The error serde reported while reading step `step`'s config; its text is the message.
    pub fn from_serde(step: impl Into<String>, error: &serde_json::Error) -> Self {
        Self::new(step, error.to_string())
    }

    /// Builder-style: records the path of the offending value inside `config`.
    #[must_use]
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Builder-style: rewrites the message, e.g. to add the keys a module expects.
    #[must_use]
    pub fn map_message(mut self, f: impl FnOnce(String) -> String) -> Self {
        self.message = f(self.message);
        self
    }
}

impl From<ConfigError> for crate::ModuleError {
    /// A fatal [`ErrorCategory::InvalidConfig`](crate::ErrorCategory::InvalidConfig) failure
    /// whose message is the error's [`Display`](std::fmt::Display).
    fn from(e: ConfigError) -> Self {
        Self::invalid_config(e.to_string())
    }
}
