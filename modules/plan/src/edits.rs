//! Edits files: the YAML, JSON or TOML file `nuvira apply` reads, with a top-level `edits` list.
//!
//! They are read exactly like plan files (the same formats by extension, a leading byte order
//! mark ignored, every parse or schema error with the file, line and character column in a
//! [`LoadError`]) and indexed by the same structural pass, so that a problem found later in the
//! n-th entry (`edits[2].search: missing`) can be shown at the line of that entry or of the
//! field it names. The shape of the file is the caller's type `T` (for `nuvira apply`, the edit
//! step's config), so this crate does not depend on the edit module.

use crate::file::{LoadError, PlanFormat, parse_typed, read_source};
use crate::index::{PlanIndex, Pos, StepLoc};
use serde::de::DeserializeOwned;
use std::path::Path;

/// The top-level list whose items are the entries.
const LIST: &str = "edits";

/// An edits file as read: its content and where each entry of its `edits` list is.
#[derive(Debug, Clone)]
pub struct LoadedEdits<T> {
    /// The file's content.
    pub config: T,
    /// The file it was read from (or a name such as `<stdin>`).
    pub source_name: String,
    /// Its format.
    pub format: PlanFormat,
    /// Where each entry is; empty when the index did not see exactly the file's entries.
    entries: Vec<StepLoc>,
}

impl<T> LoadedEdits<T> {
    /// The 1-based line where the entry at `index` of `edits` starts (its first key, or the
    /// `{` of a flow mapping, or its `[[edits]]` table).
    pub fn line_of_entry(&self, index: usize) -> Option<u32> {
        self.entries.get(index)?.start.map(|p| p.line)
    }

    /// The 1-based line of the key `key` of the entry at `index`, else of the entry.
    pub fn line_of_field(&self, index: usize, key: &str) -> Option<u32> {
        let entry = self.entries.get(index)?;
        entry.key_nth(key, 0).or(entry.start).map(|p| p.line)
    }

    /// The line a problem about an entry points at. The problem starts with the entry's path,
    /// `edits[N]` or `edits[N].KEY` (as `nuvira_edit::parse_entries` writes them): the line of
    /// that key when the entry has it, else of the entry; `None` for other text.
    pub fn line_of_problem(&self, problem: &str) -> Option<u32> {
        let rest = problem.strip_prefix("edits[")?;
        let (n, rest) = rest.split_once(']')?;
        let index: usize = n.parse().ok()?;
        match rest.strip_prefix('.') {
            Some(field) => {
                let end = field
                    .find(|c: char| c == ':' || c == '.' || c == '[' || c.is_whitespace())
                    .unwrap_or(field.len());
                self.line_of_field(index, &field[..end])
            }
            None => self.line_of_entry(index),
        }
    }
}

/// Reads and parses an edits file; the format is chosen by extension.
///
/// # Errors
/// A [`LoadError`] naming the file (and line and column for syntax and schema errors) when the
/// file does not exist or cannot be read, has an unknown extension, is empty, or does not parse
/// as a `T`.
pub fn load_edits<T: DeserializeOwned>(path: &Path) -> Result<LoadedEdits<T>, LoadError> {
    let (source, format) = read_source(
        path,
        "an edits file",
        "unknown extension: use .yaml, .yml, .json or .toml",
    )?;
    parse_edits(&source, format, &path.display().to_string())
}

/// Parses edits text of a known format. A leading byte order mark is ignored.
///
/// # Errors
/// A [`LoadError`] when the text is empty or does not parse as a `T`: at the line and column the
/// parser gives, and for YAML's unknown and duplicate top-level fields at the line of the field.
pub fn parse_edits<T: DeserializeOwned>(
    source: &str,
    format: PlanFormat,
    source_name: &str,
) -> Result<LoadedEdits<T>, LoadError> {
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    if source.trim().is_empty() {
        let hint = match format {
            PlanFormat::Yaml => "`edits:` and a list of entries",
            PlanFormat::Json => "`{\"edits\": [...]}`",
            PlanFormat::Toml => "`[[edits]]` tables",
        };
        return Err(LoadError::new(
            source_name,
            None,
            format!("the file is empty: an edits file needs {hint}"),
        ));
    }
    if let Some((pos, message)) = crate::limits::depth_error(source, format) {
        return Err(LoadError::new(source_name, Some(pos), message));
    }
    let index = PlanIndex::build_list(source, format, LIST);
    let config: T = parse_typed(source, format).map_err(|(pos, message)| {
        let pos = if format == PlanFormat::Yaml {
            field_of(&index, &message).or(pos)
        } else {
            pos
        };
        LoadError::new(source_name, pos, message)
    })?;
    // Only trust the index when it saw exactly the file's entries.
    let count = parse_typed::<serde_json::Value>(source, format)
        .ok()
        .and_then(|v| v.get(LIST)?.as_array().map(Vec::len));
    let entries = if count == Some(index.steps.len()) {
        index.steps
    } else {
        Vec::new()
    };
    Ok(LoadedEdits {
        config,
        source_name: source_name.to_owned(),
        format,
        entries,
    })
}

/// serde_yaml reports an unknown or duplicate top-level field at the start of the document;
/// the position of the field it names (its second occurrence, for a duplicate).
fn field_of(index: &PlanIndex, message: &str) -> Option<Pos> {
    let named = |marker: &str| {
        message
            .strip_prefix(marker)
            .and_then(|t| t.split('`').next())
    };
    let (field, nth) = match (named("unknown field `"), named("duplicate field `")) {
        (Some(f), _) => (f, 0),
        (_, Some(f)) => (f, 1),
        _ => return None,
    };
    index
        .top
        .iter()
        .filter(|(k, _)| k == field)
        .map(|(_, p)| *p)
        .nth(nth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::Value;

    /// The shape of `nuvira apply`'s file (nuvira-edit's `EditStepConfig`).
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Batch {
        #[serde(default)]
        edits: Option<Vec<Value>>,
        #[serde(default)]
        format: Option<bool>,
    }

    fn parse(src: &str, format: PlanFormat) -> Result<LoadedEdits<Batch>, LoadError> {
        parse_edits(src, format, "e")
    }

    #[test]
    fn every_entry_has_its_line_in_every_format() {
        let y = parse(
            "# batch\nedits:\n  - strategy: a\n    path: x\n\n  - {strategy: b}\n  -\n    strategy: c\nformat: true\n",
            PlanFormat::Yaml,
        )
        .unwrap();
        assert_eq!(y.config.edits.as_ref().map(Vec::len), Some(3));
        assert_eq!(y.config.format, Some(true));
        let lines: Vec<_> = (0..4).map(|i| y.line_of_entry(i)).collect();
        assert_eq!(lines, [Some(3), Some(6), Some(8), None]);
        let f = parse(
            "edits: [{strategy: a},\n  {strategy: b}]\n",
            PlanFormat::Yaml,
        )
        .unwrap();
        assert_eq!((f.line_of_entry(0), f.line_of_entry(1)), (Some(1), Some(2)));
        let j = parse(
            "{\"edits\": [\n  {\"strategy\": \"a\"},\n\n  {\"strategy\": \"b\"}\n]}",
            PlanFormat::Json,
        )
        .unwrap();
        assert_eq!((j.line_of_entry(0), j.line_of_entry(1)), (Some(2), Some(4)));
        let t = parse(
            "[[edits]]\nstrategy = \"a\"\n\n[[edits]]\nstrategy = \"b\"\n",
            PlanFormat::Toml,
        )
        .unwrap();
        assert_eq!((t.line_of_entry(0), t.line_of_entry(1)), (Some(1), Some(4)));
    }

    #[test]
    fn a_problem_points_at_the_field_it_names_else_at_its_entry() {
        let e = parse(
            "edits:\n  - path: a.txt\n    strategy: teleport\n  - strategy: search-replace\n",
            PlanFormat::Yaml,
        )
        .unwrap();
        assert_eq!(
            e.line_of_problem("edits[0].strategy: unknown strategy"),
            Some(3)
        );
        assert_eq!(e.line_of_problem("edits[0].search: missing"), Some(2));
        assert_eq!(e.line_of_problem("edits[1]: expected a mapping"), Some(4));
        assert_eq!(e.line_of_problem("edits[2].path: missing"), None);
        assert_eq!(e.line_of_problem("something else"), None);
    }

    #[test]
    fn a_leading_bom_is_ignored_and_an_empty_file_is_named() {
        for (src, format) in [
            ("\u{feff}edits:\n  - strategy: a\n", PlanFormat::Yaml),
            (
                "\u{feff}{\"edits\": [{\"strategy\": \"a\"}]}",
                PlanFormat::Json,
            ),
            ("\u{feff}[[edits]]\nstrategy = \"a\"\n", PlanFormat::Toml),
        ] {
            let e = parse(src, format).unwrap_or_else(|e| panic!("{format:?}: {e}"));
            assert_eq!(
                e.line_of_entry(0),
                Some(if format == PlanFormat::Yaml { 2 } else { 1 })
            );
        }
        for format in [PlanFormat::Yaml, PlanFormat::Json, PlanFormat::Toml] {
            let e = parse(" \n", format).unwrap_err();
            assert!(e.message.contains("the file is empty"), "{e}");
        }
    }

    #[test]
    fn errors_carry_line_and_character_column() {
        let e = parse(
            "edits:\n  - strategy: search-replace\n    path: a: b\n",
            PlanFormat::Yaml,
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (Some(3), Some(12)), "{e}");
        assert!(!e.message.contains("at line"), "{e}");
        let e = parse("{\"edits\": [{\"strategy\": \"ééé\" x}]}", PlanFormat::Json).unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(31)), "{e}");
        let e = parse("[[edits]]\nstrategy = \n", PlanFormat::Toml).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let e = parse("edits: []\nformat: \"yes\"\n", PlanFormat::Yaml).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn yaml_unknown_and_duplicate_fields_are_at_their_own_line() {
        let e = parse("edits: []\n\ncolour: red\n", PlanFormat::Yaml).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("unknown field `colour`"), "{e}");
        let e = parse("edits: []\nformat: true\nformat: false\n", PlanFormat::Yaml).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("duplicate field `format`"), "{e}");
    }

    #[test]
    fn load_names_a_missing_file_a_folder_and_an_unknown_extension() {
        let dir = tempfile::tempdir().unwrap();
        let e = load_edits::<Batch>(&dir.path().join("missing.yaml")).unwrap_err();
        assert!(e.message.contains("no such file"), "{e}");
        let e = load_edits::<Batch>(dir.path()).unwrap_err();
        assert!(e.message.contains("directory"), "{e}");
        let txt = dir.path().join("notes.txt");
        std::fs::write(&txt, "edits: []\n").unwrap();
        let e = load_edits::<Batch>(&txt).unwrap_err();
        assert!(e.message.contains("unknown extension"), "{e}");
        assert!(e.to_string().contains("notes.txt"), "{e}");
        let ok = dir.path().join("batch.YML");
        std::fs::write(&ok, "edits:\n  - strategy: a\n").unwrap();
        let loaded = load_edits::<Batch>(&ok).unwrap();
        assert_eq!(loaded.format, PlanFormat::Yaml);
        assert_eq!(loaded.line_of_entry(0), Some(2));
    }
}
