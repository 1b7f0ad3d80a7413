//! The `tpm` attestor through the real JoinService, on both stores, with a real TPM: swtpm
//! driven by tpm2-tools (domain's independent test client, `domain/tests/tpm_support.rs`).
//!
//! An allow-listed EK joins in two rounds with no token: the certificate carries the AK's
//! `urn:bc:tpm-ak:` statement, `node.joined` records `nodeKey: tpm`, the EK is bound. The same
//! round-2 answer sent again gets the identity it was issued while that is current (issue 40),
//! and is refused `tpm:reused` once the node renewed. Renewals (spec 000 "Renewing a TPM-held
//! key"): without `key_attestation` refused `renew:node-key-missing`, certified by another TPM's
//! AK refused `renew:node-key-ak`, each recorded in `security.renew.refused` while the certificate
//! keeps working: the same leaf then renews with its AK's certification, the statement carried
//! into the new certificate. A second join by the same TPM reclaims its node (generation + 1).

use crate::identity_support::*;
use crate::tpm_support::{EkKind, Machine, NODE_ATTRIBUTES};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use commands::attest::{NewTpmAllow, TpmAllows};
use commands::identity::attestors::{tpm_challenge_key, AttestorRegistry};
use commands::identity::{JoinOutcome, JoinRequest};
use commands::Clock;
use domain::attest::tpm::{
    NodeKeyPolicy, TpmAttestation, TpmAttestor, TpmChallenge, TpmConfig, TpmEvidence,
    TpmKeyAttestation,
};
use domain::identity::{sha256, JoinInput, RenewInput};
use domain::pki::statement::RenewPop;
use domain::pki::{build_csr_with, sign_with, NodeId, NodeIdentity, NodeSigner, TrustDomain};
use events::store::testkit::TestDb;
use swtpm_fixture::swtpm::ek_ca;

/// The JoinService of `db` with the built-ins and the tpm attestor, its clock a few minutes
/// past the real time (the EK certificates of the TPMs the test makes later are valid from the
/// moment swtpm_setup made them).
async fn tpm_fixture(db: TestDb) -> Fixture {
    let mut f = fixture(db).await;
    let now_us = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000;
    f.clock.set_us(now_us as i64 + 180_000_000);
    let config = TpmConfig {
        ek_roots: vec![ek_ca().root_der()],
        pcr_policy: BTreeMap::new(),
        node_key: NodeKeyPolicy::Certified,
        enrollment: None,
        challenge_key: tpm_challenge_key(&f.keys),
        challenge_ttl: Duration::from_secs(300),
    };
    let mut registry = AttestorRegistry::builtin_for(
        &f.keys,
        &commands::identity::IdentityConfig::new(TrustDomain::new(TD).unwrap()),
    );
    registry.register_in_process(Arc::new(TpmAttestor::new(config)));
    f.svc = f.svc.clone().with_attestors(registry);
    f
}

fn tpm_request(csr: &[u8], attestation: Vec<u8>) -> JoinRequest {
    JoinRequest {
        attestor: "tpm".into(),
        input: JoinInput {
            csr_der: csr.to_vec(),
            sealed_token: Vec::new(),
            role: "node".into(),
            claims: Default::default(),
            attestation,
            report: Default::default(),
        },
    }
}

/// A machine's TPM and the node key of its join.
struct Machine1 {
    m: Machine,
    key: String,
    csr: Vec<u8>,
}

impl Machine1 {
    fn new() -> Machine1 {
        let m = Machine::new(EkKind::Rsa);
        let key = m.create_primary("o", NODE_ATTRIBUTES, Some(&[1; 32]));
        let csr = build_csr_with(&m.signer(&key)).expect("a CSR by the TPM key");
        Machine1 { m, key, csr }
    }

    fn ek_sha256_hex(&self) -> String {
        hex::encode(sha256(&self.m.ek_public()))
    }

    fn evidence(&self) -> Vec<u8> {
        TpmAttestation::evidence(TpmEvidence {
            ek_public: self.m.ek_public(),
            ek_certificate: self.m.ek_certificate(),
            ek_intermediates: vec![ek_ca().issuer_der()],
            ak_public: self.m.ak_public(),
        })
        .to_bytes()
    }

    fn answer(&self, challenge: &TpmChallenge) -> Vec<u8> {
        TpmAttestation::answer(self.m.answer(challenge, &self.key, &sha256(&self.csr))).to_bytes()
    }

    /// Both rounds; the round-2 request too (to send again).
    async fn join(&self, f: &Fixture) -> (JoinOutcome, JoinRequest) {
        let (outcome, request) = self.try_join(f).await;
        (outcome.expect("round 2"), request)
    }

    /// Both rounds, round 2's result as it comes.
    async fn try_join(
        &self,
        f: &Fixture,
    ) -> (
        Result<JoinOutcome, commands::identity::IdentityError>,
        JoinRequest,
    ) {
        let first = f.svc.attest(&tpm_request(&self.csr, self.evidence())).await;
        let Ok(first) = first else {
            panic!("round 1: {first:?}: {:?}", refusals(&f.store).await);
        };
        let JoinOutcome::Challenge {
            attestor, payload, ..
        } = first
        else {
            panic!("round 1 answers a challenge, got {first:?}");
        };
        assert_eq!(attestor, "tpm");
        let challenge: TpmChallenge = serde_json::from_slice(&payload).expect("a TpmChallenge");
        let second = tpm_request(&self.csr, self.answer(&challenge));
        (f.svc.attest(&second).await, second)
    }
}

fn joined(outcome: JoinOutcome) -> commands::identity::JoinAnswer {
    match outcome {
        JoinOutcome::Joined(a) => a,
        other => panic!("expected a join, got {other:?}"),
    }
}

fn leaf_statements(leaf: &[u8]) -> Vec<String> {
    NodeIdentity::from_leaf_der(leaf, &TrustDomain::new(TD).unwrap())
        .expect("a node certificate")
        .statements
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect()
}

async fn allow(f: &Fixture, machine: &Machine1) {
    TpmAllows::new(f.store.clone(), Arc::new(f.clock.clone()))
        .allow(&NewTpmAllow {
            ek_sha256_hex: machine.ek_sha256_hex(),
            tenant_id: "t1".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            actor: "ops@example.com".into(),
            note: String::new(),
        })
        .await
        .expect("allow-listed");
}

/// A renewal of `leaf` (whose key is `current` in `machine`'s TPM) for `next`'s CSR, with
/// `attestation`.
fn renewal(
    f: &Fixture,
    machine: &Machine,
    current: &str,
    leaf: &[u8],
    node_id: &str,
    next_csr: &[u8],
    attestation: Option<TpmKeyAttestation>,
) -> RenewInput {
    let client_time_ms = (f.clock.now_us() / 1000) as u64;
    let pop = RenewPop {
        csr_sha256: sha256(next_csr),
        node_id: NodeId::new(node_id).unwrap(),
        client_time_ms,
    };
    let sig = sign_with(&machine.signer(current), &pop).expect("the TPM key signs");
    RenewInput {
        csr_der: next_csr.to_vec(),
        chain: vec![leaf.to_vec()],
        client_time_ms,
        signature: sig.as_bytes().to_vec(),
        key_attestation: attestation,
    }
}

/// `certifier`'s AK certifies `key` (in the same TPM) over `sha256(csr)`.
fn attestation(certifier: &Machine, key: &str, csr: &[u8]) -> TpmKeyAttestation {
    let (certify_info, signature) = certifier.certify(key, &sha256(csr));
    TpmKeyAttestation {
        ak_public: certifier.ak_public(),
        key_public: certifier.public(key),
        certify_info,
        signature,
    }
}

#[tokio::test]
async fn an_allow_listed_tpm_joins_renews_with_its_ak_and_reclaims_its_node() {
    for db in TestDb::each().await.unwrap() {
        let f = tpm_fixture(db).await;
        let machine = Machine1::new();
        // Not allow-listed and no enrollment: refused after every proof.
        let (outcome, _) = machine.try_join(&f).await;
        assert_join_denied(outcome);
        assert_last_refusal(&f.store, "root", "tpm:unknown-ek").await;
        allow(&f, &machine).await;
        let (outcome, replay) = machine.join(&f).await;
        let answer = joined(outcome);
        let leaf = answer.certificate_chain[0].clone();
        let ak_name = machine.m.name(&machine.m.ak);
        let statement = format!("urn:bc:tpm-ak:000b:{}", hex::encode(&ak_name[2..]));
        assert_eq!(leaf_statements(&leaf), vec![statement.clone()]);
        let detail = f.svc.show_node(&answer.node_id).await.unwrap();
        assert_eq!(detail.node.attestor, "tpm");
        assert_eq!(detail.node.node_key, "tpm");
        assert_eq!(
            (detail.node.tenant_id.as_str(), detail.node.pool_id.as_str()),
            ("t1", "pool-1")
        );

        // The same answer again (the first one lost): the identity it was issued, nothing
        // reclaimed, nothing appended (issue 40).
        let before = all_events(&f.store).await.len();
        let again = joined(f.svc.attest(&replay).await.expect("answered again"));
        assert_eq!(again.certificate_chain, answer.certificate_chain);
        assert_eq!(all_events(&f.store).await.len(), before);
        assert_eq!(
            f.svc
                .show_node(&answer.node_id)
                .await
                .unwrap()
                .node
                .identity_generation,
            1
        );

        // Renewals: the next key in the same TPM.
        let next = machine
            .m
            .create_primary("o", NODE_ATTRIBUTES, Some(&[2; 32]));
        let next_csr = build_csr_with(&machine.m.signer(&next)).unwrap();
        let node_id = answer.node_id.clone();
        // No attestation: refused, recorded.
        let bare = renewal(
            &f,
            &machine.m,
            &machine.key,
            &leaf,
            &node_id,
            &next_csr,
            None,
        );
        assert_renew_denied(f.svc.renew(&bare).await);
        let (tenant, refused) = last_renew_refusal(&f.store).await;
        assert_eq!(
            (tenant.as_str(), refused.refusal.as_str()),
            ("t1", "renew:node-key-missing")
        );
        // Certified by another TPM's AK: refused.
        let other = Machine::new(EkKind::Rsa);
        let other_key = other.create_primary("o", NODE_ATTRIBUTES, Some(&[3; 32]));
        let other_csr = build_csr_with(&other.signer(&other_key)).unwrap();
        let foreign = renewal(
            &f,
            &machine.m,
            &machine.key,
            &leaf,
            &node_id,
            &other_csr,
            Some(attestation(&other, &other_key, &other_csr)),
        );
        assert_renew_denied(f.svc.renew(&foreign).await);
        let (_, refused) = last_renew_refusal(&f.store).await;
        assert_eq!(refused.refusal, "renew:node-key-ak");
        // The certificate still works: it renews with its AK's certification.
        f.clock.advance_secs(61);
        let good = renewal(
            &f,
            &machine.m,
            &machine.key,
            &leaf,
            &node_id,
            &next_csr,
            Some(attestation(&machine.m, &next, &next_csr)),
        );
        let renewed = f.svc.renew(&good).await.expect("the AK-certified renewal");
        let new_leaf = renewed.certificate_chain[0].clone();
        assert_eq!(leaf_statements(&new_leaf), vec![statement.clone()]);
        let new_identity =
            NodeIdentity::from_leaf_der(&new_leaf, &TrustDomain::new(TD).unwrap()).unwrap();
        assert_eq!(
            &new_identity.public_key,
            machine.m.signer(&next).public_key()
        );
        // Renewed since: the same answer again is refused, nothing reclaimed.
        assert_join_denied(f.svc.attest(&replay).await);
        assert_last_refusal(&f.store, "t1", "tpm:reused").await;

        // The same TPM joining again reclaims its node in place (the old key flushed: swtpm
        // holds three transient objects).
        machine.m.tool("tpm2_flushcontext", &[&machine.key]);
        let again = Machine1 {
            csr: build_csr_with(&machine.m.signer(&next)).unwrap(),
            key: next.clone(),
            m: machine.m,
        };
        let (outcome, _) = again.join(&f).await;
        let reclaimed = joined(outcome);
        assert_eq!(reclaimed.node_id, node_id);
        assert_eq!(reclaimed.identity_generation, 2);
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);
    }
}
