//! Rotating the command-signing root (add, switch, drop), each stage one transaction at the
//! `trust-bundle` stream's exact version. The rules are `domain::trust_bundle::rotate`'s.

use async_trait::async_trait;
use domain::decision::Decision;
use domain::trust_bundle::{
    check_new_root, decide_add_root, decide_drop_root, decide_switch_root, ConnectedNode,
    PublishedState, Settled, Switched, TrustBundleError, TrustBundleEvent, CONNECTED_WINDOW_US,
};
use events::store::{EventStore, ExpectedVersion, StoreTx};
use projections::quorum::connected_nodes;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::bundle::load::{log_events, require_state};
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::quorum::stream::TRUST_BUNDLE_STREAM;
use crate::quorum::tables::projections;
use crate::run::{append_and_project, decided, run, At, Command, Decided};

/// Stage 1: trust `new_root_der` beside the current root; the version goes up.
pub async fn rotate_add_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    new_root_der: &[u8],
) -> Result<Settled, QuorumError> {
    check_new_root(new_root_der).map_err(QuorumRefusal::from)?;
    let stage = Stage {
        connected: false,
        decide: |facts: &Facts, _: &At| decide_add_root(new_root_der, &facts.state),
    };
    run(store, clock, &stage).await
}

/// Stage 2: workers sign under the new root. Refused while a connected node reports a trust
/// version below the published one (which carries the new root), unless `force`.
pub async fn switch_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Switched, QuorumError> {
    let stage = Stage {
        connected: true,
        decide: |facts: &Facts, _: &At| decide_switch_root(&facts.state, &facts.connected, force),
    };
    run(store, clock, &stage).await
}

/// Stage 3: the former root is no longer trusted; the version goes up. Refused less than 24 h
/// after the switch (worker keys live at most 24 h), unless `force`.
pub async fn drop_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Settled, QuorumError> {
    let stage = Stage {
        connected: false,
        decide: |facts: &Facts, at: &At| decide_drop_root(&facts.state, force, at.now_us),
    };
    run(store, clock, &stage).await
}

/// What a stage reads: the published state, the stream version it was read at, and (for the
/// switch) the nodes connected within [`CONNECTED_WINDOW_US`].
struct Facts {
    state: PublishedState,
    stream_version: u64,
    connected: Vec<ConnectedNode>,
}

/// One stage of a rotation, as the runner drives it: `decide` calls the stage's decider.
struct Stage<F> {
    connected: bool,
    decide: F,
}

#[async_trait]
impl<O, F> Command for Stage<F>
where
    O: Send + 'static,
    F: Fn(&Facts, &At) -> Result<Decision<TrustBundleEvent, O>, TrustBundleError> + Sync,
{
    type State = Facts;
    type Event = TrustBundleEvent;
    type Outcome = O;
    type Answer = O;
    type Error = QuorumError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<Facts, QuorumError> {
        let (state, stream_version) = require_state(tx).await?;
        let connected = if self.connected {
            connected_nodes(tx, at.now_us - CONNECTED_WINDOW_US)
                .await?
                .into_iter()
                .map(|n| ConnectedNode {
                    node_id: n.node_id,
                    trust_version: n.trust_version,
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Facts {
            state,
            stream_version,
            connected,
        })
    }

    fn decide(&self, facts: &Facts, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided((self.decide)(facts, at))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        facts: &Facts,
        events: Vec<TrustBundleEvent>,
        at: &At,
    ) -> Result<(), QuorumError> {
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            ExpectedVersion::Exact(facts.stream_version),
            &log_events(&events, at.now_us),
        )
        .await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Facts,
        outcome: O,
        _: &At,
    ) -> Result<O, QuorumError> {
        Ok(outcome)
    }
}
