//! `cloud_accounts`: the operator's registry of cloud accounts, from the
//! `cloud-account/<provider>/<account>` streams' `cloud.account.added` and
//! `cloud.account.removed` events (the same fold as `tpm_ek_allows`).

use std::collections::HashMap;

use events::schema::{CloudAccountAdded, CloudAccountRemoved};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `cloud_accounts`.
pub struct CloudAccounts;

const CLOUD_ACCOUNTS_TABLES: &[TableSpec] = &[TableSpec {
    name: "cloud_accounts",
    columns: &[
        "entry_id",
        "provider",
        "account",
        "tenant_id",
        "site_id",
        "pool_id",
        "role",
        "added_by",
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

/// A removal, as the row records it.
struct Revocation {
    by: String,
    reason: String,
    at_us: i64,
    version: i64,
    position: i64,
}

/// An entry added in the run, with its removal if the run holds one.
struct NewEntry {
    p: CloudAccountAdded,
    created_at_us: i64,
    version: i64,
    position: i64,
    revoked: Option<Revocation>,
}

impl Projection for CloudAccounts {
    fn name(&self) -> &'static str {
        "cloud_accounts"
    }
    fn tables(&self) -> &'static [TableSpec] {
        CLOUD_ACCOUNTS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == CloudAccountAdded::EVENT_TYPE || event_type == CloudAccountRemoved::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut created: Vec<NewEntry> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut revoked: Vec<(String, Revocation)> = Vec::new();
            for e in events {
                match e.event_type.as_str() {
                    CloudAccountAdded::EVENT_TYPE => {
                        let p: CloudAccountAdded = e.decode()?;
                        if created_at.contains_key(&p.entry_id)
                            || revoked.iter().any(|(id, _)| *id == p.entry_id)
                        {
                            return Err(inapplicable(
                                "cloud_accounts",
                                e,
                                "the entry was already added",
                            ));
                        }
                        created_at.insert(p.entry_id.clone(), created.len());
                        created.push(NewEntry {
                            p,
                            created_at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                            revoked: None,
                        });
                    }
                    CloudAccountRemoved::EVENT_TYPE => {
                        let p: CloudAccountRemoved = e.decode()?;
                        let r = Revocation {
                            by: p.actor,
                            reason: p.reason,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        };
                        let already = |r: &Option<Revocation>| r.is_some();
                        match created_at
                            .get(&p.entry_id)
                            .and_then(|&i| created.get_mut(i))
                        {
                            Some(row) if already(&row.revoked) => {
                                return Err(inapplicable(
                                    "cloud_accounts",
                                    e,
                                    "the entry was already removed",
                                ))
                            }
                            Some(row) => row.revoked = Some(r),
                            None if revoked.iter().any(|(id, _)| *id == p.entry_id) => {
                                return Err(inapplicable(
                                    "cloud_accounts",
                                    e,
                                    "the entry was already removed",
                                ))
                            }
                            None => revoked.push((p.entry_id, r)),
                        }
                    }
                    _ => {}
                }
            }
            // Older entries' removals first, then the new entries.
            let rows: Vec<Vec<SqlValue>> = revoked
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
                "cloud_accounts",
                REVOKE_HEAD,
                REVOKE_TAIL,
                rows,
                "cloud_accounts removed without a cloud.account.added before them, or twice",
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = created.into_iter().map(entry_row).collect();
            let table = &CLOUD_ACCOUNTS_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            Ok(())
        })
    }
}

fn entry_row(r: NewEntry) -> Vec<SqlValue> {
    let p = r.p;
    let (revoked, by, reason, updated, version, position) = match r.revoked {
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
        p.provider.into(),
        p.account.into(),
        p.tenant_id.into(),
        p.site_id.into(),
        p.pool_id.into(),
        p.role.into(),
        p.actor.into(),
        SqlValue::Bool(revoked),
        by,
        reason,
        r.created_at_us.into(),
        updated.into(),
        version.into(),
        position.into(),
    ]
}

const REVOKE_HEAD: &str = "WITH v (entry_id, removed_by, remove_reason, updated_at_us, version, \
     position) AS (VALUES ";
const REVOKE_TAIL: &str = ") UPDATE cloud_accounts SET removed = TRUE, removed_by = v.removed_by, \
     remove_reason = v.remove_reason, updated_at_us = v.updated_at_us, version = v.version, \
     position = v.position FROM v WHERE cloud_accounts.entry_id = v.entry_id \
     AND NOT cloud_accounts.removed";
