//! `tpm_ek_allows`: the operator's TPM allow-list, from the `tpm-ek/<hex>` streams'
//! `tpm.ek.allowed` and `tpm.ek.allow.revoked` events.

use std::collections::HashMap;

use events::schema::{TpmEkAllowRevoked, TpmEkAllowed};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `tpm_ek_allows`.
pub struct TpmEkAllows;

const TPM_EK_ALLOWS_TABLES: &[TableSpec] = &[TableSpec {
    name: "tpm_ek_allows",
    columns: &[
        "allow_id",
        "ek_sha256",
        "tenant_id",
        "site_id",
        "pool_id",
        "allowed_by",
        "note",
        "revoked",
        "revoked_by",
        "revoke_reason",
        "created_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "allow_id",
}];

/// A revocation, as the row records it.
struct Revocation {
    by: String,
    reason: String,
    at_us: i64,
    version: i64,
    position: i64,
}

/// An entry allowed in the run, with its revocation if the run holds one.
struct NewEntry {
    p: TpmEkAllowed,
    created_at_us: i64,
    version: i64,
    position: i64,
    revoked: Option<Revocation>,
}

impl Projection for TpmEkAllows {
    fn name(&self) -> &'static str {
        "tpm_ek_allows"
    }
    fn tables(&self) -> &'static [TableSpec] {
        TPM_EK_ALLOWS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == TpmEkAllowed::EVENT_TYPE || event_type == TpmEkAllowRevoked::EVENT_TYPE
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
                    TpmEkAllowed::EVENT_TYPE => {
                        let p: TpmEkAllowed = e.decode()?;
                        if p.ek_sha256.len() != 32 {
                            return Err(inapplicable(
                                "tpm_ek_allows",
                                e,
                                "the EK SHA-256 is not 32 bytes",
                            ));
                        }
                        if created_at.contains_key(&p.allow_id)
                            || revoked.iter().any(|(id, _)| *id == p.allow_id)
                        {
                            return Err(inapplicable(
                                "tpm_ek_allows",
                                e,
                                "the entry was already allowed",
                            ));
                        }
                        created_at.insert(p.allow_id.clone(), created.len());
                        created.push(NewEntry {
                            p,
                            created_at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                            revoked: None,
                        });
                    }
                    TpmEkAllowRevoked::EVENT_TYPE => {
                        let p: TpmEkAllowRevoked = e.decode()?;
                        let r = Revocation {
                            by: p.actor,
                            reason: p.reason,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        };
                        let already = |r: &Option<Revocation>| r.is_some();
                        match created_at
                            .get(&p.allow_id)
                            .and_then(|&i| created.get_mut(i))
                        {
                            Some(row) if already(&row.revoked) => {
                                return Err(inapplicable(
                                    "tpm_ek_allows",
                                    e,
                                    "the entry was already revoked",
                                ))
                            }
                            Some(row) => row.revoked = Some(r),
                            None if revoked.iter().any(|(id, _)| *id == p.allow_id) => {
                                return Err(inapplicable(
                                    "tpm_ek_allows",
                                    e,
                                    "the entry was already revoked",
                                ))
                            }
                            None => revoked.push((p.allow_id, r)),
                        }
                    }
                    _ => {}
                }
            }
            // Older entries' revocations first, then the new entries.
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
                "tpm_ek_allows",
                REVOKE_HEAD,
                REVOKE_TAIL,
                rows,
                "tpm_ek_allows revoked without a tpm.ek.allowed before them, or twice",
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = created.into_iter().map(entry_row).collect();
            let table = &TPM_EK_ALLOWS_TABLES[0];
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
        p.allow_id.into(),
        p.ek_sha256.into(),
        p.tenant_id.into(),
        p.site_id.into(),
        p.pool_id.into(),
        p.actor.into(),
        p.note.into(),
        SqlValue::Bool(revoked),
        by,
        reason,
        r.created_at_us.into(),
        updated.into(),
        version.into(),
        position.into(),
    ]
}

const REVOKE_HEAD: &str = "WITH v (allow_id, revoked_by, revoke_reason, updated_at_us, version, \
     position) AS (VALUES ";
const REVOKE_TAIL: &str = ") UPDATE tpm_ek_allows SET revoked = TRUE, revoked_by = v.revoked_by, \
     revoke_reason = v.revoke_reason, updated_at_us = v.updated_at_us, version = v.version, \
     position = v.position FROM v WHERE tpm_ek_allows.allow_id = v.allow_id \
     AND NOT tpm_ek_allows.revoked";
