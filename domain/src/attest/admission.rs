//! The admission step (spec 001 "What a result means"): written once, run after whichever
//! attestor admitted a machine, so every attestor (built-in, custom, out of process) is held to
//! the same rules. Pure: the shell loads [`AdmissionFacts`] for the result in the join's
//! transaction and appends the [`Decision`] this answers.
//!
//! In this order:
//!
//! 0. a tenant no operator record vouches for (an out-of-process attestor's) must be one an
//!    operator created, a site or a pool of it ([`AdmissionFacts::tenant_known`]):
//!    `join:unknown-tenant`, recorded in the root tenant (issue 40 item 9);
//! 1. the pool's attestor policy ([`PoolState::admits`]): `join:pool-attestor`, recorded in the
//!    pool owner's tenant, before anything is reclaimed or inserted;
//! 2. a token's expect binding whenever the result names a token: `join:expect-product-uuid`,
//!    `join:expect-mac`;
//! 3. the node-key statement: one the renewal path cannot prove again is
//!    `join:node-key-statement` ([`renewal_can_prove`]);
//! 4. a reclaim: the node must exist and be active (`join:reclaim-inactive`) and keeps its
//!    tenant, site, pool and role (`join:reclaim-mismatch`);
//! 5. each subject to bind must not be bound to another node (`join:bound-elsewhere`; naming a
//!    spent single-use subject of the result as step 6 does);
//! 6. each single-use subject must be unused (`<SingleUse.attestor>:<reason_if_used>`, naming
//!    the subject as [`AttestorRefusal::spent`]: a join of this same request whose answer was
//!    lost is answered again instead, [`super::answer_again`]);
//! 7. an approval: no request (or an expired one) creates a request and defers, a pending one
//!    defers, a rejected one is `join:request-rejected`, an approved one past its expiry is
//!    `join:request-expired`, an approved one admits and is consumed.
//!
//! Then the events, all in one decision ([`Decided`]; an admitted join's certificate is decided
//! here and signed after, by [`Decided::sign`], so the decision itself draws no randomness): on a reclaim `node.identity.revoked` (reason
//! `reclaim`, the unrevoked serials, generation + 1), `node.joined`, `node.certificate.issued`,
//! `attestation.evidence.used` per single-use subject, `node.bound` per subject to bind,
//! `token.used` when a token was used, `join_request.consumed` when a request was approved.
//! A deferral spends nothing: its only event is the `join_request.created` of a new request.

use std::collections::{BTreeMap, BTreeSet};

use events::schema::{
    EvidenceUsed, JoinRequestConsumed, JoinRequestCreated, JoinTokenUsed, NodeBound,
    NodeCertificateIssued, NodeIdentityRevoked, NodeJoined,
};
use time::OffsetDateTime;

use super::contract::{AttestationResult, AttestorRefusal, BindingState, NodeKeyStatement};
use super::state::{JoinRequestState, JoinRequestStatus, PoolState, JOIN_REQUEST_TTL};
use crate::identity::{
    unix_us, ClaimsDigests, DecideError, Decision, HardwareClaims, IdentityEvent, JoinContext,
    Joined, NodeState, NodeStatus, SelfReport, NODE_KEY_UNATTESTED,
};
use crate::pki::{
    issue_node_certificate, NodeCa, NodeCertificateDecision, NodeId, Serial, SiteId, SpiffeId,
    VerifiedCsr,
};

/// The attestor name of the admission step's own refusals (`join:<reason>`).
pub const ADMISSION: &str = "join";

/// What the admission step reads, loaded by the shell for one [`AttestationResult`].
#[derive(Debug, Clone, Default)]
pub struct AdmissionFacts {
    /// The node the result reclaims (`reclaim_node_id`), when it exists.
    pub reclaimed: Option<NodeState>,
    /// That node's certificates not revoked yet (a reclaim revokes them).
    pub reclaimed_unrevoked_serials: Vec<String>,
    /// The bindings of the result's `bind` subjects, of those bound.
    pub bindings: BTreeMap<[u8; 32], BindingState>,
    /// The (attestor, subject) pairs of the result's single-use subjects already used.
    pub uses: BTreeSet<(String, [u8; 32])>,
    /// The pool the result admits into, when it has a row.
    pub pool: Option<PoolState>,
    /// The latest join request of (attestor, approval subject), when the result asks approval.
    pub join_request: Option<JoinRequestState>,
    /// Whether the result's tenant is one an operator created (a site or a pool of it), loaded
    /// when no operator record the attestor read vouches for it (an out-of-process attestor's
    /// result); `None`: not loaded, the tenant came from such a record (a token, a node, a
    /// site, an allow-list entry).
    pub tenant_known: Option<bool>,
}

/// One admission: the attestor's result and the fresh ids the shell drew.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionCommand<'a> {
    /// The attestor that admitted (`node.joined` `attestor`).
    pub attestor: &'a str,
    /// The verified CSR the certificate is issued for.
    pub csr: &'a VerifiedCsr,
    /// The machine's claims (checked against a token's expect binding).
    pub claims: &'a HardwareClaims,
    /// Their digests (the only form events record).
    pub digests: &'a ClaimsDigests,
    /// What the machine says about itself, recorded as sent in `node.joined` (checked before).
    pub report: &'a SelfReport,
    /// What the attestor answered.
    pub result: &'a AttestationResult,
    /// The id a new node gets (unused on a reclaim).
    pub new_node_id: &'a NodeId,
    /// The new certificate's serial.
    pub serial: &'a Serial,
    /// The id a new join request gets (unused unless one is created).
    pub new_request_id: &'a str,
}

/// A join deferred for an operator's approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJoin {
    /// The join request waited on.
    pub request_id: String,
    /// The tenant its events are written in.
    pub tenant_id: String,
    /// SHA-256 of the CSR the deferral is bound to.
    pub csr_sha256: [u8; 32],
    /// Whether this round created the request (its `join_request.created` is the decision's).
    pub created: bool,
}

/// What the admission step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admitted: a node and its certificate.
    Joined(Box<Joined>),
    /// Waiting for an operator.
    Pending(PendingJoin),
}

impl Admission {
    /// The tenant the decision's events are written in.
    pub fn tenant_id(&self) -> &str {
        match self {
            Admission::Joined(j) => &j.tenant_id,
            Admission::Pending(p) => &p.tenant_id,
        }
    }
}

/// Whether the renewal path can prove `statement` again at every renewal (spec 001 "What a
/// result means"): "unattested", and a well-formed `urn:bc:tpm-ak:000b:<64 hex>` (renewals
/// check the AK's certification of every new key, [`crate::identity::check_key_statements`]).
pub fn renewal_can_prove(statement: &NodeKeyStatement) -> bool {
    match statement {
        NodeKeyStatement::Unattested => true,
        NodeKeyStatement::Statement { uri, .. } => {
            crate::attest::tpm::parse_ak_statement(uri).is_some()
        }
    }
}

fn mac_eq(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim().to_ascii_lowercase().replace('-', ":");
    norm(a) == norm(b)
}

/// What the admission step decided, before any certificate is signed.
#[derive(Debug)]
pub enum Decided {
    /// Deferred for an operator (or waiting on one): final, nothing to sign.
    Deferred(Decision<Admission>),
    /// Admitted: [`UnsignedJoin::sign`] issues the certificate and completes the decision.
    Admitted(Box<UnsignedJoin>),
}

impl Decided {
    /// The decision, the certificate of an admitted join signed by `node_ca` for `csr`'s key
    /// (the one step after the decision that draws randomness: the signature's).
    pub fn sign(
        self,
        node_ca: &NodeCa,
        csr: &VerifiedCsr,
        now: OffsetDateTime,
    ) -> Result<Decision<Admission>, DecideError<AttestorRefusal>> {
        match self {
            Decided::Deferred(decision) => Ok(decision),
            Decided::Admitted(join) => join.sign(node_ca, csr, now),
        }
    }
}

/// An admitted join whose certificate is decided but not signed yet: the events before it (a
/// reclaim's revocation, `node.joined`), the certificate to issue, and what the join spends.
#[derive(Debug)]
pub struct UnsignedJoin {
    /// The certificate to issue.
    pub certificate: NodeCertificateDecision,
    /// The node's identity generation.
    pub generation: u64,
    /// Command kinds the certificate allows.
    pub allowed_kinds: Vec<String>,
    /// The outcome, its certificate fields empty until signed.
    joined: Joined,
    before: Vec<IdentityEvent>,
    after: Vec<IdentityEvent>,
}

impl UnsignedJoin {
    /// Signs the certificate and completes the decision: `node.certificate.issued` after
    /// `node.joined`, then what the join spends.
    pub fn sign(
        self,
        node_ca: &NodeCa,
        csr: &VerifiedCsr,
        now: OffsetDateTime,
    ) -> Result<Decision<Admission>, DecideError<AttestorRefusal>> {
        let issued = issue_node_certificate(node_ca, csr, &self.certificate, now)
            .map_err(|e| DecideError::Failed(format!("issuing the node certificate: {e}")))?;
        let mut joined = self.joined;
        joined.certificate_der = issued.der.clone();
        joined.not_after_us = unix_us(issued.not_after);
        let mut events = self.before;
        events.push(IdentityEvent::CertificateIssued(NodeCertificateIssued {
            node_id: joined.node_id.clone(),
            serial: issued.serial.to_hex(),
            der: issued.der,
            not_before_us: unix_us(issued.not_before),
            not_after_us: unix_us(issued.not_after),
            identity_generation: self.generation,
            cause: "join".into(),
            renewed_serial: String::new(),
            allowed_kinds: self.allowed_kinds,
        }));
        events.extend(self.after);
        Ok(Decision {
            events,
            outcome: Admission::Joined(Box::new(joined)),
        })
    }
}

/// The admission step (see the module documentation for the order of the checks). Pure: an
/// admitted join's certificate is decided here and signed after ([`Decided::sign`]).
pub fn decide_admission(
    ctx: &JoinContext<'_>,
    cmd: &AdmissionCommand<'_>,
    facts: &AdmissionFacts,
    now: OffsetDateTime,
) -> Result<Decided, DecideError<AttestorRefusal>> {
    let result = cmd.result;
    check_policy(cmd, facts)?;
    let reclaimed = check_reclaim(result, facts)?;
    let node_id = match reclaimed {
        Some(n) => NodeId::new(&n.node_id)
            .map_err(|e| DecideError::Failed(format!("stored node id: {e}")))?,
        None => cmd.new_node_id.clone(),
    };
    check_subjects(result, facts, &node_id)?;
    let consumed = match approval_step(cmd, facts, now)? {
        ApprovalStep::Admit(consumed) => consumed,
        ApprovalStep::Defer(decision) => return Ok(Decided::Deferred(decision)),
    };
    admit(ctx, cmd, facts, reclaimed, node_id, consumed)
        .map(|join| Decided::Admitted(Box::new(join)))
}

/// A refusal of the join by `attestor` (the admission step's own: [`ADMISSION`]) for `reason`,
/// in the result's tenant, naming its token and the node it reclaims.
fn refusal(
    result: &AttestationResult,
    attestor: &str,
    reason: &str,
) -> DecideError<AttestorRefusal> {
    DecideError::Refused(attributed(result, attestor, reason))
}

/// [`refusal`]'s refusal itself.
fn attributed(result: &AttestationResult, attestor: &str, reason: &str) -> AttestorRefusal {
    let mut r = AttestorRefusal::new(attestor, reason).in_tenant(&result.tenant_id);
    if let Some(t) = &result.token {
        r = r.with_token(&t.token_id);
    }
    if let Some(n) = &result.reclaim_node_id {
        r = r.with_node(n);
    }
    r
}

/// Steps 0 to 3: a tenant nobody created, the pool's attestor policy (in the pool owner's
/// tenant, before anything is reclaimed or inserted), a token's expect binding, a node-key
/// statement the renewal path cannot prove.
fn check_policy(
    cmd: &AdmissionCommand<'_>,
    facts: &AdmissionFacts,
) -> Result<(), DecideError<AttestorRefusal>> {
    let result = cmd.result;
    let token_id = result.token.as_ref().map(|t| t.token_id.as_str());

    // 0. A tenant nobody created: refused in the root tenant, so it gets no event either.
    if facts.tenant_known == Some(false) {
        let r = AttestorRefusal::new(ADMISSION, "unknown-tenant");
        return Err(DecideError::Refused(r));
    }

    // 1. The pool's policy, in its owner's tenant, before anything is reclaimed or inserted.
    if let Some(pool) = &facts.pool {
        if !pool.admits(cmd.attestor) {
            let mut r = AttestorRefusal::new(ADMISSION, "pool-attestor").in_tenant(&pool.tenant_id);
            if let Some(t) = token_id {
                r = r.with_token(t);
            }
            return Err(DecideError::Refused(r));
        }
    }

    // 2. A token's expect binding.
    if let Some(token) = &result.token {
        if let Some(want) = &token.expect.product_uuid {
            let ok = cmd
                .claims
                .product_uuid
                .as_ref()
                .is_some_and(|got| got.trim().eq_ignore_ascii_case(want.trim()));
            if !ok {
                return Err(refusal(result, ADMISSION, "expect-product-uuid"));
            }
        }
        if let Some(want) = &token.expect.mac {
            if !cmd.claims.macs.iter().any(|m| mac_eq(m, want)) {
                return Err(refusal(result, ADMISSION, "expect-mac"));
            }
        }
    }

    // 3. A node-key statement the renewal path cannot prove.
    if !renewal_can_prove(&result.node_key) {
        return Err(refusal(result, ADMISSION, "node-key-statement"));
    }
    Ok(())
}

/// Step 4: the node a reclaim names exists, is active, and keeps its tenant, site, pool and
/// role.
fn check_reclaim<'f>(
    result: &AttestationResult,
    facts: &'f AdmissionFacts,
) -> Result<Option<&'f NodeState>, DecideError<AttestorRefusal>> {
    let Some(id) = &result.reclaim_node_id else {
        return Ok(None);
    };
    let node = facts
        .reclaimed
        .as_ref()
        .filter(|n| n.node_id == *id && n.status == NodeStatus::Active)
        .ok_or_else(|| refusal(result, ADMISSION, "reclaim-inactive"))?;
    if node.tenant_id != result.tenant_id
        || node.site_id != result.site_id
        || node.pool_id != result.pool_id
        || node.role != result.role
    {
        return Err(refusal(result, ADMISSION, "reclaim-mismatch"));
    }
    Ok(Some(node))
}

/// Steps 5 and 6: a subject bound to another node admits no other, and single-use evidence is
/// used once.
fn check_subjects(
    result: &AttestationResult,
    facts: &AdmissionFacts,
    node_id: &NodeId,
) -> Result<(), DecideError<AttestorRefusal>> {
    // A single-use subject already spent: by a join of this very request, if its answer was
    // lost (the shell asks `answer_again` before recording the refusal that names it).
    let spent = result
        .single_use
        .iter()
        .find(|u| facts.uses.contains(&(u.attestor.clone(), u.subject)));

    // 5. A subject bound to another node admits no other (an attestor that cannot look
    // bindings up, out of process, binds the node its own lost answer made "elsewhere").
    for subject in &result.bind {
        if let Some(b) = facts.bindings.get(subject) {
            if b.node_id != node_id.as_str() {
                let mut refused = attributed(result, ADMISSION, "bound-elsewhere");
                if let Some(u) = spent {
                    refused = refused.spent(&u.attestor, &u.subject);
                }
                return Err(DecideError::Refused(refused));
            }
        }
    }

    // 6. Single-use evidence, once.
    if let Some(u) = spent {
        let refused = attributed(result, &u.attestor, &u.reason_if_used);
        return Err(DecideError::Refused(refused.spent(&u.attestor, &u.subject)));
    }
    Ok(())
}

/// What step 7 leaves of a join: admitted (consuming the approved request it names, if any),
/// or deferred for an operator with this decision.
enum ApprovalStep {
    Admit(Option<String>),
    Defer(Decision<Admission>),
}

/// Step 7: an approval. No request (or an expired or consumed one) creates a request and
/// defers, a live pending one defers, a rejected one refuses, an approved one past its expiry
/// refuses, an approved one admits and is consumed.
fn approval_step(
    cmd: &AdmissionCommand<'_>,
    facts: &AdmissionFacts,
    now: OffsetDateTime,
) -> Result<ApprovalStep, DecideError<AttestorRefusal>> {
    let result = cmd.result;
    let Some(ask) = &result.approval else {
        return Ok(ApprovalStep::Admit(None));
    };
    let now_us = unix_us(now);
    let token_id = result.token.as_ref().map(|t| t.token_id.as_str());
    let csr_sha256 = *cmd.csr.sha256();
    let live = |r: &JoinRequestState| r.expires_at_us > now_us;
    let existing = facts
        .join_request
        .as_ref()
        .filter(|r| r.attestor == cmd.attestor && r.subject == ask.subject);
    match existing {
        Some(r) if r.status == JoinRequestStatus::Rejected => {
            Err(refusal(result, ADMISSION, "request-rejected"))
        }
        Some(r) if r.status == JoinRequestStatus::Approved && !live(r) => {
            Err(refusal(result, ADMISSION, "request-expired"))
        }
        Some(r) if r.status == JoinRequestStatus::Approved => {
            Ok(ApprovalStep::Admit(Some(r.request_id.clone())))
        }
        Some(r) if r.status == JoinRequestStatus::Pending && live(r) => {
            Ok(ApprovalStep::Defer(Decision {
                events: Vec::new(),
                outcome: Admission::Pending(PendingJoin {
                    request_id: r.request_id.clone(),
                    tenant_id: result.tenant_id.clone(),
                    csr_sha256,
                    created: false,
                }),
            }))
        }
        // None, an expired or consumed request, a pending one past its expiry: a new one.
        _ => {
            let digest = |d: Option<[u8; 32]>| d.map(|d| d.to_vec()).unwrap_or_default();
            let events = vec![IdentityEvent::JoinRequestCreated(JoinRequestCreated {
                request_id: cmd.new_request_id.to_owned(),
                tenant_id: result.tenant_id.clone(),
                attestor: cmd.attestor.to_owned(),
                subject: ask.subject.to_vec(),
                csr_sha256: csr_sha256.to_vec(),
                role: result.role.as_str().to_owned(),
                site_id: result.site_id.clone(),
                pool_id: result.pool_id.clone(),
                node_id: result.reclaim_node_id.clone().unwrap_or_default(),
                token_id: token_id.unwrap_or_default().to_owned(),
                product_uuid_sha256: digest(cmd.digests.product_uuid),
                macs_sha256: digest(cmd.digests.macs),
                summary: ask.summary.clone(),
                expires_at_us: unix_us(now + JOIN_REQUEST_TTL),
            })];
            Ok(ApprovalStep::Defer(Decision {
                events,
                outcome: Admission::Pending(PendingJoin {
                    request_id: cmd.new_request_id.to_owned(),
                    tenant_id: result.tenant_id.clone(),
                    csr_sha256,
                    created: true,
                }),
            }))
        }
    }
}

/// Admitted: on a reclaim the old identity's revocation, then the node, the certificate to
/// issue and what the join spends ([`spent`]).
fn admit(
    ctx: &JoinContext<'_>,
    cmd: &AdmissionCommand<'_>,
    facts: &AdmissionFacts,
    reclaimed: Option<&NodeState>,
    node_id: NodeId,
    consumed: Option<String>,
) -> Result<UnsignedJoin, DecideError<AttestorRefusal>> {
    let result = cmd.result;
    let token_id = result.token.as_ref().map(|t| t.token_id.as_str());
    let csr_sha256 = *cmd.csr.sha256();
    let mut before = Vec::new();
    let (generation, is_reclaim) = match reclaimed {
        Some(n) => {
            let generation = n.identity_generation + 1;
            before.push(IdentityEvent::IdentityRevoked(NodeIdentityRevoked {
                node_id: n.node_id.clone(),
                reason: "reclaim".into(),
                new_identity_generation: generation,
                revoked_serials: facts.reclaimed_unrevoked_serials.clone(),
            }));
            (generation, true)
        }
        None => (1, false),
    };
    let certificate = certificate_decision(ctx, cmd, &node_id)?;

    let digest = |d: Option<[u8; 32]>| d.map(|d| d.to_vec()).unwrap_or_default();
    let (node_key, node_key_uri) = match &result.node_key {
        NodeKeyStatement::Unattested => (NODE_KEY_UNATTESTED.to_owned(), String::new()),
        NodeKeyStatement::Statement { label, uri } => (label.clone(), uri.clone()),
    };
    let node = node_id.as_str().to_owned();
    let joined = Joined {
        node_id: node.clone(),
        tenant_id: result.tenant_id.clone(),
        token_id: token_id.unwrap_or_default().to_owned(),
        site_id: result.site_id.clone(),
        role: result.role.as_str().to_owned(),
        identity_generation: generation,
        reclaimed: is_reclaim,
        certificate_der: Vec::new(),
        not_after_us: 0,
        csr_sha256,
        allowed_kinds: result.allowed_kinds.clone(),
    };
    before.push(IdentityEvent::NodeJoined(NodeJoined {
        node_id: node.clone(),
        tenant_id: result.tenant_id.clone(),
        site_id: result.site_id.clone(),
        pool_id: result.pool_id.clone(),
        role: result.role.as_str().to_owned(),
        attestor: cmd.attestor.to_owned(),
        node_key,
        token_id: token_id.unwrap_or_default().to_owned(),
        identity_generation: generation,
        product_uuid_sha256: digest(cmd.digests.product_uuid),
        macs_sha256: digest(cmd.digests.macs),
        hardware_key_sha256: digest(cmd.digests.hardware_key),
        reclaimed: is_reclaim,
        csr_sha256: csr_sha256.to_vec(),
        allowed_kinds: result.allowed_kinds.clone(),
        node_key_uri,
        report: Some(Box::new(cmd.report.to_event())),
    }));
    Ok(UnsignedJoin {
        certificate,
        generation,
        allowed_kinds: result.allowed_kinds.clone(),
        joined,
        before,
        after: spent(cmd, facts, node, consumed)?,
    })
}

/// The certificate an admitted join is issued. The node-key statement goes into it after the
/// SPIFFE ID, so every renewal must prove it again (spec 000 "Renewing a TPM-held key").
fn certificate_decision(
    ctx: &JoinContext<'_>,
    cmd: &AdmissionCommand<'_>,
    node_id: &NodeId,
) -> Result<NodeCertificateDecision, DecideError<AttestorRefusal>> {
    let result = cmd.result;
    let site = SiteId::new(&result.site_id)
        .map_err(|e| DecideError::Failed(format!("site id {:?}: {e}", result.site_id)))?;
    let statements = match &result.node_key {
        NodeKeyStatement::Unattested => Vec::new(),
        NodeKeyStatement::Statement { uri, .. } => vec![crate::pki::NodeKeyStatement::new(uri)
            .map_err(|_| {
                DecideError::Refused(
                    AttestorRefusal::new(ADMISSION, "node-key-statement")
                        .in_tenant(&result.tenant_id),
                )
            })?],
    };
    Ok(NodeCertificateDecision {
        spiffe_id: SpiffeId::new(ctx.trust_domain.clone(), site, node_id.clone()),
        role: result.role,
        serial: cmd.serial.clone(),
        requested_lifetime: Some(ctx.lifetime_for(result.role)),
        statements,
    })
}

/// What an admitted join spends, in order: each single-use subject, each subject to bind not
/// bound yet, a use of its token, the approved request it consumes.
fn spent(
    cmd: &AdmissionCommand<'_>,
    facts: &AdmissionFacts,
    node: String,
    consumed: Option<String>,
) -> Result<Vec<IdentityEvent>, DecideError<AttestorRefusal>> {
    let result = cmd.result;
    let mut events = Vec::new();
    for u in &result.single_use {
        events.push(IdentityEvent::EvidenceUsed(EvidenceUsed {
            attestor: u.attestor.clone(),
            subject: u.subject.to_vec(),
            node_id: node.clone(),
            expires_at_us: u.expires_at_us.unwrap_or(0),
        }));
    }
    for subject in &result.bind {
        if facts.bindings.contains_key(subject) {
            continue; // already bound to this node
        }
        events.push(IdentityEvent::NodeBound(NodeBound {
            node_id: node.clone(),
            attestor: cmd.attestor.to_owned(),
            subject: subject.to_vec(),
        }));
    }
    if let Some(token) = &result.token {
        let uses_left = token
            .uses_left
            .checked_sub(1)
            .ok_or_else(|| DecideError::Failed("the token has no use left to spend".into()))?;
        events.push(IdentityEvent::TokenUsed(JoinTokenUsed {
            token_id: token.token_id.clone(),
            use_number: token.uses_total - token.uses_left + 1,
            node_id: node.clone(),
            uses_left,
            csr_key_sha256: Vec::new(),
            key_use_expires_at_us: 0,
        }));
    }
    if let Some(request_id) = consumed {
        events.push(IdentityEvent::JoinRequestConsumed(JoinRequestConsumed {
            request_id,
            node_id: node,
        }));
    }
    Ok(events)
}
