//! `bcctl token create | list | revoke`: join tokens through [`NodeAdmin`].
//!
//! Also the shared opening of the identity commands (`token`, `node`, and the attestation
//! verbs that flatten [`IdentityArgs`]): the deployment is found by the one rule of
//! [`DeploymentArgs`] (`--dir`, `--config`, `--database-url`, `--pki`, the environment,
//! `./.bcctl`); the PKI bundle is read for its public half only, never unsealed: no operator
//! command on tokens or nodes needs a key, so none of them reads the deployment secret.

use std::sync::Arc;

use clap::{Args, Subcommand};
use commands::identity::{IdentityError, NewToken, NodeAdmin, TokenStatus, TokenView};
use commands::DatabaseClock;
use domain::identity::{AdminRefusal, ExpectBinding, TokenRole};
use domain::pki::SecretError;
use events::store::{EventStore, StoreError};
use time::OffsetDateTime;

use crate::deployment::{DeploymentError, LocateError, Located};

/// Errors of the identity subcommands, each with the way out.
#[derive(Debug, thiserror::Error)]
pub enum IdentityCmdError {
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("{0}")]
    Locate(#[from] LocateError),
    #[error("{0}")]
    Secret(#[from] SecretError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Identity(#[from] IdentityError),
    #[error("{0}")]
    Tenant(#[from] commands::tenants::TenantError),
    #[error("{0}")]
    Oidc(#[from] commands::oidc::OidcError),
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    #[error("{0}")]
    Setup(String),
}

impl IdentityCmdError {
    /// The exit code: 2 for input the verb found invalid, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            IdentityCmdError::Invalid(_) => crate::output::EXIT_USAGE,
            // A name that is not a plain name, or none given: a bad value (docs/CLI.md).
            IdentityCmdError::Identity(IdentityError::Names(r)) if r.is_input() => {
                crate::output::EXIT_USAGE
            }
            _ => crate::output::EXIT_FAILED,
        }
    }
}

/// Where the store and the keys are (the one rule of [`crate::deployment::DeploymentArgs`]), and `--json`: the
/// arguments every verb flattens.
pub type IdentityArgs = crate::deployment::CommonArgs;

impl IdentityArgs {
    /// The deployment as located; its bundle must exist and parse (it names the deployment),
    /// read for its public half only.
    pub fn located(&self) -> Result<Located, IdentityCmdError> {
        let located = self.deployment.locate()?;
        located.deployment.public_half()?;
        Ok(located)
    }

    /// The store these arguments name, which must exist (a mistyped SQLite path is an error,
    /// never a new file), with its migrations applied.
    pub async fn store(&self) -> Result<EventStore, IdentityCmdError> {
        let located = self.located()?;
        Ok(crate::deployment::open_at(located.existing_store_url()?).await?)
    }
}

/// Opens what the operator commands on tokens and nodes need: the store, on the system clock.
/// The PKI bundle is read for its public half only (it must exist and parse: it names the
/// deployment); its private keys are never unsealed, so these commands need no deployment
/// secret (none of them signs or opens anything).
pub async fn open_admin(args: &IdentityArgs) -> Result<NodeAdmin, IdentityCmdError> {
    Ok(NodeAdmin::new(
        args.store().await?,
        Arc::new(DatabaseClock::system()),
    ))
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a join token; its secret is printed once and stored nowhere.
    Create(CreateArgs),
    /// List join tokens (without secrets).
    List(ListArgs),
    /// Revoke a join token: it admits no further join.
    Revoke(RevokeArgs),
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// Tenant the joined nodes belong to (default: the only tenant the deployment's tokens
    /// name, else "default", as `bcctl up` uses).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Site the joined nodes belong to (default: the only site the tenant's tokens name, else
    /// "site-1", as `bcctl up` uses).
    #[arg(long)]
    pub site: Option<String>,
    /// Write the secret to this file (created, mode 0600) for `bcd join --token-file`, instead
    /// of printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// Pool the joined nodes belong to.
    #[arg(long, default_value = "default")]
    pub pool: String,
    /// Role admitted: node, site, or provisioned (a single-use token bound to one machine, for
    /// the provisioned attestor: needs --for-node or --expect-product-uuid).
    #[arg(long, default_value = "node")]
    pub role: String,
    /// How many joins the token admits.
    #[arg(long, default_value_t = 1)]
    pub uses: u32,
    /// Lifetime: a number with a unit s, m, h or d (e.g. 90m, 1h, 7d).
    #[arg(long, default_value = "1h")]
    pub expires_in: String,
    /// Only a machine with this SMBIOS product UUID may join.
    #[arg(long)]
    pub expect_product_uuid: Option<String>,
    /// Only a machine with this MAC address may join.
    #[arg(long)]
    pub expect_mac: Option<String>,
    /// Gone: a claimed hardware key reclaims nothing any more. Refused with a pointer at
    /// --reclaim.
    #[arg(long, hide = true)]
    pub allow_reclaim: bool,
    /// The token re-keys this node in place (same id, identity generation + 1, its certificates
    /// revoked). Single use: --uses must be 1; the node must exist and be active.
    #[arg(long, value_name = "NODE")]
    pub reclaim: Option<String>,
    /// Role provisioned: the node the token is minted for.
    #[arg(long, value_name = "NODE")]
    pub for_node: Option<String>,
    /// A join with this token waits until an operator approves its join request.
    #[arg(long)]
    pub approval: bool,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// Only this tenant's.
    #[arg(long)]
    pub tenant: Option<String>,
}

#[derive(Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The token id (tok_...).
    pub token_id: String,
    /// Why (recorded in the event).
    #[arg(long, default_value = "revoked by operator")]
    pub reason: String,
}

pub async fn run(cmd: TokenCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        TokenCommand::Create(args) => create(args).await,
        TokenCommand::List(args) => list(args).await,
        TokenCommand::Revoke(args) => revoke(args).await,
    }
}

/// Parses `30s`, `90m`, `1h`, `7d` (or bare seconds) into seconds.
pub fn parse_duration(text: &str) -> Result<i64, IdentityCmdError> {
    positive_seconds(text).ok_or_else(|| {
        IdentityCmdError::Invalid(format!(
            "--expires-in {text:?}: expected a positive number with a unit s, m, h or d (e.g. 1h)"
        ))
    })
}

/// A duration flag's value in whole seconds: a positive whole number with a unit `s`, `m`, `h`
/// or `d` (no unit is seconds); `None` for anything else, which the caller names with its flag.
/// Shared by the verbs whose duration flags take this form (`token create --expires-in`,
/// `pki crl --next-update`).
pub(crate) fn positive_seconds(text: &str) -> Option<i64> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let n: i64 = digits.parse().ok()?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(mult).filter(|s| *s > 0)
}

async fn create(args: CreateArgs) -> Result<(), IdentityCmdError> {
    let role = TokenRole::parse(&args.role).ok_or_else(|| {
        IdentityCmdError::Invalid(format!(
            "--role {:?}: expected node, site or provisioned",
            args.role
        ))
    })?;
    if args.allow_reclaim {
        return Err(IdentityCmdError::Invalid(
            "--allow-reclaim is gone: a claimed hardware key reclaims nothing any more; name the \
             node the token re-keys with --reclaim NODE (single use)"
                .into(),
        ));
    }
    let ttl_seconds = parse_duration(&args.expires_in)?;
    let svc = open_admin(&args.common).await?;
    let existing = svc.list_tokens(None).await?;
    let tenant = match args.tenant {
        Some(t) => t,
        None => only(existing.iter().map(|t| t.tenant_id.as_str()))
            .unwrap_or(DEFAULT_TENANT)
            .to_string(),
    };
    let site = match args.site {
        Some(s) => s,
        None => only(
            existing
                .iter()
                .filter(|t| t.tenant_id == tenant)
                .map(|t| t.site_id.as_str()),
        )
        .unwrap_or(DEFAULT_SITE)
        .to_string(),
    };
    let created = svc
        .create_token(&NewToken {
            tenant_id: tenant,
            site_id: site,
            pool_id: args.pool,
            role,
            uses: args.uses,
            ttl_seconds,
            expect: ExpectBinding {
                product_uuid: args.expect_product_uuid,
                mac: args.expect_mac,
            },
            allow_reclaim: false,
            reclaim_node_id: args.reclaim,
            for_node_id: args.for_node,
            require_approval: args.approval,
        })
        .await?;
    if let Some(path) = &args.out {
        let secret = format!("{}\n", created.secret);
        if crate::invocation::is_remote() {
            // The caller writes it (0600, never over an existing file: checked before the call).
            crate::invocation::write_file(path, secret.as_bytes(), 0o600)
                .map_err(|e| IdentityCmdError::Setup(format!("{}: {e}", path.display())))?;
        } else {
            crate::verbs::pki::write_new_private(path, secret.as_bytes())
                .map_err(|e| IdentityCmdError::Setup(e.to_string()))?;
        }
    }
    let config = bcd_config_of(&args.common);
    let token_file = args
        .out
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/path/to/join-token".into());
    let join = format!(
        "{} join --config {} --token-file {}",
        crate::deployment::node_setup::shell_quote(&crate::deployment::node_setup::bcd_program()),
        crate::deployment::node_setup::shell_quote(&config),
        crate::deployment::node_setup::shell_quote(&token_file),
    );
    if args.common.json {
        let mut v = serde_json::to_value(&created).unwrap_or(serde_json::Value::Null);
        v["joinCommand"] = serde_json::Value::String(join);
        if let Some(p) = &args.out {
            v["tokenFile"] = serde_json::Value::String(p.display().to_string());
        }
        crate::output::print_json(&v);
    } else {
        crate::outln!("created join token {}", created.token.token_id);
        match &args.out {
            Some(p) => crate::outln!(
                "secret written to {} (mode 0600; bcd deletes it after the join)",
                p.display()
            ),
            None => crate::outln!("secret (shown once, stored nowhere): {}", created.secret),
        }
        print_tokens(std::slice::from_ref(&created.token));
        crate::outln!();
        match &args.out {
            Some(_) => crate::outln!("join a machine with:"),
            None => {
                crate::outln!(
                    "save the secret in a file (mode 0600) on the machine, then join it with:"
                )
            }
        }
        crate::outln!("  {join}");
    }
    Ok(())
}

/// The tenant `bcctl up` creates its token in.
pub const DEFAULT_TENANT: &str = "default";
/// The site `bcctl up` creates its token in.
pub const DEFAULT_SITE: &str = "site-1";

/// The one distinct value, if there is exactly one.
fn only<'a>(mut values: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let first = values.next()?;
    values.all(|v| v == first).then_some(first)
}

/// bcd's configuration the printed join step names: the one `bcctl up` wrote in the deployment
/// directory when there is one, else bcd's default.
fn bcd_config_of(common: &IdentityArgs) -> String {
    common
        .deployment
        .directory()
        .map(|d| {
            d.join("bcd")
                .join(crate::deployment::node_setup::CONFIG_FILE)
        })
        .filter(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| {
            format!(
                "{}/{}",
                crate::deployment::node_setup::DEFAULT_ETC,
                crate::deployment::node_setup::CONFIG_FILE
            )
        })
}

async fn list(args: ListArgs) -> Result<(), IdentityCmdError> {
    let svc = open_admin(&args.common).await?;
    let tokens = svc.list_tokens(args.tenant.as_deref()).await?;
    if args.common.json {
        crate::outln!("{}", to_json(&tokens));
    } else {
        print_tokens(&tokens);
    }
    Ok(())
}

async fn revoke(args: RevokeArgs) -> Result<(), IdentityCmdError> {
    let svc = open_admin(&args.common).await?;
    let token = match svc.revoke_token(&args.token_id, &args.reason).await {
        Ok(t) => t,
        Err(IdentityError::Admin(AdminRefusal::TokenAlreadyRevoked(_))) => {
            let token = svc
                .list_tokens(None)
                .await?
                .into_iter()
                .find(|t| t.token_id == args.token_id)
                .ok_or_else(|| {
                    IdentityCmdError::Setup(format!("join token {} vanished", args.token_id))
                })?;
            if args.common.json {
                let mut v = serde_json::to_value(&token).unwrap_or(serde_json::Value::Null);
                v["alreadyRevoked"] = serde_json::Value::Bool(true);
                crate::output::print_json(&v);
            } else {
                crate::outln!(
                    "join token {} is already revoked; nothing changed",
                    token.token_id
                );
                print_tokens(std::slice::from_ref(&token));
            }
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if args.common.json {
        crate::outln!("{}", to_json(&token));
    } else {
        crate::outln!("revoked join token {}", token.token_id);
        print_tokens(std::slice::from_ref(&token));
    }
    Ok(())
}

/// Compact JSON of a view (serialising these plain structs cannot fail; `null` if it did).
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// µs since the epoch as RFC 3339 (UTC), or the number if out of range.
pub fn fmt_us(us: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| us.to_string())
}

/// Prints rows as a left-aligned text table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        crate::outln!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// A token's `STATUS` cell: `active`, `used up`, `expired`, or `revoked <when> (<why>)`.
fn status_cell(t: &TokenView) -> String {
    match (t.status, &t.revoked_at_us, &t.revoke_reason) {
        (TokenStatus::Revoked, Some(at), Some(r)) => format!("revoked {} ({r})", fmt_us(*at)),
        (TokenStatus::Revoked, Some(at), None) => format!("revoked {}", fmt_us(*at)),
        (status, ..) => status.as_str().into(),
    }
}

pub fn print_tokens(tokens: &[TokenView]) {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            vec![
                t.token_id.clone(),
                t.tenant_id.clone(),
                t.site_id.clone(),
                t.pool_id.clone(),
                t.role.clone(),
                format!("{}/{}", t.uses_left, t.uses_total),
                fmt_us(t.expires_at_us),
                status_cell(t),
            ]
        })
        .collect();
    print_table(
        &[
            "TOKEN", "TENANT", "SITE", "POOL", "ROLE", "USES", "EXPIRES", "STATUS",
        ],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h").ok(), Some(3600));
        assert_eq!(parse_duration("90m").ok(), Some(5400));
        assert_eq!(parse_duration("7d").ok(), Some(604_800));
        assert_eq!(parse_duration("45").ok(), Some(45));
        assert!(parse_duration("0h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("1w").is_err());
        assert!(parse_duration("-1h").is_err());
    }
}
