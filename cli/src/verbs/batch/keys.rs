//! Approver key files: PEM encoding, `batch keygen`, loading a private key (refused when
//! readable by others) and signing with it.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use domain::quorum::{ApproverKey, Kid};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use serde_json::json;

use super::args::KeygenArgs;
use super::error::{io, BatchCmdError};
use super::passphrase::{decrypt, encrypt, passphrase_from, ENCRYPTED_LABEL};

/// The SPKI DER prefix of a P-256 key with an uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

pub(crate) fn read_pem(path: &Path, label: &'static str) -> Result<Vec<u8>, BatchCmdError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let bad = |why: &str| BatchCmdError::BadPem {
        path: path.to_path_buf(),
        what: label,
        why: why.to_string(),
    };
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin).ok_or_else(|| bad("no BEGIN line"))? + begin.len();
    let stop = text[start..].find(&end).ok_or_else(|| bad("no END line"))? + start;
    let body: String = text[start..stop].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| bad(&e.to_string()))
}

pub(crate) fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), BatchCmdError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                BatchCmdError::Exists(path.to_path_buf())
            } else {
                BatchCmdError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        })?;
    file.write_all(contents.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

pub(crate) fn pub_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

pub(crate) fn keygen(args: KeygenArgs) -> Result<(), BatchCmdError> {
    if crate::output::is_stdio(&args.out) {
        return Err(BatchCmdError::Input(
            "--out -: a key pair is two files (KEY and KEY.pub) and a private key never goes to standard output; name a file".into(),
        ));
    }
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| BatchCmdError::State("the system random source failed".into()))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| BatchCmdError::State("a generated key did not load".into()))?;
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    let kid = Kid::of_spki(&spki);
    let public = pub_path(&args.out);
    if public.exists() {
        return Err(BatchCmdError::Exists(public));
    }
    let private = match &args.passphrase_env {
        None => pem("PRIVATE KEY", pkcs8.as_ref()),
        Some(var) => {
            let passphrase = passphrase_from(var, "that encrypts the new approver key")?;
            pem(ENCRYPTED_LABEL, &encrypt(pkcs8.as_ref(), &passphrase)?)
        }
    };
    write_new(&args.out, &private, 0o600)?;
    write_new(&public, &pem("PUBLIC KEY", &spki), 0o644)?;
    if args.json {
        crate::outln!(
            "{}",
            json!({ "kid": kid.to_hex(), "key": args.out, "public": public,
                    "encrypted": args.passphrase_env.is_some() })
        );
    } else {
        crate::outln!("approver key {} written to {}", kid, args.out.display());
        crate::outln!("public key: {}", public.display());
    }
    Ok(())
}

/// Loads a private key, refusing a file readable by others.
pub(crate) fn load_key(path: &Path) -> Result<(EcdsaKeyPair, ApproverKey), BatchCmdError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(BatchCmdError::KeyReadable {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let der = if text.contains(&format!("-----BEGIN {ENCRYPTED_LABEL}-----")) {
        decrypt(path, &read_pem(path, ENCRYPTED_LABEL)?)?
    } else {
        read_pem(path, "PRIVATE KEY")?
    };
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &SystemRandom::new())
            .map_err(|e| BatchCmdError::BadPem {
                path: path.to_path_buf(),
                what: "P-256 PKCS#8",
                why: e.to_string(),
            })?;
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    let key = ApproverKey::from_spki(&spki).map_err(|e| BatchCmdError::Input(e.to_string()))?;
    Ok((pair, key))
}

pub(crate) fn sign(pair: &EcdsaKeyPair, message: &[u8]) -> Result<Vec<u8>, BatchCmdError> {
    pair.sign(&SystemRandom::new(), message)
        .map(|s| s.as_ref().to_vec())
        .map_err(|_| BatchCmdError::State("signing failed".into()))
}
