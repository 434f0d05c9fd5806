//! The plan's shape, checked on a generic value so that every schema error of a file is
//! reported at once, each at its own line (serde stops at the first).
//!
//! Runs only after the typed deserialization failed, so it mirrors what that deserialization
//! accepts: YAML reads any scalar as a string (`id: 5` is the id `"5"`), JSON and TOML do not.

use crate::index::{PlanIndex, Pos, is_blank};
use serde_json::Value;

/// One problem found: a message and, when known, where.
pub(crate) type Found = (String, Option<Pos>);

const TOP_KEYS: &[&str] = &[
    "goal",
    "outputs",
    "steps",
    "estimated_complexity",
    "suggested_provider",
    "mcp_servers",
];
const TOP_ALIASES: &[(&str, &str)] = &[
    ("estimated_complexity", "estimatedComplexity"),
    ("suggested_provider", "suggestedProvider"),
    ("mcp_servers", "mcpServers"),
];
const STEP_KEYS: &[&str] = &[
    "id",
    "module",
    "description",
    "depends_on",
    "config",
    "timeout",
    "writes",
];
const STEP_ALIASES: &[(&str, &str)] = &[("depends_on", "dependsOn")];

/// The canonical name of a key, if it is a known one (aliases map to their field).
fn canonical<'a>(key: &str, keys: &[&'a str], aliases: &[(&'a str, &str)]) -> Option<&'a str> {
    keys.iter()
        .find(|k| **k == key)
        .copied()
        .or_else(|| aliases.iter().find(|(_, a)| *a == key).map(|(f, _)| *f))
}

/// Every schema problem of a plan value.
pub(crate) fn check(value: &Value, index: &PlanIndex, yaml: bool) -> Vec<Found> {
    let mut out = Vec::new();
    let Value::Object(top) = value else {
        let found = kind_of(value);
        out.push((
            format!(
                "a plan must be a mapping with `goal` and `steps`, not {found}: write `steps:` at the top level"
            ),
            Some(Pos { line: 1, column: 1 }),
        ));
        return out;
    };
    let at_top = |k: &str| index.top_key(k);
    check_keys(
        top.keys().map(String::as_str),
        TOP_KEYS,
        TOP_ALIASES,
        "",
        &at_top,
        &mut out,
    );
    for (key, v) in top {
        let pos = at_top(key);
        let bad = match canonical(key, TOP_KEYS, TOP_ALIASES) {
            Some("goal" | "suggested_provider") => !is_string(v, yaml, true),
            Some("outputs") => !(v.is_null() || is_string_list(v, yaml)),
            Some("mcp_servers") => !(v.is_null() || v.is_object()),
            Some("estimated_complexity") => {
                !(v.is_null()
                    || v.as_str()
                        .is_some_and(|s| matches!(s, "simple" | "moderate" | "complex")))
            }
            _ => false,
        };
        if bad {
            let expected = match canonical(key, TOP_KEYS, TOP_ALIASES) {
                Some("outputs") => "a list of step ids",
                Some("estimated_complexity") => "one of `simple`, `moderate`, `complex`",
                Some("mcp_servers") => "a mapping of server names to `{command, args}` or `{url}`",
                _ => "a string",
            };
            out.push((
                format!("`{key}` must be {expected}, not {}", kind_of(v)),
                pos,
            ));
        }
    }
    match top.get("steps") {
        None | Some(Value::Null) => {}
        Some(Value::Array(steps)) => {
            for (i, step) in steps.iter().enumerate() {
                check_step(i, step, index, yaml, &mut out);
            }
        }
        Some(other) => out.push((
            format!(
                "`steps` must be a list of steps, not {}: write each step as `- id: ...`",
                kind_of(other)
            ),
            at_top("steps"),
        )),
    }
    out
}

fn check_step(i: usize, step: &Value, index: &PlanIndex, yaml: bool, out: &mut Vec<Found>) {
    let loc = index.steps.get(i);
    let start = loc.and_then(|l| l.pos());
    let at = |k: &str| loc.and_then(|l| l.key_nth(k, 0)).or(start);
    let Value::Object(map) = step else {
        out.push((
            format!(
                "steps[{i}]: a step must be a mapping with `id` and `module`, not {}",
                kind_of(step)
            ),
            start,
        ));
        return;
    };
    let prefix = format!("steps[{i}]");
    check_keys(
        map.keys().map(String::as_str),
        STEP_KEYS,
        STEP_ALIASES,
        &prefix,
        &at,
        out,
    );
    match map.get("id") {
        None => out.push((
            format!(
                "{prefix}: step {} has no id: add `id:` with a unique name",
                i + 1
            ),
            start,
        )),
        Some(v) if is_blank(v) => out.push((
            format!(
                "{prefix}: step {} has no id: give `id` a unique name of letters, digits, `_`, `.` or `-`",
                i + 1
            ),
            at("id"),
        )),
        Some(v) if !is_string(v, yaml, false) => out.push((
            format!("{prefix}.id: must be a string, not {}", kind_of(v)),
            at("id"),
        )),
        Some(_) => {}
    }
    match map.get("module") {
        None => out.push((
            format!("{prefix}: missing field `module`: say which module runs the step"),
            start,
        )),
        Some(v) if !is_string(v, yaml, true) => out.push((
            format!("{prefix}.module: must be a string, not {}", kind_of(v)),
            at("module"),
        )),
        Some(_) => {}
    }
    for (key, v) in map {
        let bad = match canonical(key, STEP_KEYS, STEP_ALIASES) {
            Some("description") => {
                (!v.is_null() && !is_string(v, yaml, true)).then_some("a string")
            }
            Some("depends_on") => {
                (!v.is_null() && !is_string_list(v, yaml)).then_some("a list of step ids")
            }
            Some("writes") => {
                (!v.is_null() && !is_string_list(v, yaml)).then_some("a list of paths")
            }
            Some("timeout") => {
                let problem = match v {
                    Value::Null => None,
                    Value::String(s) => timeout_problem(s),
                    Value::Number(n) => timeout_problem(&n.to_string()),
                    other => Some(format!(
                        "must be a duration such as \"30s\" or \"2m\", not {}",
                        kind_of(other)
                    )),
                };
                if let Some(p) = problem {
                    out.push((format!("{prefix}.{key}: {p}"), at(key)));
                }
                None
            }
            _ => None,
        };
        if let Some(expected) = bad {
            out.push((
                format!("{prefix}.{key}: must be {expected}, not {}", kind_of(v)),
                at(key),
            ));
        }
    }
}

fn timeout_problem(text: &str) -> Option<String> {
    match nuvira_api::duration::parse(text) {
        Err(e) => Some(e.to_string()),
        Ok(d) if d.is_zero() => Some(nuvira_api::duration::ZERO_TIMEOUT.to_owned()),
        Ok(_) => None,
    }
}

/// Unknown keys (with a suggestion) and a field given under both of its names.
fn check_keys<'a>(
    keys: impl Iterator<Item = &'a str>,
    known: &[&str],
    aliases: &[(&str, &str)],
    prefix: &str,
    at: &dyn Fn(&str) -> Option<Pos>,
    out: &mut Vec<Found>,
) {
    let keys: Vec<&str> = keys.collect();
    let lead = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}: ")
    };
    for key in &keys {
        if canonical(key, known, aliases).is_none() {
            let hint = known
                .iter()
                .chain(aliases.iter().map(|(_, a)| a))
                .map(|k| (edit_distance(key, k), *k))
                .filter(|(d, _)| *d <= 2)
                .min()
                .map(|(_, k)| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            out.push((
                format!(
                    "{lead}unknown field `{key}`{hint}; the fields are {}",
                    known
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                at(key),
            ));
        }
    }
    for (field, alias) in aliases {
        if keys.contains(field) && keys.contains(alias) {
            let later = match (at(field), at(alias)) {
                (Some(f), Some(a)) => Some(f.max(a)),
                (f, a) => f.or(a),
            };
            out.push((
                format!(
                    "{lead}both `{field}` and `{alias}` are given, but they are the same field: keep one"
                ),
                later,
            ));
        }
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

/// A string; in YAML any scalar reads as one (null too, where `allow_null`).
fn is_string(v: &Value, yaml: bool, allow_null: bool) -> bool {
    match v {
        Value::String(_) => true,
        Value::Null => yaml && allow_null,
        other => yaml && is_scalar(other),
    }
}

fn is_string_list(v: &Value, yaml: bool) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().all(|x| is_string(x, yaml, true)))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(a, b)
}
