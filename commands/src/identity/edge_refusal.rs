//! Renewals refused at the gateway's edge (issue 40): a node certificate the TLS handshake
//! refused as revoked or expired, recorded as `security.renew.refused` like every renewal
//! refusal the JoinService decides ([`domain::identity::decide_edge_renew_refusal`] says what
//! the event holds and whom it is attributed to), under the same per-reason bound.
//!
//! A flood of refused handshakes cannot flood the log: at most `refusals_per_minute` events per
//! reason and minute are written one by one (the bound is read under the reason's lock, exact
//! across processes); once this process knows a minute is full, a refusal costs no store access
//! at all and is counted in memory, under the root tenant (attributing it would need a read),
//! and written with the other suppressed counts as one `security.refusals.suppressed` event per
//! reason and minute by [`EdgeRefusals::maintenance`]'s flush. Refusals the edge could not even
//! hand over (its queue full) are counted the same way ([`EdgeRefusals::count_unrecorded`]), so
//! the log's count loses none of them. Holds no key: a split gateway records its own.

use std::sync::Arc;

use async_trait::async_trait;
use domain::identity::{
    decide_edge_renew_refusal, edge_refusal_subject, window_start, Decision, EdgeRefusalRecord,
    EdgeRenewRefusal, IdentityEvent,
};
use events::schema::RenewRefused;
use events::store::{EventStore, StoreTx};
use projections::identity::read;
use rand_core::CryptoRngCore;

use super::config::IdentityConfig;
use super::error::IdentityError;
use super::maintenance::IdentityMaintenance;
use super::{refusals, rows};
use crate::run::{At, Command, Decided};
use crate::Clock;

/// The refusal kind of renewals in the refusal counts and events.
const KIND: &str = "renew";

/// Records the renewals an edge refused at the handshake.
#[derive(Clone)]
pub struct EdgeRefusals {
    store: EventStore,
    clock: Arc<dyn Clock>,
    config: IdentityConfig,
}

impl EdgeRefusals {
    /// Over `store`, counting in `config`'s refusal budget (share the JoinService's config in
    /// one process, so one flush writes both).
    pub fn new(store: EventStore, clock: Arc<dyn Clock>, config: IdentityConfig) -> Self {
        EdgeRefusals {
            store,
            clock,
            config,
        }
    }

    /// Records the refusal `why` of the presented `leaf_der`: `Ok(true)` when written as a
    /// `security.renew.refused` event, `Ok(false)` when counted as suppressed.
    pub async fn record(
        &self,
        why: EdgeRenewRefusal,
        leaf_der: &[u8],
    ) -> Result<bool, IdentityError> {
        let reason = why.refusal().reason();
        let now_us = self.clock.now_us();
        let root = &self.config.root_tenant;
        if refusals::suppressed_without_store(&self.config, KIND, &reason, root, now_us) {
            return Ok(false);
        }
        let command = RefusedAtEdge {
            service: self,
            why,
            leaf_der,
        };
        crate::run::run(&self.store, self.clock.as_ref(), &command).await
    }

    /// Counts `n` refusals of `why` the edge never handed to [`EdgeRefusals::record`] (its
    /// queue was full) as suppressed in the current minute, under the root tenant.
    pub fn count_unrecorded(&self, why: EdgeRenewRefusal, n: u64) {
        if n == 0 {
            return;
        }
        let window = window_start(self.clock.now_us());
        let key = (
            KIND.to_owned(),
            why.refusal().reason(),
            window,
            self.config.root_tenant.clone(),
        );
        self.config.refusal_budget.put_back(vec![(key, n)]);
    }

    /// The housekeeping that writes this budget's suppressed counts
    /// ([`IdentityMaintenance::flush_suppressed_refusals`]).
    pub fn maintenance(&self) -> IdentityMaintenance {
        IdentityMaintenance::new(
            self.store.clone(),
            self.clock.clone(),
            self.config.root_tenant.clone(),
        )
        .with_refusal_budget(self.config.refusal_budget.clone())
    }
}

/// One edge refusal, as the runner drives it: the stored certificate of the serial the leaf
/// claims and its node are loaded, the domain decides the event, the answer step records it
/// under the bound. Nothing else is appended.
struct RefusedAtEdge<'a> {
    service: &'a EdgeRefusals,
    why: EdgeRenewRefusal,
    leaf_der: &'a [u8],
}

/// The stored certificate of the claimed serial and its node.
struct Stored {
    cert: Option<domain::identity::CertState>,
    node: Option<domain::identity::NodeState>,
}

#[async_trait]
impl Command for RefusedAtEdge<'_> {
    type State = Stored;
    type Event = IdentityEvent;
    type Outcome = EdgeRefusalRecord;
    type Answer = bool;
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Stored, IdentityError> {
        let td = &self.service.config.trust_domain;
        let Some((_, serial)) = edge_refusal_subject(self.leaf_der, td) else {
            return Ok(Stored {
                cert: None,
                node: None,
            });
        };
        let cert = match read::cert_by_serial(tx, &serial).await? {
            Some(row) => Some(rows::cert_state(&row)?),
            None => None,
        };
        let node = match &cert {
            Some(c) => match read::node_by_id(tx, &c.node_id).await? {
                Some(row) => Some(rows::node_state(&row)?),
                None => None,
            },
            None => None,
        };
        Ok(Stored { cert, node })
    }

    fn decide(&self, stored: &Stored, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let record = decide_edge_renew_refusal(
            self.why,
            self.leaf_der,
            &self.service.config.trust_domain,
            stored.cert.as_ref(),
            stored.node.as_ref(),
        );
        Ok(Decision::unchanged(record))
    }

    async fn append(
        &self,
        _: &mut StoreTx,
        _: &Stored,
        _: Vec<IdentityEvent>,
        _: &At,
    ) -> Result<(), IdentityError> {
        Ok(())
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Stored,
        record: EdgeRefusalRecord,
        at: &At,
    ) -> Result<bool, IdentityError> {
        let config = &self.service.config;
        let reason = record.refusal.reason();
        let tenant = record.tenant.unwrap_or_else(|| config.root_tenant.clone());
        let payload = RenewRefused {
            refusal: reason.clone(),
            node_id: record.node_id,
            serial: record.serial,
            csr_sha256: Vec::new(),
            window_start_us: window_start(at.now_us),
        };
        refusals::record(tx, KIND, &reason, &tenant, &payload, at.now_us, config).await
    }
}
