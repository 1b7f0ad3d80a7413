//! Sealing a join token to the JoinService encryption key, bound to the CSR.
//!
//! The agent never sends its join token in the clear, even inside TLS: the gateway relays the
//! request and must not be able to read or re-use the token. The agent seals the token secret to
//! the JoinService encryption public key (pinned as bcd's `join_encryption_key_pin`), binding it
//! to the SHA-256 of the DER CSR it sends in the same request, so a sealed token lifted from one
//! request is useless with any other CSR.
//!
//! # Format (version 1)
//!
//! Notation: `||` concatenates; `lp(x)` is the 4-byte big-endian length of `x` followed by `x`;
//! `LABEL` is the 21 ASCII bytes `bc-join-token-seal-v1`. All public keys are P-256 points in
//! uncompressed SEC1 form (`0x04 || X || Y`, 65 bytes).
//!
//! 1. `R` is the recipient's (JoinService encryption) public point, taken from its
//!    SubjectPublicKeyInfo; `csr_sha256` is the SHA-256 of the CSR's DER (32 bytes).
//! 2. The sealer draws a fresh ephemeral P-256 key pair `(e, E)` and computes the ECDH shared
//!    secret `Z` = the 32-byte big-endian X coordinate of `e·R`.
//! 3. `K` = HKDF-SHA256 (RFC 5869) with `salt` empty (that is, 32 zero bytes), `IKM = Z`,
//!    `info = lp(LABEL) || lp(E) || lp(R)`, output length 32.
//! 4. `N` = 12 fresh random bytes.
//! 5. `C` = AES-256-GCM encryption under `K`, nonce `N`, of the token secret's UTF-8 bytes (for
//!    example `bcjt_…`), with associated data `AAD = lp(LABEL) || lp(csr_sha256)`; `C` includes
//!    the 16-byte tag at its end.
//! 6. The sealed token is `0x01 || E || N || C` (1 + 65 + 12 + len(secret) + 16 bytes). Where a
//!    text form is needed it is unpadded base64url of those bytes.
//!
//! Opening reverses it with the static private key `r`: `Z` = X of `r·E`, the same `K`, and the
//! AEAD open with the receiver's own `csr_sha256` (computed from the CSR it received, never
//! taken from the message). Any change to `E`, `N`, `C`, the CSR or the recipient makes the open
//! fail ([`SealError::DoesNotOpen`]); the recovered plaintext must parse as a token secret.
//!
//! A Python client implements it with `cryptography`: `ec.generate_private_key(ec.SECP256R1())`,
//! `exchange(ec.ECDH(), R)`, `HKDF(SHA256(), 32, salt=None, info=...)` and `AESGCM(K).encrypt(N,
//! secret, aad)`.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, ECDH_P256};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

use super::encoding::{b64url, b64url_decode, put_lp, P256_POINT_LEN};
use super::keys::{KeyError, KeyRole, PrivateKey, PublicKey};
use super::token::{TokenError, TokenSecret};

/// The version byte of the format above.
pub const SEAL_VERSION: u8 = 1;
/// The purpose label bound into the key derivation and the associated data.
pub const SEAL_LABEL: &[u8] = b"bc-join-token-seal-v1";
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + P256_POINT_LEN + NONCE_LEN;
/// Largest sealed token accepted (a token secret is 48 bytes; this leaves room, no more).
pub const MAX_SEALED_LEN: usize = 1024;

/// Why sealing or opening failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Too short, too long, or not version 1.
    #[error("malformed sealed token (expected version 1: 0x01 || E || nonce || ciphertext)")]
    Malformed,
    /// The ephemeral public key is not a P-256 point.
    #[error("the sealed token's ephemeral key is not a P-256 point")]
    BadEphemeralKey,
    /// The AEAD did not open: another recipient key, another CSR, or altered bytes.
    #[error(
        "the sealed token does not open: sealed to another key, bound to another CSR, or altered"
    )]
    DoesNotOpen,
    /// It opened, but what is inside is not a join-token secret.
    #[error("the sealed token opened but holds no join token")]
    NotAToken(#[from] TokenError),
    /// A key problem (role, randomness).
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// A sealed join token as it travels (opaque bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedToken(Vec<u8>);

impl SealedToken {
    /// Takes wire bytes, checking only the outer shape.
    pub fn from_bytes(bytes: &[u8]) -> Result<SealedToken, SealError> {
        if bytes.len() < HEADER_LEN + TAG_LEN
            || bytes.len() > MAX_SEALED_LEN
            || bytes[0] != SEAL_VERSION
        {
            return Err(SealError::Malformed);
        }
        Ok(SealedToken(bytes.to_vec()))
    }

    /// The wire bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Unpadded base64url of the bytes.
    pub fn to_base64url(&self) -> String {
        b64url(&self.0)
    }

    /// Parses the unpadded base64url form.
    pub fn from_base64url(text: &str) -> Result<SealedToken, SealError> {
        SealedToken::from_bytes(&b64url_decode(text.trim()).ok_or(SealError::Malformed)?)
    }
}

fn derive_key(z: &[u8], e: &[u8], r: &[u8]) -> Result<LessSafeKey, SealError> {
    let mut info = Vec::with_capacity(4 * 3 + SEAL_LABEL.len() + 2 * P256_POINT_LEN);
    put_lp(&mut info, SEAL_LABEL);
    put_lp(&mut info, e);
    put_lp(&mut info, r);
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(z);
    let info_parts = [info.as_slice()];
    let okm = prk
        .expand(&info_parts, &AES_256_GCM)
        .map_err(|_| SealError::DoesNotOpen)?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

fn aad(csr_sha256: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + SEAL_LABEL.len() + 32);
    put_lp(&mut out, SEAL_LABEL);
    put_lp(&mut out, csr_sha256);
    out
}

/// Agent side: seals `secret` to `recipient` (the pinned JoinService encryption key), bound to
/// the SHA-256 of the CSR sent with it.
pub fn seal_token(
    recipient: &PublicKey,
    secret: &TokenSecret,
    csr_sha256: &[u8; 32],
) -> Result<SealedToken, SealError> {
    let rng = SystemRandom::new();
    let ephemeral =
        EphemeralPrivateKey::generate(&ECDH_P256, &rng).map_err(|_| KeyError::Random)?;
    let e_pub = ephemeral
        .compute_public_key()
        .map_err(|_| KeyError::Random)?;
    let e = e_pub.as_ref().to_vec();
    let r = recipient.uncompressed_point();
    let key = agreement::agree_ephemeral(ephemeral, &UnparsedPublicKey::new(&ECDH_P256, r), |z| {
        derive_key(z, &e, r)
    })
    .map_err(|_| SealError::BadEphemeralKey)??;
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut nonce).map_err(|_| KeyError::Random)?;
    let mut body = secret.expose().as_bytes().to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad(csr_sha256)),
        &mut body,
    )
    .map_err(|_| SealError::Malformed)?;
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(SEAL_VERSION);
    out.extend_from_slice(&e);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&body);
    SealedToken::from_bytes(&out)
}

/// The JoinService encryption key: the only key that opens sealed tokens, and it does nothing
/// else (it has no signing method).
pub struct JoinEncryptionKey {
    key: PrivateKey,
    secret: p256::SecretKey,
}

impl std::fmt::Debug for JoinEncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JoinEncryptionKey({:?})", self.key)
    }
}

impl JoinEncryptionKey {
    /// Wraps a key of role [`KeyRole::JoinEncryption`]; any other role is refused.
    pub fn new(key: PrivateKey) -> Result<JoinEncryptionKey, KeyError> {
        key.require_role(KeyRole::JoinEncryption)?;
        let secret = key.p256_secret()?;
        Ok(JoinEncryptionKey { key, secret })
    }

    /// The public key agents seal to.
    pub fn public_key(&self) -> &PublicKey {
        self.key.public_key()
    }

    /// The private key (secret; for the bundle).
    pub fn private_key(&self) -> &PrivateKey {
        &self.key
    }

    /// Server side: opens a sealed token with the SHA-256 of the CSR this request carried.
    pub fn open(
        &self,
        sealed: &SealedToken,
        csr_sha256: &[u8; 32],
    ) -> Result<TokenSecret, SealError> {
        let bytes = sealed.as_bytes();
        let e = &bytes[1..1 + P256_POINT_LEN];
        let nonce: [u8; NONCE_LEN] = bytes[1 + P256_POINT_LEN..HEADER_LEN]
            .try_into()
            .map_err(|_| SealError::Malformed)?;
        if e[0] != 0x04 {
            return Err(SealError::BadEphemeralKey);
        }
        let e_point =
            p256::PublicKey::from_sec1_bytes(e).map_err(|_| SealError::BadEphemeralKey)?;
        let shared =
            p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), e_point.as_affine());
        let key = derive_key(
            shared.raw_secret_bytes().as_slice(),
            e,
            self.public_key().uncompressed_point(),
        )?;
        let mut body = bytes[HEADER_LEN..].to_vec();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(csr_sha256)),
                &mut body,
            )
            .map_err(|_| SealError::DoesNotOpen)?;
        let text = std::str::from_utf8(plain).map_err(|_| TokenError::Malformed)?;
        Ok(TokenSecret::parse(text)?)
    }
}
