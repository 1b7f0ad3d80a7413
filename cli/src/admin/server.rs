//! The admin listener: `bc.admin.v1.AdminService` over mTLS on its own port, inside
//! `bcctl serve` (roles `all` and `api`) and `bcctl up`.
//!
//! It reuses the node edge's HTTP/2 serving (`gateway::edge::http2`: connection caps at accept, the
//! handshake timeout, stream and message limits, idle and age GOAWAY) with the admin's own
//! limits, and the gateway's serving certificate machinery (a serving-CA certificate for the
//! listener's names, renewed at two thirds of its life). Client certificates: the operator CA
//! only, revoked serials refused at the handshake ([`super::tls`]); the revoked set is read
//! again whenever the process's log hub hands out an `operator.cert.revoked` event, and every
//! [`REVOKED_REFRESH`] besides (every second when there is no hub) ([`refresh_revoked`]). A call then takes one of
//! `max_concurrent_calls` slots (none free: RESOURCE_EXHAUSTED), runs ([`super::run`]) and is
//! stopped at `call_timeout` (DEADLINE_EXCEEDED).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use commands::Clock;
use domain::pki::{KeySet, ServingRole, TrustDomain};
use events::store::{EventStore, HubReceiver, LogHub};
use gateway::conn::PeerInfo;
use gateway::http2::EdgeServer;
use gateway::limits::EdgeLimits;
use gateway::serving::{Issuer, ServingCert};
use proto::admin::admin_service_server::{AdminService, AdminServiceServer};
use proto::admin::{RunReply, RunRequest, WhoAmIReply, WhoAmIRequest};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic::{Request, Response, Status};

use super::counters::AdminCounters;
use super::run::{CallContext, Caller};
pub use super::start_error::AdminStartError;
use super::tls::{admin_server_config, operator_client_verifier, RevokedOperators};
use crate::deployment::Located;
use crate::serve::config::admin::AdminSettings;

/// How often the revoked operator serials are read from the log besides when the hub hands out
/// a revocation (a safety net), and how often without a hub.
pub const REVOKED_REFRESH: Duration = Duration::from_secs(60);
pub const REVOKED_REFRESH_WITHOUT_HUB: Duration = Duration::from_secs(1);

/// A running admin listener.
pub struct RunningAdmin {
    /// Where operators connect (the real port when 0 was asked for).
    pub addr: SocketAddr,
    pub counters: Arc<AdminCounters>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), gateway::http2::ServeError>>,
    background: Vec<JoinHandle<()>>,
}

impl RunningAdmin {
    /// Stops accepting, lets calls in flight finish for a little while, stops the refresher.
    pub async fn shutdown(mut self) {
        for task in &self.background {
            task.abort();
        }
        tracing::info!(
            denied_total = self.counters.denied_total(),
            counters = %self.counters.render(),
            "admin listener stopping"
        );
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if tokio::time::timeout(Duration::from_secs(5), &mut self.server)
            .await
            .is_err()
        {
            self.server.abort();
        }
    }
}

struct Admin {
    ctx: CallContext,
    trust_domain: TrustDomain,
    /// Also checked at every call: a connection opened before a revocation ends at its next call.
    revoked: Arc<RevokedOperators>,
    slots: Arc<Semaphore>,
    max_concurrent_calls: usize,
    call_timeout: Duration,
}

impl Admin {
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let leaf = request
            .extensions()
            .get::<PeerInfo>()
            .and_then(|p| p.client_leaf.clone())
            .ok_or_else(|| {
                Status::unauthenticated(
                    "the admin API needs an operator certificate (bcctl pki issue-operator)",
                )
            })?;
        let caller = super::identity::caller_of(&leaf, &self.trust_domain).map_err(|why| {
            tracing::warn!(%why, "admin client certificate names no operator");
            Status::unauthenticated(format!("the client certificate names no operator: {why}"))
        })?;
        if self.revoked.contains(&caller.serial) {
            self.ctx
                .counters
                .revoked_handshakes
                .fetch_add(1, Ordering::Relaxed);
            return Err(Status::unauthenticated(format!(
                "the operator certificate of {} is revoked (serial {})",
                caller.spiffe_id,
                hex::encode(&caller.serial)
            )));
        }
        Ok(caller)
    }
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn run(&self, request: Request<RunRequest>) -> Result<Response<RunReply>, Status> {
        let caller = self.caller(&request)?;
        let Ok(_slot) = self.slots.clone().try_acquire_owned() else {
            self.ctx.counters.busy.fetch_add(1, Ordering::Relaxed);
            return Err(Status::resource_exhausted(format!(
                "the admin listener is running its max_concurrent_calls ({}) calls: retry shortly",
                self.max_concurrent_calls
            )));
        };
        let call = super::run::run(&self.ctx, &caller, request.into_inner());
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(reply) => reply.map(Response::new),
            Err(_) => {
                self.ctx.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(caller = %caller.spiffe_id, timeout_ms = self.call_timeout.as_millis() as u64, "admin call stopped at the call timeout");
                Err(Status::deadline_exceeded(format!(
                    "the call ran longer than the admin listener's call_timeout ({} ms) and was stopped; what it committed before stays",
                    self.call_timeout.as_millis()
                )))
            }
        }
    }

    async fn who_am_i(
        &self,
        request: Request<WhoAmIRequest>,
    ) -> Result<Response<WhoAmIReply>, Status> {
        let caller = self.caller(&request)?;
        Ok(Response::new(WhoAmIReply {
            spiffe_id: caller.spiffe_id,
            role: caller.role.as_str().to_string(),
            verbs: super::roles::verbs_for(caller.role)
                .into_iter()
                .map(str::to_string)
                .collect(),
        }))
    }
}

/// Reads the revoked operator serials into `revoked`.
async fn load_revoked(store: &EventStore, revoked: &RevokedOperators) -> Result<(), String> {
    let serials = commands::operators::revoked_serials(store)
        .await
        .map_err(|e| e.to_string())?;
    revoked.replace(serials);
    Ok(())
}

/// Keeps `revoked` in step with the log: read again when `hub` hands out an operator
/// certificate's revocation (or lost batches that may have held one), and every
/// [`REVOKED_REFRESH`] ([`REVOKED_REFRESH_WITHOUT_HUB`] without a hub). A failed read keeps
/// the last set and is logged.
pub async fn refresh_revoked(
    store: EventStore,
    revoked: Arc<RevokedOperators>,
    mut hub: Option<HubReceiver>,
) {
    let every = if hub.is_some() {
        REVOKED_REFRESH
    } else {
        REVOKED_REFRESH_WITHOUT_HUB
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            alive = operator_revocation(&mut hub) => if !alive { hub = None; continue },
        }
        if let Err(why) = load_revoked(&store, &revoked).await {
            tracing::warn!(%why, "the revoked operator certificates could not be read; the last set is kept");
        }
    }
}

/// Waits for a hub batch holding `operator.cert.revoked` (or lost batches); `false` once the hub
/// is gone; never resolves without one.
async fn operator_revocation(hub: &mut Option<HubReceiver>) -> bool {
    match hub {
        Some(hub) => hub.wait_for_any(&["operator.cert.revoked"]).await,
        None => std::future::pending().await,
    }
}

/// The node edge's limits, as the admin listener uses them.
fn edge_limits(settings: &AdminSettings) -> EdgeLimits {
    EdgeLimits {
        max_message_bytes: settings.max_request_bytes,
        max_streams_per_connection: u32::try_from(settings.max_concurrent_calls)
            .unwrap_or(u32::MAX)
            .clamp(4, 64),
        max_connections: settings.max_connections,
        max_connections_per_peer: settings.max_connections_per_peer,
        handshake_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(300),
        max_connection_age: Duration::from_secs(3600),
        connection_age_grace: settings.call_timeout,
    }
}

/// Starts the admin listener of the deployment `located` (its keys and store already open),
/// admitting client certificates of `operator_ca` (DER).
#[allow(clippy::too_many_arguments)] // each is one thing the listener is made of; grouping them would only rename them
pub async fn start_admin(
    settings: &AdminSettings,
    keys: Arc<KeySet>,
    operator_ca: Vec<u8>,
    store: EventStore,
    clock: Arc<dyn Clock>,
    located: Located,
    serving_lifetime: time::Duration,
    hub: Option<&LogHub>,
) -> Result<RunningAdmin, AdminStartError> {
    // Subscribed before the first load below, so no revocation falls between the two.
    let revocations = hub.map(LogHub::subscribe);
    let issuer = Issuer::Local {
        keys: keys.clone(),
        clock: clock.clone(),
        names: settings.names.clone(),
        lifetime: serving_lifetime,
        role: ServingRole::Gateway,
    };
    let first = issuer
        .issue()
        .await
        .map_err(|e| AdminStartError::Serving(e.to_string()))?;
    let serving = ServingCert::new(&first)?;
    let counters = Arc::new(AdminCounters::default());
    let revoked = Arc::new(RevokedOperators::default());
    load_revoked(&store, &revoked)
        .await
        .map_err(AdminStartError::Revoked)?;
    let verifier = operator_client_verifier(&operator_ca, revoked.clone(), counters.clone())?;
    let tls = admin_server_config(serving.clone(), verifier)?;
    let listener =
        TcpListener::bind(settings.listen)
            .await
            .map_err(|source| AdminStartError::Listen {
                addr: settings.listen,
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| AdminStartError::Listen {
            addr: settings.listen,
            source,
        })?;
    let background = vec![
        tokio::spawn(gateway::serving::renew(serving, issuer, first, clock)),
        tokio::spawn(refresh_revoked(store.clone(), revoked.clone(), revocations)),
    ];
    let admin = Admin {
        ctx: CallContext {
            located,
            store,
            counters: counters.clone(),
            max_reply_bytes: settings.max_reply_bytes,
        },
        trust_domain: keys.trust_domain.clone(),
        revoked,
        slots: Arc::new(Semaphore::new(settings.max_concurrent_calls)),
        max_concurrent_calls: settings.max_concurrent_calls,
        call_timeout: settings.call_timeout,
    };
    let edge = EdgeServer {
        routes: tonic::service::Routes::new(
            AdminServiceServer::new(admin)
                .max_decoding_message_size(settings.max_request_bytes)
                // The reply's own check (run.rs) names the limit; leave room for the envelope.
                .max_encoding_message_size(settings.max_reply_bytes.saturating_add(64 * 1024)),
        )
        .prepare(),
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        trust_domain: keys.trust_domain.clone(),
        limits: edge_limits(settings),
        counters: Arc::default(),
        session_wire: None,
    };
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(gateway::http2::serve(listener, edge, async {
        let _ = shutdown_rx.await;
    }));
    tracing::info!(%addr, names = ?settings.names, "admin API listening (mTLS, operator certificates)");
    Ok(RunningAdmin {
        addr,
        counters,
        shutdown: Some(shutdown_tx),
        server,
        background,
    })
}

/// The admin listener `settings` asks for (none without `[admin]`), for the deployment it
/// names; `dir`: the deployment directory, when one is (`bcctl up`).
pub async fn start_for(
    settings: &crate::serve::config::Settings,
    keys: &Arc<KeySet>,
    store: &EventStore,
    clock: &Arc<dyn Clock>,
    dir: Option<std::path::PathBuf>,
    hub: Option<&LogHub>,
) -> Result<Option<RunningAdmin>, AdminStartError> {
    let Some(admin) = &settings.admin else {
        return Ok(None);
    };
    let located = Located {
        store_url: Some(settings.database_url.clone()),
        deployment: crate::deployment::Deployment::new(&settings.pki_bundle)
            .with_secret_file(settings.deployment_secret_file.clone()),
        config: settings.config_file.clone().or_else(|| {
            dir.as_ref()
                .map(|d| d.join(crate::deployment::DIR_CONFIG_FILE))
                .filter(|f| f.is_file())
        }),
        dir,
    };
    let lifetime = time::Duration::try_from(settings.serving_lifetime)
        .map_err(|e| AdminStartError::Serving(format!("serving_lifetime: {e}")))?;
    let operator_ca = keys
        .operator_ca
        .as_ref()
        .ok_or(AdminStartError::NoOperatorCa)?
        .cert_der()
        .to_vec();
    start_admin(
        admin,
        keys.clone(),
        operator_ca,
        store.clone(),
        clock.clone(),
        located,
        lifetime,
        hub,
    )
    .await
    .map(Some)
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
