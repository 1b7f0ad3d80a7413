//! The join, minus the network: the request's parts, the retry loop, and storing the answer.
//!
//! [`prepare_join`] makes the node key and its CSR and seals the token to the pinned JoinService
//! encryption key, bound to the CSR's SHA-256. [`run_join`] sends it through a [`JoinTransport`]
//! (the gRPC client implements it), retrying retryable failures up to 20 attempts with
//! [`crate::renewal_schedule::join_retry`], then verifies the answer with
//! [`crate::verify_join::verify_join_response`] and stores it with
//! [`crate::identity_store::store_joined`]. Nothing is written before the answer verified.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use domain::pki::{
    seal_token, KeyRole, NodeRole, Pin, PrivateKey, PublicKey, SealedToken, TokenSecret,
    TrustDomain,
};
use serde::Deserialize;
use time::{Duration, OffsetDateTime};

use crate::config::JoinPins;
use crate::files::DataDir;
use crate::hardware::HardwareClaims;
use crate::identity_store::{store_joined, JoinStored, StoreError};
use crate::renewal::csr_for;
use crate::renewal_schedule::{join_retry, JoinRetry, Pushback};
use crate::verify_join::{
    verify_join_response, JoinExpectation, JoinRefusal, JoinResponseFields, SignedJoinResponse,
    VerifiedJoin,
};

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
    #[error("{path}: {reason} (copy it from the control plane: `bcctl pki show`)")]
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
    #[error("Join refused (ACCESS_DENIED): check the token (expired, used, for another site or role, or bound to another machine) with the operator")]
    Refused,
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
    /// The token sealed to the JoinService encryption key, bound to the CSR.
    pub sealed_token: SealedToken,
    /// The role asked for.
    pub role: NodeRole,
    /// What the machine claims about its hardware ([`crate::hardware`]).
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
    pub key: PrivateKey,
    /// The request.
    pub request: JoinRequestParts,
}

/// Makes the node key and CSR and seals the token, bound to the CSR's SHA-256; the request
/// carries `claims`.
pub fn prepare_join(
    encryption_key: &PublicKey,
    token: &TokenSecret,
    role: NodeRole,
    claims: HardwareClaims,
) -> Result<PreparedJoin, JoinError> {
    let key = PrivateKey::generate(KeyRole::Node).map_err(|e| JoinError::Local(e.to_string()))?;
    let (csr_der, csr_sha256) = csr_for(&key).map_err(JoinError::Local)?;
    let sealed_token = seal_token(encryption_key, token, &csr_sha256)
        .map_err(|e| JoinError::Local(format!("sealing the token: {e}")))?;
    Ok(PreparedJoin {
        key,
        request: JoinRequestParts {
            csr_der,
            csr_sha256,
            sealed_token,
            role,
            claims,
            daemon_version: env!("CARGO_PKG_VERSION"),
        },
    })
}

/// A stored join.
#[derive(Debug)]
pub struct Joined {
    /// The verified answer.
    pub verified: VerifiedJoin,
    /// What storing did besides the identity.
    pub stored: JoinStored,
}

impl Joined {
    /// `joined as <node> (site <site>, role <role>); certificate valid until <time>`.
    pub fn message(&self) -> String {
        let leaf = &self.verified.leaf;
        let until = leaf
            .not_after
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| leaf.not_after.to_string());
        format!(
            "joined as {} (site {}, role {}); certificate valid until {until}",
            leaf.spiffe_id.node, leaf.spiffe_id.site, leaf.role
        )
    }
}

/// Sends `prepared` (retrying), verifies the answer and stores it. `sleep` waits between
/// attempts; `jitter` draws a jitter value; `now` reads the clock for the journal's name.
#[allow(clippy::too_many_arguments)]
pub fn run_join(
    dir: &DataDir,
    transport: &mut dyn JoinTransport,
    prepared: PreparedJoin,
    pins: &JoinPins,
    trust_domain: Option<&TrustDomain>,
    sleep: &mut dyn FnMut(Duration),
    jitter: &mut dyn FnMut() -> f64,
    now: &dyn Fn() -> OffsetDateTime,
) -> Result<Joined, JoinError> {
    let mut attempt = 0u32;
    crate::fault::point("join:prepared");
    let signed = loop {
        attempt += 1;
        match transport.join(&prepared.request) {
            Ok(signed) => break signed,
            Err(CallError::Refused) => return Err(JoinError::Refused),
            Err(CallError::NotWired) => return Err(JoinError::NotWired),
            Err(CallError::Fatal(message)) => return Err(JoinError::Transport(message)),
            Err(CallError::Retryable { message, pushback }) => {
                // Said at every attempt, so a join that waits out an outage shows why.
                eprintln!("bcd join: attempt {attempt} failed: {message}");
                match join_retry(attempt, pushback, jitter()) {
                    JoinRetry::After(delay) => sleep(delay),
                    JoinRetry::GiveUp => {
                        return Err(JoinError::GaveUp {
                            attempts: attempt,
                            last: message,
                        })
                    }
                }
            }
        }
    };
    let expect = JoinExpectation {
        join_signing_pin: pins.join_signing,
        csr_sha256: prepared.request.csr_sha256,
        node_key: prepared.key.public_key(),
        role: prepared.request.role,
        trust_domain,
        node_id: None,
    };
    crate::fault::point("join:answer-received");
    let verified = verify_join_response(&signed, |body| transport.decode_body(body), &expect)?;
    crate::fault::point("join:verified");
    let stored = store_joined(dir, &prepared.key, &verified.stored_identity(), now())?;
    Ok(Joined { verified, stored })
}
