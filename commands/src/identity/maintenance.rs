//! Identity housekeeping that a serving process runs in the background, so that nothing waits
//! on a test or an operator to call it:
//!
//! - expired single-use evidence (renew proofs in `attestation_uses`) is pruned in batches of
//!   [`PRUNE_BATCH`] (spec 001 "Single-use evidence": "in batches (5,000 by default)"), each
//!   batch one `attestation.uses.pruned` event, until no expired row is left;
//! - the suppressed-refusal counts of every finished minute, which the process held in memory
//!   ([`super::RefusalBudget`]), are written to the log as `security.refusals.suppressed`
//!   events, so a burst followed by silence is not left out of the audit trail; when the loop
//!   stops, the counts of the current minute too.
//!
//! Both are events, so a rebuild or a replay gives the same tables. The first part (with the
//! expiry of join requests) is the log's, the second each process's own ([`MaintenanceWork`]):
//! a serving replica runs the log's part only while it leads the `maintenance` task
//! ([`crate::leadership`]), and its own part always. Two replicas doing the log's part at once
//! (a leader that has not yet noticed its loss) stay correct: a second prune naming rows the
//! first already deleted deletes nothing, and the flush removes each pending count in the
//! transaction that writes its event.

use std::sync::Arc;
use std::time::Duration;

use domain::identity::decide_prune;
use events::schema::AttestationUsesPruned;
use events::store::{ExpectedVersion, StoreTx};
use events::{new_event_id, NewEvent};
use rand_core::CryptoRngCore;
use tokio::sync::watch;

use projections::identity::read;

use events::store::EventStore;

use super::budget::RefusalBudget;
use super::error::IdentityError;
use super::refusals;
use crate::run::{run, At, Command, Decided};
use crate::{append_and_project, Clock};

/// Expired `attestation_uses` rows per prune event (spec 001's default).
pub const PRUNE_BATCH: u32 = 5_000;

/// How often a serving process runs [`IdentityMaintenance::maintain`].
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(60);

/// Which part of the housekeeping a [`run_maintenance`] loop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaintenanceWork {
    /// Both parts: a process that is the only one serving its store.
    All,
    /// The log's part, which one replica at a time does (the `maintenance` leader): expired
    /// evidence pruned ([`IdentityMaintenance::prune_all_expired`]) and join requests expired.
    Log,
    /// This process's own part, which every replica does: the suppressed refusal counts it
    /// holds written to the log (those of finished minutes each round, all when it stops).
    OwnCounts,
}

impl MaintenanceWork {
    fn log(self) -> bool {
        matches!(self, MaintenanceWork::All | MaintenanceWork::Log)
    }

    fn own_counts(self) -> bool {
        matches!(self, MaintenanceWork::All | MaintenanceWork::OwnCounts)
    }
}

/// What one [`IdentityMaintenance::maintain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Expired `attestation_uses` rows pruned.
    pub pruned: u64,
    /// `attestation.uses.pruned` events written (one per batch).
    pub prune_events: u64,
    /// `security.refusals.suppressed` events written.
    pub suppressed_events: u64,
    /// Join requests expired (`join_request.expired`, [`crate::attest`]).
    pub expired_join_requests: u64,
}

/// The identity housekeeping of a serving process: store, clock and the tenant its events are
/// written in; no key.
#[derive(Clone)]
pub struct IdentityMaintenance {
    store: EventStore,
    clock: Arc<dyn Clock>,
    root_tenant: String,
    budget: Arc<RefusalBudget>,
}

impl IdentityMaintenance {
    /// Housekeeping over `store`, writing its events in `root_tenant`, with a refusal budget
    /// of its own (empty: see [`IdentityMaintenance::with_refusal_budget`]).
    pub fn new(store: EventStore, clock: Arc<dyn Clock>, root_tenant: impl Into<String>) -> Self {
        IdentityMaintenance {
            store,
            clock,
            root_tenant: root_tenant.into(),
            budget: Arc::new(RefusalBudget::new()),
        }
    }

    /// The same housekeeping flushing the suppressed refusals counted in `budget` (the one the
    /// process's join and renew handlers count in).
    pub fn with_refusal_budget(mut self, budget: Arc<RefusalBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Deletes up to `batch` expired `attestation_uses` rows (expired at the clock's now) with
    /// one `attestation.uses.pruned` event naming them. Returns how many were pruned.
    pub async fn prune_attestation_uses(&self, batch: u32) -> Result<u64, IdentityError> {
        let prune = Prune {
            root: &self.root_tenant,
            batch,
        };
        run(&self.store, self.clock.as_ref(), &prune).await
    }

    /// Writes the suppressed-refusal counts of every finished minute as
    /// `security.refusals.suppressed` events. Returns how many events were written.
    pub async fn flush_suppressed_refusals(&self) -> Result<u64, IdentityError> {
        let now_us = self.clock.now_us();
        let window = domain::identity::window_start(now_us);
        refusals::flush(&self.store, &self.budget, Some(window), now_us).await
    }

    /// Writes every suppressed-refusal count held, the current minute's too (a process that
    /// stops). Returns how many events were written.
    pub async fn flush_all_suppressed_refusals(&self) -> Result<u64, IdentityError> {
        refusals::flush(&self.store, &self.budget, None, self.clock.now_us()).await
    }

    /// Prunes every expired `attestation_uses` row, [`PRUNE_BATCH`] per event, then writes the
    /// suppressed-refusal counts of finished minutes. Each batch is its own transaction, so a
    /// long backlog makes progress that a failure later on does not undo.
    pub async fn maintain(&self) -> Result<MaintenanceReport, IdentityError> {
        self.maintain_in_batches(PRUNE_BATCH).await
    }

    /// [`IdentityMaintenance::maintain`] with another batch size (tests use small ones).
    pub async fn maintain_in_batches(
        &self,
        batch: u32,
    ) -> Result<MaintenanceReport, IdentityError> {
        self.maintain_part(MaintenanceWork::All, batch).await
    }

    /// One round of `work`'s part of the housekeeping, `batch` expired rows per prune event.
    pub async fn maintain_part(
        &self,
        work: MaintenanceWork,
        batch: u32,
    ) -> Result<MaintenanceReport, IdentityError> {
        let mut report = MaintenanceReport::default();
        if work.log() {
            (report.pruned, report.prune_events) = self.prune_all_expired(batch).await?;
        }
        if work.own_counts() {
            report.suppressed_events = self.flush_suppressed_refusals().await?;
        }
        if work.log() {
            report.expired_join_requests = self.expire_join_requests().await?;
        }
        Ok(report)
    }

    /// Prunes every expired `attestation_uses` row, `batch` per event. Returns the rows pruned
    /// and the events written.
    pub async fn prune_all_expired(&self, batch: u32) -> Result<(u64, u64), IdentityError> {
        let (mut pruned, mut events) = (0, 0);
        loop {
            let n = self.prune_attestation_uses(batch).await?;
            if n == 0 {
                break;
            }
            pruned += n;
            events += 1;
            if n < u64::from(batch) {
                break;
            }
        }
        Ok((pruned, events))
    }

    /// Expires every open join request past its expiry, [`crate::attest::EXPIRE_BATCH`] per
    /// transaction. Returns how many.
    pub async fn expire_join_requests(&self) -> Result<u64, IdentityError> {
        let batch = crate::attest::EXPIRE_BATCH;
        let mut total = 0;
        loop {
            let n = crate::attest::expire_due(&self.store, self.clock.as_ref(), batch).await?;
            total += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }
}

/// Runs `work`'s part of [`IdentityMaintenance::maintain`] now and then every `interval`, until
/// `shutdown` turns true or its sender is dropped, and then (when `work` includes this
/// process's own counts) writes the suppressed counts still held
/// ([`IdentityMaintenance::flush_all_suppressed_refusals`]). Each round's outcome goes to
/// `report` (the serving process logs it);
/// a failed round (the database restarting, say) is tried again at the next tick and does not
/// stop the loop.
pub async fn run_maintenance(
    service: Arc<IdentityMaintenance>,
    work: MaintenanceWork,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    mut report: impl FnMut(Result<MaintenanceReport, IdentityError>) + Send,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    if !work.own_counts() {
                        return;
                    }
                    let last = service.flush_all_suppressed_refusals().await;
                    report(last.map(|suppressed_events| MaintenanceReport {
                        suppressed_events,
                        ..MaintenanceReport::default()
                    }));
                    return;
                }
                continue;
            }
            _ = ticker.tick() => {}
        }
        report(service.maintain_part(work, PRUNE_BATCH).await);
    }
}

/// Pruning expired single-use records, as the runner drives it.
struct Prune<'a> {
    root: &'a str,
    batch: u32,
}

#[async_trait::async_trait]
impl Command for Prune<'_> {
    type State = Vec<(String, Vec<u8>)>;
    type Event = AttestationUsesPruned;
    type Outcome = u64;
    type Answer = u64;
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<Self::State, IdentityError> {
        let keys = read::expired_attestation_uses(tx, at.now_us, self.batch).await?;
        Ok(keys.into_iter().map(|k| (k.attestor, k.subject)).collect())
    }

    fn decide(&self, expired: &Self::State, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_prune(expired.clone(), at.now_us).map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &Self::State,
        events: Vec<AttestationUsesPruned>,
        at: &At,
    ) -> Result<(), IdentityError> {
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::from_payload(new_event_id(), self.root, at.now_us, e))
            .collect();
        append_and_project(
            tx,
            &projections::identity::all(),
            &format!("tenant/{}", self.root),
            ExpectedVersion::Any,
            &events,
        )
        .await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        pruned: u64,
        _: &At,
    ) -> Result<u64, IdentityError> {
        Ok(pruned)
    }
}
