//! `bcctl serve --role api` and `--role gateway`: the JoinService and the agent-facing gateway in
//! separate processes, joined by internal mTLS (see docs/ARCHITECTURE.md, "Split roles").
//!
//! - `api` loads the whole key set, settles the trust bundle, runs the JoinService (every
//!   decision and signature) and the audit sequencer and sealer, and serves
//!   `bc.internal.v1.ApiService` on `api_internal_listen` to gateways presenting an internal
//!   client certificate; its own `/metrics` on `metrics_listen` and `grpc.health.v1.Health`
//!   alone on `api_health_listen` ([`crate::serve::watch`], decision 0104).
//! - `gateway` reads only the public half of the PKI bundle (it never opens the sealed keys,
//!   whatever secret its environment holds), gets its serving certificate from the api, and
//!   relays Join, Renew and the Welcome trust bundle; it reads the store for the revocation feed
//!   and sessions and records nodes' trust reports. Its internal client certificate is read
//!   from `internal_cert` and `internal_key` and reloaded when they change
//!   (`internal_reload_interval`, [`gateway::split::internal_files`]).
//!
//! Both roles (and `all`) settle the trust bundle at start where the keys are, so a Welcome
//! carries a signed bundle at the deployment's current version.

use std::path::Path;
use std::sync::Arc;

use commands::{Clock, DatabaseClock};
use domain::pki::PublicBundle;
use events::store::EventStore;
use gateway::api::{start_api, ApiConfig};
use gateway::relay::ApiClient;
use gateway::split::api_watch::page;
use gateway::split::internal_files;
use gateway::tls_files::TlsFiles;

use crate::deployment::Deployment;
use crate::serve::error::ServeError;
use crate::serve::start::{gateway_config, start_core, until_signal, Core, Settings};

fn required<'a, T>(
    value: &'a Option<T>,
    key: &'static str,
    env: &'static str,
    hint: &'static str,
) -> Result<&'a T, ServeError> {
    value.as_ref().ok_or(ServeError::Missing {
        role: "gateway",
        key,
        env,
        hint,
    })
}

/// `--role api`: the internal endpoint, the JoinService, the audit sequencer and sealer.
pub async fn serve_api(settings: &Settings) -> Result<(), ServeError> {
    let Core {
        keys,
        store,
        clock,
        join,
        audit_shutdown,
        hub,
    } = start_core(settings).await?;
    let config = ApiConfig {
        listen: settings.api_internal_listen,
        names: settings.api_internal_names.clone(),
        certificate_lifetime: time::Duration::try_from(settings.serving_lifetime).map_err(|e| {
            ServeError::Invalid {
                key: "serving_lifetime",
                message: e.to_string(),
            }
        })?,
        limits: settings.api_limits.clone(),
        health_listen: settings.api_health_listen,
    };
    let watch = crate::serve::watch::of_keys("api", &keys);
    let readings = (store.clone(), watch.clone(), audit_shutdown.subscribe());
    let join_for_flush = join.clone();
    let admin =
        crate::admin::server::start_for(settings, &keys, &store, &clock, None, Some(&hub)).await?;
    let mut api = start_api(store, keys, join, clock, config).await?;
    let health = api.health.as_ref().map(|h| h.health.clone());
    crate::serve::watch::start_readings(readings.0, readings.1, health, readings.2);
    let metrics = match settings.metrics_listen {
        Some(listen) => {
            Some(crate::serve::watch::serve_page(listen, page(api.metrics.clone(), watch)).await?)
        }
        None => None,
    };
    if let Some(admin) = &admin {
        eprintln!(
            "bcctl serve --role api: admin API on {} (mTLS, operator certificates)",
            admin.addr
        );
    }
    eprintln!(
        "bcctl serve --role api: internal endpoint on {} (mTLS, gateways only)",
        api.addr
    );
    eprintln!(
        "bcctl serve --role api: health on {} (grpc.health.v1.Health, TLS), metrics {}",
        api.health
            .as_ref()
            .map_or("off".to_string(), |h| h.addr.to_string()),
        metrics.map_or("off".to_string(), |a| format!("http://{a}/metrics"))
    );
    let result = until_signal(api.wait()).await;
    tracing::info!("stopping");
    if let Some(admin) = admin {
        admin.shutdown().await;
    }
    api.shutdown().await;
    crate::serve::start::flush_held_refusals(&join_for_flush).await;
    let _ = audit_shutdown.send(true);
    result
}

/// Reads the public half of the PKI bundle; the private keys are never opened here, whatever
/// secret the environment holds.
fn public_half(path: &Path) -> Result<PublicBundle, ServeError> {
    Ok(Deployment::new(path).public_half()?.public)
}

/// `--role gateway`: the agent-facing edge without signing keys.
pub async fn serve_gateway(settings: &Settings) -> Result<(), ServeError> {
    let url = required(
        &settings.api_internal_url,
        "api_internal_url",
        "BC_API_INTERNAL_URL",
        "the api's internal endpoint as host:port (its api_internal_listen, by a name in its api_internal_names)",
    )?;
    let cert = required(
        &settings.internal_cert,
        "internal_cert",
        "BC_INTERNAL_CERT",
        "this gateway's internal certificate chain from `bcctl pki issue-internal --cert-out`",
    )?;
    let key = required(
        &settings.internal_key,
        "internal_key",
        "BC_INTERNAL_KEY",
        "this gateway's internal key from `bcctl pki issue-internal --key-out`",
    )?;
    let public = public_half(&settings.pki_bundle)?;
    let clock: Arc<dyn Clock> = Arc::new(DatabaseClock::system());
    // Judged as the api will judge it; reloaded while the gateway runs (decision 0086).
    let internal = TlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        interval: settings.internal_reload_interval,
    };
    let identity = internal_files::load(&internal, &public.serving_ca_der, clock.now())
        .map_err(|e| ServeError::InternalCert(e.to_string()))?;
    let api = ApiClient::new(
        url,
        &public.serving_ca_der,
        identity.chain.clone(),
        identity.key.pkcs8_der().to_vec(),
    )?;
    let store =
        EventStore::open_with_pool(&settings.database_url, settings.store.pool_size).await?;
    let mut config = gateway_config(settings)?;
    config.internal_files = Some(internal);
    config.watch = Some(crate::serve::watch::of_public(&public));
    if let Some(url) = &settings.store.read_database_url {
        config.read_store = Some(store.replica(url, settings.store.read_pool_size).await?);
        tracing::info!(read_pool_size = settings.store.read_pool_size, "the revocation feed reads the read replica (read_database_url); joins and renewals go to the api");
    }
    let mut running = gateway::run::start_gateway(store, &public, api, clock, config).await?;
    eprintln!(
        "bcctl serve --role gateway: listening on {} (metrics {}), relaying to the api at {url}",
        running.addr,
        running
            .metrics_addr
            .map_or("off".to_string(), |a| format!("http://{a}/metrics"))
    );
    let result = until_signal(running.wait()).await;
    tracing::info!("stopping");
    running.shutdown().await;
    result
}
