//! `trust_bundle_state` (the published bundle, one row) and `trust_bundle_history` (every
//! published version with its digest), and `node_trust_reports` (the trust version and the
//! approver set each node reports holding).
//!
//! The approver set of a report (spec 003 "Nodes that hold another set"): a Hello writes it as it
//! comes; a StatusReport with a trust version above 0 writes it only when that version is at least
//! the one recorded, so a late, older report never pairs an old set with a newer version; the end
//! of a session leaves it; an empty digest (a node holding no approver keys) is NULL in both
//! columns.

use events::schema::{
    CommandRootAdded, CommandRootDropped, CommandRootSwitched, NodeTrustReported,
    TrustBundlePublished,
};
use events::store::{LogTx, SqlValue, StoreTx};
use events::RecordedEvent;
use prost::Message;
use sha2::{Digest, Sha256};

use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

use super::inapplicable::inapplicable;

const STATE: TableSpec = TableSpec {
    name: "trust_bundle_state",
    columns: &[
        "id",
        "version",
        "digest",
        "content",
        "roots_sha256",
        "active_root_sha256",
        "rotation_stage",
        "rotation_root_sha256",
        "switched_at_us",
        "approver_keys",
        "approver_threshold",
        "quorum_tiers",
        "unbatched_per_hour",
        "approver_set_sha256",
        "approver_set_epoch",
        "approver_set_signatures",
        "floor",
        "stream_version",
        "published_at_us",
        "position",
    ],
    order_by: "id",
};

const HISTORY: TableSpec = TableSpec {
    name: "trust_bundle_history",
    columns: &[
        "version",
        "digest",
        "previous_version",
        "cause",
        "published_at_us",
        "position",
    ],
    order_by: "version",
};

const NODE_REPORTS: TableSpec = TableSpec {
    name: "node_trust_reports",
    columns: &[
        "node_id",
        "trust_version",
        "connected",
        "last_seen_us",
        "position",
        "approver_set_epoch",
        "approver_set_sha256",
    ],
    order_by: "node_id",
};

/// The published trust bundle and its history.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrustBundleProjection;

/// The trust version each node reports holding.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeTrustProjection;

fn u64_to_i64(value: u64, what: &str, event: &RecordedEvent) -> Result<i64, ProjectionError> {
    i64::try_from(value).map_err(|_| {
        inapplicable(
            "trust_bundle",
            event,
            format!("{what} {value} does not fit a BIGINT"),
        )
    })
}

fn hex_list<'a>(items: impl Iterator<Item = &'a [u8]>) -> String {
    items.map(hex::encode).collect::<Vec<_>>().join(",")
}

fn non_empty(bytes: &[u8]) -> SqlValue {
    if bytes.is_empty() {
        SqlValue::NullBytes
    } else {
        SqlValue::Bytes(bytes.to_vec())
    }
}

async fn apply_published(tx: &mut StoreTx, event: &RecordedEvent) -> Result<(), ProjectionError> {
    let published: TrustBundlePublished = event.decode()?;
    let content = published.content.clone().unwrap_or_default();
    let root_hashes: Vec<[u8; 32]> = content
        .command_signing_roots
        .iter()
        .map(|der| Sha256::digest(der).into())
        .collect();
    let roots = hex_list(root_hashes.iter().map(|h| &h[..]));
    let keys = hex_list(content.approver_keys.iter().map(|k| &k.kid[..]));
    let tiers = content
        .quorum_tiers
        .iter()
        .map(|t| format!("{}:{}", t.max_scope_size, t.threshold))
        .collect::<Vec<_>>()
        .join(",");
    let version = u64_to_i64(published.version, "version", event)?;
    let previous = u64_to_i64(published.previous_version, "previous version", event)?;
    let epoch = u64_to_i64(content.approver_set_epoch, "approver-set epoch", event)?;
    let floor = u64_to_i64(published.floor, "floor", event)?;
    tx.execute(
        "INSERT INTO trust_bundle_state (id, version, digest, content, roots_sha256, \
         active_root_sha256, rotation_stage, rotation_root_sha256, switched_at_us, approver_keys, \
         approver_threshold, quorum_tiers, unbatched_per_hour, approver_set_sha256, \
         approver_set_epoch, approver_set_signatures, floor, stream_version, published_at_us, \
         position) \
         VALUES (1, $1, $2, $3, $4, $5, 'none', NULL, NULL, $6, $7, $8, $9, $10, $11, $12, $13, \
         $14, $15, $16) \
         ON CONFLICT (id) DO UPDATE SET version = excluded.version, digest = excluded.digest, \
         content = excluded.content, roots_sha256 = excluded.roots_sha256, \
         active_root_sha256 = excluded.active_root_sha256, approver_keys = excluded.approver_keys, \
         approver_threshold = excluded.approver_threshold, quorum_tiers = excluded.quorum_tiers, \
         unbatched_per_hour = excluded.unbatched_per_hour, \
         approver_set_sha256 = excluded.approver_set_sha256, \
         approver_set_epoch = excluded.approver_set_epoch, \
         approver_set_signatures = excluded.approver_set_signatures, floor = excluded.floor, \
         stream_version = excluded.stream_version, published_at_us = excluded.published_at_us, \
         position = excluded.position",
        &[
            SqlValue::Int(version),
            SqlValue::Bytes(published.digest.clone()),
            SqlValue::Bytes(content.encode_to_vec()),
            SqlValue::Text(roots),
            SqlValue::Bytes(published.active_root_sha256.clone()),
            SqlValue::Text(keys),
            SqlValue::Int(i64::from(content.approver_threshold)),
            SqlValue::Text(tiers),
            SqlValue::Int(i64::from(content.unbatched_destructive_per_hour)),
            non_empty(&published.approver_set_sha256),
            SqlValue::Int(epoch),
            SqlValue::Int(content.approver_set_signatures.len() as i64),
            SqlValue::Int(floor),
            SqlValue::Int(event.stream_version),
            SqlValue::Int(event.occurred_at_us),
            SqlValue::Int(event.position),
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO trust_bundle_history (version, digest, previous_version, cause, \
         published_at_us, position) VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            SqlValue::Int(version),
            SqlValue::Bytes(published.digest),
            SqlValue::Int(previous),
            SqlValue::Text(published.cause),
            SqlValue::Int(event.occurred_at_us),
            SqlValue::Int(event.position),
        ],
    )
    .await?;
    Ok(())
}

async fn touch_state(
    tx: &mut StoreTx,
    event: &RecordedEvent,
    set: &str,
    mut args: Vec<SqlValue>,
) -> Result<(), ProjectionError> {
    let n = args.len();
    let sql = format!(
        "UPDATE trust_bundle_state SET {set}, stream_version = ${}, position = ${} WHERE id = 1",
        n + 1,
        n + 2
    );
    args.push(SqlValue::Int(event.stream_version));
    args.push(SqlValue::Int(event.position));
    let changed = tx.execute(&sql, &args).await?;
    if changed != 1 {
        return Err(inapplicable(
            "trust_bundle",
            event,
            "no published trust bundle to change".to_string(),
        ));
    }
    Ok(())
}

async fn apply_bundle_event(
    tx: &mut StoreTx,
    event: &RecordedEvent,
) -> Result<(), ProjectionError> {
    match event.event_type.as_str() {
        "trust.bundle.published" => apply_published(tx, event).await,
        "trust.approver_set.changed" => {
            // The set's content and digest arrive with the trust.bundle.published event appended
            // beside it; this records only the stream's progress.
            touch_state_if_present(tx, event).await
        }
        "trust.command_root.added" => {
            let added: CommandRootAdded = event.decode()?;
            touch_state(
                tx,
                event,
                "rotation_stage = 'added', rotation_root_sha256 = $1, switched_at_us = NULL",
                vec![SqlValue::Bytes(added.root_sha256)],
            )
            .await
        }
        "trust.command_root.switched" => {
            let switched: CommandRootSwitched = event.decode()?;
            touch_state(
                tx,
                event,
                "rotation_stage = 'switched', active_root_sha256 = $1, switched_at_us = $2",
                vec![
                    SqlValue::Bytes(switched.to_sha256),
                    SqlValue::Int(event.occurred_at_us),
                ],
            )
            .await
        }
        "trust.command_root.dropped" => {
            let _dropped: CommandRootDropped = event.decode()?;
            touch_state(
                tx,
                event,
                "rotation_stage = 'none', rotation_root_sha256 = NULL, switched_at_us = NULL",
                Vec::new(),
            )
            .await
        }
        other => Err(inapplicable(
            "trust_bundle",
            event,
            format!("unexpected event type {other}"),
        )),
    }
}

async fn touch_state_if_present(
    tx: &mut StoreTx,
    event: &RecordedEvent,
) -> Result<(), ProjectionError> {
    tx.execute(
        "UPDATE trust_bundle_state SET stream_version = $1, position = $2 WHERE id = 1",
        &[
            SqlValue::Int(event.stream_version),
            SqlValue::Int(event.position),
        ],
    )
    .await?;
    Ok(())
}

impl Projection for TrustBundleProjection {
    fn name(&self) -> &'static str {
        "trust_bundle"
    }

    fn tables(&self) -> &'static [TableSpec] {
        &[STATE, HISTORY]
    }

    fn handles(&self, event_type: &str) -> bool {
        matches!(
            event_type,
            "trust.bundle.published"
                | "trust.approver_set.changed"
                | "trust.command_root.added"
                | "trust.command_root.switched"
                | "trust.command_root.dropped"
        )
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for event in events {
                apply_bundle_event(tx, event).await?;
            }
            Ok(())
        })
    }
}

impl Projection for NodeTrustProjection {
    fn name(&self) -> &'static str {
        "node_trust_reports"
    }

    fn tables(&self) -> &'static [TableSpec] {
        &[NODE_REPORTS]
    }

    fn handles(&self, event_type: &str) -> bool {
        event_type == "node.trust.reported"
    }

    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            for event in events {
                let report: NodeTrustReported = event.decode()?;
                let version = u64_to_i64(report.trust_version, "trust version", event)?;
                let (epoch, digest) = if report.approver_set_sha256.is_empty() {
                    (SqlValue::NullInt, SqlValue::NullBytes)
                } else {
                    let epoch = u64_to_i64(report.approver_set_epoch, "approver-set epoch", event)?;
                    (
                        SqlValue::Int(epoch),
                        SqlValue::Bytes(report.approver_set_sha256),
                    )
                };
                // A StatusReport acknowledging a bundle (version above 0) may write the set.
                let acknowledges =
                    report.connected && !report.session_start && report.trust_version > 0;
                tx.execute(
                    "INSERT INTO node_trust_reports (node_id, trust_version, connected, \
                     last_seen_us, position, approver_set_epoch, approver_set_sha256) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (node_id) DO UPDATE SET \
                     approver_set_epoch = CASE WHEN $8 OR ($9 AND excluded.trust_version >= \
                     node_trust_reports.trust_version) THEN excluded.approver_set_epoch \
                     ELSE node_trust_reports.approver_set_epoch END, \
                     approver_set_sha256 = CASE WHEN $8 OR ($9 AND excluded.trust_version >= \
                     node_trust_reports.trust_version) THEN excluded.approver_set_sha256 \
                     ELSE node_trust_reports.approver_set_sha256 END, \
                     trust_version = CASE WHEN $8 OR excluded.trust_version > \
                     node_trust_reports.trust_version THEN excluded.trust_version \
                     ELSE node_trust_reports.trust_version END, \
                     connected = excluded.connected, last_seen_us = excluded.last_seen_us, \
                     position = excluded.position",
                    &[
                        SqlValue::Text(report.node_id),
                        SqlValue::Int(version),
                        SqlValue::Bool(report.connected),
                        SqlValue::Int(event.occurred_at_us),
                        SqlValue::Int(event.position),
                        epoch,
                        digest,
                        SqlValue::Bool(report.session_start),
                        SqlValue::Bool(acknowledges),
                    ],
                )
                .await?;
            }
            Ok(())
        })
    }
}
