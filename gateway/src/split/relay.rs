//! The gateway's side of the split: a client of the api's internal `ApiService` over mutual TLS
//! ([`crate::split::internal_tls`]). Join and Renew are relayed (Renew with the leaf the node
//! presented at its handshake), the Welcome trust bundle is fetched signed, and the gateway's
//! agent-facing serving certificate is issued by the api for a key the gateway made.
//! The certificate the client presents is replaced while it runs ([`ApiClient::present`]) when
//! its files change ([`crate::split::internal_files`]); later calls go over a new connection.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use commands::identity::{JOIN_REFUSED, RENEW_REFUSED};
use domain::identity::RENEWALS_PER_HOUR;
use hyper_util::rt::TokioIo;
use proto::internal::api_service_client::ApiServiceClient;
use proto::internal::{
    RelayedBootToken, RelayedRenew, RelayedSiteLease, ServingCertificateRequest, TrustBundleRequest,
};
use proto::{JoinRequest, RenewRequest, SignedJoinResponse, SignedRenewResponse};
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

use crate::renew::wire::{renewals_exhausted, PUSHBACK_HEADER};
use crate::split::internal_tls::relay_client_config;
use crate::trust::bundle::WelcomeTrust;

/// How an unsupported attestor's status message starts (the spec's code); the relay passes on
/// an UNIMPLEMENTED Join from the api only with it, so an api that lacks the method entirely
/// still reads as unavailable.
pub const UNSUPPORTED_PREFIX: &str = "UNSUPPORTED: ";

/// How long a TCP connect plus TLS handshake to the api may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one relayed call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the relay could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(
        "api_internal_url {0:?} is not host:port (for example api.internal:9443 or 10.0.0.5:9443)"
    )]
    BadUrl(String),
    #[error("the internal client certificate or key cannot be used for TLS: {0}")]
    Tls(#[from] crate::edge::tls::TlsSetupError),
}

/// A client of the api's internal endpoint. Clones share one connection; [`ApiClient::present`]
/// moves every clone to a new one that presents another internal certificate.
#[derive(Clone)]
pub struct ApiClient {
    /// The client of the connection in use and the leaf it presents.
    client: Arc<RwLock<(ApiServiceClient<Channel>, Vec<u8>)>>,
    dial: Arc<Dial>,
    url: String,
}

/// How the api is reached: its address, the name its certificate must carry, the anchor.
struct Dial {
    endpoint: Endpoint,
    name: ServerName<'static>,
    addr: String,
    serving_ca_der: Vec<u8>,
}

fn split_host_port(url: &str) -> Option<(String, u16)> {
    let url = url.trim();
    let url = url.strip_prefix("https://").unwrap_or(url);
    let (host, port) = url.rsplit_once(':')?;
    let port = port.trim_end_matches('/').parse::<u16>().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// A lazily connecting channel to the api presenting `chain` (leaf first) and `key_pkcs8`.
fn channel(dial: &Dial, chain: Vec<Vec<u8>>, key_pkcs8: Vec<u8>) -> Result<Channel, RelayError> {
    let config = relay_client_config(&dial.serving_ca_der, chain, key_pkcs8)?;
    let connector = TlsConnector::from(Arc::new(config));
    let (name, addr) = (dial.name.clone(), dial.addr.clone());
    Ok(dial
        .endpoint
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let connector = connector.clone();
            let name = name.clone();
            let dial = addr.clone();
            async move {
                let tcp =
                    tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&dial))
                        .await
                        .map_err(|_| {
                            std::io::Error::other(format!(
                                "connecting to the api at {dial} timed out"
                            ))
                        })??;
                let _ = tcp.set_nodelay(true);
                let tls = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
                    .await
                    .map_err(|_| {
                        std::io::Error::other(format!(
                            "TLS handshake with the api at {dial} timed out"
                        ))
                    })??;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        })))
}

impl ApiClient {
    /// A client for the api at `url` (`host:port`; the api's internal certificate must name
    /// `host`), trusting only internal certificates of the serving CA `serving_ca_der`, and
    /// presenting `chain` (leaf first) with `key_pkcs8`. Connects lazily, on the first call.
    pub fn new(
        url: &str,
        serving_ca_der: &[u8],
        chain: Vec<Vec<u8>>,
        key_pkcs8: Vec<u8>,
    ) -> Result<Self, RelayError> {
        let (host, port) = split_host_port(url).ok_or_else(|| RelayError::BadUrl(url.into()))?;
        let name =
            ServerName::try_from(host.clone()).map_err(|_| RelayError::BadUrl(url.into()))?;
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|_| RelayError::BadUrl(url.into()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .http2_keep_alive_interval(Duration::from_secs(30));
        let dial = Dial {
            endpoint,
            name,
            addr: addr.clone(),
            serving_ca_der: serving_ca_der.to_vec(),
        };
        let leaf = chain.first().cloned().unwrap_or_default();
        let channel = channel(&dial, chain, key_pkcs8)?;
        Ok(ApiClient {
            client: Arc::new(RwLock::new((ApiServiceClient::new(channel), leaf))),
            dial: Arc::new(dial),
            url: addr,
        })
    }

    /// Presents `chain` (leaf first) and `key_pkcs8` from now on, on every clone: later calls go
    /// over a new connection made with them; calls already under way finish on the old one,
    /// which closes once the last of them is done. Nothing changes when the pair cannot be used
    /// for TLS.
    pub fn present(&self, chain: Vec<Vec<u8>>, key_pkcs8: Vec<u8>) -> Result<(), RelayError> {
        let leaf = chain.first().cloned().unwrap_or_default();
        let next = (
            ApiServiceClient::new(channel(&self.dial, chain, key_pkcs8)?),
            leaf,
        );
        match self.client.write() {
            Ok(mut guard) => *guard = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }

    /// The client of the connection now in use.
    fn client(&self) -> ApiServiceClient<Channel> {
        match self.client.read() {
            Ok(guard) => guard.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// The internal client certificate (DER) new calls present.
    pub fn presented_leaf(&self) -> Vec<u8> {
        match self.client.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }

    /// Where the api is.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the node sees of a failed relayed call: refusals stay refusals (with the uniform
    /// message), everything else is UNAVAILABLE or INTERNAL with the detail in the log.
    fn relayed(&self, what: &str, refused: &'static str, s: Status) -> Status {
        match s.code() {
            Code::PermissionDenied => Status::permission_denied(refused),
            Code::Internal => {
                tracing::error!(api = %self.url, error = %s.message(), "{what}: the api failed");
                Status::internal("internal error (see the server log)")
            }
            code => {
                tracing::warn!(api = %self.url, ?code, error = %s.message(), "{what}: the api did not answer");
                Status::unavailable("the control plane's api is unavailable; retry later")
            }
        }
    }

    /// Relays a Join. Besides [`Self::relayed`]'s answers, the api's UNSUPPORTED attestor
    /// (UNIMPLEMENTED, [`crate::node_service::backend::unsupported_attestor`]) reaches the node as
    /// it is, code and message: the api, not the gateway, knows which attestors run.
    pub async fn join(&self, request: JoinRequest) -> Result<SignedJoinResponse, Status> {
        let mut c = self.client();
        c.join(request).await.map(|r| r.into_inner()).map_err(|s| {
            if s.code() == Code::Unimplemented && s.message().starts_with(UNSUPPORTED_PREFIX) {
                Status::unimplemented(s.message().to_owned())
            } else {
                self.relayed("join", JOIN_REFUSED, s)
            }
        })
    }

    /// Relays a Renew. The api's signed answer is passed on unchanged (this gateway cannot
    /// sign one), and so is a RESOURCE_EXHAUSTED over the node's renewal bound, with its
    /// `grpc-retry-pushback-ms`; other failures as [`Self::relayed`] says.
    pub async fn renew(
        &self,
        request: RenewRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<SignedRenewResponse, Status> {
        let mut c = self.client();
        c.renew(RelayedRenew {
            request: Some(request),
            presented_leaf,
        })
        .await
        .map(|r| r.into_inner())
        .map_err(|s| match (s.code(), s.metadata().get(PUSHBACK_HEADER)) {
            (Code::ResourceExhausted, Some(v)) => {
                match v.to_str().ok().and_then(|v| v.parse::<u64>().ok()) {
                    Some(ms) => renewals_exhausted(RENEWALS_PER_HOUR, ms),
                    None => self.relayed("renew", RENEW_REFUSED, s),
                }
            }
            _ => self.relayed("renew", RENEW_REFUSED, s),
        })
    }

    /// What the site agent sees of a failed relayed SiteLease or BootToken: the api's own
    /// answers (PERMISSION_DENIED "site agents only" or the reason its call's proof was
    /// refused, FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT) as they are; anything else as
    /// [`Self::relayed`] says.
    fn relayed_site(&self, what: &str, s: Status) -> Status {
        match s.code() {
            Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::NotFound
            | Code::InvalidArgument => Status::new(s.code(), s.message().to_owned()),
            _ => self.relayed(what, crate::node_service::site_agent::SITE_AGENTS_ONLY, s),
        }
    }

    /// Relays a site agent's SiteLease with the leaf it presented.
    pub async fn site_lease(
        &self,
        request: proto::SiteLeaseRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<proto::SiteLeaseResponse, Status> {
        let mut c = self.client();
        c.site_lease(RelayedSiteLease {
            request: Some(request),
            presented_leaf,
        })
        .await
        .map(|r| r.into_inner())
        .map_err(|s| self.relayed_site("site lease", s))
    }

    /// Relays a site agent's BootToken with the leaf it presented (the answer carries the
    /// token's secret: never logged).
    pub async fn boot_token(
        &self,
        request: proto::BootTokenRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<proto::BootTokenResponse, Status> {
        let mut c = self.client();
        c.boot_token(RelayedBootToken {
            request: Some(request),
            presented_leaf,
        })
        .await
        .map(|r| r.into_inner())
        .map_err(|s| self.relayed_site("boot token", s))
    }

    pub async fn trust(&self) -> Result<WelcomeTrust, Status> {
        let mut c = self.client();
        let t = c.trust_bundle(TrustBundleRequest {}).await?.into_inner();
        Ok(WelcomeTrust {
            version: t.version,
            bundle: t.signed_trust_bundle,
            signature: t.trust_bundle_signature,
        })
    }

    /// The node CA's revocation list, signed by the api now, numbered above `floor` (DER; the
    /// caller checks it: `crate::publish::crl::take`).
    pub async fn revocation_list(
        &self,
        floor: Option<domain::pki::CrlNumber>,
        next_update: time::Duration,
    ) -> Result<Vec<u8>, Status> {
        let mut c = self.client();
        Ok(c.revocation_list(proto::internal::RevocationListRequest {
            floor: floor.map(|f| f.to_be_bytes()).unwrap_or_default(),
            next_update_seconds: next_update.whole_seconds(),
        })
        .await?
        .into_inner()
        .der)
    }

    /// A serving certificate chain (leaf first) for `public_key_spki`, naming `names`.
    pub async fn issue_serving_certificate(
        &self,
        public_key_spki: Vec<u8>,
        names: Vec<String>,
        lifetime: Duration,
    ) -> Result<Vec<Vec<u8>>, Status> {
        let mut c = self.client();
        Ok(c.issue_serving_certificate(ServingCertificateRequest {
            public_key_spki,
            names,
            lifetime_seconds: i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX),
        })
        .await?
        .into_inner()
        .chain)
    }
}
