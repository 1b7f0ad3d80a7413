//! The sealer: a signed, hash-chained checkpoint for every tenant whose tree grew.
//!
//! For one tenant ([`Sealer::seal_tenant`]), in one transaction:
//!
//! 1. the last checkpoint (`audit_checkpoints`) and the tree's current size (`audit_trees`, as
//!    committed by the sequencer);
//! 2. the root at the new size and the consistency proof from the last checkpoint's size, each
//!    from O(log n) stored nodes;
//! 3. [`check_seal`]: refuses a tree that did not grow, shrank, forks the signed one, or is not
//!    shown to extend it;
//! 4. the C2SP checkpoint signed with the audit key (key name = origin
//!    `<trust-domain>/audit/<tenant>`);
//! 5. `audit.checkpoint.sealed` appended to `audit/<tenant>` at the exact next version (two sealers
//!    racing: one wins, the other retries from a fresh read and finds nothing to seal), carrying
//!    the SHA-256 of the previous signed note, projected into `audit_checkpoints`.
//!
//! The sealed event is itself an event of the tenant: the sequencer gives it a later leaf, so
//! each checkpoint is covered by the next one. A tree that grew by that one leaf and nothing
//! else is [`SealOutcome::Unchanged`] (`projections::audit::idle`): an idle deployment signs no
//! checkpoint per interval (issue 22).

use std::sync::Arc;
use std::time::Duration;

use domain::audit::checkpoint::audit_origin;
use domain::audit::tree::{consistency_plan, root_plan};
use domain::audit::{check_seal, AuditSigner, Checkpoint, Hash, TreeHead, EMPTY_ROOT};
use events::schema::AuditCheckpointSealed;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::audit::{read, AuditCheckpoints, ReadFrom};
use ring::rand::SystemRandom;

use super::error::AuditError;
use super::nodes;
use crate::clock::Clock;
use crate::run::{append_and_project, AsConflict, RunError, MAX_ATTEMPTS};

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
        // A retry loop of its own rather than `in_transaction`: an async closure's future is not
        // provably `Send`, and the sealer runs in a spawned task.
        let mut last_conflict = None;
        for _ in 0..MAX_ATTEMPTS {
            let mut tx = self.store.begin().await?;
            match self.seal_in(&mut tx, tenant, &origin, &verifier_key).await {
                Ok(outcome) => {
                    tx.commit().await?;
                    return Ok(outcome);
                }
                Err(e) => {
                    let _ = tx.rollback().await;
                    match e.into_conflict() {
                        Ok(conflict) => last_conflict = Some(conflict),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(AuditError::Run(RunError::TooManyConflicts {
            attempts: MAX_ATTEMPTS,
            last: last_conflict.unwrap_or(events::store::StoreError::EmptyAppend),
        }))
    }

    async fn seal_in(
        &self,
        tx: &mut StoreTx,
        tenant: &str,
        origin: &str,
        verifier_key: &str,
    ) -> Result<SealOutcome, AuditError> {
        {
            let mut src = ReadFrom::Tx(tx);
            let last = read::last_checkpoint(&mut src, tenant).await?;
            let size = read::tree_size(&mut src, tenant).await?;
            let (prev_size, prev_seq) = last.as_ref().map_or((0, 0), |l| (l.size, l.seq));
            // Grown only by the last checkpoint's own event (an idle tenant): nothing new to
            // vouch for; that leaf is covered by the next checkpoint, once anything else happens.
            if size <= prev_size
                || (size == prev_size + 1
                    && projections::audit::idle::grew_only_by_own_checkpoint(&mut src, tenant)
                        .await?)
            {
                return Ok(SealOutcome::Unchanged {
                    tenant: tenant.to_string(),
                    size: prev_size,
                });
            }
            let root = nodes::read_plan(&mut src, tenant, &root_plan(size))
                .await?
                .first()
                .copied()
                .unwrap_or(EMPTY_ROOT);
            let plan = consistency_plan(prev_size, size).map_err(|source| AuditError::Proof {
                tenant: tenant.to_string(),
                source,
            })?;
            let proof = nodes::read_plan(&mut src, tenant, &plan).await?;
            let previous = last.as_ref().map(|l| TreeHead {
                size: l.size,
                root: l.root,
            });
            let head =
                check_seal(previous, TreeHead { size, root }, &proof).map_err(|source| {
                    AuditError::Refused {
                        tenant: tenant.to_string(),
                        source,
                    }
                })?;
            let checkpoint = Checkpoint {
                origin: origin.to_string(),
                size: head.size,
                root: head.root,
            };
            let note = checkpoint.sign(&self.signer, &self.rng).map_err(|source| {
                AuditError::Checkpoint {
                    tenant: tenant.to_string(),
                    source,
                }
            })?;
            let payload = AuditCheckpointSealed {
                tenant_id: tenant.to_string(),
                tree_size: head.size,
                root_hash: head.root.to_vec(),
                signed_note: note.into_bytes(),
                previous_checkpoint_sha256: last
                    .as_ref()
                    .map_or([0u8; 32], |l| l.note_sha256)
                    .to_vec(),
                origin: origin.to_string(),
                verifier_key: verifier_key.to_string(),
                consistency_proof: proof.iter().map(|h| h.to_vec()).collect(),
            };
            let event = NewEvent::from_payload(
                events::envelope::new_event_id(),
                tenant,
                self.clock.now_us(),
                &payload,
            );
            let expected = if prev_seq == 0 {
                ExpectedVersion::NoStream
            } else {
                ExpectedVersion::Exact(prev_seq)
            };
            let recorded = append_and_project(
                tx,
                &[&AuditCheckpoints],
                &checkpoint_stream(tenant),
                expected,
                &[event],
            )
            .await?;
            let position = recorded.first().map_or(0, |e| e.position);
            Ok(SealOutcome::Sealed {
                tenant: tenant.to_string(),
                seq: prev_seq + 1,
                size: head.size,
                root: head.root,
                position,
            })
        }
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
