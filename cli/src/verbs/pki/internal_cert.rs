//! `bcctl pki issue-internal`: the certificate a split gateway presents to the api's internal
//! endpoint (read back, and reloaded when re-issued, by `bcctl serve --role gateway`:
//! [`gateway::split::internal_files`]).
//!
//! The certificate comes from the deployment's serving CA (so the command needs the deployment
//! secret), names the gateway (`--name`, a DNS name), carries `OU=bc-role:gateway` and the
//! clientAuth usage only, and lives at most 90 days. Its subjectAltNames, `--name` first and
//! then every `--serving-name`, are the only names the api issues this gateway serving
//! certificates for (the gateway's `serving_names` must be among them). Two files: the chain (`--cert-out`, PEM,
//! leaf then serving CA, mode 0644) and the key (`--key-out`, PKCS#8 PEM, mode 0600). Existing
//! files are replaced only with `--replace` (written aside, then renamed over), so re-issuing
//! before expiry never leaves a half-written pair.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use clap::Args;
use domain::pki::{issue_internal_client_certificate, KeyRole, PrivateKey, Serial};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::DeploymentError;
use crate::serve::config::parse_duration;

#[derive(Args, Debug)]
pub struct IssueInternalArgs {
    /// The deployment (docs/CLI.md): its PKI bundle's keys are opened with the deployment
    /// secret found by the same rule.
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// The gateway's name (a DNS name; shown in the api's logs and in its
    /// `gateway.serving.issued` events). It may also serve under it.
    #[arg(long)]
    pub name: String,
    /// A name (DNS name or IP address) the gateway may serve agents under: the api issues its
    /// serving certificates only for `--name` and these. Repeat for each of the gateway's
    /// `serving_names`.
    #[arg(long = "serving-name", value_name = "NAME")]
    pub serving_names: Vec<String>,
    /// Where to write the certificate chain (PEM).
    #[arg(long)]
    pub cert_out: PathBuf,
    /// Where to write the private key (PKCS#8 PEM, mode 0600).
    #[arg(long)]
    pub key_out: PathBuf,
    /// Lifetime, e.g. 90d (at most 90 days).
    #[arg(long, default_value = "90d")]
    pub lifetime: String,
    /// Replace existing files (re-issuing before the old certificate expires).
    #[arg(long)]
    pub replace: bool,
    #[arg(long)]
    pub json: bool,
}

/// Errors of the internal certificate files.
#[derive(Debug, thiserror::Error)]
pub enum InternalCertError {
    #[error("{0}")]
    Locate(String),
    #[error("{0}")]
    Keys(#[from] DeploymentError),
    #[error("--lifetime: {0}")]
    Lifetime(String),
    #[error("issuing the internal certificate: {0}")]
    Issue(String),
    #[error("{path} already exists: pass --replace to re-issue over it")]
    Exists { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn write_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    replace: bool,
) -> Result<(), InternalCertError> {
    let io = |source| InternalCertError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !replace && path.exists() {
        return Err(InternalCertError::Exists {
            path: path.to_path_buf(),
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(".new");
    let aside = PathBuf::from(aside);
    let _ = std::fs::remove_file(&aside);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&aside).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&aside, path).map_err(io)?;
    Ok(())
}

/// `bcctl pki issue-internal`.
pub fn issue_internal(args: IssueInternalArgs) -> Result<(), InternalCertError> {
    let lifetime = parse_duration(&args.lifetime).map_err(InternalCertError::Lifetime)?;
    let lifetime = time::Duration::try_from(lifetime)
        .map_err(|e| InternalCertError::Lifetime(e.to_string()))?;
    let located = args
        .deployment
        .locate()
        .map_err(|e| InternalCertError::Locate(e.to_string()))?;
    let keys = located.deployment.keys()?;
    let key = PrivateKey::generate(KeyRole::Serving)
        .map_err(|e| InternalCertError::Issue(e.to_string()))?;
    let serial = Serial::generate().map_err(|e| InternalCertError::Issue(e.to_string()))?;
    let issued = issue_internal_client_certificate(
        &keys.serving_ca,
        key.public_key(),
        &args.name.to_ascii_lowercase(),
        &args.serving_names,
        &serial,
        lifetime,
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| InternalCertError::Issue(e.to_string()))?;
    let chain = pem("CERTIFICATE", &issued.der) + &pem("CERTIFICATE", keys.serving_ca.cert_der());
    // The key first: a certificate without its key is useless, a key without a certificate
    // harmless.
    write_file(
        &args.key_out,
        pem("PRIVATE KEY", key.pkcs8_der()).as_bytes(),
        0o600,
        args.replace,
    )?;
    write_file(&args.cert_out, chain.as_bytes(), 0o644, args.replace)?;
    let not_after = issued
        .not_after
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    if args.json {
        crate::outln!(
            "{}",
            json!({
                "certificate": args.cert_out.display().to_string(),
                "key": args.key_out.display().to_string(),
                "name": args.name,
                "servingNames": args.serving_names,
                "serial": issued.serial.to_hex(),
                "notAfter": not_after,
            })
        );
    } else {
        crate::outln!(
            "wrote {} and {} (gateway {}, may serve as {:?}, serial {}, valid until {not_after}): give them to the gateway as internal_cert and internal_key",
            args.cert_out.display(),
            args.key_out.display(),
            args.name,
            std::iter::once(&args.name).chain(&args.serving_names).collect::<Vec<_>>(),
            issued.serial.to_hex()
        );
    }
    Ok(())
}
