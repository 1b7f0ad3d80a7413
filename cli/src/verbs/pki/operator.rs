//! `bcctl pki add-operator-ca` and `bcctl pki issue-operator` (issue 23): the operator CA of the
//! bundle and the certificates it issues to people and automation for the admin API.
//!
//! `add-operator-ca` gives a bundle made before issue 23 its operator CA (certified by the root,
//! its own key), written back like `pki renew-ca` (authenticated bundles only, replaced
//! atomically, an offline root's key taken from `--root-key FILE` and kept offline). A bundle
//! that has one is refused: "the bundle already has an operator CA".
//!
//! `issue-operator` runs in direct mode only (it needs the deployment secret to open the operator
//! CA's key). It decides (name, role, 1 to 90 days), generates the operator's P-256 key,
//! issues and records `operator.cert.issued` (the event commits first), then writes into
//! `--out DIR`: `operator.pem` (the leaf, then the operator CA), `operator.key` (PKCS#8, 0600),
//! `serving-ca.pem` (the CA the server's admin listener presents) and `profile.toml` (paths
//! relative to the profile's directory; `server` when `--server` is given). An existing
//! `operator.key` is refused unless `--replace`.

use std::path::{Path, PathBuf};

use clap::Args;
use commands::operators::issue_operator;
use commands::DatabaseClock;
use domain::operator::check_issue;
use domain::pki::{pem_encode, KeyRole, KeySetLifetimes, LoadedBundle, PrivateKey};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::DeploymentArgs;
use crate::output::{print_json, rfc3339};
use crate::verbs::pki::common::PkiCmdError;
use crate::verbs::pki::lifecycle::{read_root_key, writable};

#[derive(Args)]
pub struct AddOperatorCaArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// The root CA's key (PKCS#8 PEM), when `pki init --offline-root` kept it out of the bundle.
    #[arg(long, value_name = "FILE")]
    pub root_key: Option<PathBuf>,
    /// Lifetime of the operator CA certificate in days (capped at the root's notAfter).
    #[arg(long, default_value_t = 730)]
    pub days: i64,
    /// Print JSON instead of text (docs/CLI.md).
    #[arg(long)]
    pub json: bool,
}

/// The deployment flags are spelled out here rather than flattened: `--server` of this verb
/// names the admin API written into the profile, it does not make the verb remote.
#[derive(Args)]
pub struct IssueOperatorArgs {
    /// The operator's name: `[a-z0-9][a-z0-9._-]{0,62}` (its SPIFFE ID is
    /// spiffe://<trust domain>/operator/<name>).
    #[arg(long)]
    pub name: String,
    /// What the certificate lets its holder do: admin, operator, approver or auditor.
    #[arg(long)]
    pub role: String,
    /// The directory to write operator.pem, operator.key, serving-ca.pem and profile.toml
    /// into (created when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Lifetime in days, 1 to 90.
    #[arg(long, default_value_t = 30)]
    pub days: i64,
    /// The admin API, HOST:PORT, written into profile.toml as `server` (the profile's holder
    /// then runs verbs with --profile alone).
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// Overwrite an existing DIR/operator.key (and the other three files).
    #[arg(long)]
    pub replace: bool,
    /// The deployment directory `bcctl up` made (default: ./.bcctl when it exists).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// A `bcctl serve` configuration file: its database_url, pki_bundle and
    /// deployment_secret_file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// postgres://... or sqlite://PATH (wins over --config and --dir; DATABASE_URL when none of
    /// them is given).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// The PKI bundle file (wins over --config and --dir; BC_PKI_BUNDLE when none is given).
    #[arg(long, value_name = "FILE")]
    pub pki: Option<PathBuf>,
    /// Print JSON instead of text (docs/CLI.md).
    #[arg(long)]
    pub json: bool,
}

impl IssueOperatorArgs {
    // `..Default::default()` keeps this building whatever other flags DeploymentArgs gains.
    #[allow(clippy::needless_update)]
    fn deployment(&self) -> DeploymentArgs {
        DeploymentArgs {
            dir: self.dir.clone(),
            config: self.config.clone(),
            database_url: self.database_url.clone(),
            pki: self.pki.clone(),
            ..Default::default()
        }
    }
}

fn internal(e: impl std::fmt::Display) -> PkiCmdError {
    PkiCmdError::Internal(e.to_string())
}

pub fn add_operator_ca(args: AddOperatorCaArgs) -> Result<(), PkiCmdError> {
    if args.days <= 0 || args.days > 36_500 {
        return Err(PkiCmdError::Usage(format!(
            "--days {}: give a lifetime between 1 and 36500 days",
            args.days
        )));
    }
    let deployment = args.deployment.locate().map_err(internal)?.deployment;
    let path = deployment.bundle.clone();
    let secret = deployment.secret()?;
    let loaded = deployment.open()?;
    let write = writable(&path, &loaded, secret)?;
    let LoadedBundle {
        keys,
        next_command_signing_root: next,
        kdf,
        ..
    } = loaded;
    let keys = keys.ok_or_else(|| {
        PkiCmdError::Deployment(crate::deployment::DeploymentError::Sealed { path: path.clone() })
    })?;
    if keys.operator_ca.is_some() {
        return Err(PkiCmdError::InvalidState(
            "the bundle already has an operator CA".into(),
        ));
    }
    let offline = keys.root_ca.is_offline();
    let mut keys = match &args.root_key {
        Some(file) => keys
            .with_root_key(read_root_key(file)?)
            .map_err(|e| PkiCmdError::InvalidState(format!("pki add-operator-ca: {e}")))?,
        None => keys,
    };
    keys.add_operator_ca(
        OffsetDateTime::now_utc(),
        time::Duration::days(args.days.min(KeySetLifetimes::default().root.whole_days())),
    )
    .map_err(|e| PkiCmdError::InvalidState(format!("pki add-operator-ca: {e}")))?;
    let keys = write.write(&path, keys, offline, next.as_ref(), kdf)?;
    let ca = keys
        .operator_ca
        .as_ref()
        .ok_or_else(|| internal("the operator CA was just added"))?;
    let pin = ca.public_key().pin().to_string();
    if args.json {
        print_json(&json!({
            "file": path.display().to_string(),
            "notAfter": rfc3339(ca.not_after()),
            "serial": hex::encode(ca.serial()),
            "operatorCaPin": pin,
            "rootKey": if offline { "offline" } else { "bundle" },
        }));
    } else {
        crate::outln!(
            "added an operator CA to {}: notAfter {}, pin {pin}",
            path.display(),
            rfc3339(ca.not_after())
        );
        crate::outln!("roll the bundle out to every bcctl serve and restart them; then `bcctl pki issue-operator` issues operator certificates");
    }
    Ok(())
}

/// The four files `issue-operator` writes, relative to `--out`.
const CERT_FILE: &str = "operator.pem";
const KEY_FILE: &str = "operator.key";
const CA_FILE: &str = "serving-ca.pem";
const PROFILE_FILE: &str = "profile.toml";

/// The profile's TOML: `server` when given, then the three files and the trust domain.
fn profile_toml(server: Option<&str>, trust_domain: &str) -> String {
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let mut out = String::from("# bcctl operator profile (bcctl pki issue-operator): paths are relative to this file's directory.\n");
    if let Some(server) = server {
        out.push_str(&format!("server = {}\n", quote(server)));
    }
    out.push_str(&format!("cert = {}\n", quote(CERT_FILE)));
    out.push_str(&format!("key = {}\n", quote(KEY_FILE)));
    out.push_str(&format!("ca = {}\n", quote(CA_FILE)));
    out.push_str(&format!("trust_domain = {}\n", quote(trust_domain)));
    out
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PkiCmdError> {
    let io = |source| PkiCmdError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A file replaced is removed first, so the mode applies to the new one.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    crate::invocation::write_file(path, bytes, mode).map_err(io)
}

pub async fn issue_operator_cmd(args: IssueOperatorArgs) -> Result<(), PkiCmdError> {
    let decision = check_issue(&args.name, &args.role, args.days)
        .map_err(|e| PkiCmdError::Usage(e.to_string()))?;
    if let Some(server) = &args.server {
        if server.is_empty() || server.contains(char::is_whitespace) || !server.contains(':') {
            return Err(PkiCmdError::Usage(format!(
                "--server {server:?}: give the admin API as HOST:PORT (`[admin] listen` of bcctl serve)"
            )));
        }
    }
    let key_path = args.out.join(KEY_FILE);
    if key_path.exists() && !args.replace {
        return Err(PkiCmdError::InvalidState(format!(
            "{} already exists: an operator key is never overwritten without --replace (issue into another --out, or pass --replace)",
            key_path.display()
        )));
    }
    let deployment_args = args.deployment();
    let located = deployment_args.locate().map_err(internal)?;
    let keys = located.deployment.keys()?;
    let operator_ca = keys.operator_ca.as_ref().ok_or_else(|| {
        PkiCmdError::InvalidState(format!(
            "INVALID_STATE: {} has no operator CA (it was made before operator certificates): run `bcctl pki add-operator-ca` first",
            located.deployment.bundle.display()
        ))
    })?;
    let store = deployment_args
        .open_store_as(true)
        .await
        .map_err(internal)?
        .acting_as(crate::invocation::actor());
    let key = PrivateKey::generate(KeyRole::Operator).map_err(internal)?;
    let issued = issue_operator(
        &store,
        &DatabaseClock::system(),
        &decision,
        operator_ca,
        key.public_key(),
    )
    .await
    .map_err(|e| {
        if e.is_usage() {
            PkiCmdError::Usage(e.to_string())
        } else {
            internal(e)
        }
    })?;
    std::fs::create_dir_all(&args.out).map_err(|source| PkiCmdError::Io {
        path: args.out.clone(),
        source,
    })?;
    let chain = pem_encode("CERTIFICATE", &issued.certificate.der)
        + &pem_encode("CERTIFICATE", operator_ca.cert_der());
    write(&args.out.join(CERT_FILE), chain.as_bytes(), 0o644)?;
    write(
        &key_path,
        pem_encode("PRIVATE KEY", key.pkcs8_der()).as_bytes(),
        0o600,
    )?;
    write(
        &args.out.join(CA_FILE),
        keys.serving_ca.cert_pem().as_bytes(),
        0o644,
    )?;
    write(
        &args.out.join(PROFILE_FILE),
        profile_toml(args.server.as_deref(), keys.trust_domain.as_str()).as_bytes(),
        0o644,
    )?;
    let serial = issued.certificate.serial.to_hex();
    if args.json {
        print_json(&json!({
            "name": decision.name.as_str(),
            "role": decision.role.as_str(),
            "spiffeId": issued.spiffe_id,
            "serial": serial,
            "notBefore": rfc3339(issued.certificate.not_before),
            "notAfter": rfc3339(issued.certificate.not_after),
            "dir": args.out.display().to_string(),
            "profile": args.out.join(PROFILE_FILE).display().to_string(),
        }));
    } else {
        crate::outln!(
            "issued {} ({}) serial {serial}, valid until {}",
            issued.spiffe_id,
            decision.role,
            rfc3339(issued.certificate.not_after)
        );
        crate::outln!(
            "wrote {dir}/{CERT_FILE}, {dir}/{KEY_FILE} (0600), {dir}/{CA_FILE} and {dir}/{PROFILE_FILE}: give the directory to its holder, who runs `bcctl <verb> --profile {dir}/{PROFILE_FILE}`",
            dir = args.out.display()
        );
    }
    Ok(())
}
