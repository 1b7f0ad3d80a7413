//! What `bcctl serve` says of itself on `/metrics`, in every role (issue 44, "every role
//! watchable"): the process's start and role and the deployment's CA ends ([`gateway::watch`]),
//! and, where the audit sequencer and sealer run (`all`, `api`), the audit state read from the
//! store every [`READ_EVERY`]. In the `api` role the same readings keep its health listener's
//! status: NOT_SERVING while the store does not answer (a Join or a Renew cannot be answered
//! then either).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use commands::{Clock, SystemClock};
use domain::pki::{KeySet, PublicBundle};
use events::store::EventStore;
use gateway::metrics_http::Page;
use gateway::split::api_watch::ApiHealth;
use gateway::watch::{AuditReading, Watch};
use projections::doctor as read;
use tokio::net::TcpListener;

use crate::serve::error::ServeError;

/// How often the audit state (and, in the `api` role, the store's health) is read.
pub const READ_EVERY: Duration = Duration::from_secs(10);

/// The gauges of a process holding the keys (`all`, `api`).
pub(crate) fn of_keys(role: &'static str, keys: &KeySet) -> Arc<Watch> {
    let mut cas: Vec<(&str, &[u8])> = vec![
        ("root", keys.root_ca.cert_der()),
        ("node", keys.node_ca.cert_der()),
        ("serving", keys.serving_ca.cert_der()),
    ];
    if let Some(operator) = &keys.operator_ca {
        cas.push(("operator", operator.cert_der()));
    }
    Arc::new(Watch::new(role, &cas))
}

/// The gauges of a split gateway (the bundle's public half).
pub(crate) fn of_public(public: &PublicBundle) -> Arc<Watch> {
    let mut cas: Vec<(&str, &[u8])> = vec![
        ("root", &public.root_ca_der),
        ("node", &public.node_ca_der),
        ("serving", &public.serving_ca_der),
    ];
    if let Some(operator) = &public.operator_ca_der {
        cas.push(("operator", operator));
    }
    Arc::new(Watch::new("gateway", &cas))
}

fn age_seconds(now_us: i64, then_us: i64) -> f64 {
    (now_us.saturating_sub(then_us)).max(0) as f64 / 1e6
}

/// One reading of the audit state.
async fn audit_reading(store: &EventStore) -> Result<AuditReading, events::store::StoreError> {
    let now = SystemClock.now_us();
    let lag = read::sequencer_lag(store).await?;
    let unsealed = read::unsealed_tenants(store).await?;
    let last = read::last_seal_us(store).await?;
    Ok(AuditReading {
        sequencer_behind: lag.behind,
        sequencer_lag_seconds: lag.oldest_us.map_or(0.0, |t| age_seconds(now, t)),
        unsealed_leaves: unsealed.iter().map(|t| t.leaves).sum(),
        unsealed_age_seconds: unsealed
            .first()
            .map_or(0.0, |t| age_seconds(now, t.oldest_us)),
        last_seal_unix: last.map(|t| t as f64 / 1e6),
    })
}

/// Reads the audit state now and every [`READ_EVERY`] until `stop` turns true, into `watch`;
/// keeps `health` SERVING while the readings succeed, logging each change.
pub(crate) fn start_readings(
    store: EventStore,
    watch: Arc<Watch>,
    health: Option<ApiHealth>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut serving = true;
        let mut tick = tokio::time::interval(READ_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let ok = match audit_reading(&store).await {
                Ok(reading) => {
                    watch.set_audit(reading);
                    true
                }
                Err(e) => {
                    watch.audit_read_failed();
                    if serving {
                        tracing::warn!(error = %e, "the store does not answer: the audit state is not read, the api's health is NOT_SERVING");
                    }
                    false
                }
            };
            if ok != serving {
                if ok {
                    tracing::info!("the store answers again: the api's health is SERVING");
                }
                serving = ok;
                if let Some(h) = &health {
                    h.set_serving(ok).await;
                }
            }
        }
    });
}

/// Binds `listen` and serves `page` there (`GET`, any path); the address bound.
pub(crate) async fn serve_page(listen: SocketAddr, page: Page) -> Result<SocketAddr, ServeError> {
    let bind_err = |source| gateway::run::StartError::Listen {
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    tokio::spawn(gateway::metrics_http::serve_page(listener, page));
    Ok(addr)
}
