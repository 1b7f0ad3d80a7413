//! Renewals: a proof of possession by the current key over the new CSR, checked against the
//! stored certificate, the clock window, the single-use record, the certificate's successors
//! and the node's renewals of the last hour; or the refusal recorded. A superseded certificate
//! renewing is a clone: its `security.renew.cloned` and the revocation of every certificate of
//! the node are appended with the refusal (the events `domain::identity::decide_renew` refuses
//! it with), unless its
//! successor certifies the CSR's key: the same renewal retried after its answer was lost, answered
//! again with that certificate and nothing appended ([`domain::identity::answer_again`]).

use std::sync::Arc;

use domain::identity::{
    decide_renew, prepare_renew, renew_refusal_tenant, renewal_retry_at, DecideError, Decision,
    IdentityEvent, JoinContext, PreparedRenew, Refused, RenewCommand, RenewInput, RenewRefusal,
    RenewState, Renewed, RENEWALS_PER_HOUR, RENEWAL_WINDOW, RENEW_POP_ATTESTOR,
};
use domain::pki::{KeySet, Serial};
use events::schema::RenewRefused;
use events::store::{EventStore, StoreTx};
use projections::identity::read;
use rand_core::CryptoRngCore;

use super::answers::RenewAnswer;
use super::append::append_decided;
use super::config::IdentityConfig;
use super::context::{check_trust_domain, context, digest_vec};
use super::error::{IdentityError, RENEW_REFUSED};
use super::{refusals, rows};
use crate::run::{At, Command, Decided};
use crate::Clock;

/// Renewals: new certificates for admitted nodes. Holds the key set (the node CA signs).
#[derive(Clone)]
pub struct Renewals {
    store: EventStore,
    keys: Arc<KeySet>,
    clock: Arc<dyn Clock>,
    config: IdentityConfig,
}

impl Renewals {
    #[allow(clippy::too_many_arguments)]
    async fn record_renew_refusal(
        &self,
        tx: &mut StoreTx,
        refusal: RenewRefusal,
        tenant: &str,
        node_id: &str,
        serial: &str,
        csr_sha256: Option<[u8; 32]>,
        now_us: i64,
    ) -> Result<(), IdentityError> {
        let reason = refusal.reason();
        let payload = RenewRefused {
            refusal: reason.clone(),
            node_id: node_id.into(),
            serial: serial.into(),
            csr_sha256: digest_vec(csr_sha256),
            window_start_us: domain::identity::window_start(now_us),
        };
        refusals::record(tx, "renew", &reason, tenant, &payload, now_us, &self.config).await?;
        Ok(())
    }

    /// A renewal service over `store` with the loaded key set. Refuses a config whose trust
    /// domain is not the key set's.
    pub fn new(
        store: EventStore,
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        config: IdentityConfig,
    ) -> Result<Self, IdentityError> {
        check_trust_domain(&keys, &config)?;
        Ok(Renewals {
            store,
            keys,
            clock,
            config,
        })
    }

    /// Renew: a proof of possession by the current key over the new CSR. Answers the new chain,
    /// or `ACCESS_DENIED: Renew refused`.
    pub async fn renew(&self, input: &RenewInput) -> Result<RenewAnswer, IdentityError> {
        let ctx = context(&self.keys, &self.config);
        let now_us = self.clock.now_us();
        let root = self.config.root_tenant.clone();
        let prepared = match prepare_renew(&ctx, input) {
            Ok(p) => p,
            Err((refusal, ids, csr_sha)) => {
                let (node_id, serial) = ids.unwrap_or_default();
                let early = RefusedEarly {
                    service: self,
                    refusal,
                    tenant: &root,
                    node_id: &node_id,
                    serial: &serial,
                    csr_sha,
                    now_us,
                };
                crate::run::run(&self.store, self.clock.as_ref(), &early).await?;
                return Err(IdentityError::AccessDenied(RENEW_REFUSED));
            }
        };
        let node_id = prepared.node_id().to_owned();
        let csr_sha = *prepared.csr.sha256();
        let renewal = Renewal {
            service: self,
            ctx: &ctx,
            node_id: &node_id,
            serial: prepared.serial_hex(),
            prepared,
        };
        // The time the renewal was decided at: what the answer and a retry's wait are told.
        let (outcome, now_us) = crate::run::run(&self.store, self.clock.as_ref(), &renewal).await?;
        match outcome {
            Outcome::Refused => Err(IdentityError::AccessDenied(RENEW_REFUSED)),
            Outcome::RateLimited { retry_at_us } => Err(IdentityError::RenewalsExhausted {
                node_id,
                per_hour: RENEWALS_PER_HOUR,
                retry_after_ms: u64::try_from(retry_at_us.saturating_sub(now_us) / 1000)
                    .unwrap_or(0),
            }),
            Outcome::Renewed(renewed) => Ok(RenewAnswer {
                csr_sha256: csr_sha,
                trust_domain: self.keys.trust_domain.to_string(),
                node_id: renewed.node_id,
                site_id: renewed.site_id,
                role: renewed.role,
                identity_generation: renewed.identity_generation,
                certificate_chain: vec![
                    renewed.certificate_der,
                    self.keys.node_ca.cert_der().to_vec(),
                ],
                trust_roots: vec![self.keys.root_ca.cert_der().to_vec()],
                not_after_us: renewed.not_after_us,
                server_time_us: now_us,
                allowed_kinds: renewed.allowed_kinds,
            }),
        }
    }

    /// Records the renewals an edge refuses at the handshake, with this service's store, clock
    /// and refusal budget.
    pub fn edge_refusals(&self) -> super::EdgeRefusals {
        super::EdgeRefusals::new(self.store.clone(), self.clock.clone(), self.config.clone())
    }

    /// The key set (the edge signs the answer with its JoinService signing key).
    pub fn keys(&self) -> &Arc<KeySet> {
        &self.keys
    }
}

/// What the renewal transaction decided.
enum Outcome {
    Renewed(Renewed),
    Refused,
    RateLimited { retry_at_us: i64 },
}

/// One renewal, as the runner drives it.
struct Renewal<'a> {
    service: &'a Renewals,
    ctx: &'a JoinContext<'a>,
    prepared: PreparedRenew,
    node_id: &'a str,
    /// The presented leaf's serial.
    serial: String,
}

/// What a renewal reads: the domain's state and the node stream's version.
struct Loaded {
    state: RenewState,
    version: Option<i64>,
}

/// What the decision told the answer step: renewed, or refused (recorded there).
enum Verdict {
    Renewed(Renewed),
    Refused {
        refusal: RenewRefusal,
        tenant: String,
    },
}

#[async_trait::async_trait]
impl Command for Renewal<'_> {
    type State = Loaded;
    type Event = IdentityEvent;
    type Outcome = Verdict;
    type Answer = (Outcome, i64);
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<Loaded, IdentityError> {
        let node_id = self.node_id;
        let node_row = read::node_by_id(tx, node_id).await?;
        let cert_row = read::cert_by_serial(tx, &self.serial).await?;
        let successor_serial = match cert_row.as_ref().filter(|c| c.node_id == node_id) {
            Some(c) => {
                read::successor_of(tx, node_id, c.identity_generation, c.issued_position).await?
            }
            None => None,
        };
        let successor = match successor_serial {
            Some(s) => read::cert_by_serial(tx, &s).await?,
            None => None,
        };
        // A superseded leaf may be a clone, whose refusal revokes every open certificate.
        let unrevoked_serials = match (&node_row, &successor) {
            (Some(_), Some(_)) => read::unrevoked_serials_of_node(tx, node_id).await?,
            _ => Vec::new(),
        };
        let since = at
            .now_us
            .saturating_sub(RENEWAL_WINDOW.whole_microseconds() as i64);
        let state = RenewState {
            node: node_row.as_ref().map(rows::node_state).transpose()?,
            cert: cert_row.as_ref().map(rows::cert_state).transpose()?,
            proof_used: read::attestation_used_at(
                tx,
                RENEW_POP_ATTESTOR,
                &self.prepared.replay_key,
                at.now_us,
            )
            .await?,
            successor: successor.as_ref().map(rows::cert_state).transpose()?,
            recent_renewals_us: read::renewals_since(tx, node_id, since).await?,
            unrevoked_serials,
        };
        Ok(Loaded {
            state,
            version: node_row.as_ref().map(|n| n.version),
        })
    }

    fn decide(&self, loaded: &Loaded, at: &At, rng: &mut dyn CryptoRngCore) -> Decided<Self> {
        let cmd = RenewCommand {
            prepared: self.prepared.clone(),
            serial: Serial::from_rng(rng),
        };
        match decide_renew(self.ctx, &cmd, &loaded.state, at.now) {
            Ok(decision) => Ok(decision.map_outcome(Verdict::Renewed)),
            // The refusal is an outcome: its events (a clone's) are appended and the refusal
            // recorded in the answer step, all in this transaction.
            Err(DecideError::Refused(Refused { reason, events })) => {
                let tenant = renew_refusal_tenant(reason, loaded.state.node.as_ref())
                    .map_or_else(|| self.service.config.root_tenant.clone(), str::to_owned);
                Ok(Decision {
                    events,
                    outcome: Verdict::Refused {
                        refusal: reason,
                        tenant,
                    },
                })
            }
            Err(DecideError::Failed(why)) => Err(IdentityError::Failed(why).into()),
        }
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        loaded: &Loaded,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), IdentityError> {
        // A renewal's events and a clone's are the node's, written in its tenant.
        let tenant = match &loaded.state.node {
            Some(node) => node.tenant_id.clone(),
            None => self.service.config.root_tenant.clone(),
        };
        let versions = vec![(format!("node/{}", self.node_id), loaded.version)];
        append_decided(tx, events, &tenant, at.now_us, &versions).await
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        loaded: Loaded,
        decided: Verdict,
        at: &At,
    ) -> Result<(Outcome, i64), IdentityError> {
        let (refusal, tenant) = match decided {
            Verdict::Renewed(renewed) => return Ok((Outcome::Renewed(renewed), at.now_us)),
            Verdict::Refused { refusal, tenant } => (refusal, tenant),
        };
        let csr_sha = Some(*self.prepared.csr.sha256());
        self.service
            .record_renew_refusal(
                tx,
                refusal,
                &tenant,
                self.node_id,
                &self.serial,
                csr_sha,
                at.now_us,
            )
            .await?;
        let outcome = match refusal {
            RenewRefusal::RateLimited => Outcome::RateLimited {
                retry_at_us: renewal_retry_at(&loaded.state.recent_renewals_us, at.now_us)
                    .unwrap_or(at.now_us),
            },
            _ => Outcome::Refused,
        };
        Ok((outcome, at.now_us))
    }
}

/// A renewal refused before anything was loaded (prepare_renew's refusal), as the runner drives
/// it: nothing to decide beyond the refusal, which the answer step records under the bound.
struct RefusedEarly<'a> {
    service: &'a Renewals,
    refusal: RenewRefusal,
    tenant: &'a str,
    node_id: &'a str,
    serial: &'a str,
    csr_sha: Option<[u8; 32]>,
    /// The time the refusal was decided at.
    now_us: i64,
}

#[async_trait::async_trait]
impl Command for RefusedEarly<'_> {
    type State = ();
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = ();
    type Error = IdentityError;

    async fn load(&self, _: &mut StoreTx, _: &At) -> Result<(), IdentityError> {
        Ok(())
    }

    fn decide(&self, _: &(), _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        Ok(Decision::unchanged(()))
    }

    async fn append(
        &self,
        _: &mut StoreTx,
        _: &(),
        _: Vec<IdentityEvent>,
        _: &At,
    ) -> Result<(), IdentityError> {
        Ok(())
    }

    async fn answer(&self, tx: &mut StoreTx, _: (), _: (), _: &At) -> Result<(), IdentityError> {
        self.service
            .record_renew_refusal(
                tx,
                self.refusal,
                self.tenant,
                self.node_id,
                self.serial,
                self.csr_sha,
                self.now_us,
            )
            .await
    }
}
