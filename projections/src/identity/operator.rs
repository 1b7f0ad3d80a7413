//! What operators look for beside the node rows (`bcctl node list | show`, `bcctl tenant list`):
//! each node's newest certificate (its expiry and whether it is revoked), each node's session as
//! the gateway last reported it (`node_trust_reports`: connected, last seen), and the tenants
//! with their node counts. Each is one statement on either backend, read inside the caller's
//! transaction.

use events::store::{StoreError, StoreTx};

/// A node's newest certificate (the highest issue position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestCert {
    pub node_id: String,
    pub serial: String,
    pub identity_generation: i64,
    pub not_after_us: i64,
    pub revoked_at_us: Option<i64>,
}

/// A node's session, as the gateway last recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub node_id: String,
    /// A session was open at the last report (it may since have gone silent: compare
    /// `last_seen_us` with a window).
    pub connected: bool,
    pub last_seen_us: i64,
}

/// A tenant and how many nodes it has, by status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRow {
    pub tenant_id: String,
    pub nodes: i64,
    pub active_nodes: i64,
}

type CertTuple = (String, String, i64, i64, Option<i64>);

fn cert(r: CertTuple) -> LatestCert {
    LatestCert {
        node_id: r.0,
        serial: r.1,
        identity_generation: r.2,
        not_after_us: r.3,
        revoked_at_us: r.4,
    }
}

const LATEST: &str = "SELECT c.node_id, c.serial, c.identity_generation, c.not_after_us, \
     c.revoked_at_us FROM node_certs c WHERE c.issued_position = \
     (SELECT max(d.issued_position) FROM node_certs d WHERE d.node_id = c.node_id)";

/// Every node's newest certificate, by node id.
pub async fn latest_certs(tx: &mut StoreTx) -> Result<Vec<LatestCert>, StoreError> {
    let sql = format!("{LATEST} ORDER BY c.node_id");
    let rows: Vec<CertTuple> = tx.fetch_all(&sql, &[]).await?;
    Ok(rows.into_iter().map(cert).collect())
}

/// One node's newest certificate.
pub async fn latest_cert_of(
    tx: &mut StoreTx,
    node_id: &str,
) -> Result<Option<LatestCert>, StoreError> {
    let sql = format!("{LATEST} AND c.node_id = $1");
    let row: Option<CertTuple> = tx.fetch_optional(&sql, &[node_id.into()]).await?;
    Ok(row.map(cert))
}

/// Every node's recorded session, by node id.
pub async fn sessions(tx: &mut StoreTx) -> Result<Vec<SessionRow>, StoreError> {
    let rows: Vec<(String, bool, i64)> = tx
        .fetch_all(
            "SELECT node_id, connected, last_seen_us FROM node_trust_reports ORDER BY node_id",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| SessionRow {
            node_id: r.0,
            connected: r.1,
            last_seen_us: r.2,
        })
        .collect())
}

/// One node's recorded session.
pub async fn session_of(tx: &mut StoreTx, node_id: &str) -> Result<Option<SessionRow>, StoreError> {
    let row: Option<(String, bool, i64)> = tx
        .fetch_optional(
            "SELECT node_id, connected, last_seen_us FROM node_trust_reports WHERE node_id = $1",
            &[node_id.into()],
        )
        .await?;
    Ok(row.map(|r| SessionRow {
        node_id: r.0,
        connected: r.1,
        last_seen_us: r.2,
    }))
}

/// Every tenant that has nodes, with its node counts.
pub async fn tenants_with_nodes(tx: &mut StoreTx) -> Result<Vec<TenantRow>, StoreError> {
    let rows: Vec<(String, i64, i64)> = tx
        .fetch_all(
            "SELECT tenant_id, count(*), \
             sum(CASE WHEN status = 'active' THEN 1 ELSE 0 END) \
             FROM nodes GROUP BY tenant_id ORDER BY tenant_id",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| TenantRow {
            tenant_id: r.0,
            nodes: r.1,
            active_nodes: r.2,
        })
        .collect())
}
