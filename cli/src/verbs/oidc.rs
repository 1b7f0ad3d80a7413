//! `bcctl oidc keys list | add | promote KID | retire KID` and `bcctl oidc discovery` (issue
//! 43 items 1 and 2; `docs/WORKLOAD-IDENTITY.md`): the workload-identity issuer's signing keys
//! through [`OidcKeyAdmin`], and the two documents the gateway publishes, printed from the
//! store. `add` seals the new key's private half under the deployment secret, so it needs the
//! secret (`BC_DEPLOYMENT_SECRET[_FILE]`; through the admin API the server's).

use std::path::Path;
use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::oidc::{publication, OidcKeyAdmin, OidcKeyView};
use commands::DatabaseClock;
use domain::oidc::IssuerUrl;

use crate::output::print_json;
use crate::verbs::token::{fmt_us, print_table, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum OidcCommand {
    /// The issuer's signing keys: list, add, promote, retire.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the discovery document and the JWK Set the gateway serves.
    Discovery(DiscoveryArgs),
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// List the keys: id, state, when added, promoted, stopped, retired, retirable.
    List(KeyListArgs),
    /// Add a key: published in the JWK Set at once, signing only once promoted.
    Add(KeyListArgs),
    /// Make a key the one that signs; the key that signed stops (and stays published).
    Promote(KeyArgs),
    /// Drop a key from the JWK Set: refused for the signing key and until 16 minutes after
    /// it stopped signing (its last token expired).
    Retire(KeyArgs),
}

#[derive(Args)]
pub struct KeyListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
}

#[derive(Args)]
pub struct KeyArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The key id (`bcctl oidc keys list`). A key id is base64url and may begin with `-`:
    /// such a value is taken as the id when it has a key id's shape ([`key_id`]).
    #[arg(allow_hyphen_values = true, value_parser = key_id)]
    pub kid: String,
}

/// A key id as typed. One key id in 64 begins with `-`; a value beginning with `-` is taken as
/// one only with a key id's shape (43 base64url characters: an RFC 7638 SHA-256 thumbprint),
/// and is otherwise an unknown flag, a usage error like any other.
fn key_id(value: &str) -> Result<String, String> {
    let shaped = value.len() == 43
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if value.starts_with('-') && !shaped {
        return Err(format!(
            "unexpected argument '{value}' (a key id is 43 base64url characters)"
        ));
    }
    Ok(value.to_owned())
}

#[derive(Args)]
pub struct DiscoveryArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The issuer URL (default: `[oidc] issuer` of the serve configuration, --config or the
    /// deployment directory's bcctl.toml).
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
}

async fn open(common: &IdentityArgs) -> Result<OidcKeyAdmin, IdentityCmdError> {
    Ok(OidcKeyAdmin::new(
        common.store().await?,
        Arc::new(DatabaseClock::system()),
    ))
}

pub async fn run(cmd: OidcCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        OidcCommand::Keys(KeysCommand::List(args)) => {
            let keys = open(&args.common).await?.list().await?;
            print_keys(&keys, args.common.json);
        }
        OidcCommand::Keys(KeysCommand::Add(args)) => {
            let secret = args.common.located()?.deployment.required_secret()?;
            let key = open(&args.common).await?.add(&secret).await?;
            print_one(
                &key,
                args.common.json,
                "added (published; not signing until promoted)",
            );
        }
        OidcCommand::Keys(KeysCommand::Promote(args)) => {
            let key = open(&args.common).await?.promote(&args.kid).await?;
            print_one(&key, args.common.json, "promoted: it signs every new token");
        }
        OidcCommand::Keys(KeysCommand::Retire(args)) => {
            let key = open(&args.common).await?.retire(&args.kid).await?;
            print_one(&key, args.common.json, "retired: out of the JWK Set");
        }
        OidcCommand::Discovery(args) => discovery(args).await?,
    }
    Ok(())
}

fn print_one(key: &OidcKeyView, json: bool, what: &str) {
    if json {
        print_json(key);
    } else {
        crate::outln!("OIDC key {} {what}", key.kid);
    }
}

fn print_keys(keys: &[OidcKeyView], json: bool) {
    if json {
        print_json(&keys);
        return;
    }
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), fmt_us);
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.kid.clone(),
                k.state.to_string(),
                fmt_us(k.added_at_us),
                opt(k.promoted_at_us),
                opt(k.stopped_at_us),
                opt(k.retired_at_us),
                opt(k.retirable_at_us),
            ]
        })
        .collect();
    print_table(
        &[
            "KID",
            "STATE",
            "ADDED",
            "PROMOTED",
            "STOPPED",
            "RETIRED",
            "RETIRABLE",
        ],
        &rows,
    );
}

/// `[oidc] issuer` of a serve configuration file, if it names one.
fn configured_issuer(file: &Path) -> Result<Option<String>, IdentityCmdError> {
    #[derive(serde::Deserialize)]
    struct Oidc {
        issuer: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct File {
        oidc: Option<Oidc>,
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| IdentityCmdError::Setup(format!("cannot read {}: {e}", file.display())))?;
    let parsed: toml::Table = toml::from_str(&text)
        .map_err(|e| IdentityCmdError::Setup(format!("{}: {e}", file.display())))?;
    let file: File = toml::Value::Table(parsed)
        .try_into()
        .map_err(|e| IdentityCmdError::Setup(format!("{}: [oidc]: {e}", file.display())))?;
    Ok(file.oidc.and_then(|o| o.issuer))
}

async fn discovery(args: DiscoveryArgs) -> Result<(), IdentityCmdError> {
    let located = args.common.located()?;
    let issuer = match (&args.issuer, &located.config) {
        (Some(url), _) => url.clone(),
        (None, Some(file)) => configured_issuer(file)?.ok_or_else(|| {
            IdentityCmdError::Invalid(format!(
                "{} has no [oidc] issuer: pass --issuer URL",
                file.display()
            ))
        })?,
        (None, None) => {
            return Err(IdentityCmdError::Invalid(
                "no issuer: pass --issuer URL (or --config with an [oidc] issuer)".into(),
            ))
        }
    };
    let issuer = IssuerUrl::parse(&issuer).map_err(IdentityCmdError::Invalid)?;
    let store = args.common.store().await?;
    let (document, jwks) = publication(&store, &issuer)
        .await
        .map_err(|e| IdentityCmdError::Setup(e.to_string()))?;
    if args.common.json {
        print_json(&serde_json::json!({
            "discoveryPath": issuer.discovery_path(),
            "discovery": document,
            "jwksPath": issuer.jwks_path(),
            "jwks": jwks,
        }));
    } else {
        let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
        crate::outln!("# {}", issuer.discovery_path());
        crate::outln!("{}", pretty(&document));
        crate::outln!("# {}", issuer.jwks_path());
        crate::outln!("{}", pretty(&jwks));
    }
    Ok(())
}
