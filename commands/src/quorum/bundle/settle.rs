//! Settling this process's configuration into the published bundle, in one transaction on the
//! `trust-bundle` stream with an exact expected version, so two processes with the same
//! configuration agree (the loser of a race re-reads and finds the content published). The
//! rules are `domain::trust_bundle::settle`'s.

use domain::trust_bundle::{decide_settle, validate, BundleConfig, Settled};
use projections::quorum::{history_version_of, read_bundle_state};

use crate::clock::Clock;
use crate::quorum::bundle::load::{expected, log_events, published_state};
use crate::quorum::error::{QuorumError, QuorumRefusal};
use crate::quorum::stream::TRUST_BUNDLE_STREAM;
use crate::quorum::tables::projections;
use crate::run::append_and_project;
use events::store::EventStore;

/// Settles this configuration's bundle: publishes it at the version its content calls for, or
/// reports the version it is already published at.
pub async fn settle_trust_bundle(
    store: &EventStore,
    clock: &dyn Clock,
    config: &BundleConfig,
) -> Result<Settled, QuorumError> {
    let valid = validate(config).map_err(QuorumRefusal::from)?;
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = read_bundle_state(tx).await?;
        let published = row.as_ref().map(published_state).transpose()?;
        let replaced_version = match &published {
            Some(p) if p.digest != valid.digest() => {
                history_version_of(tx, &valid.digest()).await?
            }
            _ => None,
        };
        let decision = decide_settle(&valid, published.as_ref(), replaced_version)?;
        if !decision.events.is_empty() {
            append_and_project(
                tx,
                &projections(),
                TRUST_BUNDLE_STREAM,
                expected(row.as_ref().map(|r| r.stream_version)),
                &log_events(&decision.events, now_us),
            )
            .await?;
        }
        Ok(decision.outcome)
    })
}
