//! Plan files: YAML, JSON and TOML.

use crate::index::{PlanIndex, Pos, char_column, pos_of_offset};
use crate::schema;
use nuvira_api::{ExecutionPlan, PlanError, PlanRequest, Planner, async_trait};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
///
/// A file with several schema errors (unknown or wrongly typed fields in several steps) gives
/// one `LoadError` for the first and the rest in [`others`](Self::others), each located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct LoadError {
    /// The file.
    pub file: String,
    /// 1-based line, for parse errors.
    pub line: Option<u32>,
    /// 1-based column (in characters), for parse errors.
    pub column: Option<u32>,
    /// What is wrong and what to do.
    pub message: String,
    /// Further problems of the same file, in file order.
    pub others: Vec<LoadError>,
}

impl LoadError {
    pub(crate) fn new(file: &str, pos: Option<Pos>, message: String) -> Self {
        Self {
            file: file.to_owned(),
            line: pos.map(|p| p.line),
            column: pos.map(|p| p.column),
            message,
            others: Vec::new(),
        }
    }

    /// This problem and the others, in order.
    pub fn all(&self) -> impl Iterator<Item = &LoadError> {
        std::iter::once(self).chain(self.others.iter())
    }
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
        write!(f, ": {}", self.message)?;
        if !self.others.is_empty() {
            write!(
                f,
                " (and {} more problem(s) in this file: `nuvira validate` lists them)",
                self.others.len()
            )?;
        }
        Ok(())
    }
}

/// A plan together with where it came from, so errors can point into the source.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    /// The plan.
    pub plan: ExecutionPlan,
    /// The file it was read from (or a name such as `<stdin>`).
    pub source_name: String,
    /// The source text (without a leading byte order mark).
    pub source: String,
    /// Its format.
    pub format: PlanFormat,
    /// Where each step is, built on the first lookup (one pass over the source).
    index: OnceLock<PlanIndex>,
    /// The index of the first step with each id, built on the first lookup by id.
    first_by_id: OnceLock<HashMap<String, usize>>,
}

impl LoadedPlan {
    fn index(&self) -> &PlanIndex {
        self.index
            .get_or_init(|| PlanIndex::build(&self.source, self.format))
    }

    /// The 1-based line where the first step with this id is defined, if it can be found.
    pub fn line_of_step(&self, id: &str) -> Option<u32> {
        let first = self.first_by_id.get_or_init(|| {
            let mut m = HashMap::with_capacity(self.plan.steps.len());
            for (i, s) in self.plan.steps.iter().enumerate() {
                m.entry(s.id.clone()).or_insert(i);
            }
            m
        });
        self.line_of_step_index(*first.get(id)?)
    }

    /// The 1-based line where the step at `index` of `plan.steps` is defined: the line of its
    /// `id` key, or where the item starts. Found from the step's place in the file (the n-th
    /// item of `steps`), so any id, even an invalid or duplicate one, has its own line.
    pub fn line_of_step_index(&self, index: usize) -> Option<u32> {
        let ix = self.index();
        // Only trust the index when it saw exactly the plan's steps.
        if ix.steps.len() != self.plan.steps.len() {
            return None;
        }
        ix.steps.get(index)?.pos().map(|p| p.line)
    }

    /// The 1-based line of a top-level key such as `steps` or `outputs`.
    pub fn line_of_key(&self, key: &str) -> Option<u32> {
        self.index().top_key(key).map(|p| p.line)
    }

    /// The 1-based line of the first `outputs` entry naming `id`, else of the `outputs` key.
    pub fn line_of_output(&self, id: &str) -> Option<u32> {
        let ix = self.index();
        let entry = self.plan.outputs.as_ref().and_then(|named| {
            if named.len() != ix.outputs.len() {
                return None;
            }
            let j = named.iter().position(|n| n == id)?;
            Some(ix.outputs[j].line)
        });
        entry.or_else(|| self.line_of_key("outputs"))
    }
}

/// Reads and parses a plan file; the format is chosen by extension.
///
/// # Errors
/// A [`LoadError`] naming the file (and line and column for syntax and schema errors) when the
/// file does not exist or cannot be read, has an unknown extension, or does not parse as a plan.
pub fn load_file(path: &Path) -> Result<LoadedPlan, LoadError> {
    let name = path.display().to_string();
    let (source, format) = read_source(
        path,
        "a plan file",
        "unsupported plan format: use a .yaml, .yml, .json or .toml file",
    )?;
    parse_str(&source, format, &name)
}

/// Reads a YAML, JSON or TOML file (`what` names it in the directory error, `bad_extension`
/// is the message for another extension) and tells its format.
pub(crate) fn read_source(
    path: &Path,
    what: &str,
    bad_extension: &str,
) -> Result<(String, PlanFormat), LoadError> {
    let name = path.display().to_string();
    let fail = |message: String| LoadError::new(&name, None, message);
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail("no such file: check the path".into()));
        }
        Ok(m) if m.is_dir() => {
            return Err(fail(format!(
                "this is a directory: give the path of {what}"
            )));
        }
        _ => {}
    }
    let format = PlanFormat::from_path(path).ok_or_else(|| fail(bad_extension.to_owned()))?;
    let cap = crate::limits::max_input_bytes().map_err(fail)?;
    let read_error = |e: std::io::Error| {
        fail(match e.kind() {
            std::io::ErrorKind::NotFound => "no such file: check the path".into(),
            _ => format!("cannot read it: {e}"),
        })
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    // Never more than the cap plus one byte, whatever the file is (`/dev/zero`, a FIFO, a huge
    // file): the extra byte tells a file of exactly the cap from a larger one.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, cap.saturating_add(1)),
        &mut bytes,
    )
    .map_err(read_error)?;
    if bytes.len() as u64 > cap {
        return Err(fail(format!(
            "larger than the {} input cap: {what} is rarely more than a few KB; if this one is right, raise the cap with {}=BYTES",
            crate::limits::human_bytes(cap),
            crate::limits::MAX_INPUT_BYTES_ENV,
        )));
    }
    let source = String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))?;
    Ok((source, format))
}

/// Parses plan text of a known format. A leading byte order mark is ignored.
///
/// # Errors
/// A [`LoadError`] with line and column when the text does not parse as a plan; every schema
/// error of the file, each located, when there are several.
pub fn parse_str(
    source: &str,
    format: PlanFormat,
    source_name: &str,
) -> Result<LoadedPlan, LoadError> {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    if source.trim().is_empty() {
        let hint = match format {
            PlanFormat::Yaml => "`steps:`",
            PlanFormat::Json => "`{\"steps\": [...]}`",
            PlanFormat::Toml => "`[[steps]]` tables",
        };
        return Err(LoadError::new(
            source_name,
            None,
            format!("the file is empty: a plan needs {hint}"),
        ));
    }
    if let Some((pos, message)) = crate::limits::depth_error(source, format) {
        return Err(LoadError::new(source_name, Some(pos), message));
    }
    let typed: Result<ExecutionPlan, (Option<Pos>, String)> = parse_typed(source, format);
    match typed {
        Ok(plan) => Ok(LoadedPlan {
            plan,
            source_name: source_name.to_owned(),
            source: source.to_owned(),
            format,
            index: OnceLock::new(),
            first_by_id: OnceLock::new(),
        }),
        Err((pos, message)) => Err(explain(source, format, source_name, pos, message)),
    }
}

/// Deserializes text of a known format into `T`; an error is the position the parser gives (as
/// a 1-based line and character column) and its message without that position.
pub(crate) fn parse_typed<T: serde::de::DeserializeOwned>(
    source: &str,
    format: PlanFormat,
) -> Result<T, (Option<Pos>, String)> {
    match format {
        PlanFormat::Json => serde_json::from_str(source).map_err(|e| {
            let pos = (e.line() > 0).then(|| Pos {
                line: to_u32(e.line()),
                column: to_u32(char_column(source, e.line(), e.column())),
            });
            (pos, strip_position(&e.to_string(), e.line(), e.column()))
        }),
        PlanFormat::Yaml => serde_yaml_ng::from_str(source).map_err(|e| match e.location() {
            Some(l) => (
                Some(Pos {
                    line: to_u32(l.line()),
                    column: to_u32(l.column()),
                }),
                strip_position(&e.to_string(), l.line(), l.column()),
            ),
            None => (None, strip_position(&e.to_string(), 0, 0)),
        }),
        PlanFormat::Toml => toml::from_str(source).map_err(|e| {
            (
                e.span().map(|s| pos_of_offset(source, s.start)),
                e.message().trim().to_owned(),
            )
        }),
    }
}

/// Turns the parser's first error into every problem of the file that a structural pass over
/// the generic value finds, each at its own line; falls back to the parser's error (moved to the
/// field it names, for YAML) when that pass finds nothing or the text is not even a value.
fn explain(
    source: &str,
    format: PlanFormat,
    name: &str,
    pos: Option<Pos>,
    message: String,
) -> LoadError {
    // Nesting too deep for the parser will be too deep for the generic parse too.
    let too_deep = message.contains("recursion limit") || message.contains("max recursion depth");
    let generic: Option<serde_json::Value> = match format {
        _ if too_deep => None,
        PlanFormat::Json => serde_json::from_str(source).ok(),
        PlanFormat::Yaml => serde_yaml_ng::from_str(source).ok(),
        PlanFormat::Toml => toml::from_str(source).ok(),
    };
    let index = PlanIndex::build(source, format);
    let mut found = match &generic {
        Some(v) => schema::check(v, &index, format == PlanFormat::Yaml),
        None => Vec::new(),
    };
    let original = relocate(&index, pos, words_for_types(&message));
    // A duplicate key is invisible in a generic value (the last one wins): keep the parser's
    // report of it unless it is the alias pair the structural pass already named.
    let is_duplicate = message.contains("duplicate field") || message.contains("duplicate key");
    let alias_pair = found.iter().any(|(m, _)| m.contains("are the same field"));
    if found.is_empty() || (is_duplicate && !alias_pair) {
        found.push(original);
    }
    found.sort_by_key(|(_, p)| p.map_or((u32::MAX, u32::MAX), |p| (p.line, p.column)));
    let mut errors = found.into_iter().map(|(m, p)| LoadError::new(name, p, m));
    let mut first = errors
        .next()
        .unwrap_or_else(|| LoadError::new(name, None, message));
    first.others = errors.collect();
    first
}

/// For YAML, serde reports errors of a step's fields (`unknown field`, `duplicate field`, a bad
/// duration) at the start of the step; move them to the line of the field they name.
fn relocate(index: &PlanIndex, pos: Option<Pos>, mut message: String) -> (String, Option<Pos>) {
    let Some(rest) = message.strip_prefix("steps[") else {
        return (message, pos);
    };
    let Some((n, tail)) = rest.split_once("]: ") else {
        return (message, pos);
    };
    let Some(step) = n.parse::<usize>().ok().and_then(|n| index.steps.get(n)) else {
        return (message, pos);
    };
    let named = |marker: &str| {
        tail.strip_prefix(marker)
            .and_then(|t| t.split('`').next())
            .map(str::to_owned)
    };
    let target = if let Some(field) = named("duplicate field `") {
        if field == "depends_on" && step.key_nth("dependsOn", 0).is_some() {
            message = format!(
                "steps[{n}]: both `depends_on` and `dependsOn` are given, but they are the same field: keep one"
            );
            let (a, b) = (step.key_nth("depends_on", 0), step.key_nth("dependsOn", 0));
            a.max(b)
        } else {
            step.key_nth(&field, 1)
        }
    } else if let Some(field) = named("unknown field `") {
        step.key_nth(&field, 0)
    } else if tail.contains("duration") || tail.contains("timeout") {
        step.key_nth("timeout", 0)
    } else if tail.contains("no id") {
        step.key_nth("id", 0)
    } else {
        None
    };
    (message, target.or(pos))
}

/// serde names Rust types in some messages; say what is expected in words.
fn words_for_types(message: &str) -> String {
    message
        .replace(
            "expected struct ExecutionPlan",
            "expected a plan: a mapping with `goal` and `steps`",
        )
        .replace(
            "expected struct PlanStep",
            "expected a step: a mapping with `id` and `module`",
        )
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Drops the position the parser appends for the error itself (" at line L column C", which
/// we report as FILE:LINE:COL), keeping any context after it, such as libyaml's
/// ", while scanning a quoted scalar at line 1 column 7".
fn strip_position(msg: &str, line: usize, column: usize) -> String {
    let own = format!(" at line {line} column {column}");
    if let Some(at) = msg.find(&own) {
        let mut out = String::with_capacity(msg.len());
        out.push_str(&msg[..at]);
        out.push_str(&msg[at + own.len()..]);
        return out.trim().to_owned();
    }
    if let Some(at) = msg.find(" at position ") {
        let end = msg[at + 13..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(msg.len(), |e| at + 13 + e);
        return format!("{}{}", &msg[..at], &msg[end..]).trim().to_owned();
    }
    msg.trim().to_owned()
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
        let dir = tempfile::tempdir().unwrap();
        let txt = dir.path().join("plan.txt");
        std::fs::write(&txt, "steps: []").unwrap();
        let e = load_file(&txt).unwrap_err();
        assert!(e.to_string().contains("plan.txt"));
        assert!(e.message.contains(".yaml"));
        let e = load_file(Path::new("/nonexistent/plan.yaml")).unwrap_err();
        assert!(e.message.contains("no such file"), "{e}");
    }

    fn yaml_err(src: &str) -> LoadError {
        parse_str(src, PlanFormat::Yaml, "p.yaml").unwrap_err()
    }

    #[test]
    fn a_leading_bom_is_ignored_in_every_format() {
        parse_str(
            "\u{feff}steps:\n  - {id: a, module: report}\n",
            PlanFormat::Yaml,
            "p.yaml",
        )
        .unwrap();
        parse_str(
            "\u{feff}{\"steps\": [{\"id\": \"a\", \"module\": \"report\"}]}",
            PlanFormat::Json,
            "p.json",
        )
        .unwrap();
        parse_str(
            "\u{feff}[[steps]]\nid = \"a\"\nmodule = \"report\"\n",
            PlanFormat::Toml,
            "p.toml",
        )
        .unwrap();
    }

    #[test]
    fn empty_json_and_toml_say_the_file_is_empty() {
        for format in [PlanFormat::Json, PlanFormat::Toml, PlanFormat::Yaml] {
            let e = parse_str(" \n\t\n", format, "p").unwrap_err();
            assert!(e.message.contains("the file is empty"), "{e}");
            assert_eq!(e.column, None);
        }
    }

    #[test]
    fn json_and_toml_columns_count_characters_not_bytes() {
        let e = parse_str("{\"goal\": \"ééé\" x}", PlanFormat::Json, "p.json").unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(16)), "{e}");
        let e = parse_str("goal = \"ééé\" x\n", PlanFormat::Toml, "p.toml").unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(14)), "{e}");
        let e = parse_str("{", PlanFormat::Json, "p.json").unwrap_err();
        assert!(e.column.is_some_and(|c| c >= 1), "{e}");
    }

    #[test]
    fn yaml_parse_messages_keep_libyaml_context() {
        let e = yaml_err("goal: \"g\nsteps:\n  - id: a\n    module: report\n");
        assert!(
            e.message
                .contains("while scanning a quoted scalar at line 1 column 7"),
            "{e}"
        );
        assert!(
            !e.message.contains(&format!("at line {}", e.line.unwrap())),
            "{e}"
        );
    }

    #[test]
    fn yaml_field_errors_point_at_the_field() {
        let e = yaml_err("steps:\n  - id: a\n    module: report\n    timeout: banana\n");
        assert_eq!(e.line, Some(4), "{e}");
        let e = yaml_err("goal: g\nsteps:\n  - id: a\n    module: report\n    module: inspect\n");
        assert_eq!(e.line, Some(5), "{e}");
        let e = yaml_err(
            "steps:\n  - id: r\n    module: report\n    depends_on: [a]\n    dependsOn: [a]\n",
        );
        assert!(e.message.contains("dependsOn"), "{e}");
        assert_eq!(e.line, Some(5), "{e}");
    }

    #[test]
    fn every_schema_error_is_reported_each_at_its_line() {
        let e = yaml_err(
            "steps:\n  - id: a\n    module: inspect\n    depend_on: [x]\n  - id: r\n    module: report\n    dependson: [a]\n",
        );
        let all: Vec<_> = e.all().map(|e| (e.line, e.message.clone())).collect();
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0].0, Some(4));
        assert!(all[0].1.contains("depend_on"));
        assert_eq!(all[1].0, Some(7));
        assert!(all[1].1.contains("dependson"));
        let e = parse_str("{\"steps\": [{\"id\": 1, \"module\": \"x\", \"x\": 1},\n {\"id\": \"b\", \"module\": \"x\", \"timeout\": \"0s\"}]}", PlanFormat::Json, "p.json").unwrap_err();
        assert_eq!(e.all().count(), 3, "{e:?}");
        assert_eq!(e.others[1].line, Some(2), "{e:?}");
    }

    #[test]
    fn null_and_blank_ids_and_top_level_lists_are_explained() {
        for src in [
            "steps:\n  - id: null\n    module: report\n",
            "steps:\n  - id: ~\n    module: report\n",
            "steps:\n  - id:\n    module: report\n",
        ] {
            let e = yaml_err(src);
            assert!(e.message.contains("step 1 has no id"), "{e}");
            assert_eq!(e.line, Some(2), "{e}");
        }
        let e = yaml_err("- id: a\n  module: report\n");
        assert!(
            e.message
                .contains("a plan must be a mapping with `goal` and `steps`"),
            "{e}"
        );
        assert!(!e.message.contains("struct"), "{e}");
    }

    #[test]
    fn a_missing_file_is_not_found_whatever_its_extension() {
        let e = load_file(Path::new("/nonexistent/missing.txt")).unwrap_err();
        assert!(e.message.contains("no such file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = load_file(dir.path()).unwrap_err();
        assert!(e.message.contains("directory"), "{e}");
    }

    #[test]
    fn every_step_of_the_example_plans_has_the_line_of_its_id() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for file in [
            "plans/invalid.yaml",
            "plans/pipeline.yaml",
            "plans/fan-out.yaml",
            "plans/pipeline.toml",
            "plans/pipeline.json",
            "agent/plan.yaml",
            "quickstart/plan.yaml",
        ] {
            let loaded = load_file(&root.join(file)).unwrap();
            let lines: Vec<&str> = loaded.source.lines().collect();
            for (i, step) in loaded.plan.steps.iter().enumerate() {
                let line = loaded
                    .line_of_step_index(i)
                    .unwrap_or_else(|| panic!("{file}: step {i} has no line"));
                let text = lines[line as usize - 1];
                assert!(
                    text.contains("id") && text.contains(&step.id),
                    "{file}: step {i} (`{}`) at line {line}: {text}",
                    step.id
                );
            }
        }
    }
}
