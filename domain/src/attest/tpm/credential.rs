//! TPM2_MakeCredential in software (TPM 2.0 Part 1 §24 "Credential Protection"): the challenge
//! only the TPM holding the EK, with the AK of that name loaded, can open with
//! TPM2_ActivateCredential. The seed is protected by the EK (Part 1 §11.4.10 "Key Derivation
//! Functions", §C.7 ECC secret sharing; Part 1 §B.10.3 RSA OAEP with the label "IDENTITY"), and
//! every hash and the AES size come from the EK (the protector), never from the AK.

use aes::cipher::{generic_array::GenericArray, BlockEncrypt, KeyInit};
use hmac::{Hmac, Mac};

use super::marshal::{
    self, tpm2b, ALG_AES, ALG_CFB, ALG_SHA256, ALG_SHA384, CURVE_P256, CURVE_P384,
};
use super::public::{KeyDetail, TpmPublic};
use crate::attest::contract::Entropy;

/// Why a credential could not be made for an EK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The EK is not an RSA-2048, P-256 or P-384 key with AES-128/256-CFB and a SHA-256 or
    /// SHA-384 name algorithm.
    #[error("the EK's algorithms are not ones this control plane can encrypt a credential to")]
    Unsupported,
    /// The EK's public key is not a valid key of its type.
    #[error("the EK's public key is not a valid key")]
    BadKey,
}

/// A credential for (EK, AK name): what TPM2_ActivateCredential takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// TPM2B_ID_OBJECT contents: `TPM2B(outer HMAC) || encIdentity`.
    pub credential_blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET contents: the OAEP ciphertext, or the ephemeral point.
    pub encrypted_secret: Vec<u8>,
}

/// `HMAC_alg(key, parts…)`.
fn hmac(alg: u16, key: &[u8], parts: &[&[u8]]) -> Option<Vec<u8>> {
    macro_rules! run {
        ($h:ty) => {{
            let mut mac = <Hmac<$h> as Mac>::new_from_slice(key).ok()?;
            parts.iter().for_each(|p| mac.update(p));
            Some(mac.finalize().into_bytes().to_vec())
        }};
    }
    match alg {
        ALG_SHA256 => run!(sha2::Sha256),
        ALG_SHA384 => run!(sha2::Sha384),
        _ => None,
    }
}

/// A label as KDFa and KDFe take it: with its terminating NUL.
fn with_nul(label: &[u8]) -> Vec<u8> {
    let mut l = label.to_vec();
    if l.last() != Some(&0) {
        l.push(0);
    }
    l
}

/// KDFa (Part 1 §11.4.10.2): SP800-108 counter-mode KDF with HMAC_alg, `bits` of output.
pub fn kdfa(
    alg: u16,
    key: &[u8],
    label: &[u8],
    context_u: &[u8],
    context_v: &[u8],
    bits: u32,
) -> Option<Vec<u8>> {
    let label = with_nul(label);
    let len = usize::try_from(bits.div_ceil(8)).ok()?;
    let mut out = Vec::with_capacity(len);
    let mut counter: u32 = 1;
    while out.len() < len {
        let block = hmac(
            alg,
            key,
            &[
                &counter.to_be_bytes(),
                &label,
                context_u,
                context_v,
                &bits.to_be_bytes(),
            ],
        )?;
        out.extend_from_slice(&block);
        counter += 1;
    }
    out.truncate(len);
    Some(out)
}

/// KDFe (Part 1 §11.4.10.3): the SP800-56A concatenation KDF with H_alg, `bits` of output.
pub fn kdfe(
    alg: u16,
    z: &[u8],
    label: &[u8],
    party_u: &[u8],
    party_v: &[u8],
    bits: u32,
) -> Option<Vec<u8>> {
    let label = with_nul(label);
    let len = usize::try_from(bits.div_ceil(8)).ok()?;
    let mut out = Vec::with_capacity(len);
    let mut counter: u32 = 1;
    while out.len() < len {
        out.extend(marshal::hash(
            alg,
            &[&counter.to_be_bytes(), z, &label, party_u, party_v],
        )?);
        counter += 1;
    }
    out.truncate(len);
    Some(out)
}

/// AES-CFB encryption with a zero IV (Part 1 §11.4.6.3, the credential's inner wrap).
pub fn aes_cfb_encrypt(key: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    fn run<C: BlockEncrypt + KeyInit>(key: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        let cipher = C::new_from_slice(key).ok()?;
        let mut feedback = GenericArray::default();
        let mut out = Vec::with_capacity(data.len());
        for chunk in data.chunks(16) {
            let mut stream = feedback.clone();
            cipher.encrypt_block(&mut stream);
            let block: Vec<u8> = chunk
                .iter()
                .zip(stream.iter())
                .map(|(p, k)| p ^ k)
                .collect();
            if block.len() == 16 {
                feedback = GenericArray::clone_from_slice(&block);
            }
            out.extend_from_slice(&block);
        }
        Some(out)
    }
    match key.len() {
        16 => run::<aes::Aes128>(key, data),
        32 => run::<aes::Aes256>(key, data),
        _ => None,
    }
}

/// The shell's entropy as a `rand_core` generator, for the `rsa` crate's OAEP padding and the
/// ephemeral ECDH key: each draw is its own HKDF purpose (`<purpose>/<n>`), so it never runs
/// out and never repeats.
struct EntropyRng<'a> {
    entropy: &'a Entropy,
    purpose: &'static str,
    draws: u64,
}

impl rand_core::RngCore for EntropyRng<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill_bytes(&mut b);
        u32::from_be_bytes(b)
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_be_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(1024) {
            self.entropy
                .fill(&format!("{}/{}", self.purpose, self.draws), chunk);
            self.draws += 1;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for EntropyRng<'_> {}

/// An ephemeral ECDH on one curve crate: the shared x-coordinate with `point` (an uncompressed
/// SEC1 point) and the ephemeral public point, uncompressed.
macro_rules! ecdh_ephemeral {
    ($curve:ident, $rng:expr, $point:expr) => {{
        use $curve::elliptic_curve::sec1::ToEncodedPoint as _;
        let peer =
            $curve::PublicKey::from_sec1_bytes($point).map_err(|_| CredentialError::BadKey)?;
        let private = $curve::ecdh::EphemeralSecret::random($rng);
        let public = private
            .public_key()
            .to_encoded_point(false)
            .as_bytes()
            .to_vec();
        let z = private.diffie_hellman(&peer).raw_secret_bytes().to_vec();
        (z, public)
    }};
}

/// The seed and its encryption to the EK: RSA-OAEP (label "IDENTITY\0") of a random seed, or
/// an ephemeral ECDH with the seed from KDFe. Its randomness comes from `entropy`.
fn seed(ek: &TpmPublic, entropy: &Entropy) -> Result<(Vec<u8>, Vec<u8>), CredentialError> {
    let digest_len = marshal::digest_len(ek.name_alg).ok_or(CredentialError::Unsupported)?;
    match &ek.detail {
        KeyDetail::Rsa {
            key_bits: 2048,
            exponent,
            modulus,
            ..
        } => {
            let n = rsa::BigUint::from_bytes_be(modulus);
            let e = rsa::BigUint::from(if *exponent == 0 { 65_537 } else { *exponent });
            let key = rsa::RsaPublicKey::new(n, e).map_err(|_| CredentialError::BadKey)?;
            let mut seed = vec![0u8; digest_len];
            entropy.fill("tpm make-credential seed", &mut seed);
            let mut rng = EntropyRng {
                entropy,
                purpose: "tpm make-credential oaep",
                draws: 0,
            };
            let padding = match ek.name_alg {
                ALG_SHA256 => rsa::Oaep::new_with_label::<sha2::Sha256, _>("IDENTITY\0"),
                ALG_SHA384 => rsa::Oaep::new_with_label::<sha2::Sha384, _>("IDENTITY\0"),
                _ => return Err(CredentialError::Unsupported),
            };
            let encrypted = key
                .encrypt(&mut rng, padding, &seed)
                .map_err(|_| CredentialError::BadKey)?;
            Ok((seed, encrypted))
        }
        KeyDetail::Ecc { curve, .. } => {
            let coord = match *curve {
                CURVE_P256 => 32,
                CURVE_P384 => 48,
                _ => return Err(CredentialError::Unsupported),
            };
            let point = ek.ecc_point(coord).ok_or(CredentialError::BadKey)?;
            let mut rng = EntropyRng {
                entropy,
                purpose: "tpm make-credential ecdh",
                draws: 0,
            };
            let (z, eph) = if *curve == CURVE_P256 {
                ecdh_ephemeral!(p256, &mut rng, &point)
            } else {
                ecdh_ephemeral!(p384, &mut rng, &point)
            };
            let (eph_x, eph_y) = (&eph[1..=coord], &eph[1 + coord..]);
            let ek_x = &point[1..=coord];
            let bits = u32::try_from(digest_len * 8).map_err(|_| CredentialError::Unsupported)?;
            let seed = kdfe(ek.name_alg, &z, b"IDENTITY", eph_x, ek_x, bits)
                .ok_or(CredentialError::Unsupported)?;
            let mut encrypted = tpm2b(eph_x);
            encrypted.extend(tpm2b(eph_y));
            Ok((seed, encrypted))
        }
        KeyDetail::Rsa { .. } => Err(CredentialError::Unsupported),
    }
}

/// Whether this verifier can make a credential for `ek` (its algorithms, not its key).
pub fn supported(ek: &TpmPublic) -> bool {
    let sym = ek.symmetric;
    let key_ok = match &ek.detail {
        KeyDetail::Rsa { key_bits, .. } => *key_bits == 2048,
        KeyDetail::Ecc { curve, .. } => *curve == CURVE_P256 || *curve == CURVE_P384,
    };
    key_ok
        && marshal::digest_len(ek.name_alg).is_some()
        && sym.algorithm == ALG_AES
        && sym.mode == ALG_CFB
        && (sym.key_bits == 128 || sym.key_bits == 256)
}

/// MakeCredential(EK, AK name, secret), its seed (or ephemeral key) drawn from `entropy`.
pub fn make_credential(
    ek: &TpmPublic,
    ak_name: &[u8],
    secret: &[u8],
    entropy: &Entropy,
) -> Result<Credential, CredentialError> {
    if !supported(ek) {
        return Err(CredentialError::Unsupported);
    }
    let (seed, encrypted_secret) = seed(ek, entropy)?;
    let alg = ek.name_alg;
    let digest_bits = u32::try_from(seed.len() * 8).map_err(|_| CredentialError::Unsupported)?;
    let sym_bits = u32::from(ek.symmetric.key_bits);
    let unsupported = || CredentialError::Unsupported;
    let sym_key = kdfa(alg, &seed, b"STORAGE", ak_name, &[], sym_bits).ok_or_else(unsupported)?;
    let enc_identity = aes_cfb_encrypt(&sym_key, &tpm2b(secret)).ok_or_else(unsupported)?;
    let hmac_key = kdfa(alg, &seed, b"INTEGRITY", &[], &[], digest_bits).ok_or_else(unsupported)?;
    let outer = hmac(alg, &hmac_key, &[&enc_identity, ak_name]).ok_or_else(unsupported)?;
    let mut credential_blob = tpm2b(&outer);
    credential_blob.extend(enc_identity);
    Ok(Credential {
        credential_blob,
        encrypted_secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kdfa_matches_its_definition_and_truncates() {
        let key = [7u8; 32];
        let out = kdfa(ALG_SHA256, &key, b"STORAGE", b"u", b"v", 384).unwrap();
        assert_eq!(out.len(), 48);
        let first = hmac(
            ALG_SHA256,
            &key,
            &[&1u32.to_be_bytes(), b"STORAGE\0uv", &384u32.to_be_bytes()],
        )
        .unwrap();
        let second = hmac(
            ALG_SHA256,
            &key,
            &[&2u32.to_be_bytes(), b"STORAGE\0uv", &384u32.to_be_bytes()],
        )
        .unwrap();
        assert_eq!(&out[..32], first.as_slice());
        assert_eq!(&out[32..], &second[..16]);
        // The output size is part of every block's input: 128 bits is not a prefix of 384.
        let short = hmac(
            ALG_SHA256,
            &key,
            &[&1u32.to_be_bytes(), b"STORAGE\0uv", &128u32.to_be_bytes()],
        )
        .unwrap();
        assert_eq!(
            kdfa(ALG_SHA256, &key, b"STORAGE", b"u", b"v", 128).unwrap(),
            short[..16].to_vec()
        );
    }

    #[test]
    fn kdfe_is_the_concatenation_kdf() {
        let out = kdfe(ALG_SHA384, b"z", b"IDENTITY", b"u", b"v", 384).unwrap();
        assert_eq!(
            out,
            marshal::hash(ALG_SHA384, &[&1u32.to_be_bytes(), b"zIDENTITY\0uv"]).unwrap()
        );
    }

    #[test]
    fn aes_cfb_chains_each_ciphertext_block() {
        // CFB-128 with a zero IV: the first block's keystream is AES(key, 0), each next one
        // AES(previous ciphertext block); checked against the block cipher itself.
        let key = hex::decode("2b7e151628aed2a6abf7158809cf4f3c").unwrap();
        let zero = aes_cfb_encrypt(&key, &[0u8; 16]).unwrap();
        let mut block = GenericArray::clone_from_slice(&[0u8; 16]);
        aes::Aes128::new_from_slice(&key)
            .unwrap()
            .encrypt_block(&mut block);
        assert_eq!(zero, block.to_vec());
        // Two blocks and a tail: the second block's keystream is AES(first ciphertext).
        let data = [0x11u8; 37];
        let out = aes_cfb_encrypt(&key, &data).unwrap();
        let mut ks2 = GenericArray::clone_from_slice(&out[..16]);
        aes::Aes128::new_from_slice(&key)
            .unwrap()
            .encrypt_block(&mut ks2);
        assert_eq!(out[16] ^ 0x11, ks2[0]);
        assert_eq!(out.len(), 37);
    }
}
