//! What every join is asked and answers, whatever its attestor: the machine's claims and their
//! digests, the decoded request ([`JoinInput`]), the keys a join needs ([`JoinContext`]) and an
//! admitted join ([`Joined`]). A module of its own, so that the attestors ([`crate::attest`]) and
//! the token join ([`super::join`]), which uses them, both name these without naming each other.

use time::Duration;

use super::decision::sha256;
use crate::pki::{JoinEncryptionKey, NodeCa, TrustDomain};

/// The attestor id of token joins.
pub const JOIN_TOKEN_ATTESTOR: &str = events::schema::attestor_ids::JOIN_TOKEN;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinInput {
    /// The CSR, DER.
    pub csr_der: Vec<u8>,
    /// The sealed token bytes.
    pub sealed_token: Vec<u8>,
    /// The role asked for (`node`, `site`).
    pub role: String,
    /// Hardware claims.
    pub claims: HardwareClaims,
    /// `JoinRequest.attestation`: the attestor's evidence, or the answer to a challenge (empty
    /// for join-token).
    pub attestation: Vec<u8>,
    /// What the machine says about itself (hostname, serials, versions): recorded, never binding.
    pub report: super::SelfReport,
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
    /// Lifetime of a ramdisk certificate, at join and at every renewal (`[attestors.discovery]
    /// cert_ttl`); the CA caps it at 2 hours anyway.
    pub ramdisk_lifetime: Duration,
}

impl JoinContext<'_> {
    /// The lifetime asked for a certificate of `role`: the leaf lifetime, and for a ramdisk the
    /// shorter of it and the ramdisk lifetime (the CA then caps both at the role's maximum).
    pub fn lifetime_for(&self, role: crate::pki::NodeRole) -> Duration {
        match role {
            crate::pki::NodeRole::Ramdisk => self
                .leaf_lifetime
                .min(self.ramdisk_lifetime)
                .min(role.max_lifetime()),
            _ => self.leaf_lifetime,
        }
    }
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
    /// The command kinds the certificate allows (`node_certs.allowed_kinds`; empty: every kind
    /// its role allows), carried in the signed JoinResponse so bcd enforces them too.
    pub allowed_kinds: Vec<String>,
}
