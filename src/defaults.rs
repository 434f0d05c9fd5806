//! The built-in modules and the default engine.

use crate::registry::ModuleRegistry;

/// A registry with every built-in module: `inspect`, `edit`, `test`, `execute`, `verify`,
/// `report`.
pub fn registry() -> ModuleRegistry {
    let reg = ModuleRegistry::new();
    reg
}
