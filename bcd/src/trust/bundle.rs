//! The trust bundle a `Welcome` carries: checked, then kept in `identity.json`.
//!
//! The gateway relays the bundle; only the JoinService key signs it, so nothing of it is
//! trusted before [`verify_welcome_trust`] checks, in this order:
//!
//! 1. the signature (ES256, purpose `trust-bundle`, over the signed bytes and this node's own
//!    trust domain) verifies under the join signing key `join_signing_key_pin` names;
//! 2. the signed bytes decode as a `bc.wire.v1.TrustBundle`;
//! 3. its trust domain is this node's;
//! 4. its version is the one the Welcome announces (the Welcome's field is not signed; the
//!    signed one is what counts, so a gateway cannot relabel an old bundle as newer);
//! 5. its content decodes (the command-signing roots are read from it).
//!
//! [`apply_welcome_trust`] then takes the bundle only when its version is newer than the one
//! held (a daemon never goes back), and stores it in `identity.json` (mode 0600, written
//! atomically like every identity write): `trustVersion`, `trustRoots` (the command-signing
//! roots), `trustBundle` (the content) and `signedTrustBundle` (an encoded
//! `bc.wire.v1.SignedTrustBundle`: the signed bytes with their signature, to verify again
//! later). A refused bundle changes nothing on disk.

use domain::pki::statement::{verify, TrustBundleStatement};
use domain::pki::{PublicKey, Signature, TrustDomain};
use prost::Message;

use crate::files::identity::{read_stored, LoadError};
use crate::files::{DataDir, IDENTITY_FILE};

/// Why a Welcome's trust bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustBundleRefusal {
    /// The signature is missing, malformed, or does not verify under the pinned key.
    #[error("the trust bundle's signature does not verify under the pinned join signing key (join_signing_key_pin)")]
    Signature,
    /// The signed bytes are not a TrustBundle.
    #[error("the signed trust bundle does not decode: {0}")]
    Malformed(String),
    /// Signed for another trust domain.
    #[error("the trust bundle is for trust domain {found:?}, this node is in {expected:?}")]
    TrustDomain {
        /// The signed trust domain.
        found: String,
        /// This node's.
        expected: String,
    },
    /// The Welcome announces another version than the signed one.
    #[error(
        "the Welcome announces trust version {announced} but the signed bundle is version {signed}"
    )]
    VersionMismatch {
        /// The Welcome's (unsigned) field.
        announced: u64,
        /// The signed version.
        signed: u64,
    },
}

/// A bundle whose signature and fields checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedTrustBundle {
    /// The signed version.
    pub version: u64,
    /// Command-signing roots (DER).
    pub roots: Vec<Vec<u8>>,
    /// The bundle content (`bc.events.v1.TrustBundleContent` encoding).
    pub content: Vec<u8>,
    /// An encoded `bc.wire.v1.SignedTrustBundle` (the signed bytes and the signature).
    pub signed: Vec<u8>,
}

/// Checks a Welcome's trust bundle (see the module docs). `Ok(None)`: nothing is published
/// (version 0 and no bytes).
pub fn verify_welcome_trust(
    signing_key: &PublicKey,
    trust_domain: &TrustDomain,
    welcome: &proto::Welcome,
) -> Result<Option<VerifiedTrustBundle>, TrustBundleRefusal> {
    if welcome.trust_version == 0
        && welcome.signed_trust_bundle.is_empty()
        && welcome.trust_bundle_signature.is_empty()
    {
        return Ok(None);
    }
    let signature = Signature::from_bytes(&welcome.trust_bundle_signature)
        .ok_or(TrustBundleRefusal::Signature)?;
    verify(
        signing_key,
        &TrustBundleStatement {
            trust_domain: trust_domain.as_str(),
            bundle: &welcome.signed_trust_bundle,
        },
        &signature,
    )
    .map_err(|_| TrustBundleRefusal::Signature)?;
    let bundle = proto::TrustBundle::decode(welcome.signed_trust_bundle.as_slice())
        .map_err(|e| TrustBundleRefusal::Malformed(e.to_string()))?;
    if bundle.trust_domain != trust_domain.as_str() {
        return Err(TrustBundleRefusal::TrustDomain {
            found: bundle.trust_domain,
            expected: trust_domain.to_string(),
        });
    }
    if bundle.version != welcome.trust_version {
        return Err(TrustBundleRefusal::VersionMismatch {
            announced: welcome.trust_version,
            signed: bundle.version,
        });
    }
    let roots = proto::TrustBundleRoots::decode(bundle.content.as_slice())
        .map_err(|e| TrustBundleRefusal::Malformed(format!("its content: {e}")))?;
    Ok(Some(VerifiedTrustBundle {
        version: bundle.version,
        roots: roots.command_signing_roots,
        content: bundle.content,
        signed: proto::SignedTrustBundle {
            bundle: welcome.signed_trust_bundle.clone(),
            signature: welcome.trust_bundle_signature.clone(),
        }
        .encode_to_vec(),
    }))
}

/// What a Welcome's trust bundle did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustUpdate {
    /// Nothing is published yet.
    NonePublished,
    /// Not newer than the version held: ignored.
    NotNewer {
        /// The version held.
        held: u64,
        /// The version offered.
        offered: u64,
    },
    /// Stored in `identity.json`.
    Stored {
        /// The version held before.
        previous: u64,
        /// The version now held.
        version: u64,
    },
}

/// Why applying a Welcome's trust bundle failed.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The bundle was refused (nothing stored).
    #[error("trust bundle refused: {0}")]
    Refused(#[from] TrustBundleRefusal),
    /// `identity.json` could not be read or written.
    #[error("storing the trust bundle: {0}")]
    Store(#[from] LoadError),
    /// The stored identity names an invalid trust domain.
    #[error("the stored identity's trust domain {0:?} is not valid")]
    TrustDomain(String),
}

/// Checks a Welcome's trust bundle and stores it in `identity.json` when it is newer than the
/// one held (see the module docs).
pub fn apply_welcome_trust(
    dir: &DataDir,
    signing_key: &PublicKey,
    welcome: &proto::Welcome,
) -> Result<TrustUpdate, TrustError> {
    let Some(mut stored) = read_stored(dir)? else {
        return Err(TrustError::Store(LoadError::NotJoined));
    };
    let trust_domain = TrustDomain::new(&stored.trust_domain)
        .map_err(|_| TrustError::TrustDomain(stored.trust_domain.clone()))?;
    let Some(bundle) = verify_welcome_trust(signing_key, &trust_domain, welcome)? else {
        return Ok(TrustUpdate::NonePublished);
    };
    let held = stored.trust_version;
    if bundle.version <= held {
        return Ok(TrustUpdate::NotNewer {
            held,
            offered: bundle.version,
        });
    }
    stored.trust_version = bundle.version;
    stored.trust_roots = bundle.roots;
    stored.trust_bundle = Some(bundle.content);
    stored.signed_trust_bundle = Some(bundle.signed);
    dir.write(IDENTITY_FILE, &stored.to_json())
        .map_err(LoadError::from)?;
    Ok(TrustUpdate::Stored {
        previous: held,
        version: bundle.version,
    })
}
