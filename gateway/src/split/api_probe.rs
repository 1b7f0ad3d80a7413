//! A split gateway's watch on the api: a cheap call every few seconds, the health status of
//! [`API_SERVICE_NAME`] and `bc_api_up` kept in step with its answers, each change logged. It
//! only observes: it must never retry or hold back a node's call (Join and Renew fail on their
//! own while the api is away; sessions go on).

use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;

use crate::metrics::{Metrics, API_DOWN, API_UP};
use crate::split::relay::ApiClient;

/// The health service name a split gateway reports the api's reachability under.
pub const API_SERVICE_NAME: &str = "bc.internal.v1.ApiService";

/// How often a split gateway probes the api, and how long one probe may take.
const API_PROBE_EVERY: Duration = Duration::from_secs(5);
const API_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes the api every [`API_PROBE_EVERY`] (its signed trust bundle, a cheap read) and keeps
/// [`API_SERVICE_NAME`]'s health status and `bc_api_up` in step, logging each change.
pub(crate) async fn probe_api(
    api: ApiClient,
    health: tonic_health::server::HealthReporter,
    metrics: Arc<Metrics>,
) {
    let mut up = true;
    let mut tick = tokio::time::interval(API_PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let answer = tokio::time::timeout(API_PROBE_TIMEOUT, api.trust()).await;
        let now_up = matches!(answer, Ok(Ok(_)));
        metrics.api_state.store(
            if now_up { API_UP } else { API_DOWN },
            std::sync::atomic::Ordering::Relaxed,
        );
        if now_up != up {
            up = now_up;
            if up {
                tracing::info!(api = %api.url(), "the api answers again: Join and Renew are relayed");
                health
                    .set_service_status(API_SERVICE_NAME, ServingStatus::Serving)
                    .await;
            } else {
                let why = match answer {
                    Ok(Err(s)) => format!("{:?}: {}", s.code(), s.message()),
                    _ => format!("no answer within {} s", API_PROBE_TIMEOUT.as_secs()),
                };
                tracing::error!(api = %api.url(), error = %why, "the api does not answer: Join and Renew fail until it does (node sessions go on)");
                health
                    .set_service_status(API_SERVICE_NAME, ServingStatus::NotServing)
                    .await;
            }
        }
    }
}
