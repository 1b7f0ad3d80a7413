//! `bcctl up`: the quickest way to a running control plane on the embedded default.
//!
//! It creates the working directory (default `./.bcctl`, mode 0700), a development deployment
//! secret (`deployment-secret`, mode 0600) when `BC_DEPLOYMENT_SECRET` is unset, the PKI bundle
//! (`pki.json`, sealed) when missing, and the SQLite store (`events.db`), unless
//! `--database-url` names another store. It starts serving on 127.0.0.1 (`--port`, 0 picks one),
//! creates a join token, writes a ready bcd configuration (`bcd/config.toml` with the server and
//! the three pins, and `bcd/join-encryption.jwk`, `bcd/join-signing.jwk` beside it), prints the
//! token and the exact `bcd join` command, and serves until Ctrl-C.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use clap::Args;
use commands::identity::NewToken;
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::{
    seal_bundle, DeploymentSecret, KeySet, KeySetLifetimes, PublicKey, TrustDomain,
    DEPLOYMENT_SECRET_ENV,
};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::Deployment;
use crate::serve_cmd::{self, LogFormat, ServeArgs, ServeError};

/// Errors of `bcctl up`.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Pki(#[from] crate::pki_cmd::PkiCmdError),
    #[error("{0}")]
    Serve(#[from] ServeError),
    #[error("{0}")]
    Setup(String),
}

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

fn io(path: &Path) -> impl Fn(std::io::Error) -> UpError + '_ {
    move |source| UpError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn create_private_dir(dir: &Path) -> Result<(), UpError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

/// The deployment secret: `BC_DEPLOYMENT_SECRET` if set (nothing written), else the file in the
/// working directory, created with 32 random bytes (base64url) on first use; read the one way
/// every command reads it ([`Deployment`]).
fn secret(dir: &Path) -> Result<(DeploymentSecret, Option<PathBuf>), UpError> {
    let deployment = Deployment::in_dir(dir);
    let from_env = std::env::var(DEPLOYMENT_SECRET_ENV).is_ok_and(|v| !v.is_empty());
    let file = deployment.secret_file.clone();
    if let (false, Some(path)) = (from_env, &file) {
        if !path.exists() {
            let mut raw = [0u8; 32];
            SystemRandom::new()
                .fill(&mut raw)
                .map_err(|_| UpError::Setup("no randomness for the deployment secret".into()))?;
            crate::pki_cmd::write_new_private(path, URL_SAFE_NO_PAD.encode(raw).as_bytes())?;
        }
    }
    let s = deployment
        .required_secret()
        .map_err(|e| UpError::Setup(e.to_string()))?;
    Ok((s, if from_env { None } else { file }))
}

fn jwk(key: &PublicKey) -> String {
    let p = key.uncompressed_point();
    json!({
        "kty": "EC",
        "crv": "P-256",
        "x": URL_SAFE_NO_PAD.encode(&p[1..33]),
        "y": URL_SAFE_NO_PAD.encode(&p[33..65]),
    })
    .to_string()
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_replace(path: &Path, bytes: &[u8]) -> Result<(), UpError> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

pub async fn up(args: UpArgs) -> Result<(), UpError> {
    create_private_dir(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir).map_err(io(&args.dir))?;
    let (secret, secret_file) = secret(&dir)?;
    let bundle = Deployment::in_dir(&dir).bundle;
    if !bundle.exists() {
        let td = TrustDomain::new(&args.trust_domain)
            .map_err(|e| UpError::Setup(format!("--trust-domain: {e}")))?;
        let keys = KeySet::generate(td, OffsetDateTime::now_utc(), KeySetLifetimes::default())
            .map_err(|e| UpError::Setup(format!("generating the key set: {e}")))?;
        let bytes = seal_bundle(&keys, &secret)
            .map_err(|e| UpError::Setup(format!("sealing the bundle: {e}")))?;
        crate::pki_cmd::write_new_private(&bundle, &bytes)?;
    }
    let mut settings = serve_cmd::resolve(&ServeArgs {
        config: args.config.clone(),
        log_format: args.log_format,
        ..ServeArgs::default()
    })?;
    settings.listen = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port));
    settings.metrics_listen = Some(SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::LOCALHOST,
        args.metrics_port,
    )));
    settings.database_url = match &args.database_url {
        Some(u) => u.clone(),
        None => format!("sqlite://{}", dir.join("events.db").display()),
    };
    settings.pki_bundle = bundle.clone();
    settings.deployment_secret_file = secret_file.clone();
    settings.role = serve_cmd::Role::All;
    serve_cmd::init_logging(settings.log_format);
    let ttl = serve_cmd::parse_duration(&args.token_ttl)
        .map_err(|e| UpError::Setup(format!("--token-ttl: {e}")))?;

    let mut started = serve_cmd::start(&settings).await?;
    let addr = started.running.addr;
    let created = started
        .join
        .create_token(&NewToken {
            tenant_id: "default".into(),
            site_id: "site-1".into(),
            pool_id: "default".into(),
            role: TokenRole::Node,
            uses: args.token_uses,
            ttl_seconds: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
            expect: ExpectBinding::default(),
            allow_reclaim: false,
            reclaim_node_id: None,
            for_node_id: None,
            require_approval: false,
        })
        .await
        .map_err(|e| UpError::Setup(format!("creating the join token: {e}")))?;

    // A ready bcd configuration: the server, the three pins and the two public keys beside it.
    let keys = &started.keys;
    let pins = keys.pins();
    let bcd_dir = dir.join("bcd");
    std::fs::create_dir_all(&bcd_dir).map_err(io(&bcd_dir))?;
    let bcd_data = bcd_dir.join("data");
    let bcd_config = bcd_dir.join("config.toml");
    let config_text = format!(
        "# Written by `bcctl up`: a bcd configuration for this development server.\n\
         server = \"{addr}\"\n\
         data_dir = \"{}\"\n\
         serving_ca_spki_pin = \"{}\"\n\
         join_encryption_key_pin = \"{}\"\n\
         join_signing_key_pin = \"{}\"\n",
        bcd_data.display(),
        pins.serving_ca,
        pins.join_encryption,
        pins.join_signing,
    );
    write_replace(&bcd_config, config_text.as_bytes())?;
    let enc_path = bcd_dir.join("join-encryption.jwk");
    let sig_path = bcd_dir.join("join-signing.jwk");
    write_replace(&enc_path, jwk(keys.join_encryption.public_key()).as_bytes())?;
    write_replace(&sig_path, jwk(keys.join_signing.public_key()).as_bytes())?;

    // The serving CA certificate, for clients that pin by certificate rather than by key.
    write_replace(
        &dir.join("bcd").join("serving-ca.pem"),
        pem("CERTIFICATE", keys.serving_ca.cert_der()).as_bytes(),
    )?;
    let join_command = format!(
        "printf '%s\\n' '{}' | bcd join --config {}",
        created.secret,
        bcd_config.display()
    );
    let metrics = started
        .running
        .metrics_addr
        .map(|a| format!("http://{a}/metrics"));
    if args.json {
        println!(
            "{}",
            json!({
                "address": addr.to_string(),
                "metrics": metrics,
                "trustDomain": keys.trust_domain.to_string(),
                "token": created.secret,
                "tokenId": created.token.token_id,
                "dir": dir.display().to_string(),
                "databaseUrl": redact(&settings.database_url),
                "pkiBundle": bundle.display().to_string(),
                "deploymentSecretFile": secret_file.as_ref().map(|p| p.display().to_string()),
                "servingCa": format!("{}", dir.join("bcd").join("serving-ca.pem").display()),
                "bcdConfig": bcd_config.display().to_string(),
                "bcdDataDir": bcd_data.display().to_string(),
                "joinEncryptionKey": enc_path.display().to_string(),
                "joinSigningKey": sig_path.display().to_string(),
                "joinCommand": join_command,
                "pins": pins,
            })
        );
    } else {
        println!("bcctl up: serving {} on {addr}", keys.trust_domain);
        println!("  store:       {}", redact(&settings.database_url));
        println!("  PKI bundle:  {}", bundle.display());
        if let Some(p) = &secret_file {
            println!(
                "  dev secret:  {} (set {DEPLOYMENT_SECRET_ENV} for a real deployment)",
                p.display()
            );
        }
        if let Some(m) = &metrics {
            println!("  metrics:     {m}");
        }
        println!("  bcd config:  {}", bcd_config.display());
        println!();
        println!(
            "join token (shown once, {} use(s), valid {}):",
            args.token_uses, args.token_ttl
        );
        println!("  {}", created.secret);
        println!();
        println!("join a machine with:");
        println!("  {join_command}");
        println!("then run the node:");
        println!("  bcd node --config {}", bcd_config.display());
        println!();
        println!("serving until Ctrl-C");
    }
    let _ = std::io::stdout().flush();
    serve_cmd::until_stopped(&mut started.running).await?;
    started.shutdown().await;
    Ok(())
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
