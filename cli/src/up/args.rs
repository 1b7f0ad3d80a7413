//! The arguments of `bcctl up` ([`UpArgs`]; the verb is [`crate::up::cmd`]).

use std::path::PathBuf;

use clap::Args;

use crate::serve::config::LogFormat;

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Working directory (created, mode 0700).
    #[arg(long, default_value = ".bcctl")]
    pub dir: PathBuf,
    /// Use this store (postgres://...) instead of the embedded SQLite file.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Port on 127.0.0.1 for agents; 0 picks a free one (printed).
    #[arg(long, default_value_t = 8443)]
    pub port: u16,
    /// Port on 127.0.0.1 for the admin API (operator certificates over mTLS); default: any free
    /// port with --port 0, else --port + 1.
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Port on 127.0.0.1 for Prometheus metrics; 0 (default) picks a free one (printed).
    #[arg(long, default_value_t = 0)]
    pub metrics_port: u16,
    /// Trust domain of a newly created PKI bundle.
    #[arg(long, default_value = "bc.local")]
    pub trust_domain: String,
    /// Uses of the printed join token.
    #[arg(long, default_value_t = 1)]
    pub token_uses: u32,
    /// Lifetime of the printed join token, e.g. 1h.
    #[arg(long, default_value = "1h")]
    pub token_ttl: String,
    /// Optional serve configuration file (same keys as `bcctl serve --config`; the directory's
    /// paths, the port and the store above win).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// text or json logs on standard error.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Print the startup facts as one JSON line.
    #[arg(long)]
    pub json: bool,
}
