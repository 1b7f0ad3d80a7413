//! The api process's internal endpoint (`bcctl serve --role api`): `bc.internal.v1.ApiService`
//! over mutual TLS for split gateways. It answers Join and Renew with the JoinService (the only
//! place that signs), the signed Welcome trust bundle, and serving certificates for gateways'
//! own keys: only for the names the gateway's internal certificate lists, at most 7 days, each
//! recorded as a `gateway.serving.issued` event before it is answered
//! ([`commands::serving`]). Only a client certificate from `bcctl pki issue-internal` (serving CA,
//! `OU=bc-role:gateway`, clientAuth) gets past the handshake ([`crate::split::internal_tls`]).

use std::net::SocketAddr;
use std::sync::Arc;

use commands::crl::CrlSignError;
use commands::identity::{JoinService, RENEW_REFUSED};
use commands::serving::{issue_gateway_serving, ServingAsk, ServingError};
use commands::Clock;
use domain::pki::{CrlError, CrlNumber, KeySet, PublicKey, ServingRefusal, ServingRole};
use events::store::EventStore;
use proto::internal::api_service_server::{ApiService, ApiServiceServer};
use proto::internal::{
    RelayedRenew, ServingCertificate, ServingCertificateRequest, TrustBundleRequest, WelcomeTrust,
};
use proto::{JoinRequest, SignedJoinResponse, SignedRenewResponse};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic::{Request, Response, Status};

use crate::edge::conn::PeerInfo;
use crate::edge::http2::{EdgeServer, ServeError};
use crate::edge::serving::{serving_request, Issuer, ServingCert};
use crate::metrics::Metrics;
use crate::node_service::backend::Backend;
use crate::node_service::outcomes::{count_join, count_renew};
use crate::run::{StartError, SHUTDOWN_GRACE};
use crate::split::api_watch::{start_health, RunningHealth};
use crate::split::internal_tls::api_server_config;
use crate::trust::bundle::TrustSigner;

/// How the internal endpoint is set up.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Where gateways connect.
    pub listen: SocketAddr,
    /// Names the internal certificate carries (gateways dial one of them).
    pub names: Vec<String>,
    /// Lifetime of the internal certificate (issued at every start; capped at 90 days).
    pub certificate_lifetime: time::Duration,
    /// Message, stream, connection and time limits of the internal endpoint.
    pub limits: crate::edge::limits::EdgeLimits,
    /// Where `grpc.health.v1.Health` alone is served without a client certificate
    /// ([`crate::split::api_watch::start_health`]); `None`: not served.
    pub health_listen: Option<SocketAddr>,
}

/// A running internal endpoint.
pub struct RunningApi {
    /// The address gateways connect to (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// The Joins and Renews answered here, for the metrics page
    /// ([`crate::split::api_watch::page`]).
    pub metrics: Arc<Metrics>,
    /// The health listener, when one runs.
    pub health: Option<RunningHealth>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), ServeError>>,
    /// Renews the endpoint's own certificate.
    renewer: JoinHandle<()>,
}

impl RunningApi {
    /// Stops serving, letting in-flight calls finish for up to the shutdown grace.
    pub async fn shutdown(mut self) {
        self.renewer.abort();
        if let Some(health) = self.health.take() {
            health.shutdown().await;
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
    }

    /// Waits until the server stops on its own (an error) and returns its result.
    pub async fn wait(&mut self) -> Result<(), String> {
        match (&mut self.server).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

struct ApiServer {
    backend: Backend,
    store: EventStore,
    keys: Arc<KeySet>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
}

fn peer<T>(request: &Request<T>) -> String {
    request
        .extensions()
        .get::<PeerInfo>()
        .map(|p| p.remote.to_string())
        .unwrap_or_default()
}

#[tonic::async_trait]
impl ApiService for ApiServer {
    async fn join(
        &self,
        request: Request<JoinRequest>,
    ) -> Result<Response<SignedJoinResponse>, Status> {
        let request = request.into_inner();
        let attestor = request.attestor.clone();
        let started = std::time::Instant::now();
        let answer = self.backend.join(request).await;
        count_join(&self.metrics, &attestor, started, &answer);
        answer.map(Response::new)
    }

    async fn renew(
        &self,
        request: Request<RelayedRenew>,
    ) -> Result<Response<SignedRenewResponse>, Status> {
        let from = peer(&request);
        let relayed = request.into_inner();
        let Some(renew) = relayed.request else {
            tracing::warn!(gateway = %from, "relayed renew without a request");
            return Err(Status::permission_denied(RENEW_REFUSED));
        };
        // The JoinService checks the presented leaf against node_certs byte for byte and the proof
        // of possession by its key, and signs the answer here
        // (crate::node_service::backend::local_renew): the gateway passes it on unchanged and
        // cannot forge one.
        let answer = self.backend.renew(renew, relayed.presented_leaf).await;
        count_renew(&self.metrics, &answer);
        answer.map(Response::new)
    }

    async fn trust_bundle(
        &self,
        _request: Request<TrustBundleRequest>,
    ) -> Result<Response<WelcomeTrust>, Status> {
        let t = self.backend.trust().await.map_err(|e| {
            tracing::error!(error = %e, "the Welcome trust bundle");
            Status::unavailable("the trust bundle cannot be read now; retry later")
        })?;
        Ok(Response::new(WelcomeTrust {
            version: t.version,
            signed_trust_bundle: t.bundle,
            trust_bundle_signature: t.signature,
        }))
    }

    async fn issue_serving_certificate(
        &self,
        request: Request<ServingCertificateRequest>,
    ) -> Result<Response<ServingCertificate>, Status> {
        let from = peer(&request);
        let leaf = request
            .extensions()
            .get::<PeerInfo>()
            .and_then(|p| p.client_leaf.clone())
            .ok_or_else(|| {
                Status::unauthenticated(
                    "this call needs the gateway's internal client certificate (bcctl pki issue-internal)",
                )
            })?;
        let r = request.into_inner();
        let key = PublicKey::from_spki_der(&r.public_key_spki).map_err(|e| {
            Status::invalid_argument(format!("public_key_spki is not a P-256 key: {e}"))
        })?;
        let lifetime = time::Duration::seconds(r.lifetime_seconds);
        let ask = ServingAsk {
            internal_leaf_der: &leaf,
            public_key: &key,
            names: &r.names,
            lifetime,
        };
        let issued = match issue_gateway_serving(
            &self.store,
            &self.keys.serving_ca,
            self.clock.as_ref(),
            &ask,
        )
        .await
        {
            Ok(issued) => issued,
            Err(e) => return Err(serving_status(&from, &r.names, e)),
        };
        let c = &issued.certificate;
        tracing::info!(gateway = %issued.gateway_name, peer = %from, names = ?issued.names, serial = %c.serial.to_hex(), not_after = %c.not_after, "issued a gateway serving certificate (gateway.serving.issued)");
        Ok(Response::new(ServingCertificate {
            chain: vec![c.der.clone(), self.keys.serving_ca.cert_der().to_vec()],
        }))
    }

    async fn revocation_list(
        &self,
        request: Request<proto::internal::RevocationListRequest>,
    ) -> Result<Response<proto::RevocationList>, Status> {
        let r = request.into_inner();
        let floor = if r.floor.is_empty() {
            None
        } else {
            Some(CrlNumber::from_be_bytes(&r.floor).ok_or_else(|| {
                Status::invalid_argument("floor: a CRL number is at most 16 octets")
            })?)
        };
        let interval = time::Duration::seconds(r.next_update_seconds);
        let now = self.clock.now();
        match commands::crl::sign_current(&self.store, &self.keys.node_ca, floor, interval, now)
            .await
        {
            Ok(current) => Ok(Response::new(proto::RevocationList {
                der: current.signed.der,
            })),
            Err(CrlSignError::Sign(e @ CrlError::BadInterval(_))) => Err(Status::invalid_argument(
                format!("next_update_seconds: {e}"),
            )),
            Err(e) => {
                tracing::error!(error = %e, "signing the node CA revocation list");
                Err(Status::unavailable(format!(
                    "the revocation list cannot be signed now: {e}"
                )))
            }
        }
    }

    async fn site_lease(
        &self,
        request: Request<proto::internal::RelayedSiteLease>,
    ) -> Result<Response<proto::SiteLeaseResponse>, Status> {
        let from = peer(&request);
        let relayed = request.into_inner();
        let Some(lease) = relayed.request else {
            tracing::warn!(gateway = %from, "relayed site lease without a request");
            return Err(Status::invalid_argument(
                "a relayed SiteLease needs its request",
            ));
        };
        // The SiteAgent checks the presented leaf against node_certs byte for byte.
        self.backend
            .site_lease(lease, relayed.presented_leaf)
            .await
            .map(Response::new)
    }

    async fn boot_token(
        &self,
        request: Request<proto::internal::RelayedBootToken>,
    ) -> Result<Response<proto::BootTokenResponse>, Status> {
        let from = peer(&request);
        let relayed = request.into_inner();
        let Some(boot) = relayed.request else {
            tracing::warn!(gateway = %from, "relayed boot token without a request");
            return Err(Status::invalid_argument(
                "a relayed BootToken needs its request",
            ));
        };
        self.backend
            .boot_token(boot, relayed.presented_leaf)
            .await
            .map(Response::new)
    }
}

/// The answer to a refused or failed serving certificate request; the reason is logged here.
fn serving_status(from: &str, names: &[String], e: ServingError) -> Status {
    match &e {
        ServingError::Refused(ServingRefusal::NotGranted { .. }) => {
            tracing::warn!(peer = %from, ?names, refusal = %e, "gateway serving certificate refused");
            Status::permission_denied(e.to_string())
        }
        ServingError::Refused(_) | ServingError::Issue(_) => {
            tracing::warn!(peer = %from, ?names, error = %e, "gateway serving certificate request invalid");
            Status::invalid_argument(e.to_string())
        }
        ServingError::Grant(_) => {
            tracing::warn!(peer = %from, error = %e, "gateway serving certificate refused");
            Status::permission_denied(e.to_string())
        }
        ServingError::Serial(_) | ServingError::Run(_) => {
            tracing::error!(peer = %from, error = %e, "gateway serving certificate not issued");
            Status::unavailable(
                "the serving certificate could not be recorded now; nothing was issued: retry",
            )
        }
    }
}

/// Starts the internal endpoint: issues its own certificate from the serving CA
/// (`OU=bc-role:internal`, a fresh key), then serves gateways.
pub async fn start_api(
    store: EventStore,
    keys: Arc<KeySet>,
    join: Arc<JoinService>,
    clock: Arc<dyn Clock>,
    config: ApiConfig,
) -> Result<RunningApi, StartError> {
    // The health listener is checked with the serving CA and the address dialled: the internal
    // certificate names its IP address too (when it names one; `0.0.0.0` does not).
    let mut names = config.names.clone();
    if let Some(ip) = config
        .health_listen
        .map(|h| h.ip())
        .filter(|ip| !ip.is_unspecified())
    {
        if !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
    }
    serving_request(&names, config.certificate_lifetime)?;
    config.limits.validate("api_limits")?;
    let issuer = Issuer::Local {
        keys: keys.clone(),
        clock: clock.clone(),
        names,
        lifetime: config.certificate_lifetime,
        role: ServingRole::Internal,
    };
    let first = issuer
        .issue()
        .await
        .map_err(|e| StartError::Serving(e.to_string()))?;
    let certificate = ServingCert::new(&first)?;
    let tls = api_server_config(certificate.clone(), keys.serving_ca.cert_der())?;
    let health = match config.health_listen {
        Some(listen) => Some(
            start_health(
                listen,
                certificate.clone(),
                keys.trust_domain.clone(),
                config.limits.clone(),
            )
            .await?,
        ),
        None => None,
    };
    let renewer = tokio::spawn(crate::edge::serving::renew(
        certificate,
        issuer,
        first,
        clock.clone(),
    ));
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: config.listen,
        source,
    })?;
    let metrics = Arc::new(Metrics::default());
    let server = ApiServer {
        backend: Backend::local(join, TrustSigner::new(store.clone(), keys.clone())),
        store,
        keys: keys.clone(),
        clock,
        metrics: metrics.clone(),
    };
    let max = config.limits.max_message_bytes;
    let edge_server = EdgeServer {
        routes: tonic::service::Routes::new(
            ApiServiceServer::new(server)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .prepare(),
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        trust_domain: keys.trust_domain.clone(),
        limits: config.limits.clone(),
        counters: Arc::default(),
        session_wire: None,
    };
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(crate::edge::http2::serve(listener, edge_server, async {
        let _ = shutdown_rx.await;
    }));
    tracing::info!(%addr, names = ?config.names, "api internal endpoint serving (mTLS, gateways only)");
    Ok(RunningApi {
        addr,
        metrics,
        health,
        shutdown: Some(shutdown_tx),
        server,
        renewer,
    })
}
