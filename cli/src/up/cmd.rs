//! `bcctl up`: the quickest way to a running control plane on the embedded default.
//!
//! It creates the working directory (default `./.bcctl`, mode 0700), a development deployment
//! secret (`deployment-secret`, mode 0600) when `BC_DEPLOYMENT_SECRET` is unset, the PKI bundle
//! (`pki.json`, sealed) when missing, and the SQLite store (`events.db`), unless
//! `--database-url` names another store. It starts serving on 127.0.0.1 (`--port`, 0 picks one),
//! writes `bcctl.toml` (a `bcctl serve` configuration with absolute paths, which every verb run
//! with `--dir DIR`, or in the directory holding `./.bcctl`, reads), writes a ready bcd
//! configuration ([`crate::deployment::node_setup`]: `bcd/config.toml`, the two JoinService
//! JWKs, the serving CA), creates a join token in `bcd/join-token` (mode 0600) unless an unused
//! one made by an earlier run is still valid, prints the `bcd join --token-file` step, and
//! serves until Ctrl-C.
//!
//! A port in use is reported with the way out (`--port 0`); a directory this run created is
//! removed again when `up` fails before serving.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use commands::identity::{NewToken, TokenView};
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::{
    seal_bundle_with, DeploymentSecret, KeySet, KeySetLifetimes, TrustDomain, DEPLOYMENT_SECRET_ENV,
};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::node_setup::{self, NodeSetup};
use crate::deployment::{Deployment, DIR_CONFIG_FILE};
use crate::serve::start::{self, ServeArgs, ServeError};
pub use crate::up::args::UpArgs;

/// Errors of `bcctl up`.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Pki(#[from] crate::verbs::pki::PkiCmdError),
    #[error("{0}")]
    Serve(#[from] ServeError),
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    NodeSetup(#[from] crate::deployment::node_setup::NodeSetupError),
    #[error("port {port} on 127.0.0.1 is in use ({source}): stop what listens there (an earlier `bcctl up`?), pass another --port, or `bcctl up --port 0` to pick a free one")]
    PortBusy { port: u16, source: std::io::Error },
    #[error("admin port {port} on 127.0.0.1 is in use ({source}): pass another --admin-port, or 0 to pick a free one")]
    AdminPortBusy { port: u16, source: std::io::Error },
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
            crate::verbs::pki::write_new_private(path, URL_SAFE_NO_PAD.encode(raw).as_bytes())?;
        }
    }
    let s = deployment
        .required_secret()
        .map_err(|e| UpError::Setup(e.to_string()))?;
    Ok((s, if from_env { None } else { file }))
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
    let created_dir = !args.dir.exists();
    let result = up_in(&args).await;
    if let Err(e) = &result {
        if created_dir && !matches!(e, UpError::Serve(ServeError::Stopped(_))) {
            // Nothing was served from a directory this run made: leave nothing half-made.
            let _ = std::fs::remove_dir_all(&args.dir);
        }
    }
    result
}

/// The toml string of `text`.
fn toml_str(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// `DIR/bcctl.toml`: a `bcctl serve` configuration naming this deployment with absolute paths.
fn dir_config(
    addr: SocketAddr,
    admin: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    database_url: &str,
    bundle: &Path,
    secret_file: Option<&Path>,
) -> String {
    let mut out = format!(
        "# Written by `bcctl up`: this deployment as a `bcctl serve` configuration. Every bcctl\n\
         # verb run with --dir on this directory (or where ./.bcctl is) reads it.\n\
         listen = {}\n\
         database_url = {}\n\
         pki_bundle = {}\n",
        toml_str(&addr.to_string()),
        toml_str(database_url),
        toml_str(&bundle.display().to_string()),
    );
    if let Some(f) = secret_file {
        out.push_str(&format!(
            "deployment_secret_file = {}\n",
            toml_str(&f.display().to_string())
        ));
    }
    if let Some(a) = admin {
        out.push_str(&format!("admin_listen = {}\n", toml_str(&a.to_string())));
    }
    // The address the metrics listener got (a free port unless --metrics-port): `bcctl doctor`
    // reads the revocation feed's lag there, not at the default 127.0.0.1:9464.
    let metrics = metrics.map_or_else(|| "off".to_string(), |m| m.to_string());
    out.push_str(&format!("metrics_listen = {}\n", toml_str(&metrics)));
    out
}

/// An unused, unexpired, unrevoked node token of the default tenant and site: an earlier run's.
fn unused_token(tokens: &[TokenView], now_us: i64) -> Option<&TokenView> {
    tokens.iter().rev().find(|t| {
        t.tenant_id == crate::verbs::token::DEFAULT_TENANT
            && t.site_id == crate::verbs::token::DEFAULT_SITE
            && t.role == "node"
            && t.revoked_at_us.is_none()
            && t.uses_left == t.uses_total
            && t.uses_left > 0
            && t.expires_at_us > now_us
    })
}

/// The admin listener of `up` (on `admin.listen`, the directory as its deployment). A bundle
/// without an operator CA (made before) serves without it, as `admin API: off`.
async fn start_admin(
    settings: &start::Settings,
    admin: crate::serve::config::admin::AdminSettings,
    started: &start::Started,
    dir: &Path,
) -> Result<Option<crate::admin::server::RunningAdmin>, UpError> {
    use crate::admin::server::AdminStartError;
    let mut settings = settings.clone();
    let port = admin.listen.port();
    settings.admin = Some(admin);
    match crate::admin::server::start_for(
        &settings,
        &started.keys,
        &started.store,
        &started.clock,
        Some(dir.to_path_buf()),
        Some(&started.hub),
    )
    .await
    {
        Ok(a) => Ok(a),
        Err(AdminStartError::NoOperatorCa) => {
            tracing::warn!("{}", AdminStartError::NoOperatorCa);
            Ok(None)
        }
        Err(AdminStartError::Listen { source, .. })
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            Err(UpError::AdminPortBusy { port, source })
        }
        Err(e) => Err(UpError::Serve(e.into())),
    }
}

/// A new deployment's key set, sealed under `secret` at the cost the environment asks
/// (`verbs::pki::kdf`), written to `bundle` (never over an existing file).
fn create_bundle(
    bundle: &Path,
    trust_domain: &str,
    secret: &DeploymentSecret,
) -> Result<(), UpError> {
    let td = TrustDomain::new(trust_domain)
        .map_err(|e| UpError::Setup(format!("--trust-domain: {e}")))?;
    let keys = KeySet::generate(td, OffsetDateTime::now_utc(), KeySetLifetimes::default())
        .map_err(|e| UpError::Setup(format!("generating the key set: {e}")))?;
    let kdf = crate::verbs::pki::kdf::sealing_kdf().map_err(UpError::Setup)?;
    let bytes = seal_bundle_with(&keys, secret, kdf)
        .map_err(|e| UpError::Setup(format!("sealing the bundle: {e}")))?;
    crate::verbs::pki::write_new_private(bundle, &bytes)?;
    Ok(())
}

async fn up_in(args: &UpArgs) -> Result<(), UpError> {
    create_private_dir(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir).map_err(io(&args.dir))?;
    let (secret, secret_file) = secret(&dir)?;
    let bundle = Deployment::in_dir(&dir).bundle;
    if !bundle.exists() {
        create_bundle(&bundle, &args.trust_domain, &secret)?;
    }
    let mut settings = start::resolve(&ServeArgs {
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
    settings.role = start::Role::All;
    let admin_port = args.admin_port.unwrap_or(if args.port == 0 {
        0
    } else {
        args.port.saturating_add(1)
    });
    let mut admin_settings = settings.admin.take().unwrap_or_else(|| {
        crate::serve::config::admin::AdminSettings::on(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::LOCALHOST,
            admin_port,
        )))
    });
    admin_settings.listen = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, admin_port));
    start::init_logging(settings.log_format);
    let ttl = start::parse_duration(&args.token_ttl)
        .map_err(|e| UpError::Setup(format!("--token-ttl: {e}")))?;

    let mut started = match start::start(&settings).await {
        Ok(s) => s,
        Err(ServeError::Start(gateway::run::StartError::Listen { addr, source }))
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            return Err(UpError::PortBusy {
                port: addr.port(),
                source,
            })
        }
        Err(e) => return Err(e.into()),
    };
    let addr = started.running.addr;
    let admin = start_admin(&settings, admin_settings, &started, &dir).await;
    let admin = match admin {
        Ok(a) => a,
        Err(e) => {
            started.shutdown().await;
            return Err(e);
        }
    };
    let admin_addr = admin.as_ref().map(|a| a.addr);
    started.admin = admin;
    let bcctl_toml = dir.join(DIR_CONFIG_FILE);
    node_setup::write_replace(
        &bcctl_toml,
        dir_config(
            addr,
            admin_addr,
            started.running.metrics_addr,
            &settings.database_url,
            &bundle,
            secret_file.as_deref(),
        )
        .as_bytes(),
        0o600,
    )?;

    // A ready bcd configuration: the server, the pins and the two public keys beside it.
    let keys = started.keys.clone();
    let pins = keys.pins();
    let bcd_dir = dir.join("bcd");
    let bcd_data = bcd_dir.join("data");
    let public = Deployment::in_dir(&dir)
        .public_half()
        .map_err(|e| UpError::Setup(e.to_string()))?;
    let setup = NodeSetup::new(&public.public, addr.to_string(), bcd_data.clone())?;
    setup.write_to(&bcd_dir, "bcctl up")?;
    let bcd_config = bcd_dir.join(node_setup::CONFIG_FILE);
    let enc_path = bcd_dir.join(node_setup::ENCRYPTION_JWK);
    let sig_path = bcd_dir.join(node_setup::SIGNING_JWK);
    let serving_ca = bcd_dir.join(node_setup::SERVING_CA_PEM);
    let token_file = bcd_dir.join(node_setup::TOKEN_FILE);
    let join_command = setup.join_command(&node_setup::bcd_program(), &bcd_config, &token_file);

    let now_us =
        i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000).unwrap_or(i64::MAX);
    let earlier = started
        .join
        .list_tokens(None)
        .await
        .map_err(|e| UpError::Setup(format!("listing the join tokens: {e}")))?;
    let reused = unused_token(&earlier, now_us).cloned();
    let created = match &reused {
        Some(_) => None,
        None => {
            let created = started
                .join
                .create_token(&NewToken {
                    tenant_id: crate::verbs::token::DEFAULT_TENANT.into(),
                    site_id: crate::verbs::token::DEFAULT_SITE.into(),
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
            let _ = std::fs::remove_file(&token_file);
            crate::verbs::pki::write_new_private(
                &token_file,
                format!("{}\n", created.secret).as_bytes(),
            )?;
            Some(created)
        }
    };
    let token_kept = token_file.is_file();
    let token = match (&created, &reused) {
        (Some(c), _) => c.token.clone(),
        (None, Some(t)) => t.clone(),
        (None, None) => return Err(UpError::Setup("no join token".into())),
    };
    let bcd = node_setup::bcd_program();
    let metrics = started
        .running
        .metrics_addr
        .map(|a| format!("http://{a}/metrics"));
    if args.json {
        println!(
            "{}",
            json!({
                "address": addr.to_string(),
                "adminListen": admin_addr.map(|a| a.to_string()),
                "metrics": metrics,
                "trustDomain": keys.trust_domain.to_string(),
                "token": created.as_ref().map(|c| c.secret.clone()),
                "tokenId": token.token_id,
                "tokenReused": reused.is_some(),
                "tokenFile": token_kept.then(|| token_file.display().to_string()),
                "dir": dir.display().to_string(),
                "config": bcctl_toml.display().to_string(),
                "databaseUrl": redact(&settings.database_url),
                "pkiBundle": bundle.display().to_string(),
                "deploymentSecretFile": secret_file.as_ref().map(|p| p.display().to_string()),
                "servingCa": serving_ca.display().to_string(),
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
        println!(
            "  config:      {} (every bcctl verb run here, or with --dir {}, finds it)",
            bcctl_toml.display(),
            dir.display()
        );
        if let Some(p) = &secret_file {
            println!(
                "  dev secret:  {} (every bcctl verb run here finds it; set {DEPLOYMENT_SECRET_ENV} for a real deployment)",
                p.display()
            );
        }
        if let Some(m) = &metrics {
            println!("  metrics:     {m}");
        }
        match admin_addr {
            Some(a) => println!("  admin API:   {a} (mTLS: `bcctl pki issue-operator` makes a profile)"),
            None => println!("  admin API:   off (the PKI bundle has no operator CA: `bcctl pki add-operator-ca`)"),
        }
        println!("  bcd config:  {}", bcd_config.display());
        println!();
        match (&created, token_kept) {
            (Some(_), _) => println!(
                "join token {} ({} use(s), valid {}) written to {} (mode 0600; bcd deletes it after the join)",
                token.token_id,
                args.token_uses,
                args.token_ttl,
                token_file.display()
            ),
            (None, true) => println!(
                "join token {} from an earlier run is unused and valid until {}: no new token made; its secret is still in {}",
                token.token_id,
                crate::output::rfc3339_us(token.expires_at_us),
                token_file.display()
            ),
            (None, false) => {
                println!(
                    "join token {} from an earlier run is unused and valid until {}: no new token made; its secret was shown once and is not kept. Make another with:",
                    token.token_id,
                    crate::output::rfc3339_us(token.expires_at_us),
                );
                println!(
                    "  bcctl token create --dir {} --out {}",
                    dir.display(),
                    token_file.display()
                );
            }
        }
        println!();
        println!("join a machine with:");
        println!("  {join_command}");
        println!("then run the node:");
        println!("  {bcd} node --config {}", bcd_config.display());
        println!();
        println!("serving until Ctrl-C");
    }
    let _ = std::io::stdout().flush();
    start::until_stopped(&mut started.running).await?;
    started.shutdown().await;
    Ok(())
}
