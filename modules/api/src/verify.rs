//! Verification results.

use crate::Severity;
use serde::{Deserialize, Serialize};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum CheckStatus {
    /// It passed.
    Passed,
    /// It found something that does not block at this strictness.
    Warning,
    /// It failed.
    Failed,
    /// It could not run (e.g. no model for goal alignment). Never counted as passed.
    NotRun,
}

/// One verification check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct VerificationCheck {
    /// `syntax`, `tests`, `security`, `goal-alignment`, `lint`, or a custom name.
    pub name: String,
    /// How it ended.
    pub status: CheckStatus,
    /// Whether its failure blocks.
    pub blocking: bool,
    /// What it found.
    pub details: String,
    /// What it found, located where it can say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<CheckFinding>,
}

impl VerificationCheck {
    /// A check record.
    pub fn new(
        name: impl Into<String>,
        status: CheckStatus,
        blocking: bool,
        details: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            status,
            blocking,
            details: details.into(),
            findings: Vec::new(),
        }
    }
}

/// The outcome of verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct VerificationResult {
    /// No blockers.
    pub passed: bool,
    /// Every check.
    pub checks: Vec<VerificationCheck>,
    /// 0.0 – 1.0.
    pub overall_score: f64,
    /// What blocks.
    pub blockers: Vec<String>,
    /// What could be better.
    pub suggestions: Vec<String>,
}

/// One thing a verification check found: a message, with the file, line and column where the
/// check knows them, and the tool's own severity where it has one. Displayed as
/// `file:line:column: severity: message`, leaving out what is unknown.
///
/// Whether a finding blocks is the check's to say (its [`CheckStatus`] and `blocking`); a
/// report shows every finding of a check at the check's severity, and puts the tool's own
/// `severity`, when there is one, in front of the message.
///
/// Serialized, a finding without a severity is the text `file:line:column: message` (as
/// [`Display`](std::fmt::Display) writes it, which is also the shape stored event files have
/// always had), unless that text would read back differently; otherwise, an object
/// `{file, line, column, severity, message}`. Both shapes are read.
///
/// ```
/// use nuvira_api::verify::CheckFinding;
///
/// let f = CheckFinding::new("expected `;`").at("src/lib.rs", Some(3)).with_column(Some(9));
/// assert_eq!(f.to_string(), "src/lib.rs:3:9: expected `;`");
/// assert_eq!(CheckFinding::parse("src/lib.rs:3:9: expected `;`"), f);
/// assert_eq!(serde_json::to_value(&f).unwrap(), "src/lib.rs:3:9: expected `;`");
/// assert_eq!(CheckFinding::parse("warning: unused import").file, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CheckFinding {
    /// Workspace-relative file.
    pub file: Option<String>,
    /// 1-based line in the file.
    pub line: Option<u32>,
    /// 1-based column in the line.
    pub column: Option<u32>,
    /// The tool's own severity (a secret scanner's `error`, a linter's `warning`), if it has one.
    pub severity: Option<Severity>,
    /// What was found. May hold untrusted text (tool output, model text).
    pub message: String,
}

impl CheckFinding {
    /// A finding without location or severity.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            file: None,
            line: None,
            column: None,
            severity: None,
            message: message.into(),
        }
    }

    /// Builder-style: sets the file and line.
    #[must_use]
    pub fn at(mut self, file: impl Into<String>, line: Option<u32>) -> Self {
        self.file = Some(file.into());
        self.line = line;
        self
    }

    /// Builder-style: sets the column.
    #[must_use]
    pub fn with_column(mut self, column: Option<u32>) -> Self {
        self.column = column;
        self
    }

    /// Builder-style: sets the tool's severity.
    #[must_use]
    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = Some(severity);
        self
    }

    /// Reads a tool's output line or a stored finding text: `path:line:col: message`,
    /// `path:line: message` or `path: message`. Text that does not start with something like a
    /// path (no space, and a `.` or a `/`) is all message.
    pub fn parse(text: &str) -> Self {
        let all_message = || Self::new(text.trim());
        let Some((path, rest)) = text.split_once(':') else {
            return all_message();
        };
        let looks_like_path =
            !path.is_empty() && !path.contains(' ') && (path.contains('.') || path.contains('/'));
        if !looks_like_path {
            return all_message();
        }
        let (line, column, message) = match number(rest) {
            Some((line, rest)) => match number(rest) {
                Some((column, rest)) => (Some(line), Some(column), rest),
                None => (Some(line), None, rest),
            },
            None => (None, None, rest),
        };
        Self::new(message.trim()).at(path, line).with_column(column)
    }

    /// Whether the text form reads back as this finding.
    fn text_round_trips(&self) -> bool {
        self.severity.is_none()
            && (self.column.is_none() || self.line.is_some())
            && Self::parse(&self.to_string()) == *self
    }
}

/// A leading number and the text after it (and after one `:`).
fn number(t: &str) -> Option<(u32, &str)> {
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let n = t[..digits].parse().ok()?;
    let rest = &t[digits..];
    Some((n, rest.strip_prefix(':').unwrap_or(rest)))
}

impl std::fmt::Display for CheckFinding {
    /// `file:line:column: severity: message`, leaving out what is unknown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
            if let Some(line) = self.line {
                write!(f, "{line}:")?;
                if let Some(column) = self.column {
                    write!(f, "{column}:")?;
                }
            }
            f.write_str(" ")?;
        }
        if let Some(severity) = self.severity {
            write!(f, "{}: ", severity.as_str())?;
        }
        f.write_str(&self.message)
    }
}

/// The object form of a [`CheckFinding`] on the wire.
#[derive(Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
struct FindingObject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    column: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    severity: Option<Severity>,
    message: String,
}

/// On the wire a finding is its `path:line:col: message` text when that reads back the same,
/// else the object form.
#[cfg(feature = "schemars")]
impl schemars::JsonSchema for CheckFinding {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CheckFinding".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let object = generator.subschema_for::<FindingObject>();
        schemars::json_schema!({
            "description": "A finding: `path:line:col: message` text, or an object.",
            "anyOf": [{ "type": "string" }, object]
        })
    }
}

impl Serialize for CheckFinding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.text_round_trips() {
            return s.collect_str(self);
        }
        FindingObject {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            severity: self.severity,
            message: self.message.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for CheckFinding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Text(String),
            Object(FindingObject),
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Text(t) => Self::parse(&t),
            Wire::Object(o) => Self {
                file: o.file,
                line: o.line,
                column: o.column,
                severity: o.severity,
                message: o.message,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_path_line_column_and_message() {
        let p = |t| {
            let f = CheckFinding::parse(t);
            (f.file, f.line, f.column, f.message)
        };
        assert_eq!(
            p("src/a.rs:12: unwrap on a None"),
            (
                Some("src/a.rs".into()),
                Some(12),
                None,
                "unwrap on a None".into()
            )
        );
        assert_eq!(
            p("src/lib.rs:9:17: MISSING }"),
            (
                Some("src/lib.rs".into()),
                Some(9),
                Some(17),
                "MISSING }".into()
            )
        );
        assert_eq!(
            p("src/a.rs: no tests cover it"),
            (
                Some("src/a.rs".into()),
                None,
                None,
                "no tests cover it".into()
            )
        );
        assert_eq!(
            p("goal not met: the function still exists"),
            (
                None,
                None,
                None,
                "goal not met: the function still exists".into()
            )
        );
        assert_eq!(
            p("no colon here"),
            (None, None, None, "no colon here".into())
        );
    }

    #[test]
    fn the_old_text_shape_reads_as_typed_findings() {
        let check: VerificationCheck = serde_json::from_str(
            r#"{"name":"lint","status":"warning","blocking":false,"details":"1 warning",
                "findings":["src/config.rs:12: this function could be `const`","warning: unused import"]}"#,
        )
        .unwrap();
        assert_eq!(
            check.findings,
            [
                CheckFinding::new("this function could be `const`").at("src/config.rs", Some(12)),
                CheckFinding::new("warning: unused import"),
            ]
        );
        // Written back in the same shape.
        let again = serde_json::to_value(&check).unwrap();
        assert_eq!(
            again["findings"],
            serde_json::json!([
                "src/config.rs:12: this function could be `const`",
                "warning: unused import"
            ])
        );
    }

    #[test]
    fn a_finding_the_text_cannot_carry_is_written_as_an_object() {
        let sev = CheckFinding::new("private key [private-key]")
            .at("a.pem", Some(1))
            .with_severity(Severity::Error);
        let ambiguous = CheckFinding::new("src/a.rs: looks like a path");
        for f in [sev, ambiguous] {
            let v = serde_json::to_value(&f).unwrap();
            assert!(v.is_object(), "{v}");
            assert_eq!(serde_json::from_value::<CheckFinding>(v).unwrap(), f);
        }
    }
}
