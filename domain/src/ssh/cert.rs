//! OpenSSH certificates (OpenSSH's PROTOCOL.certkeys, the `*-cert-v01@openssh.com` types),
//! written here and signed by the SSH CA ([`SshCa`]): user certificates for break-glass access
//! now, host certificates with the same code later.
//!
//! The layout, for a subject key of any accepted kind ([`SubjectKey`]):
//!
//! ```text
//! string  "<key type>-cert-v01@openssh.com"
//! string  nonce                       (32 random bytes, from the caller)
//! ...     the key's own fields        (as in its public key blob, after the type)
//! uint64  serial
//! uint32  type                        (1 user, 2 host)
//! string  key id
//! string  valid principals            (a packed list of strings)
//! uint64  valid after, valid before   (seconds since the Unix epoch)
//! string  critical options            (empty: none is ever set here)
//! string  extensions                  (name/empty-data pairs in lexical order; users only)
//! string  reserved                    (empty)
//! string  signature key               (the CA's ssh-ed25519 blob)
//! string  signature                   (string "ssh-ed25519" || string sig, over all above)
//! ```
//!
//! Pure: the nonce, the serial and the times are arguments.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::key::SubjectKey;
use super::wire::{put_string, put_u32, put_u64};
use crate::pki::ssh_ca::{NotACertificate, SshCa};

/// The extensions a break-glass user certificate carries: OpenSSH's standard permit set (what
/// `ssh-keygen -s` grants by default), in the lexical order the format asks for. Nothing else.
pub const USER_EXTENSIONS: [&str; 5] = [
    "permit-X11-forwarding",
    "permit-agent-forwarding",
    "permit-port-forwarding",
    "permit-pty",
    "permit-user-rc",
];

/// User or host certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertKind {
    /// `SSH2_CERT_TYPE_USER` (1).
    User,
    /// `SSH2_CERT_TYPE_HOST` (2).
    Host,
}

impl CertKind {
    fn code(self) -> u32 {
        match self {
            CertKind::User => 1,
            CertKind::Host => 2,
        }
    }
}

/// What one certificate says (checked by the caller's decider; written as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertRequest<'a> {
    pub kind: CertKind,
    pub key: &'a SubjectKey,
    pub serial: u64,
    pub key_id: &'a str,
    pub principals: &'a [String],
    /// Seconds since the Unix epoch.
    pub valid_after: u64,
    /// Seconds since the Unix epoch.
    pub valid_before: u64,
}

/// A signed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshCertificate {
    cert_type: &'static str,
    blob: Vec<u8>,
}

impl SshCertificate {
    /// The wire blob.
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// The `-cert.pub` file's line: `<cert type> <base64 blob> <comment>` and a newline.
    pub fn to_openssh_line(&self, comment: &str) -> String {
        let comment = comment.replace(['\n', '\r'], " ");
        format!(
            "{} {} {comment}\n",
            self.cert_type,
            STANDARD.encode(&self.blob)
        )
        .replace(" \n", "\n")
    }

    /// SHA-256 of the blob (what the log records of the certificate itself).
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.blob).into()
    }
}

/// Builds the certificate `request` describes around `nonce` and signs it with `ca`.
pub fn sign_certificate(
    ca: &SshCa,
    request: &CertRequest<'_>,
    nonce: &[u8; 32],
) -> Result<SshCertificate, NotACertificate> {
    let cert_type = request.key.kind().cert_type_name();
    let mut body = Vec::new();
    put_string(&mut body, cert_type.as_bytes());
    put_string(&mut body, nonce);
    body.extend_from_slice(request.key.fields());
    put_u64(&mut body, request.serial);
    put_u32(&mut body, request.kind.code());
    put_string(&mut body, request.key_id.as_bytes());
    let mut principals = Vec::new();
    for p in request.principals {
        put_string(&mut principals, p.as_bytes());
    }
    put_string(&mut body, &principals);
    put_u64(&mut body, request.valid_after);
    put_u64(&mut body, request.valid_before);
    put_string(&mut body, &[]);
    let mut extensions = Vec::new();
    if request.kind == CertKind::User {
        for name in USER_EXTENSIONS {
            put_string(&mut extensions, name.as_bytes());
            put_string(&mut extensions, &[]);
        }
    }
    put_string(&mut body, &extensions);
    put_string(&mut body, &[]);
    put_string(&mut body, &ca.public_key_blob());
    let signature = ca.sign_certificate(&body)?;
    put_string(&mut body, &signature);
    Ok(SshCertificate {
        cert_type,
        blob: body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_are_in_lexical_order() {
        let mut sorted = USER_EXTENSIONS;
        sorted.sort_unstable();
        assert_eq!(sorted, USER_EXTENSIONS);
    }
}
