//! `bcctl command run | list | show`: signed commands to nodes, over
//! [`commands::command_queue`].
//!
//! - `run` reads the payload as JSON of the kind's message (`domain::command::payloads`' field
//!   names, bytes as hex; no `--payload-file` is the empty message), unseals the command-signing
//!   root from the PKI bundle (`BC_DEPLOYMENT_SECRET`), and enqueues through a
//!   [`WorkerSigner`] whose certificate names this process (`bcctl-<hostname>-<pid>`). After a
//!   root rotation's `switch` it signs under the published active root (the bundle holds both).
//! - `list` and `show` read the `commands` projection only: no key is opened.
//!
//! The store is found like the other verbs' (`--database-url`, `DATABASE_URL`, the embedded
//! `.bcctl/events.db`). Errors start with their code; exit codes: 2 for INVALID_INPUT (bad
//! flags, a payload that is not the kind's message), 1 for everything else (a refusal of the
//! queue, NOT_FOUND, the store, the bundle).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use commands::command_queue::{
    command_list, command_show, enqueue_command, CommandFilter, CommandQueueError, CommandView,
    EnqueueRequest, WorkerSigner,
};
use commands::DatabaseClock;
use domain::command::{kind_spec, payloads::encode_payload};
use domain::quorum::BatchId;
use events::store::{EventStore, StoreError};

use commands::quorum::published_bundle;
use domain::pki::CommandSigningRoot;

use crate::deployment::{Deployment, DeploymentError};
use crate::verbs::token::{fmt_us, print_table};

/// Exit code for bad input (INVALID_INPUT), as the batch verbs.
pub const EXIT_USAGE: u8 = 2;

/// The worker certificate's lifetime for a `bcctl` process: it signs one command and exits, and
/// the node checks the certificate at the body's issue time, so an hour is plenty (at most 24 h).
const CLI_WORKER_LIFETIME: time::Duration = time::Duration::hours(1);

/// The default and largest `--limit` of `command list`.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 10_000;

/// The statuses of the `commands` projection.
pub const STATUSES: &[&str] = &[
    "held",
    "queued",
    "dispatched",
    "succeeded",
    "failed",
    "rejected",
    "cancelled",
];

/// Errors of the command verbs, each starting with its code.
#[derive(Debug, thiserror::Error)]
pub enum CommandCmdError {
    #[error("INVALID_INPUT: {0}")]
    Input(String),
    #[error("NOT_FOUND: command {0} not found (bcctl command list shows the node's commands)")]
    NotFound(String),
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("INVALID_STATE: {0}")]
    State(String),
    #[error("{0}")]
    Queue(CommandQueueError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    #[error("{0}")]
    Locate(#[from] crate::deployment::LocateError),
}

impl From<CommandQueueError> for CommandCmdError {
    fn from(e: CommandQueueError) -> Self {
        match e {
            CommandQueueError::NotFound(id) => CommandCmdError::NotFound(id),
            other => CommandCmdError::Queue(other),
        }
    }
}

impl CommandCmdError {
    /// The process exit code (see the module docs).
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandCmdError::Input(_) => EXIT_USAGE,
            _ => 1,
        }
    }
}

#[derive(Subcommand)]
pub enum CommandCommand {
    /// Enqueue a signed command for a node (destructive kinds need an approved batch).
    Run(RunArgs),
    /// List commands, newest first.
    List(ListArgs),
    /// Show one command: its status, result and output tail.
    Show(ShowArgs),
}

/// Where the store is.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The node id.
    #[arg(long)]
    pub node: String,
    /// The kind (`bcctl command run --kind node.reboot`; see docs/COMMANDS.md).
    #[arg(long)]
    pub kind: String,
    /// The payload as JSON of the kind's message (no file: the empty message).
    #[arg(long)]
    pub payload_file: Option<PathBuf>,
    /// The batch the command runs under (64 hex characters).
    #[arg(long)]
    pub batch: Option<String>,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this node's.
    #[arg(long)]
    pub node: Option<String>,
    /// Only this batch's (64 hex characters).
    #[arg(long)]
    pub batch: Option<String>,
    /// Only in this status: held, queued, dispatched, succeeded, failed, rejected, cancelled.
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many (1 to 10000).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: u32,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The command id (cmd_ and 32 hex characters).
    pub command_id: String,
}

pub async fn run(cmd: CommandCommand) -> Result<(), CommandCmdError> {
    match cmd {
        CommandCommand::Run(args) => run_command(args).await,
        CommandCommand::List(args) => list(args).await,
        CommandCommand::Show(args) => show(args).await,
    }
}

/// This machine's host name (for the worker certificate's holder).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The worker certificate's holder name of this process.
pub fn holder_name() -> String {
    format!("bcctl-{}-{}", hostname(), std::process::id())
}

/// Reads `--payload-file` as the kind's message and encodes it.
fn payload(kind: &str, file: Option<&PathBuf>) -> Result<Vec<u8>, CommandCmdError> {
    let spec = kind_spec(kind).ok_or_else(|| {
        CommandCmdError::Input(format!(
            "--kind {kind:?} is not a known command kind ({})",
            domain::command::BUILT_IN_KINDS
                .iter()
                .map(|k| k.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let Some(path) = file else {
        return Ok(Vec::new());
    };
    let text = crate::invocation::read_file_to_string(path)
        .map_err(|e| CommandCmdError::Input(format!("--payload-file {}: {e}", path.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CommandCmdError::Input(format!("--payload-file {}: not JSON: {e}", path.display()))
    })?;
    encode_payload(spec.payload_type, &json).map_err(|e| {
        CommandCmdError::Input(format!(
            "--payload-file {}: not a {} message: {e}",
            path.display(),
            spec.payload_type
        ))
    })
}

fn batch_arg(text: Option<&str>) -> Result<Option<BatchId>, CommandCmdError> {
    text.map(|t| BatchId::from_hex(t).map_err(|e| CommandCmdError::Input(format!("--batch: {e}"))))
        .transpose()
}

async fn run_command(args: RunArgs) -> Result<(), CommandCmdError> {
    if args.node.trim().is_empty() {
        return Err(CommandCmdError::Input("--node is empty".into()));
    }
    let bytes = payload(&args.kind, args.payload_file.as_ref())?;
    let batch_id = batch_arg(args.batch.as_deref())?;
    let located = args.store.deployment.locate()?;
    let store = args.store.deployment.open_store_as(true).await?;
    // The command-signing root is unsealed with the deployment secret, found by the same rule.
    let root = active_signing_root(&located.deployment, &store).await?;
    let trust_domain = root.trust_domain().clone();
    let signer = WorkerSigner::new(root, trust_domain, &holder_name(), CLI_WORKER_LIFETIME);
    // Who asks: the API caller's SPIFFE ID, or local:<user>@<host> in direct mode.
    let caller = crate::invocation::actor().id().to_string();
    let answer = enqueue_command(
        &store,
        &DatabaseClock::system(),
        &signer,
        &EnqueueRequest {
            node_id: args.node.clone(),
            kind: args.kind.clone(),
            payload: bytes,
            batch_id,
            caller,
            lifetime_us: None,
        },
    )
    .await?;
    if args.store.json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "commandId": answer.command_id,
                "nodeId": args.node,
                "kind": args.kind,
                "held": answer.held,
                "destructive": answer.destructive,
                "batchId": answer.batch_id,
                "notAfterUs": answer.not_after_us,
                "status": if answer.held { "held" } else { "queued" },
            })
        );
    } else {
        crate::outln!(
            "command {} ({} on {}) {}; it lives until {}",
            answer.command_id,
            args.kind,
            args.node,
            if answer.held {
                "held until its batch is approved"
            } else {
                "queued"
            },
            fmt_us(answer.not_after_us)
        );
    }
    Ok(())
}

/// The command-signing root workers of this process sign under: the bundle's root whose
/// SHA-256 is the published active root (after a rotation's switch, the bundle's second root),
/// or the bundle's root before anything is published.
pub async fn active_signing_root(
    deployment: &Deployment,
    store: &EventStore,
) -> Result<CommandSigningRoot, crate::verbs::command::CommandCmdError> {
    let loaded = deployment.open()?;
    let next = loaded.next_command_signing_root;
    let keys = loaded.keys.ok_or_else(|| DeploymentError::Sealed {
        path: deployment.bundle.clone(),
    })?;
    let published = published_bundle(store)
        .await
        .map_err(|e| CommandCmdError::State(e.to_string()))?;
    let Some(published) = published else {
        return Ok(keys.command_signing_root);
    };
    let active = hex::encode(&published.active_root_sha256);
    if root_sha(keys.command_signing_root.cert_der()) == active {
        return Ok(keys.command_signing_root);
    }
    match next {
        Some(root) if root_sha(root.cert_der()) == active => Ok(root),
        _ => Err(CommandCmdError::State(format!(
            "the published active command-signing root {active} is not a root of {}: use the bundle this deployment serves (--pki), or finish the rotation there",
            deployment.bundle.display()
        ))),
    }
}

fn root_sha(der: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(der))
}

async fn list(args: ListArgs) -> Result<(), CommandCmdError> {
    if !(1..=MAX_LIMIT).contains(&args.limit) {
        return Err(CommandCmdError::Input(format!(
            "--limit {} is outside 1 to {MAX_LIMIT}",
            args.limit
        )));
    }
    if let Some(status) = &args.status {
        if !STATUSES.contains(&status.as_str()) {
            return Err(CommandCmdError::Input(format!(
                "--status {status:?} is not one of {}",
                STATUSES.join(", ")
            )));
        }
    }
    let batch = batch_arg(args.batch.as_deref())?.map(|b| b.to_hex());
    let store = args.store.deployment.open_store().await?;
    let views = command_list(
        &store,
        &CommandFilter {
            node_id: args.node,
            batch_id: batch,
            status: args.status,
            limit: args.limit,
        },
    )
    .await?;
    if args.store.json {
        crate::outln!("{}", crate::verbs::token::to_json(&views));
    } else {
        print_views(&views);
    }
    Ok(())
}

async fn show(args: ShowArgs) -> Result<(), CommandCmdError> {
    if !valid_command_id(&args.command_id) {
        return Err(CommandCmdError::Input(format!(
            "{:?} is not a command id (cmd_ and 32 lower-case hex characters)",
            args.command_id
        )));
    }
    let store = args.store.deployment.open_store().await?;
    let view = command_show(&store, &args.command_id).await?;
    if args.store.json {
        crate::outln!("{}", crate::verbs::token::to_json(&view));
    } else {
        print_views(std::slice::from_ref(&view));
        if let Some(detail) = &view.detail {
            crate::outln!("detail: {}", printable(detail));
        }
        if let Some(reason) = &view.cancel_reason {
            crate::outln!("cancelled: {}", printable(reason));
        }
        if let Some(tail) = &view.output_tail {
            crate::outln!("output (tail):\n{}", printable_lines(tail));
        }
    }
    Ok(())
}

/// `cmd_` and 32 lower-case hex characters.
pub fn valid_command_id(id: &str) -> bool {
    id.strip_prefix("cmd_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn printable_lines(text: &str) -> String {
    text.lines().map(printable).collect::<Vec<_>>().join("\n")
}

fn print_views(views: &[CommandView]) {
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.command_id.clone(),
                printable(&v.node_id),
                v.kind.clone(),
                match &v.reject_reason {
                    Some(r) => format!("{} ({r})", v.status),
                    None => v.status.clone(),
                },
                v.batch_id
                    .as_deref()
                    .map(|b| b.chars().take(12).collect())
                    .unwrap_or_else(|| "-".into()),
                v.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                v.dispatch_count.to_string(),
                fmt_us(v.enqueued_at_us),
            ]
        })
        .collect();
    print_table(
        &[
            "COMMAND", "NODE", "KIND", "STATUS", "BATCH", "EXIT", "SENT", "ENQUEUED",
        ],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_ids_are_cmd_and_32_lower_hex() {
        assert!(valid_command_id("cmd_0123456789abcdef0123456789abcdef"));
        assert!(!valid_command_id("cmd_0123456789ABCDEF0123456789abcdef"));
        assert!(!valid_command_id("cmd_0123"));
        assert!(!valid_command_id("0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn payloads_are_the_kinds_message_or_refused() {
        assert_eq!(payload("node.reboot", None).unwrap(), Vec::<u8>::new());
        match payload("node.rebooot", None) {
            Err(CommandCmdError::Input(m)) => assert!(m.contains("not a known command kind")),
            other => panic!("{other:?}"),
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.json");
        std::fs::write(&file, r#"{"reason":"kernel","delay_secs":1}"#).unwrap();
        match payload("node.reboot", Some(&file)) {
            Err(e @ CommandCmdError::Input(_)) => {
                assert_eq!(e.exit_code(), EXIT_USAGE);
                assert!(e.to_string().contains("unknown field `delay_secs`"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
