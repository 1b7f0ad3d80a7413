//! `bcctl serve` configuration: a TOML file (`--config`), overridden by the environment,
//! overridden by flags.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_LISTEN` | `127.0.0.1:8443` |
//! | `database_url` | `DATABASE_URL` | `sqlite://.bcctl/events.db` |
//! | `pki_bundle` | `BC_PKI_BUNDLE` | `.bcctl/pki.json` |
//! | `deployment_secret_file` | `BC_DEPLOYMENT_SECRET_FILE` | none (`BC_DEPLOYMENT_SECRET` wins) |
//! | `role` | `BC_ROLE` | `all` |
//! | `serving_names` | `BC_SERVING_NAMES` (comma-separated) | `["localhost", "127.0.0.1"]` |
//! | `metrics_listen` | `BC_METRICS_LISTEN` (`off` disables) | `127.0.0.1:9464`; `127.0.0.1:9465` in the `api` role |
//! | `leaf_lifetime` | `BC_LEAF_LIFETIME` | `24h` |
//! | `serving_lifetime` | `BC_SERVING_LIFETIME` | `30d` |
//! | `feed_max_lag` | `BC_FEED_MAX_LAG` | `5s` |
//! | `audit_seal_interval` | `BC_AUDIT_SEAL_INTERVAL` | `1h` |
//! | `root_tenant` | `BC_ROOT_TENANT` | `root` |
//! | `record_trust_reports` | `BC_RECORD_TRUST_REPORTS` | `true` |
//! | `log_format` | `BC_LOG_FORMAT` | `text` (or `json`) |
//! | `allow_plaintext` | `BC_ALLOW_PLAINTEXT` (or `--allow-plaintext`) | `false`: a plaintext bundle while a deployment secret is set is refused |
//! | `trust_version_floor` | `BC_TRUST_VERSION_FLOOR` | `0` (the published trust version is never below it) |
//! | `api_internal_listen` | `BC_API_INTERNAL_LISTEN` | `127.0.0.1:9443` (`api`: where gateways connect) |
//! | `api_health_listen` | `BC_API_HEALTH_LISTEN` (`off` disables) | `127.0.0.1:9444` (`api`: gRPC health alone, TLS, no client certificate) |
//! | `api_internal_names` | `BC_API_INTERNAL_NAMES` (comma-separated) | `["localhost", "127.0.0.1"]` (`api`: names of its internal certificate) |
//! | `api_internal_url` | `BC_API_INTERNAL_URL` | none; required by `gateway` (`host:port` of the api's internal endpoint) |
//! | `internal_cert` | `BC_INTERNAL_CERT` | none; required by `gateway` (from `bcctl pki issue-internal`) |
//! | `internal_key` | `BC_INTERNAL_KEY` | none; required by `gateway` (mode 0600) |
//! | `internal_reload_interval` | `BC_INTERNAL_RELOAD_INTERVAL` | `60s` (`gateway`: how often `internal_cert` and `internal_key` are looked at; a changed, valid pair is presented to the api from then on) |
//! | `batch_expiry_interval` | `BC_BATCH_EXPIRY_INTERVAL` | `60s` (how often pending batches past their end are expired, their held commands cancelled) |
//! | `command_poll_interval` | `BC_COMMAND_POLL_INTERVAL` | `5s` (how often a gateway looks for newly runnable commands besides when the log hub hands out one) |
//!
//! The pool sizes, the gateway's read replica (`read_database_url`) and the log hub's safety
//! poll (`feed_poll_interval`) are [`crate::serve::config::store`].
//!
//! Durations are `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d` (`30s`, `24h`).
//!
//! The built-in attestors' settings are the tables `[attestors.<id>]`, each read by its attestor
//! (`domain::attest::configure` over `commands::identity::attestors::FACTORIES`), file first,
//! the environment over it: [`crate::serve::config::attestors`] (`[attestors.x509pop] grace`).
//!
//! The edge limits are the tables `[limits]` (the agent-facing endpoint) and `[api_limits]`
//! (the api's internal endpoint), file only: [`crate::serve::config::limits`].
//!
//! The site agents' boot lease is the table `[sites]` (`boot_lease_ttl`, default "60s";
//! `BC_SITES_BOOT_LEASE_TTL` over it).
//!
//! Out-of-process attestors are `[[attestors.external]]` entries, file only:
//! [`crate::serve::config::attestors`].
//!
//! The approver quorum the deployment publishes is the table `[quorum]`, file only:
//! [`crate::serve::config::quorum`].
//!
//! The gateway's serving certificate from files is the table `[tls]`, file only: `cert_file`
//! (the chain, leaf first, PEM) and `key_file` (PKCS#8 PEM), both or neither, and
//! `reload_interval` (default "60s"): the files are looked at every interval and a changed pair
//! is loaded for new handshakes ([`gateway::edge::tls_files`]; `bcctl pki issue-gateway` writes
//! them). Without `[tls]` the gateway issues its own serving certificate and renews it.
//!
//! The gateway's SPIFFE bundle endpoint is the table `[spiffe_bundle]` (or
//! `BC_SPIFFE_BUNDLE_LISTEN`): [`crate::serve::config::spiffe_bundle`].
//! The node CA's revocation list is the table `[crl]` (`listen`, `next_update`,
//! `distribution_point`):
//! [`crate::serve::config::crl`].
//!
//! The admin API listener is the table `[admin]` (or the top-level `admin_listen`,
//! `BC_ADMIN_LISTEN`): [`crate::serve::config::admin`].
//!
//! The folder: this file (the top-level keys, [`ServeArgs`], [`Settings`] and [`resolve`]), and
//! one file per table: [`admin`], [`attestors`] (which only hands each attestor its table),
//! [`crl`], [`limits`], [`publications`], [`quorum`], [`spiffe_bundle`], [`store`]. It only reads and checks configuration: it must never open
//! a store, bind a listener or start a task (that is `crate::serve`'s), and it names nothing of
//! `crate::up` (`up/config_error.rs` turns its errors into `bcctl up`'s).

pub(crate) mod admin;
pub(crate) mod attestors;
pub(crate) mod crl;
pub(crate) mod limits;
pub(crate) mod oidc;
pub(crate) mod publications;
pub(crate) mod quorum;
pub(crate) mod spiffe_bundle;
pub(crate) mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use gateway::limits::EdgeLimits;
use gateway::limits_join::JoinRefusalLimits;
use serde::Deserialize;

use crate::serve::config::attestors::{attestor_tables, external_attestors, FileAttestors};
use crate::serve::config::limits::{api_limits, public_limits, FileLimits};

/// Why the configuration could not be resolved. The same texts as the `ServeError` variants of
/// the same names, into which `crate::up::config_error` turns them.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the configuration: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid bcctl serve configuration: {message}")]
    ConfigSyntax { path: PathBuf, message: String },
    #[error("configuration {key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("configuration {0}")]
    Limits(#[from] gateway::limits::LimitsError),
    /// An attestor refused its table (the message names the key, `attestors.tpm.ek_roots: …`).
    #[error("configuration {0}")]
    Attestor(String),
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
    /// The PKI bundle (overrides BC_PKI_BUNDLE and the file); `--pki-bundle` is the same flag.
    #[arg(long = "pki", alias = "pki-bundle", value_name = "FILE")]
    pub pki_bundle: Option<PathBuf>,
    /// text or json logs on standard error.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Serve a plaintext PKI bundle even though a deployment secret is set (development only).
    #[arg(long)]
    pub allow_plaintext: bool,
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
    pub database_pool_size: Option<u32>,
    pub read_database_url: Option<String>,
    pub read_pool_size: Option<u32>,
    pub audit_seal_interval: Option<String>,
    pub root_tenant: Option<String>,
    pub record_trust_reports: Option<bool>,
    pub log_format: Option<LogFormat>,
    pub trust_version_floor: Option<u64>,
    pub api_internal_listen: Option<String>,
    pub api_health_listen: Option<String>,
    pub api_internal_names: Option<Vec<String>>,
    pub api_internal_url: Option<String>,
    pub internal_cert: Option<PathBuf>,
    pub internal_key: Option<PathBuf>,
    pub internal_reload_interval: Option<String>,
    pub allow_plaintext: Option<bool>,
    pub limits: Option<FileLimits>,
    pub api_limits: Option<FileLimits>,
    pub attestors: Option<FileAttestors>,
    pub sites: Option<FileSites>,
    pub quorum: Option<crate::serve::config::quorum::FileQuorum>,
    pub batch_expiry_interval: Option<String>,
    pub command_poll_interval: Option<String>,
    pub tls: Option<FileTls>,
    pub admin: Option<crate::serve::config::admin::FileAdmin>,
    pub crl: Option<crate::serve::config::crl::FileCrl>,
    /// The admin listener's address as `bcctl up` writes it (`[admin] listen` wins).
    pub admin_listen: Option<String>,
    pub spiffe_bundle: Option<crate::serve::config::spiffe_bundle::FileSpiffeBundle>,
    pub oidc: Option<crate::serve::config::oidc::FileOidc>,
}

/// `[tls]`: the gateway's serving certificate from files.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTls {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub reload_interval: Option<String>,
}

/// `[sites]`: the site agents' boot lease.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSites {
    /// How long a boot lease holding lasts unless renewed (default "60s", at least "1s"; the
    /// holder renews every third of it). `BC_SITES_BOOT_LEASE_TTL` overrides it.
    pub boot_lease_ttl: Option<String>,
}

/// Everything resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration file these settings came from (`--config`), if any.
    pub config_file: Option<PathBuf>,
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
    /// Pool sizes, the read replica, the log hub's safety poll.
    pub store: crate::serve::config::store::StoreSettings,
    /// How often the audit sealer signs a checkpoint of every tenant whose tree grew.
    pub audit_seal_interval: Duration,
    pub root_tenant: String,
    pub record_trust_reports: bool,
    pub log_format: LogFormat,
    /// The published trust bundle version is never below it (pki.trustVersion).
    pub trust_version_floor: u64,
    /// `api`: where gateways connect.
    pub api_internal_listen: SocketAddr,
    /// `api`: where `grpc.health.v1.Health` alone is served (`None`: off).
    pub api_health_listen: Option<SocketAddr>,
    /// `api`: the names its internal certificate carries.
    pub api_internal_names: Vec<String>,
    /// `gateway`: the api's internal endpoint, `host:port`.
    pub api_internal_url: Option<String>,
    /// `gateway`: its internal client certificate chain (PEM).
    pub internal_cert: Option<PathBuf>,
    /// `gateway`: its internal client key (PKCS#8 PEM, mode 0600).
    pub internal_key: Option<PathBuf>,
    /// `gateway`: how often the internal certificate's files are looked at.
    pub internal_reload_interval: Duration,
    /// Serve a plaintext bundle while a deployment secret is set (refused otherwise).
    pub allow_plaintext: bool,
    /// The agent-facing endpoint's edge limits (`[limits]`).
    pub limits: EdgeLimits,
    /// The per-peer limit on refused joins (`[limits]`).
    pub join_refusals: JoinRefusalLimits,
    /// The internal endpoint's edge limits (`[api_limits]`, role `api`).
    pub api_limits: EdgeLimits,
    /// Out-of-process attestors (`[[attestors.external]]`), registered with the JoinService.
    pub external_attestors: Vec<gateway::external_attestor::ExternalAttestorConfig>,
    /// The built-in attestors that run, each read from its table `[attestors.<id>]` by its
    /// factory; built with what the deployment gives them when the server starts.
    pub attestors: Vec<domain::attest::Configured>,
    /// `[sites]`: the boot lease's TTL.
    pub sites: commands::site::SiteSettings,
    /// The approver quorum to publish (`[quorum]`); `None`: keep the published one.
    pub quorum: Option<crate::serve::config::quorum::QuorumConfig>,
    /// How often the batch expiry reconciler runs.
    pub batch_expiry_interval: Duration,
    /// How often a gateway looks for nodes with newly runnable commands.
    pub command_poll_interval: Duration,
    /// The gateway's serving certificate from files (`[tls]`).
    pub tls_files: Option<gateway::tls_files::TlsFiles>,
    /// The admin API listener (`[admin]`, [`crate::serve::config::admin`]); `None`: none.
    pub admin: Option<crate::serve::config::admin::AdminSettings>,
    /// The SPIFFE bundle endpoint (`[spiffe_bundle]`); `None`: none.
    pub spiffe_bundle: Option<gateway::trust::spiffe_bundle::SpiffeBundleEndpoint>,
    /// The node CA's revocation list (`[crl]`, [`crate::serve::config::crl`]).
    pub crl: gateway::publish::crl::CrlOptions,
    /// The URL node certificates name as their CRL distribution point (`[crl]`); `None`: none.
    pub crl_distribution_point: Option<domain::pki::CrlDistributionPoint>,
    /// Workload identity's issuer (`[oidc]`, [`crate::serve::config::oidc`]); `None`: none.
    pub oidc: Option<crate::serve::config::oidc::OidcConfig>,
}

fn list_env(name: &str) -> Option<Vec<String>> {
    env(name).map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

pub use domain::duration::parse_duration;

pub(crate) fn env(name: &str) -> Option<String> {
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
) -> Result<Duration, ConfigError> {
    let text = env(env_name)
        .or(file)
        .unwrap_or_else(|| default.to_string());
    parse_duration(&text).map_err(|message| ConfigError::Invalid { key, message })
}

fn socket(key: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|e| ConfigError::Invalid {
        key,
        message: format!("{text:?} is not host:port with an IP address: {e}"),
    })
}

/// The role and log format: the flag, else `BC_ROLE` / `BC_LOG_FORMAT`, else the file's.
fn role_and_log_format(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<(Role, LogFormat), ConfigError> {
    let role_env = env("BC_ROLE").map(|r| match r.as_str() {
        "api" => Ok(Role::Api),
        "gateway" => Ok(Role::Gateway),
        "all" => Ok(Role::All),
        other => Err(ConfigError::Invalid {
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
            return Err(ConfigError::Invalid {
                key: "log_format",
                message: format!("{f:?} is not text or json"),
            })
        }
        (None, None) => file.log_format.unwrap_or(LogFormat::Text),
    };
    Ok((role, log_format))
}

/// Reads the file (if any), then applies the environment and the flags.
pub fn resolve(args: &ServeArgs) -> Result<Settings, ConfigError> {
    let mut file: FileConfig = match &args.config {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadConfig {
                path: path.clone(),
                source,
            })?;
            toml::from_str(&text).map_err(|e| ConfigError::ConfigSyntax {
                path: path.clone(),
                message: e.to_string(),
            })?
        }
    };
    let (role, log_format) = role_and_log_format(args, &file)?;
    let listen = pick(args.listen.clone(), "BC_LISTEN", file.listen, Some)
        .unwrap_or_else(|| "127.0.0.1:8443".into());
    let metrics_listen = env("BC_METRICS_LISTEN")
        .or(file.metrics_listen)
        // Off the gateway's port, so an api and a gateway on one host both serve by default.
        .unwrap_or_else(|| match role {
            Role::Api => "127.0.0.1:9465".into(),
            _ => "127.0.0.1:9464".into(),
        });
    let trust_version_floor = match env("BC_TRUST_VERSION_FLOOR") {
        Some(v) => v.parse::<u64>().map_err(|_| ConfigError::Invalid {
            key: "trust_version_floor",
            message: format!("{v:?} is not a whole number"),
        })?,
        None => file.trust_version_floor.unwrap_or(0),
    };
    let api_internal_listen = env("BC_API_INTERNAL_LISTEN")
        .or(file.api_internal_listen)
        .unwrap_or_else(|| "127.0.0.1:9443".into());
    let (limits, join_refusals) = public_limits(&file.limits, parse_duration)?;
    let api_limits = api_limits(&file.api_limits, parse_duration)?;
    let external_attestors =
        external_attestors(&file.attestors, parse_duration).map_err(|message| {
            ConfigError::Invalid {
                key: "attestors.external",
                message,
            }
        })?;
    let tables =
        attestor_tables(&file.attestors, env("BC_X509POP_GRACE")).map_err(ConfigError::Attestor)?;
    let attestors = domain::attest::configure(commands::identity::attestors::FACTORIES, &tables)
        .map_err(ConfigError::Attestor)?;
    let boot_lease_ttl = duration_setting(
        "sites.boot_lease_ttl",
        "BC_SITES_BOOT_LEASE_TTL",
        file.sites.as_ref().and_then(|s| s.boot_lease_ttl.clone()),
        "60s",
    )?;
    if boot_lease_ttl < Duration::from_secs(1) {
        return Err(ConfigError::Invalid {
            key: "sites.boot_lease_ttl",
            message: format!(
                "{boot_lease_ttl:?} is too short: at least \"1s\" (the holder renews every third of it)"
            ),
        });
    }
    let quorum = crate::serve::config::quorum::quorum_settings(file.quorum.as_ref())
        .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
    let batch_expiry_interval = duration_setting(
        "batch_expiry_interval",
        "BC_BATCH_EXPIRY_INTERVAL",
        file.batch_expiry_interval.clone(),
        "60s",
    )?;
    let tls_files = tls_files(file.tls.take())?;
    let published = crate::serve::config::publications::publications(
        file.crl.as_ref(),
        file.spiffe_bundle.as_ref(),
        role != Role::Api,
        role != Role::Gateway,
        env,
    )
    .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
    let admin = crate::serve::config::admin::admin_settings(
        file.admin.as_ref(),
        file.admin_listen.as_deref(),
        env("BC_ADMIN_LISTEN"),
        parse_duration,
    )
    .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
    if admin.is_some() && role == Role::Gateway {
        return Err(ConfigError::Invalid {
            key: "admin",
            message: "the admin API runs where the keys and the store are (role all or api), not on a gateway: leave [admin], admin_listen and BC_ADMIN_LISTEN out".into(),
        });
    }
    let command_poll_interval = duration_setting(
        "command_poll_interval",
        "BC_COMMAND_POLL_INTERVAL",
        file.command_poll_interval.clone(),
        "5s",
    )?;
    let internal_reload_interval = duration_setting(
        "internal_reload_interval",
        "BC_INTERNAL_RELOAD_INTERVAL",
        file.internal_reload_interval.clone(),
        "60s",
    )?;
    for (key, value) in [
        ("batch_expiry_interval", batch_expiry_interval),
        ("command_poll_interval", command_poll_interval),
        ("internal_reload_interval", internal_reload_interval),
    ] {
        if value < Duration::from_millis(10) {
            return Err(ConfigError::Invalid {
                key,
                message: format!("{value:?} is too short: at least \"10ms\""),
            });
        }
    }
    let record_trust_reports = match env("BC_RECORD_TRUST_REPORTS") {
        Some(v) => v != "false" && v != "0",
        None => file.record_trust_reports.unwrap_or(true),
    };
    let allow_plaintext = args.allow_plaintext
        || match env("BC_ALLOW_PLAINTEXT") {
            Some(v) => v == "true" || v == "1",
            None => file.allow_plaintext.unwrap_or(false),
        };
    let database_url = pick(
        args.database_url.clone(),
        "DATABASE_URL",
        file.database_url.clone(),
        Some,
    )
    .unwrap_or_else(|| "sqlite://.bcctl/events.db".into());
    let store = crate::serve::config::store::store_settings(
        crate::serve::config::store::FileStore {
            pool_size: file.database_pool_size,
            read_database_url: file.read_database_url.as_deref(),
            read_pool_size: file.read_pool_size,
            feed_poll_interval: file.feed_poll_interval.as_deref(),
        },
        role == Role::Gateway,
        &database_url,
        &crate::serve::config::store::Sources {
            env: &env,
            parse_duration: &parse_duration,
        },
    )
    .map_err(|(key, message)| ConfigError::Invalid { key, message })?;
    Ok(Settings {
        config_file: args.config.clone(),
        listen: socket("listen", &listen)?,
        database_url,
        pki_bundle: pick(
            args.pki_bundle.clone(),
            "BC_PKI_BUNDLE",
            file.pki_bundle,
            |v| Some(PathBuf::from(v)),
        )
        .unwrap_or_else(|| PathBuf::from(crate::deployment::DEFAULT_BUNDLE)),
        deployment_secret_file: env(crate::deployment::SECRET_FILE_ENV)
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
        store,
        root_tenant: env("BC_ROOT_TENANT")
            .or(file.root_tenant)
            .unwrap_or_else(|| "root".into()),
        record_trust_reports,
        log_format,
        trust_version_floor,
        api_internal_listen: socket("api_internal_listen", &api_internal_listen)?,
        api_health_listen: match env("BC_API_HEALTH_LISTEN")
            .or(file.api_health_listen)
            .as_deref()
        {
            Some("off" | "") => None,
            Some(h) => Some(socket("api_health_listen", h)?),
            None => Some(socket("api_health_listen", "127.0.0.1:9444")?),
        },
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
        internal_reload_interval,
        allow_plaintext,
        limits,
        join_refusals,
        api_limits,
        external_attestors,
        attestors,
        sites: commands::site::SiteSettings { boot_lease_ttl },
        quorum,
        batch_expiry_interval,
        command_poll_interval,
        tls_files,
        admin,
        spiffe_bundle: published.spiffe_bundle,
        crl: published.crl,
        crl_distribution_point: published.crl_distribution_point,
        oidc: crate::serve::config::oidc::oidc_settings(file.oidc.as_ref(), role == Role::Api)
            .map_err(|(key, message)| ConfigError::Invalid { key, message })?,
    })
}

fn tls_files(file: Option<FileTls>) -> Result<Option<gateway::tls_files::TlsFiles>, ConfigError> {
    let Some(tls) = file else {
        return Ok(None);
    };
    let interval = match &tls.reload_interval {
        Some(text) => parse_duration(text).map_err(|message| ConfigError::Invalid {
            key: "tls.reload_interval",
            message,
        })?,
        None => gateway::tls_files::DEFAULT_RELOAD_INTERVAL,
    };
    match (tls.cert_file, tls.key_file) {
        (Some(cert), Some(key)) => Ok(Some(gateway::tls_files::TlsFiles {
            cert,
            key,
            interval,
        })),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Invalid {
            key: "tls",
            message:
                "give both cert_file and key_file (from `bcctl pki issue-gateway`), or neither"
                    .into(),
        }),
    }
}
