//! Nuvira's built-in edit strategies.
//!
//! Each strategy turns one [`EditEntry`] into changes on a [`FileView`] (an in-memory overlay of
//! the workspace; nothing here touches the disk), so the edit module can validate a whole batch
//! before writing anything. Every failure is an [`EditError`] naming the file and, where known,
//! the line, and saying what to do next — the message is meant for the model or person who
//! wrote the entry, so that a retry can succeed.
//!
//! [`EditEntry`]: nuvira_api::EditEntry
//! [`FileView`]: nuvira_api::FileView
//! [`EditError`]: nuvira_api::EditError
//!
//! | name | fields | rule |
//! |---|---|---|
//! | `search-replace` | `path`, `search`, `replace`, `all` | `search` must occur exactly once unless `all`; a miss reports the closest lines |
//! | `unified-diff` | `patch`, optional `path` | `diff -u` / git hunks, multi-file, `/dev/null` creates and deletes; context must match exactly (hunks may move, never fuzz); bare `@@` hunks need unique context |
//! | `regex` | `path`, `pattern`, `replace`, `all` | `$1` / `${name}` references; must match exactly once unless `all` |
//! | `whole-file` | `path`, `content` | creates or replaces |
//! | `delete-file` | `path` | the file must exist |
//! | `rename-file` | `path`, `to` | the source must exist, the target must not |
//! | `ast-replace` | `path`, `symbol`, `content` | replaces a named item found with tree-sitter |
//!
//! ```
//! use nuvira_api::{EditEntry, EditError, FileView};
//! use std::collections::BTreeMap;
//!
//! /// A FileView over a map, enough for an example.
//! #[derive(Default)]
//! struct Mem(BTreeMap<String, String>);
//! impl FileView for Mem {
//!     fn read(&mut self, p: &str) -> Result<Option<String>, EditError> { Ok(self.0.get(p).cloned()) }
//!     fn write(&mut self, p: &str, c: String) -> Result<(), EditError> { self.0.insert(p.into(), c); Ok(()) }
//!     fn delete(&mut self, p: &str) -> Result<(), EditError> { self.0.remove(p); Ok(()) }
//!     fn rename(&mut self, f: &str, t: &str) -> Result<(), EditError> {
//!         let c = self.0.remove(f).unwrap_or_default(); self.0.insert(t.into(), c); Ok(())
//!     }
//! }
//!
//! let mut files = Mem::default();
//! files.0.insert("src/lib.rs".into(), "fn parse_config() {}\n".into());
//! let entry = EditEntry {
//!     strategy: "search-replace".into(),
//!     path: Some("src/lib.rs".into()),
//!     search: Some("fn parse_config".into()),
//!     replace: Some("fn load_config".into()),
//!     ..EditEntry::default()
//! };
//! let strategy = nuvira_edit_strategies::by_name(&entry.strategy).unwrap();
//! strategy.apply(&entry, &mut files).unwrap();
//! assert_eq!(files.0["src/lib.rs"], "fn load_config() {}\n");
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod ast;
mod diff;
mod files;
mod regex_edit;
mod search;
mod text;

pub use ast::{AstReplace, Symbol, symbols};
pub use diff::{FilePatch, Hunk, UnifiedDiff, parse_patch};
pub use files::{DeleteFile, RenameFile, WholeFile};
pub use regex_edit::RegexReplace;
pub use search::SearchReplace;

use nuvira_api::EditStrategy;
use std::sync::Arc;

/// Every built-in strategy, in the order of the table above.
pub fn builtin() -> Vec<Arc<dyn EditStrategy>> {
    vec![
        Arc::new(SearchReplace),
        Arc::new(UnifiedDiff),
        Arc::new(RegexReplace),
        Arc::new(WholeFile),
        Arc::new(DeleteFile),
        Arc::new(RenameFile),
        Arc::new(AstReplace),
    ]
}

/// The names of the built-in strategies.
pub const NAMES: [&str; 7] = [
    "search-replace",
    "unified-diff",
    "regex",
    "whole-file",
    "delete-file",
    "rename-file",
    "ast-replace",
];

/// The built-in strategy called `name`, if any.
pub fn by_name(name: &str) -> Option<Arc<dyn EditStrategy>> {
    builtin().into_iter().find(|s| s.name() == name)
}
