//! Everything tree-sitter in Nuvira, in one place.
//!
//! - **Grammars** for Rust, TypeScript, TSX, Python and JavaScript, each behind its own cargo
//!   feature (all on by default), and the one table of languages by extension
//!   ([`language_of`], [`Language::for_path`]).
//! - **Syntax checks**: [`TreeSitterChecker`] implements [`nuvira_api::SyntaxChecker`]; the
//!   edit module validates every batch with it before writing, verify re-checks written files.
//! - **The one rule for "which errors did this edit introduce"**: [`introduced_by`], for any
//!   checker, so the verdict never depends on how an editor was built.
//! - **Symbol outlines** ([`outline`]): the named items of a file with their scope, owner and
//!   byte ranges, its imports and inline tests; inspection lists them, `ast-replace` finds the
//!   item to replace in them.
//!
//! Why it is shaped so:
//!
//! - **One crate owns tree-sitter.** Two copies of a language table or of a tree walk drift
//!   apart (inspect and `ast-replace` had one each); the contract crate stays free of it.
//! - **Edits of broken files must stay possible.** [`introduced_by`] compares the original
//!   and the new text and reports only the errors the new text adds (see [`split_errors`] for
//!   how errors are matched although lines shift).
//! - **Fast on the clean path.** Almost every file an agent edits is valid. Validation is one
//!   parse plus `root.has_error()` (a few nanoseconds, and exact); only when that is true do we
//!   walk the tree, and then only into children whose `has_error()` is true. Parsers are reused
//!   per thread, so the cost is the parse itself (see `benches/validate.rs`).
//! - **Locations people can use.** Lines and columns are 1-based; columns count characters,
//!   not bytes. Each diagnostic names the tree-sitter node kind (`ERROR` or `MISSING`).
//! - **What the grammars let through.** tree-sitter accepts `<div></span>` and Python it
//!   cannot indent-check, so JSX/TSX closing tags are compared with their opening tags, and a
//!   Python file the grammar accepts is compiled by `python3 -I -S -B` (standard input only,
//!   nothing written, nothing imported) when an interpreter is installed.
//! - **No grammar, no false alarm.** Files in other languages get [`SyntaxReport::unchecked`].
//!
//! ```
//! use nuvira_api::SyntaxChecker;
//! use nuvira_syntax::TreeSitterChecker;
//!
//! let checker = TreeSitterChecker::new();
//! let report = checker.check("src/lib.rs", "fn main() {\n    let x = 1;\n\nfn next() {}\n");
//! assert_eq!(report.language.as_deref(), Some("rust"));
//! let d = &report.diagnostics[0];
//! assert_eq!((d.line, d.node_kind.as_str()), (3, "MISSING"));
//! assert_eq!(d.message, "missing `}` (the `{` on line 1 is not closed)");
//!
//! // Only what the edit introduced counts.
//! let broken = "fn a() {\n    let = 1;\n}\n";
//! let edited = "fn a() {\n    let = 1;\n}\nfn b() {}\n";
//! assert!(nuvira_syntax::introduced_errors("x.rs", broken, edited).is_clean());
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod brackets;
mod check;
mod compare;
mod jsx;
mod language;
mod outline;
mod python;

pub use check::{check, check_as, diagnostics};
pub use compare::{SyntaxChange, compare, introduced_by, introduced_errors, split_errors};
pub use language::{Language, ParseError, language_of, parse, with_parser};
pub use outline::{Item, Outline, outline, outline_for_path};

use nuvira_api::{SyntaxChecker, SyntaxReport};

/// The tree-sitter [`SyntaxChecker`]: picks the grammar from the file extension (see
/// [`Language::for_path`]) and reports `ERROR` and `MISSING` nodes.
///
/// It holds no state (parsers are cached per thread), so it is cheap to create and share.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeSitterChecker;

impl TreeSitterChecker {
    /// A checker for every grammar compiled in.
    pub fn new() -> Self {
        Self
    }
}

impl SyntaxChecker for TreeSitterChecker {
    fn language_for(&self, path: &str) -> Option<&'static str> {
        Language::for_path(path).map(Language::name)
    }

    fn check(&self, path: &str, source: &str) -> SyntaxReport {
        check(path, source)
    }
}
