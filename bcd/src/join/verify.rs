//! Verifying a JoinResponse on the agent before anything of it is trusted or stored.
//!
//! The wire form (`bc.wire.v1.SignedJoinResponse`) is a signed, encoded JoinResponse body, the
//! signature and the signer's public key. This module does not know protobuf: the caller passes
//! the three as a [`SignedJoinResponse`] and a decoder that turns the *signed bytes* into
//! [`JoinResponseFields`], so every field checked here comes from what was signed.
//!
//! [`verify_join_response`] checks, in this order, each failure a typed [`JoinRefusal`]:
//!
//! 1. the signer's key is the one `join_signing_key_pin` names;
//! 2. the body decodes;
//! 3. its `csr_sha256` is this request's;
//! 4. the signature verifies under purpose `join-response` over (this request's CSR hash, the
//!    body) with `domain::pki::statement`;
//! 5. the body's trust domain is the one expected (when the configuration names one);
//! 6. the leaf carries exactly one SPIFFE ID, in that trust domain, and one agent role;
//! 7. the leaf certifies this request's key;
//! 8. the role is the one asked for (and the node, for a provisioned join);
//! 9. the signed trust bundle (fields 13 to 15) checks exactly like a Welcome's
//!    ([`crate::trust::bundle::verify_welcome_trust`] under the same signing key and the body's
//!    trust domain); its version, roots, content and signed bytes are what `identity.json` keeps.
//!
//! A deferral (the body's `oneof deferral`: `JoinPending` or `JoinChallenge`) issues nothing and
//! is never taken for a join: [`verify_join_response`] refuses it ([`JoinRefusal::Deferral`]).
//! [`read_join_answer`] is the join loop's reader: steps 1 to 4 for every answer, then it
//! classifies the answer as joined (steps 5 to 8, exactly as [`verify_join_response`]), pending
//! or challenge. A deferral that also carries a certificate or a node id is refused as malformed.

use domain::pki::statement::{verify, JoinResponseStatement};
use domain::pki::{IdentityError, NodeIdentity, NodeRole, Pin, PublicKey, Signature, TrustDomain};

use crate::files::identity::{StoredIdentity, TrustState};

/// A signed JoinResponse as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedJoinResponse {
    /// The encoded JoinResponse body, exactly as signed.
    pub body: Vec<u8>,
    /// ES256 signature, `r || s` (64 bytes).
    pub signature: Vec<u8>,
    /// The signer's SubjectPublicKeyInfo DER.
    pub signer_spki_der: Vec<u8>,
}

/// The fields of a JoinResponse body the agent uses, decoded from the signed bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinResponseFields {
    /// SHA-256 of the CSR this answers.
    pub csr_sha256: Vec<u8>,
    /// The deployment's trust domain.
    pub trust_domain: String,
    /// The leaf certificate, DER.
    pub leaf_der: Vec<u8>,
    /// The rest of the chain (node CA, ...), DER, leaf excluded.
    pub chain_ders: Vec<Vec<u8>>,
    /// The trust bundle version.
    pub trust_version: u64,
    /// Command-signing roots, DER.
    pub trust_roots: Vec<Vec<u8>>,
    /// The serialized trust bundle, when sent.
    pub trust_bundle: Option<Vec<u8>>,
    /// JoinResponse field 14: the signed `bc.wire.v1.TrustBundle` bytes, as a Welcome
    /// carries them (empty: none published).
    pub signed_trust_bundle: Vec<u8>,
    /// Field 15: its signature by the JoinService signing key.
    pub trust_bundle_signature: Vec<u8>,
    /// The node id the body names (empty on a deferral).
    pub node_id: String,
    /// The body's deferral, when it is one.
    pub deferral: Option<DeferralFields>,
    /// The JoinService's clock at the decision, Unix ms (0: not sent). Signed, so it raises
    /// the `serverTime` high-water mark.
    pub server_time_ms: i64,
    /// Field 16: the command kinds the certificate allows (empty: every kind its role allows).
    /// Signed, so bcd enforces them whatever a gateway sends it.
    pub allowed_kinds: Vec<String>,
}

/// A JoinResponse body's `oneof deferral`, decoded from the signed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeferralFields {
    /// `JoinPending`: an operator must approve the join request first.
    Pending {
        /// The join request (`jr_...`).
        request_id: String,
        /// When to send the same CSR again (the agent waits at least 1 s).
        retry_after_seconds: u32,
    },
    /// `JoinChallenge`: the attestor asks a question.
    Challenge {
        /// The attestor asking.
        attestor: String,
        /// Its bytes, for that attestor's producer.
        payload: Vec<u8>,
        /// Answers after this (unix ms) are refused.
        not_after_ms: i64,
    },
}

/// What this request expects of its answer.
#[derive(Debug, Clone)]
pub struct JoinExpectation<'a> {
    /// `join_signing_key_pin`.
    pub join_signing_pin: Pin,
    /// SHA-256 of the CSR sent.
    pub csr_sha256: [u8; 32],
    /// The key the CSR carries.
    pub node_key: &'a PublicKey,
    /// The role asked for.
    pub role: NodeRole,
    /// The trust domain, when the configuration names one; else the signed body's is taken.
    pub trust_domain: Option<&'a TrustDomain>,
    /// The node a provisioned join must become.
    pub node_id: Option<&'a str>,
}

/// Why a JoinResponse was refused. Nothing of a refused response is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefusal {
    /// Signed by another key than the pinned one.
    #[error(
        "the JoinResponse is signed by {found}, not by the pinned join signing key {pinned} \
         (check join_signing_key_pin against `bcctl pki show`)"
    )]
    WrongSigner {
        /// Pin of the key that signed.
        found: String,
        /// The configured pin.
        pinned: String,
    },
    /// The signer's key is not a P-256 key.
    #[error("the JoinResponse's signer key is not a P-256 public key")]
    BadSignerKey,
    /// The body does not decode.
    #[error("the JoinResponse body does not decode: {0}")]
    Undecodable(String),
    /// The signed trust bundle the answer carries does not check.
    #[error("the JoinResponse's trust bundle was refused: {0}")]
    TrustBundle(crate::trust::bundle::TrustBundleRefusal),
    /// The (authentic) answer is a deferral, which issues nothing: never taken for a join.
    #[error("the JoinResponse is a deferral ({0}), not a join: it issues nothing")]
    Deferral(&'static str),
    /// A deferral that carries a certificate or a node id.
    #[error("the JoinResponse is a deferral that also carries a certificate or a node id")]
    MalformedDeferral,
    /// An answer that is neither a deferral nor carries a certificate.
    #[error("the JoinResponse carries no certificate")]
    NoCertificate,
    /// The response answers another CSR.
    #[error("the JoinResponse answers another request (its csr_sha256 is not this CSR's)")]
    CsrMismatch,
    /// The signature does not verify.
    #[error("the JoinResponse signature does not verify under the pinned join signing key")]
    BadSignature,
    /// The body names an invalid or unexpected trust domain.
    #[error("the JoinResponse is for trust domain {found:?}, expected {expected:?}")]
    TrustDomain {
        /// In the body.
        found: String,
        /// Expected.
        expected: String,
    },
    /// The leaf is not a node certificate of this trust domain.
    #[error("the JoinResponse's certificate: {0}")]
    Leaf(IdentityError),
    /// The leaf certifies another key.
    #[error("the JoinResponse's certificate does not certify this node's key")]
    NotOurKey,
    /// The role is not the one asked for.
    #[error("the JoinResponse's certificate is for role {found}, this join asked for {asked}")]
    WrongRole {
        /// In the certificate.
        found: NodeRole,
        /// Asked for.
        asked: NodeRole,
    },
    /// A provisioned join came back as another node.
    #[error(
        "the JoinResponse's certificate is for node {found}, this join is for node {expected}"
    )]
    WrongNode {
        /// In the certificate.
        found: String,
        /// Expected.
        expected: String,
    },
}

/// A verified JoinResponse: what a join stores.
#[derive(Debug, Clone)]
pub struct VerifiedJoin {
    /// The leaf's identity.
    pub leaf: NodeIdentity,
    /// The chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The trust state the response carried.
    pub trust: TrustState,
    /// The signed response, kept as signed (root's record under the helper).
    pub signed: SignedJoinResponse,
    /// The command kinds the certificate allows (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}

impl VerifiedJoin {
    /// `identity.json` for this join.
    pub fn stored_identity(&self) -> StoredIdentity {
        let mut stored = StoredIdentity::new(&self.leaf, self.chain.clone(), self.trust.clone());
        stored.allowed_kinds = self.allowed_kinds.clone();
        stored
    }
}

/// An authentic answer to this request, classified.
#[derive(Debug, Clone)]
pub enum JoinAnswer {
    /// Joined: the answer verified in full (steps 1 to 8).
    Joined(Box<VerifiedJoin>),
    /// Pending an operator's approval of `request_id`.
    Pending {
        /// The join request.
        request_id: String,
        /// The server's retry hint, seconds (the loop waits at least 1 s).
        retry_after_seconds: u32,
    },
    /// A question from `attestor`.
    Challenge {
        /// The attestor asking.
        attestor: String,
        /// Its bytes.
        payload: Vec<u8>,
        /// Answers after this (unix ms) are refused.
        not_after_ms: i64,
    },
}

/// Steps 1 to 4: the pinned signer, the body, the CSR binding, the signature.
fn authenticate<E: std::fmt::Display>(
    signed: &SignedJoinResponse,
    decode: impl FnOnce(&[u8]) -> Result<JoinResponseFields, E>,
    expect: &JoinExpectation<'_>,
) -> Result<JoinResponseFields, JoinRefusal> {
    let found = Pin::of_spki_der(&signed.signer_spki_der);
    if found != expect.join_signing_pin {
        return Err(JoinRefusal::WrongSigner {
            found: found.to_string(),
            pinned: expect.join_signing_pin.to_string(),
        });
    }
    let signer =
        PublicKey::from_spki_der(&signed.signer_spki_der).map_err(|_| JoinRefusal::BadSignerKey)?;
    let fields = decode(&signed.body).map_err(|e| JoinRefusal::Undecodable(e.to_string()))?;
    if fields.csr_sha256.as_slice() != expect.csr_sha256.as_slice() {
        return Err(JoinRefusal::CsrMismatch);
    }
    let signature = Signature::from_bytes(&signed.signature).ok_or(JoinRefusal::BadSignature)?;
    let statement = JoinResponseStatement {
        csr_sha256: expect.csr_sha256,
        response: &signed.body,
    };
    verify(&signer, &statement, &signature).map_err(|_| JoinRefusal::BadSignature)?;
    Ok(fields)
}

/// Verifies `signed` against `expect` as a join (see the module documentation for the order).
/// A deferral, however authentic, is refused: it is never taken for a join.
pub fn verify_join_response<E: std::fmt::Display>(
    signed: &SignedJoinResponse,
    decode: impl FnOnce(&[u8]) -> Result<JoinResponseFields, E>,
    expect: &JoinExpectation<'_>,
) -> Result<VerifiedJoin, JoinRefusal> {
    let fields = authenticate(signed, decode, expect)?;
    match fields.deferral {
        Some(DeferralFields::Pending { .. }) => Err(JoinRefusal::Deferral("pending")),
        Some(DeferralFields::Challenge { .. }) => Err(JoinRefusal::Deferral("challenge")),
        None => verify_joined(signed, fields, expect),
    }
}

/// The join loop's reader: authenticates `signed` (steps 1 to 4) and classifies it. A join is
/// verified in full; a deferral must carry no certificate and no node id.
pub fn read_join_answer<E: std::fmt::Display>(
    signed: &SignedJoinResponse,
    decode: impl FnOnce(&[u8]) -> Result<JoinResponseFields, E>,
    expect: &JoinExpectation<'_>,
) -> Result<JoinAnswer, JoinRefusal> {
    let mut fields = authenticate(signed, decode, expect)?;
    let Some(deferral) = fields.deferral.take() else {
        return Ok(JoinAnswer::Joined(Box::new(verify_joined(
            signed, fields, expect,
        )?)));
    };
    if !fields.leaf_der.is_empty() || !fields.chain_ders.is_empty() || !fields.node_id.is_empty() {
        return Err(JoinRefusal::MalformedDeferral);
    }
    Ok(match deferral {
        DeferralFields::Pending {
            request_id,
            retry_after_seconds,
        } => JoinAnswer::Pending {
            request_id,
            retry_after_seconds,
        },
        DeferralFields::Challenge {
            attestor,
            payload,
            not_after_ms,
        } => JoinAnswer::Challenge {
            attestor,
            payload,
            not_after_ms,
        },
    })
}

/// Steps 5 to 8 on an authenticated, non-deferral body.
fn verify_joined(
    signed: &SignedJoinResponse,
    fields: JoinResponseFields,
    expect: &JoinExpectation<'_>,
) -> Result<VerifiedJoin, JoinRefusal> {
    if fields.leaf_der.is_empty() {
        return Err(JoinRefusal::NoCertificate);
    }
    let td_error = || JoinRefusal::TrustDomain {
        found: fields.trust_domain.clone(),
        expected: expect
            .trust_domain
            .map(|t| t.to_string())
            .unwrap_or_else(|| "a valid trust domain".to_owned()),
    };
    let trust_domain = TrustDomain::new(&fields.trust_domain).map_err(|_| td_error())?;
    if expect
        .trust_domain
        .is_some_and(|want| *want != trust_domain)
    {
        return Err(td_error());
    }
    let leaf =
        NodeIdentity::from_leaf_der(&fields.leaf_der, &trust_domain).map_err(JoinRefusal::Leaf)?;
    if &leaf.public_key != expect.node_key {
        return Err(JoinRefusal::NotOurKey);
    }
    if leaf.role != expect.role {
        return Err(JoinRefusal::WrongRole {
            found: leaf.role,
            asked: expect.role,
        });
    }
    if let Some(node) = expect.node_id {
        if leaf.spiffe_id.node.as_str() != node {
            return Err(JoinRefusal::WrongNode {
                found: leaf.spiffe_id.node.to_string(),
                expected: node.to_owned(),
            });
        }
    }
    let signer =
        PublicKey::from_spki_der(&signed.signer_spki_der).map_err(|_| JoinRefusal::BadSignerKey)?;
    let bundle = crate::trust::bundle::verify_welcome_trust(
        &signer,
        &trust_domain,
        &proto::Welcome {
            trust_version: fields.trust_version,
            signed_trust_bundle: fields.signed_trust_bundle.clone(),
            trust_bundle_signature: fields.trust_bundle_signature.clone(),
            ..Default::default()
        },
    )
    .map_err(JoinRefusal::TrustBundle)?;
    // Signed with the rest of the body: a time the node may judge signed things at.
    let server_time = (fields.server_time_ms > 0)
        .then(|| {
            time::OffsetDateTime::from_unix_timestamp_nanos(
                i128::from(fields.server_time_ms) * 1_000_000,
            )
            .ok()
        })
        .flatten();
    let trust = match bundle {
        Some(bundle) => TrustState {
            trust_version: bundle.version,
            trust_roots: bundle.roots,
            trust_bundle: Some(bundle.content),
            signed_trust_bundle: Some(bundle.signed),
            server_time,
        },
        None => TrustState {
            trust_version: 0,
            trust_roots: fields.trust_roots,
            trust_bundle: fields.trust_bundle,
            signed_trust_bundle: None,
            server_time,
        },
    };
    let mut chain = Vec::with_capacity(1 + fields.chain_ders.len());
    chain.push(fields.leaf_der);
    chain.extend(fields.chain_ders);
    Ok(VerifiedJoin {
        leaf,
        chain,
        trust,
        signed: signed.clone(),
        allowed_kinds: fields.allowed_kinds,
    })
}
