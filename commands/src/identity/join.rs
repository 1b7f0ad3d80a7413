//! Joins, for every attestor (spec 001 "How a join reaches your attestor"): the thin generic
//! shell over [`AttestorRegistry`].
//!
//! 1. The registry finds the attestor (an unknown id is [`IdentityError::UnsupportedAttestor`],
//!    spending nothing); a role it does not list is `<id>:wrong-role`, a self-report over its
//!    bounds `join:claim-too-long` / `-not-printable` / `-too-many`, a CSR that does not
//!    verify `<id>:bad-csr`, a sealed token that does not open for the CSR
//!    `<id>:token-does-not-open`, all refused before any transaction reads.
//! 2. An in-process attestor plans (names its [`FactKey`]s, or refuses); a remote one is called
//!    here, before the transaction (it never sees the database).
//! 3. In one transaction: [`load_facts`] for the plan, verify, then the admission step's facts
//!    (the token's row version, the reclaimed node and its serials, bindings, uses, the pool,
//!    the join request), [`decide_admission`], and the append at the versions read. A refusal
//!    is recorded (`security.join.refused`, in the tenant the evidence authenticated, else the
//!    root tenant) and answered `PERMISSION_DENIED: Join refused`.

use std::sync::Arc;

use domain::attest::{
    check_remote_verdict, decide_admission, reserved_tenants, Admission, AdmissionCommand,
    AdmissionFacts, AttestRequest, AttestationResult, AttestorRefusal, BindingState, BoxedPlan,
    Entropy, FactKey, Facts, Verdict,
};
use domain::identity::{
    claims_digests, sha256, unix_us, ClaimsDigests, DecideError, Decision, JoinContext, JoinInput,
};
use domain::pki::{KeySet, NodeId, NodeRole, SealedToken, Serial, TokenSecret, VerifiedCsr};
use events::schema::JoinRefused;
use events::store::{EventStore, StoreTx};
use projections::identity::read;
use time::OffsetDateTime;

use super::attestors::{
    AttestorRegistry, RegisteredAttestor, RemoteAttestor, RemoteAttestorError, RemoteVerifyRequest,
};
use crate::attest::{read as attest_read, rows as attest_rows};

use super::answer_again::answered_again;
use super::answers::{JoinAnswer, JoinOutcome, JoinRequest};
use super::append::{append_decided, fresh_id};
use super::config::IdentityConfig;
use super::context::{check_trust_domain, context, digest_vec, role_and_report};
use super::error::{IdentityError, JOIN_REFUSED};
use super::{refusals, rows};
use crate::Clock;

/// Joins: the JoinService's admission of new nodes through the registered attestors. Holds the
/// key set (the node CA signs the certificate, the encryption key opens the sealed token).
#[derive(Clone)]
pub struct Joins {
    store: EventStore,
    keys: Arc<KeySet>,
    clock: Arc<dyn Clock>,
    config: IdentityConfig,
    attestors: AttestorRegistry,
}

/// The streams a decision read, with the versions it read them at.
type Versions = Vec<(String, Option<i64>)>;

/// What the transaction decided.
enum Step {
    Refused,
    Challenge(domain::attest::Challenge),
    Admitted(Admission),
}

/// How the verdict is reached inside the transaction.
enum Source<'a> {
    /// An in-process attestor's plan: the keys it named and its verify, the plan bound.
    InProcess(BoxedPlan<'a>),
    /// A remote attestor's verdict, reached before the transaction.
    Remote(Verdict),
}

/// Loads the facts `keys` name (a key naming nothing stored is simply absent), with the versions
/// of the token and node streams read.
pub(crate) async fn load_facts(
    tx: &mut StoreTx,
    keys: &[FactKey],
) -> Result<(Facts, Versions), IdentityError> {
    let mut facts = Facts::default();
    let mut versions = Versions::new();
    for key in keys {
        match key {
            FactKey::TokenByHash(hash) => {
                if let Some(row) = read::token_by_hash(tx, hash.as_bytes()).await? {
                    versions.push((format!("token/{}", row.token_id), Some(row.version)));
                    facts.tokens.push(rows::token_state(&row)?);
                }
            }
            FactKey::TokenById(id) => {
                if let Some(row) = read::token_by_id(tx, id).await? {
                    versions.push((format!("token/{}", row.token_id), Some(row.version)));
                    facts.tokens.push(rows::token_state(&row)?);
                }
            }
            FactKey::Node(id) => {
                if let Some(row) = read::node_by_id(tx, id).await? {
                    versions.push((format!("node/{}", row.node_id), Some(row.version)));
                    facts
                        .nodes
                        .insert(row.node_id.clone(), rows::node_state(&row)?);
                }
            }
            FactKey::Certificate(serial) => {
                if let Some(row) = read::cert_by_serial(tx, serial).await? {
                    facts
                        .certificates
                        .insert(row.serial.clone(), rows::cert_state(&row)?);
                }
            }
            FactKey::Use { attestor, subject } => {
                if read::attestation_used(tx, attestor, subject).await? {
                    facts.uses.insert((attestor.clone(), *subject));
                }
            }
            FactKey::Binding(subject) => {
                if let Some(b) = binding(tx, subject).await? {
                    facts.bindings.insert(*subject, b);
                }
            }
            FactKey::Entry { list, key } => {
                let row = crate::attest::read::attestor_entry_active(tx, list, key).await?;
                if let Some(row) = row {
                    let entry = crate::attest::rows::entry_state(&row)?;
                    facts.entries.insert((list.clone(), key.clone()), entry);
                }
            }
            FactKey::SiteLease(site) => {
                if let Some(row) = crate::site::read::site_lease(tx, site).await? {
                    let lease = crate::site::rows::lease_state(&row)?;
                    facts.site_leases.insert(site.clone(), lease.as_fact());
                }
            }
            FactKey::BootEntry(id) => {
                if let Some(row) = crate::site::read::boot_entry(tx, id).await? {
                    facts
                        .boot_entries
                        .insert(id.clone(), crate::site::rows::boot_entry_state(&row));
                }
            }
        }
    }
    // The node a loaded token was minted for (role provisioned, `for_node_id`): no plan can name
    // it, since it is only known once the token row is read, so it comes with the token.
    // Likewise the node a loaded binding names (a TPM's EK reclaims the node it is bound to).
    let mut targets: Vec<String> = facts
        .tokens
        .iter()
        .filter_map(|t| t.for_node_id.clone())
        .chain(facts.bindings.values().map(|b| b.node_id.clone()))
        .filter(|id| !facts.nodes.contains_key(id))
        .collect();
    targets.sort();
    targets.dedup();
    for id in targets {
        if let Some(row) = read::node_by_id(tx, &id).await? {
            versions.push((format!("node/{}", row.node_id), Some(row.version)));
            facts
                .nodes
                .insert(row.node_id.clone(), rows::node_state(&row)?);
        }
    }
    Ok((facts, versions))
}

async fn binding(
    tx: &mut StoreTx,
    subject: &[u8; 32],
) -> Result<Option<BindingState>, IdentityError> {
    Ok(read::binding(tx, subject).await?.map(|row| BindingState {
        attestor: row.attestor,
        node_id: row.node_id,
    }))
}

/// Loads what the admission step reads for `result`, adding the versions it read to `versions`.
/// `loaded`: the keys an in-process attestor's plan named and the facts loaded for them; `None`
/// for a remote attestor's result, whose tenant is then looked up
/// ([`AdmissionFacts::tenant_known`]: a site or a pool of it).
async fn load_admission_facts(
    tx: &mut StoreTx,
    attestor: &str,
    result: &AttestationResult,
    loaded: Option<(&[FactKey], &Facts)>,
    versions: &mut Versions,
) -> Result<AdmissionFacts, IdentityError> {
    let mut facts = AdmissionFacts::default();
    if let Some(token) = &result.token {
        let stream = format!("token/{}", token.token_id);
        if !versions.iter().any(|(s, _)| *s == stream) {
            let row = read::token_by_id(tx, &token.token_id).await?;
            versions.push((stream, row.map(|r| r.version)));
        }
    }
    if let Some(id) = &result.reclaim_node_id {
        if let Some(row) = read::node_by_id(tx, id).await? {
            let stream = format!("node/{}", row.node_id);
            versions.retain(|(s, _)| *s != stream);
            versions.push((stream, Some(row.version)));
            facts.reclaimed_unrevoked_serials =
                read::unrevoked_serials_of_node(tx, &row.node_id).await?;
            facts.reclaimed = Some(rows::node_state(&row)?);
        }
    }
    for subject in &result.bind {
        if let Some(b) = binding(tx, subject).await? {
            facts.bindings.insert(*subject, b);
        }
    }
    // A concurrent join spending the same subject that commits first makes this one's insert
    // into `attestation_uses` a unique violation: the transaction retries and reads the use here.
    // A use the attestor's plan already asked for, in this transaction, is not read twice.
    for u in &result.single_use {
        let asked = loaded.filter(|(keys, _)| {
            keys.iter().any(|k| {
                matches!(k, FactKey::Use { attestor, subject }
                    if *attestor == u.attestor && *subject == u.subject)
            })
        });
        let used = match asked {
            Some((_, facts)) => facts.used(&u.attestor, &u.subject),
            None => read::attestation_used(tx, &u.attestor, &u.subject).await?,
        };
        if used {
            facts.uses.insert((u.attestor.clone(), u.subject));
        }
    }
    // A remote attestor's tenant (it planned nothing): no operator record it read vouches for it.
    if loaded.is_none() {
        facts.tenant_known = Some(attest_read::tenant_known(tx, &result.tenant_id).await?);
    }
    facts.pool = attest_read::pool(tx, &result.pool_id)
        .await?
        .as_ref()
        .map(attest_rows::pool_state);
    if let Some(ask) = &result.approval {
        facts.join_request = attest_read::latest_join_request(tx, attestor, &ask.subject)
            .await?
            .as_ref()
            .map(attest_rows::join_request_state)
            .transpose()?;
        if let Some(r) = &facts.join_request {
            versions.push((format!("join-request/{}", r.request_id), Some(r.version)));
        }
    }
    Ok(facts)
}

/// The entropy an attestor may draw from this round (a challenge's secret, a seal's nonce):
/// fresh bytes from the OS, drawn here, in the shell.
fn fresh_entropy() -> Result<Entropy, IdentityError> {
    use ring::rand::SecureRandom as _;
    let mut seed = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| IdentityError::Failed("the system random generator failed".into()))?;
    Ok(Entropy::from_seed(seed))
}

/// What a remote attestor is asked of `input`: never the database, only the request.
fn remote_ask(
    id: &str,
    role: NodeRole,
    csr_sha: [u8; 32],
    input: &JoinInput,
) -> RemoteVerifyRequest {
    RemoteVerifyRequest {
        attestor: id.to_owned(),
        role,
        csr_sha256: csr_sha,
        claims: input.claims.clone(),
        evidence: input.attestation.clone(),
    }
}

/// A remote attestor's verdict on the request, reached before the join's transaction (it is
/// asked only the request, never the database), held at the join's time `now_us` to what the
/// built-ins are held to ([`check_remote_verdict`]: no token, single-use records and challenges
/// that expire after now and not too far, no reserved tenant; issue 40 item 9). A verdict that
/// breaks it is an invalid answer (UNAVAILABLE, nothing recorded).
async fn remote_verdict(
    remote: &dyn RemoteAttestor,
    ask: &RemoteVerifyRequest,
    now_us: i64,
    root_tenant: &str,
) -> Result<Verdict, IdentityError> {
    let verdict = remote
        .verify(ask)
        .await
        .map_err(IdentityError::AttestorUnavailable)?;
    check_remote_verdict(
        &ask.attestor,
        verdict,
        now_us,
        &reserved_tenants(root_tenant),
    )
    .map_err(|why| {
        IdentityError::AttestorUnavailable(RemoteAttestorError::InvalidAnswer {
            attestor: ask.attestor.clone(),
            why: why.to_string(),
        })
    })
}

impl Joins {
    /// Records `refusal` (the caller answers ACCESS_DENIED): in its tenant when the evidence
    /// authenticated one, otherwise in the root tenant.
    async fn record_refusal(
        &self,
        tx: &mut StoreTx,
        attestor: &str,
        refusal: &AttestorRefusal,
        csr_sha256: Option<[u8; 32]>,
        digests: &ClaimsDigests,
        now_us: i64,
    ) -> Result<(), IdentityError> {
        let reason = refusal.text();
        let tenant = refusal
            .tenant_id
            .clone()
            .unwrap_or_else(|| self.config.root_tenant.clone());
        let payload = JoinRefused {
            refusal: reason.clone(),
            attestor: attestor.into(),
            token_id: refusal.token_id.clone().unwrap_or_default(),
            csr_sha256: digest_vec(csr_sha256),
            hardware_key_sha256: digest_vec(digests.hardware_key),
            window_start_us: domain::identity::window_start(now_us),
            node_id: refusal.node_id.clone().unwrap_or_default(),
        };
        refusals::record(tx, "join", &reason, &tenant, &payload, now_us, &self.config).await?;
        Ok(())
    }

    /// A refusal in the join's transaction, recorded; unless it names a single-use subject the
    /// join of this same request spent and that identity is still current (its answer was
    /// lost): then the identity already issued is answered again and nothing is appended.
    async fn refused(
        &self,
        tx: &mut StoreTx,
        attestor: &str,
        refusal: &AttestorRefusal,
        csr: &VerifiedCsr,
        digests: &ClaimsDigests,
        now: OffsetDateTime,
    ) -> Result<Step, IdentityError> {
        let td = &self.config.trust_domain;
        if let Some(joined) = answered_again(tx, td, attestor, refusal, csr, now).await? {
            return Ok(Step::Admitted(Admission::Joined(Box::new(joined))));
        }
        let csr_sha256 = Some(*csr.sha256());
        let now_us = unix_us(now);
        self.record_refusal(tx, attestor, refusal, csr_sha256, digests, now_us)
            .await?;
        Ok(Step::Refused)
    }

    /// A refusal decided before any transaction read: recorded in a transaction of its own
    /// (or counted without one when this process knows its minute is full).
    async fn refuse_early(
        &self,
        attestor: &str,
        refusal: AttestorRefusal,
        csr_sha256: Option<[u8; 32]>,
        digests: &ClaimsDigests,
        now_us: i64,
    ) -> Result<JoinOutcome, IdentityError> {
        let tenant = refusal
            .tenant_id
            .clone()
            .unwrap_or_else(|| self.config.root_tenant.clone());
        if !refusals::suppressed_without_store(
            &self.config,
            "join",
            &refusal.text(),
            &tenant,
            now_us,
        ) {
            crate::transaction!(&self.store, IdentityError, |tx| {
                self.record_refusal(tx, attestor, &refusal, csr_sha256, digests, now_us)
                    .await
            })?;
        }
        Err(IdentityError::AccessDenied(JOIN_REFUSED))
    }

    /// A join service over `store` with the loaded key set and the built-in attestors
    /// ([`AttestorRegistry::builtin_for`]). Refuses a config whose trust domain is not the key
    /// set's.
    pub fn new(
        store: EventStore,
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        config: IdentityConfig,
    ) -> Result<Self, IdentityError> {
        check_trust_domain(&keys, &config)?;
        let attestors = AttestorRegistry::builtin_for(&keys, &config);
        Ok(Joins {
            store,
            keys,
            clock,
            attestors,
            config,
        })
    }

    /// The same service running `attestors` instead.
    pub fn with_attestors(mut self, attestors: AttestorRegistry) -> Self {
        self.attestors = attestors;
        self
    }

    /// The attestors this service runs.
    pub fn attestors(&self) -> &AttestorRegistry {
        &self.attestors
    }

    /// Suppressed refusals this process holds, not written yet (the maintenance flush writes
    /// them once their minute is over).
    pub fn suppressed_in_memory(&self) -> u64 {
        self.config.refusal_budget.held()
    }

    /// The key set (the edge signs the JoinResponse with its JoinService signing key).
    pub fn keys(&self) -> &Arc<KeySet> {
        &self.keys
    }

    /// [`Joins::attest`] for callers that expect an admission: a deferral is
    /// [`IdentityError::Deferred`].
    pub async fn join(&self, request: &JoinRequest) -> Result<JoinAnswer, IdentityError> {
        match self.attest(request).await? {
            JoinOutcome::Joined(answer) => Ok(answer),
            other => Err(IdentityError::Deferred(Box::new(other))),
        }
    }

    /// Join through the attestor the request names. Answers the admitted node and its chain, or
    /// a deferral, each bound to the CSR's SHA-256 (the edge encodes and signs it); or
    /// `ACCESS_DENIED: Join refused`.
    pub async fn attest(&self, request: &JoinRequest) -> Result<JoinOutcome, IdentityError> {
        let entry = self
            .attestors
            .get(&request.attestor)
            .cloned()
            .ok_or_else(|| IdentityError::UnsupportedAttestor(request.attestor.clone()))?;
        let id = entry.id().to_owned();
        let input = &request.input;
        // The database's time (one clock for every replica), read once: the attestor's plan
        // and its verdict in the transaction below judge at the same instant.
        let at = crate::run::At::read_from(&self.store, self.clock.as_ref()).await?;
        let (now, now_us) = (at.now, at.now_us);
        let digests = claims_digests(&input.claims);
        let sent_sha = Some(sha256(&input.csr_der));

        let role = match role_and_report(&id, entry.roles(), input) {
            Ok(r) => r,
            Err(refusal) => {
                return self
                    .refuse_early(&id, refusal, sent_sha, &digests, now_us)
                    .await;
            }
        };
        let csr = match VerifiedCsr::verify(&input.csr_der) {
            Ok(c) => c,
            Err(_) => {
                let refusal = AttestorRefusal::new(&id, "bad-csr");
                return self
                    .refuse_early(&id, refusal, sent_sha, &digests, now_us)
                    .await;
            }
        };
        let csr_sha = *csr.sha256();
        let secret: Option<TokenSecret> = if input.sealed_token.is_empty() {
            None
        } else {
            let opened = SealedToken::from_bytes(&input.sealed_token)
                .ok()
                .and_then(|sealed| self.keys.join_encryption.open(&sealed, &csr_sha).ok());
            match opened {
                Some(s) => Some(s),
                None => {
                    let refusal = AttestorRefusal::new(&id, "token-does-not-open");
                    return self
                        .refuse_early(&id, refusal, Some(csr_sha), &digests, now_us)
                        .await;
                }
            }
        };
        let entropy = fresh_entropy()?;
        let attest_request = AttestRequest {
            role,
            csr: &csr,
            claims: &input.claims,
            digests: &digests,
            evidence: &input.attestation,
            token: secret.as_ref(),
            now,
            entropy: &entropy,
        };

        let source = match &entry {
            RegisteredAttestor::InProcess(attestor) => match attestor.plan_boxed(&attest_request) {
                Ok(plan) => Source::InProcess(plan),
                Err(refusal) => {
                    return self
                        .refuse_early(&id, refusal, Some(csr_sha), &digests, now_us)
                        .await;
                }
            },
            RegisteredAttestor::Remote(remote) => {
                let ask = remote_ask(&id, role, csr_sha, input);
                let root = &self.config.root_tenant;
                Source::Remote(remote_verdict(remote.as_ref(), &ask, now_us, root).await?)
            }
        };

        let ctx = context(&self.keys, &self.config);
        let step = crate::transaction!(&self.store, IdentityError, |tx| {
            let (verdict, planned, mut versions) = match &source {
                Source::InProcess(plan) => {
                    let (facts, versions) = load_facts(tx, &plan.facts).await?;
                    let verdict = plan.verify(&attest_request, &facts);
                    (verdict, Some((plan.facts.as_slice(), facts)), versions)
                }
                Source::Remote(verdict) => (verdict.clone(), None, Versions::new()),
            };
            let result = match verdict {
                Verdict::Refuse(refusal) => {
                    return self.refused(tx, &id, &refusal, &csr, &digests, now).await;
                }
                Verdict::Challenge(challenge) => return Ok(Step::Challenge(challenge)),
                Verdict::Admit(result) => result,
            };
            let loaded = planned.as_ref().map(|(keys, facts)| (*keys, facts));
            let facts = load_admission_facts(tx, &id, &result, loaded, &mut versions).await?;
            let new_node_id =
                NodeId::new(&fresh_id("node")).map_err(|e| IdentityError::Failed(e.to_string()))?;
            let serial = Serial::generate().map_err(|e| IdentityError::Failed(e.to_string()))?;
            let new_request_id = fresh_id("jr");
            let cmd = AdmissionCommand {
                attestor: &id,
                csr: &csr,
                claims: &input.claims,
                digests: &digests,
                report: &input.report,
                result: &result,
                new_node_id: &new_node_id,
                serial: &serial,
                new_request_id: &new_request_id,
            };
            self.admit(tx, &ctx, &cmd, &facts, &versions, now).await
        })?;

        self.answer(step, id, csr_sha, now_us)
    }

    /// The admission step on the loaded facts, in the join's transaction: its events appended,
    /// or its refusal recorded.
    async fn admit(
        &self,
        tx: &mut StoreTx,
        ctx: &JoinContext<'_>,
        cmd: &AdmissionCommand<'_>,
        facts: &AdmissionFacts,
        versions: &Versions,
        now: OffsetDateTime,
    ) -> Result<Step, IdentityError> {
        let now_us = unix_us(now);
        let decided = decide_admission(ctx, cmd, facts, now)
            .and_then(|decided| decided.sign(ctx.node_ca, cmd.csr, now));
        match decided {
            Ok(Decision { events, outcome }) => {
                if !events.is_empty() {
                    append_decided(tx, events, outcome.tenant_id(), now_us, versions).await?;
                }
                Ok(Step::Admitted(outcome))
            }
            Err(DecideError::Refused(refusal)) => {
                self.refused(tx, cmd.attestor, &refusal, cmd.csr, cmd.digests, now)
                    .await
            }
            Err(DecideError::Failed(why)) => Err(IdentityError::Failed(why)),
        }
    }

    /// What the transaction decided, as the join answers it (bound to the CSR's SHA-256).
    fn answer(
        &self,
        step: Step,
        id: String,
        csr_sha: [u8; 32],
        now_us: i64,
    ) -> Result<JoinOutcome, IdentityError> {
        let trust_domain = self.config.trust_domain.to_string();
        match step {
            Step::Refused => Err(IdentityError::AccessDenied(JOIN_REFUSED)),
            Step::Challenge(c) => Ok(JoinOutcome::Challenge {
                attestor: id,
                payload: c.payload,
                not_after_us: c.not_after_us,
                csr_sha256: csr_sha,
                trust_domain,
                server_time_us: now_us,
            }),
            Step::Admitted(Admission::Pending(p)) => Ok(JoinOutcome::Pending {
                request_id: p.request_id,
                retry_after_seconds: self.config.pending_retry_seconds,
                csr_sha256: p.csr_sha256,
                trust_domain,
                server_time_us: now_us,
            }),
            Step::Admitted(Admission::Joined(joined)) => Ok(JoinOutcome::Joined(JoinAnswer {
                csr_sha256: joined.csr_sha256,
                trust_domain,
                node_id: joined.node_id,
                site_id: joined.site_id,
                role: joined.role,
                identity_generation: joined.identity_generation,
                certificate_chain: vec![
                    joined.certificate_der,
                    self.keys.node_ca.cert_der().to_vec(),
                ],
                trust_roots: vec![self.keys.root_ca.cert_der().to_vec()],
                not_after_us: joined.not_after_us,
                server_time_us: now_us,
                allowed_kinds: joined.allowed_kinds,
            })),
        }
    }
}
