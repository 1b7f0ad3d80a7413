//! The gateway's serving certificate, renewed while it runs.
//!
//! A gateway's serving certificate is short-lived (at most 7 days, whatever is configured:
//! [`domain::pki::GATEWAY_SERVING_MAX_LIFETIME`]), and a gateway can run for longer than that. So rustls does not get one fixed certificate. It gets a
//! [`ServingCert`] resolver, and [`renew`] replaces what that resolver hands out at two thirds
//! of each certificate's validity, with a fresh key every time. Connections already open keep
//! the certificate they were made with; new handshakes get the new one. The issuer is the
//! serving CA in this process (the `all` role) or the api over internal mTLS (the `gateway`
//! role, which holds no CA key). A failed renewal is retried with backoff (30 s doubling to
//! 10 min). It is logged as a warning, and as an error once the certificate in use is within a
//! tenth of its lifetime of expiring.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use commands::Clock;
use domain::pki::{
    issue_serving_certificate, KeyRole, KeySet, PrivateKey, Serial, ServingCertificateRequest,
    ServingRole,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;

use crate::edge::tls::{provider, TlsSetupError};
use crate::split::relay::ApiClient;

/// Why a serving certificate request could not be made.
#[derive(Debug, thiserror::Error)]
#[error("serving certificate: {0}")]
pub struct ServingRequestError(String);

/// The request for a gateway serving certificate naming `names` (IP addresses and DNS names).
pub(crate) fn serving_request(
    names: &[String],
    lifetime: time::Duration,
) -> Result<ServingCertificateRequest, ServingRequestError> {
    let (dns_names, ip_addresses) = domain::pki::leaf::split_names(names);
    Ok(ServingCertificateRequest {
        dns_names,
        ip_addresses,
        role: ServingRole::Gateway,
        serial: Serial::generate().map_err(|e| ServingRequestError(e.to_string()))?,
        lifetime,
    })
}

/// The first retry after a failed renewal; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(30);
const RETRY_MAX: Duration = Duration::from_secs(600);
/// Never sleep less than this between renewals, whatever the validity says.
const RENEW_FLOOR: Duration = Duration::from_secs(1);

/// A serving certificate as issued: the chain (leaf first, then the serving CA) and its key.
pub struct Issued {
    pub chain: Vec<Vec<u8>>,
    pub key: PrivateKey,
}

impl Issued {
    /// The leaf's validity, read from the certificate itself.
    fn validity(&self) -> Result<(OffsetDateTime, OffsetDateTime), String> {
        let leaf = self
            .chain
            .first()
            .ok_or_else(|| "the chain is empty".to_string())?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("the leaf does not parse: {e}"))?;
        let v = cert.validity();
        Ok((v.not_before.to_datetime(), v.not_after.to_datetime()))
    }

    pub(crate) fn serial_hex(&self) -> String {
        self.chain
            .first()
            .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
            .map(|(_, c)| hex::encode(c.raw_serial()))
            .unwrap_or_default()
    }

    fn certified_key(&self) -> Result<CertifiedKey, TlsSetupError> {
        let key = provider()
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                self.key.pkcs8_der().to_vec(),
            )))
            .map_err(|e| TlsSetupError::Verifier(format!("serving key: {e}")))?;
        Ok(CertifiedKey::new(
            self.chain
                .iter()
                .map(|c| CertificateDer::from(c.clone()))
                .collect(),
            key,
        ))
    }
}

/// Where serving certificates come from.
#[derive(Clone)]
pub enum Issuer {
    /// The serving CA of this process's key set (the `all` role).
    Local {
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        names: Vec<String>,
        lifetime: time::Duration,
        /// Gateway (agent-facing) or internal (the api's own endpoint).
        role: ServingRole,
    },
    /// The api, over internal mTLS (the `gateway` role).
    Api {
        api: ApiClient,
        serving_ca_der: Vec<u8>,
        names: Vec<String>,
        lifetime: time::Duration,
    },
}

impl Issuer {
    /// A fresh key and a certificate for it.
    pub async fn issue(&self) -> Result<Issued, IssueFailure> {
        let key = PrivateKey::generate(KeyRole::Serving)
            .map_err(|e| IssueFailure::Fatal(e.to_string()))?;
        match self {
            Issuer::Local {
                keys,
                clock,
                names,
                lifetime,
                role,
            } => {
                let mut request = serving_request(names, *lifetime)
                    .map_err(|e| IssueFailure::Fatal(e.to_string()))?;
                request.role = *role;
                let issued = issue_serving_certificate(
                    &keys.serving_ca,
                    key.public_key(),
                    &request,
                    // issue_serving_certificate backdates it (domain::pki::BACKDATE).
                    clock.now(),
                )
                .map_err(|e| IssueFailure::Fatal(e.to_string()))?;
                Ok(Issued {
                    chain: vec![issued.der, keys.serving_ca.cert_der().to_vec()],
                    key,
                })
            }
            Issuer::Api {
                api,
                serving_ca_der,
                names,
                lifetime,
            } => {
                let seconds = u64::try_from(lifetime.whole_seconds()).unwrap_or(0);
                let chain = api
                    .issue_serving_certificate(
                        key.public_key().spki_der().to_vec(),
                        names.clone(),
                        Duration::from_secs(seconds),
                    )
                    .await
                    .map_err(|s| {
                        let why = format!("{:?}: {}", s.code(), s.message());
                        if s.code() == tonic::Code::Unavailable {
                            IssueFailure::Unavailable(why)
                        } else {
                            IssueFailure::Fatal(why)
                        }
                    })?;
                let certifies_our_key = chain
                    .first()
                    .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
                    .is_some_and(|(_, c)| {
                        c.tbs_certificate.subject_pki.raw == key.public_key().spki_der()
                    });
                if !certifies_our_key || chain.get(1) != Some(serving_ca_der) {
                    return Err(IssueFailure::Fatal(
                        "the chain it answered does not certify this gateway's key under the serving CA"
                            .into(),
                    ));
                }
                Ok(Issued { chain, key })
            }
        }
    }
}

pub use domain::pki::serving_grant::backdate;

/// Why an issue failed: worth retrying (the api is not reachable) or not.
#[derive(Debug)]
pub enum IssueFailure {
    Unavailable(String),
    Fatal(String),
}

impl std::fmt::Display for IssueFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IssueFailure::Unavailable(why) | IssueFailure::Fatal(why) => f.write_str(why),
        }
    }
}

/// The certificate rustls hands out to new handshakes; [`renew`] replaces it.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    pub fn new(issued: &Issued) -> Result<Arc<ServingCert>, TlsSetupError> {
        Ok(Arc::new(ServingCert {
            current: RwLock::new(Arc::new(issued.certified_key()?)),
        }))
    }

    /// Hands `issued` to new handshakes (open sessions keep theirs).
    pub(crate) fn replace_with(&self, issued: &Issued) -> Result<(), TlsSetupError> {
        self.replace(issued)
    }

    fn replace(&self, issued: &Issued) -> Result<(), TlsSetupError> {
        let next = Arc::new(issued.certified_key()?);
        match self.current.write() {
            Ok(mut guard) => *guard = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }

    /// The leaf now handed out (DER).
    pub fn leaf_der(&self) -> Vec<u8> {
        let current = match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        current
            .cert
            .first()
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(guard) => Some(guard.clone()),
            Err(poisoned) => Some(poisoned.into_inner().clone()),
        }
    }
}

/// When to renew a certificate valid from `not_before` to `not_after`: at two thirds of it.
fn renew_at(not_before: OffsetDateTime, not_after: OffsetDateTime) -> OffsetDateTime {
    not_before + (not_after - not_before) * 2 / 3
}

fn until(at: OffsetDateTime, now: OffsetDateTime) -> Duration {
    Duration::try_from(at - now)
        .unwrap_or(Duration::ZERO)
        .max(RENEW_FLOOR)
}

/// Renews `cert` for as long as the gateway runs (the task is aborted at shutdown). `first`
/// is the certificate `cert` was made with.
pub async fn renew(cert: Arc<ServingCert>, issuer: Issuer, first: Issued, clock: Arc<dyn Clock>) {
    let mut validity = match first.validity() {
        Ok(v) => v,
        Err(why) => {
            tracing::error!(%why, "cannot read the serving certificate's validity: it will not be renewed");
            return;
        }
    };
    loop {
        tokio::time::sleep(until(renew_at(validity.0, validity.1), clock.now())).await;
        let mut retry = RETRY_MIN;
        loop {
            let outcome = match issuer.issue().await {
                Ok(issued) => match (issued.validity(), cert.replace(&issued)) {
                    (Ok(v), Ok(())) => Ok((v, issued.serial_hex())),
                    (Err(why), _) => Err(why),
                    (_, Err(e)) => Err(e.to_string()),
                },
                Err(e) => Err(e.to_string()),
            };
            match outcome {
                Ok((v, serial)) => {
                    tracing::info!(%serial, not_after = %v.1, "serving certificate renewed");
                    validity = v;
                    break;
                }
                Err(why) => {
                    let left = validity.1 - clock.now();
                    if left < (validity.1 - validity.0) / 10 {
                        tracing::error!(%why, seconds_left = left.whole_seconds(), "serving certificate renewal failed and the certificate in use expires soon");
                    } else {
                        tracing::warn!(%why, retry_in_s = retry.as_secs(), "serving certificate renewal failed; retrying");
                    }
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_two_thirds_and_never_in_a_tight_loop() {
        let nb = OffsetDateTime::UNIX_EPOCH;
        let na = nb + time::Duration::days(30);
        assert_eq!(renew_at(nb, na), nb + time::Duration::days(20));
        assert_eq!(until(nb, na), RENEW_FLOOR);
        assert_eq!(
            until(nb + time::Duration::seconds(90), nb),
            Duration::from_secs(90)
        );
    }
}
