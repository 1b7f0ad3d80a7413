//! Renewal (spec 002 "renewal", 003 "Node certificates").
//!
//! [`prepare_renew`] checks what needs no state: the new CSR, the presented leaf's identity (the
//! node id comes from its SPIFFE ID, never from a message field), and computes the replay key of
//! the `renew-pop` proof. The command layer then loads the node, the `node_certs` row of the
//! leaf's serial and whether the proof was used, and [`decide_renew`] decides, in this order:
//! the leaf is byte for byte a stored row of this node; of the node's current identity
//! generation; not revoked; the node active; not expired; no key statement it cannot prove; a
//! leaf naming a TPM AK (`urn:bc:tpm-ak:`) comes with that AK's certification of the CSR's key
//! (spec 000 "Renewing a TPM-held key": `key_attestation` present, the AK's name is the
//! statement, then the join's own [`verify_key_certification`]); the
//! proof verifies under the leaf's key; its client time within ±60 s; never used before; the
//! leaf not superseded by a newer certificate (a clone: [`super::renew_guard`], unless the
//! newer one certifies the CSR's key: the same renewal retried, [`answer_again`]); and fewer than
//! [`super::RENEWALS_PER_HOUR`] renewals of the node in the last hour.

use events::schema::{EvidenceUsed, NodeCertificateIssued};
use time::{Duration, OffsetDateTime};

use super::join_terms::JoinContext;
use super::renew_guard::{clone_events, renewal_retry_at};
use super::state::{CertState, IdentityEvent, NodeState, NodeStatus};
use super::{sha256, unix_us, DecideError, Decision, Refused};
use crate::attest::tpm::{
    check_ak, parse_ak_statement, verify_key_certification, KeyCertRefusal, KeyCertification,
    TpmKeyAttestation,
};
use crate::pki::statement::{verify, RenewPop, Statement};
use crate::pki::{
    check_clock_window, issue_node_certificate, NodeCertificateDecision, NodeIdentity, Serial,
    Signature, VerifiedCsr,
};

/// The `attestation_uses.attestor` of renew proofs (declared with the event schema).
pub use events::schema::RENEW_POP_ATTESTOR;
/// How long a used proof is remembered (twice the ±60 s window).
pub const RENEW_PROOF_TTL: Duration = Duration::seconds(120);

/// Until when a proof used at `now` is remembered (µs): [`RENEW_PROOF_TTL`] after its use, and
/// never before the first instant its clock window refuses it ([`check_clock_window`] takes
/// whole milliseconds, so a proof `PROOF_WINDOW` ahead of a use on a millisecond boundary is
/// admitted for 999 µs past `now + 120 s`). The lookup of the replay row honours this expiry
/// (`projections::identity::read::attestation_used_at`), so the row must outlive every moment
/// the proof it guards could be admitted again.
pub fn proof_use_expiry_us(proof_time_ms: u64, now: OffsetDateTime) -> i64 {
    let window_ms = crate::pki::statement::PROOF_WINDOW.whole_milliseconds() as i64;
    let refused_from_ms = i64::try_from(proof_time_ms)
        .unwrap_or(i64::MAX)
        .saturating_add(window_ms + 1);
    unix_us(now + RENEW_PROOF_TTL).max(refused_from_ms.saturating_mul(1000))
}

/// Why a renewal was refused. One variant per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RenewRefusal {
    /// The new CSR does not verify.
    #[error("renew:bad-csr")]
    BadCsr,
    /// No chain, or the leaf carries no node identity of this trust domain.
    #[error("renew:bad-certificate")]
    BadCertificate,
    /// No `node_certs` row has the leaf's serial for this node.
    #[error("renew:unknown-certificate")]
    UnknownCertificate,
    /// A row exists but the presented bytes are not byte for byte the stored certificate.
    #[error("renew:certificate-mismatch")]
    CertificateMismatch,
    /// The certificate is of an older identity generation than the node's.
    #[error("renew:old-generation")]
    OldGeneration,
    /// The certificate was revoked.
    #[error("renew:revoked")]
    Revoked,
    /// The node is unknown, retired or deleted.
    #[error("renew:node-inactive")]
    NodeInactive,
    /// The certificate expired (a renewal never revives one; re-join instead).
    #[error("renew:expired")]
    Expired,
    /// The leaf carries a `urn:bc:` key statement this control plane cannot prove again.
    #[error("renew:key-statement-unknown")]
    KeyStatementUnknown,
    /// The leaf names a TPM AK but the request carries no `key_attestation`.
    #[error("renew:node-key-missing")]
    NodeKeyMissing,
    /// The attestation's AK is not the one the leaf names (or not an AK at all).
    #[error("renew:node-key-ak")]
    NodeKeyAk,
    /// The key's TPMT_PUBLIC, the TPMS_ATTEST or its signature does not parse, or the attest is
    /// no TPM-generated certify.
    #[error("renew:node-key-malformed")]
    NodeKeyMalformed,
    /// The certification is not signed by the AK.
    #[error("renew:node-key-signature")]
    NodeKeySignature,
    /// The certification is not qualified by SHA-256 of this CSR.
    #[error("renew:node-key-nonce")]
    NodeKeyNonce,
    /// The certified name is not the presented key's.
    #[error("renew:node-key-name")]
    NodeKeyName,
    /// The key is not an unrestricted P-256 signing key the TPM made and keeps.
    #[error("renew:node-key-attributes")]
    NodeKeyAttributes,
    /// The certified key is not the CSR's key.
    #[error("renew:node-key-not-csr")]
    NodeKeyNotCsr,
    /// The proof does not verify under the presented leaf's key.
    #[error("renew:bad-proof")]
    BadProof,
    /// The proof's client time is more than 60 s from the server's clock.
    #[error("renew:clock-window")]
    ClockWindow,
    /// The proof was used before.
    #[error("renew:replay")]
    Replay,
    /// The leaf was already renewed: a newer certificate of this node and generation exists.
    /// With a valid proof that is two holders of one key, flagged as a clone.
    #[error("renew:superseded")]
    Superseded,
    /// The node renewed [`super::RENEWALS_PER_HOUR`] times in the last hour.
    #[error("renew:rate-limited")]
    RateLimited,
}

impl RenewRefusal {
    /// Every reason.
    pub const ALL: [RenewRefusal; 22] = [
        RenewRefusal::BadCsr,
        RenewRefusal::BadCertificate,
        RenewRefusal::UnknownCertificate,
        RenewRefusal::CertificateMismatch,
        RenewRefusal::OldGeneration,
        RenewRefusal::Revoked,
        RenewRefusal::NodeInactive,
        RenewRefusal::Expired,
        RenewRefusal::KeyStatementUnknown,
        RenewRefusal::NodeKeyMissing,
        RenewRefusal::NodeKeyAk,
        RenewRefusal::NodeKeyMalformed,
        RenewRefusal::NodeKeySignature,
        RenewRefusal::NodeKeyNonce,
        RenewRefusal::NodeKeyName,
        RenewRefusal::NodeKeyAttributes,
        RenewRefusal::NodeKeyNotCsr,
        RenewRefusal::BadProof,
        RenewRefusal::ClockWindow,
        RenewRefusal::Replay,
        RenewRefusal::Superseded,
        RenewRefusal::RateLimited,
    ];

    /// `renew:<reason>`.
    pub fn reason(self) -> String {
        self.to_string()
    }
}

/// Who a refused renewal is attributed to: the node's tenant only once the presented leaf is
/// byte for byte its stored certificate, otherwise nobody (the shell writes the refusal in its
/// root tenant). The join's twin is [`super::join_refusal_attribution`].
pub fn renew_refusal_tenant(refusal: RenewRefusal, node: Option<&NodeState>) -> Option<&str> {
    let matched = !matches!(
        refusal,
        RenewRefusal::BadCsr
            | RenewRefusal::BadCertificate
            | RenewRefusal::UnknownCertificate
            | RenewRefusal::CertificateMismatch
    );
    node.filter(|_| matched).map(|n| n.tenant_id.as_str())
}

/// What an admitted renewal answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    /// The node renewed.
    pub node_id: String,
    /// Its tenant: the tenant the events are written in.
    pub tenant_id: String,
    /// Its site (from the presented leaf, kept by the new one).
    pub site_id: String,
    /// Its role (kept).
    pub role: String,
    /// The identity generation the new certificate belongs to.
    pub identity_generation: u64,
    /// The new certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its end of validity, µs.
    pub not_after_us: i64,
    /// The command kinds it allows (kept from the presented certificate; empty: every kind its
    /// role allows), carried in the signed RenewResponse so bcd enforces them too.
    pub allowed_kinds: Vec<String>,
}

/// A renew request as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewInput {
    /// The new CSR, DER.
    pub csr_der: Vec<u8>,
    /// The current chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The agent's clock, unix milliseconds.
    pub client_time_ms: u64,
    /// `renew-pop` signature (r || s) by the current key.
    pub signature: Vec<u8>,
    /// `RenewRequest.key_attestation`: the AK's certification of the new key, required when the
    /// leaf names a `urn:bc:tpm-ak:` statement.
    pub key_attestation: Option<TpmKeyAttestation>,
}

/// A renewal whose CSR and leaf parsed.
#[derive(Debug, Clone)]
pub struct PreparedRenew {
    /// The new CSR.
    pub csr: VerifiedCsr,
    /// The presented leaf, exactly as sent.
    pub leaf_der: Vec<u8>,
    /// Its identity.
    pub identity: NodeIdentity,
    /// The proof statement.
    pub statement: RenewPop,
    /// The signature.
    pub signature: Vec<u8>,
    /// SHA-256 of the statement's signed input: `attestation_uses.subject`.
    pub replay_key: [u8; 32],
    /// `RenewRequest.key_attestation`, as sent.
    pub key_attestation: Option<TpmKeyAttestation>,
}

impl PreparedRenew {
    /// The leaf's node id.
    pub fn node_id(&self) -> &str {
        self.identity.spiffe_id.node.as_str()
    }

    /// The leaf's serial (hex).
    pub fn serial_hex(&self) -> String {
        self.identity.serial.to_hex()
    }
}

/// Step 1. A refusal carries what is known for the event: the (node id, serial) the presented
/// leaf names when it parses (claimed, not yet checked against `node_certs`), and the SHA-256
/// of the CSR as sent.
#[allow(clippy::type_complexity)]
pub fn prepare_renew(
    ctx: &JoinContext<'_>,
    input: &RenewInput,
) -> Result<PreparedRenew, (RenewRefusal, Option<(String, String)>, Option<[u8; 32]>)> {
    let leaf = input.chain.first();
    let identity = leaf.map(|l| NodeIdentity::from_leaf_der(l, ctx.trust_domain));
    // What a bad-CSR refusal names is worked out only on that path.
    let csr = VerifiedCsr::verify(&input.csr_der).map_err(|_| {
        let claimed = match &identity {
            Some(Ok(i)) => Some((i.spiffe_id.node.as_str().to_owned(), i.serial.to_hex())),
            _ => None,
        };
        (RenewRefusal::BadCsr, claimed, Some(sha256(&input.csr_der)))
    })?;
    let csr_sha = *csr.sha256();
    let (Some(leaf), Some(Ok(identity))) = (leaf, identity) else {
        return Err((RenewRefusal::BadCertificate, None, Some(csr_sha)));
    };
    let statement = RenewPop {
        csr_sha256: csr_sha,
        node_id: identity.spiffe_id.node.clone(),
        client_time_ms: input.client_time_ms,
    };
    Ok(PreparedRenew {
        replay_key: statement.replay_key(),
        csr,
        leaf_der: leaf.clone(),
        identity,
        statement,
        signature: input.signature.clone(),
        key_attestation: input.key_attestation.clone(),
    })
}

/// The state a renewal reads.
#[derive(Debug, Clone, Default)]
pub struct RenewState {
    /// The leaf's node.
    pub node: Option<NodeState>,
    /// The `node_certs` row with the leaf's serial.
    pub cert: Option<CertState>,
    /// Whether `attestation_uses` holds the proof's replay key.
    pub proof_used: bool,
    /// The newest certificate of the node in the leaf's identity generation issued after it,
    /// if one exists: the leaf was already renewed.
    pub successor: Option<CertState>,
    /// When the node's renewals of the last [`super::RENEWAL_WINDOW`] were issued, µs.
    pub recent_renewals_us: Vec<i64>,
    /// The serials of the node's certificates not revoked yet, oldest first, when the leaf has
    /// a successor (a clone revokes them all); empty otherwise.
    pub unrevoked_serials: Vec<String>,
}

/// A prepared renewal and the serial the shell drew for the new certificate.
#[derive(Debug, Clone)]
pub struct RenewCommand {
    /// Step 1's result.
    pub prepared: PreparedRenew,
    /// The new serial.
    pub serial: Serial,
}

/// A superseded leaf renewing for exactly the key its successor certifies (the CSR proves
/// possession of it, the proof by the leaf's key verified) is the renewal whose answer was lost
/// after the server committed it, asked again: the successor is answered again, nothing is
/// issued or appended. `None` for another key: two holders of the leaf's key, a clone. A
/// revoked successor is refused as `renew:revoked`.
pub fn answer_again(
    ctx: &JoinContext<'_>,
    p: &PreparedRenew,
    node: &NodeState,
    successor: &CertState,
) -> Result<Option<Renewed>, RenewRefusal> {
    let Ok(issued) = NodeIdentity::from_leaf_der(&successor.der, ctx.trust_domain) else {
        return Ok(None);
    };
    if &issued.public_key != p.csr.public_key() || issued.spiffe_id != p.identity.spiffe_id {
        return Ok(None);
    }
    if successor.revoked {
        return Err(RenewRefusal::Revoked);
    }
    Ok(Some(Renewed {
        node_id: p.node_id().to_owned(),
        tenant_id: node.tenant_id.clone(),
        site_id: issued.spiffe_id.site.to_string(),
        role: issued.role.to_string(),
        identity_generation: successor.identity_generation,
        certificate_der: successor.der.clone(),
        not_after_us: successor.not_after_us,
        allowed_kinds: successor.allowed_kinds.clone(),
    }))
}

impl From<KeyCertRefusal> for RenewRefusal {
    fn from(r: KeyCertRefusal) -> Self {
        match r {
            KeyCertRefusal::Malformed => RenewRefusal::NodeKeyMalformed,
            KeyCertRefusal::Signature => RenewRefusal::NodeKeySignature,
            KeyCertRefusal::Nonce => RenewRefusal::NodeKeyNonce,
            KeyCertRefusal::Name => RenewRefusal::NodeKeyName,
            KeyCertRefusal::Attributes => RenewRefusal::NodeKeyAttributes,
            KeyCertRefusal::NotCsr => RenewRefusal::NodeKeyNotCsr,
        }
    }
}

/// The leaf's key statements, proved again for the CSR's key: none, or only
/// `urn:bc:tpm-ak:000b:<digest>` statements of one AK whose certification of the new key comes
/// with the request. Any other statement is `renew:key-statement-unknown`.
pub fn check_key_statements(
    p: &PreparedRenew,
    key_attestation: Option<&TpmKeyAttestation>,
) -> Result<(), RenewRefusal> {
    let mut ak_digests = Vec::new();
    for statement in &p.identity.statements {
        let digest =
            parse_ak_statement(statement.as_str()).ok_or(RenewRefusal::KeyStatementUnknown)?;
        ak_digests.push(digest);
    }
    if ak_digests.is_empty() {
        return Ok(());
    }
    let attestation = key_attestation.ok_or(RenewRefusal::NodeKeyMissing)?;
    let ak = check_ak(&attestation.ak_public).map_err(|_| RenewRefusal::NodeKeyAk)?;
    let name = ak.name();
    if ak_digests.iter().any(|d| d.as_slice() != &name[2..]) {
        return Err(RenewRefusal::NodeKeyAk);
    }
    let cert = KeyCertification {
        key_public: &attestation.key_public,
        certify_info: &attestation.certify_info,
        signature: &attestation.signature,
    };
    let point = p.csr.public_key().uncompressed_point();
    verify_key_certification(&ak, cert, p.csr.sha256(), point)?;
    Ok(())
}

/// Step 2: the renewal decision. A refusal carries the events the log records with it: a
/// superseded leaf renewing for another key than its successor's is a clone, whose
/// `security.renew.cloned` and the revocation of every certificate of the node
/// ([`super::renew_guard::clone_events`]) go to the log with `renew:superseded`.
pub fn decide_renew(
    ctx: &JoinContext<'_>,
    cmd: &RenewCommand,
    state: &RenewState,
    now: OffsetDateTime,
) -> Result<Decision<Renewed>, DecideError<Refused<RenewRefusal, IdentityEvent>>> {
    match renewal(ctx, cmd, state, now) {
        Ok(decision) => Ok(decision),
        Err(DecideError::Failed(why)) => Err(DecideError::Failed(why)),
        Err(DecideError::Refused(reason)) => {
            let events = match (reason, &state.node, &state.successor) {
                (RenewRefusal::Superseded, Some(node), Some(successor)) => clone_events(
                    node,
                    &cmd.prepared.serial_hex(),
                    &successor.serial,
                    *cmd.prepared.csr.sha256(),
                    &state.unrevoked_serials,
                ),
                _ => Vec::new(),
            };
            Err(DecideError::Refused(Refused { reason, events }))
        }
    }
}

/// The renewal's checks and, when they pass, its events.
fn renewal(
    ctx: &JoinContext<'_>,
    cmd: &RenewCommand,
    state: &RenewState,
    now: OffsetDateTime,
) -> Result<Decision<Renewed>, DecideError<RenewRefusal>> {
    let p = &cmd.prepared;
    let node_id = p.node_id();
    let cert = state
        .cert
        .as_ref()
        .filter(|c| c.node_id == node_id)
        .ok_or(RenewRefusal::UnknownCertificate)?;
    if cert.der != p.leaf_der {
        return Err(RenewRefusal::CertificateMismatch.into());
    }
    let node = state.node.as_ref().ok_or(RenewRefusal::NodeInactive)?;
    if cert.identity_generation < node.identity_generation {
        return Err(RenewRefusal::OldGeneration.into());
    }
    if cert.revoked {
        return Err(RenewRefusal::Revoked.into());
    }
    if node.status != NodeStatus::Active {
        return Err(RenewRefusal::NodeInactive.into());
    }
    if unix_us(now) >= cert.not_after_us {
        return Err(RenewRefusal::Expired.into());
    }
    check_key_statements(p, p.key_attestation.as_ref())?;
    let signature = Signature::from_bytes(&p.signature).ok_or(RenewRefusal::BadProof)?;
    verify(&p.identity.public_key, &p.statement, &signature).map_err(|_| RenewRefusal::BadProof)?;
    check_clock_window(p.statement.client_time_ms, now).map_err(|_| RenewRefusal::ClockWindow)?;
    if state.proof_used {
        return Err(RenewRefusal::Replay.into());
    }
    if let Some(successor) = &state.successor {
        // The same renewal asked again is answered again; any other key is a clone.
        return match answer_again(ctx, p, node, successor)? {
            Some(outcome) => Ok(Decision {
                events: Vec::new(),
                outcome,
            }),
            None => Err(RenewRefusal::Superseded.into()),
        };
    }
    if renewal_retry_at(&state.recent_renewals_us, unix_us(now)).is_some() {
        return Err(RenewRefusal::RateLimited.into());
    }

    // The new certificate keeps node, site, role and trust domain: all from the stored leaf.
    let decision = NodeCertificateDecision {
        spiffe_id: p.identity.spiffe_id.clone(),
        role: p.identity.role,
        serial: cmd.serial.clone(),
        requested_lifetime: Some(ctx.lifetime_for(p.identity.role)),
        // The statements were proved again above: the new certificate carries them forward.
        statements: p.identity.statements.clone(),
    };
    let issued = issue_node_certificate(ctx.node_ca, &p.csr, &decision, now)
        .map_err(|e| DecideError::Failed(format!("issuing the renewed certificate: {e}")))?;
    let outcome = Renewed {
        node_id: node_id.to_owned(),
        tenant_id: node.tenant_id.clone(),
        site_id: p.identity.spiffe_id.site.to_string(),
        role: p.identity.role.to_string(),
        identity_generation: node.identity_generation,
        certificate_der: issued.der.clone(),
        not_after_us: unix_us(issued.not_after),
        allowed_kinds: cert.allowed_kinds.clone(),
    };
    let events = vec![
        // The proof's single use (issue 18: every attestor's use is an evidence.used; logs
        // written before it carry node.renew_proof.used, which the projection still applies).
        IdentityEvent::EvidenceUsed(EvidenceUsed {
            attestor: RENEW_POP_ATTESTOR.to_owned(),
            subject: p.replay_key.to_vec(),
            node_id: node_id.to_owned(),
            expires_at_us: proof_use_expiry_us(p.statement.client_time_ms, now),
        }),
        IdentityEvent::CertificateIssued(NodeCertificateIssued {
            node_id: node_id.to_owned(),
            serial: issued.serial.to_hex(),
            der: issued.der,
            not_before_us: unix_us(issued.not_before),
            not_after_us: unix_us(issued.not_after),
            identity_generation: node.identity_generation,
            cause: "renew".into(),
            renewed_serial: cert.serial.clone(),
            // The presented certificate's command kinds are renewed with it (spec 001).
            allowed_kinds: cert.allowed_kinds.clone(),
        }),
    ];
    Ok(Decision { events, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_us(us: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).unwrap()
    }

    /// Issue 40, item 13: the replay row's expiry covers the proof's whole clock window, even
    /// for a proof a full window ahead of a use on a millisecond boundary.
    #[test]
    fn the_replay_row_outlives_every_moment_its_proof_is_admitted() {
        let used_us = 1_767_225_600_000_000i64;
        for ahead_ms in [-60_000i64, 0, 59_999, 60_000] {
            let proof_ms = u64::try_from(used_us / 1000 + ahead_ms).unwrap();
            let expiry = proof_use_expiry_us(proof_ms, at_us(used_us));
            assert!(expiry >= used_us + RENEW_PROOF_TTL.whole_microseconds() as i64);
            // Every µs at which the window still admits the proof, the row is live (expiry > now).
            let mut now = used_us;
            while check_clock_window(proof_ms, at_us(now)).is_ok() {
                assert!(
                    expiry > now,
                    "proof {ahead_ms} ms ahead admitted at {now}, row expired at {expiry}"
                );
                now += if now < used_us + 119_990_000 {
                    1_000_000
                } else {
                    1
                };
            }
        }
    }
}
