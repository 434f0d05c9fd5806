//! `ast-replace`: replace a named item found in nuvira-syntax's outline of the file.

use crate::text::{is_crlf, read_existing, with_ending};
use nuvira_api::{EditEntry, EditError, EditStrategy, FileView};

/// Most symbols listed in a "not found" message.
const MAX_LISTED: usize = 40;

/// `ast-replace`: replaces the item named `symbol` in `path` with `content`.
///
/// Symbols come from [`nuvira_syntax::outline`], the tree-sitter walk inspection uses too
/// (declarations only, so a name in a comment or a string never matches):
///
/// - Rust: functions, `Type::method` (in `impl Type` and `impl Trait for Type` blocks),
///   `Trait::method`, structs, enums, unions, traits, type aliases, consts, statics, macros;
///   items in inline modules are also reachable as `module::item`.
/// - TypeScript / TSX / JavaScript: functions, `const f = () => …`, `const K = class …`,
///   classes, `Class::method` (or `Class.method`), interfaces, type aliases, enums, namespaces.
/// - Python: functions, classes, `Class::method` (or `Class.method`).
///
/// A bare name never matches a method. No match is an error listing the available symbols; more
/// than one match is an error listing them with their lines, except that overload signatures
/// give way to the one implementation they belong to. The replaced range is the item
/// itself; it grows to include a preceding `export`, attributes and doc comments (Rust) or
/// decorators when `content` starts with them. `content` is re-indented to the item's
/// indentation, so a method can be written at column 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct AstReplace;

/// A named item of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Qualified name: `name`, `Type::method`, `module::name`.
    pub name: String,
    /// What it is: `fn`, `method`, `struct`, `class`, ...
    pub kind: &'static str,
    /// Whether it is a member (method) of a type.
    pub member: bool,
    /// Whether it is a declaration without a body (a TypeScript overload signature, a Rust
    /// trait method without a default).
    pub signature: bool,
    /// 1-based line of the item.
    pub line: u32,
    /// Byte range of the item.
    pub range: std::ops::Range<usize>,
    /// Byte range including a leading `export`, attributes, doc comments or decorators.
    pub outer: std::ops::Range<usize>,
}

/// The named items of a file, or `None` when no grammar covers its path: the items of
/// [`nuvira_syntax::outline`] that can be replaced as a whole (not `impl` blocks, not names
/// declared together with others in one statement), named as `ast-replace` matches them.
pub fn symbols(path: &str, text: &str) -> Option<Vec<Symbol>> {
    let outline = nuvira_syntax::outline_for_path(path, text)?;
    Some(
        outline
            .items
            .into_iter()
            .filter(|i| i.kind != "impl" && !i.shared)
            .map(|i| Symbol {
                name: i.qualified(),
                kind: i.kind,
                member: i.owner.is_some(),
                signature: i.signature,
                line: i.line,
                range: i.range,
                outer: i.outer,
            })
            .collect(),
    )
}

/// Whether a requested symbol names a found one.
fn matches(requested: &str, symbol: &Symbol) -> bool {
    if symbol.name == requested {
        return true;
    }
    let qualified = requested.contains("::");
    symbol.name.ends_with(&format!("::{requested}")) && (qualified || !symbol.member)
}

/// The indentation of the line a byte offset is on.
fn indentation_at(text: &str, byte: usize) -> &str {
    let start = text
        .get(..byte)
        .and_then(|s| s.rfind('\n'))
        .map_or(0, |i| i + 1);
    let line = text.get(start..).unwrap_or("");
    let len = line.len() - line.trim_start_matches([' ', '\t']).len();
    &line[..len]
}

/// `content` dedented, with every line after the first indented by `indent`.
fn reindent(content: &str, indent: &str) -> String {
    let body = content.trim_end().trim_start_matches('\n');
    let common = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    body.lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if l.trim().is_empty() {
                ""
            } else {
                l.get(common..).unwrap_or(l.trim_start())
            };
            if i == 0 || l.is_empty() {
                l.to_owned()
            } else {
                format!("{indent}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl EditStrategy for AstReplace {
    fn name(&self) -> &str {
        "ast-replace"
    }

    fn apply(&self, entry: &EditEntry, files: &mut dyn FileView) -> Result<(), EditError> {
        let path = entry.require_path()?;
        let requested = entry
            .require("symbol", &entry.symbol)?
            .trim()
            .replace('.', "::");
        let content = entry.require("content", &entry.content)?;
        let err = |msg: String| EditError::new(Some(path.to_owned()), msg);
        let text = read_existing(files, entry, path)?;
        let Some(found) = symbols(path, &text) else {
            return Err(err(
                "ast-replace: no grammar for this file type (supported: .rs, .ts, .tsx, .js, .jsx, .py); use `search-replace` or `whole-file`"
                    .into(),
            ));
        };
        let mut hits: Vec<&Symbol> = found.iter().filter(|s| matches(&requested, s)).collect();
        // Overloads: several signatures and one implementation name the implementation.
        if hits.len() > 1 && hits.iter().filter(|s| !s.signature).count() == 1 {
            hits.retain(|s| !s.signature);
        }
        let symbol = match hits.as_slice() {
            [one] => *one,
            [] => {
                let mut names: Vec<&str> = found.iter().map(|s| s.name.as_str()).collect();
                names.dedup();
                let more = names.len().saturating_sub(MAX_LISTED);
                names.truncate(MAX_LISTED);
                let listed = if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                };
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                return Err(err(format!(
                    "ast-replace: symbol `{requested}` not found; available symbols: {listed}{more}; methods are named `Type::method`"
                )));
            }
            many => {
                let list: Vec<String> = many
                    .iter()
                    .map(|s| format!("{} `{}` at line {}", s.kind, s.name, s.line))
                    .collect();
                return Err(err(format!(
                    "ast-replace: symbol `{requested}` is ambiguous, it matches {}: {}; qualify it (`Type::method`, `module::item`) or use `search-replace`",
                    many.len(),
                    list.join(", ")
                ))
                .at_line(many[0].line));
            }
        };
        let head = content.trim_start();
        let wants_outer = ["export", "#[", "///", "/**", "@"]
            .iter()
            .any(|p| head.starts_with(p));
        let range = if wants_outer {
            symbol.outer.clone()
        } else {
            symbol.range.clone()
        };
        let indent = indentation_at(&text, range.start);
        let mut new = String::with_capacity(text.len() + content.len());
        new.push_str(&text[..range.start]);
        // The file's line endings: CRLF text is matched as such, and the content gets them.
        new.push_str(&with_ending(&reindent(content, indent), is_crlf(&text)));
        new.push_str(&text[range.end..]);
        files.write(path, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_symbols_are_qualified() {
        let src = "mod m { pub fn f() {} }\nstruct S;\nimpl<T> S<T> { fn new() {} }\ntrait T { fn d(&self) {} }\n";
        let names: Vec<String> = symbols("a.rs", src)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["m", "m::f", "S", "S::new", "T", "T::d"]);
    }

    #[test]
    fn bare_names_do_not_match_methods() {
        let s = &symbols("a.ts", "class A { run() {} }\n").unwrap()[1];
        assert_eq!(s.name, "A::run");
        assert!(!matches("run", s));
        assert!(matches("A::run", s));
    }

    #[test]
    fn reindent_dedents_then_indents() {
        assert_eq!(
            reindent("fn a() {\n    x\n}\n", "    "),
            "fn a() {\n        x\n    }"
        );
        assert_eq!(
            reindent("    fn a() {\n        x\n    }", "    "),
            "fn a() {\n        x\n    }"
        );
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;

    fn names(path: &str, src: &str) -> Vec<String> {
        symbols(path, src)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect()
    }

    #[test]
    fn javascript_and_python_symbols() {
        assert_eq!(
            names(
                "a.js",
                "export function f() {}\nconst g = () => 1;\nclass K { m() {} }\n"
            ),
            ["f", "g", "K", "K::m"]
        );
        assert_eq!(
            names(
                "a.py",
                "def f():\n    pass\n\nclass C:\n    @property\n    def p(self):\n        return 1\n"
            ),
            ["f", "C", "C::p"]
        );
    }

    #[test]
    fn shared_declarations_are_not_replaceable_but_class_expressions_are() {
        assert_eq!(
            names(
                "a.ts",
                "const a = () => 1, b = () => 2;\nexport const K = class { run() {} };\n"
            ),
            ["K", "K::run"]
        );
    }

    #[test]
    fn typescript_namespaces_interfaces_and_enums() {
        assert_eq!(
            names(
                "a.ts",
                "namespace N { export function f() {} }\ninterface I { m(): void }\nenum E { A }\ntype T = number;\n"
            ),
            ["N", "N::f", "I", "I::m", "E", "T"]
        );
    }
}
