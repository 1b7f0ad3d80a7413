//! A site agent as the tests drive it: its leaf and its node key, so each SiteLease and
//! BootToken carries the agent's proof of the call (issue 40 item 10), signed at the
//! fixture's simulated clock unless a test signs at another time.

#![allow(dead_code)]

use std::sync::Arc;

use commands::site::{BootTokenAnswer, LeaseAction, LeaseAnswer, SiteAgent, SiteError};
use commands::{Clock, SimClock};
use domain::pki::statement::sign;
use domain::pki::{NodeId, NodeIdentity, PrivateKey, TrustDomain};
use domain::site::{SiteCall, SiteCallProof, SiteCallStatement};

use crate::identity_support::TD;

/// A site agent's certificate (or bytes claiming to be one) and the key that signs its calls.
#[derive(Clone)]
pub struct SiteCaller {
    /// The leaf presented, DER.
    pub leaf: Vec<u8>,
    key: Arc<PrivateKey>,
    clock: SimClock,
}

impl SiteCaller {
    /// The caller presenting `leaf`, signing with `key` at `clock`.
    pub fn new(leaf: Vec<u8>, key: PrivateKey, clock: SimClock) -> SiteCaller {
        SiteCaller {
            leaf,
            key: Arc::new(key),
            clock,
        }
    }

    /// The agent's node key.
    pub fn key(&self) -> &PrivateKey {
        &self.key
    }

    /// The same key presenting other bytes.
    pub fn presenting(&self, leaf: Vec<u8>) -> SiteCaller {
        SiteCaller {
            leaf,
            ..self.clone()
        }
    }

    /// (client time, signature) of `call` at `at_ms`; the node id is the leaf's (or "none" when
    /// the bytes are no certificate).
    pub fn proof_at(&self, call: SiteCall, at_ms: i64) -> (i64, Vec<u8>) {
        let td = TrustDomain::new(TD).unwrap();
        let node_id = NodeIdentity::from_leaf_der(&self.leaf, &td)
            .map(|i| i.spiffe_id.node)
            .unwrap_or_else(|_| NodeId::new("none").unwrap());
        let statement = SiteCallStatement {
            node_id,
            call,
            client_time_ms: u64::try_from(at_ms).unwrap(),
        };
        (
            at_ms,
            sign(&self.key, &statement).unwrap().as_bytes().to_vec(),
        )
    }

    /// The proof of `call` now, at the fixture's clock.
    pub fn proof(&self, call: SiteCall) -> (i64, Vec<u8>) {
        self.proof_at(call, self.clock.now_us() / 1000)
    }
}

fn call_of(action: LeaseAction, epoch: u64) -> SiteCall {
    match action {
        LeaseAction::Acquire => SiteCall::LeaseAcquire,
        LeaseAction::Renew => SiteCall::LeaseRenew { epoch },
        LeaseAction::Release => SiteCall::LeaseRelease { epoch },
    }
}

/// SiteLease by `who` with its proof.
pub async fn lease_by(
    calls: &SiteAgent,
    who: &SiteCaller,
    action: LeaseAction,
    epoch: u64,
) -> Result<LeaseAnswer, SiteError> {
    let (client_time_ms, signature) = who.proof(call_of(action, epoch));
    let proof = SiteCallProof {
        client_time_ms,
        signature: &signature,
    };
    calls.lease(&who.leaf, action, epoch, proof).await
}

/// BootToken by `who` with its proof.
pub async fn boot_token_by(
    calls: &SiteAgent,
    who: &SiteCaller,
    mac: &str,
    epoch: u64,
) -> Result<BootTokenAnswer, SiteError> {
    let (client_time_ms, signature) = who.proof(SiteCall::boot_token(mac, epoch));
    let proof = SiteCallProof {
        client_time_ms,
        signature: &signature,
    };
    calls.boot_token(&who.leaf, mac, epoch, proof).await
}
