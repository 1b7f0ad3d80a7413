//! The arguments of `bcctl audit` and its subcommands.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Write a tenant's whole trail (events, leaf hashes, checkpoints, consistency proofs) to a
    /// self-contained JSON-lines file.
    Export(ExportArgs),
    /// Verify a tenant's trail (from the database or an export) against the pinned audit key.
    Verify(VerifyArgs),
    /// Sequence what is new, then seal a checkpoint for a tenant (or every grown tenant).
    Seal(SealArgs),
    /// Print the inclusion proof of one event against the tenant's latest checkpoint, as JSON.
    Prove(ProveArgs),
    /// Check an inclusion proof file made by `bcctl audit prove`.
    VerifyProof(VerifyProofArgs),
}

#[derive(Args)]
pub struct DbArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
}

#[derive(Args)]
pub struct ExportArgs {
    #[arg(long)]
    pub tenant: String,
    /// The file to write (refused if it exists); `-` writes standard output.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the events after the last checkpoint (covered by no signature yet; `verify`
    /// then needs --allow-unsealed). Without it the export ends at the last checkpoint's size.
    #[arg(long)]
    pub include_unsealed: bool,
    #[command(flatten)]
    pub db: DbArgs,
    /// Print the summary as one JSON object on standard output (refused with `--out -`, where
    /// standard output is the export itself).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("source").required(true).args(["tenant", "bundle"])))]
pub struct VerifyArgs {
    /// Verify this tenant's trail straight from the deployment's store.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Verify an export made by `bcctl audit export`.
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    /// The audit key's pin, sha256/<base64> (without it: the key and the trust domain of the
    /// deployment's PKI bundle, its public half; `--pki FILE` names another bundle).
    #[arg(long, env = "BC_AUDIT_PIN")]
    pub pin: Option<String>,
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// With --pin: the trust domain the log's origin must name.
    #[arg(long)]
    pub trust_domain: Option<String>,
    /// Accept leaves after the last checkpoint: exit 0 when everything signed verifies, and
    /// report how many leaves no signature covers (without it they are a failure, exit 4).
    #[arg(long)]
    pub allow_unsealed: bool,
    /// A checkpoint you saw before (a signed note, or a JSON object with a `signed_note` field:
    /// an export's checkpoint line, a proof file, an earlier `verify --json` report): the trail
    /// must extend it (the root of its first N leaves is that checkpoint's) and its last
    /// checkpoint must be at least that large.
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// The trail's last checkpoint must cover at least N leaves.
    #[arg(long, value_name = "N")]
    pub at_least_size: Option<u64>,
    /// Print one JSON object instead of text (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("which").required(true).args(["tenant", "all"])))]
pub struct SealArgs {
    #[arg(long)]
    pub tenant: Option<String>,
    /// Every tenant whose tree grew.
    #[arg(long)]
    pub all: bool,
    /// The deployment: its store, and its PKI bundle holding the audit signing key (a sealed
    /// bundle opens with the deployment secret, found by the same rule).
    #[command(flatten)]
    pub db: DbArgs,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ProveArgs {
    #[arg(long)]
    pub tenant: String,
    /// The event's global log position.
    #[arg(long)]
    pub position: i64,
    #[command(flatten)]
    pub db: DbArgs,
    /// Write the proof here instead of standard output (`-` is standard output).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Accepted for the convention: the proof is JSON either way.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct VerifyProofArgs {
    /// The proof file (`bcctl audit prove` output).
    pub file: PathBuf,
    /// The audit key's pin (without it: the deployment's PKI bundle's public half).
    #[arg(long, env = "BC_AUDIT_PIN")]
    pub pin: Option<String>,
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    #[arg(long)]
    pub json: bool,
}
