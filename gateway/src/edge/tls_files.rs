//! The gateway's serving certificate read from files and reloaded on change (spec 003
//! "Reloading gateway certificates"; `[tls] cert_file`, `key_file`, `reload_interval` in `bcctl
//! serve`'s configuration, written by `bcctl pki issue-gateway`).
//!
//! [`load`] reads the pair at start: the certificate file is the chain, leaf first (PEM), the key
//! file one PKCS#8 `PRIVATE KEY` (PEM), and the key must be the one the leaf certifies.
//! [`watch`] then looks at both files' modification time and size every interval; a changed pair
//! is loaded first and only then handed to [`ServingCert`], so new handshakes get it while open
//! sessions keep the certificate they were made with. A half-written or mismatched pair (a parse
//! error, a key that is not the leaf's) is logged (`Gateway serving certificate not reloaded:
//! …`) and the listener keeps what it serves; the next change is tried again.
//!
//! The same watcher reloads a split gateway's internal client certificate (what it presents to
//! the api), with that certificate's own checks on top: [`Reloadable`] is what a pair is handed
//! to, [`crate::split::internal_files`] the second one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use domain::pki::{pem_blocks, KeyRole, PrivateKey};

use crate::edge::serving::{Issued, ServingCert};

/// Where the pair is and how often to look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The leaf's key (PKCS#8 PEM).
    pub key: PathBuf,
    /// How often the files are looked at (default 60 s).
    pub interval: Duration,
}

/// The default interval between looks.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(60);

/// Why a pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no complete PEM CERTIFICATE (a half-written file?)")]
    NoCertificate(PathBuf),
    #[error("{0}: not one complete PEM PRIVATE KEY (PKCS#8; a half-written file?)")]
    NoKey(PathBuf),
    #[error("{path}: {why}")]
    Malformed { path: PathBuf, why: String },
    #[error("the key in {key} is not the key the certificate in {cert} certifies (a mismatched pair: write both from one `bcctl pki issue-gateway`)")]
    Mismatch { cert: PathBuf, key: PathBuf },
}

fn read(path: &Path) -> Result<String, TlsFileError> {
    std::fs::read_to_string(path).map_err(|source| TlsFileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads and checks the pair.
pub fn load(files: &TlsFiles) -> Result<Issued, TlsFileError> {
    let chain = pem_blocks("CERTIFICATE", &read(&files.cert)?)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| TlsFileError::NoCertificate(files.cert.clone()))?;
    let keys = pem_blocks("PRIVATE KEY", &read(&files.key)?)
        .filter(|k| k.len() == 1)
        .ok_or_else(|| TlsFileError::NoKey(files.key.clone()))?;
    let key = PrivateKey::from_pkcs8_der(KeyRole::Serving, &keys[0]).map_err(|e| {
        TlsFileError::Malformed {
            path: files.key.clone(),
            why: e.to_string(),
        }
    })?;
    let (_, leaf) =
        x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| TlsFileError::Malformed {
            path: files.cert.clone(),
            why: format!("the first certificate does not parse: {e}"),
        })?;
    if leaf.tbs_certificate.subject_pki.raw != key.public_key().spki_der() {
        return Err(TlsFileError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
        });
    }
    Ok(Issued { chain, key })
}

/// What a look at the files sees: each file's modification time and size.
type Stamp = Option<((SystemTime, u64), (SystemTime, u64))>;

fn stamp(files: &TlsFiles) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    Some((one(&files.cert)?, one(&files.key)?))
}

/// What a watched pair is handed to: the gateway's serving certificate ([`ServingCert`]) or a
/// split gateway's internal client certificate
/// ([`crate::split::internal_files::InternalCert`]). One watcher ([`watch`]) serves both.
pub trait Reloadable: Send + Sync + 'static {
    /// The log line of a pair put in use ("gateway serving certificate reloaded").
    fn reloaded(&self) -> &'static str;
    /// The start of the log line of a refused pair ("Gateway serving certificate not
    /// reloaded").
    fn not_reloaded(&self) -> &'static str;
    /// What stays in use when a pair is refused ("the listener keeps its certificate").
    fn keeps(&self) -> &'static str;
    /// Checks `issued` beyond [`load`]'s checks and puts it in use for new connections; an
    /// `Err` (operator-readable) leaves the one in use.
    fn take(&self, issued: &Issued) -> Result<(), String>;
    /// A changed pair was refused (by [`load`] or [`Reloadable::take`]); by default nothing.
    fn refused(&self) {}
}

impl Reloadable for ServingCert {
    fn reloaded(&self) -> &'static str {
        "gateway serving certificate reloaded"
    }
    fn not_reloaded(&self) -> &'static str {
        "Gateway serving certificate not reloaded"
    }
    fn keeps(&self) -> &'static str {
        "the listener keeps its certificate"
    }
    fn take(&self, issued: &Issued) -> Result<(), String> {
        self.replace_with(issued).map_err(|e| e.to_string())
    }
}

/// The leaf's notAfter as RFC 3339 (empty when it does not parse), for log lines.
fn not_after_text(issued: &Issued) -> String {
    issued
        .chain
        .first()
        .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
        .and_then(|(_, c)| {
            c.validity()
                .not_after
                .to_datetime()
                .format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// Reloads `target` from `files` on change, for as long as the gateway runs (the task is
/// aborted at shutdown).
pub async fn watch<T: Reloadable + ?Sized>(target: Arc<T>, files: TlsFiles) {
    let mut seen = stamp(&files);
    let interval = files.interval.max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(interval).await;
        let now = stamp(&files);
        if now == seen {
            continue;
        }
        seen = now;
        let outcome = load(&files)
            .map_err(|e| e.to_string())
            .and_then(|issued| target.take(&issued).map(|()| issued));
        match outcome {
            Ok(issued) => {
                tracing::info!(serial = %issued.serial_hex(), not_after = %not_after_text(&issued), cert = %files.cert.display(), "{}", target.reloaded());
            }
            Err(why) => {
                target.refused();
                tracing::warn!("{}: {why}; {}", target.not_reloaded(), target.keeps());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};

    use domain::pki::pem_encode as pem;

    #[test]
    fn a_pair_loads_and_a_half_written_or_mismatched_one_is_refused() {
        let keys = KeySet::generate(
            TrustDomain::new("f.example.com").expect("td"),
            time::OffsetDateTime::now_utc(),
            KeySetLifetimes::default(),
        )
        .expect("keys");
        let issue = || {
            let key = PrivateKey::generate(KeyRole::Serving).expect("key");
            let request = crate::edge::serving::serving_request(
                &["localhost".into()],
                time::Duration::days(1),
            )
            .expect("request");
            let leaf = domain::pki::issue_serving_certificate(
                &keys.serving_ca,
                key.public_key(),
                &request,
                time::OffsetDateTime::now_utc(),
            )
            .expect("leaf");
            (leaf.der, key)
        };
        let dir = tempfile::tempdir().expect("dir");
        let files = TlsFiles {
            cert: dir.path().join("gw.crt"),
            key: dir.path().join("gw.key"),
            interval: Duration::from_secs(1),
        };
        let (leaf, key) = issue();
        let crt = pem("CERTIFICATE", &leaf) + &pem("CERTIFICATE", keys.serving_ca.cert_der());
        std::fs::write(&files.cert, &crt).expect("write");
        std::fs::write(&files.key, pem("PRIVATE KEY", key.pkcs8_der())).expect("write");
        let loaded = load(&files).expect("loads");
        assert_eq!(loaded.chain.len(), 2);
        assert_eq!(loaded.chain[0], leaf);

        // Cut short.
        std::fs::write(&files.cert, &crt[..crt.len() / 3]).expect("write");
        assert!(matches!(load(&files), Err(TlsFileError::NoCertificate(_))));
        // Another key.
        std::fs::write(&files.cert, &crt).expect("write");
        let (_, other) = issue();
        std::fs::write(&files.key, pem("PRIVATE KEY", other.pkcs8_der())).expect("write");
        let err = load(&files).err().expect("mismatch");
        assert!(matches!(err, TlsFileError::Mismatch { .. }), "{err}");
    }
}
