//! `ssh_certificates` (issue 42): the OpenSSH user certificates the SSH CA issued, from the
//! `ssh-cert/<serial>` streams' `ssh.user_cert.issued` and `ssh.user_cert.revoked` events
//! (`events/proto/bc/events/v1/ssh.proto`). One row per serial; a revocation marks it. Who
//! issued and who revoked are the events' actors. Applied inline by `commands::ssh` and by every
//! rebuild (`commands::every_projection`).
//!
//! A revocation of a serial no issued event made, or of one already revoked, is inapplicable
//! (the command layer writes neither), never silently dropped. Reads are [`read`].

pub mod read;

use std::collections::HashMap;

use events::schema::{SshUserCertIssued, SshUserCertRevoked};
use events::store::{DeferredWrite, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `ssh_certificates`.
pub struct SshCertificates;

const NAME: &str = "ssh_certificates";

const TABLES: &[TableSpec] = &[TableSpec {
    name: NAME,
    columns: &[
        "serial",
        "tenant_id",
        "node_id",
        "account",
        "principal",
        "key_id",
        "key_type",
        "key_fingerprint",
        "valid_after",
        "valid_before",
        "certificate_sha256",
        "issued_by",
        "issued_at_us",
        "revoked",
        "revoke_reason",
        "revoked_by",
        "revoked_at_us",
        "version",
        "position",
    ],
    order_by: "serial",
}];

struct Revocation {
    reason: String,
    by: Option<String>,
    at_us: i64,
    version: i64,
    position: i64,
}

struct Issued {
    p: SshUserCertIssued,
    serial: i64,
    tenant_id: String,
    by: Option<String>,
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

fn serial_of(e: &RecordedEvent, serial: u64) -> Result<i64, ProjectionError> {
    i64::try_from(serial)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| inapplicable(e, "the serial is not in 1 to 2^63 - 1"))
}

impl Projection for SshCertificates {
    fn name(&self) -> &'static str {
        NAME
    }
    fn tables(&self) -> &'static [TableSpec] {
        TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == SshUserCertIssued::EVENT_TYPE || event_type == SshUserCertRevoked::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut issued: Vec<Issued> = Vec::new();
            let mut index: HashMap<i64, usize> = HashMap::new();
            let mut older: Vec<(i64, Revocation)> = Vec::new();
            for e in events {
                let by = e.actor.as_ref().map(|a| a.id().to_string());
                match e.event_type.as_str() {
                    SshUserCertIssued::EVENT_TYPE => {
                        let p: SshUserCertIssued = e.decode()?;
                        let serial = serial_of(e, p.serial)?;
                        if p.certificate_sha256.len() != 32 {
                            return Err(inapplicable(e, "the certificate SHA-256 is not 32 bytes"));
                        }
                        if index.contains_key(&serial) || older.iter().any(|(s, _)| *s == serial) {
                            return Err(inapplicable(e, "the serial was already issued"));
                        }
                        index.insert(serial, issued.len());
                        issued.push(Issued {
                            p,
                            serial,
                            tenant_id: e.tenant_id.clone(),
                            by,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                            revoked: None,
                        });
                    }
                    SshUserCertRevoked::EVENT_TYPE => {
                        let p: SshUserCertRevoked = e.decode()?;
                        let serial = serial_of(e, p.serial)?;
                        let r = Revocation {
                            reason: p.reason,
                            by,
                            at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                        };
                        match index.get(&serial).and_then(|&i| issued.get_mut(i)) {
                            Some(row) if row.revoked.is_some() => {
                                return Err(inapplicable(e, "the certificate was already revoked"))
                            }
                            Some(row) => row.revoked = Some(r),
                            None if older.iter().any(|(s, _)| *s == serial) => {
                                return Err(inapplicable(e, "the certificate was already revoked"))
                            }
                            None => older.push((serial, r)),
                        }
                    }
                    _ => {}
                }
            }
            for (serial, r) in older {
                revoke_older(tx, serial, r).await?;
            }
            let rows: Vec<Vec<SqlValue>> = issued.into_iter().map(issued_row).collect();
            tx.insert_rows(NAME, TABLES[0].columns, rows).await?;
            Ok(())
        })
    }
}

fn text_or_null(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
}

fn issued_row(r: Issued) -> Vec<SqlValue> {
    let p = r.p;
    let (revoked, reason, revoked_by, revoked_at, version, position) = match r.revoked {
        None => (
            false,
            SqlValue::NullText,
            SqlValue::NullText,
            SqlValue::NullInt,
            r.version,
            r.position,
        ),
        Some(x) => (
            true,
            SqlValue::Text(x.reason),
            text_or_null(x.by),
            SqlValue::Int(x.at_us),
            x.version,
            x.position,
        ),
    };
    vec![
        r.serial.into(),
        r.tenant_id.into(),
        p.node_id.into(),
        p.account.into(),
        p.principal.into(),
        p.key_id.into(),
        p.key_type.into(),
        p.key_fingerprint.into(),
        p.valid_after.into(),
        p.valid_before.into(),
        SqlValue::Bytes(p.certificate_sha256),
        text_or_null(r.by),
        r.at_us.into(),
        SqlValue::Bool(revoked),
        reason,
        revoked_by,
        revoked_at,
        version.into(),
        position.into(),
    ]
}

const REVOKE: &str = "UPDATE ssh_certificates SET revoked = TRUE, revoke_reason = $1, \
     revoked_by = $2, revoked_at_us = $3, version = $4, position = $5 \
     WHERE serial = $6 AND NOT revoked";

/// Marks a certificate issued before the run revoked; the statement must change one row.
async fn revoke_older(tx: &mut StoreTx, serial: i64, r: Revocation) -> Result<(), ProjectionError> {
    let args = vec![
        r.reason.into(),
        text_or_null(r.by),
        r.at_us.into(),
        r.version.into(),
        r.position.into(),
        serial.into(),
    ];
    tx.defer(DeferredWrite::new(NAME, REVOKE.to_owned(), args).expecting(
        1,
        "ssh_certificates revoked without an ssh.user_cert.issued before it, or twice".to_owned(),
    ))
    .await?;
    Ok(())
}
