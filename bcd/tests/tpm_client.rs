//! bcd's TPM client against real software TPMs (swtpm): the EK certificate, the AK, node keys,
//! their signatures and CSRs, the AK's certification, and what TPM2_Clear changes. Each test has
//! its own swtpm; tpm2-tools and openssl check what bcd reads independently.

use bcd::tpm::{AttestationKey, EkKind, Tpm, TpmError};
use domain::pki::{build_csr_with, NodeSigner, VerifiedCsr};
use swtpm_fixture::swtpm::{ek_ca, Swtpm};
use tss_esapi::interface_types::structure_tags::AttestationType;
use tss_esapi::structures::{AttestInfo, Public};

use crate::tpm_support::{
    attest, es256_of, name_of, p256_of, public, tool, tpm, transient_handles,
};

#[test]
fn the_ek_certificate_comes_from_nv_and_chains_to_the_ek_ca() {
    let (swtpm, tpm) = tpm();
    let issuer = ek_ca().issuer_der();
    let evidence = tpm.join_evidence(std::slice::from_ref(&issuer)).unwrap();
    assert_eq!(evidence.ek_intermediates, vec![issuer]);
    // The RSA-2048 EK (TCG L-1): its modulus is the certificate's key.
    let Public::Rsa {
        unique,
        object_attributes,
        ..
    } = public(&evidence.ek_public)
    else {
        panic!("the first EK looked for is RSA-2048");
    };
    assert!(object_attributes.restricted() && object_attributes.decrypt());
    assert!(
        !object_attributes.user_with_auth(),
        "L-1 has userWithAuth clear"
    );
    let (_, cert) = x509_parser::parse_x509_certificate(&evidence.ek_certificate).unwrap();
    let spki = cert.public_key().subject_public_key.data.to_vec();
    assert_eq!(unique.value().len(), 256);
    assert!(
        spki.windows(256).any(|w| w == unique.value()),
        "the certificate's RSA key is not the EK's"
    );
    // openssl, an independent checker: leaf → issuer → root.
    let dir = tempfile::tempdir().unwrap();
    let der = dir.path().join("ek.der");
    let pem = dir.path().join("ek.pem");
    std::fs::write(&der, &evidence.ek_certificate).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["x509", "-inform", "DER", "-in"])
        .arg(&der)
        .arg("-out")
        .arg(&pem)
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ek_ca().root_pem_path())
        .arg("-untrusted")
        .arg(ek_ca().issuer_pem_path())
        .arg(&pem)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: OK", pem.display())
    );
    drop(tpm);
    assert_eq!(
        transient_handles(&swtpm),
        Vec::<String>::new(),
        "the EK and AK were flushed"
    );
}

#[test]
fn the_p384_ek_is_used_when_asked_and_its_x_is_the_certificates() {
    let (_swtpm, tpm) = tpm();
    tpm.use_ek(EkKind::EccP384).unwrap();
    let evidence = tpm.join_evidence(&[]).unwrap();
    let Public::Ecc {
        unique,
        name_hashing_algorithm,
        ..
    } = public(&evidence.ek_public)
    else {
        panic!("asked for the P-384 EK");
    };
    assert_eq!(
        name_hashing_algorithm,
        tss_esapi::interface_types::algorithm::HashingAlgorithm::Sha384
    );
    assert_eq!(unique.x().value().len(), 48);
    let (_, cert) = x509_parser::parse_x509_certificate(&evidence.ek_certificate).unwrap();
    let point = cert.public_key().subject_public_key.data.to_vec();
    assert_eq!(point[0], 4);
    assert_eq!(&point[1..49], unique.x().value());
    assert_eq!(&point[49..], unique.y().value());
    // No P-256 EK certificate in swtpm's NV.
    assert_eq!(
        tpm.use_ek(EkKind::EccP256).unwrap_err(),
        TpmError::NoEkCertificate("0x01C0000A (P-256)".into())
    );
}

#[test]
fn the_ak_is_an_endorsement_primary_and_the_same_after_a_restart() {
    let (mut swtpm, tpm) = tpm();
    let ak = tpm.attestation_key().unwrap();
    assert_eq!(tpm.attestation_key().unwrap(), ak);
    assert_eq!(ak.name, name_of(&ak.public_area));
    assert_eq!(AttestationKey::from_public_area(ak.public_area.clone()), ak);
    let digest: String = ak.name[2..].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(ak.statement(), format!("urn:bc:tpm-ak:000b:{digest}"));
    let attributes = public(&ak.public_area).object_attributes();
    assert!(
        attributes.fixed_tpm() && attributes.fixed_parent() && attributes.sensitive_data_origin()
    );
    assert!(attributes.restricted() && attributes.sign_encrypt() && attributes.user_with_auth());
    assert!(!attributes.decrypt());
    drop(tpm);
    // Power off and on: nothing was persisted, the endorsement seed derives the same AK.
    swtpm.restart();
    let again = Tpm::open(&swtpm.tcti()).unwrap();
    assert_eq!(again.attestation_key().unwrap(), ak);
    drop(again);
    assert_eq!(transient_handles(&swtpm), Vec::<String>::new());
}

#[test]
fn a_node_key_derived_again_from_its_unique_is_the_same_key() {
    let (_swtpm, tpm) = tpm();
    let key = tpm.create_node_key().unwrap();
    let again = tpm.load_node_key(key.unique()).unwrap();
    assert_eq!(again.public_key(), key.public_key());
    assert_eq!(again.public_area(), key.public_area());
    assert_eq!(p256_of(key.public_area()), *key.public_key());
    let other = tpm.create_node_key().unwrap();
    assert_ne!(other.unique(), key.unique());
    assert_ne!(other.public_key(), key.public_key());
    let attributes = public(key.public_area()).object_attributes();
    assert!(
        attributes.fixed_tpm() && attributes.fixed_parent() && attributes.sensitive_data_origin()
    );
    assert!(attributes.sign_encrypt() && attributes.no_da() && attributes.user_with_auth());
    assert!(!attributes.restricted() && !attributes.decrypt());
    assert_eq!(key.tpm().map(|t| t.tcti()), Some(tpm.tcti()));
}

#[test]
fn a_node_key_signs_es256_and_its_csr_verifies() {
    let (swtpm, tpm) = tpm();
    let key = tpm.create_node_key().unwrap();
    let other = tpm.create_node_key().unwrap();
    let signature = key.sign_es256(b"a message").unwrap();
    assert!(key.public_key().verify_es256(b"a message", &signature));
    assert!(!key
        .public_key()
        .verify_es256(b"another message", &signature));
    // Alternating keys: each signs with its own (the loaded one is swapped, never a fourth slot).
    for _ in 0..3 {
        let s = other.sign_es256(b"x").unwrap();
        assert!(other.public_key().verify_es256(b"x", &s));
        let s = key.sign_es256(b"y").unwrap();
        assert!(key.public_key().verify_es256(b"y", &s));
    }
    let csr = build_csr_with(&key).unwrap();
    let verified = VerifiedCsr::verify(&csr).unwrap();
    assert_eq!(verified.public_key(), key.public_key());
    drop((key, other, tpm));
    assert_eq!(
        transient_handles(&swtpm),
        Vec::<String>::new(),
        "the loaded node key was flushed"
    );
}

#[test]
fn the_ak_certifies_a_node_key_over_the_qualifying_data() {
    let (_swtpm, tpm) = tpm();
    let key = tpm.create_node_key().unwrap();
    let ak = tpm.attestation_key().unwrap();
    let qualifying = [0x5A; 32];
    let certified = tpm.certify(&key, &qualifying).unwrap();
    assert_eq!(certified.public, key.public_area());
    let info = attest(&certified.certify_info);
    assert_eq!(info.attestation_type(), AttestationType::Certify);
    assert_eq!(info.extra_data().value(), qualifying);
    let AttestInfo::Certify { info: certify } = info.attested() else {
        panic!("not a certify attest");
    };
    assert_eq!(certify.name().value(), name_of(key.public_area()));
    assert_eq!(info.qualified_signer().value()[..2], [0x00, 0x0B]);
    // The AK's signature covers SHA-256 of the attest bytes: ES256 over them.
    let signature = es256_of(&certified.signature);
    assert!(p256_of(&ak.public_area).verify_es256(&certified.certify_info, &signature));
    assert!(!p256_of(key.public_area()).verify_es256(&certified.certify_info, &signature));
}

#[test]
fn after_tpm2_clear_the_node_key_is_another_and_the_ak_the_same() {
    let (swtpm, tpm) = tpm();
    let key = tpm.create_node_key().unwrap();
    let (unique, public_key) = (*key.unique(), key.public_key().clone());
    let ak = tpm.attestation_key().unwrap();
    let ek = tpm.join_evidence(&[]).unwrap().ek_public;
    drop((key, tpm));
    tool(&swtpm, "tpm2_clear", &["-c", "p"]);
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let after = tpm.load_node_key(&unique).unwrap();
    assert_ne!(after.public_key(), &public_key, "the owner seed changed");
    assert_eq!(
        tpm.attestation_key().unwrap(),
        ak,
        "the endorsement seed did not"
    );
    assert_eq!(tpm.join_evidence(&[]).unwrap().ek_public, ek);
}

#[test]
fn a_tpm_nobody_listens_on_is_unavailable() {
    let mut swtpm = Swtpm::start();
    let tcti = swtpm.tcti();
    swtpm.stop();
    let err = Tpm::open(&tcti).unwrap_err();
    assert!(
        matches!(&err, TpmError::Unavailable { tcti: t, .. } if *t == tcti),
        "{err:?}"
    );
    let err = Tpm::open("nonsense:").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the TPM (nonsense:) is unavailable: not a TCTI bcd knows (the provided parameter is \
         invalid for that type.): write device:/dev/tpmrm0, swtpm:host=HOST,port=PORT, \
         mssim:host=HOST,port=PORT or tabrmd"
    );
}

#[test]
fn threads_share_one_tpm_and_their_keys_sign_as_themselves() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Tpm>();
    send_sync::<bcd::tpm::TpmNodeKey>();
    let (swtpm, tpm) = tpm();
    let keys: Vec<_> = (0..4).map(|_| tpm.create_node_key().unwrap()).collect();
    let threads: Vec<_> = keys
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, key)| {
            std::thread::spawn(move || {
                for n in 0..10u8 {
                    let message = [i as u8, n];
                    let signature = key.sign_es256(&message).unwrap();
                    assert!(key.public_key().verify_es256(&message, &signature));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop((keys, tpm));
    assert_eq!(transient_handles(&swtpm), Vec::<String>::new());
}
