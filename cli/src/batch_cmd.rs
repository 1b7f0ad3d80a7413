//! `bcctl batch keygen | create | show | approve | sign-approvers`: approver keys, destructive
//! batches and approver-set signatures.
//!
//! `approve` never trusts the control plane's word for what a batch holds: it pages the scope,
//! recomputes the root from the listed leaves and refuses a mismatch (SCOPE_MISMATCH), approves
//! only the root reviewed (`--root`, SCOPE_CHANGED) and exactly the subjects expected (`--expect`,
//! SCOPE_UNEXPECTED), refuses leaves that admit any payload unless `--allow-unbound`
//! (UNBOUND_SCOPE), and refuses an approver key file readable by others (INVALID_STATE).
//!
//! Key files are PEM: `PRIVATE KEY` (PKCS#8, mode 0600) and `PUBLIC KEY` (SPKI) in `<key>.pub`.
//!
//! Every error starts with its code (`INVALID_INPUT:`, `INVALID_STATE:`, `CONFLICT:`, ...). Exit
//! codes: 0 done (an `approve` without `--yes` only reviews, signs nothing and exits 0),
//! [`EXIT_USAGE`] (2) for bad input (INVALID_INPUT, as clap's own usage errors),
//! [`EXIT_REVIEW_REFUSED`] (3) when `approve`'s review refuses to sign (SCOPE_MISMATCH,
//! SCOPE_CHANGED, SCOPE_UNEXPECTED, UNBOUND_SCOPE, INVALID_RESPONSE), 1 for everything else
//! (INVALID_STATE, NOT_FOUND, CONFLICT, PERMISSION_DENIED, files, the store).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use clap::{Args, Subcommand};
use commands::quorum::{approve_batch, batch_view, create_batch, scope_page, QuorumError};
use commands::{Clock, SystemClock};
use domain::quorum::{
    approver_set_signing_input, batch_approval_signing_input, ApprovalSignature, ApproverKey,
    ApproverSet, BatchId, BatchStatus, CreateBatch, Kid, ScopeHash, ScopeLeaf, ScopeLeafRequest,
    ScopeTree, Tier, TrustDomain, MAX_SCOPE_LEAVES,
};
use events::store::{EventStore, StoreError};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use serde_json::json;

/// Leaves per scope page when approving.
const PAGE: u32 = 5000;
/// Subjects shown per kind in the review summary; the rest are counted.
const SUBJECTS_SHOWN_PER_KIND: usize = 12;
/// The longest window `approve --max-hours` may allow (30 days).
const MAX_MAX_HOURS: u32 = 720;

/// Exit code for bad input (INVALID_INPUT).
pub const EXIT_USAGE: u8 = 2;
/// Exit code when `approve`'s review refuses to sign.
pub const EXIT_REVIEW_REFUSED: u8 = 3;

/// The SPKI DER prefix of a P-256 key with an uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Errors of the batch subcommands, each with its way out.
#[derive(Debug, thiserror::Error)]
pub enum BatchCmdError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("INVALID_STATE: {0} already exists: batch keygen never overwrites a key; choose another --out")]
    Exists(PathBuf),
    #[error("INVALID_STATE: approver key {path} is readable by others (mode {mode:o}); run chmod 600 {path}")]
    KeyReadable { path: PathBuf, mode: u32 },
    #[error("INVALID_INPUT: {path} is not a {what} PEM file: {why}")]
    BadPem {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    #[error("INVALID_INPUT: {0}")]
    Input(String),
    #[error("NOT_FOUND: batch {0} not found")]
    NotFound(BatchId),
    #[error("INVALID_STATE: {0}")]
    State(String),
    #[error("SCOPE_MISMATCH: the control plane answered two different batches: {0}")]
    ScopeMismatch(String),
    #[error("SCOPE_CHANGED: the batch's root is {actual}, not the reviewed {reviewed}")]
    ScopeChanged { actual: ScopeHash, reviewed: String },
    #[error("SCOPE_UNEXPECTED: {0}")]
    ScopeUnexpected(String),
    #[error("UNBOUND_SCOPE: {count} leaves admit any payload ({sample}); review them and pass --allow-unbound")]
    Unbound { count: usize, sample: String },
    #[error("INVALID_RESPONSE: {0}")]
    InvalidResponse(String),
    #[error("{}", quorum_message(.0))]
    Quorum(#[from] QuorumError),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// A command-layer error as the CLI prints it: a refusal starts with its code.
fn quorum_message(error: &QuorumError) -> String {
    match error.refusal() {
        Some(refusal) => format!("{}: {refusal}", refusal.code()),
        None => error.to_string(),
    }
}

impl BatchCmdError {
    /// The process exit code (see the module docs).
    pub fn exit_code(&self) -> u8 {
        match self {
            BatchCmdError::Input(_) | BatchCmdError::BadPem { .. } => EXIT_USAGE,
            BatchCmdError::Quorum(e)
                if e.refusal().is_some_and(|r| r.code() == "INVALID_INPUT") =>
            {
                EXIT_USAGE
            }
            BatchCmdError::ScopeMismatch(_)
            | BatchCmdError::ScopeChanged { .. }
            | BatchCmdError::ScopeUnexpected(_)
            | BatchCmdError::Unbound { .. }
            | BatchCmdError::InvalidResponse(_) => EXIT_REVIEW_REFUSED,
            _ => 1,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BatchCmdError + '_ {
    move |source| BatchCmdError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Subcommand)]
pub enum BatchCommand {
    /// Create an approver key pair: KEY (PKCS#8 PEM, mode 0600) and KEY.pub (SPKI PEM).
    Keygen(KeygenArgs),
    /// Create a destructive batch from a JSON file of leaves.
    Create(CreateArgs),
    /// Show a batch: status, scope root and size, approvals.
    Show(ShowArgs),
    /// Review a batch's scope, recompute its root and sign an approval.
    Approve(ApproveArgs),
    /// Sign an approver set for an epoch (purpose approver-set).
    SignApprovers(SignApproversArgs),
}

#[derive(Args)]
pub struct StoreArg {
    /// postgres://... or sqlite://PATH
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the private key; the public key goes to this path plus `.pub`.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(long)]
    pub tenant: String,
    /// The caller's identity (the batch id derives from tenant, caller and key).
    #[arg(long)]
    pub caller: String,
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
    /// The deployment's trust domain (the approval is bound to it).
    #[arg(long, env = "BC_TRUST_DOMAIN")]
    pub trust_domain: String,
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

pub async fn run(command: BatchCommand) -> Result<(), BatchCmdError> {
    match command {
        BatchCommand::Keygen(args) => keygen(args),
        BatchCommand::Create(args) => create(args).await,
        BatchCommand::Show(args) => show(args).await,
        BatchCommand::Approve(args) => approve(args).await,
        BatchCommand::SignApprovers(args) => sign_approvers(args),
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn read_pem(path: &Path, label: &'static str) -> Result<Vec<u8>, BatchCmdError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let bad = |why: &str| BatchCmdError::BadPem {
        path: path.to_path_buf(),
        what: label,
        why: why.to_string(),
    };
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin).ok_or_else(|| bad("no BEGIN line"))? + begin.len();
    let stop = text[start..].find(&end).ok_or_else(|| bad("no END line"))? + start;
    let body: String = text[start..stop].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| bad(&e.to_string()))
}

fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), BatchCmdError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                BatchCmdError::Exists(path.to_path_buf())
            } else {
                BatchCmdError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        })?;
    file.write_all(contents.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

fn pub_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

fn keygen(args: KeygenArgs) -> Result<(), BatchCmdError> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| BatchCmdError::State("the system random source failed".into()))?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| BatchCmdError::State("a generated key did not load".into()))?;
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    let kid = Kid::of_spki(&spki);
    let public = pub_path(&args.out);
    if public.exists() {
        return Err(BatchCmdError::Exists(public));
    }
    write_new(&args.out, &pem("PRIVATE KEY", pkcs8.as_ref()), 0o600)?;
    write_new(&public, &pem("PUBLIC KEY", &spki), 0o644)?;
    if args.json {
        println!(
            "{}",
            json!({ "kid": kid.to_hex(), "key": args.out, "public": public })
        );
    } else {
        println!("approver key {} written to {}", kid, args.out.display());
        println!("public key: {}", public.display());
    }
    Ok(())
}

/// Loads a private key, refusing a file readable by others.
fn load_key(path: &Path) -> Result<(EcdsaKeyPair, ApproverKey), BatchCmdError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode()
        & 0o777;
    if mode & 0o077 != 0 {
        return Err(BatchCmdError::KeyReadable {
            path: path.to_path_buf(),
            mode,
        });
    }
    let der = read_pem(path, "PRIVATE KEY")?;
    let pair =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &SystemRandom::new())
            .map_err(|e| BatchCmdError::BadPem {
                path: path.to_path_buf(),
                what: "P-256 PKCS#8",
                why: e.to_string(),
            })?;
    let mut spki = P256_SPKI_PREFIX.to_vec();
    spki.extend_from_slice(pair.public_key().as_ref());
    let key = ApproverKey::from_spki(&spki).map_err(|e| BatchCmdError::Input(e.to_string()))?;
    Ok((pair, key))
}

fn sign(pair: &EcdsaKeyPair, message: &[u8]) -> Result<Vec<u8>, BatchCmdError> {
    pair.sign(&SystemRandom::new(), message)
        .map(|s| s.as_ref().to_vec())
        .map_err(|_| BatchCmdError::State("signing failed".into()))
}

fn batch_id(text: &str) -> Result<BatchId, BatchCmdError> {
    BatchId::from_hex(text).map_err(|e| BatchCmdError::Input(format!("--batch: {e}")))
}

async fn open(url: &str) -> Result<EventStore, BatchCmdError> {
    Ok(EventStore::open(url).await?)
}

async fn create(args: CreateArgs) -> Result<(), BatchCmdError> {
    let text = std::fs::read_to_string(&args.leaves).map_err(io(&args.leaves))?;
    let leaves: Vec<ScopeLeafRequest> = serde_json::from_str(&text)
        .map_err(|e| BatchCmdError::Input(format!("{}: {e}", args.leaves.display())))?;
    let store = open(&args.store.database_url).await?;
    let created = create_batch(
        &store,
        &SystemClock,
        &CreateBatch {
            tenant: args.tenant,
            caller: args.caller,
            idempotency_key: args.idempotency_key,
            reason: args.reason,
            leaves,
            not_after_seconds: args.not_after_seconds,
        },
    )
    .await?;
    let out = json!({
        "batchId": created.batch_id.to_hex(),
        "scopeRoot": created.scope_root.to_hex(),
        "size": created.scope_size,
        "required": created.required_approvals,
        "notAfterUs": created.not_after_us,
        "status": created.status,
        "retry": created.retry,
    });
    if args.json {
        println!("{out}");
    } else {
        println!(
            "batch {} ({} leaves, {} approvals needed, {}{})",
            created.batch_id,
            created.scope_size,
            created.required_approvals,
            status_name(created.status),
            if created.retry { ", existing" } else { "" }
        );
    }
    Ok(())
}

async fn show(args: ShowArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let store = open(&args.store.database_url).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    let out = json!({
        "batchId": id.to_hex(),
        "tenantId": view.tenant_id,
        "caller": view.caller,
        "reason": view.reason,
        "status": view.state.status,
        "scopeRoot": view.state.scope_root.to_hex(),
        "size": view.state.scope_size,
        "notAfterUs": view.state.not_after_us,
        "required": view.state.required,
        "held": view.state.approvals.len(),
        "approvers": view.state.approvals.keys().map(|k| k.to_hex()).collect::<Vec<_>>(),
    });
    if args.json {
        println!("{out}");
    } else {
        println!(
            "batch {id}\n  tenant {}  by {}\n  reason: {}\n  status {}, {} of {} approvals\n  root {} ({} leaves), ends at {} µs",
            printable(&view.tenant_id),
            printable(&view.caller),
            printable(&view.reason),
            status_name(view.state.status),
            view.state.approvals.len(),
            view.state.required,
            view.state.scope_root,
            view.state.scope_size,
            view.state.not_after_us
        );
    }
    Ok(())
}

/// Server strings pass through a printable filter before they reach a terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// What `--expect` names: subjects, or (subject, kind) pairs.
enum Expected {
    Subjects(BTreeSet<String>),
    Commands(BTreeSet<(String, String)>),
}

fn read_expect(path: &Path) -> Result<Expected, BatchCmdError> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let value: serde_json::Value = serde_json::from_str(trimmed)
            .map_err(|e| BatchCmdError::Input(format!("{}: {e}", path.display())))?;
        let items = value.as_array().cloned().unwrap_or_default();
        if items.iter().all(|v| v.is_string()) {
            return Ok(Expected::Subjects(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
            ));
        }
        let mut pairs = BTreeSet::new();
        for item in items {
            match (item["subject"].as_str(), item["kind"].as_str()) {
                (Some(s), Some(k)) => {
                    pairs.insert((s.to_string(), k.to_string()));
                }
                _ => {
                    return Err(BatchCmdError::Input(format!(
                        "{}: expected subjects or {{ subject, kind }} objects",
                        path.display()
                    )))
                }
            }
        }
        return Ok(Expected::Commands(pairs));
    }
    Ok(Expected::Subjects(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

fn difference<T: Ord + std::fmt::Debug>(want: &BTreeSet<T>, have: &BTreeSet<T>) -> Option<String> {
    let missing: Vec<_> = want.difference(have).take(5).collect();
    let extra: Vec<_> = have.difference(want).take(5).collect();
    if missing.is_empty() && extra.is_empty() {
        None
    } else {
        Some(format!("missing {missing:?}, not expected {extra:?}"))
    }
}

/// What an approver reviews before signing: the reason, every subject by kind (at most
/// [`SUBJECTS_SHOWN_PER_KIND`] per kind, then a count), the approvals so far and the window.
fn summary(
    view: &commands::quorum::BatchView,
    leaves: &[ScopeLeaf],
) -> (String, serde_json::Value) {
    let state = &view.state;
    let mut by_kind: BTreeMap<&str, Vec<&ScopeLeaf>> = BTreeMap::new();
    for leaf in leaves {
        by_kind.entry(leaf.kind()).or_default().push(leaf);
    }
    let mut text = format!(
        "batch {}\n  tenant {}, created by {}\n  reason: {}\n  {} leaves, root {}\n",
        state.batch_id,
        printable(&view.tenant_id),
        printable(&view.caller),
        printable(&view.reason),
        state.scope_size,
        state.scope_root
    );
    let mut kinds = serde_json::Map::new();
    for (kind, leaves) in by_kind.iter_mut() {
        leaves.sort_by(|a, b| a.subject().cmp(b.subject()));
        let shown: Vec<String> = leaves
            .iter()
            .take(SUBJECTS_SHOWN_PER_KIND)
            .map(|l| match l.payload_sha256() {
                Some(d) => format!("{} (payload {})", printable(l.subject()), &d.to_hex()[..12]),
                None => format!("{} (any payload)", printable(l.subject())),
            })
            .collect();
        let more = leaves.len().saturating_sub(SUBJECTS_SHOWN_PER_KIND);
        text.push_str(&format!(
            "  {} ({} leaves): {}{}\n",
            printable(kind),
            leaves.len(),
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        kinds.insert(
            kind.to_string(),
            json!({ "count": leaves.len(), "subjects": leaves.iter().take(SUBJECTS_SHOWN_PER_KIND).map(|l| l.subject()).collect::<Vec<_>>() }),
        );
    }
    text.push_str(&format!(
        "  {} of {} approvals so far{}; the window ends at {} µs",
        state.approvals.len(),
        state.required,
        if state.approvals.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                state
                    .approvals
                    .keys()
                    .map(|k| k.to_hex()[..12].to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        state.not_after_us
    ));
    let value = json!({
        "batchId": state.batch_id.to_hex(),
        "tenantId": view.tenant_id,
        "caller": view.caller,
        "reason": view.reason,
        "scopeRoot": state.scope_root.to_hex(),
        "size": state.scope_size,
        "kinds": kinds,
        "held": state.approvals.len(),
        "required": state.required,
        "notAfterUs": state.not_after_us,
    });
    (text, value)
}

/// Pages the whole scope, refusing an answer that does not advance or lists leaves out of place.
async fn page_scope(
    store: &EventStore,
    id: &BatchId,
    size: u32,
) -> Result<Vec<ScopeLeaf>, BatchCmdError> {
    let mut leaves: Vec<ScopeLeaf> = Vec::with_capacity(size as usize);
    let mut from = 0u32;
    loop {
        let page = scope_page(store, id, from, PAGE).await?;
        if page.is_empty() {
            return Ok(leaves);
        }
        for entry in &page {
            if entry.proof.index < from {
                return Err(BatchCmdError::InvalidResponse(format!(
                    "the scope page from leaf {from} does not advance (it lists leaf {})",
                    entry.proof.index
                )));
            }
            if entry.proof.index != from {
                return Err(BatchCmdError::ScopeMismatch(format!(
                    "leaf {} listed where {from} was expected",
                    entry.proof.index
                )));
            }
            from += 1;
            leaves.push(entry.leaf.clone());
        }
        if leaves.len() > size as usize {
            return Err(BatchCmdError::ScopeMismatch(format!(
                "more leaves than the size {size}"
            )));
        }
    }
}

async fn approve(args: ApproveArgs) -> Result<(), BatchCmdError> {
    let id = batch_id(&args.batch)?;
    let trust_domain = TrustDomain::new(args.trust_domain.clone())
        .map_err(|e| BatchCmdError::Input(format!("--trust-domain: {e}")))?;
    if !(1..=MAX_MAX_HOURS).contains(&args.max_hours) {
        return Err(BatchCmdError::Input(format!(
            "--max-hours {} is outside 1 to {MAX_MAX_HOURS}",
            args.max_hours
        )));
    }
    let (pair, key) = load_key(&args.key)?;
    let store = open(&args.store.database_url).await?;
    let view = batch_view(&store, &id)
        .await?
        .ok_or(BatchCmdError::NotFound(id))?;
    let state = &view.state;
    if state.status != BatchStatus::Pending {
        return Err(BatchCmdError::State(format!(
            "batch {id} is {}, not pending: only a pending batch takes approvals",
            status_name(state.status)
        )));
    }
    if state.scope_size == 0 || state.scope_size as usize > MAX_SCOPE_LEAVES {
        return Err(BatchCmdError::InvalidResponse(format!(
            "batch {id} claims a scope of {} leaves",
            state.scope_size
        )));
    }
    let now = SystemClock.now_us();
    if now > state.not_after_us {
        return Err(BatchCmdError::State(format!(
            "batch {id}'s window closed at {} µs; create a new batch",
            state.not_after_us
        )));
    }
    let max_end = now.saturating_add(i64::from(args.max_hours) * 3_600_000_000);
    if state.not_after_us > max_end {
        return Err(BatchCmdError::State(format!(
            "batch {id}'s window stays open until {} µs, more than --max-hours {} from now; an approval admits its commands until then",
            state.not_after_us, args.max_hours
        )));
    }
    // Page the scope and recompute the root from the listed leaves.
    let leaves = page_scope(&store, &id, state.scope_size).await?;
    let tree =
        ScopeTree::build(&id, &leaves).map_err(|e| BatchCmdError::ScopeMismatch(e.to_string()))?;
    if tree.root() != state.scope_root
        || tree.size() != state.scope_size
        || leaves.len() != state.scope_size as usize
    {
        return Err(BatchCmdError::ScopeMismatch(format!(
            "the {} listed leaves give root {} over {} distinct leaves, the batch claims {} over {}",
            leaves.len(),
            tree.root(),
            tree.size(),
            state.scope_root,
            state.scope_size
        )));
    }
    if let Some(reviewed) = &args.root {
        if !reviewed.eq_ignore_ascii_case(&state.scope_root.to_hex()) {
            return Err(BatchCmdError::ScopeChanged {
                actual: state.scope_root,
                reviewed: reviewed.clone(),
            });
        }
    }
    if let Some(path) = &args.expect {
        let mismatch = match read_expect(path)? {
            Expected::Subjects(want) => {
                let have = leaves.iter().map(|l| l.subject().to_string()).collect();
                difference(&want, &have)
            }
            Expected::Commands(want) => {
                let have = leaves
                    .iter()
                    .map(|l| (l.subject().to_string(), l.kind().to_string()))
                    .collect();
                difference(&want, &have)
            }
        };
        if let Some(m) = mismatch {
            return Err(BatchCmdError::ScopeUnexpected(m));
        }
    }
    let unbound: Vec<&ScopeLeaf> = leaves
        .iter()
        .filter(|l| l.payload_sha256().is_none())
        .collect();
    if !unbound.is_empty() && !args.allow_unbound {
        let sample = unbound
            .iter()
            .take(5)
            .map(|l| format!("{} {}", printable(l.subject()), printable(l.kind())))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(BatchCmdError::Unbound {
            count: unbound.len(),
            sample,
        });
    }
    let (text, summary_json) = summary(&view, &leaves);
    if state.approvals.contains_key(&key.kid()) {
        if args.json {
            println!(
                "{}",
                json!({ "batchId": id.to_hex(), "kid": key.kid().to_hex(), "signed": false,
                        "alreadyApproved": true, "held": state.approvals.len(),
                        "required": state.required, "status": state.status })
            );
        } else {
            println!(
                "key {} already approved batch {id}; nothing signed",
                key.kid()
            );
        }
        return Ok(());
    }
    if !args.yes {
        if args.json {
            let mut out = summary_json;
            out["signed"] = json!(false);
            println!("{out}");
        } else {
            println!(
                "{text}\nnothing signed: re-run with --yes --root {} to sign",
                state.scope_root
            );
        }
        return Ok(());
    }
    if !args.json {
        println!("{text}");
    }
    let message = batch_approval_signing_input(
        &id,
        &state.scope_root,
        state.scope_size,
        state.not_after_us,
        &trust_domain,
    );
    let signature = ApprovalSignature {
        kid: key.kid(),
        sig: sign(&pair, &message)?,
    };
    let outcome = approve_batch(&store, &SystemClock, &trust_domain, &id, &signature).await?;
    if args.json {
        println!(
            "{}",
            json!({ "batchId": id.to_hex(), "kid": key.kid().to_hex(), "signed": true,
                    "recorded": outcome.recorded, "held": outcome.held,
                    "required": outcome.required, "status": outcome.status })
        );
    } else {
        println!(
            "approved batch {id}: {} of {} approvals, {}",
            outcome.held,
            outcome.required,
            status_name(outcome.status)
        );
    }
    Ok(())
}

fn status_name(status: BatchStatus) -> &'static str {
    match status {
        BatchStatus::Pending => "pending",
        BatchStatus::Approved => "approved",
        BatchStatus::Expired => "expired",
        BatchStatus::Cancelled => "cancelled",
    }
}

fn sign_approvers(args: SignApproversArgs) -> Result<(), BatchCmdError> {
    let trust_domain = TrustDomain::new(args.trust_domain.clone())
        .map_err(|e| BatchCmdError::Input(format!("--trust-domain: {e}")))?;
    let (pair, signer) = load_key(&args.key)?;
    let mut keys = Vec::new();
    for path in &args.approvers {
        let spki = read_pem(path, "PUBLIC KEY")?;
        keys.push(
            ApproverKey::from_spki(&spki)
                .map_err(|e| BatchCmdError::Input(format!("{}: {e}", path.display())))?,
        );
    }
    let mut tiers = Vec::new();
    for tier in &args.tiers {
        let parsed = tier
            .split_once(':')
            .and_then(|(m, t)| Some((m.parse().ok()?, t.parse().ok()?)));
        let Some((max_scope_size, threshold)) = parsed else {
            return Err(BatchCmdError::Input(format!(
                "--tiers {tier:?}: expected MAX:THRESHOLD"
            )));
        };
        tiers.push(Tier {
            max_scope_size,
            threshold,
        });
    }
    let set = ApproverSet::new(keys, args.threshold, tiers, args.unbatched)
        .map_err(|e| BatchCmdError::Input(e.to_string()))?;
    if args.epoch == 0 {
        return Err(BatchCmdError::Input("--epoch must be 1 or more".into()));
    }
    let message = approver_set_signing_input(args.epoch, &set.digest(), &trust_domain);
    let sig = sign(&pair, &message)?;
    let out = json!({
        "kid": signer.kid().to_hex(),
        "sig": hex::encode(&sig),
        "epoch": args.epoch,
        "approverSetSha256": set.digest().to_hex(),
    });
    if args.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(())
}
