//! `bcctl replay --at <position | RFC 3339 time> [--node ID] [--json]`: the identity state as of
//! a point of the log, rebuilt from the events alone.
//!
//! Inside one transaction that is always rolled back, the identity projection tables are
//! emptied and the log is replayed into them up to the resolved position
//! ([`projections::rebuild_in`]); the state is read there, then the transaction is rolled back,
//! so the live tables never change. A time resolves to the last event (highest position) whose
//! `occurred_at` is at or before it. While the replay runs, the rows it rewrote are locked
//! inside the transaction (Postgres) or the writer is held (SQLite): writers wait, readers don't.

use clap::Args;
use commands::identity::{CertView, NodeClaimsView, NodeView, TokenStatus, TokenView};
use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx};
use projections::replay_read::{self, CertRow, NodeRow, TokenRow};
use projections::ProjectionError;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::verbs::token::{fmt_us, print_table, to_json};

/// Events read per batch while replaying.
const REPLAY_BATCH: u32 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ReplayCmdError {
    #[error("INVALID_INPUT: --at {0:?}: expected a log position (an integer ≥ 0) or an RFC 3339 time such as 2026-01-01T00:00:00Z")]
    BadAt(String),
    #[error("INVALID_INPUT: --at {at}: the log ends at position {head}")]
    PastHead { at: i64, head: i64 },
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Open(#[from] crate::deployment::OpenError),
    #[error("replay: {0}")]
    Projection(#[from] ProjectionError),
    #[error("reading the replayed state: {0}")]
    Read(StoreError),
}

impl ReplayCmdError {
    /// 2 for input the verb found invalid (INVALID_INPUT), 1 otherwise (docs/CLI.md).
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayCmdError::BadAt(_) | ReplayCmdError::PastHead { .. } => crate::output::EXIT_USAGE,
            _ => crate::output::EXIT_FAILED,
        }
    }
}

#[derive(Args)]
pub struct ReplayArgs {
    /// A log position, or an RFC 3339 time (the log up to the first event that occurred after it).
    #[arg(long)]
    pub at: String,
    /// Show only this node, with the events of its stream up to that point.
    #[arg(long)]
    pub node: Option<String>,
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `replay` prints (`--json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayState {
    /// The position replayed to, inclusive (0: nothing).
    pub position: i64,
    /// When the event at that position occurred, RFC 3339 (absent at 0).
    pub occurred_at: Option<String>,
    /// The same, µs since the epoch (absent at 0).
    pub occurred_at_us: Option<i64>,
    /// Events read from the log.
    pub events_replayed: u64,
    /// blake3 over the canonical dumps of every identity projection table as replayed (the same
    /// digest as `projections::digest_tables`).
    pub digest: String,
    pub nodes: Vec<NodeView>,
    pub certificates: Vec<CertView>,
    pub tokens: Vec<TokenView>,
    /// With `--node`: the events of its stream up to the position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventLine>>,
}

/// One event of a node's history.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    #[serde(rename = "type")]
    pub event_type: String,
    pub position: i64,
    pub version: i64,
    /// RFC 3339.
    pub occurred_at: String,
    pub occurred_at_us: i64,
    /// Who caused the event (`{id, role}`); null for an event nobody decided.
    pub actor: Option<crate::verbs::events::ActorView>,
}

/// Resolves `--at` to a position: an integer is a position; anything else must be an RFC 3339
/// time, resolved to the end of the longest prefix of the log whose events all occurred at or
/// before it.
async fn resolve_at(store: &EventStore, at: &str) -> Result<i64, ReplayCmdError> {
    let head = store.head_position().await?;
    if let Ok(p) = at.trim().parse::<i64>() {
        if p < 0 {
            return Err(ReplayCmdError::BadAt(at.into()));
        }
        if p > head {
            return Err(ReplayCmdError::PastHead { at: p, head });
        }
        return Ok(p);
    }
    let t =
        OffsetDateTime::parse(at.trim(), &Rfc3339).map_err(|_| ReplayCmdError::BadAt(at.into()))?;
    let us = i64::try_from(t.unix_timestamp_nanos() / 1000)
        .map_err(|_| ReplayCmdError::BadAt(at.into()))?;
    let mut tx = store.begin().await?;
    // The longest prefix of the log decided at or before the time, so nothing decided after
    // `--at` is shown.
    let position = replay_read::position_at_time(&mut tx, us).await;
    tx.rollback().await?;
    position.map_err(ReplayCmdError::Read)
}

/// Rebuilds the identity state as of `--at` in a rolled-back transaction and returns it.
pub async fn replay_state(
    store: &EventStore,
    at: &str,
    node: Option<&str>,
    mut progress: impl FnMut(projections::RebuildProgress),
) -> Result<ReplayState, ReplayCmdError> {
    let position = resolve_at(store, at).await?;
    let mut tx = store.begin().await?;
    let result = replay_in(store, &mut tx, position, node, &mut progress).await;
    // Always roll back: the live tables are never changed by a replay.
    tx.rollback().await?;
    result
}

async fn replay_in(
    store: &EventStore,
    tx: &mut StoreTx,
    position: i64,
    node: Option<&str>,
    progress: &mut impl FnMut(projections::RebuildProgress),
) -> Result<ReplayState, ReplayCmdError> {
    let all = projections::identity::all();
    let events_replayed =
        projections::rebuild_in(store, tx, &all, Some(position), REPLAY_BATCH, progress).await?;
    let occurred_at_us = replay_read::occurred_at(tx, position)
        .await
        .map_err(ReplayCmdError::Read)?;

    let mut hasher = blake3::Hasher::new();
    for table in projections::identity::tables() {
        hasher.update(table.name.as_bytes());
        hasher.update(b"\n");
        for row in projections::digest::dump_table(tx, &table).await? {
            hasher.update(row.as_bytes());
            hasher.update(b"\n");
        }
    }
    let digest = hasher.finalize().to_hex().to_string();

    let nodes = replay_read::nodes(tx, node)
        .await
        .map_err(ReplayCmdError::Read)?;
    let certs = replay_read::certificates(tx, node)
        .await
        .map_err(ReplayCmdError::Read)?;
    let tokens = match node {
        // A node's state names its token; show that one.
        Some(_) => {
            let token_id = nodes
                .first()
                .map(|n| n.token_id.clone())
                .unwrap_or_default();
            replay_read::token(tx, &token_id).await
        }
        None => replay_read::tokens(tx).await,
    }
    .map_err(ReplayCmdError::Read)?;
    let events = match node {
        Some(id) => Some(
            replay_read::stream_events(tx, &format!("node/{id}"), position)
                .await
                .map_err(ReplayCmdError::Read)?
                .into_iter()
                .map(|e| EventLine {
                    event_type: e.event_type,
                    position: e.position,
                    version: e.version,
                    occurred_at: crate::output::rfc3339_us(e.occurred_at_us),
                    occurred_at_us: e.occurred_at_us,
                    actor: match (e.actor_id, e.actor_role) {
                        (Some(id), Some(role)) => {
                            Some(crate::verbs::events::ActorView { id, role })
                        }
                        _ => None,
                    },
                })
                .collect(),
        ),
        None => None,
    };
    Ok(ReplayState {
        position,
        occurred_at: occurred_at_us.map(crate::output::rfc3339_us),
        occurred_at_us,
        events_replayed,
        digest,
        nodes: nodes.into_iter().map(node_view).collect(),
        certificates: certs.into_iter().map(cert_view).collect(),
        tokens: tokens
            .into_iter()
            .map(|t| token_view(t, occurred_at_us.unwrap_or(0)))
            .collect(),
        events,
    })
}

fn node_view(r: NodeRow) -> NodeView {
    NodeView {
        node_id: r.node_id,
        tenant_id: r.tenant_id,
        site_id: r.site_id,
        pool_id: r.pool_id,
        role: r.role,
        status: r.status,
        status_reason: r.status_reason,
        identity_generation: r.identity_generation,
        attestor: r.attestor,
        node_key: r.node_key,
        token_id: r.token_id,
        joined_at_us: r.joined_at_us,
        updated_at_us: r.updated_at_us,
        position: r.position,
        claims: NodeClaimsView::from_columns(
            r.hostname,
            r.product_serial,
            r.board_serial,
            r.chassis_serial,
            r.gpu_uuids,
            r.bcd_version,
            r.last_boot_id,
        ),
    }
}

fn cert_view(r: CertRow) -> CertView {
    CertView {
        serial: r.serial,
        node_id: r.node_id,
        identity_generation: r.identity_generation,
        sha256: hex::encode(Sha256::digest(&r.der)),
        not_before_us: r.not_before_us,
        not_after_us: r.not_after_us,
        revoked_at_us: r.revoked_at_us,
        revoke_reason: r.revoke_reason,
        issued_position: r.issued_position,
        revoked_position: r.revoked_position,
        allowed_kinds: r
            .allowed_kinds
            .map(|k| k.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

/// A token as it stood at `at_us` (the replayed position's time): its status judged then.
fn token_view(r: TokenRow, at_us: i64) -> TokenView {
    TokenView {
        status: TokenStatus::of(
            r.revoked_at_us.is_some(),
            r.uses_left,
            r.expires_at_us,
            at_us,
        ),
        token_id: r.token_id,
        tenant_id: r.tenant_id,
        site_id: r.site_id,
        pool_id: r.pool_id,
        role: r.role,
        uses_total: r.uses_total,
        uses_left: r.uses_left,
        expires_at_us: r.expires_at_us,
        expect_product_uuid: r.expect_product_uuid,
        expect_mac: r.expect_mac,
        allow_reclaim: r.allow_reclaim,
        created_at_us: r.created_at_us,
        revoked_at_us: r.revoked_at_us,
        revoke_reason: r.revoke_reason,
        position: r.position,
    }
}

pub async fn run(args: ReplayArgs) -> Result<(), ReplayCmdError> {
    let store = args.deployment.connect_store().await?;
    let mut progress = crate::progress::Progress::new("replay", "positions", false);
    let state = replay_state(&store, &args.at, args.node.as_deref(), |p| {
        progress.show(
            u64::try_from(p.position).unwrap_or(0),
            u64::try_from(p.head).unwrap_or(0),
            "",
        )
    })
    .await;
    progress.finish();
    let state = state?;
    if args.json {
        crate::outln!("{}", to_json(&state));
        return Ok(());
    }
    crate::outln!(
        "identity state at position {}{} ({} events replayed; live tables untouched)",
        state.position,
        state
            .occurred_at_us
            .map(|t| format!(", {}", fmt_us(t)))
            .unwrap_or_default(),
        state.events_replayed
    );
    crate::outln!("digest: {}", state.digest);
    if let Some(id) = &args.node {
        if state.nodes.is_empty() {
            crate::outln!("\nnode {id} did not exist at this point");
        }
    }
    crate::outln!("\nnodes:");
    crate::verbs::node::print_nodes(&state.nodes);
    crate::outln!("\ncertificates:");
    let rows: Vec<Vec<String>> = state
        .certificates
        .iter()
        .map(|c| {
            vec![
                c.serial.clone(),
                c.node_id.clone(),
                c.identity_generation.to_string(),
                fmt_us(c.not_after_us),
                match c.revoked_position {
                    Some(p) => format!("revoked at position {p}"),
                    None => "valid".into(),
                },
                c.issued_position.to_string(),
            ]
        })
        .collect();
    print_table(
        &["SERIAL", "NODE", "GEN", "NOT AFTER", "STATE", "ISSUED AT"],
        &rows,
    );
    crate::outln!("\ntokens:");
    crate::verbs::token::print_tokens(&state.tokens);
    if let Some(events) = &state.events {
        crate::outln!("\nevents:");
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                vec![
                    e.position.to_string(),
                    e.version.to_string(),
                    fmt_us(e.occurred_at_us),
                    e.event_type.clone(),
                    crate::verbs::events::actor_cell(e.actor.as_ref()),
                ]
            })
            .collect();
        print_table(&["POSITION", "VERSION", "TIME", "TYPE", "ACTOR"], &rows);
    }
    Ok(())
}
