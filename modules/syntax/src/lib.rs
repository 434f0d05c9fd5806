//! Tree-sitter syntax checking for Nuvira.
//!
//! The edit module validates every batch before writing it; one of the checks is "does the new
//! text parse?". This crate answers that question for Rust, TypeScript, TSX, Python and
//! JavaScript (each grammar behind its own cargo feature, all on by default) and implements
//! [`nuvira_api::SyntaxChecker`] with [`TreeSitterChecker`].
//!
//! Why it is shaped so:
//!
//! - **Edits of broken files must stay possible.** [`introduced_errors`] compares the original
//!   and the new text and reports only the errors the new text adds (see its docs for how
//!   errors are matched although lines shift).
//! - **Fast on the clean path.** Almost every file an agent edits is valid. Validation is one
//!   parse plus `root.has_error()` (a few nanoseconds, and exact); only when that is true do we
//!   walk the tree, and then only into children whose `has_error()` is true. Parsers are reused
//!   per thread, so the cost is the parse itself (see `benches/validate.rs`).
//! - **Locations people can use.** Lines and columns are 1-based; columns count characters,
//!   not bytes. Each diagnostic names the tree-sitter node kind (`ERROR` or `MISSING`).
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
mod language;

pub use check::{check, check_as, diagnostics};
pub use compare::{SyntaxChange, compare, introduced_by, introduced_errors, split_errors};
pub use language::{Language, ParseError, parse, with_parser};

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
