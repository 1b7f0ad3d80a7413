//! Reading TPM-marshalled bytes (TPM 2.0 Part 1 §18 "Marshalling"): big-endian integers and
//! `TPM2B` buffers (a `UINT16` size, then that many bytes), and the algorithm and structure
//! tags the parsers compare against (Part 2 §6.3 TPM_ALG_ID, §6.9 TPM_ST, §6.4 TPM_ECC_CURVE).

/// The bytes ended early or a size does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("TPM structure truncated or mis-sized")]
pub struct Truncated;

/// TPM_ALG_RSA.
pub const ALG_RSA: u16 = 0x0001;
/// TPM_ALG_SHA1.
pub const ALG_SHA1: u16 = 0x0004;
/// TPM_ALG_AES.
pub const ALG_AES: u16 = 0x0006;
/// TPM_ALG_SHA256.
pub const ALG_SHA256: u16 = 0x000B;
/// TPM_ALG_SHA384.
pub const ALG_SHA384: u16 = 0x000C;
/// TPM_ALG_SHA512.
pub const ALG_SHA512: u16 = 0x000D;
/// TPM_ALG_NULL.
pub const ALG_NULL: u16 = 0x0010;
/// TPM_ALG_ECDSA.
pub const ALG_ECDSA: u16 = 0x0018;
/// TPM_ALG_ECDAA (its scheme carries a count after the hash).
pub const ALG_ECDAA: u16 = 0x001A;
/// TPM_ALG_ECC.
pub const ALG_ECC: u16 = 0x0023;
/// TPM_ALG_CFB.
pub const ALG_CFB: u16 = 0x0043;
/// TPM_ECC_NIST_P256.
pub const CURVE_P256: u16 = 0x0003;
/// TPM_ECC_NIST_P384.
pub const CURVE_P384: u16 = 0x0004;
/// TPM_GENERATED_VALUE: what the TPM puts first in everything it signs.
pub const TPM_GENERATED: u32 = 0xFF54_4347;
/// TPM_ST_ATTEST_CERTIFY.
pub const ST_ATTEST_CERTIFY: u16 = 0x8017;
/// TPM_ST_ATTEST_QUOTE.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;

/// A cursor over marshalled bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// At the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        if self.bytes.len() < n {
            return Err(Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// A `UINT8`.
    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.take(1)?[0])
    }

    /// A `UINT16`.
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A `UINT32`.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A `UINT64`.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A `TPM2B_*`: its contents.
    pub fn tpm2b(&mut self) -> Result<&'a [u8], Truncated> {
        let size = self.u16()?;
        self.take(usize::from(size))
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Refuses bytes left over (a structure travels alone, without trailing data).
    pub fn finish(self) -> Result<(), Truncated> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Truncated)
        }
    }
}

/// `bytes` as a `TPM2B` (size prefix, then the bytes); callers pass at most 64 KiB.
pub fn tpm2b(bytes: &[u8]) -> Vec<u8> {
    let size = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&bytes[..usize::from(size)]);
    out
}

/// The digest size of a TPM hash algorithm this verifier computes, if it is one.
pub fn digest_len(alg: u16) -> Option<usize> {
    match alg {
        ALG_SHA256 => Some(32),
        ALG_SHA384 => Some(48),
        _ => None,
    }
}

/// `H(data)` with the TPM hash algorithm `alg` (SHA-256 or SHA-384).
pub fn hash(alg: u16, data: &[&[u8]]) -> Option<Vec<u8>> {
    use sha2::Digest as _;
    match alg {
        ALG_SHA256 => {
            let mut h = sha2::Sha256::new();
            data.iter().for_each(|d| h.update(d));
            Some(h.finalize().to_vec())
        }
        ALG_SHA384 => {
            let mut h = sha2::Sha384::new();
            data.iter().for_each(|d| h.update(d));
            Some(h.finalize().to_vec())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_and_tpm2b() {
        let bytes = [0x00, 0x0B, 0x00, 0x02, 0xAA, 0xBB, 0x01];
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u16(), Ok(ALG_SHA256));
        assert_eq!(r.tpm2b(), Ok(&[0xAA, 0xBB][..]));
        assert_eq!(r.u8(), Ok(1));
        assert!(r.finish().is_ok());
    }

    #[test]
    fn refuses_a_size_past_the_end_and_leftovers() {
        assert_eq!(Reader::new(&[0x00, 0x03, 0x01]).tpm2b(), Err(Truncated));
        let mut r = Reader::new(&[0x00, 0x01, 0x02]);
        assert_eq!(r.u16(), Ok(1));
        assert_eq!(r.finish(), Err(Truncated));
        assert_eq!(tpm2b(&[9, 8]), vec![0, 2, 9, 8]);
    }
}
