//! TypeScript, TSX and JavaScript: functions (also `const f = () => ...`), classes, interfaces,
//! type aliases, enums; methods as `Class::method`; `import ... from "x"` and `require("x")`.

use super::Outline;
use nuvira_api::Symbol;
use std::cell::RefCell;
use tree_sitter::{Node, Parser};

thread_local! {
    static TS: RefCell<Option<Parser>> = RefCell::new({
        let mut p = Parser::new();
        p.set_language(&tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into()).ok().map(|()| p)
    });
    static TSX: RefCell<Option<Parser>> = RefCell::new({
        let mut p = Parser::new();
        p.set_language(&tree_sitter_typescript::LANGUAGE_TSX.into()).ok().map(|()| p)
    });
}

/// The outline of TypeScript (or, with `tsx`, TSX/JavaScript) source text.
pub fn outline(source: &str, tsx: bool) -> Outline {
    let parser = if tsx { &TSX } else { &TS };
    let tree = parser.with(|p| p.borrow_mut().as_mut().and_then(|p| p.parse(source, None)));
    let mut out = Outline::default();
    if let Some(tree) = tree {
        visit(tree.root_node(), source.as_bytes(), &mut out, 0);
    }
    out
}

fn text<'a>(node: Node<'_>, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or_default()
}

fn line(node: Node<'_>) -> u32 {
    u32::try_from(node.start_position().row + 1).unwrap_or(u32::MAX)
}

fn unquote(s: &str) -> String {
    s.trim_matches(['"', '\'', '`']).to_owned()
}

/// Walks statements; `depth` bounds recursion into namespaces/modules.
fn visit(node: Node<'_>, src: &[u8], out: &mut Outline, depth: usize) {
    if depth > 8 {
        return;
    }
    let mut cursor = node.walk();
    for child in node.named_children(&mut cursor) {
        let name = child.child_by_field_name("name").map(|n| text(n, src));
        match child.kind() {
            "export_statement" => {
                if let Some(decl) = child.child_by_field_name("declaration") {
                    visit_decl(decl, src, out, depth);
                } else {
                    visit(child, src, out, depth + 1);
                }
                if let Some(source) = child.child_by_field_name("source") {
                    out.imports.push(unquote(text(source, src)));
                }
            }
            "import_statement" => {
                if let Some(source) = child.child_by_field_name("source") {
                    out.imports.push(unquote(text(source, src)));
                }
            }
            "internal_module" | "module" => {
                if let Some(name) = name {
                    out.symbols
                        .push(Symbol::new(unquote(name), "namespace", line(child)));
                }
                if let Some(body) = child.child_by_field_name("body") {
                    visit(body, src, out, depth + 1);
                }
            }
            "expression_statement" => {
                // `namespace X {}` parses as an expression statement holding an internal_module.
                visit(child, src, out, depth + 1);
            }
            _ => visit_decl(child, src, out, depth),
        }
    }
}

fn visit_decl(node: Node<'_>, src: &[u8], out: &mut Outline, depth: usize) {
    let name = node.child_by_field_name("name").map(|n| text(n, src));
    match node.kind() {
        "function_declaration" | "generator_function_declaration" | "function_signature" => {
            if let Some(name) = name {
                out.symbols.push(Symbol::new(name, "function", line(node)));
            }
        }
        "class_declaration" | "abstract_class_declaration" | "class" => {
            if let Some(name) = name {
                out.symbols.push(Symbol::new(name, "class", line(node)));
                if let Some(body) = node.child_by_field_name("body") {
                    members(body, src, name, out);
                }
            }
        }
        "interface_declaration" => {
            if let Some(name) = name {
                out.symbols.push(Symbol::new(name, "interface", line(node)));
            }
        }
        "type_alias_declaration" => {
            if let Some(name) = name {
                out.symbols.push(Symbol::new(name, "type", line(node)));
            }
        }
        "enum_declaration" => {
            if let Some(name) = name {
                out.symbols.push(Symbol::new(name, "enum", line(node)));
            }
        }
        "lexical_declaration" | "variable_declaration" => {
            let mut cursor = node.walk();
            for decl in node.named_children(&mut cursor) {
                if decl.kind() != "variable_declarator" {
                    continue;
                }
                let (Some(n), Some(v)) = (
                    decl.child_by_field_name("name"),
                    decl.child_by_field_name("value"),
                ) else {
                    continue;
                };
                match v.kind() {
                    "arrow_function" | "function_expression" | "function" => out
                        .symbols
                        .push(Symbol::new(text(n, src), "function", line(decl))),
                    "class" => {
                        let cname = text(n, src);
                        out.symbols.push(Symbol::new(cname, "class", line(decl)));
                        if let Some(body) = v.child_by_field_name("body") {
                            members(body, src, cname, out);
                        }
                    }
                    "call_expression" => require(v, src, out),
                    _ => {}
                }
            }
        }
        "internal_module" | "module" | "expression_statement" => {
            visit(node, src, out, depth + 1);
        }
        _ => {}
    }
}

/// `require("x")` as an import.
fn require(call: Node<'_>, src: &[u8], out: &mut Outline) {
    let is_require = call
        .child_by_field_name("function")
        .is_some_and(|f| text(f, src) == "require");
    if !is_require {
        return;
    }
    if let Some(args) = call.child_by_field_name("arguments")
        && let Some(first) = args.named_child(0)
        && first.kind() == "string"
    {
        out.imports.push(unquote(text(first, src)));
    }
}

fn members(body: Node<'_>, src: &[u8], class: &str, out: &mut Outline) {
    let mut cursor = body.walk();
    for m in body.named_children(&mut cursor) {
        if matches!(
            m.kind(),
            "method_definition" | "method_signature" | "abstract_method_signature"
        ) && let Some(n) = m.child_by_field_name("name")
        {
            out.symbols.push(Symbol::new(
                format!("{class}::{}", text(n, src)),
                "method",
                line(m),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_methods_and_arrow_functions_are_found() {
        let src = "import { readFile } from 'fs';\nconst path = require(\"path\");\nexport interface Options { a: number }\nexport type Id = string;\nexport class Loader {\n  load(id: Id) { return id; }\n  static create() { return new Loader(); }\n}\nexport const parseConfig = (s: string) => s;\nfunction helper() {}\nenum Color { Red }\n";
        let o = outline(src, false);
        let names: Vec<(&str, &str)> = o
            .symbols
            .iter()
            .map(|s| (s.name.as_str(), s.kind.as_str()))
            .collect();
        assert_eq!(
            names,
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

    #[test]
    fn tsx_components_parse_with_the_tsx_grammar() {
        let o = outline("export function App() { return <div>hi</div>; }\n", true);
        assert_eq!(o.symbols[0].name, "App");
    }
}
