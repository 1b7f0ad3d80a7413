//! The revocation feed: every revoked, unexpired certificate into [`RevokedSerials`] at start,
//! then every revocation as it commits, from the process's log hub ([`LogHub`], one exact
//! tailer for every reader of the log).
//!
//! Order at start: subscribe to the hub first, then load `node_certs`. A revocation that
//! commits between the two is both loaded and handed out (harmless: inserting a serial twice
//! changes nothing); one that commits after the load is handed out; none is missed, including
//! one whose transaction took a lower position and committed late (the tailer follows commit
//! visibility, not positions). Should the feed fall so far behind that the hub drops batches for
//! it, it loads `node_certs` again and ends every live session (their nodes reconnect, and the
//! handshake checks the reloaded set), each told so with a reconnection time spread at random
//! ([`crate::revocation::feed_health::reloaded_end`]).
//!
//! On `node.identity.revoked`, `node.deleted` and `node.retired` the feed reads that node's
//! revoked serials from `node_certs` (written in the same transaction as the event, so visible
//! once the event is), adds them, and ends with a RevocationNotice the node's live sessions on
//! the certificates the event revoked: the serials a `node.identity.revoked` names (schema 2),
//! every certificate of the node otherwise. A reclaim's new certificate keeps its session even
//! when the feed reads the reclaim after that session opened.
//!
//! Health: the feed is caught up as of the hub's last caught-up moment once it has applied
//! every batch handed out before it (the hub renews that moment while it waits, for as long as
//! other processes' commits are notified to it; see `events::store::hub`; on a read replica it
//! also waits for the replica to replay what the primary notified). When it has not been caught
//! up for more than `max_lag`, [`FeedHealth::is_stale`] turns true; the
//! gateway then refuses new sessions (fails closed), logs it, reports NOT_SERVING on the health
//! service and sets `bc_revocation_feed_stale`, and recovers by itself once a step succeeds.
//!
//! A revocation event that does not decode (a payload that is not the type it names, or a schema
//! version this build has no upcaster for, say from a newer control plane) is never skipped:
//! skipping it would let the revoked node's sessions and handshakes through. The feed stops
//! there, loudly: an error log naming the position, [`FeedHealth::halt`] (stale for good, the
//! reason on the refusals, `bc_revocation_feed_halted 1`, health NOT_SERVING) and every live
//! session ended, since which node it revoked is unknown: with that reason and a retry hint of
//! a minute or more, not as a shutdown ([`crate::revocation::feed_health::halted_end`]). A restart of the gateway (after an
//! upgrade, or once the event is understood) loads the revoked set from `node_certs` again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::identity::edge_reads::{self as read, RevokedCertRow};
use events::envelope::DecodeError;
use events::schema::{
    JoinRefused, NodeDeleted, NodeIdentityRevoked, NodeRetired, RefusalsSuppressed, RenewRefused,
    RevokedCertificates,
};
use events::store::hub::{HubRecv, HubWake};
use events::store::{EventStore, HubReceiver, LogHub, StoreError};
use events::RecordedEvent;

use crate::metrics::Metrics;
pub use crate::revocation::feed_health::FeedHealth;
use crate::revocation::revoked::RevokedSerials;
use crate::session::registry::{Revoked, SessionEnd, Sessions};

/// Settings of the feed.
#[derive(Clone, Copy, Debug)]
pub struct FeedOptions {
    /// Behind for longer than this, new sessions are refused.
    pub max_lag: Duration,
    /// How often the log hub steps when no commit was signalled (`None`: the backend's
    /// default, `events::store::hub::HubOptions::for_backend`). Used when the gateway starts
    /// its own hub.
    pub poll_interval: Option<Duration>,
    /// Events per tail step of the hub the gateway starts.
    pub batch: u32,
}

impl Default for FeedOptions {
    fn default() -> Self {
        FeedOptions {
            max_lag: Duration::from_secs(5),
            poll_interval: None,
            batch: 1000,
        }
    }
}

/// Errors starting the feed.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("revocation feed: the store: {0}")]
    Store(#[from] StoreError),
    #[error(
        "revocation feed: reading node_certs: {0} (is the store migrated? run `bcctl migrate`)"
    )]
    Read(StoreError),
    #[error("revocation feed: node_certs holds a serial that is not hex: {0:?}")]
    BadSerial(String),
    /// A revocation event that cannot be read: the feed stops (see the module doc).
    #[error(
        "the {event_type} event at log position {position} does not decode ({source}); it was \
         not skipped: upgrade this gateway if a newer control plane wrote it, or inspect that \
         row of the `events` table, then restart the gateway"
    )]
    Undecodable {
        position: i64,
        event_type: String,
        source: DecodeError,
    },
}

/// What the feed fills and whom it tells.
#[derive(Clone)]
pub struct FeedTargets {
    pub revoked: Arc<RevokedSerials>,
    pub sessions: Arc<Sessions>,
    pub health: Arc<FeedHealth>,
    pub metrics: Arc<Metrics>,
}

async fn query_revoked(
    store: &EventStore,
    node_id: Option<&str>,
    now_us: i64,
) -> Result<Vec<RevokedCertRow>, FeedError> {
    read::revoked_unexpired(store, node_id, now_us)
        .await
        .map_err(FeedError::Read)
}

fn now_us() -> i64 {
    let ns = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000;
    i64::try_from(ns).unwrap_or(i64::MAX)
}

fn insert_rows(revoked: &RevokedSerials, rows: &[RevokedCertRow]) -> Result<(), FeedError> {
    for row in rows {
        let bytes =
            hex::decode(&row.serial).map_err(|_| FeedError::BadSerial(row.serial.clone()))?;
        revoked.insert(bytes, row.not_after_us / 1_000_000 + 1);
    }
    Ok(())
}

/// Subscribes to `hub`, then loads the revoked set (in that order: see the module doc). Call
/// before serving; hand the subscription to [`run`].
pub async fn load(
    store: &EventStore,
    hub: &LogHub,
    targets: &FeedTargets,
) -> Result<HubReceiver, FeedError> {
    let subscription = hub.subscribe();
    let rows = query_revoked(store, None, now_us()).await?;
    insert_rows(&targets.revoked, &rows)?;
    targets.health.mark_caught_up();
    tracing::info!(revoked = rows.len(), "revocation feed loaded");
    Ok(subscription)
}

/// Applies what the hub hands out until the hub is gone or a revocation cannot be read. Never
/// stops the gateway: an event whose application fails on a store error is retried (100 ms,
/// doubling to 5 s) before the next one; an undecodable revocation halts the feed ([`halt`])
/// and returns.
pub async fn run(store: EventStore, mut subscription: HubReceiver, targets: FeedTargets) {
    let mut last_prune = Instant::now();
    loop {
        match subscription.recv_or_state().await {
            None => return,
            Some(HubWake::Recv(HubRecv::Events(batch))) => {
                for e in batch.iter() {
                    if apply(&store, e, &targets).await.is_err() {
                        return;
                    }
                }
            }
            Some(HubWake::Recv(HubRecv::Missed(batches))) => {
                resync(&store, &targets, batches).await
            }
            Some(HubWake::State) => {}
        }
        if subscription.is_drained() {
            if let Some(at) = subscription.state().caught_up_at {
                targets.health.mark_caught_up_at(at);
            }
        }
        if last_prune.elapsed() > Duration::from_secs(60) {
            targets.revoked.prune_expired(now_us() / 1_000_000);
            last_prune = Instant::now();
        }
    }
}

/// Applies one event, retrying store errors; `Err` once the feed has halted on it.
async fn apply(store: &EventStore, e: &RecordedEvent, targets: &FeedTargets) -> Result<(), ()> {
    let mut backoff = Duration::from_millis(100);
    loop {
        match handle(store, e, targets).await {
            Ok(()) => return Ok(()),
            Err(err @ FeedError::Undecodable { .. }) => {
                halt(targets, &err);
                return Err(());
            }
            Err(err) => {
                // Not past an event we could not apply: health goes stale meanwhile.
                tracing::warn!(error = %err, position = e.position, retry_in_ms = backoff.as_millis() as u64, "revocation feed: applying an event failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// The hub dropped `batches` batches for this feed: load the revoked set again (until it loads)
/// and end every live session, since which of them the lost batches revoked is unknown.
async fn resync(store: &EventStore, targets: &FeedTargets, batches: u64) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match query_revoked(store, None, now_us()).await {
            Ok(rows) => match insert_rows(&targets.revoked, &rows) {
                Ok(()) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "revocation feed: reloading the revoked set failed; retrying")
                }
            },
            Err(err) => {
                tracing::warn!(error = %err, "revocation feed: reloading the revoked set failed; retrying")
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    let ended = targets.sessions.end_all(SessionEnd::FeedReloaded);
    tracing::error!(
        lost_batches = batches,
        sessions_ended = ended,
        "revocation feed fell behind the log hub: revoked set reloaded and every session ended (nodes reconnect)"
    );
}

/// Stops the feed for good on `err`: fails closed (every new session refused, health
/// NOT_SERVING, `bc_revocation_feed_halted 1`) and ends every live session, since the
/// revocation that could not be read may be any node's.
fn halt(targets: &FeedTargets, err: &FeedError) {
    let why = err.to_string();
    targets.health.halt(why.clone());
    let ended = targets
        .sessions
        .end_all(SessionEnd::FeedHalted(why.clone()));
    tracing::error!(
        error = %why,
        sessions_ended = ended,
        "revocation feed STOPPED: refusing every node session until the gateway is restarted"
    );
}

async fn handle(
    store: &EventStore,
    e: &RecordedEvent,
    targets: &FeedTargets,
) -> Result<(), FeedError> {
    // The node, the reason, and which of its certificates: a schema-2 revocation names its
    // serials, and the node's other certificates (a reclaim's new one) keep their sessions.
    let decoded = match e.event_type.as_str() {
        "node.identity.revoked" => e.decode::<NodeIdentityRevoked>().map(|p| {
            let named = match p.revoked_certificates(e.schema_version) {
                RevokedCertificates::Named(serials) => Some(serials.to_vec()),
                RevokedCertificates::EveryUnrevokedOfNode => None,
            };
            (p.node_id, p.reason, named)
        }),
        "node.deleted" => e
            .decode::<NodeDeleted>()
            .map(|p| (p.node_id, p.reason, None)),
        "node.retired" => e
            .decode::<NodeRetired>()
            .map(|p| (p.node_id, p.reason, None)),
        "security.join.refused" => {
            if let Ok(p) = e.decode::<JoinRefused>() {
                targets.metrics.join_refusals.inc(&p.refusal);
            }
            return Ok(());
        }
        "security.renew.refused" => {
            if let Ok(p) = e.decode::<RenewRefused>() {
                targets.metrics.renew_refusals.inc(&p.refusal);
            }
            return Ok(());
        }
        "security.refusals.suppressed" => {
            if let Ok(p) = e.decode::<RefusalsSuppressed>() {
                let family = if p.kind == "renew" {
                    &targets.metrics.renew_refusals
                } else {
                    &targets.metrics.join_refusals
                };
                family.add(&p.refusal, p.count);
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    let (node_id, reason, named) = decoded.map_err(|source| FeedError::Undecodable {
        position: e.position,
        event_type: e.event_type.clone(),
        source,
    })?;
    let rows = query_revoked(store, Some(&node_id), now_us()).await?;
    insert_rows(&targets.revoked, &rows)?;
    let serials: Vec<String> = rows.iter().map(|r| r.serial.clone()).collect();
    let reason = rows
        .iter()
        .find_map(|r| r.revoke_reason.clone())
        .unwrap_or(reason);
    let covered = match &named {
        Some(serials) => Revoked::Serials(serials),
        None => Revoked::Every,
    };
    let ended = targets.sessions.revoke_node(&node_id, covered, &reason);
    tracing::info!(node = %node_id, serials = serials.len(), sessions_ended = ended, %reason, "node revoked");
    Ok(())
}
