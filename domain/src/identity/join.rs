//! Token joins. What every join is asked and answers (the machine's claims and their digests,
//! the decoded request, the keys a join needs, an admitted join) is [`super::join_terms`]'s. The
//! decision itself is on the attestor contract
//! ([`crate::attest`]): [`crate::attest::join_token::JoinTokenAttestor`] then the admission step
//! ([`crate::attest::admission::decide_admission`]).
//!
//! For callers without a store (the benches) the first step of a token join remains:
//! [`open_join`] refuses a role that is none, verifies the CSR and opens the sealed token with
//! the JoinService encryption key, bound to the CSR's SHA-256. The decision is then the
//! attestor's verify on the state ([`JoinState`]) and the admission step, as in production. A
//! claimed hardware key is recorded as a digest and has no power (issue 18 item 9): only a
//! token naming the node (`reclaim_node_id`) re-keys it.

use super::decision::sha256;
use super::join_terms::{claims_digests, ClaimsDigests, HardwareClaims, JoinContext, JoinInput};
use super::state::{NodeState, TokenRole, TokenState};
use crate::pki::{NodeId, SealedToken, Serial, TokenHash, TokenSecret, VerifiedCsr};

/// Why the `join-token` attestor refused a join, for callers that name its reasons. One variant
/// per reason; [`JoinRefusal::reason`] is the text. The admission step's own reasons
/// (`join:expect-mac`, `join:reclaim-mismatch`, ...) are [`crate::attest::admission`]'s.
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
}

impl JoinRefusal {
    /// Every reason, for tests and documentation.
    pub const ALL: [JoinRefusal; 8] = [
        JoinRefusal::BadCsr,
        JoinRefusal::TokenDoesNotOpen,
        JoinRefusal::UnknownToken,
        JoinRefusal::Revoked,
        JoinRefusal::Expired,
        JoinRefusal::NoUseLeft,
        JoinRefusal::CsrKeyUsed,
        JoinRefusal::WrongRole,
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

/// The state a token join reads.
#[derive(Debug, Clone, Default)]
pub struct JoinState {
    /// The token whose stored hash equals the secret's, if any.
    pub token: Option<TokenState>,
    /// Whether `attestation_uses` holds the CSR key's use ([`OpenedJoin::csr_key_sha256`]).
    pub csr_key_used: bool,
    /// The node the token reclaims (`reclaim_node_id`), if it exists.
    pub reclaimed: Option<NodeState>,
    /// The serials of that node's certificates not revoked yet (a reclaim revokes them).
    pub reclaimed_unrevoked_serials: Vec<String>,
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
