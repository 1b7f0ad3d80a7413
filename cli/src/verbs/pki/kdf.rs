//! The Argon2id cost a new PKI bundle is sealed with: the default ([`Argon2idParams::DEFAULT`],
//! 64 MiB and 3 passes), or what `BC_PKI_ARGON2_MEMORY_KIB` and `BC_PKI_ARGON2_ITERATIONS` ask.
//!
//! The cost is what a stolen bundle's secret costs to guess, and what every process that opens
//! the bundle pays once at start (a few hundred milliseconds at the default). The variables are
//! for machines where that start matters more than the guessing cost: test suites that start
//! hundreds of deployments, small devices. Each is read only when a bundle is sealed anew
//! (`bcctl pki init`, `bcctl up`'s first run); the parameters are written into the bundle
//! (`privateKeys.kdfParams`, shown by `bcctl pki show`), so every reader derives with what the
//! writer chose. Values outside Argon2's and the bundle reader's bounds are refused, never
//! clamped.

use domain::pki::{Argon2idParams, BundleKdf};

/// Memory, KiB (at least 8; at most 1 GiB).
pub const MEMORY_KIB_ENV: &str = "BC_PKI_ARGON2_MEMORY_KIB";
/// Passes over the memory (1 to 64).
pub const ITERATIONS_ENV: &str = "BC_PKI_ARGON2_ITERATIONS";

/// The derivation a new bundle is sealed with, from the environment.
pub fn sealing_kdf() -> Result<BundleKdf, String> {
    sealing_kdf_from(
        std::env::var(MEMORY_KIB_ENV).ok().as_deref(),
        std::env::var(ITERATIONS_ENV).ok().as_deref(),
    )
}

/// [`sealing_kdf`] over the two variables' values (`None`: unset, the default).
pub fn sealing_kdf_from(
    memory_kib: Option<&str>,
    iterations: Option<&str>,
) -> Result<BundleKdf, String> {
    let mut params = Argon2idParams::DEFAULT;
    if let Some(text) = memory_kib.filter(|t| !t.is_empty()) {
        params.memory_kib = whole(MEMORY_KIB_ENV, text)?;
    }
    if let Some(text) = iterations.filter(|t| !t.is_empty()) {
        params.iterations = whole(ITERATIONS_ENV, text)?;
    }
    params
        .check()
        .map_err(|e| format!("{MEMORY_KIB_ENV} / {ITERATIONS_ENV}: {e}"))?;
    Ok(BundleKdf::Argon2id(params))
}

fn whole(name: &str, text: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{name} must be a whole number, got {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kdf: BundleKdf) -> (u32, u32, u32) {
        let p = kdf.params().expect("Argon2id");
        (p.memory_kib, p.iterations, p.parallelism)
    }

    #[test]
    fn unset_or_empty_is_the_default_of_64_mib_and_3_passes() {
        assert_eq!(params(sealing_kdf_from(None, None).unwrap()), (65536, 3, 1));
        assert_eq!(
            params(sealing_kdf_from(Some(""), Some("")).unwrap()),
            (65536, 3, 1)
        );
    }

    #[test]
    fn each_variable_sets_its_parameter() {
        assert_eq!(
            params(sealing_kdf_from(Some("1024"), Some(" 1 ")).unwrap()),
            (1024, 1, 1)
        );
        assert_eq!(
            params(sealing_kdf_from(None, Some("4")).unwrap()),
            (65536, 4, 1)
        );
    }

    #[test]
    fn values_out_of_bounds_or_not_numbers_are_refused() {
        assert_eq!(
            sealing_kdf_from(Some("7"), None).err().as_deref(),
            Some(
                "BC_PKI_ARGON2_MEMORY_KIB / BC_PKI_ARGON2_ITERATIONS: privateKeys.kdfParams: \
                 memoryKib 7 is not between 8 (8 per lane) and 1048576"
            )
        );
        assert_eq!(
            sealing_kdf_from(None, Some("0")).err().as_deref(),
            Some(
                "BC_PKI_ARGON2_MEMORY_KIB / BC_PKI_ARGON2_ITERATIONS: privateKeys.kdfParams: \
                 iterations 0 is not between 1 and 64"
            )
        );
        assert_eq!(
            sealing_kdf_from(Some("64M"), None).err().as_deref(),
            Some("BC_PKI_ARGON2_MEMORY_KIB must be a whole number, got \"64M\"")
        );
    }
}
