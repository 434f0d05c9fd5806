//! Agent runs: the engine wired with the recover stage and model-written edits.
//!
//! [`configure`] is what `nuvira run` uses: every built-in module is wrapped by the recover
//! stage ([`nuvira_recover::RecoverStage::wrap`]: steps may carry `config.recover`, a model
//! chosen by `switch-model` is preferred, success after a repair is reported), the edit module
//! gets the [`nuvira_recover::ModelEditor`] hook when a model is configured, and the same stage
//! is the engine's recovery policy ([`nuvira_recover::RecoverStage::standard`], with the
//! `debug-tests` loop). [`llm_planner`] gives the model planner the engine's own validation.

use crate::engine::{Engine, EngineBuilder};
use nuvira_api::{EventSink, LlmClient, Module};
use nuvira_recover::{ModelEditor, RecoverStage};
use std::sync::Arc;

/// The recover stage with the standard editor (what [`configure`] installs).
pub fn recover_stage() -> Arc<RecoverStage> {
    Arc::new(RecoverStage::standard(nuvira_edit::Editor::standard()))
}

/// Adds the recover stage to `builder` (see the module docs), `stage` or
/// [`recover_stage`]. The model itself is set with [`EngineBuilder::llm`].
///
/// ```
/// let engine = nuvira::agent::configure(nuvira::defaults::engine(), None, None).build();
/// assert!(engine.registry().contains("edit"));
/// ```
pub fn configure(
    builder: EngineBuilder,
    llm: Option<&Arc<dyn LlmClient>>,
    stage: Option<Arc<RecoverStage>>,
) -> EngineBuilder {
    let stage = stage.unwrap_or_else(recover_stage);
    let edit = edit_module(llm);
    let modules: Vec<Arc<dyn Module>> = crate::defaults::modules()
        .into_iter()
        .map(|m| {
            if m.name() == "edit" {
                Arc::new(edit.clone()) as Arc<dyn Module>
            } else {
                m
            }
        })
        .collect();
    let builder = modules
        .into_iter()
        .fold(builder, |b, m| b.replace_module(stage.wrap(m)));
    builder.recovery(stage)
}

/// The edit module [`configure`] installs: the standard editor, with the model-written edits
/// hook when a model is configured.
pub(crate) fn edit_module(llm: Option<&Arc<dyn LlmClient>>) -> nuvira_edit::EditModule {
    let editor = nuvira_edit::Editor::standard();
    let edit = nuvira_edit::EditModule::new(editor.clone());
    if llm.is_some() {
        edit.with_instructions(Arc::new(ModelEditor::new(editor)))
    } else {
        edit
    }
}

/// A model planner whose plans must also pass `engine`'s validation, emitting `plan:*` events
/// to `events`.
pub fn llm_planner(
    llm: Arc<dyn LlmClient>,
    engine: Arc<Engine>,
    events: Arc<dyn EventSink>,
) -> nuvira_plan::LlmPlanner {
    nuvira_plan::LlmPlanner::new(llm)
        .with_events(events)
        .with_validator(Arc::new(move |plan| match engine.validate(plan) {
            Ok(_) => Vec::new(),
            Err(errs) => errs.problems.iter().map(ToString::to_string).collect(),
        }))
}

/// The module registry of an engine [`configure`]d for agent runs: what `nuvira validate`
/// should check plans against, so that `config.recover` is accepted and checked.
pub fn registry() -> crate::ModuleRegistry {
    configure(crate::defaults::engine(), None, None)
        .build()
        .registry()
        .clone()
}
