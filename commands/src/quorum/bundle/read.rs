//! The published bundle as the CLI shows it: version, content, rotation and history; and the
//! approver sets connected nodes report holding.

use domain::quorum::{HeldApproverSet, SetSignature};
use events::store::{EventStore, LogStore, LogTx};
use projections::quorum::{read_bundle_state, read_history, HistoryRow};

use crate::quorum::bundle::load::stored_content;
use crate::quorum::error::QuorumError;

/// The published bundle as the store holds it.
#[derive(Debug, Clone)]
pub struct PublishedBundle {
    pub version: u64,
    pub digest: Vec<u8>,
    pub command_signing_roots: Vec<Vec<u8>>,
    pub active_root_sha256: Vec<u8>,
    /// `none`, `added` or `switched`.
    pub rotation_stage: String,
    pub held: HeldApproverSet,
    pub set_signatures: Vec<SetSignature>,
    pub floor: u64,
    pub history: Vec<HistoryRow>,
}

/// The published bundle, or `None` before any process published one.
pub async fn published_bundle(store: &EventStore) -> Result<Option<PublishedBundle>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = async {
        let Some(row) = read_bundle_state(&mut tx).await? else {
            return Ok(None);
        };
        let content = stored_content(&row)?;
        let history = read_history(&mut tx).await?;
        Ok(Some(PublishedBundle {
            version: row.version,
            digest: row.digest,
            command_signing_roots: content.command_signing_roots,
            active_root_sha256: row.active_root_sha256,
            rotation_stage: row.rotation_stage,
            held: content.held,
            set_signatures: content.signatures,
            floor: row.floor,
            history,
        }))
    }
    .await;
    let _ = tx.rollback().await;
    result
}

/// The approver set a connected node reports holding, for `pki trust-version`
/// (`approverSetBehind`, `approverSetSample`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectedApproverSet {
    pub node_id: String,
    /// The trust version it holds.
    pub trust_version: u64,
    /// The set's epoch; 0 for a node holding no approver keys.
    pub epoch: u64,
    /// SHA-256(approverSetInput) of the set; `None` for a node holding no approver keys.
    pub sha256: Option<Vec<u8>>,
}

/// The approver sets of the connected nodes (a session not ended, seen within
/// [`domain::trust_bundle::CONNECTED_WINDOW_US`] before `now_us`), by node id, as the gateways
/// record them from Hello and StatusReport (spec 003 "Nodes that hold another set").
pub async fn connected_approver_sets(
    store: &EventStore,
    now_us: i64,
) -> Result<Vec<ConnectedApproverSet>, QuorumError> {
    let mut tx = store.begin().await?;
    let rows = projections::quorum::read::connected_approver_sets(
        &mut tx,
        now_us - crate::quorum::CONNECTED_WINDOW_US,
    )
    .await;
    let _ = tx.rollback().await;
    Ok(rows?
        .into_iter()
        .map(|r| ConnectedApproverSet {
            node_id: r.node_id,
            trust_version: r.trust_version,
            epoch: r.approver_set_epoch.unwrap_or(0),
            sha256: r.approver_set_sha256,
        })
        .collect())
}
