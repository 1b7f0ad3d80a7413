//! `bcctl serve`: the JoinService and the gateway in one process (`--role all`), or split
//! (`--role api` and `--role gateway`, see [`crate::serve_split`]).
//!
//! Configuration: a TOML file (`--config`), overridden by the environment, overridden by flags.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_LISTEN` | `127.0.0.1:8443` |
//! | `database_url` | `DATABASE_URL` | `sqlite://.bcctl/events.db` |
//! | `pki_bundle` | `BC_PKI_BUNDLE` | `.bcctl/pki.json` |
//! | `deployment_secret_file` | `BC_DEPLOYMENT_SECRET_FILE` | none (`BC_DEPLOYMENT_SECRET` wins) |
//! | `role` | `BC_ROLE` | `all` |
//! | `serving_names` | `BC_SERVING_NAMES` (comma-separated) | `["localhost", "127.0.0.1"]` |
//! | `metrics_listen` | `BC_METRICS_LISTEN` (`off` disables) | `127.0.0.1:9464` |
//! | `leaf_lifetime` | `BC_LEAF_LIFETIME` | `24h` |
//! | `serving_lifetime` | `BC_SERVING_LIFETIME` | `30d` |
//! | `feed_max_lag` | `BC_FEED_MAX_LAG` | `5s` |
//! | `feed_poll_interval` | `BC_FEED_POLL_INTERVAL` | `20ms` |
//! | `audit_seal_interval` | `BC_AUDIT_SEAL_INTERVAL` | `1h` |
//! | `root_tenant` | `BC_ROOT_TENANT` | `root` |
//! | `record_trust_reports` | `BC_RECORD_TRUST_REPORTS` | `true` |
//! | `log_format` | `BC_LOG_FORMAT` | `text` (or `json`) |
//! | `trust_version_floor` | `BC_TRUST_VERSION_FLOOR` | `0` (the published trust version is never below it) |
//! | `api_internal_listen` | `BC_API_INTERNAL_LISTEN` | `127.0.0.1:9443` (`api`: where gateways connect) |
//! | `api_internal_names` | `BC_API_INTERNAL_NAMES` (comma-separated) | `["localhost", "127.0.0.1"]` (`api`: names of its internal certificate) |
//! | `api_internal_url` | `BC_API_INTERNAL_URL` | none; required by `gateway` (`host:port` of the api's internal endpoint) |
//! | `internal_cert` | `BC_INTERNAL_CERT` | none; required by `gateway` (from `bcctl pki issue-internal`) |
//! | `internal_key` | `BC_INTERNAL_KEY` | none; required by `gateway` (mode 0600) |
//!
//! Durations are `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d` (`30s`, `24h`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use commands::identity::{IdentityConfig, JoinService};
use commands::{Clock, SystemClock};
use domain::pki::{open_bundle, DeploymentSecret, KeySet, DEPLOYMENT_SECRET_ENV};
use events::store::EventStore;
use gateway::feed::FeedOptions;
use gateway::run::{GatewayConfig, Running};
use serde::Deserialize;

/// Errors of `bcctl serve` (and of `bcctl up` while starting the server).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{path}: cannot read the configuration: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid bcctl serve configuration: {message}")]
    ConfigSyntax { path: PathBuf, message: String },
    #[error("configuration {key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error(
        "--role {role} needs {key} in the configuration file or {env} in the environment: {hint}"
    )]
    Missing {
        role: &'static str,
        key: &'static str,
        env: &'static str,
        hint: &'static str,
    },
    #[error("internal certificate: {0}")]
    InternalCert(String),
    #[error("the api relay: {0}")]
    Relay(#[from] gateway::relay::RelayError),
    #[error("settling the trust bundle: {0}")]
    Trust(String),
    #[error("{path}: cannot read the PKI bundle: {source} (create one with `bcctl pki init` or run `bcctl up`)")]
    ReadBundle {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Bundle { path: PathBuf, message: String },
    #[error("{path}: the bundle's private keys are sealed: set {DEPLOYMENT_SECRET_ENV} or deployment_secret_file to this deployment's secret")]
    Sealed { path: PathBuf },
    #[error("deployment secret: {0}")]
    Secret(String),
    #[error("store: {0}")]
    Store(#[from] events::store::StoreError),
    #[error("JoinService: {0}")]
    Identity(#[from] commands::identity::IdentityError),
    #[error("gateway: {0}")]
    Start(#[from] gateway::run::StartError),
    #[error("the server stopped: {0}")]
    Stopped(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// JoinService and gateway in one process.
    All,
    /// JoinService, signing and the audit sequencer/sealer, serving gateways over internal mTLS.
    Api,
    /// Agent-facing gateway without signing keys, relaying Join and Renew to an api.
    Gateway,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// all (default), api or gateway.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Address to listen on for agents (overrides BC_LISTEN and the file).
    #[arg(long)]
    pub listen: Option<String>,
    /// postgres://... or sqlite://PATH (overrides DATABASE_URL and the file).
    #[arg(long)]
    pub database_url: Option<String>,
    /// The PKI bundle (overrides BC_PKI_BUNDLE and the file).
    #[arg(long)]
    pub pki_bundle: Option<PathBuf>,
    /// text or json logs on standard error.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// The configuration file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub database_url: Option<String>,
    pub pki_bundle: Option<PathBuf>,
    pub deployment_secret_file: Option<PathBuf>,
    pub role: Option<Role>,
    pub serving_names: Option<Vec<String>>,
    pub metrics_listen: Option<String>,
    pub leaf_lifetime: Option<String>,
    pub serving_lifetime: Option<String>,
    pub feed_max_lag: Option<String>,
    pub feed_poll_interval: Option<String>,
    pub audit_seal_interval: Option<String>,
    pub root_tenant: Option<String>,
    pub record_trust_reports: Option<bool>,
    pub log_format: Option<LogFormat>,
    pub trust_version_floor: Option<u64>,
    pub api_internal_listen: Option<String>,
    pub api_internal_names: Option<Vec<String>>,
    pub api_internal_url: Option<String>,
    pub internal_cert: Option<PathBuf>,
    pub internal_key: Option<PathBuf>,
}

/// Everything resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub database_url: String,
    pub pki_bundle: PathBuf,
    pub deployment_secret_file: Option<PathBuf>,
    pub role: Role,
    pub serving_names: Vec<String>,
    pub metrics_listen: Option<SocketAddr>,
    pub leaf_lifetime: Duration,
    pub serving_lifetime: Duration,
    pub feed_max_lag: Duration,
    pub feed_poll_interval: Duration,
    /// How often the audit sealer signs a checkpoint of every tenant whose tree grew.
    pub audit_seal_interval: Duration,
    pub root_tenant: String,
    pub record_trust_reports: bool,
    pub log_format: LogFormat,
    /// The published trust bundle version is never below it (pki.trustVersion).
    pub trust_version_floor: u64,
    /// `api`: where gateways connect.
    pub api_internal_listen: SocketAddr,
    /// `api`: the names its internal certificate carries.
    pub api_internal_names: Vec<String>,
    /// `gateway`: the api's internal endpoint, `host:port`.
    pub api_internal_url: Option<String>,
    /// `gateway`: its internal client certificate chain (PEM).
    pub internal_cert: Option<PathBuf>,
    /// `gateway`: its internal client key (PKCS#8 PEM, mode 0600).
    pub internal_key: Option<PathBuf>,
}

fn list_env(name: &str) -> Option<Vec<String>> {
    env(name).map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

/// Parses `30s`, `250ms`, `5m`, `24h`, `7d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit (ms, s, m, h, d)"))?;
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ms, s, m, h, d)"
            ))
        }
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn pick<T>(
    flag: Option<T>,
    env_name: &str,
    file: Option<T>,
    parse: impl Fn(String) -> Option<T>,
) -> Option<T> {
    flag.or_else(|| env(env_name).and_then(parse)).or(file)
}

fn duration_setting(
    key: &'static str,
    env_name: &str,
    file: Option<String>,
    default: &str,
) -> Result<Duration, ServeError> {
    let text = env(env_name)
        .or(file)
        .unwrap_or_else(|| default.to_string());
    parse_duration(&text).map_err(|message| ServeError::Invalid { key, message })
}

fn socket(key: &'static str, text: &str) -> Result<SocketAddr, ServeError> {
    text.parse().map_err(|e| ServeError::Invalid {
        key,
        message: format!("{text:?} is not host:port with an IP address: {e}"),
    })
}

/// Reads the file (if any), then applies the environment and the flags.
pub fn resolve(args: &ServeArgs) -> Result<Settings, ServeError> {
    let file: FileConfig = match &args.config {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ServeError::ReadConfig {
                path: path.clone(),
                source,
            })?;
            toml::from_str(&text).map_err(|e| ServeError::ConfigSyntax {
                path: path.clone(),
                message: e.to_string(),
            })?
        }
    };
    let listen = pick(args.listen.clone(), "BC_LISTEN", file.listen, Some)
        .unwrap_or_else(|| "127.0.0.1:8443".into());
    let metrics_listen = env("BC_METRICS_LISTEN")
        .or(file.metrics_listen)
        .unwrap_or_else(|| "127.0.0.1:9464".into());
    let role_env = env("BC_ROLE").map(|r| match r.as_str() {
        "api" => Ok(Role::Api),
        "gateway" => Ok(Role::Gateway),
        "all" => Ok(Role::All),
        other => Err(ServeError::Invalid {
            key: "role",
            message: format!("{other:?} is not all, api or gateway"),
        }),
    });
    let role = match (args.role, role_env) {
        (Some(r), _) => r,
        (None, Some(r)) => r?,
        (None, None) => file.role.unwrap_or(Role::All),
    };
    let log_format = match (args.log_format, env("BC_LOG_FORMAT")) {
        (Some(f), _) => f,
        (None, Some(f)) if f == "json" => LogFormat::Json,
        (None, Some(f)) if f == "text" => LogFormat::Text,
        (None, Some(f)) => {
            return Err(ServeError::Invalid {
                key: "log_format",
                message: format!("{f:?} is not text or json"),
            })
        }
        (None, None) => file.log_format.unwrap_or(LogFormat::Text),
    };
    let trust_version_floor = match env("BC_TRUST_VERSION_FLOOR") {
        Some(v) => v.parse::<u64>().map_err(|_| ServeError::Invalid {
            key: "trust_version_floor",
            message: format!("{v:?} is not a whole number"),
        })?,
        None => file.trust_version_floor.unwrap_or(0),
    };
    let api_internal_listen = env("BC_API_INTERNAL_LISTEN")
        .or(file.api_internal_listen)
        .unwrap_or_else(|| "127.0.0.1:9443".into());
    let record_trust_reports = match env("BC_RECORD_TRUST_REPORTS") {
        Some(v) => v != "false" && v != "0",
        None => file.record_trust_reports.unwrap_or(true),
    };
    Ok(Settings {
        listen: socket("listen", &listen)?,
        database_url: pick(
            args.database_url.clone(),
            "DATABASE_URL",
            file.database_url,
            Some,
        )
        .unwrap_or_else(|| "sqlite://.bcctl/events.db".into()),
        pki_bundle: pick(
            args.pki_bundle.clone(),
            "BC_PKI_BUNDLE",
            file.pki_bundle,
            |v| Some(PathBuf::from(v)),
        )
        .unwrap_or_else(|| PathBuf::from(crate::pki_cmd::DEFAULT_BUNDLE)),
        deployment_secret_file: env("BC_DEPLOYMENT_SECRET_FILE")
            .map(PathBuf::from)
            .or(file.deployment_secret_file),
        role,
        serving_names: list_env("BC_SERVING_NAMES")
            .or(file.serving_names)
            .unwrap_or_else(|| vec!["localhost".into(), "127.0.0.1".into()]),
        metrics_listen: match metrics_listen.as_str() {
            "off" | "" => None,
            m => Some(socket("metrics_listen", m)?),
        },
        leaf_lifetime: duration_setting(
            "leaf_lifetime",
            "BC_LEAF_LIFETIME",
            file.leaf_lifetime,
            "24h",
        )?,
        serving_lifetime: duration_setting(
            "serving_lifetime",
            "BC_SERVING_LIFETIME",
            file.serving_lifetime,
            "30d",
        )?,
        feed_max_lag: duration_setting("feed_max_lag", "BC_FEED_MAX_LAG", file.feed_max_lag, "5s")?,
        audit_seal_interval: duration_setting(
            "audit_seal_interval",
            "BC_AUDIT_SEAL_INTERVAL",
            file.audit_seal_interval,
            "1h",
        )?,
        feed_poll_interval: duration_setting(
            "feed_poll_interval",
            "BC_FEED_POLL_INTERVAL",
            file.feed_poll_interval,
            "20ms",
        )?,
        root_tenant: env("BC_ROOT_TENANT")
            .or(file.root_tenant)
            .unwrap_or_else(|| "root".into()),
        record_trust_reports,
        log_format,
        trust_version_floor,
        api_internal_listen: socket("api_internal_listen", &api_internal_listen)?,
        api_internal_names: list_env("BC_API_INTERNAL_NAMES")
            .or(file.api_internal_names)
            .unwrap_or_else(|| vec!["localhost".into(), "127.0.0.1".into()]),
        api_internal_url: env("BC_API_INTERNAL_URL").or(file.api_internal_url),
        internal_cert: env("BC_INTERNAL_CERT")
            .map(PathBuf::from)
            .or(file.internal_cert),
        internal_key: env("BC_INTERNAL_KEY")
            .map(PathBuf::from)
            .or(file.internal_key),
    })
}

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

fn read_secret(file: Option<&Path>) -> Result<Option<DeploymentSecret>, ServeError> {
    if let Some(v) = env(DEPLOYMENT_SECRET_ENV) {
        return DeploymentSecret::new(&v)
            .map(Some)
            .map_err(|e| ServeError::Secret(e.to_string()));
    }
    match file {
        None => Ok(None),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ServeError::Secret(format!("{}: cannot read it: {e}", path.display()))
            })?;
            DeploymentSecret::new(text.trim())
                .map(Some)
                .map_err(|e| ServeError::Secret(format!("{}: {e}", path.display())))
        }
    }
}

/// Loads the key set from the bundle, opening it with the deployment secret.
pub fn load_keys(bundle: &Path, secret_file: Option<&Path>) -> Result<KeySet, ServeError> {
    let bytes = std::fs::read(bundle).map_err(|source| ServeError::ReadBundle {
        path: bundle.to_path_buf(),
        source,
    })?;
    let secret = read_secret(secret_file)?;
    let loaded = open_bundle(&bytes, secret.as_ref()).map_err(|e| ServeError::Bundle {
        path: bundle.to_path_buf(),
        message: e.to_string(),
    })?;
    loaded.keys.ok_or_else(|| ServeError::Sealed {
        path: bundle.to_path_buf(),
    })
}

/// The started server, with the JoinService for callers that need it (`bcctl up`).
pub struct Started {
    pub running: Running,
    pub join: Arc<JoinService>,
    pub keys: Arc<KeySet>,
    /// Stops the audit sequencer and sealer.
    pub audit_shutdown: tokio::sync::watch::Sender<bool>,
}

impl Started {
    /// Stops serving, then the audit sequencer and sealer.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
        let _ = self.audit_shutdown.send(true);
    }
}

/// Starts the audit sequencer (follows the log, gives every event its per-tenant leaf) and the
/// sealer (signs a checkpoint of every grown tenant each `interval`) as background tasks.
fn start_audit(
    store: &EventStore,
    keys: &KeySet,
    clock: Arc<dyn Clock>,
    interval: Duration,
) -> Result<tokio::sync::watch::Sender<bool>, ServeError> {
    use commands::audit::{Sealer, SealerOptions, Sequencer, SequencerOptions};
    let rng = ring::rand::SystemRandom::new();
    let signer = domain::audit::AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &rng)
        .map_err(|e| ServeError::Invalid {
            key: "pki_bundle",
            message: format!("the audit signing key does not load: {e}"),
        })?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sequencer = Sequencer::new(store.clone(), SequencerOptions::default());
    let seq_stop = stopped.clone();
    tokio::spawn(async move {
        if let Err(e) = sequencer.run(seq_stop).await {
            tracing::error!(error = %e, "audit sequencer stopped");
        }
    });
    let mut options = SealerOptions::new(keys.trust_domain.to_string());
    options.interval = interval;
    let sealer = Sealer::new(store.clone(), Arc::new(signer), clock, options);
    tokio::spawn(async move {
        let now = Arc::new(tokio::sync::Notify::new());
        let report = |r: Result<_, commands::audit::AuditError>| {
            if let Err(e) = r {
                tracing::warn!(error = %e, "audit seal failed");
            }
        };
        if let Err(e) = sealer.run(now, stopped, report).await {
            tracing::error!(error = %e, "audit sealer stopped");
        }
    });
    Ok(stop)
}

/// What the `all` and `api` roles share: the keys, the store, the JoinService, the settled trust
/// bundle, the audit sequencer and sealer.
pub(crate) struct Core {
    pub keys: Arc<KeySet>,
    pub store: EventStore,
    pub clock: Arc<dyn Clock>,
    pub join: Arc<JoinService>,
    pub audit_shutdown: tokio::sync::watch::Sender<bool>,
}

/// Loads the keys, opens the store, settles the trust bundle, starts the JoinService and the
/// audit sequencer and sealer.
pub(crate) async fn start_core(settings: &Settings) -> Result<Core, ServeError> {
    let keys = Arc::new(load_keys(
        &settings.pki_bundle,
        settings.deployment_secret_file.as_deref(),
    )?);
    let store = EventStore::open(&settings.database_url).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    crate::serve_split::settle_trust(&store, clock.as_ref(), &keys, settings.trust_version_floor)
        .await?;
    let mut identity = IdentityConfig::new(keys.trust_domain.clone());
    identity.leaf_lifetime =
        time::Duration::try_from(settings.leaf_lifetime).map_err(|e| ServeError::Invalid {
            key: "leaf_lifetime",
            message: e.to_string(),
        })?;
    identity.root_tenant = settings.root_tenant.clone();
    let join = Arc::new(JoinService::new(
        store.clone(),
        keys.clone(),
        clock.clone(),
        identity,
    )?);
    let audit_shutdown = start_audit(&store, &keys, clock.clone(), settings.audit_seal_interval)?;
    Ok(Core {
        keys,
        store,
        clock,
        join,
        audit_shutdown,
    })
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
        poll_interval: settings.feed_poll_interval,
        ..FeedOptions::default()
    };
    config.metrics_listen = settings.metrics_listen;
    config.record_trust_reports = settings.record_trust_reports;
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
    } = start_core(settings).await?;
    let config = gateway_config(settings)?;
    let running = gateway::run::start(store, keys.clone(), join.clone(), clock, config).await?;
    Ok(Started {
        running,
        join,
        keys,
        audit_shutdown,
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

pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let settings = resolve(&args)?;
    init_logging(settings.log_format);
    match settings.role {
        Role::All => {}
        Role::Api => return crate::serve_split::serve_api(&settings).await,
        Role::Gateway => return crate::serve_split::serve_gateway(&settings).await,
    }
    let mut started = start(&settings).await?;
    eprintln!(
        "bcctl serve: listening on {} (metrics {})",
        started.running.addr,
        started
            .running
            .metrics_addr
            .map_or("off".to_string(), |a| format!("http://{a}/metrics"))
    );
    until_stopped(&mut started.running).await?;
    tracing::info!("stopping");
    started.shutdown().await;
    Ok(())
}
