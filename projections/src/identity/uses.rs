//! The `attestation_uses` projection: single-use evidence inserted in runs (every attestor's
//! from `attestation.evidence.used`; in logs written before it, renew proofs from
//! `node.renew_proof.used` and join keys from `token.used`), deleted only by
//! `attestation.uses.pruned` events, which name the exact keys (`read::attestation_used` is
//! the check a join or renewal makes).

use events::schema::{
    AttestationUsesPruned, EvidenceUsed, JoinTokenUsed, RenewProofUsed, JOIN_KEY_ATTESTOR,
};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{bulk, text_or_null};
use super::RENEW_POP_ATTESTOR;
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `attestation_uses`: single-use evidence (renew proofs, join keys), pruned by explicit events.
pub struct AttestationUses;

const ATTESTATION_USES_TABLES: &[TableSpec] = &[TableSpec {
    name: "attestation_uses",
    columns: &[
        "attestor",
        "subject",
        "node_id",
        "used_at_us",
        "expires_at_us",
        "position",
    ],
    order_by: "attestor, subject",
}];

impl Projection for AttestationUses {
    fn name(&self) -> &'static str {
        "attestation_uses"
    }
    fn tables(&self) -> &'static [TableSpec] {
        ATTESTATION_USES_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == RenewProofUsed::EVENT_TYPE
            || event_type == EvidenceUsed::EVENT_TYPE
            || event_type == JoinTokenUsed::EVENT_TYPE
            || event_type == AttestationUsesPruned::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            // Uses go in multi-row inserts; a prune flushes them first (it may name one of
            // them), then deletes its keys in multi-row statements.
            let mut pending: Vec<Vec<SqlValue>> = Vec::new();
            for e in events {
                match e.event_type.as_str() {
                    RenewProofUsed::EVENT_TYPE => {
                        let p: RenewProofUsed = e.decode()?;
                        if p.subject.len() != 32 {
                            return Err(ProjectionError::Inapplicable {
                                projection: "attestation_uses",
                                position: e.position,
                                event_type: e.event_type.clone(),
                                why: "the subject is not 32 bytes".into(),
                            });
                        }
                        pending.push(vec![
                            RENEW_POP_ATTESTOR.into(),
                            p.subject.into(),
                            text_or_null(&p.node_id),
                            e.occurred_at_us.into(),
                            p.expires_at_us.into(),
                            e.position.into(),
                        ]);
                    }
                    EvidenceUsed::EVENT_TYPE => {
                        let p: EvidenceUsed = e.decode()?;
                        if p.subject.len() != 32 {
                            return Err(ProjectionError::Inapplicable {
                                projection: "attestation_uses",
                                position: e.position,
                                event_type: e.event_type.clone(),
                                why: "the subject is not 32 bytes".into(),
                            });
                        }
                        let expires = if p.expires_at_us == 0 {
                            SqlValue::NullInt
                        } else {
                            p.expires_at_us.into()
                        };
                        pending.push(vec![
                            p.attestor.into(),
                            p.subject.into(),
                            text_or_null(&p.node_id),
                            e.occurred_at_us.into(),
                            expires,
                            e.position.into(),
                        ]);
                    }
                    JoinTokenUsed::EVENT_TYPE => {
                        let p: JoinTokenUsed = e.decode()?;
                        // Events written before the field record no key use.
                        if p.csr_key_sha256.is_empty() {
                            continue;
                        }
                        if p.csr_key_sha256.len() != 32 {
                            return Err(ProjectionError::Inapplicable {
                                projection: "attestation_uses",
                                position: e.position,
                                event_type: e.event_type.clone(),
                                why: "the CSR key digest is not 32 bytes".into(),
                            });
                        }
                        pending.push(vec![
                            JOIN_KEY_ATTESTOR.into(),
                            p.csr_key_sha256.into(),
                            text_or_null(&p.node_id),
                            e.occurred_at_us.into(),
                            p.key_use_expires_at_us.into(),
                            e.position.into(),
                        ]);
                    }
                    AttestationUsesPruned::EVENT_TYPE => {
                        let p: AttestationUsesPruned = e.decode()?;
                        insert_uses(tx, std::mem::take(&mut pending)).await?;
                        let keys = p
                            .keys
                            .into_iter()
                            .map(|k| vec![k.attestor.into(), k.subject.into()])
                            .collect();
                        bulk(
                            tx,
                            "attestation_uses",
                            "DELETE FROM attestation_uses WHERE (attestor, subject) IN (VALUES ",
                            ")",
                            keys,
                            None,
                        )
                        .await?;
                    }
                    _ => {}
                }
            }
            insert_uses(tx, pending).await
        })
    }
}

/// Inserts a run of uses; a row's values are in the order of the table's columns.
async fn insert_uses(tx: &mut StoreTx, rows: Vec<Vec<SqlValue>>) -> Result<(), ProjectionError> {
    let table = &ATTESTATION_USES_TABLES[0];
    tx.insert_rows(table.name, table.columns, rows).await?;
    Ok(())
}
