//! Token joins. What every join is asked and answers (the machine's claims and their digests,
//! the decoded request, the keys a join needs, an admitted join) is [`super::join_terms`]'s. The
//! decision itself is on the attestor contract
//! ([`crate::attest`]): [`crate::attest::join_token::JoinTokenAttestor`] then the admission step
//! ([`crate::attest::admission::decide_admission`]).
//!
//! For callers without a store (the benches) the two pure steps of a token join remain:
//!
//! 1. [`open_join`]: refuse a role that is none, verify the CSR, open the sealed token with the
//!    JoinService encryption key, bound to the CSR's SHA-256;
//! 2. [`decide_join`]: the attestor's verify on the given state, then the admission step. A
//!    claimed hardware key is recorded as a digest and has no power (issue 18 item 9): only a
//!    token naming the node (`reclaim_node_id`) re-keys it.

use time::OffsetDateTime;

use super::decision::{sha256, DecideError, Decision};
use super::join_terms::{
    claims_digests, ClaimsDigests, HardwareClaims, JoinContext, JoinInput, Joined,
    JOIN_TOKEN_ATTESTOR,
};
use super::state::{NodeState, TokenRole, TokenState};
use crate::attest::admission::{decide_admission, Admission, AdmissionCommand, AdmissionFacts};
use crate::attest::join_token::JoinTokenAttestor;
use crate::attest::{AttestRequest, Attestor, AttestorRefusal, Entropy, Facts, Verdict};
use crate::pki::{NodeId, NodeRole, SealedToken, Serial, TokenHash, TokenSecret, VerifiedCsr};

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

/// Step 2: the whole token join on the attestor contract, for callers without a store (the
/// benches): [`JoinTokenAttestor`]'s verify on `state`, then [`decide_admission`] (no pool, no
/// bindings, no join request). The command layer runs the same two steps on loaded facts.
pub fn decide_join(
    ctx: &JoinContext<'_>,
    cmd: &JoinCommand,
    state: &JoinState,
    now: OffsetDateTime,
) -> Result<Decision<Joined>, DecideError<AttestorRefusal>> {
    let opened = &cmd.opened;
    let role: NodeRole = opened.role.parse().map_err(|_| {
        DecideError::Refused(AttestorRefusal::new(JOIN_TOKEN_ATTESTOR, "wrong-role"))
    })?;
    let request = AttestRequest {
        role,
        csr: &opened.csr,
        claims: &opened.claims,
        digests: &opened.digests,
        evidence: &[],
        token: Some(&opened.secret),
        now,
        // join-token draws no randomness: any seed does.
        entropy: &Entropy::from_seed([0; 32]),
    };
    let key = (JOIN_TOKEN_ATTESTOR.to_owned(), opened.csr_key_sha256());
    let mut facts = Facts {
        tokens: state.token.iter().cloned().collect(),
        ..Facts::default()
    };
    if state.csr_key_used {
        facts.uses.insert(key.clone());
    }
    let result = match JoinTokenAttestor.verify(&request, &(), &facts) {
        Verdict::Admit(r) => r,
        Verdict::Refuse(r) => return Err(DecideError::Refused(r)),
        Verdict::Challenge(_) => {
            return Err(DecideError::Failed("join-token never challenges".into()))
        }
    };
    let mut admission_facts = AdmissionFacts {
        reclaimed: state.reclaimed.clone(),
        reclaimed_unrevoked_serials: state.reclaimed_unrevoked_serials.clone(),
        ..AdmissionFacts::default()
    };
    if state.csr_key_used {
        admission_facts.uses.insert(key);
    }
    let admission = AdmissionCommand {
        attestor: JOIN_TOKEN_ATTESTOR,
        csr: &opened.csr,
        claims: &opened.claims,
        digests: &opened.digests,
        result: &result,
        new_node_id: &cmd.new_node_id,
        serial: &cmd.serial,
        new_request_id: "",
    };
    let Decision { events, outcome } = decide_admission(ctx, &admission, &admission_facts, now)?
        .sign(ctx.node_ca, &opened.csr, now)?;
    match outcome {
        Admission::Joined(joined) => Ok(Decision {
            events,
            outcome: *joined,
        }),
        Admission::Pending(_) => Err(DecideError::Failed(
            "the token requires approval: join through the command layer".into(),
        )),
    }
}
