//! The CA life cycle of an existing bundle (issue 22, spec 003 "The pki commands"):
//! `bcctl pki renew-ca` (a new node or serving CA certificate from the root, same key and
//! subject) and `bcctl pki reseal` (seal the bundle again under the deployment secret, or move
//! it to a new one).
//!
//! Every write-back goes through [`writable`]: the bundle must have been authenticated by its seal
//! (opened with its secret), or be a development bundle in plaintext with no secret set at all.
//! A plaintext bundle while a secret is set is unauthenticated (whoever can write the file chose
//! every key and pin) and only `pki reseal --accept-unauthenticated` writes it back, sealed. The
//! file is replaced atomically (a 0600 file beside it, synced, renamed over).

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use domain::pki::bundle::next::write_bundle_with_next;
use domain::pki::{
    CertificateAuthority, DeploymentSecret, KeyRole, KeySet, LoadedBundle, PrivateKey, Protection,
    RenewableCa,
};
use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::deployment::{Deployment, DeploymentArgs};
use crate::output::{print_json, rfc3339};
use crate::verbs::pki::common::{print_pins, replace_private, PkiCmdError};

/// The environment variable holding the new deployment secret for `pki reseal`.
pub const NEW_SECRET_ENV: &str = "BC_NEW_DEPLOYMENT_SECRET";

/// The CA `pki renew-ca` renews.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CaChoice {
    /// The node CA (agent certificates).
    Node,
    /// The serving CA (gateway and internal serving certificates, internal client
    /// certificates; there is no separate internal CA).
    Serving,
    /// The operator CA (admin API client certificates).
    Operator,
}

#[derive(Args)]
pub struct RenewCaArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Which CA to renew.
    #[arg(long, value_enum)]
    pub ca: CaChoice,
    /// The root CA's key (PKCS#8 PEM), when `pki init --offline-root` kept it out of the bundle.
    #[arg(long, value_name = "FILE")]
    pub root_key: Option<PathBuf>,
    /// Lifetime of the new CA certificate in days (capped at the root's notAfter).
    #[arg(long, default_value_t = 730)]
    pub days: i64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ResealArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Seal an unauthenticated bundle (a plaintext one) after comparing the pins it prints with
    /// your records: the seal then vouches for them.
    #[arg(long)]
    pub accept_unauthenticated: bool,
    /// Move the bundle to a new deployment secret: the file holding it (its content trimmed, at
    /// least 32 characters). BC_NEW_DEPLOYMENT_SECRET gives the secret itself.
    #[arg(long, value_name = "FILE")]
    pub new_secret_file: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// How a loaded bundle may be written back: sealed under this secret, or plaintext.
pub struct WriteBack {
    /// The secret to seal with (`None`: a development bundle stays plaintext).
    pub secret: Option<DeploymentSecret>,
    /// Sealed or plaintext.
    pub protection: Protection,
}

impl WriteBack {
    /// Writes `keys` back to `path` atomically, with a root rotation's next root when one is
    /// under way; a bundle whose root was `offline` stays so (the key given for this verb is
    /// dropped first). Returns the keys as written.
    pub fn write(
        &self,
        path: &Path,
        keys: KeySet,
        offline: bool,
        next: Option<&domain::pki::CommandSigningRoot>,
        kdf: Option<domain::pki::BundleKdf>,
    ) -> Result<KeySet, PkiCmdError> {
        let keys = if offline {
            keys.without_root_key()
        } else {
            keys
        };
        let bytes = write_bundle_with_next(&keys, next, self.protection, self.secret.as_ref(), kdf)
            .map_err(|source| PkiCmdError::Bundle {
                path: path.to_path_buf(),
                source,
            })?;
        replace_private(path, &bytes)?;
        Ok(keys)
    }
}

/// Why a write-back is refused, in the words of spec 003 (INVALID_STATE).
pub fn unauthenticated_refusal(path: &Path) -> PkiCmdError {
    PkiCmdError::InvalidState(format!(
        "INVALID_STATE: {} is not authenticated (its keys are in plaintext while a deployment secret is set: whoever can write the file chose them), so it is not written back; compare its pins (`bcctl pki show`) with your records, then seal it with `bcctl pki reseal --accept-unauthenticated`",
        path.display()
    ))
}

/// Whether `loaded` may be written back, and how (see the module doc).
pub fn writable(
    path: &Path,
    loaded: &LoadedBundle,
    secret: Option<DeploymentSecret>,
) -> Result<WriteBack, PkiCmdError> {
    match (loaded.protection, secret) {
        (Protection::Sealed, Some(secret)) if loaded.authenticated => Ok(WriteBack {
            secret: Some(secret),
            protection: Protection::Sealed,
        }),
        (Protection::Plaintext, None) => Ok(WriteBack {
            secret: None,
            protection: Protection::Plaintext,
        }),
        (Protection::Sealed, None) => Err(PkiCmdError::Deployment(
            crate::deployment::DeploymentError::Sealed {
                path: path.to_path_buf(),
            },
        )),
        _ => Err(unauthenticated_refusal(path)),
    }
}

/// Reads the root key file `pki init --offline-root` wrote.
pub fn read_root_key(path: &Path) -> Result<PrivateKey, PkiCmdError> {
    let text = std::fs::read_to_string(path).map_err(|source| PkiCmdError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let der = domain::pki::read_pem_blocks("PRIVATE KEY", &text)
        .ok()
        .and_then(|blocks| blocks.into_iter().next())
        .ok_or_else(|| {
            PkiCmdError::Usage(format!(
                "--root-key {}: not a PEM PRIVATE KEY (the file `pki init --offline-root` wrote)",
                path.display()
            ))
        })?;
    PrivateKey::from_pkcs8_der(KeyRole::RootCa, &der).map_err(|e| {
        PkiCmdError::Usage(format!(
            "--root-key {}: not the root CA's key: {e}",
            path.display()
        ))
    })
}

fn located(args: &DeploymentArgs) -> Result<Deployment, PkiCmdError> {
    Ok(args
        .locate()
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?
        .deployment)
}

pub fn renew_ca(args: RenewCaArgs) -> Result<(), PkiCmdError> {
    if args.days <= 0 || args.days > 36_500 {
        return Err(PkiCmdError::Usage(format!(
            "--days {}: give a lifetime between 1 and 36500 days",
            args.days
        )));
    }
    let deployment = located(&args.deployment)?;
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
    let offline = keys.root_ca.is_offline();
    let mut keys: KeySet = match &args.root_key {
        Some(file) => keys
            .with_root_key(read_root_key(file)?)
            .map_err(PkiCmdError::Renew)?,
        None => keys,
    };
    let which = match args.ca {
        CaChoice::Node => RenewableCa::Node,
        CaChoice::Serving => RenewableCa::Serving,
        CaChoice::Operator => RenewableCa::Operator,
    };
    keys.renew_ca(which, OffsetDateTime::now_utc(), Duration::days(args.days))
        .map_err(PkiCmdError::Renew)?;
    // An offline root stays offline, whether or not the key was given.
    let keys = write.write(&path, keys, offline, next.as_ref(), kdf)?;

    let (name, ca): (_, &CertificateAuthority) = match (which, &keys.operator_ca) {
        (RenewableCa::Node, _) => ("node", &keys.node_ca),
        (RenewableCa::Serving, _) => ("serving", &keys.serving_ca),
        (RenewableCa::Operator, Some(operator)) => ("operator", operator),
        (RenewableCa::Operator, None) => {
            return Err(PkiCmdError::Renew(domain::pki::KeySetError::NoOperatorCa))
        }
    };
    let (not_after, serial) = (ca.not_after(), hex::encode(ca.serial()));
    let serving_pin = matches!(which, RenewableCa::Serving)
        .then(|| keys.serving_ca.public_key().pin().to_string());
    if args.json {
        print_json(&json!({
            "file": path.display().to_string(),
            "ca": name,
            "notAfter": rfc3339(not_after),
            "serial": serial,
            "servingCaPin": serving_pin,
            "rootKey": if offline { "offline" } else { "bundle" },
        }));
    } else {
        crate::outln!(
            "renewed the {name} CA in {}: notAfter {}, serial {serial}",
            path.display(),
            rfc3339(not_after)
        );
        if let Some(pin) = serving_pin {
            crate::outln!("serving CA pin unchanged: {pin} (nothing to re-pin)");
        }
        crate::outln!("roll the bundle out to every bcctl serve and restart them one at a time before the old certificate expires; certificates it issued keep verifying");
    }
    Ok(())
}

fn new_secret(args: &ResealArgs) -> Result<Option<DeploymentSecret>, PkiCmdError> {
    if let Some(file) = &args.new_secret_file {
        let text = std::fs::read_to_string(file).map_err(|source| PkiCmdError::Io {
            path: file.clone(),
            source,
        })?;
        return DeploymentSecret::new(text.trim())
            .map(Some)
            .map_err(|e| PkiCmdError::Usage(format!("--new-secret-file {}: {e}", file.display())));
    }
    match std::env::var(NEW_SECRET_ENV).ok().filter(|v| !v.is_empty()) {
        Some(v) => DeploymentSecret::new(&v)
            .map(Some)
            .map_err(|e| PkiCmdError::Usage(format!("{NEW_SECRET_ENV}: {e}"))),
        None => Ok(None),
    }
}

pub fn reseal(args: ResealArgs) -> Result<(), PkiCmdError> {
    let deployment = located(&args.deployment)?;
    let path = deployment.bundle.clone();
    let new_secret = new_secret(&args)?;
    let secret = deployment.required_secret()?;
    let loaded = deployment.open()?;
    let pins = loaded.public.pins().map_err(|source| PkiCmdError::Bundle {
        path: path.clone(),
        source,
    })?;
    if !loaded.authenticated && !args.accept_unauthenticated {
        if args.json {
            print_json(&json!({
                "file": path.display().to_string(),
                "trustDomain": loaded.public.trust_domain.to_string(),
                "authenticated": false,
                "pins": pins,
            }));
        } else {
            crate::outln!("bundle:         {}", path.display());
            crate::outln!("trust domain:   {}", loaded.public.trust_domain);
            crate::outln!("authenticated:  false");
            print_pins(&pins);
        }
        return Err(PkiCmdError::InvalidState(format!(
            "INVALID_STATE: nothing vouches for the pins above: {} is not authenticated (plaintext keys); compare them with your install scripts, join tokens and pinned CAs, then run `bcctl pki reseal --accept-unauthenticated`",
            path.display()
        )));
    }
    let moved = new_secret.is_some();
    let seal_with = new_secret.unwrap_or(secret);
    let LoadedBundle {
        keys,
        next_command_signing_root: next,
        kdf,
        ..
    } = loaded;
    let keys = keys.ok_or_else(|| {
        PkiCmdError::Deployment(crate::deployment::DeploymentError::Sealed { path: path.clone() })
    })?;
    let bytes = write_bundle_with_next(
        &keys,
        next.as_ref(),
        Protection::Sealed,
        Some(&seal_with),
        kdf,
    )
    .map_err(|source| PkiCmdError::Bundle {
        path: path.clone(),
        source,
    })?;
    replace_private(&path, &bytes)?;
    if args.json {
        print_json(&json!({
            "file": path.display().to_string(),
            "trustDomain": keys.trust_domain.to_string(),
            "authenticated": true,
            "newSecret": moved,
            "pins": pins,
        }));
    } else {
        crate::outln!(
            "sealed {} under the {} deployment secret",
            path.display(),
            if moved { "NEW" } else { "current" }
        );
        if moved {
            crate::outln!("the former secret no longer opens it: give every process the new one (BC_DEPLOYMENT_SECRET or the file BC_DEPLOYMENT_SECRET_FILE names) before restarting it");
        }
        crate::outln!("authenticated:  true");
        print_pins(&pins);
    }
    Ok(())
}
