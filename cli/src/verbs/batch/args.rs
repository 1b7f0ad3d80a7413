//! The batch subcommands' command lines.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum BatchCommand {
    /// Create an approver key pair: KEY (PKCS#8 PEM, mode 0600) and KEY.pub (SPKI PEM).
    Keygen(KeygenArgs),
    /// Create a destructive batch from a JSON file of leaves.
    Create(CreateArgs),
    /// Show a batch: status, scope root and size, approvals.
    Show(ShowArgs),
    /// List batches, newest first (`--status pending` for those awaiting approvals).
    List(ListArgs),
    /// Every leaf of a batch's scope, with its payload and proof, as approvers recompute it.
    Scope(ScopeArgs),
    /// Review a batch's scope, recompute its root and sign an approval (locally, also against
    /// a server: the scope is fetched, the root recomputed here, the approval submitted).
    Approve(ApproveArgs),
    /// Record an approval signed elsewhere (`batch approve --server` sends its signature so).
    SubmitApproval(SubmitApprovalArgs),
    /// Sign an approver set for an epoch (purpose approver-set).
    SignApprovers(SignApproversArgs),
    /// Cancel a pending batch: it takes no approval, and its held commands are cancelled.
    Cancel(CancelArgs),
}

#[derive(Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// The batch id (64 hex characters).
    pub batch: String,
    /// Why (recorded in the event; at most 500 characters). Who cancels is the caller's
    /// identity (the operator certificate over the API, the local user directly).
    #[arg(long)]
    pub reason: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StoreArg {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the private key; the public key goes to this path plus `.pub`.
    #[arg(long)]
    pub out: PathBuf,
    /// Encrypt the private key (PKCS#8, scrypt and AES-256-CBC) under the passphrase in this
    /// environment variable (e.g. BC_APPROVER_PASSPHRASE).
    #[arg(long)]
    pub passphrase_env: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(long)]
    pub tenant: String,
    /// With the tenant and the caller's identity (the operator certificate's SPIFFE ID over
    /// the API, the local user directly), derives the batch id: a retry answers the same batch.
    #[arg(long)]
    pub idempotency_key: String,
    /// Shown to approvers; at most 500 characters.
    #[arg(long)]
    pub reason: String,
    /// JSON array of { subject, kind, payload_sha256? , payload? }.
    #[arg(long)]
    pub leaves: PathBuf,
    /// 60 to 259200; default 86400.
    #[arg(long)]
    pub not_after_seconds: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// The batch id (64 hex characters).
    #[arg(long)]
    pub batch: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(long)]
    pub batch: String,
    /// The approver's private key (PKCS#8 PEM, not readable by others).
    #[arg(long)]
    pub key: PathBuf,
    /// The trust domain the approval is bound to. It is the deployment's own: read from its
    /// PKI bundle directly, from the approver's profile (`trust_domain`, else the operator
    /// certificate's SPIFFE ID) against a server. Given, it must match that.
    #[arg(long, env = "BC_TRUST_DOMAIN")]
    pub trust_domain: Option<String>,
    /// Approve only if the batch still has this root.
    #[arg(long)]
    pub root: Option<String>,
    /// Approve only a batch that holds exactly these subjects (one per line, a JSON array of
    /// subjects, or a JSON array of { subject, kind }).
    #[arg(long)]
    pub expect: Option<PathBuf>,
    /// Allow leaves that admit any payload.
    #[arg(long)]
    pub allow_unbound: bool,
    /// Allow payloads of kinds this build cannot decode (shown as hex).
    #[arg(long)]
    pub allow_opaque: bool,
    /// Write every distinct operation in full, with its subjects, to this file (JSON).
    #[arg(long)]
    pub operations_out: Option<PathBuf>,
    /// Refuse a batch whose window stays open longer than this many hours from now (1 to 720).
    #[arg(long, default_value_t = 72)]
    pub max_hours: u32,
    /// Sign after the summary (without it, stop and print the root).
    #[arg(long)]
    pub yes: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Only batches of this status: pending, approved, expired or cancelled.
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many batches (1 to 1000).
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ScopeArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// The batch id (64 hex characters).
    #[arg(long)]
    pub batch: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SubmitApprovalArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// The batch id (64 hex characters).
    #[arg(long)]
    pub batch: String,
    /// The approver key's id (64 hex characters: SHA-256 of its SPKI).
    #[arg(long)]
    pub kid: String,
    /// The signature (ECDSA P-256 SHA-256, ASN.1 DER), base64url.
    #[arg(long)]
    pub sig: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SignApproversArgs {
    #[arg(long)]
    pub key: PathBuf,
    #[arg(long)]
    pub epoch: u64,
    /// The new set's public keys (.pub files), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub approvers: Vec<PathBuf>,
    #[arg(long)]
    pub threshold: u32,
    /// Tiers as MAX:THRESHOLD, comma-separated (e.g. 5:1,50:2).
    #[arg(long, value_delimiter = ',')]
    pub tiers: Vec<String>,
    #[arg(long, default_value_t = 0)]
    pub unbatched: u32,
    #[arg(long, env = "BC_TRUST_DOMAIN")]
    pub trust_domain: String,
    #[arg(long)]
    pub json: bool,
}
