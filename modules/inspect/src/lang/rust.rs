//! Rust: functions, structs, enums, unions, traits, impls, type aliases, macros; methods as
//! `Type::method` (and `Trait::method` for trait items); `use` and `extern crate` imports.

use super::Outline;
use nuvira_api::Symbol;
use std::cell::RefCell;
use tree_sitter::{Node, Parser};

thread_local! {
    static PARSER: RefCell<Option<Parser>> = RefCell::new({
        let mut p = Parser::new();
        p.set_language(&tree_sitter_rust::LANGUAGE.into()).ok().map(|()| p)
    });
}

/// The outline of Rust source text; empty if the grammar cannot be loaded.
pub fn outline(source: &str) -> Outline {
    let tree = PARSER.with(|p| p.borrow_mut().as_mut().and_then(|p| p.parse(source, None)));
    let mut out = Outline::default();
    if let Some(tree) = tree {
        visit(tree.root_node(), source.as_bytes(), None, &mut out);
    }
    out
}

fn text<'a>(node: Node<'_>, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or_default()
}

fn line(node: Node<'_>) -> u32 {
    u32::try_from(node.start_position().row + 1).unwrap_or(u32::MAX)
}

/// A type's bare name: `Foo<T>` → `Foo`, `a::b::Foo` → `Foo`, `&mut Foo` → `Foo`.
fn bare_type(t: &str) -> String {
    let t = t.split('<').next().unwrap_or(t);
    let t = t.rsplit("::").next().unwrap_or(t);
    t.trim_start_matches(['&', '*'])
        .trim_start_matches("mut ")
        .trim_start_matches("const ")
        .trim()
        .to_owned()
}

fn visit(node: Node<'_>, src: &[u8], owner: Option<&str>, out: &mut Outline) {
    let mut cursor = node.walk();
    for child in node.named_children(&mut cursor) {
        let name = child.child_by_field_name("name").map(|n| text(n, src));
        match child.kind() {
            "function_item" | "function_signature_item" => {
                if let Some(name) = name {
                    match owner {
                        Some(o) => out.symbols.push(Symbol::new(
                            format!("{o}::{name}"),
                            "method",
                            line(child),
                        )),
                        None => out.symbols.push(Symbol::new(name, "function", line(child))),
                    }
                }
            }
            kind @ ("struct_item" | "enum_item" | "union_item" | "type_item") => {
                if let Some(name) = name {
                    let kind = match kind {
                        "struct_item" => "struct",
                        "enum_item" => "enum",
                        "union_item" => "union",
                        _ => "type",
                    };
                    out.symbols.push(Symbol::new(name, kind, line(child)));
                }
            }
            "macro_definition" => {
                if let Some(name) = name {
                    out.symbols.push(Symbol::new(name, "macro", line(child)));
                }
            }
            "trait_item" => {
                if let Some(name) = name {
                    out.symbols.push(Symbol::new(name, "trait", line(child)));
                    if let Some(body) = child.child_by_field_name("body") {
                        visit(body, src, Some(name), out);
                    }
                }
            }
            "impl_item" => {
                let ty = child
                    .child_by_field_name("type")
                    .map(|t| bare_type(text(t, src)))
                    .unwrap_or_default();
                let label = match child.child_by_field_name("trait") {
                    Some(tr) => format!("{} for {ty}", bare_type(text(tr, src))),
                    None => ty.clone(),
                };
                out.symbols.push(Symbol::new(label, "impl", line(child)));
                if let Some(body) = child.child_by_field_name("body") {
                    visit(body, src, Some(&ty), out);
                }
            }
            "mod_item" => {
                if let Some(body) = child.child_by_field_name("body") {
                    visit(body, src, None, out);
                }
            }
            "attribute_item" => {
                let t = text(child, src);
                if t.contains("cfg(test)") && !t.contains("not(test)") {
                    out.has_inline_tests = true;
                }
            }
            "use_declaration" => {
                if let Some(arg) = child.child_by_field_name("argument") {
                    out.imports
                        .push(text(arg, src).split_whitespace().collect());
                }
            }
            "extern_crate_declaration" => {
                if let Some(name) = name {
                    out.imports.push(name.to_owned());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_named_after_their_type_and_generics_are_dropped() {
        let src = "use std::io::{self, Read};\nstruct Config<T> { t: T }\nimpl<T> Config<T> {\n    fn load(&self) {}\n}\nimpl Drop for Config<u8> { fn drop(&mut self) {} }\ntrait Store { fn get(&self); }\nmod inner { pub fn helper() {} }\n#[cfg(test)]\nmod tests {}\n";
        let o = outline(src);
        let names: Vec<(&str, &str)> = o
            .symbols
            .iter()
            .map(|s| (s.name.as_str(), s.kind.as_str()))
            .collect();
        assert_eq!(
            names,
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
}
