//! `bcctl pki init` and `bcctl pki show`: create the deployment's key bundle once, and print its
//! pins (`pki trust-version` and `pki rotate-command-root` are [`crate::verbs::pki::trust`];
//! `pki renew-ca` and `pki reseal` are [`crate::verbs::pki::lifecycle`]; `pki issue-gateway` is
//! [`crate::verbs::pki::gateway`]; `pki add-operator-ca` and `pki issue-operator` are
//! [`crate::verbs::pki::operator`]; `pki add-ssh-ca` is [`crate::verbs::pki::ssh_ca`]; `pki crl` is [`crate::verbs::pki::crl`]). `pki init` makes
//! the operator CA with the other keys.
//!
//! `pki init --offline-root FILE` writes the root CA's key to FILE (mode 0600, never
//! overwriting) and leaves it out of the bundle: `serve` then never holds it, and only `pki
//! renew-ca --root-key FILE` needs it.
//!
//! The bundle is one JSON file, mode 0600, created with `O_EXCL` so it is never overwritten. Its
//! private keys are sealed under the deployment secret (`BC_DEPLOYMENT_SECRET`, or the file
//! `BC_DEPLOYMENT_SECRET_FILE` names: [`crate::deployment`]; see `domain::pki::bundle` for the
//! format), or stored unsealed with `--plaintext` for development.
//!
//! The folder: this file (`init`, `show` and the dispatch of every `pki` verb), [`common`] (what
//! every `pki` verb shares: its error, the pins, writing a new private file), [`trust`],
//! [`lifecycle`], [`gateway`], [`crl`], [`operator`], [`kdf`] (the Argon2id cost a new bundle is sealed
//! with) and [`internal_cert`] (`pki issue-internal`, whose reader `bcctl serve --role gateway`
//! uses too). No file below this one imports it: the verbs
//! share through [`common`] only, and none of them serves or starts anything.

pub(crate) mod common;
pub(crate) mod crl;
pub(crate) mod gateway;
pub(crate) mod internal_cert;
pub(crate) mod kdf;
pub(crate) mod lifecycle;
pub(crate) mod operator;
pub(crate) mod ssh_ca;
pub(crate) mod trust;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use domain::pki::{
    plaintext_bundle, seal_bundle_with, KeySet, KeySetLifetimes, Protection, TrustDomain,
    DEPLOYMENT_SECRET_ENV,
};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::Deployment;
pub use crate::deployment::DEFAULT_BUNDLE;
pub use crate::verbs::pki::common::{print_pins, write_new_private, PkiCmdError};

#[derive(Subcommand)]
pub enum PkiCommand {
    /// Generate every key and CA of a deployment into a new bundle file.
    Init(InitArgs),
    /// Print a bundle's pins and whether its public half was authenticated (by the seal, when
    /// BC_DEPLOYMENT_SECRET is set; a value set but too short is an error).
    Show(ShowArgs),
    /// Issue a split gateway's internal client certificate (for the api's internal endpoint).
    IssueInternal(crate::verbs::pki::internal_cert::IssueInternalArgs),
    /// The published trust bundle against this configuration: version, approver set, nodes
    /// behind.
    TrustVersion(crate::verbs::pki::trust::TrustVersionArgs),
    /// Rotate the command-signing root: --stage add, then switch, then drop.
    RotateCommandRoot(crate::verbs::pki::trust::RotateArgs),
    /// Renew the node or serving CA certificate from the root: same key and subject, so nothing
    /// is re-pinned and no node re-joins.
    RenewCa(crate::verbs::pki::lifecycle::RenewCaArgs),
    /// Seal the bundle again under the deployment secret, or move it to a new secret
    /// (--new-secret-file or BC_NEW_DEPLOYMENT_SECRET).
    Reseal(crate::verbs::pki::lifecycle::ResealArgs),
    /// Issue a gateway serving certificate from the serving CA into DIR (NAME.key, NAME.crt).
    IssueGateway(crate::verbs::pki::gateway::IssueGatewayArgs),
    /// Add the operator CA (admin API client certificates) to a bundle made without one.
    AddOperatorCa(crate::verbs::pki::operator::AddOperatorCaArgs),
    /// Add the SSH CA (Ed25519; OpenSSH certificates only) to a bundle made without one.
    AddSshCa(crate::verbs::pki::ssh_ca::AddSshCaArgs),
    /// Issue an operator certificate into DIR (operator.pem, operator.key, serving-ca.pem,
    /// profile.toml); recorded as operator.cert.issued.
    IssueOperator(crate::verbs::pki::operator::IssueOperatorArgs),
    /// Sign the node CA's revocation list (RFC 5280 CRL of the revoked, unexpired node
    /// certificates) and print it as PEM or write it to --out.
    Crl(crate::verbs::pki::crl::CrlArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// The SPIFFE trust domain every certificate names, e.g. fleet.example.com.
    #[arg(long)]
    pub trust_domain: String,
    /// Where to write the bundle (created, never overwritten, mode 0600).
    #[arg(long = "pki", alias = "out", value_name = "FILE", default_value = DEFAULT_BUNDLE)]
    pub out: PathBuf,
    /// Write the root CA's key to FILE (PKCS#8 PEM, mode 0600, never overwritten) and keep it
    /// out of the bundle; `pki renew-ca --root-key FILE` is the one command that needs it.
    #[arg(long, value_name = "FILE")]
    pub offline_root: Option<PathBuf>,
    /// Store the private keys unsealed (development only).
    #[arg(long)]
    pub plaintext: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// The former name of --pki.
    #[arg(long, hide = true, value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// What `pki show` says on standard error when nothing authenticated the bundle.
pub fn unauthenticated_warning(path: &Path, sealed: bool) -> String {
    format!(
        "warning: {} is not authenticated ({}): whoever can write the file chose these pins; {}",
        path.display(),
        if sealed {
            "read without the deployment secret"
        } else {
            "its keys are in plaintext"
        },
        if sealed {
            "set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE, or pass --dir) to check them against the seal"
        } else {
            "compare them with your records, then seal it with `bcctl pki reseal --accept-unauthenticated` under BC_DEPLOYMENT_SECRET"
        }
    )
}

pub async fn run(cmd: PkiCommand) -> Result<(), PkiCmdError> {
    match cmd {
        PkiCommand::TrustVersion(args) => crate::verbs::pki::trust::trust_version(args)
            .await
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
        PkiCommand::RotateCommandRoot(args) => crate::verbs::pki::trust::rotate(args)
            .await
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
        PkiCommand::Init(args) => init(args),
        PkiCommand::Show(args) => show(args),
        PkiCommand::RenewCa(args) => crate::verbs::pki::lifecycle::renew_ca(args),
        PkiCommand::Reseal(args) => crate::verbs::pki::lifecycle::reseal(args),
        PkiCommand::IssueGateway(args) => crate::verbs::pki::gateway::issue_gateway(args),
        PkiCommand::AddOperatorCa(args) => crate::verbs::pki::operator::add_operator_ca(args),
        PkiCommand::AddSshCa(args) => crate::verbs::pki::ssh_ca::add_ssh_ca(args),
        PkiCommand::IssueOperator(args) => {
            crate::verbs::pki::operator::issue_operator_cmd(args).await
        }
        PkiCommand::Crl(args) => crate::verbs::pki::crl::crl(args).await,
        PkiCommand::IssueInternal(args) => crate::verbs::pki::internal_cert::issue_internal(args)
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
    }
}

fn init(args: InitArgs) -> Result<(), PkiCmdError> {
    let trust_domain = TrustDomain::new(&args.trust_domain)?;
    // Check the secret and the sealing cost before spending time on keys.
    let secret = if args.plaintext {
        None
    } else {
        Some(Deployment::new(&args.out).required_secret()?)
    };
    let kdf = kdf::sealing_kdf().map_err(PkiCmdError::Usage)?;
    if args.out.exists() {
        return Err(PkiCmdError::Exists { path: args.out });
    }
    if let Some(root) = args.offline_root.as_ref().filter(|p| p.exists()) {
        return Err(PkiCmdError::Exists { path: root.clone() });
    }
    let mut keys = KeySet::generate(
        trust_domain,
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )?;
    if let Some(root) = &args.offline_root {
        let key = keys
            .root_ca
            .private_key()
            .ok_or_else(|| PkiCmdError::Internal("a new key set has its root key".into()))?;
        let pem = pem_private_key(key.pkcs8_der());
        write_new_private(root, pem.as_bytes())?;
        keys = keys.without_root_key();
    }
    let bytes = match &secret {
        Some(s) => seal_bundle_with(&keys, s, kdf),
        None => plaintext_bundle(&keys),
    }
    .map_err(|source| PkiCmdError::Bundle {
        path: args.out.clone(),
        source,
    })?;
    write_new_private(&args.out, &bytes)?;
    let pins = keys.pins();
    if args.json {
        crate::outln!(
            "{}",
            json!({
                "file": args.out.display().to_string(),
                "trustDomain": keys.trust_domain.to_string(),
                "sealed": secret.is_some(),
                "rootKey": match &args.offline_root {
                    Some(p) => p.display().to_string(),
                    None => "bundle".to_string(),
                },
                "pins": pins,
            })
        );
    } else {
        crate::outln!(
            "wrote {} ({}) for trust domain {}",
            args.out.display(),
            if secret.is_some() {
                "keys sealed under the deployment secret"
            } else {
                "PLAINTEXT keys: development only"
            },
            keys.trust_domain
        );
        if let Some(root) = &args.offline_root {
            crate::outln!(
                "root CA key written to {} and kept out of the bundle: store it off the servers (pki renew-ca --root-key needs it)",
                root.display()
            );
        }
        print_pins(&pins);
    }
    Ok(())
}

/// PKCS#8 DER as a PEM `PRIVATE KEY` block.
fn pem_private_key(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END PRIVATE KEY-----\n");
    out
}

fn show(args: ShowArgs) -> Result<(), PkiCmdError> {
    let mut deployment = args
        .deployment
        .locate()
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?
        .deployment;
    if let Some(file) = args.file {
        deployment.bundle = file;
    }
    let file = deployment.bundle.clone();
    let loaded = deployment.open()?;
    let pins = loaded.public.pins().map_err(|source| PkiCmdError::Bundle {
        path: file.clone(),
        source,
    })?;
    if !loaded.authenticated {
        crate::errln!(
            "{}",
            unauthenticated_warning(&file, loaded.protection == Protection::Sealed)
        );
    }
    let root_key = if loaded.public.root_offline {
        "offline"
    } else {
        "bundle"
    };
    let protection = match loaded.protection {
        Protection::Sealed => "sealed",
        Protection::Plaintext => "plaintext",
    };
    if args.json {
        crate::outln!(
            "{}",
            json!({
                "file": file.display().to_string(),
                "trustDomain": loaded.public.trust_domain.to_string(),
                "protection": protection,
                "authenticated": loaded.authenticated,
                "rootKey": root_key,
                "kdf": loaded.kdf.map(|k| k.name()),
                "kdfParams": loaded.kdf.and_then(|k| k.params()),
                "publicAuthenticated": loaded.authenticated,
                "pins": pins,
            })
        );
    } else {
        crate::outln!("bundle:         {}", file.display());
        crate::outln!("trust domain:   {}", loaded.public.trust_domain);
        crate::outln!("private keys:   {protection}");
        crate::outln!("root CA key:    {root_key}");
        if let Some(kdf) = &loaded.kdf {
            crate::outln!("key derivation: {}", kdf.describe());
        }
        crate::outln!(
            "public half:    {}",
            if loaded.authenticated {
                "authenticated by the seal".to_string()
            } else if loaded.protection == Protection::Sealed {
                format!("NOT authenticated (set {DEPLOYMENT_SECRET_ENV} to check it)")
            } else {
                "NOT authenticated (plaintext bundle)".to_string()
            }
        );
        print_pins(&pins);
    }
    Ok(())
}
