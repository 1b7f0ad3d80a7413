//! A join with the `join-token` attestor (spec 000 "join-token", 001 "The contract").
//!
//! Two pure steps, because the token to load is only known once the sealed token opened:
//!
//! 1. [`open_join`]: a role the attestor does not list is refused first (spec 001 "The
//!    contract"); the CSR's signature and P-256 key are checked, and the sealed token is
//!    opened with the JoinService encryption key, bound to the CSR's SHA-256. The command layer
//!    then loads the `join_tokens` row whose hash is the secret's, and the node (if any) holding
//!    the claimed hardware key.
//! 2. [`decide_join`]: the secret is matched in constant time, then revocation, expiry, the
//!    CSR key's earlier use (`attestation_uses`: one key joins once while the token lives), uses,
//!    role, the expect binding and the hardware-key rule are checked, and the events are
//!    decided: `node.joined`, `node.certificate.issued` and `token.used` (with an allow-reclaim
//!    token and a known hardware key, `node.identity.revoked` first, and the node keeps its id).

use events::schema::{JoinTokenUsed, NodeCertificateIssued, NodeIdentityRevoked, NodeJoined};
use time::{Duration, OffsetDateTime};

use super::state::{
    IdentityEvent, NodeState, NodeStatus, TokenRole, TokenState, NODE_KEY_UNATTESTED,
};
use super::{sha256, unix_us, DecideError, Decision};
use crate::pki::{
    issue_node_certificate, JoinEncryptionKey, NodeCa, NodeCertificateDecision, NodeId, NodeRole,
    SealedToken, Serial, SiteId, SpiffeId, TokenHash, TokenSecret, TrustDomain, VerifiedCsr,
};

/// The attestor id of token joins.
pub const JOIN_TOKEN_ATTESTOR: &str = "join-token";

/// Why a token join was refused. One variant per reason; [`JoinRefusal::reason`] is the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum JoinRefusal {
    /// The CSR does not parse, is not P-256, or its self-signature fails.
    #[error("join-token:bad-csr")]
    BadCsr,
    /// The sealed token is malformed or does not open for this CSR.
    #[error("join-token:token-does-not-open")]
    TokenDoesNotOpen,
    /// No token has this secret.
    #[error("join-token:unknown-token")]
    UnknownToken,
    /// The token was revoked.
    #[error("join-token:revoked")]
    Revoked,
    /// The token expired.
    #[error("join-token:expired")]
    Expired,
    /// The token has no use left.
    #[error("join-token:no-use-left")]
    NoUseLeft,
    /// The CSR's key already joined (this request replayed, or the same key in another CSR)
    /// while the token that admitted it lives.
    #[error("join-token:csr-key-used")]
    CsrKeyUsed,
    /// The requested role is not the one the token admits (or not a role at all).
    #[error("join-token:wrong-role")]
    WrongRole,
    /// The token expects another product UUID (or none was claimed).
    #[error("join-token:expect-product-uuid")]
    ExpectProductUuid,
    /// The token expects a MAC the machine did not claim.
    #[error("join-token:expect-mac")]
    ExpectMac,
    /// Another node holds the claimed hardware key and the token does not allow reclaim.
    #[error("join-token:hardware-key-enrolled")]
    HardwareKeyEnrolled,
    /// An allow-reclaim token whose tenant, site, pool or role is not the reclaimed node's.
    #[error("join-token:reclaim-mismatch")]
    ReclaimMismatch,
}

impl JoinRefusal {
    /// Every reason, for tests and documentation.
    pub const ALL: [JoinRefusal; 12] = [
        JoinRefusal::BadCsr,
        JoinRefusal::TokenDoesNotOpen,
        JoinRefusal::UnknownToken,
        JoinRefusal::Revoked,
        JoinRefusal::Expired,
        JoinRefusal::NoUseLeft,
        JoinRefusal::CsrKeyUsed,
        JoinRefusal::WrongRole,
        JoinRefusal::ExpectProductUuid,
        JoinRefusal::ExpectMac,
        JoinRefusal::HardwareKeyEnrolled,
        JoinRefusal::ReclaimMismatch,
    ];

    /// `join-token:<reason>`, as the `security.join.refused` event records it.
    pub fn reason(self) -> String {
        self.to_string()
    }

    /// Whether the token's secret had matched when this refusal was decided: only then is the
    /// refusal attributed to the token's tenant (otherwise to the root tenant).
    pub fn secret_matched(self) -> bool {
        !matches!(
            self,
            JoinRefusal::BadCsr | JoinRefusal::TokenDoesNotOpen | JoinRefusal::UnknownToken
        )
    }
}

/// What the machine claims about its hardware (self-asserted; only digests are recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HardwareClaims {
    /// SMBIOS product UUID.
    pub product_uuid: Option<String>,
    /// MAC addresses.
    pub macs: Vec<String>,
    /// A trusted hardware key (for example the TPM EK public area): one node per key.
    pub hardware_key: Option<Vec<u8>>,
}

/// SHA-256 digests of the claims, as events record them (empty when absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimsDigests {
    /// SHA-256 of the lower-cased product UUID.
    pub product_uuid: Option<[u8; 32]>,
    /// SHA-256 of the lower-cased, sorted MACs joined with `\n`.
    pub macs: Option<[u8; 32]>,
    /// SHA-256 of the hardware key bytes.
    pub hardware_key: Option<[u8; 32]>,
}

/// The digests of `claims`.
pub fn claims_digests(claims: &HardwareClaims) -> ClaimsDigests {
    let mut macs: Vec<String> = claims.macs.iter().map(|m| m.to_ascii_lowercase()).collect();
    macs.sort();
    ClaimsDigests {
        product_uuid: claims
            .product_uuid
            .as_ref()
            .map(|u| sha256(u.to_ascii_lowercase().as_bytes())),
        macs: (!macs.is_empty()).then(|| sha256(macs.join("\n").as_bytes())),
        hardware_key: claims.hardware_key.as_ref().map(|k| sha256(k)),
    }
}

/// A join request as it arrives (already decoded from the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinInput {
    /// The CSR, DER.
    pub csr_der: Vec<u8>,
    /// The sealed token bytes.
    pub sealed_token: Vec<u8>,
    /// The role asked for (`node`, `site`).
    pub role: String,
    /// Hardware claims.
    pub claims: HardwareClaims,
}

/// The keys and settings a join decision needs.
#[derive(Debug, Clone, Copy)]
pub struct JoinContext<'a> {
    /// The deployment's trust domain.
    pub trust_domain: &'a TrustDomain,
    /// The node CA.
    pub node_ca: &'a NodeCa,
    /// The JoinService encryption key (opens sealed tokens).
    pub join_encryption: &'a JoinEncryptionKey,
    /// Leaf lifetime asked of the CA (it caps it at the role's maximum anyway).
    pub leaf_lifetime: Duration,
}

/// A join whose CSR verified and whose sealed token opened.
#[derive(Debug, Clone)]
pub struct OpenedJoin {
    /// The verified CSR.
    pub csr: VerifiedCsr,
    /// The opened secret.
    pub secret: TokenSecret,
    /// The role asked for, as sent.
    pub role: String,
    /// Claims as sent.
    pub claims: HardwareClaims,
    /// Their digests.
    pub digests: ClaimsDigests,
}

impl OpenedJoin {
    /// The hash to look the token up by.
    pub fn secret_hash(&self) -> TokenHash {
        self.secret.hash()
    }

    /// SHA-256 of the CSR key's DER SubjectPublicKeyInfo: the `attestation_uses` subject that
    /// lets one key join once (a replayed request and a new CSR for the same key alike).
    pub fn csr_key_sha256(&self) -> [u8; 32] {
        sha256(self.csr.spki_der())
    }
}

/// Step 1: refuse a role the attestor does not list (`node`, `site`), verify the CSR and open
/// the sealed token. A refusal here is attributed to the root tenant (no secret matched yet),
/// and carries the SHA-256 of the CSR as sent.
pub fn open_join(
    ctx: &JoinContext<'_>,
    input: &JoinInput,
) -> Result<OpenedJoin, (JoinRefusal, Option<[u8; 32]>)> {
    // Spec 001 "The contract": a role the attestor does not list is refused before verify runs.
    if TokenRole::parse(&input.role).is_none() {
        return Err((JoinRefusal::WrongRole, Some(sha256(&input.csr_der))));
    }
    let csr = VerifiedCsr::verify(&input.csr_der)
        .map_err(|_| (JoinRefusal::BadCsr, Some(sha256(&input.csr_der))))?;
    let csr_sha = *csr.sha256();
    let sealed = SealedToken::from_bytes(&input.sealed_token)
        .map_err(|_| (JoinRefusal::TokenDoesNotOpen, Some(csr_sha)))?;
    let secret = ctx
        .join_encryption
        .open(&sealed, csr.sha256())
        .map_err(|_| (JoinRefusal::TokenDoesNotOpen, Some(csr_sha)))?;
    Ok(OpenedJoin {
        csr,
        secret,
        role: input.role.clone(),
        digests: claims_digests(&input.claims),
        claims: input.claims.clone(),
    })
}

/// A join ready for the decision: what was opened, and the fresh ids the shell drew.
#[derive(Debug, Clone)]
pub struct JoinCommand {
    /// Step 1's result.
    pub opened: OpenedJoin,
    /// The id a new node gets (unused on a reclaim).
    pub new_node_id: NodeId,
    /// The new certificate's serial.
    pub serial: Serial,
}

/// The state a join reads.
#[derive(Debug, Clone, Default)]
pub struct JoinState {
    /// The token whose stored hash equals the secret's, if any.
    pub token: Option<TokenState>,
    /// The active node holding the claimed hardware key, if any.
    pub hardware_key_holder: Option<NodeState>,
    /// The serials of that node's certificates not revoked yet (a reclaim revokes them).
    pub hardware_key_holder_unrevoked_serials: Vec<String>,
    /// Whether `attestation_uses` holds the CSR key's use ([`OpenedJoin::csr_key_sha256`]).
    pub csr_key_used: bool,
}

/// What an admitted join answers: the node (new, or the reclaimed one) and its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The node admitted.
    pub node_id: String,
    /// Its tenant (the token's): the tenant the events are written in.
    pub tenant_id: String,
    /// The token used.
    pub token_id: String,
    /// Its site.
    pub site_id: String,
    /// Its role.
    pub role: String,
    /// The identity generation of the new certificate.
    pub identity_generation: u64,
    /// Whether an active node holding the claimed hardware key was reclaimed (its stream already
    /// exists).
    pub reclaimed: bool,
    /// The new certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its end of validity, µs.
    pub not_after_us: i64,
    /// SHA-256 of the CSR the certificate answers (the JoinResponse is bound to it).
    pub csr_sha256: [u8; 32],
}

/// Who a refused join is attributed to: the token's (tenant, token id) once its secret had
/// matched, otherwise nobody (the shell writes the refusal in its root tenant, without a token).
pub fn join_refusal_attribution(
    refusal: JoinRefusal,
    token: Option<&TokenState>,
) -> Option<(&str, &str)> {
    match token {
        Some(t) if refusal.secret_matched() => Some((t.tenant_id.as_str(), t.token_id.as_str())),
        _ => None,
    }
}

fn mac_eq(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim().to_ascii_lowercase().replace('-', ":");
    norm(a) == norm(b)
}

/// Step 2: the join decision.
pub fn decide_join(
    ctx: &JoinContext<'_>,
    cmd: &JoinCommand,
    state: &JoinState,
    now: OffsetDateTime,
) -> Result<Decision<Joined>, DecideError<JoinRefusal>> {
    let opened = &cmd.opened;
    let token = state.token.as_ref().ok_or(JoinRefusal::UnknownToken)?;
    if !token.secret_hash.matches(&opened.secret) {
        return Err(JoinRefusal::UnknownToken.into());
    }
    if token.revoked {
        return Err(JoinRefusal::Revoked.into());
    }
    if unix_us(now) >= token.expires_at_us {
        return Err(JoinRefusal::Expired.into());
    }
    // One key joins once while its use is kept (the token's lifetime): a replayed request
    // spends no use and makes no node, whoever relays it.
    if state.csr_key_used {
        return Err(JoinRefusal::CsrKeyUsed.into());
    }
    if token.uses_left == 0 {
        return Err(JoinRefusal::NoUseLeft.into());
    }
    let role: NodeRole = opened.role.parse().map_err(|_| JoinRefusal::WrongRole)?;
    if role != token.role.node_role() {
        return Err(JoinRefusal::WrongRole.into());
    }
    if let Some(want) = &token.expect.product_uuid {
        let ok = opened
            .claims
            .product_uuid
            .as_ref()
            .is_some_and(|got| got.trim().eq_ignore_ascii_case(want.trim()));
        if !ok {
            return Err(JoinRefusal::ExpectProductUuid.into());
        }
    }
    if let Some(want) = &token.expect.mac {
        if !opened.claims.macs.iter().any(|m| mac_eq(m, want)) {
            return Err(JoinRefusal::ExpectMac.into());
        }
    }

    let mut events = Vec::new();
    let (node_id, generation, reclaimed) = match &state.hardware_key_holder {
        Some(holder) if holder.status == NodeStatus::Active => {
            if !token.allow_reclaim {
                return Err(JoinRefusal::HardwareKeyEnrolled.into());
            }
            if holder.tenant_id != token.tenant_id
                || holder.site_id != token.site_id
                || holder.pool_id != token.pool_id
                || holder.role != role
            {
                return Err(JoinRefusal::ReclaimMismatch.into());
            }
            let generation = holder.identity_generation + 1;
            events.push(IdentityEvent::IdentityRevoked(NodeIdentityRevoked {
                node_id: holder.node_id.clone(),
                reason: "reclaim".into(),
                new_identity_generation: generation,
                revoked_serials: state.hardware_key_holder_unrevoked_serials.clone(),
            }));
            let id = NodeId::new(&holder.node_id)
                .map_err(|e| DecideError::Failed(format!("stored node id: {e}")))?;
            (id, generation, true)
        }
        _ => (cmd.new_node_id.clone(), 1, false),
    };

    let site = SiteId::new(&token.site_id)
        .map_err(|e| DecideError::Failed(format!("stored site id: {e}")))?;
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(ctx.trust_domain.clone(), site, node_id.clone()),
        role,
        serial: cmd.serial.clone(),
        requested_lifetime: Some(ctx.leaf_lifetime),
        statements: Vec::new(),
    };
    let issued = issue_node_certificate(ctx.node_ca, &opened.csr, &decision, now)
        .map_err(|e| DecideError::Failed(format!("issuing the node certificate: {e}")))?;

    let digest = |d: Option<[u8; 32]>| d.map(|d| d.to_vec()).unwrap_or_default();
    let outcome = Joined {
        node_id: node_id.as_str().to_owned(),
        tenant_id: token.tenant_id.clone(),
        token_id: token.token_id.clone(),
        site_id: token.site_id.clone(),
        role: role.as_str().to_owned(),
        identity_generation: generation,
        reclaimed,
        certificate_der: issued.der.clone(),
        not_after_us: unix_us(issued.not_after),
        csr_sha256: *opened.csr.sha256(),
    };
    events.push(IdentityEvent::NodeJoined(NodeJoined {
        node_id: node_id.as_str().to_owned(),
        tenant_id: token.tenant_id.clone(),
        site_id: token.site_id.clone(),
        pool_id: token.pool_id.clone(),
        role: role.as_str().to_owned(),
        attestor: JOIN_TOKEN_ATTESTOR.into(),
        node_key: NODE_KEY_UNATTESTED.into(),
        token_id: token.token_id.clone(),
        identity_generation: generation,
        product_uuid_sha256: digest(opened.digests.product_uuid),
        macs_sha256: digest(opened.digests.macs),
        hardware_key_sha256: digest(opened.digests.hardware_key),
        reclaimed,
        csr_sha256: opened.csr.sha256().to_vec(),
        allowed_kinds: Vec::new(),
        node_key_uri: String::new(),
    }));
    events.push(IdentityEvent::CertificateIssued(NodeCertificateIssued {
        node_id: node_id.as_str().to_owned(),
        serial: issued.serial.to_hex(),
        der: issued.der,
        not_before_us: unix_us(issued.not_before),
        not_after_us: unix_us(issued.not_after),
        identity_generation: generation,
        cause: "join".into(),
        renewed_serial: String::new(),
    }));
    events.push(IdentityEvent::TokenUsed(JoinTokenUsed {
        token_id: token.token_id.clone(),
        use_number: token.uses_total - token.uses_left + 1,
        node_id: node_id.as_str().to_owned(),
        uses_left: token.uses_left - 1,
        csr_key_sha256: opened.csr_key_sha256().to_vec(),
        key_use_expires_at_us: token.expires_at_us,
    }));
    Ok(Decision { events, outcome })
}
