//! The errors of `bcctl serve` (and of `bcctl up` while starting the server), in a file of their
//! own so that every serve module can name them without importing another's: no import circle.

use std::path::PathBuf;

use crate::serve::config::ConfigError;

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
    #[error("configuration {0}")]
    Limits(gateway::limits::LimitsError),
    /// An attestor refused its table, or could not be built with what the deployment gives
    /// (the message names the key).
    #[error("configuration {0}")]
    Attestor(String),
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
    #[error("{0}")]
    Deployment(#[from] crate::deployment::DeploymentError),
    #[error("store: {0}")]
    Store(#[from] events::store::StoreError),
    #[error("{0}")]
    Leader(#[from] events::store::LeaderError),
    #[error("JoinService: {0}")]
    Identity(#[from] commands::identity::IdentityError),
    #[error("gateway: {0}")]
    Start(#[from] gateway::run::StartError),
    #[error("{0}")]
    Admin(#[from] crate::admin::server::AdminStartError),
    #[error("the server stopped: {0}")]
    Stopped(String),
}

impl From<ConfigError> for ServeError {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::ReadConfig { path, source } => ServeError::ReadConfig { path, source },
            ConfigError::ConfigSyntax { path, message } => {
                ServeError::ConfigSyntax { path, message }
            }
            ConfigError::Invalid { key, message } => ServeError::Invalid { key, message },
            ConfigError::Limits(e) => ServeError::Limits(e),
            ConfigError::Attestor(message) => ServeError::Attestor(message),
        }
    }
}
