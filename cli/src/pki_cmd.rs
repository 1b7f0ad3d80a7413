//! `bcctl pki init` and `bcctl pki show`: create the deployment's key bundle once, and print its
//! pins (`pki trust-version` and `pki rotate-command-root` are [`crate::pki_trust_cmd`]).
//!
//! The bundle is one JSON file, mode 0600, created with `O_EXCL` so it is never overwritten. Its
//! private keys are sealed under the deployment secret (`BC_DEPLOYMENT_SECRET`, or the file
//! `BC_DEPLOYMENT_SECRET_FILE` names: [`crate::deployment`]; see `domain::pki::bundle` for the
//! format), or stored unsealed with `--plaintext` for development.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use domain::pki::{
    plaintext_bundle, seal_bundle, BundleError, KeySet, KeySetError, KeySetLifetimes, KeySetPins,
    Protection, SecretError, SpiffeError, TrustDomain, DEPLOYMENT_SECRET_ENV,
};
use serde_json::json;
use time::OffsetDateTime;

pub use crate::deployment::DEFAULT_BUNDLE;
use crate::deployment::{Deployment, DeploymentError};

#[derive(Debug, thiserror::Error)]
pub enum PkiCmdError {
    #[error("{0}")]
    Secret(#[from] SecretError),
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("trust domain: {0}")]
    TrustDomain(#[from] SpiffeError),
    #[error("generating the key set failed: {0}")]
    KeySet(#[from] KeySetError),
    #[error("{path}: {source}")]
    Bundle { path: PathBuf, source: BundleError },
    #[error("{path} already exists: a PKI bundle is never overwritten (move it away first if you really mean to replace every key of the deployment)")]
    Exists { path: PathBuf },
    #[error("{0}")]
    Internal(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Subcommand)]
pub enum PkiCommand {
    /// Generate every key and CA of a deployment into a new bundle file.
    Init(InitArgs),
    /// Print a bundle's pins and whether its public half was authenticated (by the seal, when
    /// BC_DEPLOYMENT_SECRET is set; a value set but too short is an error).
    Show(ShowArgs),
    /// Issue a split gateway's internal client certificate (for the api's internal endpoint).
    IssueInternal(crate::internal_cert_cmd::IssueInternalArgs),
    /// The published trust bundle against this configuration: version, approver set, nodes
    /// behind.
    TrustVersion(crate::pki_trust_cmd::TrustVersionArgs),
    /// Rotate the command-signing root: --stage add, then switch, then drop.
    RotateCommandRoot(crate::pki_trust_cmd::RotateArgs),
}

#[derive(Args)]
pub struct InitArgs {
    /// The SPIFFE trust domain every certificate names, e.g. fleet.example.com.
    #[arg(long)]
    pub trust_domain: String,
    /// Where to write the bundle (created, never overwritten, mode 0600).
    #[arg(long, default_value = DEFAULT_BUNDLE)]
    pub out: PathBuf,
    /// Store the private keys unsealed (development only).
    #[arg(long)]
    pub plaintext: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// The bundle file.
    #[arg(long, default_value = DEFAULT_BUNDLE)]
    pub file: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(cmd: PkiCommand) -> Result<(), PkiCmdError> {
    match cmd {
        PkiCommand::TrustVersion(args) => crate::pki_trust_cmd::trust_version(args)
            .await
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
        PkiCommand::RotateCommandRoot(args) => crate::pki_trust_cmd::rotate(args)
            .await
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
        PkiCommand::Init(args) => init(args),
        PkiCommand::Show(args) => show(args),
        PkiCommand::IssueInternal(args) => crate::internal_cert_cmd::issue_internal(args)
            .map_err(|e| PkiCmdError::Internal(e.to_string())),
    }
}

fn init(args: InitArgs) -> Result<(), PkiCmdError> {
    let trust_domain = TrustDomain::new(&args.trust_domain)?;
    // Check the secret before spending time on keys.
    let secret = if args.plaintext {
        None
    } else {
        Some(Deployment::new(&args.out).required_secret()?)
    };
    if args.out.exists() {
        return Err(PkiCmdError::Exists { path: args.out });
    }
    let keys = KeySet::generate(
        trust_domain,
        OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )?;
    let bytes = match &secret {
        Some(s) => seal_bundle(&keys, s),
        None => plaintext_bundle(&keys),
    }
    .map_err(|source| PkiCmdError::Bundle {
        path: args.out.clone(),
        source,
    })?;
    write_new_private(&args.out, &bytes)?;
    let pins = keys.pins();
    if args.json {
        println!(
            "{}",
            json!({
                "file": args.out.display().to_string(),
                "trustDomain": keys.trust_domain.to_string(),
                "sealed": secret.is_some(),
                "pins": pins,
            })
        );
    } else {
        println!(
            "wrote {} ({}) for trust domain {}",
            args.out.display(),
            if secret.is_some() {
                "keys sealed under the deployment secret"
            } else {
                "PLAINTEXT keys: development only"
            },
            keys.trust_domain
        );
        print_pins(&pins);
    }
    Ok(())
}

fn show(args: ShowArgs) -> Result<(), PkiCmdError> {
    let loaded = Deployment::new(&args.file).open()?;
    let pins = loaded.public.pins().map_err(|source| PkiCmdError::Bundle {
        path: args.file.clone(),
        source,
    })?;
    let protection = match loaded.protection {
        Protection::Sealed => "sealed",
        Protection::Plaintext => "plaintext",
    };
    if args.json {
        println!(
            "{}",
            json!({
                "file": args.file.display().to_string(),
                "trustDomain": loaded.public.trust_domain.to_string(),
                "protection": protection,
                "kdf": loaded.kdf.map(|k| k.name()),
                "kdfParams": loaded.kdf.and_then(|k| k.params()),
                "publicAuthenticated": loaded.authenticated,
                "pins": pins,
            })
        );
    } else {
        println!("bundle:         {}", args.file.display());
        println!("trust domain:   {}", loaded.public.trust_domain);
        println!("private keys:   {protection}");
        if let Some(kdf) = &loaded.kdf {
            println!("key derivation: {}", kdf.describe());
        }
        println!(
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

fn print_pins(pins: &KeySetPins) {
    println!("pins:");
    println!("  root CA                  {}", pins.root_ca);
    println!("  node CA                  {}", pins.node_ca);
    println!(
        "  serving CA               {}  (bcd serving_ca_spki_pin)",
        pins.serving_ca
    );
    println!(
        "  JoinService signing      {}  (bcd join_signing_key_pin)",
        pins.join_signing
    );
    println!(
        "  JoinService encryption   {}  (bcd join_encryption_key_pin)",
        pins.join_encryption
    );
    println!("  audit signing            {}", pins.audit_signing);
    println!("  command-signing root     {}", pins.command_signing_root);
}

/// Creates `path` with mode 0600, failing if it exists, and syncs it and its directory.
pub fn write_new_private(path: &Path, bytes: &[u8]) -> Result<(), PkiCmdError> {
    let io = |source| PkiCmdError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(PkiCmdError::Exists {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    Ok(())
}
