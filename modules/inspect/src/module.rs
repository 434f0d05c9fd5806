//! The `inspect` [`Module`].

use crate::{Hooks, InspectError, InspectOptions, classify, inspect};
use nuvira_api::{
    ConfigError, ErrorCategory, EventKind, Module, ModuleError, ModuleKind, PlanStep, StepContext,
    StepOutput, WriteSet, async_trait,
};
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The config of an `inspect` step.
///
/// ```yaml
/// - id: inspect
///   module: inspect
///   config: { keywords: [parse_config], max_files: 10, paths: [src], max_file_bytes: 200000 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct StepConfig {
    /// Keywords (identifiers) to look for besides the goal's words.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// How many files to describe (default 20).
    #[serde(default)]
    pub max_files: Option<usize>,
    /// Workspace-relative files or folders to restrict the walk to.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Files larger than this many bytes are skipped (default 102400).
    #[serde(default)]
    pub max_file_bytes: Option<u64>,
    /// Workspace-relative files to rank higher: the files the branch changed (`nuvira run`
    /// fills this in from git; see [`InspectOptions::prefer`]).
    #[serde(default)]
    pub prefer: Vec<String>,
    /// Workspace-relative files never inspected: generated files (`nuvira run` fills this in
    /// from `.gitattributes`; see [`InspectOptions::skip`]).
    #[serde(default)]
    pub skip: Vec<String>,
}

impl StepConfig {
    /// Reads and checks a step's config (`null` means all defaults).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the step and the bad key, or the step, index and path of a
    /// `paths` entry that leaves the workspace or points into `.git/`/`.nuvira/` (checked
    /// lexically, see [`check_path`](crate::check_path)).
    pub fn from_step(step: &PlanStep) -> Result<Self, ConfigError> {
        let config: Self = step.config_as().map_err(|e| {
            e.map_message(|e| {
                // serde lists the keys itself for an unknown one; say them once.
                let keys = if e.contains("expected one of") {
                    ""
                } else {
                    " (expected keys: keywords, max_files, paths, max_file_bytes, prefer, skip)"
                };
                format!("invalid inspect config: {e}{keys}")
            })
        })?;
        if config.max_files == Some(0) {
            return Err(
                ConfigError::new(&step.id, "`max_files` must be at least 1").at("max_files")
            );
        }
        if config.max_file_bytes == Some(0) {
            return Err(
                ConfigError::new(&step.id, "`max_file_bytes` must be at least 1")
                    .at("max_file_bytes"),
            );
        }
        for (i, path) in config.paths.iter().enumerate() {
            crate::check_path(path).map_err(|why| {
                ConfigError::new(
                    &step.id,
                    format!("`paths[{i}]` `{path}` is rejected: {why}"),
                )
                .at(format!("paths[{i}]"))
            })?;
        }
        Ok(config)
    }

    /// The inspection options this config asks for.
    pub fn options(&self) -> InspectOptions {
        let mut o = InspectOptions {
            keywords: self.keywords.clone(),
            paths: self.paths.clone(),
            prefer: self.prefer.clone(),
            skip: self.skip.clone(),
            ..InspectOptions::default()
        };
        if let Some(n) = self.max_files {
            o.max_files = n;
        }
        if let Some(n) = self.max_file_bytes {
            o.max_file_bytes = n;
        }
        o
    }
}

/// The `inspect` module: read-only, runs the inspection on its own thread so the async runtime
/// is never blocked, and stops at cancellation or the step's deadline.
///
/// With a model configured, the model picks the relevant files among the keyword ranking's
/// best candidates (see [`classify`](crate::classify)); without one, or when it fails, the
/// keyword ranking is the answer and `stats.llm_fallback_used` says so.
#[derive(Debug, Clone, Default)]
pub struct InspectModule;

impl InspectModule {
    /// The module.
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl Module for InspectModule {
    fn name(&self) -> &str {
        "inspect"
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Inspect
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        StepConfig::from_step(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let config = StepConfig::from_step(step)?;
        let mut options = config.options();
        let (max_files, content_files) = (options.max_files, options.content_files);
        let llm = ctx.llm().cloned();
        if llm.is_some() {
            // The model chooses among more candidates than are returned; the file-found and
            // completed events wait for its choice.
            options.max_files = max_files.saturating_mul(3).min(max_files + 40);
            options.content_files = options.max_files;
        }
        let goal = match &step.description {
            Some(d) => format!("{} {d}", ctx.goal()),
            None => ctx.goal().to_string(),
        };
        let root = ctx.workspace_root().to_path_buf();
        let events = ctx.events().clone();
        let cancel = ctx.cancel().clone();
        let deadline = ctx.deadline();
        let step_id = ctx.step_id().to_string();
        let defer_results = llm.is_some();
        let total_bytes = Arc::new(AtomicU64::new(0));
        let bytes_seen = total_bytes.clone();
        let thread_goal = goal.clone();
        let (tx, rx) = futures::channel::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("nuvira-inspect-{step_id}"))
            .spawn(move || {
                let emit = |kind| match kind {
                    EventKind::InspectCompleted { total_bytes, .. } if defer_results => {
                        bytes_seen.store(total_bytes, Ordering::Relaxed);
                    }
                    EventKind::InspectFileFound { .. } if defer_results => {}
                    kind => events.emit(Some(&step_id), kind),
                };
                let stop =
                    || cancel.is_cancelled() || deadline.is_some_and(|d| Instant::now() >= d);
                let hooks = Hooks {
                    emit: &emit,
                    stop: &stop,
                };
                let _ = tx.send(inspect(&root, &thread_goal, &options, &hooks));
            });
        if let Err(e) = spawned {
            return Err(ModuleError::fatal(
                ErrorCategory::Io,
                format!("start the inspection thread: {e}"),
            ));
        }
        let mut result = rx.await.map_err(|_| {
            ModuleError::fatal(
                ErrorCategory::Unknown,
                "inspect the workspace: the inspection thread ended without a result",
            )
        })?;
        if let (Some(llm), Ok(r)) = (&llm, &mut result) {
            classify::rerank(llm.as_ref(), &goal, r, max_files, content_files).await;
            for a in &r.artifacts {
                ctx.emit(EventKind::InspectFileFound {
                    path: a.path.clone(),
                    extension: a
                        .path
                        .rsplit('/')
                        .next()
                        .and_then(|n| n.rsplit_once('.'))
                        .map(|(_, e)| e.to_owned())
                        .unwrap_or_default(),
                    size: a.size,
                });
            }
            ctx.emit(EventKind::InspectCompleted {
                artifacts: r.artifacts.len(),
                total_bytes: total_bytes.load(Ordering::Relaxed),
            });
        }
        match result {
            Ok(r) => Ok(StepOutput::Inspection(r)),
            Err(InspectError::Stopped) if ctx.cancel().is_cancelled() => {
                Err(ModuleError::Cancelled)
            }
            Err(e @ InspectError::Stopped) => Err(ModuleError::recoverable(
                ErrorCategory::Timeout,
                e.to_string(),
            )),
            Err(e @ InspectError::Path { .. }) => Err(ModuleError::invalid_config(format!(
                "step `{}`: {e}",
                step.id
            ))),
            Err(e) => Err(ModuleError::fatal(ErrorCategory::Io, e.to_string())),
        }
    }
}
