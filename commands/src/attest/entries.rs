//! The operator commands on every attestor list (`bcctl attestor entry add | list | remove`,
//! and the TPM allow-list's and the cloud accounts' own verbs): [`AttestorEntries`]. Each is one
//! transaction: read the key's entries, let [`domain::attest::entries`] decide, append to the
//! key's stream at the version read (so two concurrent adds of one key cannot both succeed),
//! apply the projections, read the row back.

use std::sync::Arc;

use domain::attest::{
    decide_add_entry, decide_remove_entry, AddEntry, AttestAdminRefusal, EntryList,
};
use events::store::{EventStore, StoreTx};
use projections::attest::read;

use super::error::AttestError;
use super::rows;
use super::views::EntryView;
use crate::identity::{append_decided, fresh_id, IdentityError};
use crate::Clock;

/// `attestor entry add`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewEntry {
    /// The key as typed (the list checks and canonicalizes it).
    pub key: String,
    /// Where the machine joins.
    pub tenant_id: String,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// The role (empty: none; a list that names roles requires one).
    pub role: String,
    /// Who adds it.
    pub actor: String,
    /// Free text.
    pub note: String,
}

/// The operator commands on attestor lists.
#[derive(Clone)]
pub struct AttestorEntries {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl AttestorEntries {
    /// The lists over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        AttestorEntries { store, clock }
    }

    /// `attestor entry add`: refused when an entry not removed already holds the key.
    pub async fn add(&self, list: &EntryList, new: &NewEntry) -> Result<EntryView, AttestError> {
        let now_us = self.clock.now_us();
        let cmd = AddEntry {
            entry_id: fresh_id(list.id_prefix),
            key: new.key.clone(),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role.clone(),
            actor: new.actor.clone(),
            note: new.note.clone(),
        };
        let key = (list.key)(&cmd.key)?;
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let entries = read::attestor_key_entries(tx, list.name, &key).await?;
            let active = entries.iter().rev().find(|r| !r.removed);
            let state = active.map(rows::entry_state).transpose()?;
            let events = decide_add_entry(list, &cmd, state.as_ref())?.events;
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(list.stream(&key), version)];
            append_decided(tx, events, &cmd.tenant_id, now_us, &versions).await?;
            entry_back(tx, list, &cmd.entry_id).await
        })?;
        Ok(EntryView::of(list, &row))
    }

    /// `attestor entry list`: every entry of `list`, removed ones too, oldest first.
    pub async fn list(&self, list: &EntryList) -> Result<Vec<EntryView>, AttestError> {
        let rows = read::attestor_entries_in_store(&self.store, list.name).await?;
        Ok(rows.iter().map(|r| EntryView::of(list, r)).collect())
    }

    /// `attestor entry remove`: the key no longer joins through the entry.
    pub async fn remove(
        &self,
        list: &EntryList,
        entry_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<EntryView, AttestError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            // An entry's key never changes; its state and the stream's version are then read
            // in one statement (see read::attestor_key_entries).
            let entries = match read::attestor_entry(tx, list.name, entry_id).await? {
                Some(row) => read::attestor_key_entries(tx, list.name, &row.entry_key).await?,
                None => Vec::new(),
            };
            let row = entries.iter().find(|r| r.entry_id == entry_id);
            let entry = row.map(rows::entry_record);
            let events = decide_remove_entry(list, entry_id, entry.as_ref(), actor, reason)?.events;
            let Some(row) = row else {
                let what = format!("{} {entry_id}", list.noun);
                return Err(AttestAdminRefusal::UnknownEntry(what).into());
            };
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(list.stream(&row.entry_key), version)];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            entry_back(tx, list, entry_id).await
        })?;
        Ok(EntryView::of(list, &row))
    }
}

async fn entry_back(
    tx: &mut StoreTx,
    list: &EntryList,
    entry_id: &str,
) -> Result<read::AttestorEntryRow, AttestError> {
    read::attestor_entry(tx, list.name, entry_id)
        .await?
        .ok_or_else(|| {
            IdentityError::Corrupt(format!("{} entry {entry_id} has no row", list.name)).into()
        })
}
