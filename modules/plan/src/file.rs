//! Plan files: YAML, JSON and TOML.

use nuvira_api::{ExecutionPlan, PlanError, PlanRequest, Planner, async_trait};
use regex::Regex;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The format of a plan file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanFormat {
    /// `.yaml` / `.yml`
    Yaml,
    /// `.json`
    Json,
    /// `.toml`
    Toml,
}

impl PlanFormat {
    /// The format for a path's extension, if it is one we read.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("yaml" | "yml") => Some(Self::Yaml),
            Some("json") => Some(Self::Json),
            Some("toml") => Some(Self::Toml),
            _ => None,
        }
    }

    /// The format's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Yaml => "yaml",
            Self::Json => "json",
            Self::Toml => "toml",
        }
    }
}

/// Why a plan file could not be loaded: names the file and, for parse errors, the line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The file.
    pub file: String,
    /// 1-based line, for parse errors.
    pub line: Option<u32>,
    /// 1-based column, for parse errors.
    pub column: Option<u32>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}", self.message)
    }
}

/// A plan together with where it came from, so errors can point into the source.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    /// The plan.
    pub plan: ExecutionPlan,
    /// The file it was read from (or a name such as `<stdin>`).
    pub source_name: String,
    /// The source text.
    pub source: String,
    /// Its format.
    pub format: PlanFormat,
}

static ID_KEY: LazyLock<Regex> = LazyLock::new(|| {
    #[expect(clippy::expect_used, reason = "a constant pattern, covered by tests")]
    Regex::new(r#"(?:^|[\s{,\-])["']?id["']?\s*[:=]\s*["']?([A-Za-z0-9_.\-]+)["']?"#)
        .expect("valid regex")
});

impl LoadedPlan {
    /// The 1-based line where the step with this id is defined, if it can be found.
    pub fn line_of_step(&self, id: &str) -> Option<u32> {
        self.line_of_step_nth(id, 0)
    }

    /// The 1-based line of the `nth` (from 0) definition of a step id, for duplicates.
    pub fn line_of_step_nth(&self, id: &str, nth: usize) -> Option<u32> {
        self.source
            .lines()
            .enumerate()
            .flat_map(|(n, line)| {
                ID_KEY
                    .captures_iter(line)
                    .filter(|c| c.get(1).is_some_and(|m| m.as_str() == id))
                    .map(move |_| u32::try_from(n + 1).unwrap_or(u32::MAX))
                    .collect::<Vec<_>>()
            })
            .nth(nth)
    }

    /// The 1-based line where the step at `index` of `plan.steps` is defined.
    pub fn line_of_step_index(&self, index: usize) -> Option<u32> {
        let id = &self.plan.steps.get(index)?.id;
        let nth = self.plan.steps[..index]
            .iter()
            .filter(|s| &s.id == id)
            .count();
        self.line_of_step_nth(id, nth)
    }
}

/// Reads and parses a plan file; the format is chosen by extension.
///
/// # Errors
/// A [`LoadError`] naming the file (and line and column for syntax and schema errors) when the
/// file cannot be read, has an unknown extension, or does not parse as a plan.
pub fn load_file(path: &Path) -> Result<LoadedPlan, LoadError> {
    let name = path.display().to_string();
    let format = PlanFormat::from_path(path).ok_or_else(|| LoadError {
        file: name.clone(),
        line: None,
        column: None,
        message: "unsupported plan format: use a .yaml, .yml, .json or .toml file".into(),
    })?;
    let source = std::fs::read_to_string(path).map_err(|e| LoadError {
        file: name.clone(),
        line: None,
        column: None,
        message: match e.kind() {
            std::io::ErrorKind::NotFound => "no such file: check the path".into(),
            std::io::ErrorKind::InvalidData => "not UTF-8 text".into(),
            _ => format!("cannot read it: {e}"),
        },
    })?;
    parse_str(&source, format, &name)
}

/// Parses plan text of a known format.
///
/// # Errors
/// A [`LoadError`] with line and column when the text does not parse as a plan.
pub fn parse_str(
    source: &str,
    format: PlanFormat,
    source_name: &str,
) -> Result<LoadedPlan, LoadError> {
    let err = |line: Option<usize>, column: Option<usize>, message: String| LoadError {
        file: source_name.to_owned(),
        line: line.map(|l| u32::try_from(l).unwrap_or(u32::MAX)),
        column: column.map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
        message,
    };
    let plan: ExecutionPlan = match format {
        PlanFormat::Json => serde_json::from_str(source).map_err(|e| {
            let msg = strip_position(&e.to_string());
            err(Some(e.line()), Some(e.column()), msg)
        })?,
        PlanFormat::Yaml => {
            if source.trim().is_empty() {
                return Err(err(
                    None,
                    None,
                    "the file is empty: a plan needs `steps:`".into(),
                ));
            }
            serde_yaml_ng::from_str(source).map_err(|e| {
                let loc = e.location();
                err(
                    loc.as_ref().map(|l| l.line()),
                    loc.as_ref().map(|l| l.column()),
                    strip_position(&e.to_string()),
                )
            })?
        }
        PlanFormat::Toml => toml::from_str(source).map_err(|e| {
            let (line, col) = e
                .span()
                .map(|span| line_col(source, span.start))
                .map_or((None, None), |(l, c)| (Some(l), Some(c)));
            err(line, col, e.message().trim().to_owned())
        })?,
    };
    Ok(LoadedPlan {
        plan,
        source_name: source_name.to_owned(),
        source: source.to_owned(),
        format,
    })
}

/// 1-based line and column of a byte offset.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, col)
}

/// Drops the " at line X column Y" suffix the parsers add, since we report it separately.
fn strip_position(msg: &str) -> String {
    let cut = msg
        .find(" at line ")
        .or_else(|| msg.find(" at position "))
        .unwrap_or(msg.len());
    msg[..cut].trim().to_owned()
}

/// A [`Planner`] that reads a plan file, ignoring the goal (the file's own goal wins; the
/// request's goal fills it in when the file has none).
#[derive(Debug, Clone)]
pub struct FilePlanner {
    path: PathBuf,
}

impl FilePlanner {
    /// A planner for this file.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }
}

#[async_trait]
impl Planner for FilePlanner {
    fn name(&self) -> &str {
        "file"
    }

    async fn plan(&self, request: &PlanRequest) -> Result<ExecutionPlan, PlanError> {
        let loaded = load_file(&self.path).map_err(|e| PlanError::Source {
            source_name: e.file.clone(),
            message: e.to_string(),
        })?;
        let mut plan = loaded.plan;
        if plan.goal.is_empty() {
            plan.goal.clone_from(&request.goal);
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "goal: g\nsteps:\n  - id: a\n    module: inspect\n  - id: b\n    module: report\n    dependsOn: [a]\n";

    #[test]
    fn the_three_formats_give_the_same_plan() {
        let y = parse_str(YAML, PlanFormat::Yaml, "p.yaml").unwrap().plan;
        let j = parse_str(
            r#"{"goal":"g","steps":[{"id":"a","module":"inspect"},{"id":"b","module":"report","depends_on":["a"]}]}"#,
            PlanFormat::Json,
            "p.json",
        )
        .unwrap()
        .plan;
        let t = parse_str(
            "goal = \"g\"\n[[steps]]\nid = \"a\"\nmodule = \"inspect\"\n[[steps]]\nid = \"b\"\nmodule = \"report\"\ndepends_on = [\"a\"]\n",
            PlanFormat::Toml,
            "p.toml",
        )
        .unwrap()
        .plan;
        assert_eq!(y, j);
        assert_eq!(y, t);
        assert_eq!(y.steps[1].depends_on, vec!["a"]);
    }

    #[test]
    fn parse_errors_carry_line_and_column_in_every_format() {
        let e = parse_str(
            "steps:\n  - id: a\n    module: [x\n",
            PlanFormat::Yaml,
            "p.yaml",
        )
        .unwrap_err();
        assert_eq!(e.file, "p.yaml");
        assert!(e.line.is_some_and(|l| l >= 3), "{e}");
        let e = parse_str(
            "{\"steps\": [\n  {\"id\": 1}\n]}",
            PlanFormat::Json,
            "p.json",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.column.is_some());
        let e = parse_str(
            "[[steps]]\nid = \"a\"\nmodule = \"x\"\ndepnds_on = []\n",
            PlanFormat::Toml,
            "p.toml",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("depnds_on"), "{e}");
        assert!(e.to_string().starts_with("p.toml:"), "{e}");
    }

    #[test]
    fn finds_the_line_where_a_step_is_defined() {
        let p = parse_str(YAML, PlanFormat::Yaml, "p.yaml").unwrap();
        assert_eq!(p.line_of_step("a"), Some(3));
        assert_eq!(p.line_of_step("b"), Some(5));
        assert_eq!(p.line_of_step("zzz"), None);
        let p = parse_str(
            "{\"steps\":[\n{\"id\": \"a\", \"module\": \"x\"},\n{\"module\": \"x\", \"id\": \"b\"}]}",
            PlanFormat::Json,
            "p.json",
        )
        .unwrap();
        assert_eq!(p.line_of_step("b"), Some(3));
    }

    #[test]
    fn unsupported_extension_and_missing_file_are_named() {
        let e = load_file(Path::new("plan.txt")).unwrap_err();
        assert!(e.to_string().contains("plan.txt"));
        assert!(e.message.contains(".yaml"));
        let e = load_file(Path::new("/nonexistent/plan.yaml")).unwrap_err();
        assert!(e.message.contains("no such file"), "{e}");
    }
}
