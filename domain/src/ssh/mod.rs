//! SSH (issue 42): OpenSSH certificates signed by the deployment's SSH CA
//! ([`crate::pki::ssh_ca::SshCa`], a key of its own that signs nothing else), and the key
//! revocation list nodes' sshd reads.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the SSH wire encoding (RFC 4251 §5) |
//! | [`key`] | the subject keys accepted (Ed25519, ECDSA P-256/384/521, RSA ≥ 3072) |
//! | [`cert`] | the certificate format (PROTOCOL.certkeys), user and host |
//! | [`krl`] | the KRL format (PROTOCOL.krl): revoked serials |
//! | [`issue`] | the deciders: break-glass issuance and revocation, and their refusals |
//!
//! Pure: no IO, no clock; nonces and serials come in as arguments.

pub mod cert;
pub mod issue;
pub mod key;
pub mod krl;
pub mod wire;
