//! `bcctl ssh …` (issue 42): the SSH CA's trust lines, break-glass user certificates (issue,
//! list, revoke) and the key revocation list.
//!
//! - `ssh ca` prints the `@cert-authority` line for clients' known_hosts (`--known-hosts`) and
//!   the CA's key line for sshd's `TrustedUserCAKeys` file (`--trusted-user-ca`), from the
//!   bundle's public half (no secret needed).
//! - `ssh issue --node N --account A --public-key FILE [--ttl 15m] [--out FILE]` signs an
//!   OpenSSH user certificate for the one principal `A@N` through [`commands::ssh`] (the event
//!   commits first), then prints it or writes it to `--out` (`ssh -o CertificateFile=`). Through
//!   the admin API it never outlives the caller's operator certificate.
//! - `ssh list [--node N]`, `ssh revoke SERIAL [--reason TEXT]` (`ssh.user_cert.revoked`).
//! - `ssh krl --out FILE` writes the OpenSSH KRL of the revoked, unexpired serials (sshd's
//!   `RevokedKeys`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use commands::ssh::{issue_ssh_cert, krl_serials, list_ssh_certs, revoke_ssh_cert, SshError};
use commands::DatabaseClock;
use domain::pki::ssh_ca::public_key_blob;
use domain::ssh::issue::{parse_serial, IssueRequest};
use domain::ssh::krl::{write_krl, KrlRequest};
use projections::ssh::read::SshCertRow;
use serde_json::json;
use time::OffsetDateTime;

use crate::deployment::{CommonArgs, DeploymentError, LocateError, OpenError};
use crate::output::{print_json, rfc3339};
use crate::verbs::token::{fmt_us, print_table};

#[derive(Subcommand)]
pub enum SshCommand {
    /// Print the SSH CA's trust lines: `@cert-authority` for known_hosts, the key line for
    /// sshd's TrustedUserCAKeys file.
    Ca(CaArgs),
    /// Sign a break-glass user certificate for the one principal ACCOUNT@NODE (at most 1h).
    Issue(IssueArgs),
    /// List the SSH certificates issued, revoked ones too, oldest first.
    List(ListArgs),
    /// Revoke an SSH certificate by serial: it goes on the KRL (`bcctl ssh krl`).
    Revoke(RevokeArgs),
    /// Write the OpenSSH key revocation list of the revoked, unexpired certificates.
    Krl(KrlArgs),
}

#[derive(Args)]
pub struct CaArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Print only the known_hosts line (`@cert-authority <names> <key>`).
    #[arg(long)]
    pub known_hosts: bool,
    /// Print only the TrustedUserCAKeys file's line (the CA's key).
    #[arg(long)]
    pub trusted_user_ca: bool,
    /// The host name patterns of the `@cert-authority` line, comma-separated.
    #[arg(long, value_name = "PATTERNS", default_value = "*")]
    pub names: String,
}

#[derive(Args)]
pub struct IssueArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The node the certificate opens (its id, as `bcctl node list` prints it).
    #[arg(long)]
    pub node: String,
    /// The account on that node; the principal is ACCOUNT@NODE.
    #[arg(long)]
    pub account: String,
    /// The OpenSSH public key to certify (id_ed25519.pub, …).
    #[arg(long, value_name = "FILE")]
    pub public_key: PathBuf,
    /// Lifetime, at most 1h (and never past your operator certificate).
    #[arg(long, default_value = "15m")]
    pub ttl: String,
    /// Write the certificate here (mode 0644; `ssh -o CertificateFile=FILE`) instead of
    /// printing it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only this node's certificates.
    #[arg(long)]
    pub node: Option<String>,
}

#[derive(Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The certificate's serial (decimal, as `bcctl ssh list` and `ssh-keygen -L` print it).
    pub serial: String,
    /// Why it is revoked (recorded in the event).
    #[arg(long, default_value = "break-glass access ended")]
    pub reason: String,
}

#[derive(Args)]
pub struct KrlArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Where to write the KRL (mode 0644; sshd's RevokedKeys).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// Why an ssh verb failed.
#[derive(Debug, thiserror::Error)]
pub enum SshCmdError {
    #[error("{0}")]
    Open(#[from] OpenError),
    #[error("{0}")]
    Ssh(#[from] SshError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    State(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl From<DeploymentError> for SshCmdError {
    fn from(e: DeploymentError) -> Self {
        SshCmdError::Open(OpenError::Deployment(e))
    }
}

impl From<LocateError> for SshCmdError {
    fn from(e: LocateError) -> Self {
        SshCmdError::Open(OpenError::Locate(e))
    }
}

impl SshCmdError {
    /// 2 for a bad value, 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            SshCmdError::Ssh(e) if e.is_usage() => crate::output::EXIT_USAGE,
            SshCmdError::Usage(_) => crate::output::EXIT_USAGE,
            _ => crate::output::EXIT_FAILED,
        }
    }
}

pub async fn run(cmd: SshCommand) -> Result<(), SshCmdError> {
    match cmd {
        SshCommand::Ca(args) => ca(args),
        SshCommand::Issue(args) => issue(args).await,
        SshCommand::List(args) => list(args).await,
        SshCommand::Revoke(args) => revoke(args).await,
        SshCommand::Krl(args) => krl(args).await,
    }
}

/// The CA's public key (32 bytes) and the trust domain, from the bundle's public half.
fn ca_public(common: &CommonArgs) -> Result<([u8; 32], String), SshCmdError> {
    let located = common.deployment.locate()?;
    let loaded = located.deployment.public_half()?;
    let key = loaded.public.ssh_ca_public_key.ok_or_else(|| {
        SshCmdError::State(
            "INVALID_STATE: the PKI bundle has no SSH CA (`bcctl pki add-ssh-ca` adds one)".into(),
        )
    })?;
    Ok((key, loaded.public.trust_domain.to_string()))
}

fn ca(args: CaArgs) -> Result<(), SshCmdError> {
    if args.names.is_empty() || args.names.contains(char::is_whitespace) {
        return Err(SshCmdError::Usage(format!(
            "--names {:?}: comma-separated host patterns without spaces",
            args.names
        )));
    }
    let (key, trust_domain) = ca_public(&args.common)?;
    let key_line = format!(
        "{} bc-ssh-ca@{trust_domain}",
        domain::pki::ssh_ca::public_key_line(&key)
    );
    let known_hosts = format!("@cert-authority {} {key_line}", args.names);
    if args.common.json {
        print_json(&json!({
            "publicKey": key_line,
            "knownHosts": known_hosts,
            "trustedUserCaKeys": key_line,
        }));
    } else if args.known_hosts {
        crate::outln!("{known_hosts}");
    } else if args.trusted_user_ca {
        crate::outln!("{key_line}");
    } else {
        crate::outln!("# known_hosts (clients): trust host certificates this CA signs");
        crate::outln!("{known_hosts}");
        crate::outln!("# the file sshd_config's TrustedUserCAKeys names (nodes): trust user certificates this CA signs");
        crate::outln!("{key_line}");
    }
    Ok(())
}

async fn issue(args: IssueArgs) -> Result<(), SshCmdError> {
    let ttl = domain::duration::parse_duration(&args.ttl)
        .map_err(|e| SshCmdError::Usage(format!("--ttl: {e}")))?;
    let ttl = time::Duration::try_from(ttl)
        .map_err(|_| SshCmdError::Usage(format!("--ttl {}: too long", args.ttl)))?;
    let public_key =
        crate::invocation::read_file_to_string(&args.public_key).map_err(|source| {
            SshCmdError::Io {
                path: args.public_key.clone(),
                source,
            }
        })?;
    let located = args.common.deployment.locate()?;
    let keys = located.deployment.keys()?;
    let actor = crate::invocation::actor();
    let store = args
        .common
        .deployment
        .open_store_as(true)
        .await?
        .acting_as(actor.clone());
    let request = IssueRequest {
        node_id: &args.node,
        account: &args.account,
        public_key: &public_key,
        ttl,
        operator: actor.id(),
        credential_not_after: crate::invocation::credential_not_after(),
    };
    let issued = issue_ssh_cert(
        &store,
        &DatabaseClock::system(),
        &request,
        keys.ssh_ca.as_ref(),
    )
    .await?;
    let line = issued
        .certificate
        .to_openssh_line(&format!("serial {} {}", issued.serial, issued.principal));
    if let Some(out) = &args.out {
        crate::invocation::write_file(out, line.as_bytes(), 0o644).map_err(|source| {
            SshCmdError::Io {
                path: out.clone(),
                source,
            }
        })?;
    }
    if args.common.json {
        print_json(&json!({
            "serial": issued.serial.to_string(),
            "principal": issued.principal,
            "keyId": issued.key_id,
            "keyFingerprint": issued.key_fingerprint,
            "validAfter": rfc3339(issued.valid_after),
            "validBefore": rfc3339(issued.valid_before),
            "certificate": line.trim_end(),
            "out": args.out.as_ref().map(|p| p.display().to_string()),
        }));
    } else if let Some(out) = &args.out {
        crate::outln!(
            "issued SSH certificate serial {} for {} (key {}), valid until {}: wrote {}",
            issued.serial,
            issued.principal,
            issued.key_fingerprint,
            rfc3339(issued.valid_before),
            out.display()
        );
    } else {
        crate::out!("{line}");
    }
    Ok(())
}

async fn list(args: ListArgs) -> Result<(), SshCmdError> {
    let store = args.common.deployment.open_store().await?;
    let rows = list_ssh_certs(&store, args.node.as_deref()).await?;
    if args.common.json {
        print_json(&rows.iter().map(row_json).collect::<Vec<_>>());
    } else if rows.is_empty() {
        crate::outln!("no SSH certificates (bcctl ssh issue issues one)");
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.serial.to_string(),
                    r.principal.clone(),
                    r.key_fingerprint.clone(),
                    fmt_us(r.valid_before.saturating_mul(1_000_000)),
                    r.issued_by.clone().unwrap_or_default(),
                    if r.revoked {
                        format!("revoked: {}", r.revoke_reason.as_deref().unwrap_or(""))
                    } else {
                        "issued".to_string()
                    },
                ]
            })
            .collect();
        print_table(
            &[
                "SERIAL",
                "PRINCIPAL",
                "KEY",
                "VALID BEFORE",
                "ISSUED BY",
                "STATE",
            ],
            &table,
        );
    }
    Ok(())
}

fn row_json(r: &SshCertRow) -> serde_json::Value {
    json!({
        "serial": r.serial.to_string(),
        "tenantId": r.tenant_id,
        "nodeId": r.node_id,
        "account": r.account,
        "principal": r.principal,
        "keyId": r.key_id,
        "keyType": r.key_type,
        "keyFingerprint": r.key_fingerprint,
        "validAfter": fmt_us(r.valid_after.saturating_mul(1_000_000)),
        "validBefore": fmt_us(r.valid_before.saturating_mul(1_000_000)),
        "certificateSha256": hex::encode(&r.certificate_sha256),
        "issuedBy": r.issued_by,
        "issuedAt": fmt_us(r.issued_at_us),
        "revoked": r.revoked,
        "revokeReason": r.revoke_reason,
        "revokedBy": r.revoked_by,
        "revokedAt": r.revoked_at_us.map(fmt_us),
    })
}

async fn revoke(args: RevokeArgs) -> Result<(), SshCmdError> {
    let serial = parse_serial(&args.serial).map_err(SshError::from)?;
    let store = args
        .common
        .deployment
        .open_store_as(true)
        .await?
        .acting_as(crate::invocation::actor());
    let outcome = revoke_ssh_cert(&store, &DatabaseClock::system(), serial, &args.reason).await?;
    let c = &outcome.certificate;
    if args.common.json {
        let mut doc = row_json(c);
        doc["alreadyRevoked"] = serde_json::Value::Bool(!outcome.recorded);
        print_json(&doc);
    } else if outcome.recorded {
        crate::outln!(
            "revoked SSH certificate {} ({}): rewrite the KRL (`bcctl ssh krl --out FILE`) for sshd's RevokedKeys",
            c.serial,
            c.principal
        );
    } else {
        crate::outln!(
            "SSH certificate {} ({}) already revoked: nothing to do",
            c.serial,
            c.principal
        );
    }
    Ok(())
}

async fn krl(args: KrlArgs) -> Result<(), SshCmdError> {
    let (key, trust_domain) = ca_public(&args.common)?;
    let store = args.common.deployment.open_store().await?;
    let now = OffsetDateTime::now_utc();
    let (serials, version) = krl_serials(&store, now.unix_timestamp()).await?;
    let bytes = write_krl(&KrlRequest {
        krl_version: version,
        generated_at: u64::try_from(now.unix_timestamp()).unwrap_or(0),
        comment: &format!("bc-ssh-ca@{trust_domain} revoked certificates"),
        ca_key_blob: &public_key_blob(&key),
        serials: &serials,
    });
    write_atomically(&args.out, &bytes)?;
    if args.common.json {
        print_json(&json!({
            "out": args.out.display().to_string(),
            "krlVersion": version,
            "serials": serials.iter().map(u64::to_string).collect::<Vec<_>>(),
        }));
    } else {
        crate::outln!(
            "wrote {} ({} revoked serials, KRL version {version})",
            args.out.display(),
            serials.len()
        );
    }
    Ok(())
}

/// Writes the KRL: into the reply during an API call, else through a temporary file renamed
/// over `path`, so sshd never reads half a list.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), SshCmdError> {
    let io = |source| SshCmdError::Io {
        path: path.to_path_buf(),
        source,
    };
    if crate::invocation::is_remote() {
        return crate::invocation::write_file(path, bytes, 0o644).map_err(io);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    crate::invocation::write_file(&tmp, bytes, 0o644).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
