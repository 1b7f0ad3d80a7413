//! Starting a gateway: serving certificate, revocation feed, TLS listener, NodeService and
//! health service, metrics endpoint, the command poller.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use commands::identity::{EdgeRefusals, IdentityConfig, JoinService};
use commands::Clock;
use domain::pki::{KeySet, PublicBundle, ServingRole, TrustDomain};
use events::store::{EventStore, HubOptions, LogHub, LogStore};
use proto::node_service_server::NodeServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::edge::http2::{EdgeServer, ServeError};
use crate::edge::limits::{EdgeCounters, EdgeLimits, LimitsError};
use crate::edge::serving::{serving_request, IssueFailure, Issued, Issuer, ServingCert};
use crate::edge::tls::{node_client_verifier, server_config_resolving, RefusalCounters};
use crate::join::refusal_limits::{JoinRefusalLimiter, JoinRefusalLimits};
use crate::metrics::{serve_metrics, MetricSources, Metrics, API_UP};
use crate::node_commands::dispatch::{Queue, StoreQueue};
use crate::node_service::backend::Backend;
use crate::node_service::server::{NodeServer, TrustReporter};
use crate::publish::crl::CrlSigner;
use crate::revocation::feed::{self, FeedHealth, FeedOptions, FeedTargets};
use crate::revocation::revoked::RevokedSerials;
use crate::session::registry::{SessionEnd, Sessions};
use crate::session::runtime_report::RuntimeReporter;
use crate::split::relay::ApiClient;
use crate::trust::bundle::TrustSigner;

/// The gRPC service name the health service reports on (besides the overall `""`).
pub const SERVICE_NAME: &str = "bc.wire.v1.NodeService";

pub use crate::split::api_probe::API_SERVICE_NAME;

/// How long a shutdown waits for in-flight calls before closing connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How a gateway is set up.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where to listen for agents.
    pub listen: SocketAddr,
    /// Names the serving certificate carries: DNS names and IP addresses.
    pub serving_names: Vec<String>,
    /// Serving certificate lifetime (capped at 90 days and the serving CA).
    pub serving_lifetime: time::Duration,
    /// The revocation feed.
    pub feed: FeedOptions,
    /// Where to serve Prometheus metrics (`None`: not served).
    pub metrics_listen: Option<SocketAddr>,
    /// Record nodes' trust versions (`node.trust.reported`) and the bcd version and boot id
    /// their Hellos report when they change (`node.runtime.reported`).
    pub record_trust_reports: bool,
    /// Message, stream, connection and time limits of the agent-facing endpoint.
    pub limits: EdgeLimits,
    /// How many refused joins a peer address gets before its joins are answered
    /// RESOURCE_EXHAUSTED without reaching the JoinService.
    pub join_refusals: JoinRefusalLimits,
    /// How often the command poller asks which nodes have newly runnable commands (the serve
    /// key `command_poll_interval`; default 250 ms, at least 1 ms).
    pub command_poll_interval: Duration,
    /// The serving certificate from files, reloaded on change (`[tls]`), instead of one this
    /// gateway has issued and renews.
    pub tls_files: Option<crate::edge::tls_files::TlsFiles>,
    /// Split gateways: the files of the internal client certificate the relay presents,
    /// reloaded on change ([`crate::split::internal_files`]). `None`: never reloaded.
    pub internal_files: Option<crate::edge::tls_files::TlsFiles>,
    /// A Postgres streaming replica the revocation feed reads (the log and `node_certs`), made
    /// by `EventStore::replica` of the gateway's store; joins, renewals and the gateway's own
    /// writes stay on the primary. `None`: everything on the gateway's store.
    pub read_store: Option<EventStore>,
    /// The process's log hub, when the caller shares one with other readers of the log (the
    /// admin listener in the same process). `None`: the gateway starts its own, on
    /// `read_store` when set.
    pub hub: Option<LogHub>,
    /// The tenant a split gateway writes the renewals it refused at the handshake in, when the
    /// leaf is no stored certificate (`root_tenant`; in the `all` role the JoinService's).
    pub root_tenant: String,
    /// The SPIFFE bundle endpoint (`[spiffe_bundle]`, [`crate::trust::spiffe_bundle`]);
    /// `None`: not served.
    pub spiffe_bundle: Option<crate::trust::spiffe_bundle::SpiffeBundleEndpoint>,
    /// The node CA's revocation list: its `nextUpdate` and where it is served over HTTP.
    pub crl: crate::publish::crl::CrlOptions,
    /// Workload identity's discovery document and JWK Set (`[oidc] listen`); `None`: not served.
    pub oidc: Option<crate::publish::oidc::OidcPublication>,
    /// The process's own gauges on the metrics page ([`crate::watch`]); `None`: left off.
    pub watch: Option<Arc<crate::watch::Watch>>,
}

impl GatewayConfig {
    pub fn new(listen: SocketAddr) -> Self {
        GatewayConfig {
            listen,
            serving_names: vec!["localhost".into(), "127.0.0.1".into()],
            serving_lifetime: time::Duration::days(30),
            feed: FeedOptions::default(),
            metrics_listen: None,
            record_trust_reports: true,
            limits: EdgeLimits::public(),
            join_refusals: JoinRefusalLimits::default(),
            command_poll_interval: crate::node_commands::dispatch::DEFAULT_POLL_INTERVAL,
            tls_files: None,
            internal_files: None,
            read_store: None,
            hub: None,
            root_tenant: "root".into(),
            spiffe_bundle: None,
            crl: Default::default(),
            oidc: None,
            watch: None,
        }
    }
}

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("serving certificate: {0}")]
    Serving(String),
    #[error(transparent)]
    ServingRequest(#[from] crate::edge::serving::ServingRequestError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::edge::tls::TlsSetupError),
    #[error("cannot listen on {addr}: {source} (is another server using the port?)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Feed(#[from] feed::FeedError),
    #[error(transparent)]
    Publish(#[from] crate::publish::PublishStartError),
    #[error("gateway serving certificate files: {0}")]
    TlsFiles(#[from] crate::edge::tls_files::TlsFileError),
    #[error("configuration {0}")]
    Limits(#[from] LimitsError),
    #[error("the api at {url} did not issue this gateway's serving certificate: {reason} (is `bcctl serve --role api` running there, and is this gateway's internal certificate from `bcctl pki issue-internal` of this deployment?)")]
    Api { url: String, reason: String },
}

/// How long a split gateway waits at start for the api to issue its serving certificate.
pub const API_START_WAIT: Duration = Duration::from_secs(30);

/// A running gateway.
pub struct Running {
    /// The address agents connect to (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// The metrics address, when served.
    pub metrics_addr: Option<SocketAddr>,
    /// The SPIFFE bundle endpoint's address, when served.
    pub spiffe_bundle_addr: Option<SocketAddr>,
    /// The revocation list's HTTP address, when served.
    pub crl_addr: Option<SocketAddr>,
    /// The OIDC discovery listener's address, when served.
    pub oidc_addr: Option<SocketAddr>,
    /// Everything the metrics page reads (for tests and benchmarks).
    pub sources: MetricSources,
    /// What the edge limits closed or refused, by reason.
    pub edge: Arc<EdgeCounters>,
    /// The per-peer limit on refused joins (its counts, for tests and metrics).
    pub join_limiter: Arc<JoinRefusalLimiter>,
    /// What became of the bcd versions and boot ids sessions reported (decision 0105).
    pub runtime_reports: Arc<crate::session::runtime_report::RuntimeCounters>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), ServeError>>,
    background: Vec<JoinHandle<()>>,
    /// Records the renewals refused at the handshake; ends (after writing what it holds) once
    /// the server, which holds the verifier feeding it, is gone.
    edge_refusals: JoinHandle<()>,
}

impl Running {
    /// Stops serving: ends every live session (UNAVAILABLE, so nodes reconnect), sends every
    /// connection GOAWAY, lets in-flight calls finish for up to [`SHUTDOWN_GRACE`], then drops
    /// what is left.
    pub async fn shutdown(mut self) {
        let ended = self.sources.sessions.end_all(SessionEnd::Shutdown);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        for t in &self.background {
            t.abort();
        }
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.server)
            .await
            .is_err()
        {
            tracing::warn!(
                sessions_ended = ended,
                "connections still open after the grace period; closing them"
            );
            self.server.abort();
            let _ = (&mut self.server).await;
        }
        // The verifier is gone with the server: the recorder writes what it holds and ends.
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut self.edge_refusals)
            .await
            .is_err()
        {
            tracing::warn!("renewals refused at the handshake still unrecorded at shutdown");
            self.edge_refusals.abort();
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

/// Starts a gateway in this process over `join` (the `all` role): issues its serving
/// certificate, loads the revocation feed (before accepting anything), then serves. The serving
/// certificate is renewed while it runs ([`crate::edge::serving`]).
pub async fn start(
    store: EventStore,
    keys: Arc<KeySet>,
    join: Arc<JoinService>,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
) -> Result<Running, StartError> {
    start_on(store, keys, join, clock, config, None).await
}

/// [`start`] with the sessions and the poller reaching `queue` instead of the store's command
/// queue (tests that exercise the session's command path on their own queue).
pub async fn start_with_queue(
    store: EventStore,
    keys: Arc<KeySet>,
    join: Arc<JoinService>,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
    queue: Arc<dyn Queue>,
) -> Result<Running, StartError> {
    start_on(store, keys, join, clock, config, Some(queue)).await
}

async fn start_on(
    store: EventStore,
    keys: Arc<KeySet>,
    join: Arc<JoinService>,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
    queue: Option<Arc<dyn Queue>>,
) -> Result<Running, StartError> {
    // Check the names here: a bad one is a configuration error.
    serving_request(&config.serving_names, config.serving_lifetime)?;
    let issuer = Issuer::Local {
        keys: keys.clone(),
        clock: clock.clone(),
        names: config.serving_names.clone(),
        lifetime: config.serving_lifetime,
        role: ServingRole::Gateway,
    };
    let first = issuer
        .issue()
        .await
        .map_err(|e| StartError::Serving(e.to_string()))?;
    let edge = Edge {
        trust_domain: keys.trust_domain.clone(),
        node_ca_der: keys.node_ca.cert_der().to_vec(),
        root_ca_der: keys.root_ca.cert_der().to_vec(),
        issuer,
        first,
        refusals: join.edge_refusals(),
        crl_signer: CrlSigner::Local {
            store: store.clone(),
            keys: keys.clone(),
        },
    };
    let backend = Backend::local(join, TrustSigner::new(store.clone(), keys));
    serve_edge(store, edge, backend, clock, config, queue).await
}

/// Starts a split gateway (the `gateway` role): it holds no signing key, only the public half
/// of the PKI bundle. Its serving certificate is issued by the api for a key made here (and
/// renewed the same way while it runs); Join, Renew and the Welcome trust bundle are relayed
/// to the api over internal mTLS. The store is read for the revocation feed and sessions, and
/// written only with nodes' trust reports and the commands' dispatches and results
/// ([`crate::node_commands::dispatch`]).
pub async fn start_gateway(
    store: EventStore,
    public: &PublicBundle,
    api: ApiClient,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
) -> Result<Running, StartError> {
    // Check the names here: a bad one is a configuration error, not something to retry.
    serving_request(&config.serving_names, config.serving_lifetime)?;
    let issuer = Issuer::Api {
        api: api.clone(),
        serving_ca_der: public.serving_ca_der.clone(),
        names: config.serving_names.clone(),
        lifetime: config.serving_lifetime,
    };
    let deadline = tokio::time::Instant::now() + API_START_WAIT;
    let first = loop {
        match issuer.issue().await {
            Ok(issued) => break issued,
            Err(IssueFailure::Unavailable(why)) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(api = %api.url(), error = %why, "waiting for the api");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                return Err(StartError::Api {
                    url: api.url().to_owned(),
                    reason: e.to_string(),
                })
            }
        }
    };
    let mut identity = IdentityConfig::new(public.trust_domain.clone());
    identity.root_tenant = config.root_tenant.clone();
    let edge = Edge {
        trust_domain: public.trust_domain.clone(),
        node_ca_der: public.node_ca_der.clone(),
        root_ca_der: public.root_ca_der.clone(),
        issuer,
        first,
        refusals: EdgeRefusals::new(store.clone(), clock.clone(), identity),
        crl_signer: CrlSigner::Api(api.clone()),
    };
    serve_edge(store, edge, Backend::relay(api), clock, config, None).await
}

/// The gateway's own log hub: on the read replica when there is one, with the feed's options.
async fn start_hub(store: &EventStore, config: &GatewayConfig) -> Result<LogHub, StartError> {
    let mut options = HubOptions::for_backend(store.backend());
    options.batch = config.feed.batch;
    if let Some(poll) = config.feed.poll_interval {
        options.safety_poll = poll;
    }
    let hub = match &config.read_store {
        Some(replica) => LogHub::start_on_replica(replica.clone(), store.clone(), options).await,
        None => LogHub::start(store.clone(), options).await,
    };
    hub.map_err(|e| StartError::Feed(feed::FeedError::Store(e)))
}

/// What the agent-facing side needs: no CA or signing key, only where its serving certificate
/// comes from and the first one.
struct Edge {
    trust_domain: TrustDomain,
    node_ca_der: Vec<u8>,
    /// The root CA, the SPIFFE bundle's one authority.
    root_ca_der: Vec<u8>,
    issuer: Issuer,
    first: Issued,
    /// Records the renewals refused at the handshake (`security.renew.refused`).
    refusals: EdgeRefusals,
    /// Who signs the node CA's revocation list.
    crl_signer: CrlSigner,
}

/// Fails the node service closed while the revocation feed is behind (NOT_SERVING, logged),
/// and opens it again when the feed catches up, checked every 250 ms.
async fn fail_closed_while_the_feed_lags(health: Arc<FeedHealth>, reporter_h: HealthReporter) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        if let Some(stale) = health.transition() {
            let status = if stale {
                tracing::error!(
                    lag_ms = health.lag().as_millis() as u64,
                    max_lag_ms = health.max_lag().as_millis() as u64,
                    "revocation feed is behind: refusing new node sessions until it catches up"
                );
                ServingStatus::NotServing
            } else {
                tracing::info!("revocation feed caught up: accepting node sessions again");
                ServingStatus::Serving
            };
            reporter_h.set_service_status(SERVICE_NAME, status).await;
            reporter_h.set_service_status("", status).await;
        }
    }
}

async fn serve_edge(
    store: EventStore,
    edge: Edge,
    backend: Backend,
    clock: Arc<dyn Clock>,
    config: GatewayConfig,
    queue: Option<Arc<dyn Queue>>,
) -> Result<Running, StartError> {
    config.limits.validate("limits")?;
    let join_limiter = Arc::new(JoinRefusalLimiter::new(config.join_refusals.clone()));
    let backend = backend.with_join_limiter(join_limiter.clone());
    let edge_counters = Arc::new(EdgeCounters::default());
    let relay = backend.is_relay();
    let revoked = Arc::new(RevokedSerials::new());
    let refusals = Arc::new(RefusalCounters::default());
    let sessions = Sessions::new();
    let metrics = Arc::new(Metrics::default());
    let health = FeedHealth::new(config.feed.max_lag);
    let targets = FeedTargets {
        revoked: revoked.clone(),
        sessions: sessions.clone(),
        health: health.clone(),
        metrics: metrics.clone(),
    };
    let read_store = config.read_store.clone().unwrap_or_else(|| store.clone());
    let hub = match &config.hub {
        Some(hub) => hub.clone(),
        None => start_hub(&store, &config).await?,
    };
    let subscription = feed::load(&read_store, &hub, &targets).await?;
    let mut background = vec![tokio::spawn(feed::run(
        read_store.clone(),
        subscription,
        targets,
    ))];
    let (crl, crl_addr) =
        crate::publish::start(&edge.crl_signer, &edge.node_ca_der, &hub, config.crl)
            .await
            .map_err(|(addr, source)| StartError::Listen { addr, source })?;
    background.extend(crl.tasks);
    let crl = crl.current;

    let (renew_refusals, recorder) = crate::renew::edge_refusals::recorder(
        edge.refusals.clone(),
        metrics.edge_renew_refusals.clone(),
    );
    let edge_refusals = tokio::spawn(recorder);
    let verifier = node_client_verifier(
        &edge.node_ca_der,
        edge.trust_domain.clone(),
        revoked.clone(),
        refusals.clone(),
        Some(renew_refusals),
    )?
    .optional();
    let api_to_probe = match &edge.issuer {
        Issuer::Api { api, .. } => Some(api.clone()),
        Issuer::Local { .. } => None,
    };
    if let (
        Issuer::Api {
            api,
            serving_ca_der,
            ..
        },
        Some(files),
    ) = (&edge.issuer, &config.internal_files)
    {
        background.push(crate::split::internal_files::start(
            api.clone(),
            serving_ca_der.clone(),
            files.clone(),
            clock.clone(),
            metrics.internal_cert.clone(),
        ));
    }
    let serving = match &config.tls_files {
        Some(files) => {
            let first = crate::edge::tls_files::load(files)?;
            let serving = ServingCert::new(&first)?;
            background.push(tokio::spawn(crate::edge::tls_files::watch(
                serving.clone(),
                files.clone(),
            )));
            serving
        }
        None => {
            let serving = ServingCert::new(&edge.first)?;
            background.push(tokio::spawn(crate::edge::serving::renew(
                serving.clone(),
                edge.issuer,
                edge.first,
                clock.clone(),
            )));
            serving
        }
    };
    let spiffe_bundle_addr = crate::trust::spiffe_bundle::start(
        config.spiffe_bundle.as_ref(),
        serving.clone(),
        &read_store,
        &edge.root_ca_der,
        &mut background,
    )
    .await?;
    let oidc_addr = crate::publish::oidc::start(
        config.oidc.as_ref(),
        serving.clone(),
        &read_store,
        &mut background,
    )
    .await?;
    let tls = server_config_resolving(serving, Arc::new(verifier))?;
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

    let sources = MetricSources {
        metrics: metrics.clone(),
        sessions: sessions.clone(),
        handshake_refusals: refusals,
        feed: health.clone(),
        revoked: revoked.clone(),
        watch: config.watch.clone(),
    };
    let metrics_addr = match config.metrics_listen {
        Some(m) => {
            let l = TcpListener::bind(m)
                .await
                .map_err(|source| StartError::Listen { addr: m, source })?;
            let a = l
                .local_addr()
                .map_err(|source| StartError::Listen { addr: m, source })?;
            background.push(tokio::spawn(serve_metrics(l, sources.clone())));
            Some(a)
        }
        None => None,
    };

    let (reporter, runtime) = if config.record_trust_reports {
        (
            TrustReporter::start(store.clone(), clock.clone()),
            RuntimeReporter::start(store.clone(), clock.clone()),
        )
    } else {
        (TrustReporter::disabled(), RuntimeReporter::disabled())
    };
    // One command poller per process: it wakes the live sessions of nodes with newly runnable
    // commands.
    let queue: Arc<dyn Queue> = match queue {
        Some(q) => q,
        None => Arc::new(StoreQueue {
            store: store.clone(),
            clock: clock.clone(),
        }),
    };
    background.push(tokio::spawn(crate::node_commands::dispatch::poll_ready(
        store.clone(),
        queue.clone(),
        sessions.clone(),
        config.command_poll_interval,
        metrics.commands.clone(),
        Some(hub.subscribe()),
    )));
    let api_metrics = metrics.clone();
    let runtime_reports = runtime.counters.clone();
    let node_server = NodeServer {
        backend: Arc::new(backend),
        store: store.clone(),
        trust_domain: edge.trust_domain.clone(),
        sessions,
        revoked,
        feed: health.clone(),
        metrics,
        reporter,
        runtime,
        queue,
        clock,
        crl,
    };

    let (reporter_h, health_service) = tonic_health::server::health_reporter();
    reporter_h
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    reporter_h
        .set_service_status("", ServingStatus::Serving)
        .await;
    // A split gateway probes the api: Join and Renew need it, node sessions do not. Its own
    // health service name turns NOT_SERVING while the api does not answer; the gateway's
    // other statuses stay as the feed sets them.
    if let Some(api) = api_to_probe {
        reporter_h
            .set_service_status(API_SERVICE_NAME, ServingStatus::Serving)
            .await;
        api_metrics
            .api_state
            .store(API_UP, std::sync::atomic::Ordering::Relaxed);
        background.push(tokio::spawn(crate::split::api_probe::probe_api(
            api,
            reporter_h.clone(),
            api_metrics.clone(),
        )));
    }
    background.push(tokio::spawn(fail_closed_while_the_feed_lags(
        health,
        reporter_h.clone(),
    )));

    // Every service decodes and encodes at most the message limit; the connections are ours
    // (crate::edge::http2), so the stream, connection and time limits hold too.
    let max = config.limits.max_message_bytes;
    let routes = tonic::service::Routes::new(
        health_service
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
    )
    .add_service(
        NodeServiceServer::new(node_server.clone())
            .max_decoding_message_size(max)
            // Room for the revocation list pushed over sessions.
            .max_encoding_message_size(max.max(crate::publish::crl::MAX_PUSH_BYTES + 64)),
    )
    .prepare();
    let edge_server = EdgeServer {
        routes,
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        trust_domain: edge.trust_domain.clone(),
        limits: config.limits.clone(),
        counters: edge_counters.clone(),
        session_wire: Some(node_server),
    };
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(crate::edge::http2::serve(listener, edge_server, async {
        let _ = shutdown_rx.await;
    }));
    tracing::info!(%addr, metrics = ?metrics_addr, spiffe_bundle = ?spiffe_bundle_addr, oidc = ?oidc_addr, trust_domain = %edge.trust_domain, relay, "gateway serving");
    Ok(Running {
        addr,
        metrics_addr,
        spiffe_bundle_addr,
        crl_addr,
        oidc_addr,
        sources,
        edge: edge_counters,
        join_limiter,
        runtime_reports,
        shutdown: Some(shutdown_tx),
        server,
        background,
        edge_refusals,
    })
}
