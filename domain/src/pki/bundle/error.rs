//! Why a bundle could not be written or read ([`BundleError`]).

use super::document::{BUNDLE_FORMAT, BUNDLE_VERSION};
use crate::pki::bundle_kdf::KdfError;
use crate::pki::ca::CaError;
use crate::pki::keys::KeyError;
use crate::pki::keyset::KeySetError;
use crate::pki::secret::SecretError;
use crate::pki::spiffe::SpiffeError;

/// Why a bundle could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Not JSON of the expected shape.
    #[error("INVALID_CONFIG: the PKI bundle is not a valid bc-pki-bundle JSON document: {0}")]
    Json(String),
    /// Another format or version.
    #[error("INVALID_CONFIG: the PKI bundle is {format:?} version {version}; this build reads {BUNDLE_FORMAT:?} version {BUNDLE_VERSION}")]
    UnsupportedFormat {
        /// `format` found.
        format: String,
        /// `version` found.
        version: u32,
    },
    /// A field does not decode.
    #[error("INVALID_CONFIG: the PKI bundle's {field} is malformed: {reason}")]
    Malformed {
        /// Field path.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The trust domain is invalid.
    #[error("INVALID_CONFIG: the PKI bundle's trust domain: {0}")]
    TrustDomain(#[from] SpiffeError),
    /// No usable secret.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The secret is not this bundle's.
    #[error("INVALID_CONFIG: the PKI bundle does not open with this BC_DEPLOYMENT_SECRET: it was sealed under another secret (or its kdf or kdfParams were changed)")]
    WrongSecret,
    /// The secret is right, but the sealed keys do not open for this trust domain.
    #[error("INVALID_CONFIG: the PKI bundle's sealed keys do not open for trust domain {trust_domain}: the trust domain or the sealed keys were changed; restore the bundle from a backup")]
    SealBroken {
        /// Trust domain in the file.
        trust_domain: String,
    },
    /// The seal opened but the public parts are not the sealed ones.
    #[error("INVALID_CONFIG: the PKI bundle's public parts (certificates, public keys) changed since it was sealed; restore it from a backup")]
    PublicPartsChanged,
    /// A private key and its public counterpart disagree, or a role is wrong.
    #[error("INVALID_CONFIG: the PKI bundle's keys: {0}")]
    Keys(#[from] KeySetError),
    /// Sealing failed (randomness).
    #[error("sealing the PKI bundle failed: {0}")]
    Seal(String),
}

impl From<CaError> for BundleError {
    fn from(e: CaError) -> Self {
        BundleError::Keys(KeySetError::Ca(e))
    }
}

impl From<KdfError> for BundleError {
    fn from(e: KdfError) -> Self {
        match e {
            KdfError::Params(reason) => BundleError::Malformed {
                field: "privateKeys.kdfParams",
                reason,
            },
            KdfError::Kdf(reason) => BundleError::Malformed {
                field: "privateKeys.kdf",
                reason,
            },
            KdfError::Derive(why) => BundleError::Seal(why),
        }
    }
}

impl From<KeyError> for BundleError {
    fn from(e: KeyError) -> Self {
        BundleError::Keys(KeySetError::Key(e))
    }
}

pub(super) fn malformed(field: &'static str, reason: &str) -> BundleError {
    BundleError::Malformed {
        field,
        reason: reason.into(),
    }
}
