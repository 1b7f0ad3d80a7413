//! An OIDC signing key: generated here (P-256, ring), and its private half sealed under the
//! deployment secret for the log (`oidc.key_added`), so it is never stored in plaintext.
//!
//! # Sealed form (version 1)
//!
//! `0x01 || u32_be(m) || u32_be(t) || u32_be(p) || salt (16) || nonce (12) || C`, where, with
//! `lp(x) = u32_be(len(x)) || x` and `L = "bc-oidc-key-seal-v1"`:
//!
//! * `PRK = HKDF-Extract(salt, Argon2id(secret, salt, m KiB, t passes, p lanes))` (RFC 9106,
//!   version 0x13, 32 bytes; the PKI bundle's default cost, [`Argon2idParams::DEFAULT`], bounded
//!   by [`Argon2idParams::check`] when read), `K = HKDF-Expand(PRK, L || " key", 32)`;
//! * `C = AES-256-GCM(K, nonce, PKCS#8 DER of the key, AAD = lp(L) || lp(kid) || lp(SPKI DER))`,
//!   tag appended: a sealed key moved to another key id or public key does not open.
//!
//! The label differs from the PKI bundle's (`bc-pki-bundle-seal-v1`), so no key derived for one
//! ever opens the other. Each key has its own salt: opening one costs one Argon2id run, which a
//! process does once per promoted key (the shell caches the opened key).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_FIXED_SIGNING};

use crate::pki::encoding::{p256_spki_from_point, put_lp};
use crate::pki::{Argon2idParams, DeploymentSecret};

use super::jwk::kid_of;

const LABEL: &str = "bc-oidc-key-seal-v1";
const VERSION: u8 = 1;
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 12;
const HEADER_LEN: usize = 1 + 12 + SALT_LEN + NONCE_LEN;

/// Why a key could not be made, sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OidcKeyError {
    /// The random generator or ring refused.
    #[error("the OIDC key could not be generated: {0}")]
    Generate(String),
    /// Not a P-256 PKCS#8 key.
    #[error("the OIDC key is not a P-256 PKCS#8 key")]
    BadKey,
    /// The sealed bytes are not version 1, or are cut short.
    #[error("the sealed OIDC key is malformed (expected version 1)")]
    Malformed,
    /// Argon2id's parameters are out of bounds, or the derivation failed.
    #[error("the sealed OIDC key's derivation: {0}")]
    Derive(String),
    /// Another secret, another key id or public key, or altered bytes.
    #[error("the sealed OIDC key does not open: another deployment secret (BC_DEPLOYMENT_SECRET), or altered")]
    DoesNotOpen,
    /// It opened, but the key inside is not the one the id names.
    #[error("the sealed OIDC key opened but is not key {0}")]
    NotTheKey(String),
}

/// A P-256 signing key of the issuer. Its PKCS#8 bytes are wiped on drop; `Debug` shows the id.
pub struct OidcSigningKey {
    kid: String,
    spki: Vec<u8>,
    pkcs8: Vec<u8>,
    pair: EcdsaKeyPair,
}

impl std::fmt::Debug for OidcSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OidcSigningKey({})", self.kid)
    }
}

impl Drop for OidcSigningKey {
    fn drop(&mut self) {
        for b in self.pkcs8.iter_mut() {
            *b = std::hint::black_box(0);
        }
    }
}

impl OidcSigningKey {
    /// A new key from the system's randomness.
    pub fn generate() -> Result<OidcSigningKey, OidcKeyError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| OidcKeyError::Generate(e.to_string()))?;
        OidcSigningKey::from_pkcs8(doc.as_ref())
    }

    /// A key from its PKCS#8 DER.
    pub fn from_pkcs8(der: &[u8]) -> Result<OidcSigningKey, OidcKeyError> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|_| OidcKeyError::BadKey)?;
        let spki = p256_spki_from_point(pair.public_key().as_ref());
        let kid = kid_of(&spki).ok_or(OidcKeyError::BadKey)?;
        Ok(OidcSigningKey {
            kid,
            spki,
            pkcs8: der.to_vec(),
            pair,
        })
    }

    /// Its key id (RFC 7638 thumbprint).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Its public key, SubjectPublicKeyInfo DER.
    pub fn public_key_spki(&self) -> &[u8] {
        &self.spki
    }

    /// An ES256 signature (`r || s`) over `message`.
    pub fn sign_es256(&self, message: &[u8]) -> Result<[u8; 64], String> {
        let sig = self
            .pair
            .sign(&SystemRandom::new(), message)
            .map_err(|e| format!("ES256 signing failed: {e}"))?;
        sig.as_ref()
            .try_into()
            .map_err(|_| "ES256 signature of the wrong length".to_string())
    }

    /// Seals the private half under `secret` with Argon2id `params` (the sealed form above).
    pub fn seal(
        &self,
        secret: &DeploymentSecret,
        params: &Argon2idParams,
    ) -> Result<Vec<u8>, OidcKeyError> {
        let rng = SystemRandom::new();
        let mut salt = [0u8; SALT_LEN];
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill(&mut salt)
            .and_then(|()| rng.fill(&mut nonce))
            .map_err(|e| OidcKeyError::Generate(e.to_string()))?;
        let key = derive(secret, params, &salt)?;
        let mut body = self.pkcs8.clone();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(&self.kid, &self.spki)),
            &mut body,
        )
        .map_err(|_| OidcKeyError::Derive("AES-256-GCM".into()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.push(VERSION);
        for n in [params.memory_kib, params.iterations, params.parallelism] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.extend_from_slice(&salt);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Opens a key sealed for `kid` and `spki` under `secret`.
    pub fn open(
        sealed: &[u8],
        secret: &DeploymentSecret,
        kid: &str,
        spki: &[u8],
    ) -> Result<OidcSigningKey, OidcKeyError> {
        if sealed.len() < HEADER_LEN + 16 || sealed[0] != VERSION {
            return Err(OidcKeyError::Malformed);
        }
        let word = |i: usize| {
            let at = 1 + 4 * i;
            u32::from_be_bytes([sealed[at], sealed[at + 1], sealed[at + 2], sealed[at + 3]])
        };
        let params = Argon2idParams {
            memory_kib: word(0),
            iterations: word(1),
            parallelism: word(2),
        };
        params
            .check()
            .map_err(|e| OidcKeyError::Derive(e.to_string()))?;
        let salt = &sealed[13..13 + SALT_LEN];
        let nonce: [u8; NONCE_LEN] = sealed[13 + SALT_LEN..HEADER_LEN]
            .try_into()
            .map_err(|_| OidcKeyError::Malformed)?;
        let key = derive(secret, &params, salt)?;
        let mut body = sealed[HEADER_LEN..].to_vec();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(kid, spki)),
                &mut body,
            )
            .map_err(|_| OidcKeyError::DoesNotOpen)?;
        let opened = OidcSigningKey::from_pkcs8(plain);
        for b in body.iter_mut() {
            *b = std::hint::black_box(0);
        }
        let opened = opened?;
        if opened.kid != kid {
            return Err(OidcKeyError::NotTheKey(kid.to_owned()));
        }
        Ok(opened)
    }
}

fn aad(kid: &str, spki: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_lp(&mut out, LABEL.as_bytes());
    put_lp(&mut out, kid.as_bytes());
    put_lp(&mut out, spki);
    out
}

fn derive(
    secret: &DeploymentSecret,
    params: &Argon2idParams,
    salt: &[u8],
) -> Result<LessSafeKey, OidcKeyError> {
    let bad = |e: String| OidcKeyError::Derive(e);
    let argon_params = argon2::Params::new(
        params.memory_kib,
        params.iterations,
        params.parallelism,
        Some(32),
    )
    .map_err(|e| bad(format!("Argon2id parameters: {e}")))?;
    let argon = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon_params,
    );
    let mut ikm = [0u8; 32];
    argon
        .hash_password_into(secret.as_bytes(), salt, &mut ikm)
        .map_err(|e| bad(format!("Argon2id: {e}")))?;
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&ikm);
    ikm.iter_mut().for_each(|b| *b = std::hint::black_box(0));
    let info = format!("{LABEL} key");
    let parts = [info.as_bytes()];
    let okm = prk
        .expand(&parts, &AES_256_GCM)
        .map_err(|_| bad("HKDF".into()))?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHEAP: Argon2idParams = Argon2idParams {
        memory_kib: 64,
        iterations: 1,
        parallelism: 1,
    };

    fn secret(s: &str) -> DeploymentSecret {
        DeploymentSecret::new(&format!("{s}-a-deployment-secret-of-32-characters-or-more"))
            .expect("secret")
    }

    #[test]
    fn a_sealed_key_opens_with_its_secret_id_and_public_key_only() {
        let key = OidcSigningKey::generate().expect("key");
        let sealed = key.seal(&secret("one"), &CHEAP).expect("seal");
        let opened =
            OidcSigningKey::open(&sealed, &secret("one"), key.kid(), key.public_key_spki())
                .expect("open");
        assert_eq!(opened.kid(), key.kid());
        assert_eq!(opened.public_key_spki(), key.public_key_spki());
        let other = OidcSigningKey::generate().expect("other");
        for (secret, kid, spki) in [
            (secret("two"), key.kid(), key.public_key_spki()),
            (secret("one"), other.kid(), key.public_key_spki()),
            (secret("one"), key.kid(), other.public_key_spki()),
        ] {
            assert_eq!(
                OidcSigningKey::open(&sealed, &secret, kid, spki).unwrap_err(),
                OidcKeyError::DoesNotOpen
            );
        }
        let mut altered = sealed.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(
            OidcSigningKey::open(&altered, &secret("one"), key.kid(), key.public_key_spki())
                .unwrap_err(),
            OidcKeyError::DoesNotOpen
        );
        assert_eq!(
            OidcSigningKey::open(
                &sealed[..20],
                &secret("one"),
                key.kid(),
                key.public_key_spki()
            )
            .unwrap_err(),
            OidcKeyError::Malformed
        );
        // The PKCS#8 bytes are not in the sealed form.
        assert!(!sealed
            .windows(key.pkcs8.len())
            .any(|w| w == key.pkcs8.as_slice()));
    }

    #[test]
    fn a_cost_out_of_bounds_is_refused_before_any_work() {
        let key = OidcSigningKey::generate().expect("key");
        let mut sealed = key.seal(&secret("one"), &CHEAP).expect("seal");
        sealed[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            OidcSigningKey::open(&sealed, &secret("one"), key.kid(), key.public_key_spki()),
            Err(OidcKeyError::Derive(_))
        ));
    }
}
