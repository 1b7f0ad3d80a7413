//! bcd's answer to a tpm challenge against real software TPMs: credentials made by another
//! swtpm's TPM2_MakeCredential (standing in for the control plane) are activated, the
//! quote is bound to the secret and the CSR and signed by the AK, and the node key is certified;
//! the producer's two rounds carry the same in the wire's JSON.

use bcd::attest::tpm::TpmProducer;
use bcd::attest::{EvidenceError, EvidenceProducer};
use bcd::tpm::{EkKind, Tpm, TpmError};
use domain::attest::tpm::{TpmAttestation, TpmChallenge, DEFAULT_QUOTE_PCRS};
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::Swtpm;
use tss_esapi::interface_types::structure_tags::AttestationType;
use tss_esapi::structures::AttestInfo;

use crate::tpm_support::{
    attest, es256_of, make_credential, name_of, p256_of, tpm, transient_handles,
};

const CSR_SHA256: [u8; 32] = [0xC5; 32];

fn challenge_for(tpm: &Tpm, maker: &Swtpm, secret: &[u8], pcrs: &[u32]) -> TpmChallenge {
    let evidence = tpm.join_evidence(&[]).unwrap();
    make_credential(
        maker,
        &evidence.ek_public,
        &name_of(&evidence.ak_public),
        secret,
        pcrs,
    )
}

fn check_quote(
    ak_public: &[u8],
    answer: &domain::attest::tpm::TpmAnswer,
    secret: &[u8],
    pcrs: &[u32],
) {
    let quote = attest(&answer.quote);
    assert_eq!(quote.attestation_type(), AttestationType::Quote);
    let mut extra = Sha256::new();
    extra.update(secret);
    extra.update(CSR_SHA256);
    assert_eq!(quote.extra_data().value(), extra.finalize().as_slice());
    let indices: Vec<u32> = answer.pcr_values.iter().map(|p| p.index).collect();
    assert_eq!(indices, pcrs);
    let AttestInfo::Quote { info } = quote.attested() else {
        panic!("not a quote");
    };
    let mut digest = Sha256::new();
    for pcr in &answer.pcr_values {
        assert_eq!(pcr.digest.len(), 32);
        digest.update(&pcr.digest);
    }
    assert_eq!(info.pcr_digest().value(), digest.finalize().as_slice());
    let signature = es256_of(&answer.quote_signature);
    assert!(p256_of(ak_public).verify_es256(&answer.quote, &signature));
}

#[test]
fn a_software_credential_is_activated_and_the_quote_bound_to_it() {
    let (swtpm, tpm) = tpm();
    let maker = Swtpm::start();
    let secret = [0x42u8; 32];
    let challenge = challenge_for(&tpm, &maker, &secret, &DEFAULT_QUOTE_PCRS);
    let key = tpm.create_node_key().unwrap();
    let answer = tpm
        .answer_challenge(&challenge, &CSR_SHA256, Some(&key))
        .unwrap();
    assert_eq!(answer.secret, secret);
    assert_eq!(answer.state, b"opaque state");
    let ak = tpm.attestation_key().unwrap();
    check_quote(&ak.public_area, &answer, &secret, &DEFAULT_QUOTE_PCRS);
    let certified = answer.node_key.expect("a node key was given");
    assert_eq!(certified.public, key.public_area());
    let info = attest(&certified.certify_info);
    assert_eq!(info.extra_data().value(), CSR_SHA256);
    let AttestInfo::Certify { info: certify } = info.attested() else {
        panic!("not a certify attest");
    };
    assert_eq!(certify.name().value(), name_of(key.public_area()));
    assert!(p256_of(&ak.public_area)
        .verify_es256(&certified.certify_info, &es256_of(&certified.signature)));
    // Without a node key the answer claims nothing about one.
    let again = challenge_for(&tpm, &maker, &secret, &[7]);
    let answer = tpm.answer_challenge(&again, &CSR_SHA256, None).unwrap();
    assert_eq!(answer.node_key, None);
    check_quote(&ak.public_area, &answer, &secret, &[7]);
    drop((key, tpm));
    assert_eq!(transient_handles(&swtpm), Vec::<String>::new());
}

#[test]
fn the_p384_ek_activates_through_its_policy_b() {
    let (_swtpm, tpm) = tpm();
    tpm.use_ek(EkKind::EccP384).unwrap();
    let maker = Swtpm::start();
    let secret = b"a secret of another length".to_vec();
    let challenge = challenge_for(&tpm, &maker, &secret, &[0, 1, 2]);
    let answer = tpm.answer_challenge(&challenge, &CSR_SHA256, None).unwrap();
    assert_eq!(answer.secret, secret);
    check_quote(
        &tpm.attestation_key().unwrap().public_area,
        &answer,
        &secret,
        &[0, 1, 2],
    );
}

#[test]
fn a_credential_for_another_tpm_or_altered_is_not_activated() {
    let (_swtpm, tpm) = tpm();
    let (_other_swtpm, other) = crate::tpm_support::tpm();
    let maker = Swtpm::start();
    let for_other = challenge_for(&other, &maker, &[1; 32], &[0]);
    let err = tpm
        .answer_challenge(&for_other, &CSR_SHA256, None)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            TpmError::Command {
                operation: "activate_credential",
                ..
            }
        ),
        "{err:?}"
    );
    let mut altered = challenge_for(&tpm, &maker, &[1; 32], &[0]);
    let last = altered.credential_blob.len() - 1;
    altered.credential_blob[last] ^= 1;
    let err = tpm
        .answer_challenge(&altered, &CSR_SHA256, None)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            TpmError::Command {
                operation: "activate_credential",
                ..
            }
        ),
        "{err:?}"
    );
    // The failures left nothing loaded: a good challenge still works.
    let good = challenge_for(&tpm, &maker, &[1; 32], &[0]);
    assert_eq!(
        tpm.answer_challenge(&good, &CSR_SHA256, None)
            .unwrap()
            .secret,
        [1; 32]
    );
}

#[test]
fn a_challenge_bcd_cannot_answer_says_why() {
    let (_swtpm, tpm) = tpm();
    let maker = Swtpm::start();
    let mut challenge = challenge_for(&tpm, &maker, &[1; 32], &[0]);
    challenge.pcrs = vec![3, 24];
    assert_eq!(
        tpm.answer_challenge(&challenge, &CSR_SHA256, None)
            .unwrap_err(),
        TpmError::BadChallenge("it asks for PCR 24 (the SHA-256 bank has 0 to 23)".into())
    );
    challenge.pcrs = vec![0];
    challenge.v = 2;
    assert_eq!(
        tpm.answer_challenge(&challenge, &CSR_SHA256, None)
            .unwrap_err(),
        TpmError::BadChallenge("it is version 2 (bcd answers version 1)".into())
    );
    challenge.v = 1;
    challenge.credential_blob = vec![0; 400];
    assert!(matches!(
        tpm.answer_challenge(&challenge, &CSR_SHA256, None)
            .unwrap_err(),
        TpmError::BadChallenge(_)
    ));
}

#[test]
fn the_producer_sends_the_evidence_then_the_answer() {
    let (_swtpm, tpm) = tpm();
    let key = tpm.create_node_key().unwrap();
    let issuer = swtpm_fixture::swtpm::ek_ca().issuer_der();
    let producer = TpmProducer::new(tpm.clone(), vec![issuer.clone()], Some(key.clone()));
    assert_eq!(producer.id(), "tpm");
    let round1: TpmAttestation =
        serde_json::from_slice(&producer.produce(1, &CSR_SHA256, None).unwrap()).unwrap();
    let evidence = round1.evidence.expect("round 1 is evidence");
    assert_eq!((round1.v, round1.answer), (1, None));
    assert_eq!(evidence.ek_intermediates, vec![issuer]);
    assert_eq!(
        evidence.ak_public,
        tpm.attestation_key().unwrap().public_area
    );
    let maker = Swtpm::start();
    let secret = [9u8; 32];
    let challenge = make_credential(
        &maker,
        &evidence.ek_public,
        &name_of(&evidence.ak_public),
        &secret,
        &[0, 7],
    );
    let round2: TpmAttestation = serde_json::from_slice(
        &producer
            .produce(2, &CSR_SHA256, Some(&challenge.to_bytes()))
            .unwrap(),
    )
    .unwrap();
    let answer = round2.answer.expect("round 2 is an answer");
    assert_eq!(answer.secret, secret);
    assert_eq!(
        answer.node_key.expect("certified").public,
        key.public_area()
    );
    assert_eq!(
        producer.produce(2, &CSR_SHA256, Some(b"{}")).unwrap_err(),
        EvidenceError::Failed {
            attestor: "tpm".into(),
            reason: "the control plane's challenge is not a tpm challenge: missing field `v` at line 1 column 2".into(),
        }
    );
}
