//! Language inspectors: symbols and imports from source text, and the test files that belong
//! to a source file.
//!
//! Rust and TypeScript/TSX/JavaScript use tree-sitter (each grammar behind its own feature).
//! The inspectors walk the syntax tree by hand rather than with queries because a method's name
//! depends on its enclosing `impl`/`class` (`Type::method`), which a walk carries naturally.
//! Parsers are reused per thread.

#[cfg(feature = "rust")]
mod rust;
#[cfg(feature = "typescript")]
mod typescript;

use nuvira_api::Symbol;
use std::collections::BTreeSet;

/// What a language inspector found in one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outline {
    /// Definitions, in source order; methods are named `Type::method`.
    pub symbols: Vec<Symbol>,
    /// Imported modules or paths (`std::io::Read`, `./config`).
    pub imports: Vec<String>,
    /// Whether the file holds its own tests (Rust `#[cfg(test)]`).
    pub has_inline_tests: bool,
}

/// The language of a path, by extension (for the artifact's `language`).
pub fn language_of(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    Some(match ext.as_str() {
        "rs" => "rust",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "tsx",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "jsx",
        "py" | "pyi" => "python",
        "go" => "go",
        "java" => "java",
        "kt" | "kts" => "kotlin",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" => "cpp",
        "cs" => "csharp",
        "rb" => "ruby",
        "php" => "php",
        "swift" => "swift",
        "scala" => "scala",
        "sh" | "bash" => "shell",
        "md" | "markdown" => "markdown",
        "toml" => "toml",
        "yaml" | "yml" => "yaml",
        "json" => "json",
        "html" | "htm" => "html",
        "css" | "scss" => "css",
        "sql" => "sql",
        _ => return None,
    })
}

/// Whether a language inspector is compiled in for this language.
pub fn has_inspector(language: &str) -> bool {
    (language == "rust" && cfg!(feature = "rust"))
        || (matches!(language, "typescript" | "tsx" | "javascript" | "jsx")
            && cfg!(feature = "typescript"))
}

/// Symbols and imports of a file; an empty outline when no inspector covers the language.
pub fn outline(language: &str, source: &str) -> Outline {
    let _ = source; // unused when no grammar feature is enabled
    match language {
        #[cfg(feature = "rust")]
        "rust" => rust::outline(source),
        #[cfg(feature = "typescript")]
        "typescript" => typescript::outline(source, false),
        #[cfg(feature = "typescript")]
        "tsx" | "javascript" | "jsx" => typescript::outline(source, true),
        _ => Outline::default(),
    }
}

/// The test files that belong to a source file.
///
/// - Rust: the file itself when it has a `#[cfg(test)]` module; every `tests/*.rs` of the same
///   crate (the nearest folder above with a `Cargo.toml`) that names the module (`config` for
///   `src/config.rs`) or, for `lib.rs`/`main.rs`, the crate.
/// - TypeScript/JavaScript: `x.test.ts`, `x.spec.ts` beside `x.ts`, and `__tests__/x.ts`
///   (also `.test`/`.spec` inside `__tests__`), for every TS/JS extension.
///
/// `files` is every walked path; `read` returns a file's text (capped) for the Rust checks.
pub fn test_files_for(
    path: &str,
    outline: &Outline,
    files: &BTreeSet<String>,
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    };
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return out;
    };
    let join = |d: &str, n: &str| {
        if d.is_empty() {
            n.to_owned()
        } else {
            format!("{d}/{n}")
        }
    };
    match ext {
        "rs" => {
            if outline.has_inline_tests {
                out.push(path.to_owned());
            }
            if path.split('/').any(|c| c == "tests") {
                return out;
            }
            // The crate root: the nearest ancestor folder with a Cargo.toml.
            let mut crate_dir = Some(dir);
            while let Some(d) = crate_dir {
                if files.contains(&join(d, "Cargo.toml")) {
                    break;
                }
                crate_dir = d.rsplit_once('/').map(|(p, _)| p).or(if d.is_empty() {
                    None
                } else {
                    Some("")
                });
            }
            let Some(crate_dir) = crate_dir else {
                return out;
            };
            let crate_name = read(&join(crate_dir, "Cargo.toml"))
                .and_then(|t| package_name(&t))
                .map(|n| n.replace('-', "_"));
            let module = match stem {
                "lib" | "main" => None,
                "mod" => dir.rsplit('/').next().map(str::to_owned),
                s => Some(s.to_owned()),
            };
            let needle = match (module, crate_name) {
                (Some(m), _) => m,
                (None, Some(c)) => c,
                (None, None) => return out,
            };
            let tests_dir = join(crate_dir, "tests/");
            for f in files.range(tests_dir.clone()..) {
                if !f.starts_with(&tests_dir) {
                    break;
                }
                if f.ends_with(".rs") && read(f).is_some_and(|text| contains_word(&text, &needle)) {
                    out.push(f.clone());
                }
            }
        }
        "ts" | "tsx" | "mts" | "cts" | "js" | "jsx" | "mjs" | "cjs" => {
            if stem.ends_with(".test") || stem.ends_with(".spec") || dir.ends_with("__tests__") {
                return out;
            }
            const EXTS: &[&str] = &["ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs"];
            let tests_dir = join(dir, "__tests__");
            for e in EXTS {
                for candidate in [
                    join(dir, &format!("{stem}.test.{e}")),
                    join(dir, &format!("{stem}.spec.{e}")),
                    join(&tests_dir, &format!("{stem}.{e}")),
                    join(&tests_dir, &format!("{stem}.test.{e}")),
                    join(&tests_dir, &format!("{stem}.spec.{e}")),
                ] {
                    if files.contains(&candidate) {
                        out.push(candidate);
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// The `name` of a Cargo.toml's `[package]` section.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some(rest) = line.strip_prefix("name")
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

/// Whether `word` occurs in `text` delimited by non-identifier characters.
pub fn contains_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = text[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident(c));
        before && after
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_name_reads_only_the_package_section() {
        let toml = "[dependencies]\nname = \"x\"\n[package]\nname = \"my-crate\"\n";
        assert_eq!(package_name(toml).as_deref(), Some("my-crate"));
    }

    #[test]
    fn words_need_identifier_boundaries() {
        assert!(contains_word("use app::config;", "config"));
        assert!(!contains_word("use app::configure;", "config"));
    }

    #[test]
    fn ts_tests_are_found_beside_and_in_tests_folders() {
        let files: BTreeSet<String> = [
            "src/a.ts",
            "src/a.test.ts",
            "src/a.spec.tsx",
            "src/__tests__/a.ts",
            "src/b.test.ts",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let t = test_files_for("src/a.ts", &Outline::default(), &files, &|_| None);
        assert_eq!(t, ["src/a.test.ts", "src/__tests__/a.ts", "src/a.spec.tsx"]);
    }
}
