//! How an attestor configures and registers itself (issue 39): an [`AttestorFactory`] names the
//! attestor's id, the operator-managed lists it reads ([`EntryList`]), and builds the attestor
//! from its own table of the serve configuration (`[attestors.<id>]`), handed over as a serde
//! value: the attestor owns its configuration type and its parsing (pure: no file, no clock).
//! The shell keeps one list of factories, one line per attestor
//! (`commands::identity::attestors::FACTORIES`); an out-of-tree crate exports its factory and
//! its binary registers it (`AttestorRegistry::register_factory`).

use std::sync::Arc;

use super::contract::AnyAttestor;
use super::entries::EntryList;

/// An attestor's configuration table (`[attestors.<id>]`), as a serde value.
pub type ConfigTable = serde_json::Value;

/// What a factory is handed: its attestor's configuration table, `None` when the configuration
/// has none.
#[derive(Debug, Clone, Copy)]
pub struct AttestorSetup<'a> {
    /// `[attestors.<id>]`, as the configuration file wrote it.
    pub table: Option<&'a ConfigTable>,
}

/// What building an attestor answers: the attestor, or `None` when it is not configured (an
/// attestor that runs only when its table is present), or why its table is refused.
pub type Built = Result<Option<Arc<dyn AnyAttestor>>, String>;

/// One attestor, as the shell registers it.
#[derive(Debug, Clone, Copy)]
pub struct AttestorFactory {
    /// The id agents name.
    pub id: &'static str,
    /// The operator-managed lists it reads (`bcctl attestor entry --list <name>`).
    pub lists: &'static [EntryList],
    /// Builds it from its table.
    pub build: fn(&AttestorSetup<'_>) -> Built,
}

/// An attestor built (for a factory's `build`).
pub fn built<A: AnyAttestor + 'static>(attestor: A) -> Built {
    Ok(Some(Arc::new(attestor)))
}

/// A table read as the attestor's own configuration type, its errors named for the operator.
pub fn parse_table<T: serde::de::DeserializeOwned + Default>(
    id: &str,
    table: Option<&ConfigTable>,
) -> Result<T, String> {
    match table {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("[attestors.{id}]: {e}")),
    }
}

/// The list named `name` among `factories`' lists, else the generic rules under that name.
pub fn entry_list(factories: &[AttestorFactory], name: &'static str) -> EntryList {
    factories
        .iter()
        .flat_map(|f| f.lists.iter())
        .find(|l| l.name == name)
        .copied()
        .unwrap_or(EntryList::generic(name))
}
