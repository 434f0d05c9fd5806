//! A bounded rendering of the file tree.
//!
//! The tree goes into prompts and reports, so it must stay small on any repository: at most
//! `max_lines` lines, at most [`PER_DIR`] entries per folder (the rest summarised as
//! `… N more`), folders before files, two spaces per level.

use std::collections::BTreeMap;

/// Entries shown per folder before the rest is summarised.
pub const PER_DIR: usize = 25;

#[derive(Default)]
struct Dir<'a> {
    dirs: BTreeMap<&'a str, Dir<'a>>,
    files: Vec<&'a str>,
    count: usize,
}

/// Renders sorted workspace-relative paths as an indented tree of at most `max_lines` lines.
pub fn render<'a>(paths: impl IntoIterator<Item = &'a str>, max_lines: usize) -> String {
    let mut root = Dir::default();
    for path in paths {
        let mut node = &mut root;
        node.count += 1;
        let mut parts = path.split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                node.files.push(part);
            } else {
                node = node.dirs.entry(part).or_default();
                node.count += 1;
            }
        }
    }
    let mut out = Vec::new();
    emit(&root, 0, max_lines.max(1), &mut out);
    let mut text = out.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    text
}

fn emit(dir: &Dir<'_>, depth: usize, max_lines: usize, out: &mut Vec<String>) {
    let indent = "  ".repeat(depth);
    let total = dir.dirs.len() + dir.files.len();
    let mut shown = 0;
    let entries = dir
        .dirs
        .iter()
        .map(|(n, d)| (*n, Some(d)))
        .chain(dir.files.iter().map(|f| (*f, None)));
    for (name, sub) in entries {
        // Keep one line for the summary of what is left.
        if shown == PER_DIR || out.len() + 1 >= max_lines {
            out.push(format!("{indent}… {} more", total - shown));
            return;
        }
        shown += 1;
        match sub {
            Some(d) => {
                out.push(format!("{indent}{name}/ ({} files)", d.count));
                emit(d, depth + 1, max_lines, out);
                if out.len() >= max_lines {
                    if shown < total {
                        // The budget ran out below this folder: say what is left here too.
                        if let Some(last) = out.last_mut() {
                            *last = format!("{indent}… {} more", total - shown + 1);
                        }
                    }
                    return;
                }
            }
            None => out.push(format!("{indent}{name}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_come_first_and_count_their_files() {
        let t = render(["Cargo.toml", "src/lib.rs", "src/cli/mod.rs"], 100);
        assert_eq!(
            t,
            "src/ (2 files)\n  cli/ (1 files)\n    mod.rs\n  lib.rs\nCargo.toml\n"
        );
    }

    #[test]
    fn output_is_bounded_on_huge_trees() {
        let paths: Vec<String> = (0..10_000)
            .map(|i| format!("d{}/sub{}/f{i}.rs", i % 50, i % 7))
            .collect();
        let t = render(paths.iter().map(String::as_str), 200);
        assert!(t.lines().count() <= 200, "{} lines", t.lines().count());
        assert!(t.contains("… "), "{t}");
    }
}
