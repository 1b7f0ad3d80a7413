//! Rotating the command-signing root (add, switch, drop), each stage one transaction at the
//! `trust-bundle` stream's exact version. The rules are `domain::trust_bundle::rotate`'s.

use domain::trust_bundle::{
    check_new_root, decide_add_root, decide_drop_root, decide_switch_root, ConnectedNode, Settled,
    Switched, TrustBundleEvent, CONNECTED_WINDOW_US,
};
use events::store::{EventStore, ExpectedVersion, StoreTx};
use projections::quorum::connected_nodes;

use crate::clock::Clock;
use crate::quorum::bundle::load::{log_events, require_state};
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::quorum::stream::TRUST_BUNDLE_STREAM;
use crate::quorum::tables::projections;
use crate::run::append_and_project;

async fn append(
    tx: &mut StoreTx,
    stream_version: u64,
    decided: &[TrustBundleEvent],
    now_us: i64,
) -> Result<(), QuorumError> {
    append_and_project(
        tx,
        &projections(),
        TRUST_BUNDLE_STREAM,
        ExpectedVersion::Exact(stream_version),
        &log_events(decided, now_us),
    )
    .await?;
    Ok(())
}

/// Stage 1: trust `new_root_der` beside the current root; the version goes up.
pub async fn rotate_add_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    new_root_der: &[u8],
) -> Result<Settled, QuorumError> {
    check_new_root(new_root_der).map_err(QuorumRefusal::from)?;
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let (state, stream_version) = require_state(tx).await?;
        let decision = decide_add_root(new_root_der, &state)?;
        append(tx, stream_version, &decision.events, now_us).await?;
        Ok(decision.outcome)
    })
}

/// Stage 2: workers sign under the new root. Refused while a connected node reports a trust
/// version below the published one (which carries the new root), unless `force`.
pub async fn switch_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Switched, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let (state, stream_version) = require_state(tx).await?;
        let connected: Vec<ConnectedNode> = connected_nodes(tx, now_us - CONNECTED_WINDOW_US)
            .await?
            .into_iter()
            .map(|n| ConnectedNode {
                node_id: n.node_id,
                trust_version: n.trust_version,
            })
            .collect();
        let decision = decide_switch_root(&state, &connected, force)?;
        append(tx, stream_version, &decision.events, now_us).await?;
        Ok(decision.outcome)
    })
}

/// Stage 3: the former root is no longer trusted; the version goes up. Refused less than 24 h
/// after the switch (worker keys live at most 24 h), unless `force`.
pub async fn drop_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Settled, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let (state, stream_version) = require_state(tx).await?;
        let decision = decide_drop_root(&state, force, now_us)?;
        append(tx, stream_version, &decision.events, now_us).await?;
        Ok(decision.outcome)
    })
}
