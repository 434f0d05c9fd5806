//! The `report` module: a plan step that writes report files from inside a run.

use crate::{ExecutionReport, Format, ReportBuilder, render};
use nuvira_api::{
    EventKind, Module, ModuleError, ModuleKind, PlanStep, StepContext, StepOutput, WriteSet,
    async_trait,
};
use std::path::{Component, Path, PathBuf};

/// The module's name in plans.
pub const REPORT_MODULE: &str = "report";

/// The `report` module.
///
/// Step config: `{ formats: [text|json|markdown|github|sarif|junit|html, ...], output_dir? }`.
/// `formats` defaults to `[json]`; `output_dir` is workspace-relative and defaults to
/// `.nuvira/reports/<run id>`. A report step runs inside the run, so it builds its report from
/// the outputs of the steps it (transitively) depends on, with the edges between them taken
/// from the plan (`StepContext::plan`); the full report of a run, with
/// failed and skipped steps, comes from its events (`nuvira run --report FORMAT=PATH`,
/// `nuvira report EVENTS`). It writes nothing in a dry run, and nothing outside `.nuvira/` or
/// its `output_dir`: its write set is read-only as far as the user's files are concerned.
/// Emits one `report:generated` per file written (or one without a path when it wrote none).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReportModule;

#[derive(Debug)]
struct Config {
    formats: Vec<Format>,
    output_dir: Option<String>,
}

fn config(step: &PlanStep) -> Result<Config, String> {
    let mut formats = Vec::new();
    match step.config_value("formats") {
        None | Some(serde_json::Value::Null) => formats.push(Format::Json),
        Some(serde_json::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let name = item.as_str().ok_or_else(|| {
                    format!("step `{}`: `formats[{i}]` must be a format name", step.id)
                })?;
                let f = name
                    .parse::<Format>()
                    .map_err(|e| format!("step `{}`: `formats[{i}]`: failed to {e}", step.id))?;
                if !formats.contains(&f) {
                    formats.push(f);
                }
            }
        }
        Some(_) => {
            return Err(format!(
                "step `{}`: `formats` must be a list such as [json, html]",
                step.id
            ));
        }
    }
    let output_dir = match step.config_value("output_dir") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => {
            confined(s).map_err(|e| format!("step `{}`: `output_dir` {e}", step.id))?;
            Some(s.clone())
        }
        Some(_) => {
            return Err(format!(
                "step `{}`: `output_dir` must be a workspace-relative path",
                step.id
            ));
        }
    };
    if let Some(obj) = step.config.as_object()
        && let Some(k) = obj.keys().find(|k| *k != "formats" && *k != "output_dir")
    {
        return Err(format!(
            "step `{}`: unknown config key `{k}` (expected `formats`, `output_dir`)",
            step.id
        ));
    }
    Ok(Config {
        formats,
        output_dir,
    })
}

fn confined(p: &str) -> Result<PathBuf, String> {
    let path = Path::new(p);
    if path.is_absolute() {
        return Err(format!(
            "`{p}` is absolute: give a path relative to the workspace root"
        ));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(format!("`{p}` leaves the workspace: remove the `..`"));
    }
    Ok(path.to_owned())
}

/// Writes the report in each format into `dir`, returning the files written.
///
/// # Errors
/// [`crate::ReportError::Write`] naming the file that could not be written.
pub fn write_reports(
    report: &ExecutionReport,
    formats: &[Format],
    dir: &Path,
) -> Result<Vec<(Format, PathBuf)>, crate::ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| crate::ReportError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for &f in formats {
        let path = dir.join(f.file_name());
        std::fs::write(&path, render(report, f)).map_err(|source| crate::ReportError::Write {
            path: path.clone(),
            source,
        })?;
        out.push((f, path));
    }
    Ok(out)
}

#[async_trait]
impl Module for ReportModule {
    fn name(&self) -> &str {
        REPORT_MODULE
    }

    fn kind(&self) -> ModuleKind {
        ModuleKind::Report
    }

    fn write_set(&self, _step: &PlanStep) -> WriteSet {
        WriteSet::ReadOnly
    }

    fn validate(&self, step: &PlanStep) -> Result<(), String> {
        config(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let cfg = config(step).map_err(ModuleError::invalid_config)?;
        let mut b = ReportBuilder::for_run(ctx.run_id(), ctx.goal(), ctx.dry_run());
        for (id, out) in ctx.upstream() {
            b.record_output(&id, None, (*out).clone());
        }
        if let Some(plan) = ctx.plan() {
            b.record_edges(plan);
        }
        let report = b.finish();
        if ctx.dry_run() {
            ctx.emit(EventKind::ReportGenerated {
                report_id: report.report_id.clone(),
                format: "none (dry run)".into(),
                path: None,
            });
            return Ok(StepOutput::Report(Box::new(report)));
        }
        let rel = match &cfg.output_dir {
            Some(d) => PathBuf::from(d),
            None => Path::new(".nuvira").join("reports").join(&**ctx.run_id()),
        };
        let dir = ctx.workspace_root().join(&rel);
        let io = |e: crate::ReportError| {
            ModuleError::fatal(nuvira_api::ErrorCategory::Io, format!("failed to {e}"))
        };
        std::fs::create_dir_all(&dir).map_err(|source| {
            io(crate::ReportError::Write {
                path: dir.clone(),
                source,
            })
        })?;
        // A symlinked output folder must not lead outside the workspace.
        if let (Ok(root), Ok(real)) = (ctx.workspace_root().canonicalize(), dir.canonicalize())
            && !real.starts_with(&root)
        {
            return Err(ModuleError::fatal(
                nuvira_api::ErrorCategory::InvalidConfig,
                format!(
                    "step `{}`: `output_dir` {} resolves outside the workspace: point it at a folder inside",
                    step.id,
                    rel.display()
                ),
            ));
        }
        let written = write_reports(&report, &cfg.formats, &dir).map_err(io)?;
        for (format, path) in written {
            let shown = path
                .strip_prefix(ctx.workspace_root())
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            ctx.emit(EventKind::ReportGenerated {
                report_id: report.report_id.clone(),
                format: format.as_str().into(),
                path: Some(shown),
            });
        }
        Ok(StepOutput::Report(Box::new(report)))
    }
}
