//! A split gateway's internal client certificate (what it presents to the api; from `bcctl pki
//! issue-internal`, at most 90 days) read from files and reloaded on change, so it is rotated by
//! writing new files, without a restart (decision 0086).
//!
//! [`load`] reads the pair ([`crate::edge::tls_files::load`]: the chain leaf first, one PKCS#8
//! key the leaf certifies), refuses a key file others can read, and judges the leaf as the api
//! will: valid now, and passing the api's own verifier ([`internal_client_verifier`]: a chain to
//! the serving CA, clientAuth, `OU=bc-role:gateway`). [`InternalCert`] is the
//! [`Reloadable`] the one file watcher ([`crate::edge::tls_files::watch`]) hands a changed pair
//! to: the same checks, then the relay moves to a new connection presenting it
//! ([`ApiClient::present`]); calls under way finish on the old one. A refused pair (half-written,
//! mismatched, expired, not yet valid, another CA or role, a key others can read) is logged as
//! `Internal client certificate not reloaded: …` and the certificate in use stays in use.
//!
//! The certificate in use is logged at start and at each reload (serial, notAfter) and is the
//! gauge `bc_internal_client_certificate_expiry_seconds{serial}`; reloads count in
//! `bc_internal_client_certificate_reloads_total{outcome="reloaded"|"refused"}`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use commands::Clock;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use time::OffsetDateTime;
use tokio::task::JoinHandle;

use crate::edge::serving::Issued;
use crate::edge::tls_files::{Reloadable, TlsFileError, TlsFiles};
use crate::split::internal_tls::internal_client_verifier;
use crate::split::relay::ApiClient;

/// Why an internal client certificate pair is not used.
#[derive(Debug, thiserror::Error)]
pub enum InternalFileError {
    #[error(transparent)]
    Pair(#[from] TlsFileError),
    #[error("{path} is readable by others (mode {mode:o}): run chmod 600 {path}")]
    KeyReadable { path: PathBuf, mode: u32 },
    #[error("{path}: the certificate (serial {serial}) expired at {not_after}: issue a new one with `bcctl pki issue-internal --replace`")]
    Expired {
        path: PathBuf,
        serial: String,
        not_after: String,
    },
    #[error("{path}: the certificate (serial {serial}) is not valid before {not_before} (is this machine's clock right?)")]
    NotYetValid {
        path: PathBuf,
        serial: String,
        not_before: String,
    },
    #[error("{path}: the api would refuse this certificate: {why} (a gateway's internal certificate comes from `bcctl pki issue-internal` of this deployment)")]
    Refused { path: PathBuf, why: String },
}

fn key_private(path: &Path) -> Result<(), InternalFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| TlsFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(InternalFileError::KeyReadable {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Checks a pair [`crate::edge::tls_files::load`] read (see the module docs).
fn check(
    files: &TlsFiles,
    issued: &Issued,
    serving_ca_der: &[u8],
    now: OffsetDateTime,
) -> Result<(), InternalFileError> {
    key_private(&files.key)?;
    let refused = |why: String| InternalFileError::Refused {
        path: files.cert.clone(),
        why,
    };
    let leaf = issued
        .chain
        .first()
        .ok_or_else(|| refused("the chain is empty".into()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| refused(format!("the leaf does not parse: {e}")))?;
    let serial = hex::encode(cert.raw_serial());
    let validity = cert.validity();
    let (not_before, not_after) = (
        validity.not_before.to_datetime(),
        validity.not_after.to_datetime(),
    );
    if now >= not_after {
        return Err(InternalFileError::Expired {
            path: files.cert.clone(),
            serial,
            not_after: rfc3339(not_after),
        });
    }
    if now < not_before {
        return Err(InternalFileError::NotYetValid {
            path: files.cert.clone(),
            serial,
            not_before: rfc3339(not_before),
        });
    }
    let verifier = internal_client_verifier(serving_ca_der).map_err(|e| refused(e.to_string()))?;
    let intermediates: Vec<CertificateDer<'_>> = issued.chain[1..]
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(now.unix_timestamp()).unwrap_or(0),
    ));
    verifier
        .verify_client_cert(&CertificateDer::from(leaf.as_slice()), &intermediates, at)
        .map_err(|e| refused(e.to_string()))?;
    Ok(())
}

/// Reads and checks the pair at start (`bcctl serve --role gateway`'s `internal_cert` and
/// `internal_key`), at `now`.
pub fn load(
    files: &TlsFiles,
    serving_ca_der: &[u8],
    now: OffsetDateTime,
) -> Result<Issued, InternalFileError> {
    let issued = crate::edge::tls_files::load(files)?;
    check(files, &issued, serving_ca_der, now)?;
    Ok(issued)
}

/// Which internal client certificate is in use, and the reloads, for the metrics page.
#[derive(Debug, Default)]
pub struct InternalCertMetrics {
    /// The serial (hex) and notAfter (Unix seconds) of the certificate the relay presents.
    in_use: Mutex<Option<(String, i64)>>,
    /// Changed pairs put in use.
    pub reloaded: AtomicU64,
    /// Changed pairs refused.
    pub refused: AtomicU64,
}

impl InternalCertMetrics {
    /// The serial (hex) and notAfter (Unix seconds) of the certificate in use.
    pub fn in_use(&self) -> Option<(String, i64)> {
        match self.in_use.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, leaf: &[u8]) {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
            return;
        };
        let now = Some((
            hex::encode(cert.raw_serial()),
            cert.validity().not_after.timestamp(),
        ));
        match self.in_use.lock() {
            Ok(mut g) => *g = now,
            Err(poisoned) => *poisoned.into_inner() = now,
        }
    }

    /// Its families of the Prometheus page (nothing outside a split gateway).
    pub(crate) fn render(&self, out: &mut String) {
        let Some((serial, not_after)) = self.in_use() else {
            return;
        };
        let name = "bc_internal_client_certificate_expiry_seconds";
        let _ = writeln!(out, "# HELP {name} Split gateway: notAfter (Unix seconds) of the internal client certificate it presents to the api, by serial.");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{serial=\"{serial}\"}} {not_after}");
        let name = "bc_internal_client_certificate_reloads_total";
        let _ = writeln!(out, "# HELP {name} Split gateway: changed internal client certificate files, by outcome (reloaded, refused).");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (outcome, n) in [("reloaded", &self.reloaded), ("refused", &self.refused)] {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {n}");
        }
    }
}

/// The internal client certificate of a running split gateway, reloaded from its files.
pub struct InternalCert {
    api: ApiClient,
    serving_ca_der: Vec<u8>,
    files: TlsFiles,
    clock: Arc<dyn Clock>,
    metrics: Arc<InternalCertMetrics>,
}

impl Reloadable for InternalCert {
    fn reloaded(&self) -> &'static str {
        "internal client certificate reloaded: new calls to the api present it"
    }
    fn not_reloaded(&self) -> &'static str {
        "Internal client certificate not reloaded"
    }
    fn keeps(&self) -> &'static str {
        "the gateway keeps presenting the certificate in use to the api"
    }
    fn take(&self, issued: &Issued) -> Result<(), String> {
        check(&self.files, issued, &self.serving_ca_der, self.clock.now())
            .map_err(|e| e.to_string())?;
        self.api
            .present(issued.chain.clone(), issued.key.pkcs8_der().to_vec())
            .map_err(|e| e.to_string())?;
        self.metrics.set(&issued.chain[0]);
        self.metrics.reloaded.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn refused(&self) {
        self.metrics.refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// Logs and publishes the certificate `api` presents now, then watches `files` for as long as
/// the gateway runs (the returned task is aborted at shutdown).
pub fn start(
    api: ApiClient,
    serving_ca_der: Vec<u8>,
    files: TlsFiles,
    clock: Arc<dyn Clock>,
    metrics: Arc<InternalCertMetrics>,
) -> JoinHandle<()> {
    let leaf = api.presented_leaf();
    metrics.set(&leaf);
    if let Some((serial, not_after)) = metrics.in_use() {
        let not_after = OffsetDateTime::from_unix_timestamp(not_after)
            .map(rfc3339)
            .unwrap_or_default();
        tracing::info!(%serial, %not_after, cert = %files.cert.display(), every_s = files.interval.as_secs_f64(), "internal client certificate in use (reloaded when its files change)");
    }
    let target = Arc::new(InternalCert {
        api,
        serving_ca_der,
        files: files.clone(),
        clock,
        metrics,
    });
    tokio::spawn(crate::edge::tls_files::watch(target, files))
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::pki::{
        issue_internal_client_certificate, pem_encode as pem, KeyRole, KeySet, KeySetLifetimes,
        PrivateKey, Serial, TrustDomain,
    };
    use std::time::Duration;
    use time::Duration as Span;

    fn keys(now: OffsetDateTime) -> KeySet {
        let td = TrustDomain::new("internal.example.com").expect("td");
        KeySet::generate(td, now - Span::days(200), KeySetLifetimes::default()).expect("keys")
    }

    /// Writes an internal certificate of `keys` issued at `at` for `lifetime` (and its key, mode
    /// 0600) to `files`; returns its serial.
    fn write(files: &TlsFiles, keys: &KeySet, at: OffsetDateTime, lifetime: Span) -> String {
        let key = PrivateKey::generate(KeyRole::Serving).expect("key");
        let serial = Serial::generate().expect("serial");
        let leaf = issue_internal_client_certificate(
            &keys.serving_ca,
            key.public_key(),
            "gw-1",
            &["localhost".into()],
            &serial,
            lifetime,
            at,
        )
        .expect("leaf");
        let chain = pem("CERTIFICATE", &leaf.der) + &pem("CERTIFICATE", keys.serving_ca.cert_der());
        std::fs::write(&files.cert, chain).expect("write");
        std::fs::write(&files.key, pem("PRIVATE KEY", key.pkcs8_der())).expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        }
        serial.to_hex()
    }

    #[test]
    fn only_a_pair_the_api_would_admit_loads() {
        let now = OffsetDateTime::now_utc();
        let keys = keys(now);
        let ca = keys.serving_ca.cert_der().to_vec();
        let dir = tempfile::tempdir().expect("dir");
        let files = TlsFiles {
            cert: dir.path().join("internal.crt"),
            key: dir.path().join("internal.key"),
            interval: Duration::from_secs(1),
        };
        let serial = write(&files, &keys, now, Span::days(90));
        let issued = load(&files, &ca, now).expect("a fresh pair loads");
        assert_eq!(issued.serial_hex(), serial);

        // Expired: the reason names the serial and the command that makes a new one.
        let old = write(&files, &keys, now - Span::days(100), Span::days(1));
        let err = load(&files, &ca, now).err().expect("expired");
        assert!(
            matches!(&err, InternalFileError::Expired { serial, .. } if *serial == old),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("bcctl pki issue-internal --replace"));
        // Not yet valid.
        write(&files, &keys, now + Span::days(2), Span::days(1));
        let err = load(&files, &ca, now).err().expect("not yet valid");
        assert!(
            matches!(err, InternalFileError::NotYetValid { .. }),
            "{err}"
        );

        // Another deployment's serving CA: the api's verifier refuses the chain.
        write(&files, &keys, now, Span::days(90));
        let other = self::keys(now);
        let err = load(&files, other.serving_ca.cert_der(), now)
            .err()
            .expect("another CA");
        assert!(matches!(err, InternalFileError::Refused { .. }), "{err}");

        // A key others can read.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644))
                .expect("chmod");
            let err = load(&files, &ca, now).err().expect("readable key");
            assert!(
                matches!(err, InternalFileError::KeyReadable { mode: 0o644, .. }),
                "{err}"
            );
            std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        }
        // A key that is not the leaf's, and a half-written certificate.
        let pair = std::fs::read_to_string(&files.cert).expect("read");
        write(&files, &keys, now, Span::days(90));
        std::fs::write(&files.cert, &pair).expect("write");
        let err = load(&files, &ca, now).err().expect("mismatch");
        assert!(
            matches!(err, InternalFileError::Pair(TlsFileError::Mismatch { .. })),
            "{err}"
        );
        std::fs::write(&files.cert, &pair[..pair.len() / 3]).expect("write");
        let err = load(&files, &ca, now).err().expect("cut short");
        assert!(
            matches!(err, InternalFileError::Pair(TlsFileError::NoCertificate(_))),
            "{err}"
        );
    }
}
