//! The module registry: which module runs a step named `module: x`.

use nuvira_api::{Module, ModuleKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Registered modules by name.
///
/// ```
/// use nuvira_engine::registry::ModuleRegistry;
/// let reg = ModuleRegistry::new();
/// assert!(reg.get("edit").is_none());
/// ```
#[derive(Clone, Default)]
pub struct ModuleRegistry {
    modules: BTreeMap<String, Arc<dyn Module>>,
}

impl std::fmt::Debug for ModuleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.modules.keys()).finish()
    }
}

/// A module's name and kind, for listings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModuleInfo {
    /// The name plans use.
    pub name: String,
    /// The module's role.
    pub kind: ModuleKind,
}

/// Registering a name twice without saying it should replace the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a module named `{0}` is already registered: use `replace` to override it")]
pub struct AlreadyRegistered(pub String);

impl ModuleRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a module under its name.
    ///
    /// # Errors
    /// [`AlreadyRegistered`] when the name is taken; use [`replace`](Self::replace) to
    /// override a module (e.g. a built-in).
    pub fn register(&mut self, module: Arc<dyn Module>) -> Result<(), AlreadyRegistered> {
        let name = module.name().to_owned();
        if self.modules.contains_key(&name) {
            return Err(AlreadyRegistered(name));
        }
        self.modules.insert(name, module);
        Ok(())
    }

    /// Adds a module, replacing (and returning) any module of the same name.
    pub fn replace(&mut self, module: Arc<dyn Module>) -> Option<Arc<dyn Module>> {
        self.modules.insert(module.name().to_owned(), module)
    }

    /// Removes a module.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Module>> {
        self.modules.remove(name)
    }

    /// The module of a name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Module>> {
        self.modules.get(name)
    }

    /// Whether a name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.modules.contains_key(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.modules.keys().map(String::as_str).collect()
    }

    /// Registered modules with their kinds, sorted by name; `kind` filters.
    pub fn list(&self, kind: Option<ModuleKind>) -> Vec<ModuleInfo> {
        self.modules
            .values()
            .filter(|m| kind.is_none_or(|k| m.kind() == k))
            .map(|m| ModuleInfo {
                name: m.name().to_owned(),
                kind: m.kind(),
            })
            .collect()
    }
}
