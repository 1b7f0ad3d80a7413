//! The two keys the verifier judges by their public areas (spec 000 "The node key in the TPM",
//! COMMON contract): the AK (a restricted P-256 ECDSA-SHA256 signing key, so that what it
//! signs starting with TPM_GENERATED was made by the TPM) and the node key (an unrestricted
//! P-256 signing key the TPM made and never lets go), with the one check of a node key's
//! TPM2_Certify by the AK (TPM 2.0 Part 3 §18.2) that both the join and every renewal use, and
//! the `urn:bc:tpm-ak:` statement that names the AK in a node certificate.

use super::attest::{Attested, EcdsaSignature, TpmAttest};
use super::marshal::{ALG_ECDSA, ALG_NULL, ALG_SHA256, CURVE_P256, TPM_GENERATED};
use super::public::{attr, KeyDetail, PublicError, TpmPublic};

/// The statement URI's prefix.
pub const AK_STATEMENT_PREFIX: &str = "urn:bc:tpm-ak:";
/// The `node.joined` node_key label of a certified TPM key.
pub const TPM_NODE_KEY_LABEL: &str = "tpm";

/// The AK attributes that must all be set.
pub const AK_REQUIRED: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::USER_WITH_AUTH
    | attr::RESTRICTED
    | attr::SIGN;
/// The only other AK attribute allowed.
pub const AK_ALLOWED: u32 = AK_REQUIRED | attr::NO_DA;
/// The node-key attributes that must all be set.
pub const NODE_KEY_REQUIRED: u32 =
    attr::FIXED_TPM | attr::FIXED_PARENT | attr::SENSITIVE_DATA_ORIGIN | attr::SIGN;
/// The node-key attributes that must be clear.
pub const NODE_KEY_FORBIDDEN: u32 = attr::RESTRICTED | attr::DECRYPT;

/// Why a public area is not an acceptable AK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AkError {
    /// It does not parse.
    #[error("the AK's TPMT_PUBLIC does not parse")]
    Malformed,
    /// Not a P-256 ECDSA-SHA256 key named with SHA-256.
    #[error("the AK is not a P-256 ECDSA-SHA256 key with a SHA-256 name")]
    Unsupported,
    /// Its attributes are not an AK's.
    #[error("the AK's attributes are not fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|restricted|sign")]
    Attributes,
}

/// A public area accepted as an AK: parsed, with its SEC1 point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ak {
    /// The public area.
    pub public: TpmPublic,
    /// Its point, SEC1 uncompressed.
    pub point: Vec<u8>,
}

impl Ak {
    /// Its name (`0x000B || SHA-256(TPMT_PUBLIC)`).
    pub fn name(&self) -> Vec<u8> {
        self.public.name()
    }

    /// The statement URI naming it.
    pub fn statement(&self) -> String {
        let name = self.name();
        format!(
            "{AK_STATEMENT_PREFIX}{}:{}",
            hex::encode(&name[..2]),
            hex::encode(&name[2..])
        )
    }
}

/// Checks an AK's public area (the AK template of the contract).
pub fn check_ak(bytes: &[u8]) -> Result<Ak, AkError> {
    let public = TpmPublic::parse(bytes).map_err(|e| match e {
        PublicError::UnsupportedNameAlg(_) | PublicError::UnsupportedType(_) => {
            AkError::Unsupported
        }
        _ => AkError::Malformed,
    })?;
    let KeyDetail::Ecc {
        scheme,
        scheme_hash,
        curve,
        kdf,
        ..
    } = &public.detail
    else {
        return Err(AkError::Unsupported);
    };
    if public.name_alg != ALG_SHA256
        || *curve != CURVE_P256
        || *scheme != ALG_ECDSA
        || *scheme_hash != ALG_SHA256
        || *kdf != ALG_NULL
        || public.symmetric.algorithm != ALG_NULL
    {
        return Err(AkError::Unsupported);
    }
    if !public.has(AK_REQUIRED, !AK_ALLOWED) {
        return Err(AkError::Attributes);
    }
    let point = public.ecc_point(32).ok_or(AkError::Malformed)?;
    Ok(Ak { public, point })
}

/// The SHA-256 AK digest a well-formed `urn:bc:tpm-ak:000b:<64 lower-case hex>` names.
pub fn parse_ak_statement(uri: &str) -> Option<[u8; 32]> {
    let rest = uri
        .strip_prefix(AK_STATEMENT_PREFIX)?
        .strip_prefix("000b:")?;
    if rest.len() != 64
        || !rest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(rest, &mut out).ok()?;
    Some(out)
}

/// Whether `key` is a P-256 key whose scheme is ECDSA-SHA256 (or NULL, chosen at signing)
/// and whose name is SHA-256: the shape of a node key.
pub fn is_p256_es256(key: &TpmPublic) -> bool {
    let signer = match &key.detail {
        KeyDetail::Ecc {
            scheme,
            scheme_hash,
            curve,
            ..
        } => {
            *curve == CURVE_P256
                && (*scheme == ALG_NULL || (*scheme == ALG_ECDSA && *scheme_hash == ALG_SHA256))
        }
        KeyDetail::Rsa { .. } => false,
    };
    signer && key.name_alg == ALG_SHA256
}

/// Why a key's certification by the AK was refused (`tpm:<reason>` at a join, `renew:<reason>`
/// at a renewal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum KeyCertRefusal {
    /// The key's public area, the TPMS_ATTEST or the TPMT_SIGNATURE does not parse, or the
    /// attest is not a TPM-generated ATTEST_CERTIFY.
    #[error("node-key-malformed")]
    Malformed,
    /// The signature is not the AK's over the attest.
    #[error("node-key-signature")]
    Signature,
    /// The attest's qualifying data is not SHA-256 of this CSR.
    #[error("node-key-nonce")]
    Nonce,
    /// The certified name is not the name of the key presented.
    #[error("node-key-name")]
    Name,
    /// The key is not an unrestricted P-256 signing key the TPM made and keeps.
    #[error("node-key-attributes")]
    Attributes,
    /// The key is not the CSR's key.
    #[error("node-key-not-csr")]
    NotCsr,
}

impl KeyCertRefusal {
    /// Every reason.
    pub const ALL: [KeyCertRefusal; 6] = [
        KeyCertRefusal::Malformed,
        KeyCertRefusal::Signature,
        KeyCertRefusal::Nonce,
        KeyCertRefusal::Name,
        KeyCertRefusal::Attributes,
        KeyCertRefusal::NotCsr,
    ];

    /// The reason, without a prefix (`node-key-nonce`).
    pub fn reason(self) -> String {
        self.to_string()
    }
}

/// The AK's certification of a key: the node key's TPMT_PUBLIC, the TPMS_ATTEST and the
/// AK's TPMT_SIGNATURE over it.
#[derive(Debug, Clone, Copy)]
pub struct KeyCertification<'a> {
    /// The key's TPMT_PUBLIC.
    pub key_public: &'a [u8],
    /// The TPMS_ATTEST (ATTEST_CERTIFY).
    pub certify_info: &'a [u8],
    /// The AK's TPMT_SIGNATURE over it.
    pub signature: &'a [u8],
}

/// The one check of a key's certification, at the join and at every renewal, in this order:
/// it parses, the AK signed it, it is a TPM-generated certify, qualified by `csr_sha256`, of
/// the presented key's name, the key has a node key's attributes, and it is the CSR's key
/// (`csr_point`, SEC1 uncompressed P-256).
pub fn verify_key_certification(
    ak: &Ak,
    cert: KeyCertification<'_>,
    csr_sha256: &[u8; 32],
    csr_point: &[u8],
) -> Result<(), KeyCertRefusal> {
    use KeyCertRefusal as R;
    let key = TpmPublic::parse(cert.key_public).map_err(|_| R::Malformed)?;
    let attest = TpmAttest::parse(cert.certify_info).map_err(|_| R::Malformed)?;
    let signature = EcdsaSignature::parse(cert.signature).map_err(|_| R::Malformed)?;
    if !signature.verifies_p256(&ak.point, cert.certify_info) {
        return Err(R::Signature);
    }
    let Attested::Certify { name, .. } = &attest.attested else {
        return Err(R::Malformed);
    };
    if attest.magic != TPM_GENERATED {
        return Err(R::Malformed);
    }
    if attest.extra_data.as_slice() != csr_sha256 {
        return Err(R::Nonce);
    }
    if *name != key.name() {
        return Err(R::Name);
    }
    if !is_p256_es256(&key) || !key.has(NODE_KEY_REQUIRED, NODE_KEY_FORBIDDEN) {
        return Err(R::Attributes);
    }
    if key.ecc_point(32).as_deref() != Some(csr_point) {
        return Err(R::NotCsr);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ak_statements_parse_only_in_their_one_form() {
        let hex64 = "ab".repeat(32);
        assert_eq!(
            parse_ak_statement(&format!("urn:bc:tpm-ak:000b:{hex64}")),
            Some([0xab; 32])
        );
        for bad in [
            format!("urn:bc:tpm-ak:000c:{hex64}"),
            format!("urn:bc:tpm-ak:000b:{}", "AB".repeat(32)),
            format!("urn:bc:tpm-ak:000b:{}", "ab".repeat(31)),
            format!("urn:bc:tpm-ak:000b:{hex64}0"),
            format!("urn:bc:other:000b:{hex64}"),
        ] {
            assert_eq!(parse_ak_statement(&bad), None, "{bad}");
        }
    }

    #[test]
    fn reasons_are_the_contracts() {
        let reasons: Vec<String> = KeyCertRefusal::ALL.iter().map(|r| r.reason()).collect();
        assert_eq!(
            reasons,
            [
                "node-key-malformed",
                "node-key-signature",
                "node-key-nonce",
                "node-key-name",
                "node-key-attributes",
                "node-key-not-csr"
            ]
        );
    }
}
