//! Why a `discovery` join was refused: `discovery:<reason>` (the COMMON contract's list), one
//! variant per check, in the order the attestor makes them.

use super::wire::DISCOVERY_ATTESTOR;
use crate::attest::contract::AttestorRefusal;

/// Why a `discovery` join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DiscoveryRefusal {
    /// The evidence is not a `SignedDiscoveryAssertion` carrying a `DiscoveryAssertion` with a
    /// 64-byte signature, a site, a signer and a MAC.
    #[error("discovery:malformed")]
    Malformed,
    /// The request carried no sealed token, or it did not open for this CSR.
    #[error("discovery:token-does-not-open")]
    TokenDoesNotOpen,
    /// No token has this secret.
    #[error("discovery:unknown-token")]
    UnknownToken,
    /// The token was revoked.
    #[error("discovery:revoked")]
    Revoked,
    /// The token expired.
    #[error("discovery:expired")]
    Expired,
    /// The token is not of role discovery.
    #[error("discovery:wrong-token-role")]
    WrongTokenRole,
    /// The token does not have exactly one use left.
    #[error("discovery:not-single-use")]
    NotSingleUse,
    /// The token was minted for another site than the assertion's.
    #[error("discovery:wrong-site")]
    WrongSite,
    /// The token's `expect.mac` is not the asserted MAC.
    #[error("discovery:mac-mismatch")]
    MacMismatch,
    /// The signer node does not exist.
    #[error("discovery:unknown-signer")]
    UnknownSigner,
    /// The signer is not a site node of the assertion's site.
    #[error("discovery:signer-not-site")]
    SignerNotSite,
    /// The signer is retired or deleted.
    #[error("discovery:signer-retired")]
    SignerRetired,
    /// The signer's certificate is not byte for byte a `node_certs` row of the signer, or it is
    /// revoked, expired or of an older identity generation than the node's.
    #[error("discovery:signer-certificate")]
    SignerCertificate,
    /// The signature is not the signer certificate's key's over the assertion.
    #[error("discovery:signature")]
    Signature,
    /// The signer does not hold the site's boot lease at exactly the asserted epoch (another
    /// holder, a later epoch, released, or lapsed).
    #[error("discovery:not-lease-holder")]
    NotLeaseHolder,
    /// The assertion is past the earlier of its `not_after` and 15 minutes after `issued_at`.
    #[error("discovery:assertion-expired")]
    AssertionExpired,
    /// The assertion was issued more than 60 s after the JoinService's clock.
    #[error("discovery:assertion-not-yet-valid")]
    AssertionNotYetValid,
    /// The machine's claimed MACs do not include the asserted MAC.
    #[error("discovery:mac-not-claimed")]
    MacNotClaimed,
    /// The assertion names a product UUID the machine does not claim.
    #[error("discovery:product-uuid-mismatch")]
    ProductUuidMismatch,
    /// This signed assertion admitted a join before.
    #[error("discovery:assertion-reused")]
    AssertionReused,
}

impl DiscoveryRefusal {
    /// Every reason, in the order the attestor checks them.
    pub const ALL: [DiscoveryRefusal; 20] = [
        DiscoveryRefusal::Malformed,
        DiscoveryRefusal::TokenDoesNotOpen,
        DiscoveryRefusal::UnknownToken,
        DiscoveryRefusal::Revoked,
        DiscoveryRefusal::Expired,
        DiscoveryRefusal::WrongTokenRole,
        DiscoveryRefusal::NotSingleUse,
        DiscoveryRefusal::WrongSite,
        DiscoveryRefusal::MacMismatch,
        DiscoveryRefusal::UnknownSigner,
        DiscoveryRefusal::SignerNotSite,
        DiscoveryRefusal::SignerRetired,
        DiscoveryRefusal::SignerCertificate,
        DiscoveryRefusal::Signature,
        DiscoveryRefusal::NotLeaseHolder,
        DiscoveryRefusal::AssertionExpired,
        DiscoveryRefusal::AssertionNotYetValid,
        DiscoveryRefusal::MacNotClaimed,
        DiscoveryRefusal::ProductUuidMismatch,
        DiscoveryRefusal::AssertionReused,
    ];

    /// The reason without the attestor prefix (`assertion-reused`).
    pub fn reason(self) -> String {
        let text = self.to_string();
        text.strip_prefix("discovery:").unwrap_or(&text).to_owned()
    }

    /// The contract's refusal, attributed to nobody (no token authenticated a tenant yet).
    pub fn refusal(self) -> AttestorRefusal {
        AttestorRefusal::new(DISCOVERY_ATTESTOR, &self.reason())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_prefixed_and_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        for r in DiscoveryRefusal::ALL {
            assert!(r.to_string().starts_with("discovery:"));
            assert!(seen.insert(r.reason()));
        }
        assert_eq!(
            DiscoveryRefusal::AssertionReused.refusal().text(),
            "discovery:assertion-reused"
        );
    }
}
