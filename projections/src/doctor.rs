//! The read queries of `bcctl doctor`: how far the audit sequencer and sealer are behind, the
//! database's clock, and the node certificates that expire soon. Read only; each answers what
//! one doctor check needs and nothing more.

use events::store::{Backend, EventStore, LogStore, SqlValue, StoreError};

/// Events the audit sequencer has not put in a tree yet: how many, and the oldest one's
/// occurred-at (µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequencerLag {
    /// The highest log position in any tenant's tree (0: none yet).
    pub sequenced_position: i64,
    /// Events after that position.
    pub behind: i64,
    /// The oldest of those events' occurred-at, µs since the epoch.
    pub oldest_us: Option<i64>,
}

/// How far the audit sequencer is behind the log's head.
pub async fn sequencer_lag(store: &EventStore) -> Result<SequencerLag, StoreError> {
    let row: Option<(i64, i64, Option<i64>)> = store
        .fetch_optional(
            "SELECT s.p, COUNT(e.position), MIN(e.occurred_at_us) \
             FROM (SELECT COALESCE(MAX(position), 0) AS p FROM audit_leaves) s \
             LEFT JOIN events e ON e.position > s.p GROUP BY s.p",
            &[],
        )
        .await?;
    let (sequenced_position, behind, oldest_us) = row.unwrap_or((0, 0, None));
    Ok(SequencerLag {
        sequenced_position,
        behind,
        oldest_us,
    })
}

/// A tenant with leaves no checkpoint covers yet (its own last checkpoint's event aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsealedTenant {
    pub tenant_id: String,
    /// Leaves past the last checkpoint that are not checkpoint events.
    pub leaves: i64,
    /// The oldest such leaf's event occurred-at, µs.
    pub oldest_us: i64,
}

/// Every tenant whose tree holds leaves past its last checkpoint other than checkpoint events,
/// the longest waiting first.
pub async fn unsealed_tenants(store: &EventStore) -> Result<Vec<UnsealedTenant>, StoreError> {
    let rows: Vec<(String, i64, i64)> = store
        .fetch_all(
            "SELECT l.tenant_id, COUNT(*), MIN(e.occurred_at_us) FROM audit_leaves l \
             JOIN events e ON e.position = l.position \
             LEFT JOIN (SELECT tenant_id, MAX(tree_size) AS s FROM audit_checkpoints \
                        GROUP BY tenant_id) k ON k.tenant_id = l.tenant_id \
             WHERE l.leaf_index >= COALESCE(k.s, 0) \
               AND e.event_type <> 'audit.checkpoint.sealed' \
             GROUP BY l.tenant_id ORDER BY MIN(e.occurred_at_us), l.tenant_id",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(tenant_id, leaves, oldest_us)| UnsealedTenant {
            tenant_id,
            leaves,
            oldest_us,
        })
        .collect())
}

/// The newest checkpoint's occurred-at over every tenant, µs (`None`: none sealed yet).
pub async fn last_seal_us(store: &EventStore) -> Result<Option<i64>, StoreError> {
    let row: Option<(Option<i64>,)> = store
        .fetch_optional("SELECT MAX(occurred_at_us) FROM audit_checkpoints", &[])
        .await?;
    Ok(row.and_then(|(v,)| v))
}

/// The database's own clock in µs since the epoch (Postgres `clock_timestamp()`); `None` on
/// SQLite, which has no clock of its own (it is this host's).
pub async fn database_now_us(store: &EventStore) -> Result<Option<i64>, StoreError> {
    if store.backend() != Backend::Postgres {
        return Ok(None);
    }
    let row: Option<(i64,)> = store
        .fetch_optional(
            "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await?;
    Ok(row.map(|(v,)| v))
}

/// An active node whose newest unrevoked certificate ends before the horizon asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiringNode {
    pub node_id: String,
    /// notAfter of its newest unrevoked certificate, µs.
    pub not_after_us: i64,
}

/// Active nodes whose newest unrevoked certificate's notAfter is before `before_us`, the soonest
/// first. A node whose certificates are all revoked is not listed (revoked, not expiring).
pub async fn nodes_expiring_before(
    store: &EventStore,
    before_us: i64,
) -> Result<Vec<ExpiringNode>, StoreError> {
    let rows: Vec<(String, i64)> = store
        .fetch_all(
            "SELECT n.node_id, MAX(c.not_after_us) FROM nodes n \
             JOIN node_certs c ON c.node_id = n.node_id AND c.revoked_at_us IS NULL \
             WHERE n.status = 'active' GROUP BY n.node_id \
             HAVING MAX(c.not_after_us) < $1 ORDER BY MAX(c.not_after_us), n.node_id",
            &[SqlValue::Int(before_us)],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(node_id, not_after_us)| ExpiringNode {
            node_id,
            not_after_us,
        })
        .collect())
}
