//! Settling this process's configuration into the published bundle, in one transaction on the
//! `trust-bundle` stream with an exact expected version, so two processes with the same
//! configuration agree (the loser of a race re-reads and finds the content published). The
//! rules are `domain::trust_bundle::settle`'s.

use async_trait::async_trait;
use domain::trust_bundle::{
    decide_settle, validate, BundleConfig, PublishedState, Settled, TrustBundleEvent, ValidConfig,
};
use events::store::{EventStore, StoreTx};
use projections::quorum::{history_version_of, read_bundle_state};
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::bundle::load::{expected, log_events, published_state};
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::quorum::stream::TRUST_BUNDLE_STREAM;
use crate::quorum::tables::projections;
use crate::run::{append_and_project, decided, run, At, Command, Decided};

/// Settles this configuration's bundle: publishes it at the version its content calls for, or
/// reports the version it is already published at.
pub async fn settle_trust_bundle(
    store: &EventStore,
    clock: &dyn Clock,
    config: &BundleConfig,
) -> Result<Settled, QuorumError> {
    let valid = validate(config).map_err(QuorumRefusal::from)?;
    run(store, clock, &Settle(valid)).await
}

/// A settle, as the runner drives it.
struct Settle<'a>(ValidConfig<'a>);

/// What a settle reads: the published state (none before any bundle), the stream version it
/// was read at, and the version this content was published at before, if it was replaced.
struct Loaded {
    published: Option<PublishedState>,
    stream_version: Option<u64>,
    replaced_version: Option<u64>,
}

#[async_trait]
impl Command for Settle<'_> {
    type State = Loaded;
    type Event = TrustBundleEvent;
    type Outcome = Settled;
    type Answer = Settled;
    type Error = QuorumError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Loaded, QuorumError> {
        let row = read_bundle_state(tx).await?;
        let published = row.as_ref().map(published_state).transpose()?;
        let replaced_version = match &published {
            Some(p) if p.digest != self.0.digest() => {
                history_version_of(tx, &self.0.digest()).await?
            }
            _ => None,
        };
        Ok(Loaded {
            published,
            stream_version: row.as_ref().map(|r| r.stream_version),
            replaced_version,
        })
    }

    fn decide(&self, loaded: &Loaded, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_settle(
            &self.0,
            loaded.published.as_ref(),
            loaded.replaced_version,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        loaded: &Loaded,
        events: Vec<TrustBundleEvent>,
        at: &At,
    ) -> Result<(), QuorumError> {
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            expected(loaded.stream_version),
            &log_events(&events, at.now_us),
        )
        .await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Loaded,
        settled: Settled,
        _: &At,
    ) -> Result<Settled, QuorumError> {
        Ok(settled)
    }
}
