//! What the TPM signs and its signature: `TPMS_ATTEST` (TPM 2.0 Part 2 §10.12.12) of type
//! `TPM_ST_ATTEST_CERTIFY` (`TPMS_CERTIFY_INFO`, §10.12.3) or `TPM_ST_ATTEST_QUOTE`
//! (`TPMS_QUOTE_INFO`, §10.12.4, with its `TPML_PCR_SELECTION`, §10.9.7), and
//! `TPMT_SIGNATURE` (§11.3.4) for ECDSA (`TPMS_SIGNATURE_ECDSA`, §11.3.1), checked as the AK's
//! ECDSA-SHA256 over SHA-256 of the attest bytes.

use super::marshal::{
    Reader, Truncated, ALG_ECDSA, ALG_SHA256, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE,
};

/// The part of a `TPMS_ATTEST` that depends on its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attested {
    /// TPM2_Certify: the certified object's name.
    Certify {
        /// `name`.
        name: Vec<u8>,
        /// `qualifiedName`.
        qualified_name: Vec<u8>,
    },
    /// TPM2_Quote: which PCRs, and the digest of their values.
    Quote {
        /// `(hash, selected PCR indices ascending)` per bank, in message order.
        selection: Vec<(u16, Vec<u32>)>,
        /// `pcrDigest`.
        pcr_digest: Vec<u8>,
    },
    /// Another type (never accepted).
    Other(u16),
}

/// A parsed `TPMS_ATTEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmAttest {
    /// `magic`: [`super::marshal::TPM_GENERATED`] when the TPM made it.
    pub magic: u32,
    /// `qualifiedSigner`.
    pub qualified_signer: Vec<u8>,
    /// `extraData`: the caller's qualifying data.
    pub extra_data: Vec<u8>,
    /// `clockInfo.clock`, ms.
    pub clock: u64,
    /// `firmwareVersion`.
    pub firmware_version: u64,
    /// The type-specific part.
    pub attested: Attested,
}

/// `TPML_PCR_SELECTION`: per bank, the indices whose bit is set.
fn pcr_selection(r: &mut Reader<'_>) -> Result<Vec<(u16, Vec<u32>)>, Truncated> {
    let count = r.u32()?;
    // TPM2 has at most 16 banks (HASH_COUNT); more is not a TPM's output.
    if count > 16 {
        return Err(Truncated);
    }
    let mut banks = Vec::new();
    for _ in 0..count {
        let hash = r.u16()?;
        let size = r.u8()?;
        let bits = r.take(usize::from(size))?;
        let mut indices = Vec::new();
        for (byte, b) in bits.iter().enumerate() {
            for bit in 0..8u32 {
                if b & (1 << bit) != 0 {
                    indices.push(u32::try_from(byte).unwrap_or(u32::MAX) * 8 + bit);
                }
            }
        }
        banks.push((hash, indices));
    }
    Ok(banks)
}

impl TpmAttest {
    /// Parses a marshalled `TPMS_ATTEST` (no outer size); nothing may follow it.
    pub fn parse(bytes: &[u8]) -> Result<TpmAttest, Truncated> {
        let mut r = Reader::new(bytes);
        let magic = r.u32()?;
        let kind = r.u16()?;
        let qualified_signer = r.tpm2b()?.to_vec();
        let extra_data = r.tpm2b()?.to_vec();
        let clock = r.u64()?;
        let _reset_count = r.u32()?;
        let _restart_count = r.u32()?;
        let _safe = r.u8()?;
        let firmware_version = r.u64()?;
        let attested = match kind {
            ST_ATTEST_CERTIFY => Attested::Certify {
                name: r.tpm2b()?.to_vec(),
                qualified_name: r.tpm2b()?.to_vec(),
            },
            ST_ATTEST_QUOTE => Attested::Quote {
                selection: pcr_selection(&mut r)?,
                pcr_digest: r.tpm2b()?.to_vec(),
            },
            other => {
                // The rest is another type's body: never read, never accepted.
                return Ok(TpmAttest {
                    magic,
                    qualified_signer,
                    extra_data,
                    clock,
                    firmware_version,
                    attested: Attested::Other(other),
                });
            }
        };
        r.finish()?;
        Ok(TpmAttest {
            magic,
            qualified_signer,
            extra_data,
            clock,
            firmware_version,
            attested,
        })
    }
}

/// An ECDSA `TPMT_SIGNATURE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcdsaSignature {
    /// The hash the signer used.
    pub hash: u16,
    /// `signatureR`.
    pub r: Vec<u8>,
    /// `signatureS`.
    pub s: Vec<u8>,
}

impl EcdsaSignature {
    /// Parses a marshalled `TPMT_SIGNATURE`; only `TPM_ALG_ECDSA` is accepted.
    pub fn parse(bytes: &[u8]) -> Result<EcdsaSignature, Truncated> {
        let mut r = Reader::new(bytes);
        if r.u16()? != ALG_ECDSA {
            return Err(Truncated);
        }
        let hash = r.u16()?;
        let sig_r = r.tpm2b()?.to_vec();
        let sig_s = r.tpm2b()?.to_vec();
        r.finish()?;
        Ok(EcdsaSignature {
            hash,
            r: sig_r,
            s: sig_s,
        })
    }

    /// Whether it is a valid ECDSA-SHA256 signature over `message` by the P-256 key
    /// `point` (SEC1 uncompressed).
    pub fn verifies_p256(&self, point: &[u8], message: &[u8]) -> bool {
        use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};
        if self.hash != ALG_SHA256 {
            return false;
        }
        let (Some(r), Some(s)) = (fixed32(&self.r), fixed32(&self.s)) else {
            return false;
        };
        let mut rs = [0u8; 64];
        rs[..32].copy_from_slice(&r);
        rs[32..].copy_from_slice(&s);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
            .verify(message, &rs)
            .is_ok()
    }
}

/// A big-endian scalar as 32 bytes (leading zeros stripped or added).
fn fixed32(v: &[u8]) -> Option<[u8; 32]> {
    let start = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let v = &v[start..];
    if v.len() > 32 {
        return None;
    }
    let mut out = [0u8; 32];
    out[32 - v.len()..].copy_from_slice(v);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::tpm::marshal::{tpm2b, TPM_GENERATED};

    fn header(kind: u16, extra: &[u8]) -> Vec<u8> {
        let mut b = TPM_GENERATED.to_be_bytes().to_vec();
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend(tpm2b(&[0x00, 0x0B, 7, 7]));
        b.extend(tpm2b(extra));
        b.extend_from_slice(&[0; 17]); // clockInfo
        b.extend_from_slice(&1u64.to_be_bytes());
        b
    }

    #[test]
    fn parses_a_quote_selection_in_bit_order() {
        let mut b = header(ST_ATTEST_QUOTE, &[5; 32]);
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&ALG_SHA256.to_be_bytes());
        b.extend_from_slice(&[3, 0b1000_0001, 0, 0b0000_0100]);
        b.extend(tpm2b(&[9; 32]));
        let attest = TpmAttest::parse(&b).expect("parses");
        assert_eq!(attest.magic, TPM_GENERATED);
        assert_eq!(attest.extra_data, vec![5; 32]);
        assert_eq!(
            attest.attested,
            Attested::Quote {
                selection: vec![(ALG_SHA256, vec![0, 7, 18])],
                pcr_digest: vec![9; 32]
            }
        );
    }

    #[test]
    fn parses_a_certify_and_refuses_trailing_bytes() {
        let mut b = header(ST_ATTEST_CERTIFY, &[1; 32]);
        b.extend(tpm2b(&[0, 0x0B, 1]));
        b.extend(tpm2b(&[0, 0x0B, 2]));
        let attest = TpmAttest::parse(&b).expect("parses");
        assert_eq!(
            attest.attested,
            Attested::Certify {
                name: vec![0, 0x0B, 1],
                qualified_name: vec![0, 0x0B, 2]
            }
        );
        b.push(0);
        assert_eq!(TpmAttest::parse(&b), Err(Truncated));
    }

    #[test]
    fn an_ecdsa_signature_verifies_only_over_its_message() {
        use ring::rand::SystemRandom;
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let sig = key.sign(&rng, b"attest").unwrap();
        let mut b = ALG_ECDSA.to_be_bytes().to_vec();
        b.extend_from_slice(&ALG_SHA256.to_be_bytes());
        b.extend(tpm2b(&sig.as_ref()[..32]));
        b.extend(tpm2b(&sig.as_ref()[32..]));
        let parsed = EcdsaSignature::parse(&b).expect("parses");
        let point = key.public_key().as_ref();
        assert!(parsed.verifies_p256(point, b"attest"));
        assert!(!parsed.verifies_p256(point, b"attesT"));
    }
}
