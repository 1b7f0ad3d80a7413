//! bcd's tpm producer through the control plane's verifier (`domain::attest::tpm::TpmAttestor`):
//! both rounds of a join on a real swtpm, RSA-2048 and P-384 EKs, the node key the AK certified
//! is the CSR's; a renewal's certification of the next key passes the shared check.

use std::collections::BTreeMap;
use std::time::Duration;

use bcd::attest::tpm::TpmProducer;
use bcd::attest::EvidenceProducer;
use bcd::tpm::EkKind;
use domain::attest::tpm::{
    check_ak, verify_key_certification, KeyCertRefusal, KeyCertification, NodeKeyPolicy,
    TpmAttestation, TpmAttestor, TpmConfig,
};
use domain::attest::{
    AttestRequest, Attestor, EntryState, FactKey, Facts, NodeKeyStatement, Verdict,
};
use domain::identity::{claims_digests, HardwareClaims};
use domain::pki::{build_csr_with, NodeRole, NodeSigner, VerifiedCsr};
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::ek_ca;
use time::OffsetDateTime;

use crate::tpm_support::tpm;

fn attestor() -> TpmAttestor {
    TpmAttestor::new(TpmConfig {
        ek_roots: vec![ek_ca().root_der()],
        pcr_policy: BTreeMap::new(),
        node_key: NodeKeyPolicy::Certified,
        enrollment: None,
        challenge_key: [3; 32],
        challenge_ttl: Duration::from_secs(300),
    })
}

fn two_rounds(kind: Option<EkKind>) {
    let (_swtpm, tpm) = tpm();
    if let Some(kind) = kind {
        tpm.use_ek(kind).unwrap();
    }
    let key = tpm.create_node_key().unwrap();
    let csr = VerifiedCsr::verify(&build_csr_with(&key).unwrap()).unwrap();
    let producer = TpmProducer::new(tpm.clone(), vec![ek_ca().issuer_der()], Some(key.clone()));
    let claims = HardwareClaims::default();
    let digests = claims_digests(&claims);
    let now = OffsetDateTime::now_utc();
    let attestor = attestor();
    let round1 = producer.produce(1, csr.sha256(), None).unwrap();
    let sent: TpmAttestation = serde_json::from_slice(&round1).unwrap();
    let ek: [u8; 32] = Sha256::digest(&sent.evidence.expect("evidence").ek_public).into();
    let request = |evidence: &[u8]| -> Verdict {
        let r = AttestRequest {
            role: NodeRole::Node,
            csr: &csr,
            claims: &claims,
            digests: &digests,
            evidence,
            token: None,
            now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        };
        let mut facts = Facts::default();
        facts.entries.insert(
            ("tpm-allow".into(), hex::encode(ek)),
            EntryState {
                entry_id: "tpma_1".into(),
                tenant_id: "t1".into(),
                site_id: "s1".into(),
                pool_id: "p1".into(),
                role: None,
            },
        );
        let planned = attestor.plan(&r).expect("the attestor plans");
        if !planned.facts.is_empty() {
            assert_eq!(
                planned.facts,
                vec![
                    FactKey::Binding(ek),
                    FactKey::Entry {
                        list: "tpm-allow".into(),
                        key: hex::encode(ek),
                    }
                ]
            );
        }
        attestor.verify(&r, &planned.plan, &facts)
    };
    let Verdict::Challenge(challenge) = request(&round1) else {
        panic!("round 1 is answered with a challenge");
    };
    let round2 = producer
        .produce(2, csr.sha256(), Some(&challenge.payload))
        .unwrap();
    let result = match request(&round2) {
        Verdict::Admit(result) => result,
        other => panic!("round 2 admits, got {other:?}"),
    };
    let ak = tpm.attestation_key().unwrap();
    assert_eq!(
        result.node_key,
        NodeKeyStatement::Statement {
            label: "tpm".into(),
            uri: ak.statement(),
        }
    );
    assert_eq!(
        (result.tenant_id.as_str(), result.site_id.as_str()),
        ("t1", "s1")
    );

    // A renewal: the next key in the same TPM, certified by the same AK over the new CSR.
    let next = tpm.create_node_key().unwrap();
    let next_csr = VerifiedCsr::verify(&build_csr_with(&next).unwrap()).unwrap();
    let certified = tpm.certify(&next, next_csr.sha256()).unwrap();
    let checked_ak = check_ak(&ak.public_area).expect("the AK passes the verifier's AK check");
    assert_eq!(checked_ak.statement(), ak.statement());
    let cert = KeyCertification {
        key_public: &certified.public,
        certify_info: &certified.certify_info,
        signature: &certified.signature,
    };
    let point = next.public_key().uncompressed_point().to_vec();
    assert_eq!(
        verify_key_certification(&checked_ak, cert, next_csr.sha256(), &point),
        Ok(())
    );
    // Qualified by another CSR: refused for the nonce.
    let cert = KeyCertification {
        key_public: &certified.public,
        certify_info: &certified.certify_info,
        signature: &certified.signature,
    };
    assert_eq!(
        verify_key_certification(&checked_ak, cert, csr.sha256(), &point),
        Err(KeyCertRefusal::Nonce)
    );
}

#[test]
fn the_producer_joins_through_the_verifier_with_the_rsa_ek() {
    two_rounds(None);
}

#[test]
fn the_producer_joins_through_the_verifier_with_the_p384_ek() {
    two_rounds(Some(EkKind::EccP384));
}
