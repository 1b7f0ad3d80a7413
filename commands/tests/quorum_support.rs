//! Shared helpers for the quorum command tests (a module of the commands test binary, declared once in `tests/suite.rs`).

#![allow(dead_code)]

use commands::quorum::BundleConfig;
use domain::quorum::{
    approver_set_signing_input, batch_approval_signing_input, ApprovalSignature, ApproverKey,
    ApproverSet, ApproverSetOffer, BatchId, Kid, ScopeHash, SetSignature, Tier, TrustDomain,
};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

const SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// An approver with its signing key.
pub struct Approver {
    pair: EcdsaKeyPair,
    pub key: ApproverKey,
}

impl Approver {
    pub fn generate() -> Approver {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let mut spki = SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        let key = ApproverKey::from_spki(&spki).unwrap();
        Approver { pair, key }
    }

    pub fn kid(&self) -> Kid {
        self.key.kid()
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .unwrap()
            .as_ref()
            .to_vec()
    }

    pub fn sign_set(&self, set: &ApproverSet, epoch: u64, td: &TrustDomain) -> SetSignature {
        SetSignature {
            kid: self.kid(),
            sig: self.sign(&approver_set_signing_input(epoch, &set.digest(), td)),
        }
    }

    pub fn sign_batch(
        &self,
        batch_id: &BatchId,
        root: &ScopeHash,
        size: u32,
        not_after_us: i64,
        td: &TrustDomain,
    ) -> ApprovalSignature {
        ApprovalSignature {
            kid: self.kid(),
            sig: self.sign(&batch_approval_signing_input(
                batch_id,
                root,
                size,
                not_after_us,
                td,
            )),
        }
    }
}

pub fn td() -> TrustDomain {
    TrustDomain::new("prod.example.org").unwrap()
}

pub fn staging() -> TrustDomain {
    TrustDomain::new("staging.example.org").unwrap()
}

pub fn approvers(n: usize) -> Vec<Approver> {
    (0..n).map(|_| Approver::generate()).collect()
}

pub fn set_of(approvers: &[&Approver], threshold: u32, tiers: Vec<Tier>) -> ApproverSet {
    ApproverSet::new(
        approvers.iter().map(|a| a.key.clone()).collect(),
        threshold,
        tiers,
        0,
    )
    .unwrap()
}

pub fn root(tag: u8) -> Vec<u8> {
    vec![0x30, 0x82, tag, tag, tag, 0x01]
}

/// A configuration with one root (`root(1)`) and this offer.
pub fn config(set: ApproverSet, epoch: u64, signatures: Vec<SetSignature>) -> BundleConfig {
    BundleConfig {
        trust_domain: td(),
        command_signing_roots: vec![root(1)],
        active_root: root(1),
        approvers: ApproverSetOffer {
            set,
            epoch,
            signatures,
        },
        floor: 0,
        pin: None,
    }
}

/// Joins nodes `node-0` .. `node-{n-1}` of `tenant` (bare `node.joined` events, applied to the
/// identity projections), so that batches over them pass the subject rule (every subject names
/// a node of the batch's own tenant). Idempotent per node id.
pub async fn seed_nodes(store: &events::store::EventStore, tenant: &str, n: usize) {
    use events::store::{ExpectedVersion, LogStore, LogTx};
    let mut tx = store.begin().await.unwrap();
    for i in 0..n {
        let node_id = format!("node-{i}");
        if projections::identity::read::node_by_id(&mut tx, &node_id)
            .await
            .unwrap()
            .is_some()
        {
            continue;
        }
        let joined = events::schema::NodeJoined {
            node_id: node_id.clone(),
            tenant_id: tenant.into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: "node".into(),
            attestor: "join-token".into(),
            node_key: "unattested".into(),
            token_id: "tok_seed".into(),
            identity_generation: 1,
            ..Default::default()
        };
        commands::append_and_project(
            &mut tx,
            &projections::identity::all(),
            &format!("node/{node_id}"),
            ExpectedVersion::NoStream,
            &[events::NewEvent::from_payload(
                events::new_event_id(),
                tenant,
                1_800_000_000_000_000,
                &joined,
            )],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}
