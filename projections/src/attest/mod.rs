//! Attestation-plane projections: `pools` (from `pool.created` / `pool.updated`),
//! `join_requests` (from `join_request.created|approved|rejected|consumed|expired`) and
//! `tpm_ek_allows` (from `tpm.ek.allowed` / `tpm.ek.allow.revoked`) and `cloud_accounts` (from
//! `cloud.account.added` / `cloud.account.removed`), built only
//! from the events of `events/proto/bc/events/v1/identity.proto`, and `sites`, `boot_entries`
//! and `site_leases` (issue 20, from `events/proto/bc/events/v1/sites.proto`), applied with every
//! identity append (`crate::identity::all()` lists them).
//!
//! Each run of events folds into one insert of the rows created in it (with their later
//! changes) and one checked update per older row: an update of a row no created event made is
//! inapplicable (the log is broken), not silently dropped.

use events::store::{push_groups, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::RecordedEvent;

use crate::ProjectionError;

mod cloud_accounts;
mod join_requests;
mod pools;
pub mod read;
mod site_leases;
pub mod site_read;
mod sites;
mod tpm_allows;

pub use cloud_accounts::CloudAccounts;
pub use join_requests::JoinRequests;
pub use pools::Pools;
pub use site_leases::SiteLeases;
pub use sites::{BootEntries, Sites};
pub use tpm_allows::TpmEkAllows;

/// Rows per multi-row statement (well under both backends' parameter limits).
const BULK_ROWS: usize = 200;

fn text_or_null(s: &str) -> SqlValue {
    if s.is_empty() {
        SqlValue::NullText
    } else {
        SqlValue::Text(s.to_owned())
    }
}

fn bytes_or_null(b: &[u8]) -> SqlValue {
    if b.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(b.to_vec())
    }
}

fn opt_text(v: Option<String>) -> SqlValue {
    v.map_or(SqlValue::NullText, SqlValue::Text)
}

fn inapplicable(projection: &'static str, e: &RecordedEvent, why: &str) -> ProjectionError {
    ProjectionError::Inapplicable {
        projection,
        position: e.position,
        event_type: e.event_type.clone(),
        why: why.to_owned(),
    }
}

/// Queues `head (..), (..) tail` updates, `BULK_ROWS` groups per statement, each statement
/// required to change exactly as many rows as it has groups (`meaning` says what a shortfall
/// means).
async fn checked_updates(
    tx: &mut StoreTx,
    table: &str,
    head: &str,
    tail: &str,
    rows: Vec<Vec<SqlValue>>,
    meaning: &str,
) -> Result<(), ProjectionError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
        let groups = chunk.len() as u64;
        let mut sql = String::from(head);
        let mut args: Vec<SqlValue> = Vec::new();
        push_groups(&mut sql, &mut args, chunk);
        sql.push_str(tail);
        tx.defer(DeferredWrite::new(table, sql, args).expecting(groups, meaning.to_owned()))
            .await?;
    }
    Ok(())
}
