//! Shared helpers of the x509pop tests: a node joined with a token, its certificate expired on
//! the simulated clock, and x509pop JoinRequests built from it.

#![allow(dead_code)]

use crate::identity_support::*;

use commands::identity::{JoinAnswer, JoinRequest};
use commands::Clock;
use domain::attest::x509pop::build_evidence;
use domain::identity::JoinInput;
use domain::pki::NodeId;

/// A node joined through a token: the agent whose key its certificate certifies, and the answer.
pub struct Joined {
    pub agent: Agent,
    pub answer: JoinAnswer,
}

impl Joined {
    /// The node id.
    pub fn node_id(&self) -> &str {
        &self.answer.node_id
    }

    /// The leaf, DER.
    pub fn leaf(&self) -> &[u8] {
        &self.answer.certificate_chain[0]
    }

    /// The chain as answered: leaf, node CA.
    pub fn chain(&self) -> Vec<Vec<u8>> {
        self.answer.certificate_chain.clone()
    }
}

/// Joins a node of `tenant` with a fresh token.
pub async fn joined(f: &Fixture, tenant: &str) -> Joined {
    let (agent, answer) = join_new(f, tenant).await;
    Joined { agent, answer }
}

/// Moves the clock to `offset_us` after the leaf's notAfter.
pub fn after_expiry(f: &Fixture, node: &Joined, offset_us: i64) {
    f.clock.set_us(node.answer.not_after_us + offset_us);
}

/// One hour after the leaf expired: the case x509pop exists for.
pub fn expire(f: &Fixture, node: &Joined) {
    after_expiry(f, node, 3_600_000_000);
}

/// The JoinService clock, unix ms.
pub fn clock_ms(f: &Fixture) -> u64 {
    u64::try_from(f.clock.now_us() / 1000).unwrap()
}

/// Evidence: `chain`, a proof by `signer` for `next`'s CSR naming `node_id` at `client_ms`.
pub fn evidence_with(
    chain: &[Vec<u8>],
    signer: &Agent,
    node_id: &str,
    next: &Agent,
    client_ms: u64,
) -> Vec<u8> {
    build_evidence(
        chain,
        &signer.key,
        &next.csr_sha256(),
        &NodeId::new(node_id).unwrap(),
        client_ms,
    )
    .unwrap()
}

/// The evidence the node itself sends now for `next`'s CSR.
pub fn evidence(f: &Fixture, node: &Joined, next: &Agent) -> Vec<u8> {
    evidence_with(
        &node.chain(),
        &node.agent,
        node.node_id(),
        next,
        clock_ms(f),
    )
}

/// An x509pop JoinRequest for `next`'s CSR (no token).
pub fn x509pop_request(next: &Agent, evidence: Vec<u8>, role: &str) -> JoinRequest {
    JoinRequest {
        attestor: "x509pop".into(),
        input: JoinInput {
            csr_der: next.csr.clone(),
            sealed_token: Vec::new(),
            role: role.into(),
            claims: Default::default(),
            attestation: evidence,
            report: Default::default(),
        },
    }
}

/// The JSON of `evidence`, changed by `edit`.
pub fn edit_json(evidence: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut value: serde_json::Value = serde_json::from_slice(evidence).unwrap();
    edit(&mut value);
    serde_json::to_vec(&value).unwrap()
}

/// base64url without padding.
pub fn b64url(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// The reasons of every `security.join.refused` event, with their tenant.
pub async fn join_refusals(f: &Fixture) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in all_events(&f.store).await {
        if e.event_type == "security.join.refused" {
            let p: events::schema::JoinRefused = e.decode().unwrap();
            out.push((e.tenant_id.clone(), p.refusal));
        }
    }
    out
}
