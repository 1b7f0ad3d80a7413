//! What the node checks in every answer of `bcd helper` (spec 002 "Through bcd helper"), with
//! domain's TPM structure parsing: a derived key has the node-key attributes, a signature
//! verifies against the key's public half, a certification verifies under the AK the helper
//! announced, for this key and this qualifying data.

use domain::attest::tpm::keys::{
    check_ak, is_p256_es256, verify_key_certification, Ak, KeyCertRefusal, KeyCertification,
    NODE_KEY_FORBIDDEN, NODE_KEY_REQUIRED,
};
use domain::attest::tpm::public::{attr, KeyDetail, TpmPublic};
use domain::pki::{PublicKey, Signature};

use super::client::HelperError;

/// Every attribute bcd's node-key template sets (`templates::node_key_template`).
pub const HELPER_NODE_KEY_REQUIRED: u32 = NODE_KEY_REQUIRED | attr::USER_WITH_AUTH | attr::NO_DA;

/// A derived key's TPMT_PUBLIC: it parses, is a P-256 ECDSA-SHA256 (or scheme NULL) key named
/// with SHA-256, with fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, noDA and sign,
/// neither restricted nor decrypt. Its public half.
pub fn check_node_key(public_area: &[u8]) -> Result<PublicKey, HelperError> {
    let public = TpmPublic::parse(public_area)
        .map_err(|e| HelperError::NotNodeKey(format!("its TPMT_PUBLIC does not parse ({e})")))?;
    if !matches!(public.detail, KeyDetail::Ecc { .. }) {
        return Err(HelperError::NotNodeKey("it is not an ECC key".into()));
    }
    if !is_p256_es256(&public) {
        return Err(HelperError::NotNodeKey(
            "it is not a P-256 ECDSA-SHA256 key with a SHA-256 name".into(),
        ));
    }
    if !public.has(HELPER_NODE_KEY_REQUIRED, NODE_KEY_FORBIDDEN) {
        return Err(HelperError::NotNodeKey(format!(
            "its attributes are {:#010x}: fixedTPM, fixedParent, sensitiveDataOrigin, \
             userWithAuth, noDA and sign must be set, restricted and decrypt clear",
            public.attributes
        )));
    }
    let point = public
        .ecc_point(32)
        .ok_or_else(|| HelperError::NotNodeKey("its point is not a P-256 point".into()))?;
    PublicKey::from_uncompressed_point(&point)
        .map_err(|e| HelperError::NotNodeKey(format!("its point is not a P-256 point ({e})")))
}

/// A signature of `message` by `public`, as the helper's raw r‖s.
pub fn check_signature(
    public: &PublicKey,
    message: &[u8],
    raw: &[u8],
) -> Result<Signature, HelperError> {
    match Signature::from_bytes(raw) {
        Some(signature) if public.verify_es256(message, &signature) => Ok(signature),
        _ => Err(HelperError::AnotherSigner),
    }
}

/// The AK the helper announced: an AK by domain's check.
pub fn check_announced_ak(public_area: &[u8]) -> Result<Ak, HelperError> {
    check_ak(public_area).map_err(|e| HelperError::BadAk(e.to_string()))
}

/// The helper's certification of the key `key_public` (whose point is `point`), qualified by
/// `qualifying`: signed by `ak` (else [`HelperError::AnotherAk`]), of this key's name, with
/// this qualifying data and a node key's attributes.
pub fn check_certification(
    ak: &Ak,
    key_public: &[u8],
    point: &[u8],
    qualifying: &[u8; 32],
    attest: &[u8],
    signature: &[u8],
) -> Result<(), HelperError> {
    let cert = KeyCertification {
        key_public,
        certify_info: attest,
        signature,
    };
    verify_key_certification(ak, cert, qualifying, point).map_err(|refusal| match refusal {
        KeyCertRefusal::Signature => HelperError::AnotherAk,
        other => HelperError::Certification(other.reason()),
    })
}
