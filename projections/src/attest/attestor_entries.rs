//! `attestor_entries`: every operator-managed attestor list in one table (issue 39), from
//! `attestor.entry.added` / `attestor.entry.removed`, and from the events the two lists wrote
//! before the generic ones, read as entries of those lists: `tpm.ek.allowed` /
//! `tpm.ek.allow.revoked` (list `tpm-allow`, key the EK's SHA-256 in lower-case hex) and
//! `cloud.account.added` / `cloud.account.removed` (list `cloud-account`, key
//! `<provider>/<account>`). Migration `0016_attestor_entries` backfilled the table from the two
//! lists' old tables, so a store migrated in place and one rebuilt from its log hold the same rows.

use std::collections::HashMap;

use events::schema::{
    AttestorEntryAdded, AttestorEntryRemoved, CloudAccountAdded, CloudAccountRemoved,
    TpmEkAllowRevoked, TpmEkAllowed,
};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable, text_or_null};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `attestor_entries`.
pub struct AttestorEntries;

/// The list the `tpm.ek.*` events of before issue 39 are entries of.
pub const LEGACY_TPM_LIST: &str = "tpm-allow";
/// The list the `cloud.account.*` events of before issue 39 are entries of.
pub const LEGACY_CLOUD_LIST: &str = "cloud-account";

const NAME: &str = "attestor_entries";

const ATTESTOR_ENTRIES_TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &[
        "entry_id",
        "list",
        "entry_key",
        "tenant_id",
        "site_id",
        "pool_id",
        "role",
        "added_by",
        "note",
        "removed",
        "removed_by",
        "remove_reason",
        "created_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "entry_id",
}];

/// An entry as an added event names it, whichever event it was.
struct Added {
    entry_id: String,
    list: String,
    key: String,
    tenant_id: String,
    site_id: String,
    pool_id: String,
    role: String,
    actor: String,
    note: String,
}

/// A removal, as the row records it.
struct Removal {
    by: String,
    reason: String,
    at_us: i64,
    version: i64,
    position: i64,
}

/// An entry added in the run, with its removal if the run holds one.
struct NewEntry {
    added: Added,
    created_at_us: i64,
    version: i64,
    position: i64,
    removed: Option<Removal>,
}

/// What one event does to the table.
enum Change {
    Add(Added),
    Remove {
        entry_id: String,
        by: String,
        reason: String,
    },
}

/// The change `e` makes (every handled type, old ones upcast to entries of their list).
fn change(e: &RecordedEvent) -> Result<Option<Change>, ProjectionError> {
    Ok(Some(match e.event_type.as_str() {
        AttestorEntryAdded::EVENT_TYPE => {
            let p: AttestorEntryAdded = e.decode()?;
            Change::Add(Added {
                entry_id: p.entry_id,
                list: p.list,
                key: p.key,
                tenant_id: p.tenant_id,
                site_id: p.site_id,
                pool_id: p.pool_id,
                role: p.role,
                actor: p.actor,
                note: p.note,
            })
        }
        AttestorEntryRemoved::EVENT_TYPE => {
            let p: AttestorEntryRemoved = e.decode()?;
            Change::Remove {
                entry_id: p.entry_id,
                by: p.actor,
                reason: p.reason,
            }
        }
        TpmEkAllowed::EVENT_TYPE => {
            let p: TpmEkAllowed = e.decode()?;
            if p.ek_sha256.len() != 32 {
                return Err(inapplicable(NAME, e, "the EK SHA-256 is not 32 bytes"));
            }
            Change::Add(Added {
                entry_id: p.allow_id,
                list: LEGACY_TPM_LIST.into(),
                key: hex::encode(&p.ek_sha256),
                tenant_id: p.tenant_id,
                site_id: p.site_id,
                pool_id: p.pool_id,
                role: String::new(),
                actor: p.actor,
                note: p.note,
            })
        }
        TpmEkAllowRevoked::EVENT_TYPE => {
            let p: TpmEkAllowRevoked = e.decode()?;
            Change::Remove {
                entry_id: p.allow_id,
                by: p.actor,
                reason: p.reason,
            }
        }
        CloudAccountAdded::EVENT_TYPE => {
            let p: CloudAccountAdded = e.decode()?;
            Change::Add(Added {
                entry_id: p.entry_id,
                list: LEGACY_CLOUD_LIST.into(),
                key: format!("{}/{}", p.provider, p.account),
                tenant_id: p.tenant_id,
                site_id: p.site_id,
                pool_id: p.pool_id,
                role: p.role,
                actor: p.actor,
                note: String::new(),
            })
        }
        CloudAccountRemoved::EVENT_TYPE => {
            let p: CloudAccountRemoved = e.decode()?;
            Change::Remove {
                entry_id: p.entry_id,
                by: p.actor,
                reason: p.reason,
            }
        }
        _ => return Ok(None),
    }))
}

impl Projection for AttestorEntries {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        ATTESTOR_ENTRIES_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            AttestorEntryAdded::EVENT_TYPE,
            AttestorEntryRemoved::EVENT_TYPE,
            TpmEkAllowed::EVENT_TYPE,
            TpmEkAllowRevoked::EVENT_TYPE,
            CloudAccountAdded::EVENT_TYPE,
            CloudAccountRemoved::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let (created, removed) = fold(events)?;
            // Older entries' removals first, then the new entries.
            let rows: Vec<Vec<SqlValue>> = removed
                .into_iter()
                .map(|(id, r)| {
                    vec![
                        id.into(),
                        r.by.into(),
                        r.reason.into(),
                        r.at_us.into(),
                        r.version.into(),
                        r.position.into(),
                    ]
                })
                .collect();
            checked_updates(
                tx,
                NAME,
                REMOVE_HEAD,
                REMOVE_TAIL,
                rows,
                "attestor_entries removed without an added event before them, or twice",
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = created.into_iter().map(entry_row).collect();
            let table = &ATTESTOR_ENTRIES_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            Ok(())
        })
    }
}

/// The entries a run adds, and its removals of entries added before it.
type Folded = (Vec<NewEntry>, Vec<(String, Removal)>);

/// The run folded: the entries it adds (with their removal, when the run holds it) and the
/// removals of entries added before it.
fn fold(events: &[&RecordedEvent]) -> Result<Folded, ProjectionError> {
    let mut created: Vec<NewEntry> = Vec::new();
    let mut created_at: HashMap<String, usize> = HashMap::new();
    let mut removed: Vec<(String, Removal)> = Vec::new();
    for e in events {
        match change(e)? {
            None => {}
            Some(Change::Add(added)) => {
                if created_at.contains_key(&added.entry_id)
                    || removed.iter().any(|(id, _)| *id == added.entry_id)
                {
                    return Err(inapplicable(NAME, e, "the entry was already added"));
                }
                created_at.insert(added.entry_id.clone(), created.len());
                created.push(NewEntry {
                    added,
                    created_at_us: e.occurred_at_us,
                    version: e.stream_version,
                    position: e.position,
                    removed: None,
                });
            }
            Some(Change::Remove {
                entry_id,
                by,
                reason,
            }) => {
                let r = Removal {
                    by,
                    reason,
                    at_us: e.occurred_at_us,
                    version: e.stream_version,
                    position: e.position,
                };
                let twice = || inapplicable(NAME, e, "the entry was already removed");
                match created_at.get(&entry_id).and_then(|&i| created.get_mut(i)) {
                    Some(row) if row.removed.is_some() => return Err(twice()),
                    Some(row) => row.removed = Some(r),
                    None if removed.iter().any(|(id, _)| *id == entry_id) => return Err(twice()),
                    None => removed.push((entry_id, r)),
                }
            }
        }
    }
    Ok((created, removed))
}

fn entry_row(r: NewEntry) -> Vec<SqlValue> {
    let p = r.added;
    let (removed, by, reason, updated, version, position) = match r.removed {
        None => (
            false,
            SqlValue::NullText,
            SqlValue::NullText,
            r.created_at_us,
            r.version,
            r.position,
        ),
        Some(x) => (
            true,
            SqlValue::Text(x.by),
            SqlValue::Text(x.reason),
            x.at_us,
            x.version,
            x.position,
        ),
    };
    vec![
        p.entry_id.into(),
        p.list.into(),
        p.key.into(),
        p.tenant_id.into(),
        p.site_id.into(),
        p.pool_id.into(),
        text_or_null(&p.role),
        p.actor.into(),
        p.note.into(),
        SqlValue::Bool(removed),
        by,
        reason,
        r.created_at_us.into(),
        updated.into(),
        version.into(),
        position.into(),
    ]
}

const REMOVE_HEAD: &str = "WITH v (entry_id, removed_by, remove_reason, updated_at_us, version, \
     position) AS (VALUES ";
const REMOVE_TAIL: &str =
    ") UPDATE attestor_entries SET removed = TRUE, removed_by = v.removed_by, \
     remove_reason = v.remove_reason, updated_at_us = v.updated_at_us, version = v.version, \
     position = v.position FROM v WHERE attestor_entries.entry_id = v.entry_id \
     AND NOT attestor_entries.removed";
