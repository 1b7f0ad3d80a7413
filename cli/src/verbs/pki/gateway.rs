//! `bcctl pki issue-gateway` (spec 003): a gateway serving certificate from the bundle's serving
//! CA, for a gateway that reads its TLS pair from files (`[tls] cert_file`, `key_file` in `bcctl
//! serve`'s configuration, reloaded on change).
//!
//! It generates a P-256 key and writes two files into `--out`: `NAME.key` (PKCS#8 PEM, mode 0600)
//! and `NAME.crt` (the certificate followed by the serving CA, stopping below the root), NAME
//! being the first `--san`. Each is written beside itself and renamed over the old one, the
//! certificate first: a watcher that sees the new certificate with the old key finds a mismatched
//! pair, keeps what it serves and loads both at its next look.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;
use domain::pki::{
    issue_serving_certificate, KeyRole, PrivateKey, Serial, ServingCertificateRequest, ServingRole,
    GATEWAY_SERVING_MAX_LIFETIME,
};
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::DeploymentArgs;
use crate::output::{print_json, rfc3339};
use crate::verbs::pki::common::{replace_file, PkiCmdError};

#[derive(Args)]
pub struct IssueGatewayArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// A DNS name or IP address the gateway serves under; repeat for more. The first names the
    /// files.
    #[arg(long = "san", value_name = "NAME", required = true)]
    pub sans: Vec<String>,
    /// The directory to write NAME.key and NAME.crt into (created when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Lifetime in days (at most 7, the gateway serving certificate's maximum).
    #[arg(long, default_value_t = 7)]
    pub days: i64,
    #[arg(long)]
    pub json: bool,
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

pub fn issue_gateway(args: IssueGatewayArgs) -> Result<(), PkiCmdError> {
    let max_days = GATEWAY_SERVING_MAX_LIFETIME.whole_days();
    if args.days <= 0 || args.days > max_days {
        return Err(PkiCmdError::Usage(format!(
            "--days {}: a gateway serving certificate lives 1 to {max_days} days",
            args.days
        )));
    }
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    for san in &args.sans {
        match san.parse::<IpAddr>() {
            Ok(ip) => ip_addresses.push(ip),
            Err(_) => dns_names.push(san.to_ascii_lowercase()),
        }
    }
    let name = args.sans[0].to_ascii_lowercase();
    if name.contains('/') || name.starts_with('.') {
        return Err(PkiCmdError::Usage(format!(
            "--san {name}: not a DNS name or IP address"
        )));
    }
    let deployment = args
        .deployment
        .locate()
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?
        .deployment;
    let keys = deployment.keys()?;
    let key =
        PrivateKey::generate(KeyRole::Serving).map_err(|e| PkiCmdError::Internal(e.to_string()))?;
    let serial = Serial::generate().map_err(|e| PkiCmdError::Internal(e.to_string()))?;
    let issued = issue_serving_certificate(
        &keys.serving_ca,
        key.public_key(),
        &ServingCertificateRequest {
            dns_names,
            ip_addresses,
            role: ServingRole::Gateway,
            serial,
            lifetime: time::Duration::days(args.days),
        },
        OffsetDateTime::now_utc(),
    )
    .map_err(|e| PkiCmdError::Usage(format!("issuing the gateway certificate: {e}")))?;
    std::fs::create_dir_all(&args.out).map_err(|source| PkiCmdError::Io {
        path: args.out.clone(),
        source,
    })?;
    let crt = args.out.join(format!("{name}.crt"));
    let key_path = args.out.join(format!("{name}.key"));
    let chain = pem("CERTIFICATE", &issued.der) + &pem("CERTIFICATE", keys.serving_ca.cert_der());
    replace_file(&crt, chain.as_bytes(), 0o644)?;
    replace_file(
        &key_path,
        pem("PRIVATE KEY", key.pkcs8_der()).as_bytes(),
        0o600,
    )?;
    if args.json {
        print_json(&json!({
            "certificate": crt.display().to_string(),
            "key": key_path.display().to_string(),
            "sans": args.sans,
            "serial": issued.serial.to_hex(),
            "notBefore": rfc3339(issued.not_before),
            "notAfter": rfc3339(issued.not_after),
        }));
    } else {
        crate::outln!(
            "wrote {} and {} (serial {}, valid until {}): a gateway reading them as [tls] cert_file and key_file picks them up at its next look",
            crt.display(),
            key_path.display(),
            issued.serial.to_hex(),
            rfc3339(issued.not_after)
        );
    }
    Ok(())
}
