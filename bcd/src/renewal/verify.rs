//! Verifying a renewal answer on the agent before anything of it is stored (issue 17).
//!
//! The gateway relays the answer; only the JoinService signs it, so a gateway (or anyone who
//! holds a serving certificate) cannot hand a node a certificate of its own making. Like
//! [`crate::join::verify`], this module does not know protobuf: the caller passes the signed
//! bytes and their signature as a [`SignedRenewal`] and a decoder that turns the *signed bytes*
//! into [`RenewalFields`], so every field checked here comes from what was signed.
//!
//! [`verify_renewal`] checks, in this order, each failure a typed [`RenewalRefusal`]:
//!
//! 1. the body decodes;
//! 2. its `csr_sha256` is this request's;
//! 3. the signature verifies under the pinned JoinService signing key, purpose
//!    `renew-response`, over (this request's CSR hash, the body);
//! 4. the body names this node's trust domain, node, site and role;
//! 5. the leaf names the same node, site, trust domain and role (spec 002's message) and
//!    certifies the new key (spec 002's message), by [`check_renewal_answer`];
//! 6. the leaf's lifetime is within the role's maximum (24 h, 2 h for a ramdisk);
//! 7. the chain is the leaf and this node's CA: the CA certificate sent carries the key of the
//!    node CA the node already holds (from its verified join) and signed the leaf.
//!
//! A refused answer stores nothing: `identity.json` and `node.key` stay as they were and the
//! caller removes `node.key.next`.

use domain::pki::statement::{verify, RenewResponseStatement};
use domain::pki::{issued_by, NodeIdentity, PublicKey, Signature};
use time::OffsetDateTime;

use crate::renewal::request::{check_renewal_answer, RenewalAnswerError};

/// A signed renewal answer as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRenewal {
    /// The encoded RenewResponse body, exactly as signed.
    pub body: Vec<u8>,
    /// ES256 signature, `r || s` (64 bytes).
    pub signature: Vec<u8>,
}

/// The fields of a RenewResponse body the agent uses, decoded from the signed bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenewalFields {
    /// SHA-256 of the new CSR this answers.
    pub csr_sha256: Vec<u8>,
    /// Trust domain, node, site and role the JoinService renewed.
    pub trust_domain: String,
    /// Node id.
    pub node_id: String,
    /// Site id.
    pub site_id: String,
    /// Role.
    pub role: String,
    /// The chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The JoinService's clock at the decision, unix milliseconds.
    pub server_time_ms: i64,
    /// The command kinds the new certificate allows (empty: every kind its role allows).
    pub allowed_kinds: Vec<String>,
}

/// What this renewal expects of its answer.
#[derive(Debug, Clone, Copy)]
pub struct RenewalExpectation<'a> {
    /// The JoinService signing key (`join-signing.jwk`, checked against its pin).
    pub join_signing_key: &'a PublicKey,
    /// SHA-256 of the CSR sent.
    pub csr_sha256: [u8; 32],
    /// The identity being renewed (the current leaf).
    pub current: &'a NodeIdentity,
    /// The current chain, leaf first: its second certificate is the node CA the node holds.
    pub current_chain: &'a [Vec<u8>],
    /// The public key the new CSR carries.
    pub next_key: &'a PublicKey,
}

/// Why a renewal answer was refused. Nothing of a refused answer is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenewalRefusal {
    /// The body does not decode.
    #[error("renewal: the answer does not decode: {0}")]
    Undecodable(String),
    /// The answer is for another request.
    #[error("renewal: the answer is for another request (its csr_sha256 is not this CSR's)")]
    CsrMismatch,
    /// The signature does not verify.
    #[error(
        "renewal: the answer's signature does not verify under the pinned join signing key \
         (join_signing_key_pin): the gateway relayed an answer the JoinService did not sign"
    )]
    BadSignature,
    /// The signed body names another identity than the leaf being renewed.
    #[error("renewal: the answer is for {found}, not {expected}")]
    BodyIdentity {
        /// `<trust domain> <site>/<node> (<role>)` in the body.
        found: String,
        /// This node's.
        expected: String,
    },
    /// The leaf names another identity or certifies another key (spec 002's messages).
    #[error(transparent)]
    Answer(#[from] RenewalAnswerError),
    /// The chain does not lead to this node's CA.
    #[error("renewal: the certificate is not issued by this node's CA ({0})")]
    ForeignChain(&'static str),
    /// The lifetime is over the role's maximum.
    #[error(
        "renewal: the certificate lives {hours} h, more than the {max_hours} h a {role} \
         certificate may"
    )]
    TooLong {
        /// notAfter - notBefore, whole hours (rounded up).
        hours: i64,
        /// The role's maximum, hours.
        max_hours: i64,
        /// The role.
        role: String,
    },
}

/// A verified renewal answer: what a renewal stores.
#[derive(Debug, Clone)]
pub struct VerifiedRenewal {
    /// The new leaf's identity.
    pub leaf: NodeIdentity,
    /// The chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The JoinService's signed clock, when it is a valid time.
    pub server_time: Option<OffsetDateTime>,
    /// The command kinds the new certificate allows, signed (empty: every kind its role
    /// allows).
    pub allowed_kinds: Vec<String>,
}

fn who(td: &str, site: &str, node: &str, role: &str) -> String {
    format!("{td} {site}/{node} ({role})")
}

/// Verifies `signed` against `expect` (see the module documentation for the order).
pub fn verify_renewal<E: std::fmt::Display>(
    signed: &SignedRenewal,
    decode: impl FnOnce(&[u8]) -> Result<RenewalFields, E>,
    expect: &RenewalExpectation<'_>,
) -> Result<VerifiedRenewal, RenewalRefusal> {
    let fields = decode(&signed.body).map_err(|e| RenewalRefusal::Undecodable(e.to_string()))?;
    if fields.csr_sha256.as_slice() != expect.csr_sha256.as_slice() {
        return Err(RenewalRefusal::CsrMismatch);
    }
    let signature = Signature::from_bytes(&signed.signature).ok_or(RenewalRefusal::BadSignature)?;
    let statement = RenewResponseStatement {
        csr_sha256: expect.csr_sha256,
        response: &signed.body,
    };
    verify(expect.join_signing_key, &statement, &signature)
        .map_err(|_| RenewalRefusal::BadSignature)?;

    let id = &expect.current.spiffe_id;
    let expected = who(
        id.trust_domain.as_str(),
        id.site.as_str(),
        id.node.as_str(),
        expect.current.role.as_str(),
    );
    let found = who(
        &fields.trust_domain,
        &fields.site_id,
        &fields.node_id,
        &fields.role,
    );
    if found != expected {
        return Err(RenewalRefusal::BodyIdentity { found, expected });
    }

    let leaf_der = fields.chain.first().ok_or(RenewalAnswerError::Leaf(
        "the answer carries no certificate".to_owned(),
    ))?;
    let leaf = check_renewal_answer(expect.current, leaf_der, expect.next_key)?;

    let lifetime = leaf.not_after - leaf.not_before;
    let max = leaf.role.max_lifetime();
    if lifetime > max {
        return Err(RenewalRefusal::TooLong {
            hours: (lifetime.whole_seconds() + 3599) / 3600,
            max_hours: max.whole_hours(),
            role: leaf.role.to_string(),
        });
    }
    let held_ca = expect
        .current_chain
        .get(1)
        .ok_or(RenewalRefusal::ForeignChain(
            "the stored chain holds no node CA to check it against",
        ))?;
    let sent_ca = fields.chain.get(1).ok_or(RenewalRefusal::ForeignChain(
        "the answer carries no CA certificate",
    ))?;
    if fields.chain.len() != 2 {
        return Err(RenewalRefusal::ForeignChain(
            "the chain is not exactly the leaf and the node CA",
        ));
    }
    if spki(sent_ca).is_none() || spki(sent_ca) != spki(held_ca) {
        return Err(RenewalRefusal::ForeignChain(
            "its CA is not the node CA this node joined under",
        ));
    }
    if !issued_by(leaf_der, sent_ca) {
        return Err(RenewalRefusal::ForeignChain(
            "the node CA's signature on it does not verify",
        ));
    }

    Ok(VerifiedRenewal {
        leaf,
        chain: fields.chain,
        server_time: OffsetDateTime::from_unix_timestamp_nanos(
            i128::from(fields.server_time_ms) * 1_000_000,
        )
        .ok(),
        allowed_kinds: fields.allowed_kinds,
    })
}

/// The SubjectPublicKeyInfo of a CA certificate (DER), `None` when it does not parse.
fn spki(der: &[u8]) -> Option<Vec<u8>> {
    use x509_parser::prelude::FromDer as _;
    match x509_parser::certificate::X509Certificate::from_der(der) {
        Ok(([], cert)) => Some(cert.public_key().raw.to_vec()),
        _ => None,
    }
}
