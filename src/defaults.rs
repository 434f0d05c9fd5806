//! The built-in modules and the default engine.
//!
//! | module | crate | what it does |
//! |---|---|---|
//! | `inspect` | nuvira-inspect | finds the files relevant to the goal |
//! | `edit` | nuvira-edit | validated, all-or-nothing, journaled edits |
//! | `test` | nuvira-runner | runs the tests in a sandbox and parses the results |
//! | `execute` | nuvira-runner | runs a command in a sandbox |
//! | `verify` | nuvira-verify | syntax, tests, security, goal alignment and lint checks |
//! | `report` | nuvira-report | writes the run's report files |
//! | `mcp` | nuvira-mcp (feature `mcp`) | calls a tool of an MCP server |

use crate::engine::EngineBuilder;
use crate::registry::ModuleRegistry;
use nuvira_api::Module;
use std::sync::Arc;

/// Every built-in module, freshly constructed.
pub fn modules() -> Vec<Arc<dyn Module>> {
    vec![
        Arc::new(nuvira_inspect::InspectModule::new()),
        Arc::new(nuvira_edit::EditModule::standard()),
        Arc::new(nuvira_runner::TestModule::new()),
        Arc::new(nuvira_runner::ExecuteModule::new()),
        Arc::new(nuvira_verify::VerifyModule::default()),
        Arc::new(nuvira_report::ReportModule),
        #[cfg(feature = "mcp")]
        Arc::new(nuvira_mcp::McpModule::new()),
    ]
}

/// A registry with every built-in module.
pub fn registry() -> ModuleRegistry {
    let mut reg = ModuleRegistry::new();
    for m in modules() {
        reg.replace(m);
    }
    reg
}

/// An engine builder with every built-in module registered; add or replace modules on it.
///
/// ```
/// let engine = nuvira::defaults::engine().workspace(".").build();
/// assert!(engine.registry().contains("edit"));
/// ```
pub fn engine() -> EngineBuilder {
    modules()
        .into_iter()
        .fold(crate::Engine::builder(), |b, m| b.replace_module(m))
}
