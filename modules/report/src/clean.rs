//! What every renderer shares to keep untrusted text harmless: secrets masked once in the
//! report itself ([`mask_report`]), HTML escaping (the `html-escape` crate) with control
//! characters made visible, and checkout-relative paths ([`rebase_paths`]).

use crate::ExecutionReport;
use nuvira_api::text::escape_control_keep_lines;
use std::borrow::Cow;

/// Masks, in place, every finding of the shared secret scanner ([`nuvira_secrets::mask`]) in
/// every text the report holds: the goal, step messages and evidence, findings, diffs, the
/// kept step outputs (test logs, command output, model text). The line stays, the value goes.
pub(crate) fn mask_report(r: &mut ExecutionReport) {
    mask_in(&mut r.goal);
    if let Some(c) = &mut r.cancel_reason {
        mask_in(c);
    }
    for s in &mut r.steps {
        for t in s
            .message
            .iter_mut()
            .chain(s.description.iter_mut())
            .chain(s.skip_cause.iter_mut())
            .chain(s.evidence.iter_mut())
        {
            mask_in(t);
        }
        for c in &mut s.file_changes {
            mask_in(&mut c.diff);
        }
        for f in &mut s.findings {
            mask_in(&mut f.title);
            mask_in(&mut f.message);
            mask_in(&mut f.detail);
        }
        if let Some(out) = &mut s.output {
            mask_output(out);
        }
    }
}

/// `text` with every finding of the shared secret scanner masked ([`nuvira_secrets::mask`]),
/// for text printed outside a report (progress lines, logs).
pub fn mask_secrets(text: &str) -> Cow<'_, str> {
    nuvira_secrets::mask(text)
}

fn mask_in(s: &mut String) {
    if let Cow::Owned(m) = nuvira_secrets::mask(s) {
        *s = m;
    }
}

/// Masks every string inside a step output. The output is plain serde data: it goes through
/// a JSON value and back; one that would not come back (it cannot happen for outputs read
/// from events) is replaced by a value holding only its masked JSON, so nothing leaks.
fn mask_output(out: &mut nuvira_api::StepOutput) {
    let Ok(mut v) = serde_json::to_value(&*out) else {
        *out = nuvira_api::StepOutput::Empty;
        return;
    };
    if !mask_value(&mut v) {
        return;
    }
    *out = match serde_json::from_value(v.clone()) {
        Ok(o) => o,
        Err(_) => nuvira_api::StepOutput::Value(v),
    };
}

/// Masks the strings of a JSON value; whether anything changed.
fn mask_value(v: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => match nuvira_secrets::mask(s) {
            Cow::Owned(m) => {
                *s = m;
                true
            }
            Cow::Borrowed(_) => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |acc, i| mask_value(i) | acc),
        Value::Object(map) => map.values_mut().fold(false, |acc, i| mask_value(i) | acc),
        _ => false,
    }
}

/// Escapes text for HTML element content and quoted attribute values (`&`, `<`, `>`, `"`,
/// `'`), with control characters other than newline and tab written as visible escapes
/// (`\x1b`), which HTML cannot carry.
pub(crate) fn html(s: &str) -> String {
    html_escape::encode_quoted_attribute(&escape_control_keep_lines(s)).into_owned()
}

/// Text for XML (JUnit): control characters other than newline and tab as visible escapes
/// (XML 1.0 cannot carry them; `quick-junit` would drop them silently).
pub(crate) fn xml(s: &str) -> String {
    escape_control_keep_lines(s).into_owned()
}

/// Rewrites every workspace-relative path of the report (findings, file changes, rolled-back
/// paths) to be relative to the checkout: `prefix` is the repository folder relative to the
/// checkout (`sub` for `--repo sub` in a monorepo), `/`-separated; empty changes nothing.
/// Absolute paths are left alone.
pub fn rebase_paths(r: &mut ExecutionReport, prefix: &str) {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() || prefix == "." {
        return;
    }
    let join = |p: &mut String| {
        let rel = p.trim_start_matches("./");
        if rel.starts_with('/') || rel.as_bytes().get(1) == Some(&b':') {
            return;
        }
        *p = format!("{prefix}/{rel}");
    };
    for s in &mut r.steps {
        for f in &mut s.findings {
            if let Some(p) = &mut f.path {
                join(p);
            }
        }
        for c in &mut s.file_changes {
            join(&mut c.path);
            if let nuvira_api::ChangeKind::Rename { from } = &mut c.kind {
                join(from);
            }
        }
        for p in &mut s.rolled_back {
            join(p);
        }
    }
}

/// The checkout a repository folder belongs to: `GITHUB_WORKSPACE` when it is set and holds
/// `repo`, else the git top level of `repo`, else `repo` itself (canonical paths).
pub fn checkout_root(repo: &std::path::Path) -> std::path::PathBuf {
    let Ok(repo) = repo.canonicalize() else {
        return repo.to_owned();
    };
    std::env::var_os("GITHUB_WORKSPACE")
        .filter(|w| !w.is_empty())
        .and_then(|w| std::path::PathBuf::from(w).canonicalize().ok())
        .filter(|w| repo.starts_with(w))
        .or_else(|| git_toplevel(&repo).and_then(|t| t.canonicalize().ok()))
        .filter(|root| repo.starts_with(root))
        .unwrap_or(repo)
}

/// The repository folder `repo` relative to its [`checkout_root`], `/`-separated, for
/// [`rebase_paths`] (empty when they are the same folder).
pub fn checkout_prefix(repo: &std::path::Path) -> String {
    let Ok(canon) = repo.canonicalize() else {
        return String::new();
    };
    let root = checkout_root(&canon);
    match canon.strip_prefix(&root) {
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => String::new(),
    }
}

fn git_toplevel(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let top = String::from_utf8(out.stdout).ok()?;
    let top = top.trim_end_matches(['\n', '\r']);
    (!top.is_empty()).then(|| std::path::PathBuf::from(top))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_markup_and_shows_control_characters() {
        assert_eq!(
            html("<a href=\"x\">'&\x1b[31m\nz"),
            "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;\\x1b[31m\nz"
        );
    }
}
