//! The join, minus the network: the request's parts and the transport trait.
//!
//! [`prepare_join`] makes the node key and its CSR and seals the token to the pinned JoinService
//! encryption key, bound to the CSR's SHA-256 ([`prepare`] for an attestor without a token).
//! [`crate::join::exchange`] runs the exchange through a [`JoinTransport`] (the gRPC client
//! implements it) and stores the answer. Nothing is written before the answer verified.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use domain::pki::{seal_token, NodeRole, Pin, PublicKey, SealedToken, TokenSecret};
use serde::Deserialize;

use crate::attest::{EvidenceError, JOIN_TOKEN, PROVISIONED, X509POP};
use crate::files::identity::StoreError;
use crate::join::hardware::HardwareClaims;
use crate::join::verify::{JoinRefusal, JoinResponseFields, SignedJoinResponse};
use crate::node_key::NodeKey;
use crate::renewal::request::csr_for;
use crate::renewal::schedule::Pushback;

/// The JoinService encryption key's file, beside `config.toml`.
pub const JOIN_ENCRYPTION_JWK: &str = "join-encryption.jwk";
/// The JoinService signing key's file, beside `config.toml`: the wire's `SignedJoinResponse`
/// carries no signer key, so bcd takes it from here and checks it against
/// `join_signing_key_pin` before verifying any answer with it.
pub const JOIN_SIGNING_JWK: &str = "join-signing.jwk";

/// Why a join failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// `join-encryption.jwk` or `join-signing.jwk` missing, unreadable or malformed.
    #[error(
        "{path}: {reason} (on the control plane, `bcctl node config --out DIR` writes it with \
         config.toml and the other JWK: copy DIR's files beside bcd's config.toml)"
    )]
    EncryptionKey {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The encryption (or signing) key is not the pinned one.
    #[error(
        "{path}: the key is {found}, not the one its pin in config.toml names ({pinned}); the file or the pin \
         is from another deployment"
    )]
    EncryptionKeyNotPinned {
        /// The file.
        path: String,
        /// Its pin.
        found: String,
        /// The configured pin.
        pinned: String,
    },
    /// Key, CSR or seal failed.
    #[error("bcd join: {0}")]
    Local(String),
    /// The control plane refused (ACCESS_DENIED); the reason is only server-side.
    #[error("Join refused (ACCESS_DENIED): {}", refused_hint(attestor, pending.as_deref()))]
    Refused {
        /// The attestor the join went through.
        attestor: String,
        /// The join request this join waited for, when it did.
        pending: Option<String>,
    },
    /// The join waited for an operator's approval longer than `--approval-timeout`.
    #[error(
        "bcd join: join request {request_id} was not approved within {waited} (--approval-timeout); \
         nothing was stored: approve it (bcctl join-request approve {request_id}) and run bcd join \
         again"
    )]
    ApprovalTimeout {
        /// The join request.
        request_id: String,
        /// The bound, as given.
        waited: String,
    },
    /// The exchange went on past `--approval-timeout` (challenges, no approval).
    #[error(
        "bcd join: the join did not finish within {0} (--approval-timeout); nothing was stored"
    )]
    Timeout(String),
    /// A challenge named another attestor than the one this join uses.
    #[error(
        "bcd join: the control plane sent a challenge for attestor {found:?}, but this join uses \
         {ours:?}: refused, nothing was stored"
    )]
    ChallengeForOther {
        /// The challenge's attestor.
        found: String,
        /// This join's.
        ours: String,
    },
    /// More challenges than [`crate::join::exchange::MAX_CHALLENGES`].
    #[error(
        "bcd join: the {attestor} attestor sent a challenge after {max} rounds of them; refused, \
         nothing was stored"
    )]
    TooManyChallenges {
        /// The attestor.
        attestor: String,
        /// The bound.
        max: u32,
    },
    /// A challenge whose `not_after` passed before it could be answered.
    #[error(
        "bcd join: the {attestor} challenge expired at {not_after} before it was answered \
         (check this machine's clock); nothing was stored"
    )]
    ChallengeExpired {
        /// The attestor.
        attestor: String,
        /// Its `not_after`, RFC 3339.
        not_after: String,
    },
    /// The producer could not build the evidence or answer the challenge.
    #[error("bcd join: {0}")]
    Evidence(#[from] EvidenceError),
    /// The issued identity is not the node `--node-id` names.
    #[error(
        "bcd join: the control plane issued an identity for node {found}, not for {expected} \
         (--node-id); nothing was stored"
    )]
    NotThatNode {
        /// The node issued.
        found: String,
        /// `--node-id`.
        expected: String,
    },
    /// Retryable failures used up the attempts.
    #[error("bcd join: gave up after {attempts} attempts: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Another failure from the transport.
    #[error("bcd join: {0}")]
    Transport(String),
    /// This build has no network client.
    #[error(
        "bcd join: joining over the network is not wired into this build yet; nothing was \
         written and the token was not sent"
    )]
    NotWired,
    /// The answer did not verify.
    #[error("bcd join: {0}")]
    Verify(#[from] JoinRefusal),
    /// Storing the identity failed.
    #[error("bcd join: {0}")]
    Store(#[from] StoreError),
}

fn refused_hint(attestor: &str, pending: Option<&str>) -> String {
    let base = match attestor {
        JOIN_TOKEN => "check the token (expired, used, for another site or role, or bound to another machine) with the operator".to_owned(),
        PROVISIONED => "check the provisioned token (expired, used, not for this machine's product UUID or for another node) with the operator".to_owned(),
        X509POP => "the identity on disk cannot re-join by x509pop (its certificate revoked, expired more than the grace ago, or of an older identity generation), or this machine's clock is more than 60 s off the server's, which x509pop refuses too: run bcd doctor first (it compares the clock with the server's), fix the clock if it is off and try again; else join again: bcd join --reset --yes, then bcd join".to_owned(),
        other => format!("the {other} attestor refused this machine's evidence; its reason is server-side"),
    };
    match pending {
        Some(id) => format!(
            "{base} (this join waited for join request {id}: an operator may have rejected it, see bcctl join-request show {id})"
        ),
        None => base,
    }
}

/// A failed Join call, as the transport classifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Worth retrying (UNAVAILABLE, RESOURCE_EXHAUSTED, a timeout...).
    Retryable {
        /// What happened.
        message: String,
        /// `grpc-retry-pushback-ms`, when the gateway sent one.
        pushback: Option<Pushback>,
    },
    /// ACCESS_DENIED.
    Refused,
    /// Anything else: not retried.
    Fatal(String),
    /// No network client in this build.
    NotWired,
}

/// What a Join request carries, built locally.
#[derive(Debug)]
pub struct JoinRequestParts {
    /// The CSR, DER.
    pub csr_der: Vec<u8>,
    /// Its SHA-256.
    pub csr_sha256: [u8; 32],
    /// The token sealed to the JoinService encryption key, bound to the CSR (none for an
    /// attestor without a token: x509pop, an external one).
    pub sealed_token: Option<SealedToken>,
    /// `JoinRequest.attestor` (empty: join-token).
    pub attestor: String,
    /// `JoinRequest.attestation`: this round's evidence (set by the join loop).
    pub evidence: Vec<u8>,
    /// The role asked for.
    pub role: NodeRole,
    /// What the machine claims about its hardware ([`crate::join::hardware`]).
    pub claims: HardwareClaims,
    /// bcd's version.
    pub daemon_version: &'static str,
}

/// The Join call and the wire decoding; the gRPC client implements it.
pub trait JoinTransport {
    /// Sends one Join request.
    fn join(&mut self, request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError>;
    /// Decodes a signed JoinResponse body (`bc.wire.v1.JoinResponse`).
    fn decode_body(&self, body: &[u8]) -> Result<JoinResponseFields, String>;
}

/// The transport of a build without a network client.
#[derive(Debug, Default)]
pub struct NotWiredTransport;

impl JoinTransport for NotWiredTransport {
    fn join(&mut self, _request: &JoinRequestParts) -> Result<SignedJoinResponse, CallError> {
        Err(CallError::NotWired)
    }
    fn decode_body(&self, _body: &[u8]) -> Result<JoinResponseFields, String> {
        Err("no wire decoder in this build".to_owned())
    }
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    crv: String,
    x: String,
    y: String,
}

/// Reads `join-encryption.jwk` (an EC P-256 public JWK) and checks it against the pin.
pub fn load_join_encryption_key(path: &Path, pin: &Pin) -> Result<PublicKey, JoinError> {
    load_pinned_jwk(path, pin)
}

/// Reads `join-signing.jwk` (an EC P-256 public JWK) and checks it against
/// `join_signing_key_pin`.
pub fn load_join_signing_key(path: &Path, pin: &Pin) -> Result<PublicKey, JoinError> {
    load_pinned_jwk(path, pin)
}

fn load_pinned_jwk(path: &Path, pin: &Pin) -> Result<PublicKey, JoinError> {
    let shown = path.display().to_string();
    let bad = |reason: String| JoinError::EncryptionKey {
        path: shown.clone(),
        reason,
    };
    let text = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let jwk: Jwk = serde_json::from_slice(&text).map_err(|e| bad(format!("not a JWK: {e}")))?;
    if jwk.kty != "EC" || jwk.crv != "P-256" {
        return Err(bad(format!("a {} {} key, not EC P-256", jwk.kty, jwk.crv)));
    }
    let coord = |c: &str| {
        URL_SAFE_NO_PAD
            .decode(c)
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or_else(|| bad("x or y is not 32 bytes of base64url".to_owned()))
    };
    let mut point = vec![0x04];
    point.extend(coord(&jwk.x)?);
    point.extend(coord(&jwk.y)?);
    let key = PublicKey::from_uncompressed_point(&point).map_err(|e| bad(e.to_string()))?;
    if !pin.matches(&key) {
        return Err(JoinError::EncryptionKeyNotPinned {
            path: shown,
            found: key.pin().to_string(),
            pinned: pin.to_string(),
        });
    }
    Ok(key)
}

/// A join ready to send: the new key (not yet on disk) and the request.
#[derive(Debug)]
pub struct PreparedJoin {
    /// The new node key; stored only once the answer verified.
    pub key: NodeKey,
    /// The request.
    pub request: JoinRequestParts,
}

/// Makes the node key and CSR and seals the token, bound to the CSR's SHA-256; the request
/// carries `claims` and names join-token.
pub fn prepare_join(
    encryption_key: &PublicKey,
    token: &TokenSecret,
    role: NodeRole,
    claims: HardwareClaims,
) -> Result<PreparedJoin, JoinError> {
    prepare(Some((encryption_key, token)), JOIN_TOKEN, role, claims)
}

/// Makes a file node key and the CSR for a join through `attestor` (its id), sealing `token`
/// to the encryption key when there is one. One key and CSR for the whole exchange.
pub fn prepare(
    token: Option<(&PublicKey, &TokenSecret)>,
    attestor: &str,
    role: NodeRole,
    claims: HardwareClaims,
) -> Result<PreparedJoin, JoinError> {
    let key = NodeKey::generate_file().map_err(JoinError::Local)?;
    prepare_with_key(key, token, attestor, role, claims)
}

/// [`prepare`] with the node key given (made in the TPM, or a file: [`crate::node_key`]).
pub fn prepare_with_key(
    key: NodeKey,
    token: Option<(&PublicKey, &TokenSecret)>,
    attestor: &str,
    role: NodeRole,
    claims: HardwareClaims,
) -> Result<PreparedJoin, JoinError> {
    let (csr_der, _) = csr_for(&key).map_err(JoinError::Local)?;
    prepare_with_csr(key, csr_der, token, attestor, role, claims)
}

/// [`prepare_with_key`] with the CSR given too: a request kept in `join.pending`, sent again
/// byte for byte ([`crate::join::pending`]).
pub fn prepare_with_csr(
    key: NodeKey,
    csr_der: Vec<u8>,
    token: Option<(&PublicKey, &TokenSecret)>,
    attestor: &str,
    role: NodeRole,
    claims: HardwareClaims,
) -> Result<PreparedJoin, JoinError> {
    let csr_sha256: [u8; 32] = domain::identity::sha256(&csr_der);
    let sealed_token = match token {
        Some((encryption_key, token)) => Some(
            seal_token(encryption_key, token, &csr_sha256)
                .map_err(|e| JoinError::Local(format!("sealing the token: {e}")))?,
        ),
        None => None,
    };
    Ok(PreparedJoin {
        key,
        request: JoinRequestParts {
            csr_der,
            csr_sha256,
            sealed_token,
            attestor: crate::attest::wire_attestor(attestor),
            evidence: Vec::new(),
            role,
            claims,
            daemon_version: env!("CARGO_PKG_VERSION"),
        },
    })
}
