//! Language inspectors: symbols and imports from source text, and the test files that belong
//! to a source file.
//!
//! The languages, their grammars and the outline extractor live in `nuvira-syntax` (one table
//! by extension, one tree walk, shared with the `ast-replace` strategy); this module picks the
//! view inspection reports. Rust, TypeScript/TSX, JavaScript/JSX and Python are outlined when
//! their grammar feature is on.

use nuvira_api::Symbol;
use nuvira_syntax::Language;
use std::collections::BTreeSet;

pub use nuvira_syntax::language_of;

/// What a language inspector found in one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outline {
    /// Definitions, in source order; methods are named `Type::method`.
    pub symbols: Vec<Symbol>,
    /// Imported modules or paths (`std::io::Read`, `./config`, `os.path`).
    pub imports: Vec<String>,
    /// Whether the file holds its own tests (Rust `#[cfg(test)]`).
    pub has_inline_tests: bool,
}

/// Whether a language inspector is compiled in for this language (a name of
/// [`language_of`]).
pub fn has_inspector(language: &str) -> bool {
    Language::for_name(language).is_some()
}

/// Symbols and imports of a file; an empty outline when no inspector covers the language.
///
/// Symbols are the items of [`nuvira_syntax::outline`]; methods are named after their owner
/// only (`Type::method`, not `module::Type::method`), other items by their own name. Kinds: `function`, `method`, `struct`,
/// `enum`, `union`, `type`, `trait`, `impl`, `macro`, `class`, `interface`, `namespace`;
/// constants, statics, modules and interface members are left out.
pub fn outline(language: &str, source: &str) -> Outline {
    let Some(found) =
        Language::for_name(language).and_then(|l| nuvira_syntax::outline(l, source).ok())
    else {
        return Outline::default();
    };
    let symbols = found
        .items
        .into_iter()
        .filter(|i| !matches!(i.kind, "const" | "static" | "mod"))
        .filter(|i| i.owner_kind != Some("interface"))
        .map(|i| {
            let kind = if i.kind == "fn" { "function" } else { i.kind };
            let name = match (&i.owner, kind) {
                (Some(owner), "method") => format!("{owner}::{}", i.name),
                (_, "namespace") => i.name.trim_matches(['"', '\'', '`']).to_owned(),
                _ => i.name,
            };
            Symbol::new(name, kind, i.line)
        })
        .collect();
    Outline {
        symbols,
        imports: found.imports,
        has_inline_tests: found.has_inline_tests,
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

    #[cfg(any(feature = "rust", feature = "typescript"))]
    fn kinds(o: &Outline) -> Vec<(&str, &str)> {
        o.symbols
            .iter()
            .map(|s| (s.name.as_str(), s.kind.as_str()))
            .collect()
    }

    #[cfg(feature = "rust")]
    #[test]
    fn rust_methods_are_named_after_their_type_and_generics_are_dropped() {
        let src = "use std::io::{self, Read};\nstruct Config<T> { t: T }\nimpl<T> Config<T> {\n    fn load(&self) {}\n}\nimpl Drop for Config<u8> { fn drop(&mut self) {} }\ntrait Store { fn get(&self); }\nmod inner { pub fn helper() {} }\nconst N: u8 = 1;\n#[cfg(test)]\nmod tests {}\n";
        let o = outline("rust", src);
        assert_eq!(
            kinds(&o),
            [
                ("Config", "struct"),
                ("Config", "impl"),
                ("Config::load", "method"),
                ("Drop for Config", "impl"),
                ("Config::drop", "method"),
                ("Store", "trait"),
                ("Store::get", "method"),
                ("helper", "function"),
            ]
        );
        assert_eq!(o.symbols[2].line, 4);
        assert_eq!(o.imports, ["std::io::{self,Read}"]);
        assert!(o.has_inline_tests);
    }

    #[cfg(feature = "typescript")]
    #[test]
    fn typescript_classes_methods_and_arrow_functions_are_found() {
        let src = "import { readFile } from 'fs';\nconst path = require(\"path\");\nexport interface Options { a: number; m(): void }\nexport type Id = string;\nexport class Loader {\n  load(id: Id) { return id; }\n  static create() { return new Loader(); }\n}\nexport const parseConfig = (s: string) => s;\nfunction helper() {}\nenum Color { Red }\n";
        let o = outline("typescript", src);
        assert_eq!(
            kinds(&o),
            [
                ("Options", "interface"),
                ("Id", "type"),
                ("Loader", "class"),
                ("Loader::load", "method"),
                ("Loader::create", "method"),
                ("parseConfig", "function"),
                ("helper", "function"),
                ("Color", "enum"),
            ]
        );
        assert_eq!(o.imports, ["fs", "path"]);
        assert_eq!(o.symbols[3].line, 6);
    }

    #[cfg(feature = "typescript")]
    #[test]
    fn tsx_components_parse_with_the_tsx_grammar() {
        let o = outline("tsx", "export function App() { return <div>hi</div>; }\n");
        assert_eq!(o.symbols[0].name, "App");
    }

    #[test]
    fn languages_without_a_grammar_have_no_inspector() {
        assert!(!has_inspector("go"));
        assert_eq!(outline("go", "func main() {}"), Outline::default());
    }

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
