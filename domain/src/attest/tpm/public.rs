//! `TPMT_PUBLIC` (TPM 2.0 Part 2 §12.2.4), the public area of an EK, AK or node key, for RSA
//! (`TPMS_RSA_PARMS`, §12.2.3.5) and ECC (`TPMS_ECC_PARMS`, §12.2.3.6) keys, its object
//! attributes (§8.3 TPMA_OBJECT) and its name (Part 1 §16: `nameAlg || H(TPMT_PUBLIC)`).

use super::marshal::{self, Reader, Truncated, ALG_ECC, ALG_ECDAA, ALG_NULL, ALG_RSA};

/// TPMA_OBJECT bits (Part 2 §8.3.2).
pub mod attr {
    /// fixedTPM.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// stClear.
    pub const ST_CLEAR: u32 = 1 << 2;
    /// fixedParent.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// sensitiveDataOrigin.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// userWithAuth.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// adminWithPolicy.
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    /// noDA.
    pub const NO_DA: u32 = 1 << 10;
    /// encryptedDuplication.
    pub const ENCRYPTED_DUPLICATION: u32 = 1 << 11;
    /// restricted.
    pub const RESTRICTED: u32 = 1 << 16;
    /// decrypt.
    pub const DECRYPT: u32 = 1 << 17;
    /// sign / encrypt.
    pub const SIGN: u32 = 1 << 18;
}

/// `TPMT_SYM_DEF_OBJECT`: the symmetric algorithm a storage key (an EK) protects with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymDef {
    /// The algorithm (`TPM_ALG_AES`, or NULL for a signing key).
    pub algorithm: u16,
    /// Key bits (0 when NULL).
    pub key_bits: u16,
    /// The mode (`TPM_ALG_CFB`; 0 when NULL).
    pub mode: u16,
}

/// The key-type-specific part: parameters and `unique`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDetail {
    /// An RSA key.
    Rsa {
        /// Its scheme (`TPM_ALG_NULL` for an EK).
        scheme: u16,
        /// The scheme's hash (0 when the scheme is NULL).
        scheme_hash: u16,
        /// Modulus bits.
        key_bits: u16,
        /// The public exponent (0 means 65537).
        exponent: u32,
        /// The modulus.
        modulus: Vec<u8>,
    },
    /// An ECC key.
    Ecc {
        /// Its scheme (`TPM_ALG_ECDSA`, or NULL).
        scheme: u16,
        /// The scheme's hash (0 when the scheme is NULL).
        scheme_hash: u16,
        /// `TPM_ECC_CURVE`.
        curve: u16,
        /// The KDF scheme (NULL for every key here).
        kdf: u16,
        /// The point's x coordinate.
        x: Vec<u8>,
        /// Its y coordinate.
        y: Vec<u8>,
    },
}

/// A parsed `TPMT_PUBLIC`, with the bytes it came from (its name hashes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmPublic {
    /// The marshalled bytes, exactly as received.
    pub bytes: Vec<u8>,
    /// `nameAlg`.
    pub name_alg: u16,
    /// `objectAttributes`.
    pub attributes: u32,
    /// `authPolicy`.
    pub auth_policy: Vec<u8>,
    /// The parameters' symmetric definition.
    pub symmetric: SymDef,
    /// Parameters and unique.
    pub detail: KeyDetail,
}

/// Why a public area does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublicError {
    /// Truncated, trailing bytes, or a size that does not fit.
    #[error("the TPMT_PUBLIC is truncated or has trailing bytes")]
    Truncated,
    /// A key type other than RSA or ECC.
    #[error("the TPMT_PUBLIC's type {0:#06x} is neither RSA nor ECC")]
    UnsupportedType(u16),
    /// A name algorithm this verifier cannot hash.
    #[error("the TPMT_PUBLIC's nameAlg {0:#06x} is neither SHA-256 nor SHA-384")]
    UnsupportedNameAlg(u16),
}

impl From<Truncated> for PublicError {
    fn from(_: Truncated) -> Self {
        PublicError::Truncated
    }
}

fn sym_def(r: &mut Reader<'_>) -> Result<SymDef, Truncated> {
    let algorithm = r.u16()?;
    if algorithm == ALG_NULL {
        return Ok(SymDef {
            algorithm,
            key_bits: 0,
            mode: 0,
        });
    }
    Ok(SymDef {
        algorithm,
        key_bits: r.u16()?,
        mode: r.u16()?,
    })
}

/// A `TPMT_*_SCHEME`: the scheme and its hash (ECDAA also carries a count, skipped).
fn scheme(r: &mut Reader<'_>) -> Result<(u16, u16), Truncated> {
    let scheme = r.u16()?;
    if scheme == ALG_NULL {
        return Ok((scheme, 0));
    }
    let hash = r.u16()?;
    if scheme == ALG_ECDAA {
        r.u16()?;
    }
    Ok((scheme, hash))
}

impl TpmPublic {
    /// Parses a marshalled `TPMT_PUBLIC` (no outer size); nothing may follow it.
    pub fn parse(bytes: &[u8]) -> Result<TpmPublic, PublicError> {
        let mut r = Reader::new(bytes);
        let key_type = r.u16()?;
        let name_alg = r.u16()?;
        let attributes = r.u32()?;
        let auth_policy = r.tpm2b()?.to_vec();
        if key_type != ALG_RSA && key_type != ALG_ECC {
            return Err(PublicError::UnsupportedType(key_type));
        }
        let symmetric = sym_def(&mut r)?;
        let (scheme, scheme_hash) = scheme(&mut r)?;
        let detail = if key_type == ALG_RSA {
            let key_bits = r.u16()?;
            let exponent = r.u32()?;
            let modulus = r.tpm2b()?.to_vec();
            KeyDetail::Rsa {
                scheme,
                scheme_hash,
                key_bits,
                exponent,
                modulus,
            }
        } else {
            let curve = r.u16()?;
            let (kdf, _) = self::scheme(&mut r)?;
            let x = r.tpm2b()?.to_vec();
            let y = r.tpm2b()?.to_vec();
            KeyDetail::Ecc {
                scheme,
                scheme_hash,
                curve,
                kdf,
                x,
                y,
            }
        };
        r.finish()?;
        if marshal::digest_len(name_alg).is_none() {
            return Err(PublicError::UnsupportedNameAlg(name_alg));
        }
        Ok(TpmPublic {
            bytes: bytes.to_vec(),
            name_alg,
            attributes,
            auth_policy,
            symmetric,
            detail,
        })
    }

    /// Its name: `nameAlg` (2 bytes) `|| H_nameAlg(TPMT_PUBLIC)`.
    pub fn name(&self) -> Vec<u8> {
        let digest = marshal::hash(self.name_alg, &[&self.bytes]).unwrap_or_default();
        let mut name = self.name_alg.to_be_bytes().to_vec();
        name.extend_from_slice(&digest);
        name
    }

    /// Whether every bit of `set` is set and every bit of `clear` is clear.
    pub fn has(&self, set: u32, clear: u32) -> bool {
        self.attributes & set == set && self.attributes & clear == 0
    }

    /// The ECC point as SEC1 uncompressed bytes (`04 || x || y`), each coordinate padded to
    /// `coord_len`; `None` for an RSA key or a coordinate longer than that.
    pub fn ecc_point(&self, coord_len: usize) -> Option<Vec<u8>> {
        let KeyDetail::Ecc { x, y, .. } = &self.detail else {
            return None;
        };
        if x.len() > coord_len || y.len() > coord_len {
            return None;
        }
        let mut out = vec![0x04];
        for c in [x, y] {
            out.extend(std::iter::repeat_n(0, coord_len - c.len()));
            out.extend_from_slice(c);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::tpm::marshal::{ALG_ECDSA, ALG_SHA256, CURVE_P256};

    /// A P-256 ECDSA-SHA256 signing key's TPMT_PUBLIC, marshalled by hand.
    fn ecc_public(attributes: u32, x: &[u8], y: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&ALG_ECC.to_be_bytes());
        b.extend_from_slice(&ALG_SHA256.to_be_bytes());
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&[0, 0]); // empty authPolicy
        b.extend_from_slice(&ALG_NULL.to_be_bytes()); // symmetric
        b.extend_from_slice(&ALG_ECDSA.to_be_bytes());
        b.extend_from_slice(&ALG_SHA256.to_be_bytes());
        b.extend_from_slice(&CURVE_P256.to_be_bytes());
        b.extend_from_slice(&ALG_NULL.to_be_bytes()); // kdf
        b.extend(marshal::tpm2b(x));
        b.extend(marshal::tpm2b(y));
        b
    }

    #[test]
    fn parses_an_ecc_signing_key_and_names_it() {
        let bytes = ecc_public(attr::SIGN | attr::FIXED_TPM, &[1; 32], &[2; 31]);
        let public = TpmPublic::parse(&bytes).expect("parses");
        assert_eq!(public.name_alg, ALG_SHA256);
        assert!(public.has(attr::SIGN | attr::FIXED_TPM, attr::RESTRICTED));
        assert!(!public.has(attr::SIGN, attr::FIXED_TPM));
        assert_eq!(
            public.detail,
            KeyDetail::Ecc {
                scheme: ALG_ECDSA,
                scheme_hash: ALG_SHA256,
                curve: CURVE_P256,
                kdf: ALG_NULL,
                x: vec![1; 32],
                y: vec![2; 31],
            }
        );
        let name = public.name();
        assert_eq!(&name[..2], &[0x00, 0x0B]);
        assert_eq!(
            &name[2..],
            marshal::hash(ALG_SHA256, &[&bytes]).unwrap().as_slice()
        );
        let point = public.ecc_point(32).expect("a point");
        assert_eq!(point.len(), 65);
        assert_eq!(point[33], 0, "y is left-padded");
    }

    #[test]
    fn refuses_trailing_bytes_truncation_and_other_types() {
        let mut bytes = ecc_public(0, &[1; 32], &[2; 32]);
        bytes.push(0);
        assert_eq!(TpmPublic::parse(&bytes), Err(PublicError::Truncated));
        assert_eq!(
            TpmPublic::parse(&bytes[..bytes.len() - 2]),
            Err(PublicError::Truncated)
        );
        let mut keyed_hash = ecc_public(0, &[1; 32], &[2; 32]);
        keyed_hash[1] = 0x08;
        assert_eq!(
            TpmPublic::parse(&keyed_hash),
            Err(PublicError::UnsupportedType(0x0008))
        );
    }
}
