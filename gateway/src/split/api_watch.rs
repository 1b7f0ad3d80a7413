//! Watching the api process (`bcctl serve --role api`): its `/metrics` page and its health
//! listener (issue 44, "every role watchable").
//!
//! - [`page`]: the Joins and Renews this api answered (by outcome, verifications by attestor
//!   and outcome, never by reason: docs/SECURITY.md, "No refusal reason is readable on
//!   /metrics"), then the process's own gauges ([`crate::watch`]: start, CA ends, audit state).
//!   Served by the same responder as the gateway's ([`crate::metrics_http`]).
//! - [`start_health`]: `grpc.health.v1.Health` alone, over TLS with the api's internal
//!   certificate (from the serving CA, renewed with it) and no client certificate asked, on a
//!   listener of its own (`api_health_listen`). The internal endpoint itself keeps refusing
//!   every peer but a gateway's internal certificate: no route of the ApiService is reachable
//!   here. `bcctl healthcheck` trusts the serving CA, so it checks this listener as it checks a
//!   gateway. Statuses: `""` and [`API_SERVICE_NAME`], SERVING while the store answers
//!   ([`ApiHealth::set_serving`], kept by `bcctl serve` from its readings of the store).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::edge::http2::EdgeServer;
use crate::edge::limits::EdgeLimits;
use crate::edge::tls::{provider, without_resumption, TlsSetupError};
use crate::metrics::Metrics;
use crate::metrics_http::{family, labeled, Page};
use crate::run::StartError;
use crate::split::api_probe::API_SERVICE_NAME;
use crate::watch::Watch;

/// The api's page: its Joins and Renews, then `watch`.
pub fn page(metrics: Arc<Metrics>, watch: Arc<Watch>) -> Page {
    Arc::new(move || {
        let mut out = String::new();
        family(
            &mut out,
            "bc_join_requests_total",
            "Join calls answered by this api (relayed by gateways), by outcome.",
            "counter",
        );
        labeled(
            &mut out,
            "bc_join_requests_total",
            "outcome",
            &metrics.join_requests.snapshot(),
        );
        metrics.verifications.render(&mut out);
        family(
            &mut out,
            "bc_renewals_total",
            "Renew calls answered by this api (relayed by gateways), by outcome.",
            "counter",
        );
        labeled(
            &mut out,
            "bc_renewals_total",
            "outcome",
            &metrics.renewals.snapshot(),
        );
        watch.render(&mut out);
        out
    })
}

/// The health statuses of a running api.
#[derive(Clone)]
pub struct ApiHealth {
    reporter: HealthReporter,
}

impl ApiHealth {
    /// SERVING (the store answers) or NOT_SERVING, for `""` and [`API_SERVICE_NAME`].
    pub async fn set_serving(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in ["", API_SERVICE_NAME] {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

/// A running health listener.
pub struct RunningHealth {
    pub addr: SocketAddr,
    pub health: ApiHealth,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), crate::edge::http2::ServeError>>,
}

impl RunningHealth {
    /// Stops the listener.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(crate::run::SHUTDOWN_GRACE, &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
    }
}

/// TLS 1.3, ALPN h2, `resolver`'s certificate, no client certificate asked.
fn health_server_config(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
) -> Result<rustls::ServerConfig, TlsSetupError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec()];
    without_resumption(&mut config);
    Ok(config)
}

/// Binds `listen` and serves the health service alone there (SERVING until told otherwise),
/// with `limits` (the internal endpoint's).
pub async fn start_health(
    listen: SocketAddr,
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
    trust_domain: domain::pki::TrustDomain,
    limits: EdgeLimits,
) -> Result<RunningHealth, StartError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: listen,
        source,
    })?;
    let (reporter, service) = tonic_health::server::health_reporter();
    let health = ApiHealth { reporter };
    health.set_serving(true).await;
    let edge_server = EdgeServer {
        routes: tonic::service::Routes::new(service).prepare(),
        acceptor: TlsAcceptor::from(Arc::new(health_server_config(resolver)?)),
        trust_domain,
        limits,
        counters: Arc::default(),
        session_wire: None,
    };
    let (tx, rx) = oneshot::channel::<()>();
    let server = tokio::spawn(crate::edge::http2::serve(listener, edge_server, async {
        let _ = rx.await;
    }));
    tracing::info!(%addr, "api health listener serving (grpc.health.v1.Health only, TLS, no client certificate)");
    Ok(RunningHealth {
        addr,
        health,
        shutdown: Some(tx),
        server,
    })
}
