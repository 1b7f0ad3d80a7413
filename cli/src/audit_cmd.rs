//! `bcctl audit`: export a tenant's trail, verify it offline against a pinned key, seal
//! checkpoints on demand, and prove or check the inclusion of one event.
//!
//! Exit codes: 0 when everything holds, [`EXIT_TAMPERED`] (3) when the trail or proof does not
//! verify, [`EXIT_USAGE`] (2) for usage errors (clap's own errors use 2 as well), 1 for anything
//! operational (database unreachable, file unreadable).
//!
//! The export format, the proof format and every check are documented in `docs/AUDIT.md`.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use commands::audit::{reads, AuditError, SealOutcome, Sealer, SealerOptions, Sequencer};
use domain::audit::checkpoint::audit_origin;
use domain::audit::{
    verify_inclusion, verify_trail, AuditLeaf, AuditPublicKey, AuditSigner, Checkpoint, Hash,
    KeyPin, Progress, TrailCheckpoint, TrailFault, TrailLeaf,
};
use domain::pki::DEPLOYMENT_SECRET_ENV;

use events::store::{EventStore, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::deployment::{Deployment, DeploymentError};

/// The trail or proof does not verify.
pub const EXIT_TAMPERED: u8 = 3;
/// The command was used wrongly.
pub const EXIT_USAGE: u8 = 2;

const EXPORT_FORMAT: &str = "bc-audit-export";
const PROOF_FORMAT: &str = "bc-audit-inclusion-proof";
const PAGE: u32 = 10_000;

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
    /// postgres://... or sqlite://PATH
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
}

#[derive(Args)]
pub struct ExportArgs {
    #[arg(long)]
    pub tenant: String,
    /// The file to write (refused if it exists).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub db: DbArgs,
}

#[derive(Args)]
#[command(group(ArgGroup::new("source").required(true).args(["tenant", "bundle"])))]
#[command(group(ArgGroup::new("key").required(true).args(["pin", "pki"])))]
pub struct VerifyArgs {
    /// Verify this tenant's trail straight from the database (--database-url).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Verify an export made by `bcctl audit export`.
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    /// postgres://... or sqlite://PATH (with --tenant).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// The audit key's pin, sha256/<base64>.
    #[arg(long, env = "BC_AUDIT_PIN")]
    pub pin: Option<String>,
    /// Take the audit key and the trust domain from a PKI bundle's public half.
    #[arg(long)]
    pub pki: Option<PathBuf>,
    /// With --pin: the trust domain the log's origin must name.
    #[arg(long)]
    pub trust_domain: Option<String>,
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
    /// The PKI bundle holding the audit signing key (a sealed bundle needs BC_DEPLOYMENT_SECRET).
    #[arg(long)]
    pub pki: PathBuf,
    #[command(flatten)]
    pub db: DbArgs,
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
}

#[derive(Args)]
#[command(group(ArgGroup::new("key").required(true).args(["pin", "pki"])))]
pub struct VerifyProofArgs {
    /// The proof file (`bcctl audit prove` output).
    pub file: PathBuf,
    #[arg(long, env = "BC_AUDIT_PIN")]
    pub pin: Option<String>,
    #[arg(long)]
    pub pki: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// Errors of `bcctl audit`, each with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum AuditCmdError {
    #[error("{0}")]
    Usage(String),
    #[error("TAMPERED: {0}")]
    Tampered(String),
    #[error("{0}")]
    Audit(#[from] AuditError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl AuditCmdError {
    pub fn exit_code(&self) -> u8 {
        match self {
            AuditCmdError::Usage(_) => EXIT_USAGE,
            AuditCmdError::Tampered(_) => EXIT_TAMPERED,
            _ => 1,
        }
    }
}

pub async fn run(cmd: AuditCommand) -> Result<(), AuditCmdError> {
    match cmd {
        AuditCommand::Export(a) => export(a).await,
        AuditCommand::Verify(a) => verify(a).await,
        AuditCommand::Seal(a) => seal(a).await,
        AuditCommand::Prove(a) => prove(a).await,
        AuditCommand::VerifyProof(a) => verify_proof(a),
    }
}

// ---------------------------------------------------------------------------------------------
// The export format.

/// First line of an export.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    #[serde(rename = "type")]
    kind: String,
    format: String,
    version: u32,
    tenant: String,
    origin: Option<String>,
    verifier_key: Option<String>,
    leaf_version: u8,
    checkpoints: u64,
    events: u64,
}

/// One checkpoint line.
#[derive(Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct CheckpointLine {
    #[serde(rename = "type")]
    kind: String,
    seq: u64,
    tree_size: u64,
    root_hash: String,
    signed_note: String,
    previous_note_sha256: Option<String>,
    consistency_proof: Vec<String>,
    position: i64,
}

/// One event line: the event as stored, its index and the leaf hash the sequencer recorded.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: u64,
    position: i64,
    #[serde(borrow)]
    tenant_id: Cow<'a, str>,
    #[serde(borrow)]
    stream_id: Cow<'a, str>,
    stream_version: i64,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    schema_version: u32,
    occurred_at_us: i64,
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow)]
    payload: Cow<'a, str>,
    #[serde(borrow)]
    leaf_hash: Cow<'a, str>,
}

impl<'a> EventLine<'a> {
    fn of(event: &'a events::RecordedEvent, index: u64, leaf_hash: &Hash) -> Self {
        EventLine {
            kind: Cow::Borrowed("event"),
            index,
            position: event.position,
            tenant_id: Cow::Borrowed(&event.tenant_id),
            stream_id: Cow::Borrowed(&event.stream_id),
            stream_version: event.stream_version,
            event_type: Cow::Borrowed(&event.event_type),
            schema_version: event.schema_version,
            occurred_at_us: event.occurred_at_us,
            event_id: Cow::Owned(hex::encode(event.event_id)),
            payload: Cow::Owned(B64.encode(&event.payload)),
            leaf_hash: Cow::Owned(hex::encode(leaf_hash)),
        }
    }

    /// The leaf hash recomputed from the line, the payload digest recomputed from its bytes.
    fn recompute(&self, payload_buf: &mut Vec<u8>) -> Result<Hash, String> {
        payload_buf.clear();
        B64.decode_vec(self.payload.as_bytes(), payload_buf)
            .map_err(|_| "payload is not standard base64".to_string())?;
        let event_id: [u8; 16] =
            hex_array(&self.event_id).ok_or_else(|| "event_id is not 32 hex digits".to_string())?;
        let leaf = AuditLeaf {
            tenant_id: &self.tenant_id,
            index: self.index,
            position: self.position,
            stream_id: &self.stream_id,
            stream_version: self.stream_version,
            event_type: &self.event_type,
            schema_version: self.schema_version,
            occurred_at_us: self.occurred_at_us,
            event_id,
            payload_sha256: Sha256::digest(&payload_buf[..]).into(),
        };
        leaf.leaf_hash().map_err(|e| e.to_string())
    }
}

fn hex_array<const N: usize>(s: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn checkpoint_line(c: &commands::audit::CheckpointRow) -> CheckpointLine {
    CheckpointLine {
        kind: "checkpoint".into(),
        seq: c.seq,
        tree_size: c.tree_size,
        root_hash: hex::encode(c.root_hash),
        signed_note: c.signed_note.clone(),
        previous_note_sha256: c.previous_note_sha256.map(hex::encode),
        consistency_proof: c.consistency_proof.iter().map(hex::encode).collect(),
        position: c.position,
    }
}

fn trail_checkpoint(line: &CheckpointLine, k: usize) -> Result<TrailCheckpoint, AuditCmdError> {
    let bad = |what: &str| {
        AuditCmdError::Tampered(format!(
            "checkpoint {k} of the export is malformed: {what} is not 64 hex digits"
        ))
    };
    let previous = match &line.previous_note_sha256 {
        None => None,
        Some(h) => Some(hex_array::<32>(h).ok_or_else(|| bad("previous_note_sha256"))?),
    };
    let proof = line
        .consistency_proof
        .iter()
        .map(|h| hex_array::<32>(h).ok_or_else(|| bad("a consistency proof hash")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TrailCheckpoint {
        signed_note: line.signed_note.clone(),
        previous_note_sha256: previous,
        consistency_proof: Some(proof),
    })
}

async fn export(args: ExportArgs) -> Result<(), AuditCmdError> {
    let store = EventStore::connect(&args.db.database_url).await?;
    let tenant = args.tenant.as_str();
    let checkpoints = reads::checkpoints(&store, tenant).await?;
    let size = reads::tree_size(&store, tenant).await?;
    let io = |what, source| AuditCmdError::Io {
        what,
        path: args.out.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.out)
        .map_err(|e| io("cannot create", e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let header = Header {
        kind: "header".into(),
        format: EXPORT_FORMAT.into(),
        version: 1,
        tenant: tenant.to_string(),
        origin: checkpoints.last().map(|c| c.origin.clone()),
        verifier_key: checkpoints.last().map(|c| c.verifier_key.clone()),
        leaf_version: domain::audit::leaf::LEAF_VERSION,
        checkpoints: checkpoints.len() as u64,
        events: size,
    };
    let write_line = |out: &mut BufWriter<std::fs::File>, v: &dyn erased::Line| {
        v.write_to(out).map_err(|e| io("cannot write", e))
    };
    write_line(&mut out, &header)?;
    for c in &checkpoints {
        write_line(&mut out, &checkpoint_line(c))?;
    }
    let mut from = 0u64;
    while from < size {
        let page = reads::leaves(&store, tenant, from, PAGE).await?;
        if page.is_empty() {
            break;
        }
        for row in page.iter().take_while(|r| r.index < size) {
            let Some(event) = &row.event else {
                return Err(AuditCmdError::Tampered(format!(
                    "leaf {} (position {}): its event is gone from the log",
                    row.index, row.position
                )));
            };
            write_line(&mut out, &EventLine::of(event, row.index, &row.leaf_hash))?;
        }
        from = page.last().map_or(size, |r| r.index + 1);
    }
    out.flush().map_err(|e| io("cannot write", e))?;
    eprintln!(
        "exported tenant {tenant}: {size} events, {} checkpoints to {}",
        checkpoints.len(),
        args.out.display()
    );
    Ok(())
}

mod erased {
    use std::io::Write;

    /// A JSON line of the export.
    pub trait Line {
        fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()>;
    }

    impl<T: serde::Serialize> Line for T {
        fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
            serde_json::to_writer(&mut *out, self)?;
            out.write_all(b"\n")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys and pins.

/// The key to verify with, and the origin it must sign under (when known from a PKI bundle or
/// --trust-domain).
struct Trust {
    key: Option<AuditPublicKey>,
    pin: Option<KeyPin>,
    trust_domain: Option<String>,
}

fn read_file(path: &PathBuf) -> Result<Vec<u8>, AuditCmdError> {
    std::fs::read(path).map_err(|source| AuditCmdError::Io {
        what: "cannot read",
        path: path.clone(),
        source,
    })
}

/// A `--pki` bundle that cannot be opened: a usage error naming the flag.
fn pki_usage(e: DeploymentError) -> AuditCmdError {
    AuditCmdError::Usage(format!("--pki: {e}"))
}

fn trust(
    pin: Option<&str>,
    pki: Option<&PathBuf>,
    trust_domain: Option<&str>,
) -> Result<Trust, AuditCmdError> {
    if let Some(path) = pki {
        // With the deployment secret set, the bundle's public half (the audit key among it) is
        // authenticated by the seal; a wrong secret is an error, not a silent fallback.
        let bundle = Deployment::new(path).open().map_err(pki_usage)?;
        if !bundle.authenticated {
            eprintln!(
                "warning: the PKI bundle's public half is not authenticated (no {DEPLOYMENT_SECRET_ENV}); whoever can write {} chooses the audit key",
                path.display()
            );
        }
        let key = AuditPublicKey::from_spki_der(bundle.public.audit_signing.spki_der())
            .map_err(|e| AuditCmdError::Usage(format!("--pki: audit key: {e}")))?;
        return Ok(Trust {
            pin: Some(key.pin()),
            key: Some(key),
            trust_domain: Some(bundle.public.trust_domain.as_str().to_string()),
        });
    }
    let pin = match pin {
        Some(p) => Some(
            p.parse::<KeyPin>()
                .map_err(|e| AuditCmdError::Usage(format!("--pin: {e}")))?,
        ),
        None => None,
    };
    Ok(Trust {
        key: None,
        pin,
        trust_domain: trust_domain.map(str::to_string),
    })
}

impl Trust {
    /// The key a trail carries (`verifier_key`), checked against the pin; or the pinned key.
    fn key_for(&self, carried: Option<&str>) -> Result<Option<AuditPublicKey>, AuditCmdError> {
        if let Some(key) = &self.key {
            return Ok(Some(key.clone()));
        }
        let Some(text) = carried else {
            return Ok(None);
        };
        let key = AuditPublicKey::parse_verifier_key(text).map_err(|e| {
            AuditCmdError::Tampered(format!("the trail's verifier key is malformed: {e}"))
        })?;
        if let Some(pin) = &self.pin {
            key.check_pin(pin).map_err(|e| {
                AuditCmdError::Tampered(format!(
                    "checkpoints are not signed by the pinned audit key: {e}"
                ))
            })?;
        }
        Ok(Some(key))
    }

    /// The origin to verify under: from the trust domain when known, else the one the trail
    /// states, which must at least name the tenant.
    fn origin_for(&self, tenant: &str, stated: Option<&str>) -> Result<String, AuditCmdError> {
        match &self.trust_domain {
            Some(td) => audit_origin(td, tenant).map_err(|e| AuditCmdError::Usage(e.to_string())),
            None => {
                let suffix = format!("/audit/{tenant}");
                match stated {
                    Some(o) if o.ends_with(&suffix) && o.len() > suffix.len() => Ok(o.to_string()),
                    Some(o) => Err(AuditCmdError::Tampered(format!(
                        "the trail's origin {o:?} is not a log of tenant {tenant}"
                    ))),
                    None => Ok(format!("unknown{suffix}")),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// verify

/// What `verify` reports.
#[derive(Serialize)]
struct Report {
    ok: bool,
    tenant: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoints: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_root: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unsealed_leaves: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<FaultReport>,
}

#[derive(Serialize)]
struct FaultReport {
    kind: &'static str,
    message: String,
    index: Option<u64>,
    position: Option<i64>,
    checkpoint: Option<usize>,
}

fn fault_kind(f: &TrailFault) -> &'static str {
    match f {
        TrailFault::TamperedLeaf { .. } => "tampered_leaf",
        TrailFault::MissingLeaf { .. } => "missing_leaf",
        TrailFault::ExtraLeaf { .. } => "extra_leaf",
        TrailFault::RootMismatch { .. } => "root_mismatch",
        TrailFault::BadSignature { .. } => "bad_signature",
        TrailFault::WrongKey { .. } => "wrong_key",
        TrailFault::MalformedCheckpoint { .. } => "malformed_checkpoint",
        TrailFault::Fork { .. } => "fork",
        TrailFault::NotExtension { .. } => "not_extension",
        TrailFault::BrokenChain { .. } => "broken_chain",
    }
}

/// A fault found while reading the trail, before the verifier saw it.
struct ReadFault {
    kind: &'static str,
    message: String,
    index: Option<u64>,
    position: Option<i64>,
}

/// Where the leaves come from.
enum LeafSource {
    Export {
        reader: BufReader<std::fs::File>,
        line: String,
        line_no: u64,
    },
    Database {
        store: EventStore,
        handle: tokio::runtime::Handle,
        page: std::vec::IntoIter<reads::LeafRow>,
        next: u64,
        done: bool,
    },
}

struct Leaves {
    source: LeafSource,
    tenant: String,
    fault: Option<ReadFault>,
    payload: Vec<u8>,
    total: Option<u64>,
}

impl Leaves {
    fn fail(
        &mut self,
        kind: &'static str,
        message: String,
        index: Option<u64>,
        position: Option<i64>,
    ) {
        self.fault = Some(ReadFault {
            kind,
            message,
            index,
            position,
        });
    }

    fn next_export(&mut self) -> Option<TrailLeaf> {
        let LeafSource::Export {
            reader,
            line,
            line_no,
        } = &mut self.source
        else {
            return None;
        };
        line.clear();
        *line_no += 1;
        let n = *line_no;
        match reader.read_line(line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => {
                let msg = format!("line {n} of the export cannot be read: {e}");
                self.fail("malformed_export", msg, None, None);
                return None;
            }
        }
        let parsed: Result<EventLine<'_>, _> = serde_json::from_str(line);
        let ev = match parsed {
            Ok(ev) if ev.kind == "event" => ev,
            Ok(_) => {
                let msg = format!("line {n} of the export is not an event line");
                self.fail("malformed_export", msg, None, None);
                return None;
            }
            Err(e) => {
                let msg = format!("line {n} of the export is not a valid event line: {e}");
                self.fail("malformed_export", msg, None, None);
                return None;
            }
        };
        if ev.tenant_id != self.tenant {
            let msg = format!(
                "leaf {} (position {}) is an event of tenant {:?}, not {:?}",
                ev.index, ev.position, ev.tenant_id, self.tenant
            );
            let (i, p) = (ev.index, ev.position);
            self.fail("wrong_tenant", msg, Some(i), Some(p));
            return None;
        }
        let recorded = hex_array::<32>(&ev.leaf_hash);
        let recomputed = ev.recompute(&mut self.payload);
        let (index, position) = (ev.index, ev.position);
        match (recorded, recomputed) {
            (Some(recorded), Ok(hash)) => Some(TrailLeaf {
                index,
                position,
                leaf_hash: hash,
                recorded_leaf_hash: Some(recorded),
            }),
            (None, _) => {
                let msg =
                    format!("leaf {index} (position {position}): leaf_hash is not 64 hex digits");
                self.fail("malformed_export", msg, Some(index), Some(position));
                None
            }
            (_, Err(why)) => {
                let msg = format!("leaf {index} (position {position}): {why}");
                self.fail("malformed_export", msg, Some(index), Some(position));
                None
            }
        }
    }

    fn next_database(&mut self) -> Option<TrailLeaf> {
        let LeafSource::Database {
            store,
            handle,
            page,
            next,
            done,
        } = &mut self.source
        else {
            return None;
        };
        let row = match page.next() {
            Some(r) => r,
            None => {
                if *done {
                    return None;
                }
                let fetched = tokio::task::block_in_place(|| {
                    handle.block_on(reads::leaves(store, &self.tenant, *next, PAGE))
                });
                match fetched {
                    Ok(rows) => {
                        if (rows.len() as u64) < u64::from(PAGE) {
                            *done = true;
                        }
                        *page = rows.into_iter();
                        page.next()?
                    }
                    Err(e) => {
                        self.fail("read_error", format!("reading the leaves: {e}"), None, None);
                        return None;
                    }
                }
            }
        };
        *next = row.index + 1;
        let Some(event) = &row.event else {
            let msg = format!(
                "leaf {} (position {}): its event is gone from the log",
                row.index, row.position
            );
            self.fail("missing_event", msg, Some(row.index), Some(row.position));
            return None;
        };
        if event.tenant_id != self.tenant {
            let msg = format!(
                "leaf {} (position {}) is an event of tenant {:?}, not {:?}",
                row.index, row.position, event.tenant_id, self.tenant
            );
            self.fail("wrong_tenant", msg, Some(row.index), Some(row.position));
            return None;
        }
        match AuditLeaf::from_event_recomputed(event, row.index).leaf_hash() {
            Ok(hash) => Some(TrailLeaf {
                index: row.index,
                position: row.position,
                leaf_hash: hash,
                recorded_leaf_hash: Some(row.leaf_hash),
            }),
            Err(e) => {
                let msg = format!("leaf {} (position {}): {e}", row.index, row.position);
                self.fail("malformed_event", msg, Some(row.index), Some(row.position));
                None
            }
        }
    }
}

impl Iterator for Leaves {
    type Item = TrailLeaf;

    fn next(&mut self) -> Option<TrailLeaf> {
        if self.fault.is_some() {
            return None;
        }
        match self.source {
            LeafSource::Export { .. } => self.next_export(),
            LeafSource::Database { .. } => self.next_database(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, self.total.and_then(|t| usize::try_from(t).ok()))
    }
}

async fn verify(args: VerifyArgs) -> Result<(), AuditCmdError> {
    let trust = trust(
        args.pin.as_deref(),
        args.pki.as_ref(),
        args.trust_domain.as_deref(),
    )?;
    let (tenant, checkpoint_lines, stated_origin, carried_key, source, total) = match (
        &args.bundle,
        &args.tenant,
    ) {
        (Some(path), tenant) => {
            let file = std::fs::File::open(path).map_err(|source| AuditCmdError::Io {
                what: "cannot open",
                path: path.clone(),
                source,
            })?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut line = String::new();
            let read = |reader: &mut BufReader<std::fs::File>, line: &mut String| {
                line.clear();
                reader.read_line(line).map_err(|source| AuditCmdError::Io {
                    what: "cannot read",
                    path: path.clone(),
                    source,
                })
            };
            read(&mut reader, &mut line)?;
            let header: Header = serde_json::from_str(&line).map_err(|e| {
                AuditCmdError::Usage(format!(
                    "{} is not a bcctl audit export (bad header: {e})",
                    path.display()
                ))
            })?;
            if header.kind != "header" || header.format != EXPORT_FORMAT || header.version != 1 {
                return Err(AuditCmdError::Usage(format!(
                    "{} is not a bc-audit-export version 1 file",
                    path.display()
                )));
            }
            if let Some(t) = tenant {
                if *t != header.tenant {
                    return Err(AuditCmdError::Usage(format!(
                        "--tenant {t} but the export is of tenant {}",
                        header.tenant
                    )));
                }
            }
            let mut cps = Vec::new();
            for k in 0..header.checkpoints {
                read(&mut reader, &mut line)?;
                let cp: CheckpointLine = serde_json::from_str(&line).map_err(|e| {
                    AuditCmdError::Tampered(format!(
                        "checkpoint line {k} of the export is malformed: {e}"
                    ))
                })?;
                cps.push(cp);
            }
            (
                header.tenant,
                cps,
                header.origin,
                header.verifier_key,
                LeafSource::Export {
                    reader,
                    line,
                    line_no: 1 + header.checkpoints,
                },
                Some(header.events),
            )
        }
        (None, Some(tenant)) => {
            let Some(url) = &args.database_url else {
                return Err(AuditCmdError::Usage(
                    "--tenant needs --database-url (or DATABASE_URL)".into(),
                ));
            };
            let store = EventStore::connect(url).await?;
            let rows = reads::checkpoints(&store, tenant).await?;
            let size = reads::tree_size(&store, tenant).await?;
            let origin = rows.last().map(|c| c.origin.clone());
            let key = rows.last().map(|c| c.verifier_key.clone());
            if let Some(first) = rows.first() {
                if rows.iter().any(|c| c.verifier_key != first.verifier_key) {
                    eprintln!("note: checkpoints carry more than one verifier key; each must match the pin");
                }
            }
            (
                tenant.clone(),
                rows.iter().map(checkpoint_line).collect(),
                origin,
                key,
                LeafSource::Database {
                    store,
                    handle: tokio::runtime::Handle::current(),
                    page: Vec::new().into_iter(),
                    next: 0,
                    done: false,
                },
                Some(size),
            )
        }
        (None, None) => return Err(AuditCmdError::Usage("give --tenant or --bundle".into())),
    };

    let outcome = (|| -> Result<Report, AuditCmdError> {
        let key = trust.key_for(carried_key.as_deref())?;
        let origin = trust.origin_for(&tenant, stated_origin.as_deref())?;
        let checkpoints = checkpoint_lines
            .iter()
            .enumerate()
            .map(|(k, c)| trail_checkpoint(c, k))
            .collect::<Result<Vec<_>, _>>()?;
        let key = match key {
            Some(k) => k,
            None if checkpoints.is_empty() => {
                // No checkpoint: nothing is signed; leaves are still checked. Any key will do.
                AuditPublicKey::from_uncompressed_point(&[4u8; 65])
                    .map_err(|e| AuditCmdError::Other(e.to_string()))?
            }
            None => {
                return Err(AuditCmdError::Tampered(
                    "the trail has checkpoints but carries no verifier key".into(),
                ))
            }
        };
        let bar = progress_bar(!args.json, total);
        let mut leaves = Leaves {
            source,
            tenant: tenant.clone(),
            fault: None,
            payload: Vec::new(),
            total,
        };
        let result = verify_trail(
            &origin,
            &key,
            &mut leaves,
            &checkpoints,
            &mut |p: Progress| {
                if let Some(bar) = &bar {
                    bar.set_position(p.leaves_checked);
                }
            },
        );
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let mut report = Report {
            ok: false,
            tenant: tenant.clone(),
            leaves: None,
            checkpoints: None,
            signed_size: None,
            signed_root: None,
            unsealed_leaves: None,
            fault: None,
        };
        if let Some(f) = leaves.fault.take() {
            report.fault = Some(FaultReport {
                kind: f.kind,
                message: f.message,
                index: f.index,
                position: f.position,
                checkpoint: None,
            });
            return Ok(report);
        }
        match result {
            Ok(s) => {
                if let Some(expected) = total {
                    if s.leaves != expected {
                        report.fault = Some(FaultReport {
                            kind: "missing_leaf",
                            message: format!(
                                "the trail states {expected} leaves but holds {}: the tail was truncated or extended",
                                s.leaves
                            ),
                            index: Some(s.leaves.min(expected)),
                            position: None,
                            checkpoint: None,
                        });
                        return Ok(report);
                    }
                }
                report.ok = true;
                report.leaves = Some(s.leaves);
                report.checkpoints = Some(s.checkpoints);
                report.signed_size = Some(s.signed_size);
                report.signed_root = Some(hex::encode(s.signed_root));
                report.unsealed_leaves = Some(s.unsealed_leaves);
            }
            Err(f) => {
                report.fault = Some(FaultReport {
                    kind: fault_kind(&f),
                    message: f.to_string(),
                    index: Some(f.index()),
                    position: f.position(),
                    checkpoint: f.checkpoint(),
                });
            }
        }
        Ok(report)
    })();

    let report = match outcome {
        Ok(r) => r,
        Err(AuditCmdError::Tampered(message)) => Report {
            ok: false,
            tenant: tenant.clone(),
            leaves: None,
            checkpoints: None,
            signed_size: None,
            signed_root: None,
            unsealed_leaves: None,
            fault: Some(FaultReport {
                kind: "key_or_origin",
                message,
                index: None,
                position: None,
                checkpoint: None,
            }),
        },
        Err(e) => return Err(e),
    };
    print_report(&report, args.json)?;
    match &report.fault {
        None => Ok(()),
        Some(f) => Err(AuditCmdError::Tampered(f.message.clone())),
    }
}

fn print_report(report: &Report, json: bool) -> Result<(), AuditCmdError> {
    if json {
        let text =
            serde_json::to_string(report).map_err(|e| AuditCmdError::Other(e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    match &report.fault {
        None => println!(
            "OK: tenant {}: {} leaves, {} checkpoints, signed size {} root {}, {} leaves not yet sealed",
            report.tenant,
            report.leaves.unwrap_or(0),
            report.checkpoints.unwrap_or(0),
            report.signed_size.unwrap_or(0),
            report.signed_root.as_deref().unwrap_or(""),
            report.unsealed_leaves.unwrap_or(0)
        ),
        Some(f) => {
            println!("TAMPERED ({}): {}", f.kind, f.message);
            let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            println!(
                "first bad index: {}, position: {}, checkpoint: {}",
                show(f.index.map(|v| v.to_string())),
                show(f.position.map(|v| v.to_string())),
                show(f.checkpoint.map(|v| v.to_string()))
            );
        }
    }
    Ok(())
}

fn progress_bar(enabled: bool, total: Option<u64>) -> Option<indicatif::ProgressBar> {
    let total = total?;
    if !enabled || !std::io::stderr().is_terminal() || total < 100_000 {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} leaves ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    Some(bar)
}

// ---------------------------------------------------------------------------------------------
// seal

fn load_signer(path: &PathBuf) -> Result<(AuditSigner, String), AuditCmdError> {
    let keys = Deployment::new(path).keys().map_err(pki_usage)?;
    let rng = ring::rand::SystemRandom::new();
    let signer = AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &rng)
        .map_err(|e| AuditCmdError::Usage(format!("--pki: audit signing key: {e}")))?;
    Ok((signer, keys.trust_domain.as_str().to_string()))
}

async fn seal(args: SealArgs) -> Result<(), AuditCmdError> {
    let (signer, trust_domain) = load_signer(&args.pki)?;
    let store = EventStore::connect(&args.db.database_url).await?;
    let mut sequencer = Sequencer::new(store.clone(), Default::default());
    let sequenced = sequencer.catch_up().await?;
    let sealer = Sealer::new(
        store,
        Arc::new(signer),
        Arc::new(commands::SystemClock),
        SealerOptions::new(trust_domain),
    );
    let results = match &args.tenant {
        Some(t) => vec![sealer.seal_tenant(t).await],
        None => sealer.seal_all().await?,
    };
    let mut failed = None;
    let mut lines = Vec::new();
    for r in results {
        match r {
            Ok(SealOutcome::Sealed {
                tenant,
                seq,
                size,
                root,
                position,
            }) => lines.push(serde_json::json!({
                "tenant": tenant, "sealed": true, "checkpoint": seq, "tree_size": size,
                "root_hash": hex::encode(root), "position": position,
            })),
            Ok(SealOutcome::Unchanged { tenant, size }) => lines.push(serde_json::json!({
                "tenant": tenant, "sealed": false, "tree_size": size,
            })),
            Err(e) => {
                eprintln!("bcctl: {e}");
                failed = Some(e);
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"sequenced": sequenced, "tenants": lines})
        );
    } else {
        println!("sequenced {sequenced} new events");
        for l in &lines {
            println!("{l}");
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// prove / verify-proof

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProofFile {
    format: String,
    version: u32,
    tenant: String,
    origin: String,
    verifier_key: String,
    signed_note: String,
    tree_size: u64,
    root_hash: String,
    index: u64,
    position: i64,
    leaf_hash: String,
    proof: Vec<String>,
    event: serde_json::Value,
}

async fn prove(args: ProveArgs) -> Result<(), AuditCmdError> {
    let store = EventStore::connect(&args.db.database_url).await?;
    let p = reads::prove(&store, &args.tenant, args.position).await?;
    let Some(event) = &p.leaf.event else {
        return Err(AuditCmdError::Tampered(format!(
            "leaf {} (position {}): its event is gone from the log",
            p.leaf.index, p.leaf.position
        )));
    };
    let event_line = serde_json::to_value(EventLine::of(event, p.leaf.index, &p.leaf.leaf_hash))
        .map_err(|e| AuditCmdError::Other(e.to_string()))?;
    let file = ProofFile {
        format: PROOF_FORMAT.into(),
        version: 1,
        tenant: args.tenant.clone(),
        origin: p.checkpoint.origin.clone(),
        verifier_key: p.checkpoint.verifier_key.clone(),
        signed_note: p.checkpoint.signed_note.clone(),
        tree_size: p.checkpoint.tree_size,
        root_hash: hex::encode(p.checkpoint.root_hash),
        index: p.leaf.index,
        position: p.leaf.position,
        leaf_hash: hex::encode(p.leaf.leaf_hash),
        proof: p.proof.iter().map(hex::encode).collect(),
        event: event_line,
    };
    let text =
        serde_json::to_string_pretty(&file).map_err(|e| AuditCmdError::Other(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn verify_proof(args: VerifyProofArgs) -> Result<(), AuditCmdError> {
    let trust = trust(args.pin.as_deref(), args.pki.as_ref(), None)?;
    let bytes = read_file(&args.file)?;
    let file: ProofFile = serde_json::from_slice(&bytes).map_err(|e| {
        AuditCmdError::Usage(format!("{} is not a proof file: {e}", args.file.display()))
    })?;
    if file.format != PROOF_FORMAT || file.version != 1 {
        return Err(AuditCmdError::Usage(format!(
            "{} is not a {PROOF_FORMAT} version 1 file",
            args.file.display()
        )));
    }
    let result = check_proof(&trust, &file);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "ok": result.is_ok(), "tenant": file.tenant, "index": file.index,
                "position": file.position, "tree_size": file.tree_size,
                "error": result.as_ref().err().map(|e| e.to_string()),
            })
        );
    } else if result.is_ok() {
        println!(
            "OK: event at position {} is leaf {} of tenant {}'s log, in the signed checkpoint of size {}",
            file.position, file.index, file.tenant, file.tree_size
        );
    }
    result
}

fn check_proof(trust: &Trust, file: &ProofFile) -> Result<(), AuditCmdError> {
    let tampered = |m: String| AuditCmdError::Tampered(m);
    let key = trust
        .key_for(Some(&file.verifier_key))?
        .ok_or_else(|| tampered("the proof carries no verifier key".into()))?;
    let origin = trust.origin_for(&file.tenant, Some(&file.origin))?;
    let cp = Checkpoint::open(&file.signed_note, &origin, &key)
        .map_err(|e| tampered(format!("the checkpoint does not verify: {e}")))?;
    if cp.size != file.tree_size || Some(cp.root) != hex_array::<32>(&file.root_hash) {
        return Err(tampered(
            "tree_size or root_hash differ from the signed checkpoint".into(),
        ));
    }
    let event_text = file.event.to_string();
    let ev: EventLine<'_> = serde_json::from_str(&event_text)
        .map_err(|e| tampered(format!("the event is malformed: {e}")))?;
    if ev.index != file.index || ev.position != file.position || ev.tenant_id != file.tenant {
        return Err(tampered(
            "the event's index, position or tenant differ from the proof's".into(),
        ));
    }
    let leaf = ev
        .recompute(&mut Vec::new())
        .map_err(|e| tampered(format!("the event is malformed: {e}")))?;
    if Some(leaf) != hex_array::<32>(&file.leaf_hash) {
        return Err(tampered(format!(
            "leaf {} (position {}): the event does not hash to the stated leaf",
            file.index, file.position
        )));
    }
    let proof = file
        .proof
        .iter()
        .map(|h| {
            hex_array::<32>(h).ok_or_else(|| tampered("a proof hash is not 64 hex digits".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    verify_inclusion(&leaf, file.index, cp.size, &proof, &cp.root).map_err(|e| {
        tampered(format!(
            "leaf {} (position {}) is not in the signed tree: {e}",
            file.index, file.position
        ))
    })
}
