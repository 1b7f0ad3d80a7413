//! The trust-bundle handlers' shared steps: reading the published state into the domain's
//! [`PublishedState`] and writing the domain's [`TrustBundleEvent`]s as log events.

use domain::quorum::HeldApproverSet;
use domain::trust_bundle::{
    read_content, PublishedContent, PublishedState, RotationStage, TrustBundleEvent,
};
use events::schema::TrustBundleContent;
use events::store::{ExpectedVersion, StoreTx};
use events::NewEvent;
use projections::quorum::{read_bundle_state, BundleStateRow};
use prost::Message;

use crate::quorum::error::{corrupt, refused, QuorumError, QuorumRefusal};
use crate::quorum::stream::{new_event_id, DEPLOYMENT_TENANT};

/// The stored content of a `trust_bundle_state` row, read back.
pub(crate) fn stored_content(row: &BundleStateRow) -> Result<PublishedContent, QuorumError> {
    let content = TrustBundleContent::decode(row.content.as_slice())
        .map_err(|e| corrupt("trust_bundle_state.content", e))?;
    read_content(content).map_err(|e| QuorumError::Corrupt(e.to_string()))
}

/// A `trust_bundle_state` row as the deciders read it.
pub(crate) fn published_state(row: &BundleStateRow) -> Result<PublishedState, QuorumError> {
    let rotation_stage = RotationStage::parse(&row.rotation_stage)
        .ok_or_else(|| corrupt("trust_bundle_state.rotation_stage", &row.rotation_stage))?;
    Ok(PublishedState {
        version: row.version,
        digest: row.digest.clone(),
        content: stored_content(row)?,
        active_root_sha256: row.active_root_sha256.clone(),
        rotation_stage,
        rotation_root_sha256: row.rotation_root_sha256.clone(),
        switched_at_us: row.switched_at_us,
        floor: row.floor,
    })
}

/// The approver set currently published (none before any bundle), read in `tx`.
pub(crate) async fn current_set(tx: &mut StoreTx) -> Result<HeldApproverSet, QuorumError> {
    match read_bundle_state(tx).await? {
        None => Ok(HeldApproverSet::initial()),
        Some(row) => Ok(stored_content(&row)?.held),
    }
}

/// The published state and the stream version it was read at; a refusal before any bundle.
pub(crate) async fn require_state(tx: &mut StoreTx) -> Result<(PublishedState, u64), QuorumError> {
    match read_bundle_state(tx).await? {
        Some(row) => Ok((published_state(&row)?, row.stream_version)),
        None => refused(QuorumRefusal::InvalidState(
            "no trust bundle is published yet: start the server (or settle the configuration) first"
                .to_string(),
        )),
    }
}

/// The expected version of the `trust-bundle` stream for a state read at `stream_version`.
pub(crate) fn expected(stream_version: Option<u64>) -> ExpectedVersion {
    match stream_version {
        None => ExpectedVersion::NoStream,
        Some(version) => ExpectedVersion::Exact(version),
    }
}

/// The decided events as log events of the deployment tenant, at `now_us`.
pub(crate) fn log_events(decided: &[TrustBundleEvent], now_us: i64) -> Vec<NewEvent> {
    decided
        .iter()
        .map(|event| {
            let id = new_event_id();
            match event {
                TrustBundleEvent::Published(p) => {
                    NewEvent::from_payload(id, DEPLOYMENT_TENANT, now_us, p)
                }
                TrustBundleEvent::ApproverSetChanged(p) => {
                    NewEvent::from_payload(id, DEPLOYMENT_TENANT, now_us, p)
                }
                TrustBundleEvent::CommandRootAdded(p) => {
                    NewEvent::from_payload(id, DEPLOYMENT_TENANT, now_us, p)
                }
                TrustBundleEvent::CommandRootSwitched(p) => {
                    NewEvent::from_payload(id, DEPLOYMENT_TENANT, now_us, p)
                }
                TrustBundleEvent::CommandRootDropped(p) => {
                    NewEvent::from_payload(id, DEPLOYMENT_TENANT, now_us, p)
                }
            }
        })
        .collect()
}
