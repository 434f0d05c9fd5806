//! Symbol outlines: the named items of a file, its imports, and whether it holds its own tests.
//!
//! One extractor for every caller: `nuvira-inspect` lists symbols and imports in its artifacts,
//! the `ast-replace` strategy finds the item to replace. The tree is walked by hand rather than
//! matched with queries because an item's name depends on what encloses it (`Type::method` in
//! an `impl`, `module::item`, `Class::method`), which a walk carries naturally; each caller picks
//! the view it needs from the same [`Item`]s.

use crate::language::{Language, ParseError, parse};
use std::ops::Range;
use tree_sitter::Node;

/// How deep namespaces, modules and exports are followed (deeper items are not listed).
const MAX_DEPTH: usize = 16;

/// A named item of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Item {
    /// The item's own name (`method` for `Type::method`).
    pub name: String,
    /// What it is: `fn`, `method`, `struct`, `enum`, `union`, `trait`, `impl`, `type`, `const`,
    /// `static`, `macro`, `mod` (Rust); `fn`, `method`, `class`, `interface`, `type`, `enum`,
    /// `namespace` (TypeScript, JavaScript); `fn`, `method`, `class` (Python). An `impl` item
    /// is named after its block: `Type` or `Trait for Type`.
    pub kind: &'static str,
    /// The enclosing modules or namespaces, outermost first.
    pub scope: Vec<String>,
    /// The type, trait, class or interface the item is a member of.
    pub owner: Option<String>,
    /// What the owner is: `impl`, `trait`, `class` or `interface`.
    pub owner_kind: Option<&'static str>,
    /// A declaration without a body (a TypeScript overload or interface signature, a Rust trait
    /// method without a default).
    pub signature: bool,
    /// Declared in one statement with other names (`const a = () => 1, b = () => 2`): `range`
    /// and `outer` then cover only its own declarator.
    pub shared: bool,
    /// 1-based line of the item.
    pub line: u32,
    /// Byte range of the item.
    pub range: Range<usize>,
    /// Byte range including a leading `export`, attributes, doc comments (Rust) or decorators.
    pub outer: Range<usize>,
}

impl Item {
    /// The name qualified by scope and owner: `module::Type::method`, `Namespace::f`.
    pub fn qualified(&self) -> String {
        let mut parts: Vec<&str> = self.scope.iter().map(String::as_str).collect();
        parts.extend(self.owner.as_deref());
        parts.push(&self.name);
        parts.join("::")
    }
}

/// What a file defines and imports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outline {
    /// Named items, in source order (an owner before its members).
    pub items: Vec<Item>,
    /// Imported modules or paths: `std::io::Read` (Rust `use`), `./config` (`import ... from`,
    /// `require(...)`), `os.path` (Python `import`, `from ... import`).
    pub imports: Vec<String>,
    /// Whether the file holds its own tests (a Rust `#[cfg(test)]` item).
    pub has_inline_tests: bool,
}

/// The outline of a text in a given language.
///
/// ```
/// use nuvira_syntax::{Language, outline};
/// let o = outline(Language::Rust, "mod m { pub struct S; }\nimpl m::S { fn new() {} }\n")?;
/// let names: Vec<String> = o.items.iter().map(|i| i.qualified()).collect();
/// assert_eq!(names, ["m", "m::S", "S", "S::new"]);
/// assert_eq!(o.items[2].kind, "impl");
/// # Ok::<(), nuvira_syntax::ParseError>(())
/// ```
///
/// # Errors
/// When the grammar is not compiled in or does not load.
pub fn outline(lang: Language, source: &str) -> Result<Outline, ParseError> {
    let tree = parse(lang, source)?;
    let mut walk = Walk {
        lang,
        src: source,
        out: Outline::default(),
    };
    walk.children(tree.root_node(), &Context::default());
    Ok(walk.out)
}

/// The outline of a file, picking the grammar from its path; `None` when no compiled-in
/// grammar covers it.
pub fn outline_for_path(path: &str, source: &str) -> Option<Outline> {
    outline(Language::for_path(path)?, source).ok()
}

/// Where the walk is: the enclosing scope and owner.
#[derive(Default, Clone)]
struct Context {
    scope: Vec<String>,
    owner: Option<(String, &'static str)>,
    depth: usize,
}

impl Context {
    fn owned(&self, owner: &str, kind: &'static str) -> Context {
        Context {
            scope: self.scope.clone(),
            owner: Some((owner.to_owned(), kind)),
            depth: self.depth + 1,
        }
    }

    fn scoped(&self, name: &str) -> Context {
        let mut scope = self.scope.clone();
        scope.push(name.to_owned());
        Context {
            scope,
            owner: None,
            depth: self.depth + 1,
        }
    }

    fn deeper(&self) -> Context {
        Context {
            depth: self.depth + 1,
            ..self.clone()
        }
    }
}

struct Walk<'s> {
    lang: Language,
    src: &'s str,
    out: Outline,
}

/// Where an item is and what encloses its text.
struct Span<'t> {
    /// The item's node: its line, and its `range` unless `range` is given.
    node: Node<'t>,
    /// The node whose byte range is the item's `outer`.
    outer: Node<'t>,
    /// The item's byte range when it is not `node`'s.
    range: Option<Node<'t>>,
}

impl<'t> Span<'t> {
    fn of(node: Node<'t>, outer: Node<'t>) -> Self {
        Span {
            node,
            outer,
            range: None,
        }
    }
}

impl<'s> Walk<'s> {
    fn text(&self, node: Node<'_>) -> &'s str {
        self.src.get(node.byte_range()).unwrap_or("")
    }

    fn name_of(&self, node: Node<'_>) -> Option<&'s str> {
        node.child_by_field_name("name").map(|n| self.text(n))
    }

    fn push(&mut self, cx: &Context, name: &str, kind: &'static str, span: Span<'_>) {
        let range_node = span.range.unwrap_or(span.node);
        let range = range_node.byte_range();
        self.out.items.push(Item {
            name: name.to_owned(),
            kind,
            scope: cx.scope.clone(),
            owner: cx.owner.as_ref().map(|(o, _)| o.clone()),
            owner_kind: cx.owner.as_ref().map(|(_, k)| *k),
            signature: matches!(
                range_node.kind(),
                "function_signature"
                    | "method_signature"
                    | "abstract_method_signature"
                    | "function_signature_item"
            ),
            shared: false,
            line: u32::try_from(span.node.start_position().row + 1).unwrap_or(u32::MAX),
            outer: span.outer.start_byte().min(range.start)..span.outer.end_byte().max(range.end),
            range,
        });
    }

    fn children(&mut self, node: Node<'_>, cx: &Context) {
        if cx.depth > MAX_DEPTH {
            return;
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
        for child in children {
            match self.lang {
                Language::Rust => self.rust(child, cx),
                Language::TypeScript | Language::Tsx | Language::JavaScript => {
                    self.script(child, child, cx);
                }
                Language::Python => self.python(child, cx),
            }
        }
    }

    fn rust(&mut self, node: Node<'_>, cx: &Context) {
        let kind = match node.kind() {
            "function_item" | "function_signature_item" if cx.owner.is_some() => "method",
            "function_item" | "function_signature_item" => "fn",
            "struct_item" => "struct",
            "enum_item" => "enum",
            "union_item" => "union",
            "trait_item" => "trait",
            "type_item" => "type",
            "const_item" => "const",
            "static_item" => "static",
            "macro_definition" => "macro",
            "mod_item" => "mod",
            "impl_item" => return self.rust_impl(node, cx),
            "attribute_item" => {
                let t = self.text(node);
                if t.contains("cfg(test)") && !t.contains("not(test)") {
                    self.out.has_inline_tests = true;
                }
                return;
            }
            "use_declaration" => {
                if let Some(arg) = node.child_by_field_name("argument") {
                    let import = self.text(arg).split_whitespace().collect();
                    self.out.imports.push(import);
                }
                return;
            }
            "extern_crate_declaration" => {
                if let Some(name) = self.name_of(node) {
                    self.out.imports.push(name.to_owned());
                }
                return;
            }
            _ => return,
        };
        let Some(name) = self.name_of(node) else {
            return;
        };
        let outer = rust_outer(node, self.src);
        self.push(cx, name, kind, Span::of(node, outer));
        match (kind, node.child_by_field_name("body")) {
            ("trait", Some(body)) => self.children(body, &cx.owned(name, "trait")),
            ("mod", Some(body)) => self.children(body, &cx.scoped(name)),
            _ => {}
        }
    }

    /// An `impl` block: an item named `Type` or `Trait for Type`, and its members as
    /// `Type::member`.
    fn rust_impl(&mut self, node: Node<'_>, cx: &Context) {
        let Some(target) = node
            .child_by_field_name("type")
            .and_then(|t| type_name(t, self.src))
        else {
            return;
        };
        let label = match node
            .child_by_field_name("trait")
            .and_then(|t| type_name(t, self.src))
        {
            Some(tr) => format!("{tr} for {target}"),
            None => target.to_owned(),
        };
        let outer = rust_outer(node, self.src);
        self.push(cx, &label, "impl", Span::of(node, outer));
        if let Some(body) = node.child_by_field_name("body") {
            self.children(body, &cx.owned(target, "impl"));
        }
    }

    /// TypeScript, TSX and JavaScript. `outer` is the node the item's `outer` range starts from
    /// (an `export` statement around a declaration).
    fn script(&mut self, node: Node<'_>, outer: Node<'_>, cx: &Context) {
        let kind = match node.kind() {
            "export_statement" => {
                if let Some(decl) = node.child_by_field_name("declaration") {
                    self.script(decl, node, cx);
                }
                if let Some(source) = node.child_by_field_name("source") {
                    self.out.imports.push(unquote(self.text(source)));
                }
                return;
            }
            "import_statement" => {
                if let Some(source) = node.child_by_field_name("source") {
                    self.out.imports.push(unquote(self.text(source)));
                }
                return;
            }
            "expression_statement" => {
                // `namespace X {}` parses as an expression statement holding an internal_module.
                let mut c = node.walk();
                let inner: Vec<Node<'_>> = node.named_children(&mut c).collect();
                for n in inner.into_iter().filter(|n| n.kind() == "internal_module") {
                    self.script(n, outer, &cx.deeper());
                }
                return;
            }
            "lexical_declaration" | "variable_declaration" => {
                return self.script_declaration(node, outer, cx);
            }
            "function_declaration" | "generator_function_declaration" | "function_signature" => {
                "fn"
            }
            "class_declaration" | "abstract_class_declaration" => "class",
            "interface_declaration" => "interface",
            "type_alias_declaration" => "type",
            "enum_declaration" => "enum",
            "internal_module" | "module" => "namespace",
            "method_definition" | "method_signature" | "abstract_method_signature" => "method",
            _ => return,
        };
        let Some(name) = self.name_of(node) else {
            return;
        };
        let outer = if kind == "method" {
            decorated(node)
        } else {
            outer
        };
        self.push(cx, name, kind, Span::of(node, outer));
        if let Some(body) = node.child_by_field_name("body") {
            match kind {
                "class" | "interface" => self.children(body, &cx.owned(name, kind)),
                "namespace" => self.children(body, &cx.scoped(name)),
                _ => {}
            }
        }
    }

    /// `const f = () => ...`, `let K = class {...}`, `const x = require("x")`.
    fn script_declaration(&mut self, node: Node<'_>, outer: Node<'_>, cx: &Context) {
        let mut c = node.walk();
        let declarators: Vec<Node<'_>> = node
            .named_children(&mut c)
            .filter(|d| d.kind() == "variable_declarator")
            .collect();
        let shared = declarators.len() > 1;
        for decl in declarators {
            let (Some(name), Some(value)) = (
                decl.child_by_field_name("name").map(|n| self.text(n)),
                decl.child_by_field_name("value"),
            ) else {
                continue;
            };
            let kind = match value.kind() {
                "arrow_function" | "function_expression" | "function" => "fn",
                "class" => "class",
                "call_expression" => {
                    self.require(value);
                    continue;
                }
                _ => continue,
            };
            let span = if shared {
                Span::of(decl, decl)
            } else {
                Span {
                    node: decl,
                    outer,
                    range: Some(node),
                }
            };
            self.push(cx, name, kind, span);
            if let Some(last) = self.out.items.last_mut() {
                last.shared = shared;
            }
            if let ("class", Some(body)) = (kind, value.child_by_field_name("body")) {
                self.children(body, &cx.owned(name, "class"));
            }
        }
    }

    /// `require("x")` as an import.
    fn require(&mut self, call: Node<'_>) {
        let is_require = call
            .child_by_field_name("function")
            .is_some_and(|f| self.text(f) == "require");
        if !is_require {
            return;
        }
        if let Some(args) = call.child_by_field_name("arguments")
            && let Some(first) = args.named_child(0)
            && first.kind() == "string"
        {
            self.out.imports.push(unquote(self.text(first)));
        }
    }

    fn python(&mut self, node: Node<'_>, cx: &Context) {
        let (def, outer) = match node.kind() {
            "decorated_definition" => match node.child_by_field_name("definition") {
                Some(d) => (d, node),
                None => return,
            },
            "import_statement" => {
                let mut c = node.walk();
                let names: Vec<Node<'_>> = node.children_by_field_name("name", &mut c).collect();
                for n in names {
                    let module = match n.kind() {
                        "aliased_import" => n.child_by_field_name("name"),
                        _ => Some(n),
                    };
                    if let Some(m) = module {
                        self.out.imports.push(self.text(m).to_owned());
                    }
                }
                return;
            }
            "import_from_statement" => {
                if let Some(m) = node.child_by_field_name("module_name") {
                    self.out.imports.push(self.text(m).to_owned());
                }
                return;
            }
            _ => (node, node),
        };
        let kind = match def.kind() {
            "function_definition" if cx.owner.is_some() => "method",
            "function_definition" => "fn",
            "class_definition" => "class",
            _ => return,
        };
        let Some(name) = self.name_of(def) else {
            return;
        };
        self.push(cx, name, kind, Span::of(def, outer));
        if let ("class", Some(body)) = (kind, def.child_by_field_name("body")) {
            self.children(body, &cx.owned(name, "class"));
        }
    }
}

/// The base name of a Rust type: `Foo` for `Foo<T>`, `a::Foo`, `&Foo`, `&mut Foo<T>`.
fn type_name<'a>(node: Node<'_>, text: &'a str) -> Option<&'a str> {
    match node.kind() {
        "generic_type" | "reference_type" | "pointer_type" => node
            .child_by_field_name("type")
            .and_then(|t| type_name(t, text)),
        "scoped_type_identifier" => node
            .child_by_field_name("name")
            .and_then(|t| text.get(t.byte_range())),
        _ => text.get(node.byte_range()),
    }
}

/// A TS method with its preceding decorators (siblings in the class body).
fn decorated(node: Node<'_>) -> Node<'_> {
    let mut first = node;
    while let Some(prev) = first.prev_named_sibling() {
        if prev.kind() != "decorator" {
            break;
        }
        first = prev;
    }
    first
}

/// A Rust item with its preceding attributes and doc comments.
fn rust_outer<'t>(node: Node<'t>, text: &str) -> Node<'t> {
    let mut first = node;
    while let Some(prev) = first.prev_sibling() {
        let t = text.get(prev.byte_range()).unwrap_or("");
        let doc = matches!(prev.kind(), "line_comment" | "block_comment")
            && (t.starts_with("///") || t.starts_with("/**"));
        if prev.kind() != "attribute_item" && !doc {
            break;
        }
        first = prev;
    }
    first
}

fn unquote(s: &str) -> String {
    s.trim_matches(['"', '\'', '`']).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "typescript")]
    fn items(lang: Language, src: &str) -> Vec<(String, &'static str, bool)> {
        outline(lang, src)
            .map(|o| o.items)
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i.qualified(), i.kind, i.shared))
            .collect()
    }

    #[cfg(feature = "rust")]
    #[test]
    fn rust_items_know_their_scope_and_owner() {
        let src = "mod m { pub fn f() {} }\nstruct S;\nimpl<T> S<T> { const C: u8 = 1; fn new() {} }\nimpl Drop for &mut S { fn drop(&mut self) {} }\ntrait T { fn d(&self); }\n";
        let o = outline(Language::Rust, src).unwrap();
        let got: Vec<(String, &str)> = o.items.iter().map(|i| (i.qualified(), i.kind)).collect();
        let want = [
            ("m", "mod"),
            ("m::f", "fn"),
            ("S", "struct"),
            ("S", "impl"),
            ("S::C", "const"),
            ("S::new", "method"),
            ("Drop for S", "impl"),
            ("S::drop", "method"),
            ("T", "trait"),
            ("T::d", "method"),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1), w);
        }
        let d = o.items.last().unwrap();
        assert!(d.signature);
        assert_eq!(
            (d.owner.as_deref(), d.owner_kind),
            (Some("T"), Some("trait"))
        );
    }

    #[cfg(feature = "typescript")]
    #[test]
    fn typescript_shared_declarations_class_expressions_and_exported_namespaces() {
        let src = "const a = () => 1, b = function () {};\nexport const K = class { run() {} };\nexport namespace N { export function f() {} }\n";
        let got = items(Language::TypeScript, src);
        let want = [
            ("a", "fn", true),
            ("b", "fn", true),
            ("K", "class", false),
            ("K::run", "method", false),
            ("N", "namespace", false),
            ("N::f", "fn", false),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1, g.2), w);
        }
        // A shared declarator's range is its own; a lone one's is the whole statement.
        let o = outline(Language::TypeScript, src).unwrap();
        assert_eq!(&src[o.items[1].range.clone()], "b = function () {}");
        assert_eq!(
            &src[o.items[2].outer.clone()],
            "export const K = class { run() {} };"
        );
    }

    #[cfg(feature = "python")]
    #[test]
    fn python_imports_and_decorated_methods() {
        let src = "import os.path, sys as system\nfrom .pkg import x\n\nclass C:\n    @property\n    def p(self):\n        return 1\n";
        let o = outline(Language::Python, src).unwrap();
        assert_eq!(o.imports, ["os.path", "sys", ".pkg"]);
        let p = &o.items[1];
        assert_eq!((p.qualified().as_str(), p.kind), ("C::p", "method"));
        assert!(src[p.outer.clone()].starts_with("@property"));
    }

    #[test]
    fn unknown_files_have_no_outline() {
        assert_eq!(outline_for_path("notes.md", "# hi"), None);
    }
}
