//! The [`Engine`]: a module registry plus run defaults; validates plans and runs them.

use crate::events::EventBus;
use crate::registry::{AlreadyRegistered, ModuleRegistry};
use crate::scheduler::{self, RecoveryPolicy, RunOptions, RunSummary};
use crate::validate::{self, ValidatedPlan, ValidationErrors};
use nuvira_api::{ExecutionPlan, LlmClient, Module, WriteSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Validates and runs plans with a set of registered modules.
///
/// ```no_run
/// # async fn demo(plan: nuvira_api::ExecutionPlan) -> Result<(), Box<dyn std::error::Error>> {
/// use nuvira_engine::{Engine, EventBus};
/// // No modules at all: register your own with `.module(..)`. The `nuvira` facade's
/// // `nuvira::defaults::engine()` starts from the built-in ones (inspect, edit, test, ...).
/// let engine = Engine::builder().workspace(".").build();
/// let summary = engine.run(plan, EventBus::new("run-1"), Default::default()).await?;
/// println!("{:?}", summary.status);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Engine {
    registry: ModuleRegistry,
    workspace: PathBuf,
    max_parallel: Option<MaxParallel>,
    default_timeout: Option<Duration>,
    llm: Option<Arc<dyn LlmClient>>,
    recovery: Option<Arc<dyn RecoveryPolicy>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("modules", &self.registry)
            .field("workspace", &self.workspace)
            .field("max_parallel", &self.max_parallel)
            .finish_non_exhaustive()
    }
}

/// How many steps of a run may run at once.
///
/// The default is [`Cpus`](Self::Cpus), right for steps that compute (builds, test suites,
/// formatters); [`Unbounded`](Self::Unbounded) suits steps that mostly wait (model calls,
/// network, sleeps): 1,000 independent 1 ms steps take about 1 s at two at a time and a few
/// milliseconds unbounded.
///
/// ```
/// use nuvira_engine::MaxParallel;
/// assert_eq!("unbounded".parse::<MaxParallel>(), Ok(MaxParallel::Unbounded));
/// assert_eq!("8".parse::<MaxParallel>(), Ok(MaxParallel::N(8)));
/// assert_eq!(MaxParallel::N(0).get(), 1);
/// assert!(MaxParallel::Cpus.get() >= 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MaxParallel {
    /// Every ready step starts at once.
    Unbounded,
    /// One step per CPU (`std::thread::available_parallelism`, 2 when unknown).
    #[default]
    Cpus,
    /// At most this many (0 counts as 1).
    N(usize),
}

impl MaxParallel {
    /// The cap as a number (`usize::MAX` for [`Unbounded`](Self::Unbounded)).
    pub fn get(self) -> usize {
        match self {
            Self::Unbounded => usize::MAX,
            Self::Cpus => std::thread::available_parallelism().map_or(2, usize::from),
            Self::N(n) => n.max(1),
        }
    }
}

impl From<usize> for MaxParallel {
    fn from(n: usize) -> Self {
        Self::N(n)
    }
}

impl std::fmt::Display for MaxParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unbounded => f.write_str("unbounded"),
            Self::Cpus => f.write_str("cpus"),
            Self::N(n) => write!(f, "{n}"),
        }
    }
}

/// A [`MaxParallel`] that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a parallelism: use a number of steps (1 or more), `cpus` or `unbounded`")]
pub struct ParseMaxParallelError(String);

impl std::str::FromStr for MaxParallel {
    type Err = ParseMaxParallelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "unbounded" => Ok(Self::Unbounded),
            "cpus" => Ok(Self::Cpus),
            t => match t.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Self::N(n)),
                _ => Err(ParseMaxParallelError(s.to_owned())),
            },
        }
    }
}

/// Per-run settings that are not part of the engine.
#[derive(Clone, Default)]
pub struct RunSettings {
    /// Triggers cancellation.
    pub cancel: CancellationToken,
    /// Modules must not change anything.
    pub dry_run: bool,
    /// Overrides the engine's `max_parallel` (a number; see [`parallelism`](Self::parallelism)).
    pub max_parallel: Option<usize>,
    /// Overrides the engine's parallelism, and `max_parallel` too.
    pub parallelism: Option<MaxParallel>,
    /// Resume and model-call hooks for this run ([`crate::hooks`]).
    pub hooks: Option<Arc<dyn crate::hooks::StepHooks>>,
}

impl std::fmt::Debug for RunSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSettings")
            .field("cancel", &self.cancel)
            .field("dry_run", &self.dry_run)
            .field("max_parallel", &self.max_parallel)
            .field("parallelism", &self.parallelism)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

/// Builds an [`Engine`].
#[derive(Default)]
pub struct EngineBuilder {
    registry: ModuleRegistry,
    workspace: Option<PathBuf>,
    max_parallel: Option<MaxParallel>,
    default_timeout: Option<Duration>,
    llm: Option<Arc<dyn LlmClient>>,
    recovery: Option<Arc<dyn RecoveryPolicy>>,
    errors: Vec<AlreadyRegistered>,
    /// Modules whose name was taken, in order: [`build`](Self::build) lets the last one win.
    later: Vec<Arc<dyn Module>>,
}

impl EngineBuilder {
    /// The workspace root (default: the current directory).
    #[must_use]
    pub fn workspace(mut self, dir: impl AsRef<Path>) -> Self {
        self.workspace = Some(dir.as_ref().to_path_buf());
        self
    }

    /// At most this many steps at once (default: the number of CPUs, see [`MaxParallel`]).
    #[must_use]
    pub fn max_parallel(self, n: usize) -> Self {
        self.parallelism(MaxParallel::N(n))
    }

    /// How many steps may run at once: [`MaxParallel::Cpus`] (the default),
    /// [`MaxParallel::Unbounded`] or [`MaxParallel::N`].
    #[must_use]
    pub fn parallelism(mut self, p: MaxParallel) -> Self {
        self.max_parallel = Some(p);
        self
    }

    /// Timeout for steps that set none.
    #[must_use]
    pub fn default_timeout(mut self, t: Duration) -> Self {
        self.default_timeout = Some(t);
        self
    }

    /// The model modules may use.
    #[must_use]
    pub fn llm(mut self, llm: Arc<dyn LlmClient>) -> Self {
        self.llm = Some(llm);
        self
    }

    /// The recovery policy for recoverable failures.
    #[must_use]
    pub fn recovery(mut self, policy: Arc<dyn RecoveryPolicy>) -> Self {
        self.recovery = Some(policy);
        self
    }

    /// Registers a module. A taken name is an error for [`try_build`](Self::try_build); for
    /// [`build`](Self::build) the module registered last under a name wins.
    #[must_use]
    pub fn module(mut self, module: Arc<dyn Module>) -> Self {
        if let Err(e) = self.registry.register(module.clone()) {
            self.errors.push(e);
            self.later.push(module);
        }
        self
    }

    /// Uses the modules of a registry built elsewhere (e.g. the facade's
    /// `nuvira::defaults::registry()` with changes), in place of any registered on this
    /// builder so far.
    ///
    /// ```
    /// let reg = nuvira_engine::ModuleRegistry::new();
    /// let engine = nuvira_engine::Engine::builder().registry(reg).build();
    /// assert!(!engine.registry().contains("edit"));
    /// ```
    #[must_use]
    pub fn registry(mut self, registry: ModuleRegistry) -> Self {
        self.registry = registry;
        self.errors.clear();
        self.later.clear();
        self
    }

    /// Registers a module, replacing any module of the same name (e.g. a built-in).
    #[must_use]
    pub fn replace_module(mut self, module: Arc<dyn Module>) -> Self {
        self.registry.replace(module);
        self
    }

    /// Builds the engine.
    ///
    /// # Errors
    /// The first name registered twice with [`module`](Self::module).
    pub fn try_build(self) -> Result<Engine, AlreadyRegistered> {
        if let Some(e) = self.errors.into_iter().next() {
            return Err(e);
        }
        Ok(Engine {
            registry: self.registry,
            workspace: self.workspace.unwrap_or_else(|| PathBuf::from(".")),
            max_parallel: self.max_parallel,
            default_timeout: self.default_timeout,
            llm: self.llm,
            recovery: self.recovery,
        })
    }

    /// Builds the engine; a name registered twice with [`module`](Self::module) keeps the
    /// module registered last (use [`try_build`](Self::try_build) to be told instead).
    pub fn build(mut self) -> Engine {
        self.errors.clear();
        for module in std::mem::take(&mut self.later) {
            self.registry.replace(module);
        }
        match self.try_build() {
            Ok(e) => e,
            Err(_) => unreachable!("errors were cleared"),
        }
    }
}

impl Engine {
    /// A builder with no modules registered.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The registered modules.
    pub fn registry(&self) -> &ModuleRegistry {
        &self.registry
    }

    /// The workspace root.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Validates a plan against the registered modules.
    ///
    /// # Errors
    /// Every problem of the plan.
    pub fn validate(&self, plan: &ExecutionPlan) -> Result<ValidatedPlan, ValidationErrors> {
        validate::validate(plan, Some(&self.registry))
    }

    /// Validates and runs a plan, emitting events on `bus`.
    ///
    /// # Errors
    /// The plan's problems when it does not validate (nothing runs then).
    ///
    /// The plan is moved into the run and shared with it, not copied: a run holds one copy of
    /// it (see [`validate_shared`](Self::validate_shared)).
    pub async fn run(
        &self,
        plan: impl Into<Arc<ExecutionPlan>>,
        bus: EventBus,
        settings: RunSettings,
    ) -> Result<RunSummary, ValidationErrors> {
        let validated = self.validate_shared(plan.into())?;
        Ok(self.run_validated(Arc::new(validated), bus, settings).await)
    }

    /// Validates a plan the caller shares; the validated plan keeps that `Arc` rather than a
    /// copy of the plan.
    ///
    /// # Errors
    /// Every problem of the plan.
    pub fn validate_shared(
        &self,
        plan: Arc<ExecutionPlan>,
    ) -> Result<ValidatedPlan, ValidationErrors> {
        validate::validate_shared(plan, Some(&self.registry))
    }

    /// Runs a plan that [`validate`](Self::validate) accepted.
    pub async fn run_validated(
        &self,
        plan: Arc<ValidatedPlan>,
        bus: EventBus,
        settings: RunSettings,
    ) -> RunSummary {
        // A plan uses few modules, mostly in runs of the same one: the last lookup is reused
        // while the name repeats, so a 10,000-step plan costs a few registry lookups, not one
        // per step.
        let n = plan.plan.steps.len();
        let mut modules: Vec<Arc<dyn Module>> = Vec::with_capacity(n);
        let mut write_sets: Vec<WriteSet> = Vec::with_capacity(n);
        let mut last: Option<(&str, &Arc<dyn Module>)> = None;
        for s in &plan.plan.steps {
            let found = match last {
                Some((name, m)) if name == s.module => Some(m),
                _ => self.registry.get(&s.module),
            };
            match found {
                Some(m) => {
                    write_sets.push(m.write_set(s));
                    modules.push(m.clone());
                    last = Some((&s.module, m));
                }
                None => {
                    let (m, ws) = unreachable_module(&s.module);
                    modules.push(m);
                    write_sets.push(ws);
                }
            }
        }
        let mut opts = RunOptions::new(&self.workspace);
        let parallelism = settings
            .parallelism
            .or(settings.max_parallel.map(MaxParallel::N))
            .or(self.max_parallel);
        if let Some(p) = parallelism {
            opts.max_parallel = p.get();
        }
        opts.default_timeout = self.default_timeout;
        opts.dry_run = settings.dry_run;
        opts.cancel = settings.cancel;
        opts.llm.clone_from(&self.llm);
        opts.recovery.clone_from(&self.recovery);
        opts.hooks = settings.hooks;
        if opts.recovery.is_some() {
            opts.registry = Some(self.registry.clone());
        }
        scheduler::run(plan, modules, write_sets, bus, opts).await
    }
}

/// A validated plan only names registered modules; this is a stand-in that fails the step
/// clearly should a caller hand `run_validated` a plan validated against another registry.
fn unreachable_module(name: &str) -> (Arc<dyn Module>, WriteSet) {
    (
        Arc::new(MissingModule(name.to_owned())),
        WriteSet::Exclusive,
    )
}

struct MissingModule(String);

#[nuvira_api::async_trait]
impl Module for MissingModule {
    fn name(&self) -> &str {
        &self.0
    }
    async fn run(
        &self,
        step: &nuvira_api::PlanStep,
        _ctx: &nuvira_api::StepContext,
    ) -> Result<nuvira_api::StepOutput, nuvira_api::ModuleError> {
        Err(nuvira_api::ModuleError::invalid_config(format!(
            "step `{}` uses module `{}`, which this engine does not have: validate the plan with the same engine that runs it",
            step.id, self.0
        )))
    }
}
