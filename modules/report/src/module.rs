//! The `report` module: a plan step that writes report files from inside a run.

use crate::{ExecutionReport, Format, ReportBuilder, render};
use nuvira_api::{
    ConfigError, EventKind, Module, ModuleError, ModuleKind, PlanStep, StepContext, StepOutput,
    WriteSet, async_trait,
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

/// A `report` step's config as written: `{ formats?: [name, ...], output_dir?: path }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(expecting = "a mapping such as { formats: [json, html], output_dir: reports }")]
struct RawConfig {
    #[serde(default, deserialize_with = "format_names")]
    formats: Option<Vec<String>>,
    #[serde(default, deserialize_with = "output_dir")]
    output_dir: Option<String>,
    /// Any other key, refused by [`config`] with the keys it expects.
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// `formats`: a list of names, or null for the default.
fn format_names<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    use serde::{Deserialize, de::Error as _};
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                serde_json::Value::String(s) => Ok(s),
                _ => Err(D::Error::custom(format!(
                    "`formats[{i}]` must be a format name"
                ))),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(D::Error::custom(
            "`formats` must be a list such as [json, html]",
        )),
    }
}

/// `output_dir`: a path, or null for the default.
fn output_dir<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    use serde::{Deserialize, de::Error as _};
    match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(D::Error::custom(
            "`output_dir` must be a workspace-relative path",
        )),
    }
}

/// A `report` step's config, checked.
#[derive(Debug)]
struct Config {
    formats: Vec<Format>,
    output_dir: Option<String>,
}

fn config(step: &PlanStep) -> Result<Config, ConfigError> {
    let raw: RawConfig = step.config_as()?;
    let mut formats = Vec::new();
    for (i, name) in raw.formats.iter().flatten().enumerate() {
        let f = name.parse::<Format>().map_err(|e| {
            ConfigError::new(&step.id, format!("`formats[{i}]`: failed to {e}"))
                .at(format!("formats[{i}]"))
        })?;
        if !formats.contains(&f) {
            formats.push(f);
        }
    }
    if raw.formats.is_none() {
        formats.push(Format::Json);
    }
    if let Some(dir) = &raw.output_dir {
        confined(dir).map_err(|e| {
            ConfigError::new(&step.id, format!("`output_dir` {e}")).at("output_dir")
        })?;
    }
    if let Some(k) = raw.other.keys().next() {
        return Err(ConfigError::new(
            &step.id,
            format!("unknown config key `{k}` (expected `formats`, `output_dir`)"),
        )
        .at(k.clone()));
    }
    Ok(Config {
        formats,
        output_dir: raw.output_dir,
    })
}

/// The first existing component of `rel` under `root` that is a symlink, `/`-separated.
fn symlink_on(root: &Path, rel: &Path) -> Option<String> {
    let mut path = root.to_path_buf();
    let mut shown = Vec::new();
    for part in rel.components() {
        path.push(part);
        shown.push(part.as_os_str().to_string_lossy().into_owned());
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return Some(shown.join("/")),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
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

    fn validate(&self, step: &PlanStep) -> Result<(), ConfigError> {
        config(step).map(|_| ())
    }

    async fn run(&self, step: &PlanStep, ctx: &StepContext) -> Result<StepOutput, ModuleError> {
        let cfg = config(step)?;
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
        // Nuvira's state folder is never reached through a symlink: a checkout could point
        // `.nuvira` (or `.nuvira/reports`) anywhere, and creating the folder would follow it.
        if cfg.output_dir.is_none()
            && let Some(link) = symlink_on(ctx.workspace_root(), &rel)
        {
            return Err(ModuleError::fatal(
                nuvira_api::ErrorCategory::Io,
                format!(
                    "step `{}`: `{link}` is a symlink, and Nuvira never follows a link in its state folder; nothing was written: remove the link and retry",
                    step.id
                ),
            ));
        }
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
