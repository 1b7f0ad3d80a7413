//! The bundle's JSON document as it is written and read: its format and version, the public
//! part (certificates, public keys), the private keys (sealed or plaintext) and the seal's AAD.

use serde::{Deserialize, Serialize};

use crate::pki::bundle_kdf::Argon2idParams;
use crate::pki::encoding::put_lp;
use crate::pki::spiffe::TrustDomain;

/// The `format` field.
pub const BUNDLE_FORMAT: &str = "bc-pki-bundle";
/// The `version` field this code writes and reads.
pub const BUNDLE_VERSION: u32 = 1;
const SEAL_LABEL: &str = "bc-pki-bundle-seal-v1";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Document {
    pub(super) format: String,
    pub(super) version: u32,
    pub(super) trust_domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) root_key: Option<RootKeyPlace>,
    pub(super) certificates: Certificates,
    pub(super) public_keys: PublicKeys,
    pub(super) private_keys: PrivateKeys,
}

/// Where the root CA's key is, when not in the bundle.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) enum RootKeyPlace {
    /// In a file kept off the servers (`pki init --offline-root`).
    Offline,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Certificates {
    pub(super) root_ca: String,
    pub(super) node_ca: String,
    pub(super) serving_ca: String,
    pub(super) command_signing_root: String,
    /// Absent in a bundle without an operator CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) operator_ca: Option<String>,
}

#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PublicKeys {
    pub(super) join_signing: String,
    pub(super) join_encryption: String,
    pub(super) audit_signing: String,
    /// The SSH CA's public key, one OpenSSH line; absent in a bundle without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ssh_ca: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "camelCase", deny_unknown_fields)]
pub(super) enum PrivateKeys {
    #[serde(rename_all = "camelCase")]
    Sealed {
        aead: String,
        kdf: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kdf_params: Option<Argon2idParams>,
        salt: String,
        key_check: String,
        nonce: String,
        ciphertext: String,
    },
    Plaintext {
        keys: KeyMap,
    },
}

/// The seven private keys, as PEM (plaintext mode) or base64 DER (inside the seal).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct KeyMap {
    /// Absent when the root is offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) root_ca: Option<String>,
    pub(super) node_ca: String,
    pub(super) serving_ca: String,
    pub(super) join_signing: String,
    pub(super) join_encryption: String,
    pub(super) audit_signing: String,
    pub(super) command_signing_root: String,
    /// Absent in a bundle without an operator CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) operator_ca: Option<String>,
    /// Absent in a bundle without an SSH CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) ssh_ca: Option<String>,
    /// The second command-signing root while a rotation is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) next_command_signing_root: Option<NextRootText>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SealedPayload {
    pub(super) public_sha256: String,
    pub(super) keys: KeyMap,
}

/// The second root as the bundle stores it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct NextRootText {
    pub(super) certificate: String,
    pub(super) key: String,
}

/// How the private keys are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// Sealed under the deployment secret.
    Sealed,
    /// Unsealed (`--plaintext`, development only).
    Plaintext,
}

pub(super) fn seal_aad(td: &TrustDomain) -> Vec<u8> {
    let mut aad = Vec::new();
    put_lp(&mut aad, SEAL_LABEL.as_bytes());
    put_lp(&mut aad, td.as_str().as_bytes());
    aad
}
