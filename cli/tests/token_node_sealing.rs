//! The Python recipe of docs/TOKEN-SEALING.md seals a token that the JoinService opens, and only
//! for the CSR it was bound to. Skipped (with a note) when python3 or `cryptography` is missing.

use std::process::Command;

use domain::pki::{
    build_csr, KeyRole, KeySet, KeySetLifetimes, PrivateKey, SealedToken, TokenSecret, TrustDomain,
};
use time::OffsetDateTime;

/// The recipe, exactly as the document gives it, plus a driver reading hex arguments.
fn recipe() -> String {
    let doc = include_str!("../../docs/TOKEN-SEALING.md");
    let start = doc
        .find("```python\nimport hashlib")
        .expect("the recipe block")
        + 10;
    let end = start + doc[start..].find("```").expect("end of the recipe block");
    format!(
        "{}\nimport sys\nsys.stdout.write(seal_token(bytes.fromhex(sys.argv[1]), sys.argv[2], bytes.fromhex(sys.argv[3])).hex())\n",
        &doc[start..end]
    )
}

#[test]
fn python_recipe_seals_what_the_join_service_opens() {
    let probe = Command::new("python3")
        .args(["-c", "import cryptography"])
        .output();
    if !matches!(probe, Ok(ref o) if o.status.success()) {
        eprintln!("skipped: python3 with the cryptography package is not installed");
        return;
    }
    let keys = KeySet::generate(
        TrustDomain::new("seal.example.com").expect("td"),
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("keys");
    let secret = TokenSecret::generate().expect("secret");
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let csr = build_csr(&key).expect("csr");
    let out = Command::new("python3")
        .args([
            "-c",
            &recipe(),
            &hex::encode(keys.join_encryption.public_key().spki_der()),
            secret.expose(),
            &hex::encode(&csr),
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "recipe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sealed_bytes = hex::decode(String::from_utf8_lossy(&out.stdout).trim()).expect("hex");
    assert_eq!(sealed_bytes.len(), 1 + 65 + 12 + secret.expose().len() + 16);
    let sealed = SealedToken::from_bytes(&sealed_bytes).expect("shape");
    let opened = keys
        .join_encryption
        .open(&sealed, &domain::identity::sha256(&csr))
        .expect("the JoinService opens the recipe's seal");
    assert_eq!(opened.expose(), secret.expose());

    // Bound to the CSR: another CSR's digest does not open it.
    let other = build_csr(&PrivateKey::generate(KeyRole::Node).expect("key")).expect("csr");
    assert!(keys
        .join_encryption
        .open(&sealed, &domain::identity::sha256(&other))
        .is_err());
}
