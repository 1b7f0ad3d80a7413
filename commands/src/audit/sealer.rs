//! The sealer: a signed, hash-chained checkpoint for every tenant whose tree grew.
//!
//! For one tenant ([`Sealer::seal_tenant`]), in one transaction:
//!
//! 1. the last checkpoint (`audit_checkpoints`) and the tree's current size (`audit_trees`, as
//!    committed by the sequencer);
//! 2. the root at the new size and the consistency proof from the last checkpoint's size, each
//!    from O(log n) stored nodes;
//! 3. [`decide_seal`]: refuses a tree that did not grow, shrank, forks the signed one, or is not
//!    shown to extend it ([`domain::audit::check_seal`]); signs the C2SP checkpoint with the
//!    audit key passed in (key name = origin `<trust-domain>/audit/<tenant>`);
//! 4. `audit.checkpoint.sealed` appended to `audit/<tenant>` at the exact next version (two sealers
//!    racing: one wins, the other retries from a fresh read and finds nothing to seal), carrying
//!    the SHA-256 of the previous signed note, projected into `audit_checkpoints`.
//!
//! The sealed event is itself an event of the tenant: the sequencer gives it a later leaf, so
//! each checkpoint is covered by the next one. A tree that grew by that one leaf and nothing
//! else is [`SealOutcome::Unchanged`] (`projections::audit::idle`): an idle deployment signs no
//! checkpoint per interval (issue 22).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::audit::checkpoint::audit_origin;
use domain::audit::tree::{consistency_plan, root_plan};
use domain::audit::{
    decide_seal, needs_seal, AuditSigner, Hash, SealFailure, SealState, Sealed, Sealing,
    SignedHead, TreeHead, EMPTY_ROOT,
};
use domain::decision::Refused;
use events::schema::AuditCheckpointSealed;
use events::store::{EventStore, ExpectedVersion, StoreTx};
use events::NewEvent;
use projections::audit::{read, AuditCheckpoints, ReadFrom};
use ring::rand::SystemRandom;

use super::error::AuditError;
use super::nodes;
use crate::clock::Clock;
use crate::run::{append_and_project, At, Command, Decided};
use rand_core::CryptoRngCore;

/// The stream holding a tenant's `audit.checkpoint.sealed` events.
pub fn checkpoint_stream(tenant_id: &str) -> String {
    format!("audit/{tenant_id}")
}

/// How often the sealer runs by default: hourly.
pub const DEFAULT_SEAL_INTERVAL: Duration = Duration::from_secs(3600);

/// The sealer's configuration.
#[derive(Clone, Debug)]
pub struct SealerOptions {
    /// The trust domain naming every tenant's log (`<trust-domain>/audit/<tenant>`).
    pub trust_domain: String,
    /// How often [`Sealer::run`] seals every grown tenant.
    pub interval: Duration,
}

impl SealerOptions {
    pub fn new(trust_domain: impl Into<String>) -> Self {
        SealerOptions {
            trust_domain: trust_domain.into(),
            interval: DEFAULT_SEAL_INTERVAL,
        }
    }
}

/// What sealing one tenant did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealOutcome {
    /// A checkpoint was signed and recorded.
    Sealed {
        tenant: String,
        seq: u64,
        size: u64,
        root: Hash,
        position: i64,
    },
    /// The tree has not grown since the last checkpoint.
    Unchanged { tenant: String, size: u64 },
}

/// The sealer.
pub struct Sealer {
    store: EventStore,
    signer: Arc<AuditSigner>,
    clock: Arc<dyn Clock>,
    options: SealerOptions,
    rng: SystemRandom,
}

impl Sealer {
    pub fn new(
        store: EventStore,
        signer: Arc<AuditSigner>,
        clock: Arc<dyn Clock>,
        options: SealerOptions,
    ) -> Self {
        Sealer {
            store,
            signer,
            clock,
            options,
            rng: SystemRandom::new(),
        }
    }

    /// Seals one tenant (see the module doc).
    pub async fn seal_tenant(&self, tenant: &str) -> Result<SealOutcome, AuditError> {
        let origin = audit_origin(&self.options.trust_domain, tenant).map_err(|source| {
            AuditError::Checkpoint {
                tenant: tenant.to_string(),
                source,
            }
        })?;
        let verifier_key = self.signer.public_key().to_verifier_key();
        let seal = Seal {
            sealing: Sealing {
                tenant,
                origin: &origin,
                verifier_key: &verifier_key,
                signer: &self.signer,
                rng: &self.rng,
            },
            position: Mutex::new(0),
        };
        let sealed = crate::run::run(&self.store, self.clock.as_ref(), &seal).await?;
        let tenant = tenant.to_string();
        Ok(match sealed {
            Sealed::Unchanged { size } => SealOutcome::Unchanged { tenant, size },
            Sealed::Sealed { seq, head } => SealOutcome::Sealed {
                tenant,
                seq,
                size: head.size,
                root: head.root,
                position: *seal.position.lock().unwrap_or_else(|p| p.into_inner()),
            },
        })
    }

    /// Seals every tenant whose tree grew since its last checkpoint. One tenant's failure does
    /// not stop the others; each result is returned.
    pub async fn seal_all(&self) -> Result<Vec<Result<SealOutcome, AuditError>>, AuditError> {
        let tenants = read::grown_tenants(&mut ReadFrom::Store(&self.store)).await?;
        let mut out = Vec::with_capacity(tenants.len());
        for tenant in tenants {
            out.push(self.seal_tenant(&tenant).await);
        }
        Ok(out)
    }

    /// Seals every grown tenant each [`SealerOptions::interval`], and whenever `now` is notified
    /// (on demand), until `shutdown` turns true or its sender is dropped. Per-tenant failures are
    /// handed to `report` and do not stop the loop.
    pub async fn run(
        self,
        now: Arc<tokio::sync::Notify>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        mut report: impl FnMut(Result<SealOutcome, AuditError>) + Send,
    ) -> Result<(), AuditError> {
        let mut ticker = tokio::time::interval(self.options.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                r = shutdown.changed() => {
                    if r.is_err() || *shutdown.borrow() { return Ok(()) }
                    continue;
                }
                _ = ticker.tick() => {}
                _ = now.notified() => {}
            }
            for result in self.seal_all().await? {
                report(result);
            }
        }
    }
}

/// One tenant's seal, as the runner drives it. `position` notes where the sealed event went
/// (what [`SealOutcome::Sealed`] reports).
struct Seal<'a> {
    sealing: Sealing<'a>,
    position: Mutex<i64>,
}

#[async_trait::async_trait]
impl Command for Seal<'_> {
    type State = SealState;
    type Event = AuditCheckpointSealed;
    type Outcome = Sealed;
    type Answer = Sealed;
    type Error = AuditError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<SealState, AuditError> {
        let tenant = self.sealing.tenant;
        let mut src = ReadFrom::Tx(tx);
        let last = read::last_checkpoint(&mut src, tenant)
            .await?
            .map(|l| SignedHead {
                seq: l.seq,
                head: TreeHead {
                    size: l.size,
                    root: l.root,
                },
                note_sha256: l.note_sha256,
            });
        let size = read::tree_size(&mut src, tenant).await?;
        let signed_size = last.map_or(0, |l| l.head.size);
        let grew_only_by_own_checkpoint = size == signed_size + 1
            && projections::audit::idle::grew_only_by_own_checkpoint(&mut src, tenant).await?;
        let mut state = SealState {
            last,
            size,
            grew_only_by_own_checkpoint,
            grown: None,
        };
        if !needs_seal(signed_size, size, grew_only_by_own_checkpoint) {
            return Ok(state);
        }
        let root = nodes::read_plan(&mut src, tenant, &root_plan(size))
            .await?
            .first()
            .copied()
            .unwrap_or(EMPTY_ROOT);
        let plan = consistency_plan(signed_size, size).map_err(|source| AuditError::Proof {
            tenant: tenant.to_string(),
            source,
        })?;
        let proof = nodes::read_plan(&mut src, tenant, &plan).await?;
        state.grown = Some((root, proof));
        Ok(state)
    }

    fn decide(&self, state: &SealState, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let tenant = self.sealing.tenant.to_string();
        decide_seal(&self.sealing, state).map_err(|failure| {
            Refused::from(match failure {
                SealFailure::Refused(source) => AuditError::Refused { tenant, source },
                SealFailure::Checkpoint(source) => AuditError::Checkpoint { tenant, source },
            })
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &SealState,
        events: Vec<AuditCheckpointSealed>,
        at: &At,
    ) -> Result<(), AuditError> {
        let tenant = self.sealing.tenant;
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::from_payload(events::envelope::new_event_id(), tenant, at.now_us, e))
            .collect();
        let expected = match state.last {
            None => ExpectedVersion::NoStream,
            Some(last) => ExpectedVersion::Exact(last.seq),
        };
        let recorded = append_and_project(
            tx,
            &[&AuditCheckpoints],
            &checkpoint_stream(tenant),
            expected,
            &events,
        )
        .await?;
        *self.position.lock().unwrap_or_else(|p| p.into_inner()) =
            recorded.first().map_or(0, |e| e.position);
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: SealState,
        sealed: Sealed,
        _: &At,
    ) -> Result<Sealed, AuditError> {
        Ok(sealed)
    }
}
