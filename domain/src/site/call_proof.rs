//! A site agent's proof that it made the call (issue 40 item 10): SiteLease and BootToken carry a
//! signature by the agent's node key over what the call asks and the agent's clock, so whoever
//! relays the call (a split gateway) cannot make one in the agent's name with only its public
//! certificate. The same shape as a renewal's proof of possession (`renew-pop`): its own purpose
//! label, the node id, the fields that bind it, the client time within the ±60 s window of the
//! deciding clock (the database's, decision 0081).
//!
//! ```text
//! signed_input = lp("site-call") || lp(node id) || lp(call) || lp(u64_be(epoch)) || lp(mac)
//!                || lp(u64_be(client_time_ms))
//! ```
//!
//! `call` is `lease-acquire`, `lease-renew`, `lease-release` or `boot-token`; `epoch` is 0 for an
//! ACQUIRE; `mac` is the normalized MAC of a BootToken and empty for a lease call. What a proof
//! does not stop, and why no replay row is kept, is in docs/DECISIONS.md "Issue 40: a site
//! agent's calls carry its proof".

use time::OffsetDateTime;

use crate::attest::discovery::wire::normalize_mac;
use crate::pki::{
    check_clock_window, signed_input, verify, ClockWindowError, NodeId, NodeIdentity, Purpose,
    Signature, Statement,
};

/// What a site agent's call asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteCall {
    /// SiteLease ACQUIRE.
    LeaseAcquire,
    /// SiteLease RENEW at this epoch.
    LeaseRenew { epoch: u64 },
    /// SiteLease RELEASE at this epoch.
    LeaseRelease { epoch: u64 },
    /// BootToken for this MAC (normalized when it reads as one, else as given) at this epoch.
    BootToken { mac: String, epoch: u64 },
}

impl SiteCall {
    /// A BootToken call: the MAC in the one form proofs sign (lower-case, ':'), so the agent and
    /// the server sign and check the same bytes whatever case iPXE sent.
    pub fn boot_token(mac: &str, epoch: u64) -> SiteCall {
        SiteCall::BootToken {
            mac: normalize_mac(mac).unwrap_or_else(|| mac.to_owned()),
            epoch,
        }
    }

    /// The call's name in the signed input.
    pub fn name(&self) -> &'static str {
        match self {
            SiteCall::LeaseAcquire => "lease-acquire",
            SiteCall::LeaseRenew { .. } => "lease-renew",
            SiteCall::LeaseRelease { .. } => "lease-release",
            SiteCall::BootToken { .. } => "boot-token",
        }
    }

    fn epoch(&self) -> u64 {
        match self {
            SiteCall::LeaseAcquire => 0,
            SiteCall::LeaseRenew { epoch }
            | SiteCall::LeaseRelease { epoch }
            | SiteCall::BootToken { epoch, .. } => *epoch,
        }
    }

    fn mac(&self) -> &str {
        match self {
            SiteCall::BootToken { mac, .. } => mac,
            _ => "",
        }
    }
}

/// `site-call`: the agent's node key over its node id, the call and its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteCallStatement {
    /// The agent's node id (from its certificate).
    pub node_id: NodeId,
    /// What it asks.
    pub call: SiteCall,
    /// The agent's clock, unix milliseconds.
    pub client_time_ms: u64,
}

impl Statement for SiteCallStatement {
    fn purpose(&self) -> Purpose {
        Purpose::SiteCall
    }

    fn signed_input(&self) -> Vec<u8> {
        signed_input(
            Purpose::SiteCall,
            &[
                self.node_id.as_str().as_bytes(),
                self.call.name().as_bytes(),
                &self.call.epoch().to_be_bytes(),
                self.call.mac().as_bytes(),
                &self.client_time_ms.to_be_bytes(),
            ],
        )
    }
}

/// The proof as it arrived: the agent's clock and its signature (`r || s`).
#[derive(Debug, Clone, Copy)]
pub struct SiteCallProof<'a> {
    /// The agent's clock, unix milliseconds (0 or negative: none sent).
    pub client_time_ms: i64,
    /// The signature (empty: none sent).
    pub signature: &'a [u8],
}

/// Why a site agent's call proof is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SiteCallProofRefusal {
    /// No signature or no client time: an agent older than the proof, or a call made without
    /// the key.
    #[error("the call carries no proof by the site agent's key (upgrade bcd on the site agent)")]
    Missing,
    /// The signature does not verify under the presented certificate's key for this call.
    #[error("the call's proof does not verify under the site agent's certificate")]
    BadSignature,
    /// The client time is outside the window of the server's clock.
    #[error("the call's proof time is refused: {0} (check the site agent's clock)")]
    Clock(ClockWindowError),
}

/// Checks `proof` of `call` by the agent `identity` (its certificate) at `now`: the signature
/// first, then the clock window.
pub fn check_site_call(
    identity: &NodeIdentity,
    call: SiteCall,
    proof: SiteCallProof<'_>,
    now: OffsetDateTime,
) -> Result<(), SiteCallProofRefusal> {
    let client_time_ms =
        u64::try_from(proof.client_time_ms).map_err(|_| SiteCallProofRefusal::Missing)?;
    if client_time_ms == 0 || proof.signature.is_empty() {
        return Err(SiteCallProofRefusal::Missing);
    }
    let signature =
        Signature::from_bytes(proof.signature).ok_or(SiteCallProofRefusal::BadSignature)?;
    let statement = SiteCallStatement {
        node_id: identity.spiffe_id.node.clone(),
        call,
        client_time_ms,
    };
    verify(&identity.public_key, &statement, &signature)
        .map_err(|_| SiteCallProofRefusal::BadSignature)?;
    check_clock_window(client_time_ms, now).map_err(SiteCallProofRefusal::Clock)
}

#[cfg(test)]
#[path = "call_proof_tests.rs"]
mod tests;
