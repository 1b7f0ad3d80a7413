//! The published bundle as the CLI shows it: version, content, rotation and history.

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
