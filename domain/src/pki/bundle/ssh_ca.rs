//! The SSH CA in a bundle (issue 42): its public key in `publicKeys.sshCa` (one OpenSSH line),
//! its Ed25519 PKCS#8 `sshCa` with the other private keys. A bundle written before has neither;
//! one without the other is malformed, and the private key must match the public line.

use super::error::{malformed, BundleError};
use super::public::PublicBundle;
use crate::pki::ssh_ca::{parse_public_key_line, SshCa};

const PUBLIC_FIELD: &str = "publicKeys.sshCa";
const KEY_FIELD: &str = "privateKeys.sshCa";

/// The public key `publicKeys.sshCa` holds, if any.
pub(super) fn public_key(line: Option<&str>) -> Result<Option<[u8; 32]>, BundleError> {
    line.map(|l| {
        parse_public_key_line(l).ok_or(malformed(
            PUBLIC_FIELD,
            "not one OpenSSH ssh-ed25519 public key line",
        ))
    })
    .transpose()
}

/// The SSH CA of a bundle, from the key text (decoded by `decode`, PEM or base64 as the bundle's
/// mode says) checked against the public half; `None` when the bundle has none.
pub(super) fn load(
    public: &PublicBundle,
    key_text: Option<&str>,
    decode: &impl Fn(&'static str, &str) -> Result<Vec<u8>, BundleError>,
) -> Result<Option<SshCa>, BundleError> {
    match (&public.ssh_ca_public_key, key_text) {
        (None, None) => Ok(None),
        (Some(expected), Some(text)) => {
            let ca = SshCa::from_pkcs8_der(&decode(KEY_FIELD, text)?)?;
            if ca.public_key_bytes() != expected {
                return Err(malformed(
                    KEY_FIELD,
                    "the SSH CA private key does not match publicKeys.sshCa",
                ));
            }
            Ok(Some(ca))
        }
        (Some(_), None) => Err(malformed(
            KEY_FIELD,
            "missing: the bundle has publicKeys.sshCa but not its key",
        )),
        (None, Some(_)) => Err(malformed(
            KEY_FIELD,
            "the bundle holds an SSH CA key but no publicKeys.sshCa",
        )),
    }
}
