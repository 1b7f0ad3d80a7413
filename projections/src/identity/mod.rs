//! Identity projections: `join_tokens` (+ `join_token_uses`), `nodes`, `node_certs`,
//! `attestation_uses`, `node_bindings` and `refusal_counters`, built only from the events of
//! `events/proto/bc/events/v1/identity.proto`.
//!
//! Every row records the position it reflects (`position`, or `issued_position` /
//! `revoked_position` for certificates); times come from the events (`occurred_at_us` or a field),
//! never from a clock. The unique keys are the race guards of the command layer: a second use of
//! one token use (`join_token_uses` primary key), a second use of one renew proof
//! (`attestation_uses` primary key) and a second active node for one hardware key fail inside the
//! command's transaction, which then retries from a fresh read.

use events::store::{push_groups, Backend, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::RecordedEvent;

use crate::{Projection, ProjectionError, TableSpec};

/// The attestor name a renew proof is recorded under in `attestation_uses`.
pub use events::schema::RENEW_POP_ATTESTOR;

fn bytes_or_null(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

fn text_or_null(s: &str) -> SqlValue {
    if s.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(s.to_owned())
    }
}

fn greatest(tx: &StoreTx) -> &'static str {
    match tx.backend() {
        Backend::Postgres => "GREATEST",
        Backend::Sqlite => "MAX",
    }
}

fn to_i64(v: u64, e: &RecordedEvent, projection: &'static str) -> Result<i64, ProjectionError> {
    i64::try_from(v).map_err(|_| ProjectionError::Inapplicable {
        projection,
        position: e.position,
        event_type: e.event_type.clone(),
        why: format!("{v} does not fit a signed 64-bit column"),
    })
}

/// Rows per multi-row statement (well under both backends' parameter limits).
const BULK_ROWS: usize = 200;

/// Queues `head (..), (..), .. tail` with `rows` as the parenthesised groups, `BULK_ROWS` per
/// statement, as deferred writes to `table` ([`LogTx::defer`]: on Postgres they go out with the
/// other projections' writes in one statement). With `each_row_once`, every statement must
/// change exactly as many rows as it has groups, and `each_row_once` says what a shortfall means.
async fn bulk(
    tx: &mut StoreTx,
    table: &str,
    head: &str,
    tail: &str,
    rows: Vec<Vec<SqlValue>>,
    each_row_once: Option<&str>,
) -> Result<(), ProjectionError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let mut sql = String::from(head);
        let mut args: Vec<SqlValue> = Vec::new();
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(tail);
        let mut write = DeferredWrite::new(table, sql, args);
        if let Some(meaning) = each_row_once {
            write = write.expecting(groups, meaning.to_owned());
        }
        tx.defer(write).await?;
    }
    Ok(())
}

fn opt_int(v: Option<i64>) -> SqlValue {
    v.map_or(SqlValue::NullInt, SqlValue::Int)
}

fn opt_text(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
}

mod bindings;
mod certs;
mod nodes;
pub mod operator;
pub mod read;
pub mod reference;
mod refusals;
pub mod suppressed;
mod tokens;
mod uses;

pub use bindings::NodeBindings;
pub use certs::NodeCerts;
pub use nodes::Nodes;
pub use refusals::{refusal_totals, RefusalCounters};
pub use tokens::JoinTokens;
pub use uses::AttestationUses;

/// Every identity projection, in the order they are applied (with the attestation plane's
/// `pools`, `join_requests`, `tpm_ek_allows`, `sites`, `boot_entries`, `site_leases` and
/// `cloud_accounts`, whose events every identity append may carry).
pub fn all() -> [&'static dyn Projection; 13] {
    [
        &JoinTokens,
        &Nodes,
        &NodeCerts,
        &AttestationUses,
        &NodeBindings,
        &RefusalCounters,
        &crate::attest::Pools,
        &crate::attest::JoinRequests,
        &crate::attest::TpmEkAllows,
        &crate::attest::Sites,
        &crate::attest::BootEntries,
        &crate::attest::SiteLeases,
        &crate::attest::CloudAccounts,
    ]
}

/// Every identity projection table, for digests.
pub fn tables() -> Vec<TableSpec> {
    all()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect()
}
