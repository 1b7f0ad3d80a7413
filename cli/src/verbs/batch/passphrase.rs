//! Passphrase-protected approver keys: encrypted PKCS#8 (`ENCRYPTED PRIVATE KEY`, PBES2 with
//! scrypt and AES-256-CBC), written by `batch keygen --passphrase-env VAR` and opened with the
//! passphrase in `BC_APPROVER_PASSPHRASE` (MISSING_ENV without it).

use std::path::Path;

use pkcs8::{EncryptedPrivateKeyInfo, PrivateKeyInfo};

use super::error::BatchCmdError;

/// The environment variable holding an encrypted approver key's passphrase.
pub const APPROVER_PASSPHRASE_ENV: &str = "BC_APPROVER_PASSPHRASE";

/// The PEM label of an encrypted key.
pub const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// The passphrase in `var`, which must be set and not empty.
pub(crate) fn passphrase_from(var: &str, why: &str) -> Result<String, BatchCmdError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(BatchCmdError::MissingEnv(format!(
            "set {var} to the passphrase {why}"
        ))),
    }
}

/// Encrypts a PKCS#8 document under `passphrase`.
pub(crate) fn encrypt(pkcs8_der: &[u8], passphrase: &str) -> Result<Vec<u8>, BatchCmdError> {
    let info = PrivateKeyInfo::try_from(pkcs8_der)
        .map_err(|e| BatchCmdError::State(format!("the generated key is not PKCS#8: {e}")))?;
    let doc = info
        .encrypt(rand_core::OsRng, passphrase.as_bytes())
        .map_err(|e| BatchCmdError::State(format!("encrypting the key failed: {e}")))?;
    Ok(doc.as_bytes().to_vec())
}

/// Decrypts an encrypted key file's DER with `BC_APPROVER_PASSPHRASE`.
pub(crate) fn decrypt(path: &Path, der: &[u8]) -> Result<Vec<u8>, BatchCmdError> {
    let passphrase = passphrase_from(
        APPROVER_PASSPHRASE_ENV,
        &format!("approver key {} is encrypted with", path.display()),
    )?;
    let info = EncryptedPrivateKeyInfo::try_from(der).map_err(|e| BatchCmdError::BadPem {
        path: path.to_path_buf(),
        what: ENCRYPTED_LABEL,
        why: e.to_string(),
    })?;
    let doc = info
        .decrypt(passphrase.as_bytes())
        .map_err(|_| BatchCmdError::Passphrase(path.to_path_buf()))?;
    Ok(doc.as_bytes().to_vec())
}
