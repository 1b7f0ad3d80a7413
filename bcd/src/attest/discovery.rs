//! The discovery attestor's agent half (spec 000 "discovery"): the evidence is the site agent's
//! signed assertion exactly as it came on the kernel command line
//! ([`SignedDiscoveryAssertion::to_bytes`]); the sealed discovery token travels beside it in the
//! request. It answers no challenge. `bcd ramdisk` ([`crate::join::ramdisk`]) uses it.

use domain::attest::discovery::wire::{SignedDiscoveryAssertion, DISCOVERY_ATTESTOR};

use super::{EvidenceError, EvidenceProducer};

/// The assertion as the evidence of every round 1 (a pending join's retries send it again).
#[derive(Debug, Clone)]
pub struct DiscoveryProducer {
    bytes: Vec<u8>,
}

impl DiscoveryProducer {
    /// For the assertion `signed`.
    pub fn new(signed: &SignedDiscoveryAssertion) -> DiscoveryProducer {
        DiscoveryProducer {
            bytes: signed.to_bytes(),
        }
    }
}

impl EvidenceProducer for DiscoveryProducer {
    fn id(&self) -> &str {
        DISCOVERY_ATTESTOR
    }

    fn produce(
        &self,
        _round: u32,
        _csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        match challenge {
            None => Ok(self.bytes.clone()),
            Some(_) => Err(EvidenceError::NoChallenges(DISCOVERY_ATTESTOR.to_owned())),
        }
    }
}
