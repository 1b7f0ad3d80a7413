//! `operator_certs` (issue 23): the operator certificates the operator CA issued, from the
//! `operator/<name>` streams' `operator.cert.issued` and `operator.cert.revoked` events
//! (`events/proto/bc/events/v1/operators.proto`). One row per serial; a revocation marks it.
//! Applied inline by `commands::operators` and by every rebuild (`commands::every_projection`).
//!
//! A run of events folds into one insert of the certificates issued in it (revoked already when
//! the run revokes them too) and one checked update per older certificate it revokes: a
//! revocation of a serial no issued event made, or of one already revoked, is inapplicable (the
//! command layer never writes either), not silently dropped. Reads are
//! [`crate::operators_read`].

use std::collections::HashMap;

use events::schema::{OperatorCertIssued, OperatorCertRevoked};
use events::store::{push_groups, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `operator_certs`.
pub struct OperatorCerts;

const NAME: &str = "operator_certs";

const OPERATOR_CERTS_TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &[
        "serial",
        "name",
        "role",
        "spiffe_id",
        "not_before_us",
        "not_after_us",
        "certificate_sha256",
        "revoked",
        "revoke_reason",
        "issued_at_us",
        "revoked_at_us",
        "version",
        "position",
    ],
    order_by: "serial",
}];

/// Rows per multi-row update statement.
const BULK_ROWS: usize = 200;

/// A revocation, as the row records it.
struct Revocation {
    reason: String,
    at_us: i64,
    version: i64,
    position: i64,
}

/// A certificate issued in the run, with its revocation if the run holds one.
struct Issued {
    p: OperatorCertIssued,
    at_us: i64,
    version: i64,
    position: i64,
    revoked: Option<Revocation>,
}

fn inapplicable(e: &RecordedEvent, why: &str) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection: NAME,
        position: e.position,
        event_type: e.event_type.clone(),
        why: why.to_owned(),
    }
}

impl Projection for OperatorCerts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        OPERATOR_CERTS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == OperatorCertIssued::EVENT_TYPE
            || event_type == OperatorCertRevoked::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut issued: Vec<Issued> = Vec::new();
            let mut index: HashMap<String, usize> = HashMap::new();
            let mut older: Vec<(String, Revocation)> = Vec::new();
            for e in events {
                match e.event_type.as_str() {
                    OperatorCertIssued::EVENT_TYPE => {
                        let p: OperatorCertIssued = e.decode()?;
                        if p.certificate_sha256.len() != 32 {
                            return Err(inapplicable(e, "the certificate SHA-256 is not 32 bytes"));
                        }
                        if index.contains_key(&p.serial)
                            || older.iter().any(|(s, _)| *s == p.serial)
                        {
                            return Err(inapplicable(e, "the serial was already issued"));
                        }
                        index.insert(p.serial.clone(), issued.len());
                        issued.push(Issued {
                            p,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                            revoked: None,
                        });
                    }
                    OperatorCertRevoked::EVENT_TYPE => {
                        let p: OperatorCertRevoked = e.decode()?;
                        let r = Revocation {
                            reason: p.reason,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        };
                        match index.get(&p.serial).and_then(|&i| issued.get_mut(i)) {
                            Some(row) if row.revoked.is_some() => {
                                return Err(inapplicable(e, "the certificate was already revoked"))
                            }
                            Some(row) => row.revoked = Some(r),
                            None if older.iter().any(|(s, _)| *s == p.serial) => {
                                return Err(inapplicable(e, "the certificate was already revoked"))
                            }
                            None => older.push((p.serial, r)),
                        }
                    }
                    _ => {}
                }
            }
            revoke_older(tx, older).await?;
            let rows: Vec<Vec<SqlValue>> = issued.into_iter().map(issued_row).collect();
            let table = &OPERATOR_CERTS_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            Ok(())
        })
    }
}

fn issued_row(r: Issued) -> Vec<SqlValue> {
    let p = r.p;
    let (revoked, reason, revoked_at, version, position) = match r.revoked {
        None => (
            false,
            SqlValue::NullText,
            SqlValue::NullInt,
            r.version,
            r.position,
        ),
        Some(x) => (
            true,
            SqlValue::Text(x.reason),
            SqlValue::Int(x.at_us),
            x.version,
            x.position,
        ),
    };
    vec![
        p.serial.into(),
        p.name.into(),
        p.role.into(),
        p.spiffe_id.into(),
        p.not_before_us.into(),
        p.not_after_us.into(),
        SqlValue::Bytes(p.certificate_sha256),
        SqlValue::Bool(revoked),
        reason,
        r.at_us.into(),
        revoked_at,
        version.into(),
        position.into(),
    ]
}

const REVOKE_HEAD: &str =
    "WITH v (serial, revoke_reason, revoked_at_us, version, position) AS (VALUES ";
const REVOKE_TAIL: &str = ") UPDATE operator_certs SET revoked = TRUE, \
     revoke_reason = v.revoke_reason, revoked_at_us = v.revoked_at_us, version = v.version, \
     position = v.position FROM v WHERE operator_certs.serial = v.serial \
     AND NOT operator_certs.revoked";

/// Marks certificates issued before the run revoked, each statement required to change as many
/// rows as it names.
async fn revoke_older(
    tx: &mut StoreTx,
    revocations: Vec<(String, Revocation)>,
) -> Result<(), ProjectionError> {
    let mut rows = revocations
        .into_iter()
        .map(|(serial, r)| {
            vec![
                serial.into(),
                r.reason.into(),
                r.at_us.into(),
                r.version.into(),
                r.position.into(),
            ]
        })
        .peekable();
    while rows.peek().is_some() {
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        let mut sql = String::from(REVOKE_HEAD);
        let mut args: Vec<SqlValue> = Vec::new();
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(REVOKE_TAIL);
        tx.defer(
            DeferredWrite::new(NAME, sql, args).expecting(
                groups,
                "operator_certs revoked without an operator.cert.issued before them, or twice"
                    .to_owned(),
            ),
        )
        .await?;
    }
    Ok(())
}
