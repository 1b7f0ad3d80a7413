//! `bcctl node config --out DIR` and `bcctl node install-script`: what a node needs before
//! `bcd join` ([`crate::deployment::node_setup`]), built from the PKI bundle's public half
//! (authenticated with the deployment secret when it is at hand, else with a warning), the
//! server address (`--join-address`, or the deployment configuration's `listen`) and the
//! published approver set.

use std::path::PathBuf;

use clap::Args;
use events::store::{LogStore, LogTx};

use crate::deployment::node_setup::{self, NodeSetup, NodeSetupError};
use crate::output::print_json;
use crate::verbs::token::{IdentityArgs, IdentityCmdError};

/// What a node's configuration needs beyond the bundle.
#[derive(Args)]
pub struct SetupArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// host:port the node reaches the control plane at (default: `listen` of the deployment's
    /// configuration when it names a host).
    #[arg(long, value_name = "HOST:PORT")]
    pub join_address: Option<String>,
    /// The attestor `bcd join` is told to use (join-token by default).
    #[arg(long, value_name = "ID")]
    pub attestor: Option<String>,
    /// The first approver set the node takes (64 hex; default: the published one, when a quorum
    /// exists in the store). install-script: the flag replaces a pin an earlier run wrote; without
    /// it the script keeps that pin.
    #[arg(long, value_name = "HEX")]
    pub approver_set_sha256: Option<String>,
    /// bcd's data directory on the node.
    #[arg(long, value_name = "DIR", default_value = node_setup::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The privilege split: writes `[helper] user = "USER"` into config.toml, so bcd node runs
    /// as USER and reaches the TPM only through bcd helper (root). install-script then also
    /// makes the user (not in tss), joins as root and installs bcd-helper.service and
    /// bcd.service.
    #[arg(long, value_name = "USER")]
    pub helper_user: Option<String>,
    /// A site agent's iPXE boot server address, IP:PORT on the network its machines boot from:
    /// writes `[site] listen` into config.toml (`bcd site` has no default address).
    #[arg(long, value_name = "IP:PORT")]
    pub site_listen: Option<String>,
}

#[derive(Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub setup: SetupArgs,
    /// The directory to write config.toml, join-encryption.jwk, join-signing.jwk and
    /// serving-ca.pem into (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Args)]
pub struct InstallScriptArgs {
    #[command(flatten)]
    pub setup: SetupArgs,
    /// Where the script writes the configuration on the node (BCD_ETC overrides it when the
    /// script runs).
    #[arg(long, value_name = "DIR", default_value = node_setup::DEFAULT_ETC)]
    pub etc: PathBuf,
    /// The bcd program the printed join step names, as found on the node.
    #[arg(long, default_value = "bcd")]
    pub bcd: String,
}

/// Where a node's configuration is built from: the bundle's public half (authenticated when
/// the deployment secret is at hand, else with a warning), the server, and the approver set.
async fn setup(args: &SetupArgs, written_by: &str) -> Result<NodeSetup, IdentityCmdError> {
    let located = args.common.deployment.locate()?;
    let d = &located.deployment;
    let loaded = match d.secret()? {
        Some(_) => d.open()?,
        None => d.public_half()?,
    };
    if !loaded.authenticated {
        crate::errln!(
            "bcctl {written_by}: warning: the PKI bundle {} was read without the deployment secret,              so its pins are unauthenticated: whoever can write that file chose them. Set              BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE, or pass --dir) to check them.",
            d.bundle.display()
        );
    }
    let server = match &args.join_address {
        Some(s) => s.clone(),
        None => configured_server(&args.common)?,
    };
    let mut out =
        NodeSetup::new(&loaded.public, server, args.data_dir.clone()).map_err(setup_err)?;
    out.attestor = args.attestor.clone();
    out.helper_user = match args.helper_user.as_deref().map(str::trim) {
        None => None,
        Some(user) if valid_user_name(user) => Some(user.to_owned()),
        Some(user) => {
            return Err(IdentityCmdError::Invalid(format!(
                "--helper-user {user:?}: name the unprivileged user bcd node runs as (a login \
                 name: lower-case letters, digits, _ and -; not root), for example bcd"
            )))
        }
    };
    out.site_listen = match args.site_listen.as_deref().map(str::trim) {
        None => None,
        Some(listen) if listen.parse::<std::net::SocketAddr>().is_ok() => Some(listen.to_owned()),
        Some(listen) => {
            return Err(IdentityCmdError::Invalid(format!(
                "--site-listen {listen:?}: name the address bcd site's iPXE server listens on, \
                 IP:PORT on the network the machines boot from, for example 192.0.2.10:8069"
            )))
        }
    };
    out.approver_set_given = args.approver_set_sha256.is_some();
    out.approver_set_sha256 = match &args.approver_set_sha256 {
        Some(h) => Some(node_setup::approver_set(h).map_err(setup_err)?),
        None => published_approver_set(&located).await,
    };
    Ok(out)
}

/// A login name `useradd` takes without quoting surprises, and not root.
fn valid_user_name(user: &str) -> bool {
    let mut chars = user.chars();
    user != "root"
        && user.len() <= 32
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn setup_err(e: NodeSetupError) -> IdentityCmdError {
    match e {
        NodeSetupError::BadApproverSet(_) => IdentityCmdError::Invalid(e.to_string()),
        other => IdentityCmdError::Setup(other.to_string()),
    }
}

/// The published approver set's SHA-256 when the deployment's store is at hand and holds one.
async fn published_approver_set(located: &crate::deployment::Located) -> Option<String> {
    let url = located.existing_store_url().ok()?;
    let store = crate::deployment::connect_at(url).await.ok()?;
    let mut tx = store.begin().await.ok()?;
    let state = projections::quorum::read_bundle_state(&mut tx).await.ok()?;
    let _ = tx.rollback().await;
    state?.approver_set_sha256.map(hex::encode)
}

/// The `listen` of the deployment's configuration (`--config`, or `DIR/bcctl.toml`), when it
/// names a host a node can reach.
fn configured_server(common: &IdentityArgs) -> Result<String, IdentityCmdError> {
    let need = |why: String| {
        IdentityCmdError::Invalid(format!(
            "{why}: pass --join-address HOST:PORT, the address nodes reach the control plane at"
        ))
    };
    // The configuration naming the deployment: during an admin API call the server's own,
    // never the caller's flags.
    let located = common.deployment.locate()?;
    let file = match (located.config, located.dir) {
        (Some(f), _) => f,
        (None, Some(d)) => d.join(crate::deployment::DIR_CONFIG_FILE),
        (None, None) => {
            return Err(need(
                "no deployment configuration names a listen address".into(),
            ))
        }
    };
    #[derive(serde::Deserialize)]
    struct Listen {
        listen: Option<String>,
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| need(format!("cannot read {}: {e}", file.display())))?;
    let parsed: Listen =
        toml::from_str(&text).map_err(|e| need(format!("{}: {}", file.display(), e.message())))?;
    match parsed.listen {
        Some(l) if !l.starts_with("0.0.0.0:") && !l.starts_with("[::]:") => Ok(l),
        Some(l) => Err(need(format!(
            "{} listens on {l}, which names no host a node can reach",
            file.display()
        ))),
        None => Err(need(format!("{} has no listen key", file.display()))),
    }
}

pub async fn config(args: ConfigArgs) -> Result<(), IdentityCmdError> {
    let setup = setup(&args.setup, "node config").await?;
    let written = setup
        .write_to(&args.out, "bcctl node config")
        .map_err(setup_err)?;
    let config = args.out.join(node_setup::CONFIG_FILE);
    let join = setup.join_command(
        &node_setup::bcd_program(),
        &config,
        &args.out.join(node_setup::TOKEN_FILE),
    );
    if args.setup.common.json {
        print_json(&serde_json::json!({
            "files": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "server": setup.server,
            "approverSetSha256": setup.approver_set_sha256,
            "joinCommand": join,
        }));
    } else {
        for p in &written {
            crate::outln!("wrote {}", p.display());
        }
        crate::outln!();
        crate::outln!("put a token from `bcctl token create` in a file (mode 0600) and join with:");
        crate::outln!("  {join}");
    }
    Ok(())
}

pub async fn install_script(args: InstallScriptArgs) -> Result<(), IdentityCmdError> {
    let setup = setup(&args.setup, "node install-script").await?;
    let script = setup.install_script(&args.etc, &args.bcd);
    if args.setup.common.json {
        print_json(&serde_json::json!({ "script": script }));
    } else {
        crate::out!("{script}");
    }
    Ok(())
}
