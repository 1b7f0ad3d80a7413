//! Shared helpers for the quorum tests: the fixed test keys of `data/quorum/keys.json`.
#![allow(dead_code)]

use domain::quorum::{ApproverKey, ApproverSet, SetSignature, Tier, TrustDomain};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

pub struct TestKey {
    pub name: String,
    pub pair: EcdsaKeyPair,
    pub spki: Vec<u8>,
    pub key: ApproverKey,
}

pub fn keys() -> Vec<TestKey> {
    let file: serde_json::Value =
        serde_json::from_str(include_str!("data/quorum/keys.json")).expect("keys.json");
    let rng = SystemRandom::new();
    file["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            let pkcs8 = hex::decode(k["pkcs8"].as_str().expect("pkcs8")).expect("hex");
            let spki = hex::decode(k["spki"].as_str().expect("spki")).expect("hex");
            let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &rng)
                .expect("pkcs8");
            assert_eq!(
                pair.public_key().as_ref(),
                &spki[26..],
                "the SPKI is the PKCS#8 key's public key"
            );
            let key = ApproverKey::from_spki(&spki).expect("P-256 SPKI");
            TestKey {
                name: k["name"].as_str().expect("name").to_string(),
                pair,
                spki,
                key,
            }
        })
        .collect()
}

impl TestKey {
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .expect("sign")
            .as_ref()
            .to_vec()
    }

    pub fn set_signature(&self, message: &[u8]) -> SetSignature {
        SetSignature {
            kid: self.key.kid(),
            sig: self.sign(message),
        }
    }
}

pub fn set_of(
    keys: &[&TestKey],
    threshold: u32,
    tiers: &[(u32, u32)],
    unbatched: u32,
) -> ApproverSet {
    ApproverSet::new(
        keys.iter().map(|k| k.key.clone()).collect(),
        threshold,
        tiers
            .iter()
            .map(|&(max_scope_size, threshold)| Tier {
                max_scope_size,
                threshold,
            })
            .collect(),
        unbatched,
    )
    .expect("valid set")
}

pub fn td(name: &str) -> TrustDomain {
    TrustDomain::new(name).expect("trust domain")
}
