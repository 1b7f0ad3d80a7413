//! The templates bcd derives its TPM keys from (the contract in `docs/DECISIONS.md`, issue 19):
//! the AK (endorsement primary, restricted P-256 ECDSA-SHA256), node keys (owner primaries,
//! unrestricted P-256 ECDSA-SHA256, unique = the 32-byte record), the TCG default EK templates
//! bcd looks for, and the EK policy digests ActivateCredential has to satisfy.
//!
//! Without the `tpm` feature only [`EkKind`] and the policy digests are here (the templates are
//! tss-esapi structures).

use sha2::{Digest as _, Sha384};
#[cfg(feature = "tpm")]
use tss_esapi::{
    abstraction::{ek, AsymmetricAlgorithmSelection},
    attributes::ObjectAttributesBuilder,
    interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm},
    interface_types::ecc::EccCurve,
    interface_types::key_bits::RsaKeyBits,
    structures::{
        EccParameter, EccPoint, EccScheme, HashScheme, KeyDerivationFunctionScheme, Public,
        PublicBuilder, PublicEccParametersBuilder, SymmetricDefinitionObject,
    },
};

/// The EKs bcd knows, in the order it looks for their certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EkKind {
    /// RSA-2048, TCG template L-1, certificate at NV 0x01C00002.
    Rsa2048,
    /// ECC P-256, TCG template L-2, certificate at NV 0x01C0000A.
    EccP256,
    /// ECC P-384, TCG template H-3, certificate at NV 0x01C00016.
    EccP384,
}

impl EkKind {
    /// Every kind, in the order bcd looks for them.
    pub const ALL: [EkKind; 3] = [EkKind::Rsa2048, EkKind::EccP256, EkKind::EccP384];

    /// The NV index of its certificate (TCG EK Credential Profile 2.x, §2.2.1.4 and §2.2.1.5).
    pub fn certificate_index(self) -> u32 {
        match self {
            EkKind::Rsa2048 => 0x01C0_0002,
            EkKind::EccP256 => 0x01C0_000A,
            EkKind::EccP384 => 0x01C0_0016,
        }
    }

    /// Its name in messages (`RSA-2048`, `P-256`, `P-384`).
    pub fn label(self) -> &'static str {
        match self {
            EkKind::Rsa2048 => "RSA-2048",
            EkKind::EccP256 => "P-256",
            EkKind::EccP384 => "P-384",
        }
    }

    #[cfg(feature = "tpm")]
    fn selection(self) -> AsymmetricAlgorithmSelection {
        match self {
            EkKind::Rsa2048 => AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048),
            EkKind::EccP256 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
            EkKind::EccP384 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP384),
        }
    }

    /// Whether its template is one of the high range (H-*): SHA-384 policies, PolicyB.
    pub fn high_range(self) -> bool {
        matches!(self, EkKind::EccP384)
    }
}

/// The TCG default template of `kind` (what the manufacturer certified).
#[cfg(feature = "tpm")]
pub fn ek_template(kind: EkKind) -> Result<Public, tss_esapi::Error> {
    ek::create_ek_public_from_default_template_2(kind.selection(), None)
}

/// The AK template: ECC P-256, nameAlg SHA-256, ECDSA-SHA256, fixedTPM | fixedParent |
/// sensitiveDataOrigin | userWithAuth | noDA | restricted | sign, an empty unique. Being a
/// primary of the endorsement hierarchy, the same TPM derives the same AK from it every time.
#[cfg(feature = "tpm")]
pub fn ak_template() -> Result<Public, tss_esapi::Error> {
    signing_template(true, EccPoint::default())
}

/// A node key's template: ECC P-256, nameAlg SHA-256, ECDSA-SHA256, fixedTPM | fixedParent |
/// sensitiveDataOrigin | userWithAuth | noDA | sign (restricted and decrypt clear), its unique
/// x the 32-byte record and y empty.
#[cfg(feature = "tpm")]
pub fn node_key_template(unique: &[u8; 32]) -> Result<Public, tss_esapi::Error> {
    let x = EccParameter::try_from(unique.to_vec())?;
    signing_template(false, EccPoint::new(x, EccParameter::default()))
}

#[cfg(feature = "tpm")]
fn signing_template(restricted: bool, unique: EccPoint) -> Result<Public, tss_esapi::Error> {
    let attributes = ObjectAttributesBuilder::new()
        .with_fixed_tpm(true)
        .with_fixed_parent(true)
        .with_sensitive_data_origin(true)
        .with_user_with_auth(true)
        .with_no_da(true)
        .with_restricted(restricted)
        .with_decrypt(false)
        .with_sign_encrypt(true)
        .build()?;
    let parameters = PublicEccParametersBuilder::new()
        .with_symmetric(SymmetricDefinitionObject::Null)
        .with_ecc_scheme(EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)))
        .with_curve(EccCurve::NistP256)
        .with_key_derivation_function_scheme(KeyDerivationFunctionScheme::Null)
        .with_is_signing_key(true)
        .with_is_decryption_key(false)
        .with_restricted(restricted)
        .build()?;
    PublicBuilder::new()
        .with_public_algorithm(PublicAlgorithm::Ecc)
        .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
        .with_object_attributes(attributes)
        .with_ecc_parameters(parameters)
        .with_ecc_unique_identifier(unique)
        .build()
}

/// TPM_CC_PolicySecret.
const CC_POLICY_SECRET: u32 = 0x0000_0151;
/// TPM_CC_PolicyOR.
#[cfg(all(test, feature = "tpm"))]
const CC_POLICY_OR: u32 = 0x0000_0171;
/// TPM_RH_ENDORSEMENT, whose name is its handle.
const RH_ENDORSEMENT: u32 = 0x4000_000B;

/// PolicyC of the TCG EK Credential Profile 2.5 (§B.6) for SHA-384: PolicyAuthorizeNV of the
/// EK policy index 0x01C07F01. (A unit test checks that PolicyOR(PolicyA, PolicyC) is the H-3
/// template's authPolicy, so a wrong byte here fails the build's tests.)
pub const POLICY_C_SHA384: [u8; 48] = [
    0xd6, 0x03, 0x2c, 0xe6, 0x1f, 0x2f, 0xb3, 0xc2, 0x40, 0xeb, 0x3c, 0xf6, 0xa3, 0x32, 0x37, 0xef,
    0x2b, 0x6a, 0x16, 0xf4, 0x29, 0x3c, 0x22, 0xb4, 0x55, 0xe2, 0x61, 0xcf, 0xfd, 0x21, 0x7a, 0xd5,
    0xb4, 0x94, 0x7c, 0x2d, 0x73, 0xe6, 0x30, 0x05, 0xee, 0xd2, 0xdc, 0x2b, 0x35, 0x93, 0xd1, 0x65,
];

/// PolicyA for SHA-384: the digest of `PolicySecret(TPM_RH_ENDORSEMENT)` with an empty
/// policyRef, computed (Part 1 §19.7: extend with the command code and the auth object's name,
/// then with the policyRef).
pub fn policy_a_sha384() -> Vec<u8> {
    let mut first = Sha384::new();
    first.update([0u8; 48]);
    first.update(CC_POLICY_SECRET.to_be_bytes());
    first.update(RH_ENDORSEMENT.to_be_bytes());
    let first = first.finalize();
    Sha384::digest(first).to_vec()
}

/// PolicyA for SHA-256 (the L-1/L-2 templates' authPolicy), computed as [`policy_a_sha384`].
#[cfg(all(test, feature = "tpm"))]
fn policy_a_sha256() -> Vec<u8> {
    use sha2::Sha256;
    let mut first = Sha256::new();
    first.update([0u8; 32]);
    first.update(CC_POLICY_SECRET.to_be_bytes());
    first.update(RH_ENDORSEMENT.to_be_bytes());
    let first = first.finalize();
    Sha256::digest(first).to_vec()
}

#[cfg(all(test, feature = "tpm"))]
mod tests {
    use super::*;

    #[test]
    fn policy_a_sha256_is_the_low_range_templates_auth_policy() {
        for kind in [EkKind::Rsa2048, EkKind::EccP256] {
            let template = ek_template(kind).unwrap();
            assert_eq!(template.auth_policy().value(), policy_a_sha256().as_slice());
        }
    }

    #[test]
    fn policy_or_of_a_and_c_is_the_h3_templates_auth_policy() {
        let mut b = Sha384::new();
        b.update([0u8; 48]);
        b.update(CC_POLICY_OR.to_be_bytes());
        b.update(policy_a_sha384());
        b.update(POLICY_C_SHA384);
        let template = ek_template(EkKind::EccP384).unwrap();
        assert_eq!(template.auth_policy().value(), b.finalize().as_slice());
    }

    #[test]
    fn the_ak_is_restricted_and_a_node_key_is_not() {
        let ak = ak_template().unwrap().object_attributes();
        assert!(ak.restricted() && ak.sign_encrypt() && !ak.decrypt() && ak.fixed_tpm());
        let node = node_key_template(&[7; 32]).unwrap().object_attributes();
        assert!(!node.restricted() && node.sign_encrypt() && !node.decrypt() && node.no_da());
    }
}
