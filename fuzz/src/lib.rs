//! What the fuzz targets share: fixed test keys (so committed seeds sealed or signed with them
//! reach past the crypto checks), the trust domain, and the CSR hash sealed tokens are bound to.
//!
//! The keys in `fuzz/keys/` are test keys made by `fuzz/seedgen` with the project's own key
//! code; they protect nothing.

use std::sync::OnceLock;

use domain::audit::AuditSigner;
use domain::pki::{JoinEncryptionKey, KeyRole, PrivateKey, TrustDomain};

/// The trust domain every seed is made in.
pub const TRUST_DOMAIN: &str = "fuzz.example.com";
/// The tenant of the audit seeds.
pub const TENANT: &str = "t-fuzz";
/// The deployment secret the sealed bundle seed is sealed under.
pub const DEPLOYMENT_SECRET: &str = "fuzz-deployment-secret-0123456789abcdef";

const JOIN_ENCRYPTION_PKCS8: &[u8] = include_bytes!("../keys/join_encryption.pk8");
const JOIN_SIGNING_PKCS8: &[u8] = include_bytes!("../keys/join_signing.pk8");
const AUDIT_SIGNING_PKCS8: &[u8] = include_bytes!("../keys/audit_signing.pk8");

/// The CSR hash the sealed-token seeds are bound to (SHA-256 of `fuzz-csr`).
pub fn csr_sha256() -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(b"fuzz-csr").into()
}

/// The trust domain, parsed.
pub fn trust_domain() -> TrustDomain {
    TrustDomain::new(TRUST_DOMAIN).expect("the fuzz trust domain is valid")
}

/// The JoinService encryption key the token seeds are sealed to.
pub fn join_encryption_key() -> &'static JoinEncryptionKey {
    static KEY: OnceLock<JoinEncryptionKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let key = PrivateKey::from_pkcs8_der(KeyRole::JoinEncryption, JOIN_ENCRYPTION_PKCS8)
            .expect("fuzz/keys/join_encryption.pk8 is a P-256 PKCS#8 key");
        JoinEncryptionKey::new(key).expect("a join encryption key")
    })
}

/// The join signing key (trust bundles).
pub fn join_signing_key() -> &'static PrivateKey {
    static KEY: OnceLock<PrivateKey> = OnceLock::new();
    KEY.get_or_init(|| {
        PrivateKey::from_pkcs8_der(KeyRole::JoinSigning, JOIN_SIGNING_PKCS8)
            .expect("fuzz/keys/join_signing.pk8 is a P-256 PKCS#8 key")
    })
}

/// The audit signing key (checkpoints).
pub fn audit_signer() -> &'static AuditSigner {
    static KEY: OnceLock<AuditSigner> = OnceLock::new();
    KEY.get_or_init(|| {
        AuditSigner::from_pkcs8(AUDIT_SIGNING_PKCS8, &ring::rand::SystemRandom::new())
            .expect("fuzz/keys/audit_signing.pk8 is a P-256 PKCS#8 key")
    })
}

/// The audit origin of [`TENANT`].
pub fn audit_origin() -> String {
    domain::audit::audit_origin(TRUST_DOMAIN, TENANT).expect("a valid origin")
}

/// Splits fuzz input into a selector byte and the rest.
pub fn split_selector(data: &[u8]) -> Option<(u8, &[u8])> {
    data.split_first().map(|(s, rest)| (*s, rest))
}
