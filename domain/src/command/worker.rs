//! Worker certificates (spec 003 "Signed intent"): "a signer is valid only as a worker
//! certificate chaining to a command-signing root; there is no command-signing extended key
//! usage." Issuing one is [`crate::pki::leaf::issue_worker_certificate`]; this module is the
//! check a node (or a test, or an auditor) makes of a command's signer.
//!
//! [`verify_worker`] accepts a certificate only when it parses as one DER certificate, is not a
//! CA, carries exactly one role, `OU=bc-role:worker`, lives at most 24 hours, is valid at the
//! time asked (the command's issue time), and carries a valid signature by one of the roots
//! given whose subject is its issuer.

use std::convert::Infallible;

use events::schema::WorkerCertified;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::decision::Decision;
use crate::pki::leaf::WORKER_CERT_MAX_LIFETIME;
use crate::pki::spiffe::ROLE_OU_PREFIX;
use crate::pki::{IssuedCertificate, PublicKey};

/// The longest a worker certificate lives.
pub const WORKER_MAX_LIFETIME: time::Duration = WORKER_CERT_MAX_LIFETIME;

/// A process replaces its worker key after this fraction of the certificate's lifetime.
pub const WORKER_REPLACE_FRACTION: f64 = 0.6;

/// A worker certificate that checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWorker {
    /// The worker's key.
    pub public_key: PublicKey,
    /// SHA-256 of the root (DER) it chains to.
    pub root_sha256: [u8; 32],
    /// SHA-256 of the worker certificate (DER).
    pub certificate_sha256: [u8; 32],
    /// Its notAfter.
    pub not_after: OffsetDateTime,
    /// Its subject common name (the process that holds it).
    pub name: String,
}

/// Why a command's signer is not a trusted worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// The node holds no command-signing root.
    #[error("no-roots: this node holds no command-signing root to verify the signer against")]
    NoRoots,
    /// No certificate came with the command.
    #[error("no-certificate: the command carries no worker certificate")]
    NoCertificate,
    /// Not one DER certificate.
    #[error("malformed: the worker certificate does not parse")]
    Malformed,
    /// A CA certificate, not a worker's.
    #[error("not-a-worker: the signer's certificate is a CA certificate")]
    IsCa,
    /// Its role is not `worker` (or it has none, or two).
    #[error("not-a-worker: the signer's certificate has role {0:?}, not worker")]
    WrongRole(String),
    /// Lives longer than 24 hours.
    #[error("lifetime: the worker certificate lives {seconds} s; at most 24 hours")]
    TooLong {
        /// Its lifetime in seconds.
        seconds: i64,
    },
    /// Not valid at the time asked.
    #[error(
        "not-valid: the worker certificate is valid from {not_before} to {not_after}, not at {at}"
    )]
    NotValidAt {
        /// Its notBefore (Unix seconds).
        not_before: i64,
        /// Its notAfter (Unix seconds).
        not_after: i64,
        /// The time asked (Unix seconds).
        at: i64,
    },
    /// No held root signed it.
    #[error("untrusted: the worker certificate does not chain to any of the {roots} command-signing root(s) this node holds")]
    Untrusted {
        /// How many roots were tried.
        roots: usize,
    },
    /// Its key is not a P-256 key.
    #[error("key: the worker certificate's key is not a P-256 key")]
    Key,
}

fn parse(der: &[u8]) -> Option<X509Certificate<'_>> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Some(cert),
        _ => None,
    }
}

/// Checks `der` as a worker certificate of one of `roots` (DER), valid at `at`.
pub fn verify_worker(
    der: &[u8],
    roots: &[Vec<u8>],
    at: OffsetDateTime,
) -> Result<VerifiedWorker, WorkerError> {
    if roots.is_empty() {
        return Err(WorkerError::NoRoots);
    }
    let cert = parse(der).ok_or(WorkerError::Malformed)?;
    if cert.is_ca() {
        return Err(WorkerError::IsCa);
    }
    let roles: Vec<&str> = cert
        .subject()
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok())
        .filter_map(|ou| ou.strip_prefix(ROLE_OU_PREFIX))
        .collect();
    if roles != ["worker"] {
        return Err(WorkerError::WrongRole(roles.join(",")));
    }
    let not_before = cert.validity().not_before.to_datetime();
    let not_after = cert.validity().not_after.to_datetime();
    let seconds = (not_after - not_before).whole_seconds();
    if seconds > WORKER_MAX_LIFETIME.whole_seconds() {
        return Err(WorkerError::TooLong { seconds });
    }
    if at < not_before || at >= not_after {
        return Err(WorkerError::NotValidAt {
            not_before: not_before.unix_timestamp(),
            not_after: not_after.unix_timestamp(),
            at: at.unix_timestamp(),
        });
    }
    let root = roots
        .iter()
        .find(|root_der| {
            parse(root_der).is_some_and(|root| {
                root.is_ca()
                    && root.subject().as_raw() == cert.issuer().as_raw()
                    && cert.verify_signature(Some(root.public_key())).is_ok()
            })
        })
        .ok_or(WorkerError::Untrusted { roots: roots.len() })?;
    let public_key =
        PublicKey::from_spki_der(cert.public_key().raw).map_err(|_| WorkerError::Key)?;
    let name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok(VerifiedWorker {
        public_key,
        root_sha256: Sha256::digest(root).into(),
        certificate_sha256: Sha256::digest(der).into(),
        not_after,
        name,
    })
}
/// Records a worker certificate the command-signing root (`root_der`) issued to `holder`
/// (signing comes first, in the shell): `worker.certified`. Nothing is refused.
pub fn decide_worker_certified(
    issued: &IssuedCertificate,
    root_der: &[u8],
    holder: &str,
) -> Result<Decision<WorkerCertified, ()>, Infallible> {
    let to_us = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1000) as i64;
    Ok(Decision::events_only(vec![WorkerCertified {
        certificate_der: issued.der.clone(),
        certificate_sha256: issued.sha256.to_vec(),
        root_sha256: Sha256::digest(root_der).to_vec(),
        not_before_us: to_us(issued.not_before),
        not_after_us: to_us(issued.not_after),
        holder: holder.to_string(),
    }]))
}
