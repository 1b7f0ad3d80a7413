//! How the PKI bundle's seal turns the deployment secret into its AEAD key and key check.
//!
//! Two derivations, named by the bundle's `privateKeys.kdf`:
//!
//! * `Argon2id` (what this build writes): `IKM = Argon2id(secret, salt, m, t, p)` (RFC 9106,
//!   version 0x13, 32 output bytes; `m` KiB of memory, `t` passes, `p` lanes, recorded in
//!   `privateKeys.kdfParams` as `memoryKib`, `iterations`, `parallelism`), then
//!   `PRK = HKDF-Extract(salt, IKM)`. Guessing a deployment secret from a stolen bundle then
//!   costs `m` KiB and `t` passes of memory-hard work per guess, not one HMAC.
//! * `HKDF-SHA256` (bundles written before issue 17; still opened): `PRK = HKDF-Extract(salt,
//!   secret)`.
//!
//! Both continue alike, with `L = "bc-pki-bundle-seal-v1"`: `K = HKDF-Expand(PRK, L || " key",
//! 32)` and `keyCheck = HKDF-Expand(PRK, L || " check", 32)`.
//!
//! The default, [`Argon2idParams::DEFAULT`], is 64 MiB and 3 passes on one lane: RFC 9106's
//! second recommended option in memory and passes (one lane, because this implementation runs
//! lanes one after the other, so more lanes would add no cost to an attacker's parallel
//! hardware that they do not add to ours). It costs a few hundred milliseconds once per process
//! start or `bcctl` command that opens the bundle. Parameters read from a file are bounded
//! ([`Argon2idParams::check`]) so that a bundle cannot make its reader allocate without limit.

use ring::aead::{LessSafeKey, UnboundKey, AES_256_GCM};
use ring::hkdf;

use super::secret::DeploymentSecret;

/// The `privateKeys.kdf` of a bundle sealed with Argon2id.
pub const KDF_ARGON2ID: &str = "Argon2id";
/// The `privateKeys.kdf` of a bundle sealed before issue 17 (HKDF alone).
pub const KDF_HKDF_SHA256: &str = "HKDF-SHA256";
const SEAL_LABEL: &str = "bc-pki-bundle-seal-v1";

/// Why a key derivation could not be named or run (the bundle reports it as
/// `BundleError::Malformed` or `BundleError::Seal`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KdfError {
    /// `privateKeys.kdfParams` out of bounds.
    #[error("privateKeys.kdfParams: {0}")]
    Params(String),
    /// `privateKeys.kdf` unknown, or with the wrong parameters.
    #[error("privateKeys.kdf: {0}")]
    Kdf(String),
    /// The derivation itself failed.
    #[error("{0}")]
    Derive(String),
}

/// Argon2id's cost parameters, as `privateKeys.kdfParams` records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Argon2idParams {
    /// Memory, KiB.
    pub memory_kib: u32,
    /// Passes over the memory.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl Argon2idParams {
    /// What new bundles are sealed with: 64 MiB, 3 passes, 1 lane.
    pub const DEFAULT: Argon2idParams = Argon2idParams {
        memory_kib: 64 * 1024,
        iterations: 3,
        parallelism: 1,
    };
    /// The most memory a bundle may ask of its reader: 1 GiB.
    pub const MAX_MEMORY_KIB: u32 = 1024 * 1024;
    /// The most passes a bundle may ask.
    pub const MAX_ITERATIONS: u32 = 64;
    /// The most lanes a bundle may ask.
    pub const MAX_PARALLELISM: u32 = 16;

    /// Refuses parameters Argon2 does not take, or beyond the bounds above.
    pub fn check(&self) -> Result<(), KdfError> {
        let bad = KdfError::Params;
        if self.parallelism == 0 || self.parallelism > Self::MAX_PARALLELISM {
            return Err(bad(format!(
                "parallelism {} is not between 1 and {}",
                self.parallelism,
                Self::MAX_PARALLELISM
            )));
        }
        if self.iterations == 0 || self.iterations > Self::MAX_ITERATIONS {
            return Err(bad(format!(
                "iterations {} is not between 1 and {}",
                self.iterations,
                Self::MAX_ITERATIONS
            )));
        }
        let least = 8 * self.parallelism;
        if self.memory_kib < least || self.memory_kib > Self::MAX_MEMORY_KIB {
            return Err(bad(format!(
                "memoryKib {} is not between {least} (8 per lane) and {}",
                self.memory_kib,
                Self::MAX_MEMORY_KIB
            )));
        }
        Ok(())
    }
}

/// How a sealed bundle's key was derived from the deployment secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleKdf {
    /// Argon2id, then HKDF (new bundles).
    Argon2id(Argon2idParams),
    /// HKDF-SHA256 alone (bundles written before issue 17).
    HkdfSha256,
}

impl BundleKdf {
    /// The `privateKeys.kdf` name.
    pub fn name(&self) -> &'static str {
        match self {
            BundleKdf::Argon2id(_) => KDF_ARGON2ID,
            BundleKdf::HkdfSha256 => KDF_HKDF_SHA256,
        }
    }

    /// The parameters to record (`None` for HKDF alone).
    pub fn params(&self) -> Option<Argon2idParams> {
        match self {
            BundleKdf::Argon2id(p) => Some(*p),
            BundleKdf::HkdfSha256 => None,
        }
    }

    /// The derivation a bundle names (`kdf`, `kdfParams`), checked.
    pub fn from_header(name: &str, params: Option<Argon2idParams>) -> Result<BundleKdf, KdfError> {
        let bad = |reason: &str| KdfError::Kdf(reason.into());
        match (name, params) {
            (KDF_ARGON2ID, Some(p)) => {
                p.check()?;
                Ok(BundleKdf::Argon2id(p))
            }
            (KDF_ARGON2ID, None) => Err(bad("Argon2id without kdfParams")),
            (KDF_HKDF_SHA256, None) => Ok(BundleKdf::HkdfSha256),
            (KDF_HKDF_SHA256, Some(_)) => Err(bad("HKDF-SHA256 takes no kdfParams")),
            _ => Err(bad(&format!(
                "unknown kdf {name:?} (this build reads {KDF_ARGON2ID} and {KDF_HKDF_SHA256})"
            ))),
        }
    }

    /// A one-line description (`bcctl pki show`).
    pub fn describe(&self) -> String {
        match self {
            BundleKdf::Argon2id(p) => format!(
                "Argon2id (m={} KiB, t={}, p={}) + HKDF-SHA256",
                p.memory_kib, p.iterations, p.parallelism
            ),
            BundleKdf::HkdfSha256 => {
                "HKDF-SHA256 only (sealed before Argon2id; re-seal it)".to_string()
            }
        }
    }
}

fn hkdf_expand(prk: &hkdf::Prk, suffix: &str) -> Result<[u8; 32], KdfError> {
    let info = format!("{SEAL_LABEL}{suffix}");
    let parts = [info.as_bytes()];
    let okm = prk
        .expand(&parts, hkdf::HKDF_SHA256)
        .map_err(|_| KdfError::Derive("HKDF".into()))?;
    let mut out = [0u8; 32];
    okm.fill(&mut out)
        .map_err(|_| KdfError::Derive("HKDF".into()))?;
    Ok(out)
}

fn argon2id(
    params: &Argon2idParams,
    secret: &DeploymentSecret,
    salt: &[u8],
) -> Result<[u8; 32], KdfError> {
    params.check()?;
    let argon_params = argon2::Params::new(
        params.memory_kib,
        params.iterations,
        params.parallelism,
        Some(32),
    )
    .map_err(|e| KdfError::Derive(format!("Argon2id parameters: {e}")))?;
    let argon = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon_params,
    );
    let mut out = [0u8; 32];
    argon
        .hash_password_into(secret.as_bytes(), salt, &mut out)
        .map_err(|e| KdfError::Derive(format!("Argon2id: {e}")))?;
    Ok(out)
}

/// (AEAD key, key check) for `secret` and `salt` under `kdf`.
pub(super) fn seal_keys(
    kdf: &BundleKdf,
    secret: &DeploymentSecret,
    salt: &[u8],
) -> Result<(LessSafeKey, [u8; 32]), KdfError> {
    let prk = match kdf {
        BundleKdf::Argon2id(params) => {
            let mut ikm = argon2id(params, secret, salt)?;
            let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&ikm);
            ikm.iter_mut().for_each(|b| *b = std::hint::black_box(0));
            prk
        }
        BundleKdf::HkdfSha256 => {
            hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret.as_bytes())
        }
    };
    let key = hkdf_expand(&prk, " key")?;
    let check = hkdf_expand(&prk, " check")?;
    let unbound =
        UnboundKey::new(&AES_256_GCM, &key).map_err(|_| KdfError::Derive("AES key".into()))?;
    Ok((LessSafeKey::new(unbound), check))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_sixty_four_mebibytes_three_passes_and_within_bounds() {
        assert_eq!(Argon2idParams::DEFAULT.memory_kib, 65_536);
        assert_eq!(Argon2idParams::DEFAULT.iterations, 3);
        assert!(Argon2idParams::DEFAULT.check().is_ok());
    }

    #[test]
    fn parameters_beyond_the_bounds_are_refused() {
        let p = |memory_kib, iterations, parallelism| Argon2idParams {
            memory_kib,
            iterations,
            parallelism,
        };
        for bad in [
            p(Argon2idParams::MAX_MEMORY_KIB + 1, 1, 1),
            p(7, 1, 1),
            p(64, 0, 1),
            p(64, 65, 1),
            p(64, 1, 0),
            p(1024, 1, 17),
        ] {
            assert!(matches!(bad.check(), Err(KdfError::Params(_))), "{bad:?}");
        }
        assert!(p(8, 1, 1).check().is_ok());
    }

    #[test]
    fn the_header_names_one_known_kdf() {
        let small = Argon2idParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        };
        assert_eq!(
            BundleKdf::from_header("Argon2id", Some(small)),
            Ok(BundleKdf::Argon2id(small))
        );
        assert_eq!(
            BundleKdf::from_header("HKDF-SHA256", None),
            Ok(BundleKdf::HkdfSha256)
        );
        for (name, params) in [
            ("Argon2id", None),
            ("HKDF-SHA256", Some(small)),
            ("scrypt", None),
        ] {
            assert!(matches!(
                BundleKdf::from_header(name, params),
                Err(KdfError::Kdf(_))
            ));
        }
    }
}
