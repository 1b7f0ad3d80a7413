//! Operator-managed attestor entries (issue 39): one generic list per name, each entry naming a
//! key an attestor looks up (a TPM's EK, a cloud account, an asset tag) and where a machine
//! proving it joins. An attestor that needs such a list declares an [`EntryList`] in its own
//! file and asks for [`FactKey::Entry`](super::contract::FactKey::Entry) in its plan; events,
//! table, command and `bcctl attestor entry` verb are this one stack for every list.
//!
//! The decisions here are pure: input checks (the list checks its own key and role), one active
//! entry per (list, key) (the shell appends to the key's stream at the version it read, so two
//! concurrent adds cannot both succeed), removal of an active entry only.

use events::schema::{AttestorEntryAdded, AttestorEntryRemoved};

use super::pools::{check_id, check_text, AttestAdminRefusal};
use crate::identity::{Decision, IdentityEvent};
use crate::pki::{NodeRole, SiteId};

/// At most this many bytes of note or removal reason.
pub const MAX_ENTRY_TEXT: usize = 512;

/// One operator-managed list, declared by the attestor that reads it.
#[derive(Debug, Clone, Copy)]
pub struct EntryList {
    /// Its name (`tpm-allow`, `cloud-account`): `attestor_entries.list`.
    pub name: &'static str,
    /// Its entries' id prefix, without the `_` (`tpma`, `cloud`).
    pub id_prefix: &'static str,
    /// The stream of a key's entries is `<stream_prefix>/<key>`; `None`:
    /// `attestor-entry/<name>/<key>` (every list but the two that had streams of their own).
    pub stream_prefix: Option<&'static str>,
    /// What operators call an entry (`tpm allow-list entry`), in refusals.
    pub noun: &'static str,
    /// What a removed entry is (`revoked`, `removed`), in refusals.
    pub removed: &'static str,
    /// The key as typed → its canonical form (the one stored and looked up), or why not.
    pub key: fn(&str) -> Result<String, AttestAdminRefusal>,
    /// The role as typed (empty when none was) → the role its machines join as (`None`: the
    /// request's), or why not.
    pub role: fn(&str) -> Result<Option<NodeRole>, AttestAdminRefusal>,
    /// The refusal text of an add whose key an active entry already holds: (key, its id).
    pub exists: fn(&str, &str) -> String,
}

impl EntryList {
    /// The stream of `key`'s entries.
    pub fn stream(&self, key: &str) -> String {
        match self.stream_prefix {
            Some(prefix) => format!("{prefix}/{key}"),
            None => format!("attestor-entry/{}/{key}", self.name),
        }
    }

    /// A list with the generic rules (what a new attestor declares, and what `bcctl attestor
    /// entry` uses for a list it has no declaration of): ids `ent_…`, a key of 1 to 256 bytes
    /// with no whitespace or control character, an optional role, streams
    /// `attestor-entry/<name>/<key>`.
    pub const fn generic(name: &'static str) -> EntryList {
        EntryList {
            name,
            id_prefix: "ent",
            stream_prefix: None,
            noun: "attestor entry",
            removed: "removed",
            key: generic_key,
            role: any_role,
            exists: |key, id| format!("key {key} is already listed by {id} (remove it first)"),
        }
    }
}

/// The generic key rule: 1 to 256 bytes, no whitespace or control character, kept as typed.
pub fn generic_key(text: &str) -> Result<String, AttestAdminRefusal> {
    if text.is_empty() || text.chars().any(char::is_whitespace) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "the key {text:?} must be non-empty with no whitespace"
        )));
    }
    check_text("key", text, 256)?;
    Ok(text.to_owned())
}

/// The generic role rule: none, or any agent role (`node`, `site`, `ramdisk`).
pub fn any_role(text: &str) -> Result<Option<NodeRole>, AttestAdminRefusal> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<NodeRole>().map(Some).map_err(|_| {
        AttestAdminRefusal::Invalid(format!("the role {text:?} must be node, site or ramdisk"))
    })
}

/// A list's role rule when its entries name none: only an empty role is accepted.
pub fn no_role(text: &str) -> Result<Option<NodeRole>, AttestAdminRefusal> {
    if text.is_empty() {
        Ok(None)
    } else {
        Err(AttestAdminRefusal::Invalid(format!(
            "this list's entries name no role (got {text:?})"
        )))
    }
}

/// An entry as an attestor reads it (the fact `FactKey::Entry` loads): where its machines join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryState {
    /// Its id (`tpma_…`, `cloud_…`).
    pub entry_id: String,
    /// The tenant the machine joins.
    pub tenant_id: String,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// The role it joins as, when the list names one.
    pub role: Option<NodeRole>,
}

/// An entry as the remove decision reads it (active or removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRecord {
    /// Its id.
    pub entry_id: String,
    /// Its key.
    pub key: String,
    /// Whether it was removed.
    pub removed: bool,
}

/// `attestor entry add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddEntry {
    /// The new entry's id (`<prefix>_…`, minted by the shell).
    pub entry_id: String,
    /// The key as the operator typed it.
    pub key: String,
    /// Where the machine joins.
    pub tenant_id: String,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// The role as typed (empty: none).
    pub role: String,
    /// Who adds it.
    pub actor: String,
    /// Free text (may be empty).
    pub note: String,
}

fn check_actor(actor: &str) -> Result<(), AttestAdminRefusal> {
    if actor.is_empty() {
        return Err(AttestAdminRefusal::Invalid("the actor is empty".into()));
    }
    check_text("actor", actor, 256)
}

/// Adds an entry to `list`; `active` is the entry not removed that already holds the key, if
/// any (read by the canonical key, `(list.key)(&cmd.key)`).
pub fn decide_add_entry(
    list: &EntryList,
    cmd: &AddEntry,
    active: Option<&EntryState>,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_id("entry id", &cmd.entry_id)?;
    let prefix = format!("{}_", list.id_prefix);
    if !cmd.entry_id.starts_with(&prefix) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "entry id {:?} must start with {prefix}",
            cmd.entry_id
        )));
    }
    let key = (list.key)(&cmd.key)?;
    check_id("tenant id", &cmd.tenant_id)?;
    SiteId::new(&cmd.site_id).map_err(|e| AttestAdminRefusal::Invalid(e.to_string()))?;
    check_id("pool id", &cmd.pool_id)?;
    let role = (list.role)(&cmd.role)?;
    check_actor(&cmd.actor)?;
    check_text("note", &cmd.note, MAX_ENTRY_TEXT)?;
    if let Some(existing) = active {
        return Err(AttestAdminRefusal::EntryExists((list.exists)(
            &key,
            &existing.entry_id,
        )));
    }
    let stream = list.stream(&key);
    Ok(Decision::events_only(vec![
        IdentityEvent::AttestorEntryAdded(
            AttestorEntryAdded {
                list: list.name.to_owned(),
                entry_id: cmd.entry_id.clone(),
                key,
                tenant_id: cmd.tenant_id.clone(),
                site_id: cmd.site_id.clone(),
                pool_id: cmd.pool_id.clone(),
                role: role.map(|r| r.as_str().to_owned()).unwrap_or_default(),
                actor: cmd.actor.clone(),
                note: cmd.note.clone(),
            },
            stream,
        ),
    ]))
}

/// Removes an active entry of `list`: its key no longer joins through it (nodes it admitted
/// stay, and stay bound).
pub fn decide_remove_entry(
    list: &EntryList,
    entry_id: &str,
    entry: Option<&EntryRecord>,
    actor: &str,
    reason: &str,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_actor(actor)?;
    check_text("reason", reason, MAX_ENTRY_TEXT)?;
    let entry = entry
        .ok_or_else(|| AttestAdminRefusal::UnknownEntry(format!("{} {entry_id}", list.noun)))?;
    if entry.removed {
        return Err(AttestAdminRefusal::EntryRemoved(format!(
            "{} {} is already {}",
            list.noun, entry.entry_id, list.removed
        )));
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::AttestorEntryRemoved(
            AttestorEntryRemoved {
                list: list.name.to_owned(),
                entry_id: entry.entry_id.clone(),
                key: entry.key.clone(),
                actor: actor.into(),
                reason: reason.into(),
            },
            list.stream(&entry.key),
        ),
    ]))
}

#[cfg(test)]
#[path = "entries_tests.rs"]
mod tests;
