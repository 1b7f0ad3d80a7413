//! `bcctl serve --role all`: the JoinService and the gateway in one process, and the parts the
//! split roles share with it (the core of keys, store, JoinService and audit; the gateway's
//! configuration; waiting for a stop). Which role runs is [`crate::serve::roles`]; the split roles
//! are [`crate::serve::split`]; the configuration keys and how they are resolved are in
//! [`crate::serve::config`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use commands::identity::{IdentityConfig, JoinService};
use commands::{Clock, DatabaseClock};
use domain::pki::KeySet;
use events::store::{EventStore, HubOptions, LogHub, LogStore};
use gateway::feed::FeedOptions;
use gateway::run::{GatewayConfig, Running};

use crate::deployment::Deployment;
pub use crate::serve::config::{parse_duration, resolve, LogFormat, Role, ServeArgs, Settings};
pub use crate::serve::error::ServeError;

/// Starts structured logging on standard error (`RUST_LOG` filters; `info` by default).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Loads the key set from the bundle, opening it with the deployment secret (the one way every
/// command does: [`Deployment`]). A plaintext bundle while a secret is set is refused unless
/// `allow_plaintext`; a plaintext bundle served is warned about on standard error.
pub fn load_keys(
    bundle: &Path,
    secret_file: Option<&Path>,
    allow_plaintext: bool,
) -> Result<KeySet, ServeError> {
    let (keys, warning) = Deployment::new(bundle)
        .with_secret_file(secret_file.map(Path::to_path_buf))
        .serving_keys(allow_plaintext)?;
    if let Some(warning) = warning {
        tracing::warn!(bundle = %bundle.display(), "{warning}");
    }
    Ok(keys)
}

/// The started server, with the JoinService for callers that need it (`bcctl up`).
pub struct Started {
    pub running: Running,
    pub join: Arc<JoinService>,
    pub keys: Arc<KeySet>,
    /// Stops the audit sequencer and sealer.
    pub audit_shutdown: tokio::sync::watch::Sender<bool>,
    /// The admin API listener (`[admin]`), when one runs.
    pub admin: Option<crate::admin::server::RunningAdmin>,
    /// The store and clock the server runs on (`bcctl up` starts its admin listener on them).
    pub store: EventStore,
    pub clock: Arc<dyn Clock>,
    /// The process's log hub (`bcctl up`'s admin listener subscribes to it).
    pub hub: LogHub,
}

impl Started {
    /// Stops serving, writes the suppressed refusal counts still held, then stops the audit
    /// sequencer and sealer (and the maintenance loop).
    pub async fn shutdown(self) {
        if let Some(admin) = self.admin {
            admin.shutdown().await;
        }
        self.running.shutdown().await;
        flush_held_refusals(&self.join).await;
        let _ = self.audit_shutdown.send(true);
    }
}

/// Writes the suppressed refusal counts this process still holds (it is stopping).
pub(crate) async fn flush_held_refusals(join: &JoinService) {
    match join.maintenance().flush_all_suppressed_refusals().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(suppressed_events = n, "suppressed refusal counts written"),
        Err(e) => tracing::warn!(error = %e, "the suppressed refusal counts could not be written"),
    }
}

/// Starts the audit sequencer (follows the log, gives every event its per-tenant leaf) and the
/// sealer (signs a checkpoint of every grown tenant each `interval`), both while this process
/// leads the `audit-sequencer` task ([`crate::serve::leader`]): sealing must be single too.
fn start_audit(
    store: &EventStore,
    keys: &KeySet,
    clock: Arc<dyn Clock>,
    interval: Duration,
) -> Result<tokio::sync::watch::Sender<bool>, ServeError> {
    use commands::audit::SealerOptions;
    let rng = ring::rand::SystemRandom::new();
    let signer = domain::audit::AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &rng)
        .map_err(|e| ServeError::Invalid {
            key: "pki_bundle",
            message: format!("the audit signing key does not load: {e}"),
        })?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut options = SealerOptions::new(keys.trust_domain.to_string());
    options.interval = interval;
    let signer = Arc::new(signer);
    let audit_store = store.clone();
    crate::serve::leader::lead(
        store,
        commands::leadership::AUDIT_SEQUENCER,
        stopped,
        move |leading| {
            let sequencer = run_sequencer(audit_store.clone(), leading.clone());
            let sealer = run_sealer(
                audit_store.clone(),
                signer.clone(),
                clock.clone(),
                options.clone(),
                leading,
            );
            async move {
                tokio::join!(sequencer, sealer);
            }
        },
    )?;
    Ok(stop)
}

/// The audit sequencer until `stopped`, started again after a failure ([`Restarts`]).
async fn run_sequencer(store: EventStore, stopped: tokio::sync::watch::Receiver<bool>) {
    use commands::audit::{Sequencer, SequencerOptions};
    let mut restarts = Restarts::default();
    loop {
        let sequencer = Sequencer::new(store.clone(), SequencerOptions::default());
        let result = sequencer.run(stopped.clone()).await;
        if !restarts.after("audit sequencer", result, &stopped).await {
            break;
        }
    }
}

/// The audit sealer until `stopped`, started again after a failure ([`Restarts`]).
async fn run_sealer(
    store: EventStore,
    signer: Arc<domain::audit::AuditSigner>,
    clock: Arc<dyn Clock>,
    options: commands::audit::SealerOptions,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    let now = Arc::new(tokio::sync::Notify::new());
    let mut restarts = Restarts::default();
    loop {
        let sealer = commands::audit::Sealer::new(
            store.clone(),
            signer.clone(),
            clock.clone(),
            options.clone(),
        );
        let report = |r: Result<_, commands::audit::AuditError>| {
            if let Err(e) = r {
                tracing::warn!(error = %e, "audit seal failed");
            }
        };
        let result = sealer.run(now.clone(), stopped.clone(), report).await;
        if !restarts.after("audit sealer", result, &stopped).await {
            break;
        }
    }
}

/// Keeps a background task alive across store failures (a Postgres restart, a full disk): a
/// run that fails is logged and started again from what the store holds, after a pause of 1 s
/// doubling to 30 s (back to 1 s after a run of more than a minute).
struct Restarts {
    pause: Duration,
    started: std::time::Instant,
}

impl Default for Restarts {
    fn default() -> Self {
        Restarts {
            pause: Duration::from_secs(1),
            started: std::time::Instant::now(),
        }
    }
}

impl Restarts {
    /// After a run of `task` ended with `result`: whether to run it again (not after a clean
    /// stop, nor once `stopped` is set).
    async fn after(
        &mut self,
        task: &str,
        result: Result<(), commands::audit::AuditError>,
        stopped: &tokio::sync::watch::Receiver<bool>,
    ) -> bool {
        let Err(e) = result else {
            return false;
        };
        if *stopped.borrow() {
            return false;
        }
        if self.started.elapsed() > Duration::from_secs(60) {
            self.pause = Duration::from_secs(1);
        }
        tracing::error!(error = %e, retry_in_ms = self.pause.as_millis() as u64, "{task} failed; starting it again");
        let mut stopped = stopped.clone();
        tokio::select! {
            _ = tokio::time::sleep(self.pause) => {}
            _ = stopped.changed() => return false,
        }
        self.pause = (self.pause * 2).min(Duration::from_secs(30));
        self.started = std::time::Instant::now();
        let stop_now = *stopped.borrow();
        !stop_now
    }
}

/// Starts the identity housekeeping as background tasks, stopped with the audit tasks: the
/// log's part (expired renew proofs pruned, join requests expired) while this process leads the
/// `maintenance` task, and its own part (the suppressed refusal counts it holds, written to the
/// log) in every replica ([`commands::identity::MaintenanceWork`]).
fn start_identity_maintenance(
    store: &EventStore,
    join: Arc<JoinService>,
    stopped: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    use commands::identity::{run_maintenance, MaintenanceWork, MAINTENANCE_INTERVAL};
    let service = Arc::new(join.maintenance().clone());
    tokio::spawn(run_maintenance(
        service.clone(),
        MaintenanceWork::OwnCounts,
        MAINTENANCE_INTERVAL,
        stopped.clone(),
        report_maintenance,
    ));
    crate::serve::leader::lead(
        store,
        commands::leadership::MAINTENANCE,
        stopped,
        move |leading| {
            run_maintenance(
                service.clone(),
                MaintenanceWork::Log,
                MAINTENANCE_INTERVAL,
                leading,
                report_maintenance,
            )
        },
    )
}

/// Logs one round of identity maintenance (nothing for a round that did nothing).
fn report_maintenance(
    round: Result<commands::identity::MaintenanceReport, commands::identity::IdentityError>,
) {
    match round {
        Ok(r) if r.pruned > 0 || r.suppressed_events > 0 || r.expired_join_requests > 0 => {
            tracing::info!(
                pruned = r.pruned,
                prune_events = r.prune_events,
                suppressed_events = r.suppressed_events,
                expired_join_requests = r.expired_join_requests,
                "identity maintenance"
            )
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "identity maintenance failed; tried again next round")
        }
    }
}

/// What the `all` and `api` roles share: the keys, the store, the JoinService, the settled trust
/// bundle, the audit sequencer and sealer, the identity maintenance.
pub(crate) struct Core {
    pub keys: Arc<KeySet>,
    pub store: EventStore,
    pub clock: Arc<dyn Clock>,
    pub join: Arc<JoinService>,
    pub audit_shutdown: tokio::sync::watch::Sender<bool>,
    /// The process's one tailer of the log, for the gateway's feed and dispatcher and the
    /// admin listener's revoked set.
    pub hub: LogHub,
}

/// Loads the keys, opens the store, settles the trust bundle, starts the JoinService, the
/// audit sequencer and sealer, and the identity maintenance.
pub(crate) async fn start_core(settings: &Settings) -> Result<Core, ServeError> {
    // The pending-join retry hint: environment only (a test knob; the default is spec 000's 30 s),
    // checked before anything is opened.
    let pending_retry_seconds = commands::identity::parse_pending_retry(
        std::env::var(commands::identity::PENDING_RETRY_ENV)
            .ok()
            .as_deref(),
    )
    .map_err(|message| ServeError::Invalid {
        key: commands::identity::PENDING_RETRY_ENV,
        message,
    })?;
    let mut keys = load_keys(
        &settings.pki_bundle,
        settings.deployment_secret_file.as_deref(),
        settings.allow_plaintext,
    )?;
    // Node certificates name the deployment's CRL distribution point, when it has one.
    keys.node_ca
        .set_crl_distribution_point(settings.crl_distribution_point.clone());
    let keys = Arc::new(keys);
    let store =
        EventStore::open_with_pool(&settings.database_url, settings.store.pool_size).await?;
    let hub = start_hub(&store, settings).await?;
    let clock: Arc<dyn Clock> = Arc::new(DatabaseClock::system());
    crate::serve::trust::settle_trust(
        &store,
        clock.as_ref(),
        &keys,
        settings.trust_version_floor,
        settings.quorum.as_ref(),
    )
    .await?;
    let mut identity = IdentityConfig::new(keys.trust_domain.clone());
    identity.leaf_lifetime =
        time::Duration::try_from(settings.leaf_lifetime).map_err(|e| ServeError::Invalid {
            key: "leaf_lifetime",
            message: e.to_string(),
        })?;
    identity.root_tenant = settings.root_tenant.clone();
    identity.pending_retry_seconds = pending_retry_seconds;
    let identity = identity.with_attestor_settings(&settings.attestors);
    let attestors = crate::serve::attestors::registry(settings, &keys)?;
    let join = JoinService::new(store.clone(), keys.clone(), clock.clone(), identity)?;
    let join = Arc::new(
        join.with_attestors(attestors)
            .with_site_settings(settings.sites),
    );
    let audit_shutdown = start_audit(&store, &keys, clock.clone(), settings.audit_seal_interval)?;
    start_identity_maintenance(&store, join.clone(), audit_shutdown.subscribe())?;
    crate::serve::batches::start_batch_expiry(
        store.clone(),
        clock.clone(),
        settings.batch_expiry_interval,
        audit_shutdown.subscribe(),
    )?;
    Ok(Core {
        keys,
        store,
        clock,
        join,
        audit_shutdown,
        hub,
    })
}

/// The process's log hub on `store`, stepping every `feed_poll_interval` when no commit is
/// signalled (the backend's default when unset).
pub(crate) async fn start_hub(
    store: &EventStore,
    settings: &Settings,
) -> Result<LogHub, ServeError> {
    let mut options = HubOptions::for_backend(store.backend());
    if let Some(poll) = settings.store.feed_poll_interval {
        options.safety_poll = poll;
    }
    Ok(LogHub::start(store.clone(), options).await?)
}

/// The agent-facing gateway's settings.
pub(crate) fn gateway_config(settings: &Settings) -> Result<GatewayConfig, ServeError> {
    let mut config = GatewayConfig::new(settings.listen);
    config.serving_names = settings.serving_names.clone();
    config.serving_lifetime =
        time::Duration::try_from(settings.serving_lifetime).map_err(|e| ServeError::Invalid {
            key: "serving_lifetime",
            message: e.to_string(),
        })?;
    config.feed = FeedOptions {
        max_lag: settings.feed_max_lag,
        poll_interval: settings.store.feed_poll_interval,
        ..FeedOptions::default()
    };
    config.metrics_listen = settings.metrics_listen;
    config.record_trust_reports = settings.record_trust_reports;
    config.limits = settings.limits.clone();
    config.join_refusals = settings.join_refusals.clone();
    config.command_poll_interval = settings.command_poll_interval;
    config.tls_files = settings.tls_files.clone();
    config.root_tenant = settings.root_tenant.clone();
    config.spiffe_bundle = settings.spiffe_bundle.clone();
    config.crl = settings.crl;
    config.oidc = settings.oidc.as_ref().and_then(|o| o.publication.clone());
    if let Some(o) = settings
        .oidc
        .as_ref()
        .filter(|o| !o.settings.issuer.on_443())
    {
        tracing::warn!(issuer = o.settings.issuer.as_str(), "the OIDC issuer URL is not on port 443: cloud relying parties (AWS IAM) fetch only from 443");
    }
    Ok(config)
}

/// Starts the `all` role: JoinService and gateway in this process.
pub async fn start(settings: &Settings) -> Result<Started, ServeError> {
    let Core {
        keys,
        store,
        clock,
        join,
        audit_shutdown,
        hub,
    } = start_core(settings).await?;
    let mut config = gateway_config(settings)?;
    config.hub = Some(hub.clone());
    let watch = crate::serve::watch::of_keys("all", &keys);
    crate::serve::watch::start_readings(
        store.clone(),
        watch.clone(),
        None,
        audit_shutdown.subscribe(),
    );
    config.watch = Some(watch);
    let admin =
        crate::admin::server::start_for(settings, &keys, &store, &clock, None, Some(&hub)).await?;
    let running = gateway::run::start(
        store.clone(),
        keys.clone(),
        join.clone(),
        clock.clone(),
        config,
    )
    .await?;
    Ok(Started {
        running,
        join,
        keys,
        audit_shutdown,
        admin,
        store,
        clock,
        hub,
    })
}

/// Waits for Ctrl-C or SIGTERM.
pub async fn until_stopped(running: &mut Running) -> Result<(), ServeError> {
    until_signal(running.wait()).await
}

/// Waits for Ctrl-C, SIGTERM, or `stopped` (a server that ended by itself).
pub(crate) async fn until_signal(
    stopped: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), ServeError> {
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = term => Ok(()),
        r = stopped => r.map_err(ServeError::Stopped),
    }
}
