//! The approver set: its keys, thresholds, tiers and unbatched cap, validated, and its canonical
//! bytes (`approverSetInput`), digest and signing input.
//!
//! Spec, "The destructive-batch quorum" (the wire and the validation at start) and "Changing the
//! approver set":
//!
//! - `approverSetInput` is "a u32 key count, then each key's length-prefixed kid and SPKI in kid
//!   order, the u32 threshold, the u32 tier count and each tier's pair, the u32 unbatched cap; all
//!   big-endian". Here a kid is the 32 raw bytes of SHA-256(SPKI DER), the length prefix is a
//!   big-endian u32 ([`super::signing`]), and a tier's pair is `u32 max_scope_size ‖ u32 threshold`.
//! - The set digest is SHA-256(approverSetInput) ([`SetDigest`]); daemons report it and operators
//!   pin the first set by it ("Pinning the first set").
//! - Set signatures are "purpose approver-set over [uint64_be(epoch), SHA-256(approverSetInput),
//!   trust_domain]" ([`approver_set_signing_input`]).
//! - Validation: "keys must be distinct P-256 public keys, thresholds whole numbers from 1 to the
//!   key count, tiers' maxScopeSize at least 1. Tiers must ascend strictly by maxScopeSize, their
//!   thresholds must never decrease, and none may exceed threshold". A kid must be SHA-256 of its
//!   key. Each rule is one [`ApproverSetError`] variant.
//!
//! A set with no keys is "no quorum" (the removal of the quorum, or a daemon that never held one):
//! it has threshold 0 and no tiers. Our own bounds, where the spec is silent: at most
//! [`MAX_APPROVER_KEYS`] keys and [`MAX_TIERS`] tiers, so a verifier never loops over an unbounded
//! list; keys are P-256 SPKI DER with an uncompressed point (91 bytes), the form every common tool
//! writes.

use sha2::{Digest, Sha256};

use super::bytes32::bytes32_newtype;
use super::signing::{put_lp, signed_parts, PURPOSE_APPROVER_SET};
use super::trust_domain::TrustDomain;

/// At most this many approver keys in one set (our bound; the spec sets none).
pub const MAX_APPROVER_KEYS: usize = 256;
/// At most this many tiers in one set (our bound; the spec sets none).
pub const MAX_TIERS: usize = 64;

/// The DER prefix of a P-256 SubjectPublicKeyInfo with an uncompressed point: SEQUENCE {
/// SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (66 bytes, no unused bits) }.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// Length of a P-256 SPKI with an uncompressed point.
const P256_SPKI_LEN: usize = 91;

bytes32_newtype!(
    /// An approver key id: SHA-256 of the key's SubjectPublicKeyInfo DER.
    Kid
);

bytes32_newtype!(
    /// The digest of an approver set: SHA-256(approverSetInput). What daemons report and what an
    /// operator pins ("Pinning the first set").
    SetDigest
);

impl Kid {
    /// The kid of a key: SHA-256 of its SPKI DER.
    pub fn of_spki(spki_der: &[u8]) -> Kid {
        Kid(Sha256::digest(spki_der).into())
    }
}

/// One approver's public key, validated: a P-256 SPKI whose kid is its SHA-256.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ApproverKey {
    kid: Kid,
    spki_der: Vec<u8>,
}

impl std::fmt::Debug for ApproverKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApproverKey({})", self.kid)
    }
}

impl ApproverKey {
    /// Takes a P-256 SubjectPublicKeyInfo (DER) and derives its kid.
    pub fn from_spki(spki_der: &[u8]) -> Result<Self, ApproverSetError> {
        if spki_der.len() != P256_SPKI_LEN || spki_der[..P256_SPKI_PREFIX.len()] != P256_SPKI_PREFIX
        {
            return Err(ApproverSetError::NotP256 {
                kid: Kid::of_spki(spki_der),
            });
        }
        let point = &spki_der[P256_SPKI_PREFIX.len()..];
        if p256::PublicKey::from_sec1_bytes(point).is_err() {
            return Err(ApproverSetError::NotP256 {
                kid: Kid::of_spki(spki_der),
            });
        }
        Ok(ApproverKey {
            kid: Kid::of_spki(spki_der),
            spki_der: spki_der.to_vec(),
        })
    }

    /// Takes a key as the wire carries it, `(kid, spki_der)`: the kid must be SHA-256 of the SPKI.
    pub fn from_wire(kid: &[u8], spki_der: &[u8]) -> Result<Self, ApproverSetError> {
        let key = Self::from_spki(spki_der)?;
        if kid != key.kid.as_bytes() {
            return Err(ApproverSetError::KidMismatch {
                claimed: hex::encode(kid),
                actual: key.kid,
            });
        }
        Ok(key)
    }

    /// The key id, SHA-256 of the SPKI DER.
    pub fn kid(&self) -> Kid {
        self.kid
    }

    /// The SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The uncompressed SEC1 point (65 bytes) ring verifies with.
    pub(crate) fn point(&self) -> &[u8] {
        &self.spki_der[P256_SPKI_PREFIX.len()..]
    }

    /// Verifies an ASN.1 DER ECDSA P-256/SHA-256 signature by this key.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        super::signing::verify_p256(self.point(), message, signature)
    }
}

/// A tier: batches of at most `max_scope_size` leaves need `threshold` approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Tier {
    /// The largest scope (in leaves) this tier covers; at least 1.
    pub max_scope_size: u32,
    /// Approvals needed for a batch in this tier; 1 to the set's threshold.
    pub threshold: u32,
}

/// A validated approver set: keys in kid order, threshold, tiers and the unbatched cap.
///
/// Build it with [`ApproverSet::new`] (which validates) or [`ApproverSet::none`]. Serde reads it
/// through the same validation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "ApproverSetWire", into = "ApproverSetWire")]
pub struct ApproverSet {
    keys: Vec<ApproverKey>,
    threshold: u32,
    tiers: Vec<Tier>,
    unbatched_per_hour: u32,
}

/// Why an approver set is invalid (INVALID_CONFIG at start; a refused quorum on a daemon).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApproverSetError {
    /// A key is not a P-256 SubjectPublicKeyInfo with an uncompressed point on the curve.
    #[error("approver key {kid} is not a P-256 public key (SubjectPublicKeyInfo DER, uncompressed point): use the .pub file batch keygen writes")]
    NotP256 {
        /// SHA-256 of the bytes given.
        kid: Kid,
    },
    /// A kid is not SHA-256 of its key.
    #[error("approver kid {claimed} is not the SHA-256 of its key ({actual}): the key list was altered or built wrongly")]
    KidMismatch {
        /// The kid the input named (hex).
        claimed: String,
        /// SHA-256 of the key.
        actual: Kid,
    },
    /// The same key listed twice.
    #[error("approver key {kid} is listed twice: approver keys must be distinct")]
    DuplicateKey {
        /// The repeated key.
        kid: Kid,
    },
    /// More keys than [`MAX_APPROVER_KEYS`].
    #[error("{count} approver keys given; at most {max} are allowed")]
    TooManyKeys {
        /// Keys given.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// The threshold is not from 1 to the key count (or not 0 for a set without keys).
    #[error("approver threshold {threshold} must be a whole number from 1 to the key count ({keys}); a set without keys has threshold 0")]
    ThresholdOutOfRange {
        /// The threshold given.
        threshold: u32,
        /// The number of keys.
        keys: usize,
    },
    /// More tiers than [`MAX_TIERS`].
    #[error("{count} quorum tiers given; at most {max} are allowed")]
    TooManyTiers {
        /// Tiers given.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// Tiers given without any approver key.
    #[error("quorum tiers are set but there are no approver keys: add keys or remove the tiers")]
    TiersWithoutKeys,
    /// A tier with maxScopeSize 0.
    #[error("quorum tier {index} has maxScopeSize 0; it must be at least 1")]
    TierEmpty {
        /// The tier's position (from 0).
        index: usize,
    },
    /// Tiers not strictly ascending by maxScopeSize.
    #[error("quorum tier {index} has maxScopeSize {max_scope_size}, not above the previous tier's {previous}: tiers must ascend strictly by maxScopeSize")]
    TiersNotAscending {
        /// The tier's position (from 0).
        index: usize,
        /// Its maxScopeSize.
        max_scope_size: u32,
        /// The previous tier's maxScopeSize.
        previous: u32,
    },
    /// A tier's threshold below the previous tier's.
    #[error("quorum tier {index} needs {threshold} approvals, fewer than the previous tier's {previous}: tier thresholds must never decrease, or padding a scope would make it cheaper to approve")]
    TierThresholdDecreasing {
        /// The tier's position (from 0).
        index: usize,
        /// Its threshold.
        threshold: u32,
        /// The previous tier's threshold.
        previous: u32,
    },
    /// A tier's threshold of 0 or above the key count.
    #[error("quorum tier {index} threshold {threshold} must be a whole number from 1 to the key count ({keys})")]
    TierThresholdOutOfRange {
        /// The tier's position (from 0).
        index: usize,
        /// Its threshold.
        threshold: u32,
        /// The number of keys.
        keys: usize,
    },
    /// A tier's threshold above the set's threshold.
    #[error("quorum tier {index} needs {threshold} approvals, more than the threshold {set_threshold} that applies above every tier; lower the tier or raise the threshold")]
    TierAboveThreshold {
        /// The tier's position (from 0).
        index: usize,
        /// Its threshold.
        threshold: u32,
        /// The set's threshold.
        set_threshold: u32,
    },
}

impl ApproverSet {
    /// Validates and builds a set. Keys are put in kid order; the order given does not matter.
    pub fn new(
        keys: Vec<ApproverKey>,
        threshold: u32,
        tiers: Vec<Tier>,
        unbatched_per_hour: u32,
    ) -> Result<Self, ApproverSetError> {
        if keys.len() > MAX_APPROVER_KEYS {
            return Err(ApproverSetError::TooManyKeys {
                count: keys.len(),
                max: MAX_APPROVER_KEYS,
            });
        }
        if tiers.len() > MAX_TIERS {
            return Err(ApproverSetError::TooManyTiers {
                count: tiers.len(),
                max: MAX_TIERS,
            });
        }
        let mut keys = keys;
        keys.sort_by_key(|k| k.kid);
        if let Some(pair) = keys.windows(2).find(|pair| pair[0].kid == pair[1].kid) {
            return Err(ApproverSetError::DuplicateKey { kid: pair[0].kid });
        }
        let key_count = keys.len();
        if key_count == 0 {
            if threshold != 0 {
                return Err(ApproverSetError::ThresholdOutOfRange { threshold, keys: 0 });
            }
            if !tiers.is_empty() {
                return Err(ApproverSetError::TiersWithoutKeys);
            }
        } else if threshold == 0 || threshold as usize > key_count {
            return Err(ApproverSetError::ThresholdOutOfRange {
                threshold,
                keys: key_count,
            });
        }
        let mut previous: Option<Tier> = None;
        for (index, tier) in tiers.iter().enumerate() {
            if tier.max_scope_size == 0 {
                return Err(ApproverSetError::TierEmpty { index });
            }
            if tier.threshold == 0 || tier.threshold as usize > key_count {
                return Err(ApproverSetError::TierThresholdOutOfRange {
                    index,
                    threshold: tier.threshold,
                    keys: key_count,
                });
            }
            if let Some(prev) = previous {
                if tier.max_scope_size <= prev.max_scope_size {
                    return Err(ApproverSetError::TiersNotAscending {
                        index,
                        max_scope_size: tier.max_scope_size,
                        previous: prev.max_scope_size,
                    });
                }
                if tier.threshold < prev.threshold {
                    return Err(ApproverSetError::TierThresholdDecreasing {
                        index,
                        threshold: tier.threshold,
                        previous: prev.threshold,
                    });
                }
            }
            if tier.threshold > threshold {
                return Err(ApproverSetError::TierAboveThreshold {
                    index,
                    threshold: tier.threshold,
                    set_threshold: threshold,
                });
            }
            previous = Some(*tier);
        }
        Ok(ApproverSet {
            keys,
            threshold,
            tiers,
            unbatched_per_hour,
        })
    }

    /// No quorum: no keys, threshold 0, no tiers, unbatched cap 0.
    pub fn none() -> Self {
        ApproverSet {
            keys: Vec::new(),
            threshold: 0,
            tiers: Vec::new(),
            unbatched_per_hour: 0,
        }
    }

    /// Whether the set has no keys (no quorum is enforced).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in kid order.
    pub fn keys(&self) -> &[ApproverKey] {
        &self.keys
    }

    /// The key with this kid, if the set holds it.
    pub fn key(&self, kid: &Kid) -> Option<&ApproverKey> {
        self.keys
            .binary_search_by(|k| k.kid.cmp(kid))
            .ok()
            .map(|i| &self.keys[i])
    }

    /// The threshold: approvals for a set change, and for batches above every tier.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// The tiers, ascending by max scope size.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// Unbatched destructive commands allowed per rolling hour on each daemon.
    pub fn unbatched_per_hour(&self) -> u32 {
        self.unbatched_per_hour
    }

    /// Approvals a batch of `scope_size` leaves needs: the threshold of the first tier whose max
    /// scope size covers it, else the set's threshold, never fewer than one. 0 without keys.
    pub fn required_approvals(&self, scope_size: u32) -> u32 {
        if self.is_empty() {
            return 0;
        }
        self.tiers
            .iter()
            .find(|tier| scope_size <= tier.max_scope_size)
            .map_or(self.threshold, |tier| tier.threshold)
            .max(1)
    }

    /// The canonical bytes, `approverSetInput`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            16 + self.keys.len() * (8 + 32 + P256_SPKI_LEN) + self.tiers.len() * 8,
        );
        out.extend_from_slice(&(self.keys.len() as u32).to_be_bytes());
        for key in &self.keys {
            put_lp(&mut out, key.kid.as_bytes());
            put_lp(&mut out, &key.spki_der);
        }
        out.extend_from_slice(&self.threshold.to_be_bytes());
        out.extend_from_slice(&(self.tiers.len() as u32).to_be_bytes());
        for tier in &self.tiers {
            out.extend_from_slice(&tier.max_scope_size.to_be_bytes());
            out.extend_from_slice(&tier.threshold.to_be_bytes());
        }
        out.extend_from_slice(&self.unbatched_per_hour.to_be_bytes());
        out
    }

    /// SHA-256(approverSetInput).
    pub fn digest(&self) -> SetDigest {
        SetDigest(Sha256::digest(self.encode()).into())
    }
}

/// The bytes an approver signs for a set at an epoch: purpose `approver-set` over
/// `[uint64_be(epoch), SHA-256(approverSetInput), trust_domain]`.
pub fn approver_set_signing_input(
    epoch: u64,
    digest: &SetDigest,
    trust_domain: &TrustDomain,
) -> Vec<u8> {
    signed_parts(
        PURPOSE_APPROVER_SET,
        &[
            &epoch.to_be_bytes(),
            digest.as_bytes(),
            trust_domain.as_str().as_bytes(),
        ],
    )
}

/// One approver's signature over a set (`{ kid, sig }` on the wire; sig in ASN.1 DER).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SetSignature {
    /// The signer's kid.
    pub kid: Kid,
    /// The ECDSA P-256/SHA-256 signature, ASN.1 DER, hex in JSON.
    #[serde(with = "crate::quorum::bytes32::hex_bytes")]
    pub sig: Vec<u8>,
}

/// The serde form of an [`ApproverSet`]: SPKI DER in hex, read back through validation.
#[derive(serde::Serialize, serde::Deserialize)]
struct ApproverSetWire {
    keys: Vec<ApproverKeyWire>,
    threshold: u32,
    #[serde(default)]
    tiers: Vec<Tier>,
    #[serde(default)]
    unbatched_per_hour: u32,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ApproverKeyWire {
    kid: Kid,
    #[serde(with = "crate::quorum::bytes32::hex_bytes")]
    spki_der: Vec<u8>,
}

impl TryFrom<ApproverSetWire> for ApproverSet {
    type Error = ApproverSetError;
    fn try_from(wire: ApproverSetWire) -> Result<Self, Self::Error> {
        let keys = wire
            .keys
            .iter()
            .map(|k| ApproverKey::from_wire(k.kid.as_bytes(), &k.spki_der))
            .collect::<Result<Vec<_>, _>>()?;
        ApproverSet::new(keys, wire.threshold, wire.tiers, wire.unbatched_per_hour)
    }
}

impl From<ApproverSet> for ApproverSetWire {
    fn from(set: ApproverSet) -> Self {
        ApproverSetWire {
            keys: set
                .keys
                .into_iter()
                .map(|k| ApproverKeyWire {
                    kid: k.kid,
                    spki_der: k.spki_der,
                })
                .collect(),
            threshold: set.threshold,
            tiers: set.tiers,
            unbatched_per_hour: set.unbatched_per_hour,
        }
    }
}
