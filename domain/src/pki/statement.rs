//! Signatures that name their purpose and what binds them.
//!
//! Every signature in the system is over a *signed input* that starts with its purpose label and
//! then lists the fields that bind it, each length-prefixed:
//!
//! ```text
//! signed_input = lp(label) || lp(field_1) || ... || lp(field_n)
//! lp(x)        = u32_be(len(x)) || x
//! ```
//!
//! so a renew proof can never verify as an x509pop proof or a JoinResponse signature, whatever
//! the field bytes. Integers are fixed-width big-endian, digests raw bytes, ids UTF-8. Signatures
//! are ES256 (ECDSA P-256 over SHA-256 of the signed input) in the fixed `r || s` form, made and
//! checked with ring.
//!
//! Each [`Purpose`] names the one [`KeyRole`] allowed to sign it, and [`sign`] refuses any other
//! key: the JoinService signing key signs join responses, a node key signs proofs of possession,
//! and no CA or encryption key signs statements at all.
//!
//! [`check_clock_window`] is the ±60 s check of a proof's client time against the server's `now`.

use time::{Duration, OffsetDateTime};

use super::encoding::{put_lp, sha256};
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey, Signature};
use super::spiffe::NodeId;

/// What a signature is for. The label is what gets signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Renewal proof of possession by the current node key.
    RenewPop,
    /// Re-join proof by an expired certificate's key.
    X509Pop,
    /// The JoinService's signature on a JoinResponse body.
    JoinResponse,
    /// The JoinService's signature on a RenewResponse body.
    RenewResponse,
    /// The JoinService's signature on a trust bundle.
    TrustBundle,
    /// A site agent's statement that its boot server just served a machine (spec 000
    /// "discovery").
    DiscoveryAssertion,
    /// A worker key's signature on a command body (spec 003 "Signed intent").
    Command,
    /// A site agent's proof that it made a SiteLease or BootToken call
    /// (`crate::site::call_proof`).
    SiteCall,
}

impl Purpose {
    /// The label at the start of the signed input.
    pub fn label(self) -> &'static str {
        match self {
            Purpose::RenewPop => "renew-pop",
            Purpose::X509Pop => "x509pop",
            Purpose::JoinResponse => "join-response",
            Purpose::RenewResponse => "renew-response",
            Purpose::TrustBundle => "trust-bundle",
            Purpose::DiscoveryAssertion => "discovery-assertion",
            Purpose::Command => "command",
            Purpose::SiteCall => "site-call",
        }
    }

    /// The only key role that may sign under this purpose.
    pub fn signer(self) -> KeyRole {
        match self {
            Purpose::RenewPop
            | Purpose::X509Pop
            | Purpose::DiscoveryAssertion
            | Purpose::SiteCall => KeyRole::Node,
            Purpose::JoinResponse | Purpose::RenewResponse | Purpose::TrustBundle => {
                KeyRole::JoinSigning
            }
            Purpose::Command => KeyRole::Worker,
        }
    }
}

/// Why signing or verifying failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// The key's role may not sign this purpose.
    #[error("a {role} key may not sign {purpose}; only a {allowed} key may")]
    WrongSigner {
        /// Purpose label.
        purpose: &'static str,
        /// Role of the key given.
        role: KeyRole,
        /// Role the purpose requires.
        allowed: KeyRole,
    },
    /// The signature does not verify for this purpose, these fields and this key.
    #[error("the {purpose} signature does not verify")]
    BadSignature {
        /// Purpose label.
        purpose: &'static str,
    },
    /// Signing failed (randomness).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The node key's holder could not sign (a TPM, `bcd helper`): its own reason.
    #[error(transparent)]
    Signer(#[from] super::keys::SignerError),
}

/// Builds the signed input for `purpose` over `fields`.
pub fn signed_input(purpose: Purpose, fields: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + fields.iter().map(|f| f.len() + 4).sum::<usize>());
    put_lp(&mut out, purpose.label().as_bytes());
    for field in fields {
        put_lp(&mut out, field);
    }
    out
}

/// A statement that can be signed: a purpose and its binding fields.
pub trait Statement {
    /// The purpose.
    fn purpose(&self) -> Purpose;
    /// The signed input ([`signed_input`] of the purpose and the fields).
    fn signed_input(&self) -> Vec<u8>;
    /// SHA-256 of the signed input: the key of a replay cache (`attestation_uses.subject`).
    fn replay_key(&self) -> [u8; 32] {
        sha256(&self.signed_input())
    }
}

/// `renew-pop`: the current node key proves possession over the new CSR's SHA-256, the node id
/// and the client time (unix milliseconds, u64 big-endian).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewPop {
    /// SHA-256 of the new CSR's DER.
    pub csr_sha256: [u8; 32],
    /// The node id (from the presented leaf's SPIFFE ID).
    pub node_id: NodeId,
    /// The agent's clock, unix milliseconds.
    pub client_time_ms: u64,
}

impl Statement for RenewPop {
    fn purpose(&self) -> Purpose {
        Purpose::RenewPop
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(
            Purpose::RenewPop,
            &[
                &self.csr_sha256,
                self.node_id.as_str().as_bytes(),
                &self.client_time_ms.to_be_bytes(),
            ],
        )
    }
}

/// `x509pop`: the same fields as [`RenewPop`] under its own purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509Pop {
    /// SHA-256 of the new CSR's DER.
    pub csr_sha256: [u8; 32],
    /// The node id.
    pub node_id: NodeId,
    /// The agent's clock, unix milliseconds.
    pub client_time_ms: u64,
}

impl Statement for X509Pop {
    fn purpose(&self) -> Purpose {
        Purpose::X509Pop
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(
            Purpose::X509Pop,
            &[
                &self.csr_sha256,
                self.node_id.as_str().as_bytes(),
                &self.client_time_ms.to_be_bytes(),
            ],
        )
    }
}

/// `join-response`: the JoinService signs the encoded response body, bound to the request's CSR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponseStatement<'a> {
    /// SHA-256 of the CSR of the request being answered.
    pub csr_sha256: [u8; 32],
    /// The encoded JoinResponseBody, exactly as sent.
    pub response: &'a [u8],
}

impl Statement for JoinResponseStatement<'_> {
    fn purpose(&self) -> Purpose {
        Purpose::JoinResponse
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(Purpose::JoinResponse, &[&self.csr_sha256, self.response])
    }
}

/// `renew-response`: the JoinService signs the encoded renewal answer, bound to the new CSR.
/// Its own purpose, so a JoinResponse signature never verifies as a renewal answer (or back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewResponseStatement<'a> {
    /// SHA-256 of the renewal request's new CSR.
    pub csr_sha256: [u8; 32],
    /// The encoded RenewResponse body, exactly as sent.
    pub response: &'a [u8],
}

impl Statement for RenewResponseStatement<'_> {
    fn purpose(&self) -> Purpose {
        Purpose::RenewResponse
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(Purpose::RenewResponse, &[&self.csr_sha256, self.response])
    }
}

/// `trust-bundle`: the JoinService signs the encoded trust bundle for one trust domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustBundleStatement<'a> {
    /// The verifier's own trust domain.
    pub trust_domain: &'a str,
    /// The encoded trust bundle, exactly as sent.
    pub bundle: &'a [u8],
}

impl Statement for TrustBundleStatement<'_> {
    fn purpose(&self) -> Purpose {
        Purpose::TrustBundle
    }
    fn signed_input(&self) -> Vec<u8> {
        signed_input(
            Purpose::TrustBundle,
            &[self.bundle, self.trust_domain.as_bytes()],
        )
    }
}

/// Signs `statement` with `key`, refusing a key whose role may not sign its purpose.
pub fn sign(key: &PrivateKey, statement: &impl Statement) -> Result<Signature, StatementError> {
    let purpose = statement.purpose();
    if key.role() != purpose.signer() {
        return Err(StatementError::WrongSigner {
            purpose: purpose.label(),
            role: key.role(),
            allowed: purpose.signer(),
        });
    }
    Ok(key.sign_raw(&statement.signed_input())?)
}

/// Verifies `signature` on `statement` under `key`.
pub fn verify(
    key: &PublicKey,
    statement: &impl Statement,
    signature: &Signature,
) -> Result<(), StatementError> {
    if key.verify_es256(&statement.signed_input(), signature) {
        Ok(())
    } else {
        Err(StatementError::BadSignature {
            purpose: statement.purpose().label(),
        })
    }
}

/// How far a proof's client time may be from the server's clock, either way.
pub const PROOF_WINDOW: Duration = Duration::seconds(60);

/// Why a proof's time was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClockWindowError {
    /// The proof is older than the window.
    #[error("the proof is {skew_ms} ms old, more than the {window_s} s window")]
    TooOld {
        /// How far behind `now`, in milliseconds.
        skew_ms: i128,
        /// The window, seconds.
        window_s: i64,
    },
    /// The proof is from further ahead than the window.
    #[error("the proof is {skew_ms} ms in the future, more than the {window_s} s window")]
    InFuture {
        /// How far ahead of `now`, in milliseconds.
        skew_ms: i128,
        /// The window, seconds.
        window_s: i64,
    },
}

/// Checks that `proof_time_ms` (unix milliseconds) is within [`PROOF_WINDOW`] of `now`,
/// inclusive: 60 s old passes, 60.001 s old does not.
pub fn check_clock_window(proof_time_ms: u64, now: OffsetDateTime) -> Result<(), ClockWindowError> {
    let now_ms = now.unix_timestamp_nanos() / 1_000_000;
    let skew = now_ms - i128::from(proof_time_ms);
    let window_ms = i128::from(PROOF_WINDOW.whole_milliseconds() as i64);
    let window_s = PROOF_WINDOW.whole_seconds();
    if skew > window_ms {
        Err(ClockWindowError::TooOld {
            skew_ms: skew,
            window_s,
        })
    } else if -skew > window_ms {
        Err(ClockWindowError::InFuture {
            skew_ms: -skew,
            window_s,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap()
    }

    #[test]
    fn window_is_inclusive_60s() {
        let now = 1_790_000_000_000i64;
        assert!(check_clock_window(now as u64, t(now)).is_ok());
        assert!(check_clock_window((now - 60_000) as u64, t(now)).is_ok());
        assert!(check_clock_window((now + 60_000) as u64, t(now)).is_ok());
        assert!(matches!(
            check_clock_window((now - 61_000) as u64, t(now)),
            Err(ClockWindowError::TooOld {
                skew_ms: 61_000,
                ..
            })
        ));
        assert!(matches!(
            check_clock_window((now + 60_001) as u64, t(now)),
            Err(ClockWindowError::InFuture {
                skew_ms: 60_001,
                ..
            })
        ));
    }

    #[test]
    fn a_join_response_signature_is_no_renew_response_signature() {
        let join = JoinResponseStatement {
            csr_sha256: [1; 32],
            response: b"body",
        };
        let renew = RenewResponseStatement {
            csr_sha256: [1; 32],
            response: b"body",
        };
        assert_ne!(join.signed_input(), renew.signed_input());
        assert_eq!(Purpose::RenewResponse.signer(), KeyRole::JoinSigning);
        assert_eq!(Purpose::RenewResponse.label(), "renew-response");
    }

    #[test]
    fn signed_input_layout() {
        let input = signed_input(Purpose::RenewPop, &[b"ab", b""]);
        let mut want = vec![0, 0, 0, 9];
        want.extend_from_slice(b"renew-pop");
        want.extend_from_slice(&[0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0]);
        assert_eq!(input, want);
    }
}
