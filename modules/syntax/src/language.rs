//! The grammars compiled in, path → grammar detection, and per-thread parser reuse.

use std::cell::RefCell;
use tree_sitter::{Parser, Tree};

/// A language with a tree-sitter grammar. Variants exist whether or not their cargo feature is
/// on; [`Language::grammar`] returns `None` for a grammar that is not compiled in, and
/// [`Language::for_path`] never returns such a language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Language {
    /// Rust (`.rs`), feature `rust`.
    Rust,
    /// TypeScript (`.ts`, `.mts`, `.cts`), feature `typescript`.
    TypeScript,
    /// TypeScript with JSX (`.tsx`), feature `typescript`.
    Tsx,
    /// Python (`.py`, `.pyi`), feature `python`.
    Python,
    /// JavaScript with JSX (`.js`, `.mjs`, `.cjs`, `.jsx`), feature `javascript`.
    JavaScript,
}

impl Language {
    /// Every language, compiled in or not.
    pub const ALL: [Language; 5] = [
        Language::Rust,
        Language::TypeScript,
        Language::Tsx,
        Language::Python,
        Language::JavaScript,
    ];

    /// The grammar for a path, by extension, if that grammar is compiled in.
    ///
    /// ```
    /// use nuvira_syntax::Language;
    /// assert_eq!(Language::for_path("src/main.rs"), Some(Language::Rust));
    /// assert_eq!(Language::for_path("web/App.tsx"), Some(Language::Tsx));
    /// assert_eq!(Language::for_path("README.md"), None);
    /// ```
    pub fn for_path(path: &str) -> Option<Language> {
        file_type(path)
            .and_then(|t| t.grammar)
            .filter(|l| l.grammar().is_some())
    }

    /// The grammar for a language name of [`language_of`] (`rust`, `typescript`, `tsx`,
    /// `javascript`, `jsx`, `python`), if that grammar is compiled in.
    ///
    /// ```
    /// use nuvira_syntax::Language;
    /// assert_eq!(Language::for_name("jsx"), Some(Language::JavaScript));
    /// assert_eq!(Language::for_name("go"), None);
    /// ```
    pub fn for_name(name: &str) -> Option<Language> {
        FILE_TYPES
            .iter()
            .find(|t| t.name == name && t.grammar.is_some())
            .and_then(|t| t.grammar)
            .filter(|l| l.grammar().is_some())
    }

    /// The language's name as reported in [`nuvira_api::SyntaxReport::language`]:
    /// `rust`, `typescript`, `tsx`, `python` or `javascript`.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::Python => "python",
            Language::JavaScript => "javascript",
        }
    }

    /// The tree-sitter grammar, or `None` when its cargo feature is off.
    pub fn grammar(self) -> Option<tree_sitter::Language> {
        match self {
            #[cfg(feature = "rust")]
            Language::Rust => Some(tree_sitter_rust::LANGUAGE.into()),
            #[cfg(feature = "typescript")]
            Language::TypeScript => Some(tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into()),
            #[cfg(feature = "typescript")]
            Language::Tsx => Some(tree_sitter_typescript::LANGUAGE_TSX.into()),
            #[cfg(feature = "python")]
            Language::Python => Some(tree_sitter_python::LANGUAGE.into()),
            #[cfg(feature = "javascript")]
            Language::JavaScript => Some(tree_sitter_javascript::LANGUAGE.into()),
            #[allow(
                unreachable_patterns,
                reason = "reachable when a grammar feature is off"
            )]
            _ => None,
        }
    }

    fn index(self) -> usize {
        match self {
            Language::Rust => 0,
            Language::TypeScript => 1,
            Language::Tsx => 2,
            Language::Python => 3,
            Language::JavaScript => 4,
        }
    }
}

/// One row of the extension table: a file extension, the language's name, and its grammar.
struct FileType {
    ext: &'static str,
    name: &'static str,
    grammar: Option<Language>,
}

const fn row(ext: &'static str, name: &'static str, grammar: Option<Language>) -> FileType {
    FileType { ext, name, grammar }
}

/// The one table of languages by extension: what inspection reports as a file's language and
/// which grammar parses it (`None`: known, but no grammar here).
const FILE_TYPES: &[FileType] = &[
    row("rs", "rust", Some(Language::Rust)),
    row("ts", "typescript", Some(Language::TypeScript)),
    row("mts", "typescript", Some(Language::TypeScript)),
    row("cts", "typescript", Some(Language::TypeScript)),
    row("tsx", "tsx", Some(Language::Tsx)),
    row("js", "javascript", Some(Language::JavaScript)),
    row("mjs", "javascript", Some(Language::JavaScript)),
    row("cjs", "javascript", Some(Language::JavaScript)),
    row("jsx", "jsx", Some(Language::JavaScript)),
    row("py", "python", Some(Language::Python)),
    row("pyi", "python", Some(Language::Python)),
    row("go", "go", None),
    row("java", "java", None),
    row("kt", "kotlin", None),
    row("kts", "kotlin", None),
    row("c", "c", None),
    row("h", "c", None),
    row("cc", "cpp", None),
    row("cpp", "cpp", None),
    row("cxx", "cpp", None),
    row("hpp", "cpp", None),
    row("hh", "cpp", None),
    row("cs", "csharp", None),
    row("rb", "ruby", None),
    row("php", "php", None),
    row("swift", "swift", None),
    row("scala", "scala", None),
    row("sh", "shell", None),
    row("bash", "shell", None),
    row("md", "markdown", None),
    row("markdown", "markdown", None),
    row("toml", "toml", None),
    row("yaml", "yaml", None),
    row("yml", "yaml", None),
    row("json", "json", None),
    row("html", "html", None),
    row("htm", "html", None),
    row("css", "css", None),
    row("scss", "css", None),
    row("sql", "sql", None),
];

fn file_type(path: &str) -> Option<&'static FileType> {
    let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let (_, ext) = file.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    FILE_TYPES.iter().find(|t| t.ext == ext)
}

/// The language of a path by extension, whether or not a grammar for it is compiled in: `rust`,
/// `typescript`, `tsx`, `javascript`, `jsx`, `python`, and names for common languages and
/// formats without a grammar here (`go`, `markdown`, `yaml`, ...).
///
/// ```
/// assert_eq!(nuvira_syntax::language_of("web/App.jsx"), Some("jsx"));
/// assert_eq!(nuvira_syntax::language_of("docs/README.md"), Some("markdown"));
/// assert_eq!(nuvira_syntax::language_of("Makefile"), None);
/// ```
pub fn language_of(path: &str) -> Option<&'static str> {
    file_type(path).map(|t| t.name)
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a text could not be parsed at all (syntax errors are not parse errors: they are nodes
/// in the tree).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The grammar's cargo feature is off.
    #[error(
        "parse {0}: the `{feature}` grammar is not compiled in; enable the cargo feature of nuvira-syntax",
        feature = feature_of(*.0)
    )]
    NotCompiledIn(Language),
    /// The grammar's ABI does not match the tree-sitter runtime (a dependency version mismatch).
    #[error("load the {0} grammar: {1}; align the tree-sitter versions in Cargo.toml")]
    IncompatibleGrammar(Language, String),
    /// tree-sitter returned no tree.
    #[error("parse {0}: tree-sitter returned no tree")]
    NoTree(Language),
}

fn feature_of(l: Language) -> &'static str {
    match l {
        Language::Rust => "rust",
        Language::TypeScript | Language::Tsx => "typescript",
        Language::Python => "python",
        Language::JavaScript => "javascript",
    }
}

thread_local! {
    /// One parser per grammar per thread: creating a parser and setting its language costs
    /// more than parsing a small file, so we never do it twice.
    static PARSERS: RefCell<[Option<Parser>; 5]> = const { RefCell::new([None, None, None, None, None]) };
}

/// Runs `f` with this thread's parser for `lang` (created on first use).
///
/// Re-entrant calls for the same language get a fresh parser rather than panicking.
///
/// # Errors
/// When the grammar is not compiled in or does not load.
pub fn with_parser<R>(lang: Language, f: impl FnOnce(&mut Parser) -> R) -> Result<R, ParseError> {
    let taken = PARSERS.with(|p| {
        p.try_borrow_mut()
            .ok()
            .and_then(|mut p| p[lang.index()].take())
    });
    let mut parser = match taken {
        Some(parser) => parser,
        None => {
            let grammar = lang.grammar().ok_or(ParseError::NotCompiledIn(lang))?;
            let mut parser = Parser::new();
            parser
                .set_language(&grammar)
                .map_err(|e| ParseError::IncompatibleGrammar(lang, e.to_string()))?;
            parser
        }
    };
    let out = f(&mut parser);
    PARSERS.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            p[lang.index()] = Some(parser);
        }
    });
    Ok(out)
}

/// Parses `source` as `lang` with this thread's cached parser.
///
/// ```
/// use nuvira_syntax::{parse, Language};
/// let tree = parse(Language::Rust, "fn main() {}").unwrap();
/// assert!(!tree.root_node().has_error());
/// ```
///
/// # Errors
/// When the grammar is not compiled in or does not load, or tree-sitter gives up.
pub fn parse(lang: Language, source: &str) -> Result<Tree, ParseError> {
    with_parser(lang, |parser| parser.parse(source, None))?.ok_or(ParseError::NoTree(lang))
}
