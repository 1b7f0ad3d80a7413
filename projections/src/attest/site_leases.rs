//! `site_leases`: each site's boot lease, from the `lease/site:<id>:boot` streams'
//! `site.lease.acquired`, `site.lease.renewed` and `site.lease.released` events. One row per
//! site, holding the current (or last) holding: an acquisition replaces the row whole (an
//! upsert), a renewal or release of an older row is a checked update (a renewal with no
//! acquisition before it is inapplicable: the log is broken).

use std::collections::HashMap;

use events::schema::{SiteLeaseAcquired, SiteLeaseReleased, SiteLeaseRenewed};
use events::store::{push_groups, DeferredWrite, LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable, opt_text, BULK_ROWS};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `site_leases`.
pub struct SiteLeases;

const COLUMNS: &[&str] = &[
    "site_id",
    "lease",
    "holder_node_id",
    "epoch",
    "expires_at_us",
    "released",
    "release_cause",
    "acquired_at_us",
    "updated_at_us",
    "version",
    "position",
];

const SITE_LEASES_TABLES: &[TableSpec] = &[TableSpec {
    name: "site_leases",
    columns: COLUMNS,
    order_by: "site_id",
}];

/// A site's lease over one run of events.
struct Fold {
    /// The run's last acquisition: the whole row is then written.
    acquired: Option<(SiteLeaseAcquired, i64)>,
    /// The newest expiry a renewal set (after the acquisition, if any).
    expires_at_us: Option<i64>,
    /// The cause of a release after them.
    released: Option<String>,
    at_us: i64,
    version: i64,
    position: i64,
}

fn epoch_i64(epoch: u64, e: &RecordedEvent) -> Result<i64, ProjectionError> {
    i64::try_from(epoch).map_err(|_| inapplicable("site_leases", e, "the epoch is out of range"))
}

impl Projection for SiteLeases {
    fn name(&self) -> &'static str {
        "site_leases"
    }
    fn tables(&self) -> &'static [TableSpec] {
        SITE_LEASES_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            SiteLeaseAcquired::EVENT_TYPE,
            SiteLeaseRenewed::EVENT_TYPE,
            SiteLeaseReleased::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut folds: Vec<(String, Fold)> = Vec::new();
            let mut at: HashMap<String, usize> = HashMap::new();
            for e in events {
                let (site_id, change): (String, Change) = match e.event_type.as_str() {
                    SiteLeaseAcquired::EVENT_TYPE => {
                        let p: SiteLeaseAcquired = e.decode()?;
                        epoch_i64(p.epoch, e)?;
                        (p.site_id.clone(), Change::Acquired(p))
                    }
                    SiteLeaseRenewed::EVENT_TYPE => {
                        let p: SiteLeaseRenewed = e.decode()?;
                        (p.site_id, Change::Renewed(p.expires_at_us))
                    }
                    SiteLeaseReleased::EVENT_TYPE => {
                        let p: SiteLeaseReleased = e.decode()?;
                        (p.site_id, Change::Released(p.cause))
                    }
                    _ => continue,
                };
                let i = *at.entry(site_id.clone()).or_insert_with(|| {
                    folds.push((
                        site_id,
                        Fold {
                            acquired: None,
                            expires_at_us: None,
                            released: None,
                            at_us: 0,
                            version: 0,
                            position: 0,
                        },
                    ));
                    folds.len() - 1
                });
                let fold = &mut folds[i].1;
                match change {
                    Change::Acquired(p) => {
                        fold.acquired = Some((p, e.occurred_at_us));
                        fold.expires_at_us = None;
                        fold.released = None;
                    }
                    Change::Renewed(expires) => {
                        if fold.released.is_some() {
                            return Err(inapplicable(
                                "site_leases",
                                e,
                                "a released lease was renewed",
                            ));
                        }
                        fold.expires_at_us = Some(expires);
                    }
                    Change::Released(cause) => fold.released = Some(cause),
                }
                fold.at_us = e.occurred_at_us;
                fold.version = e.stream_version;
                fold.position = e.position;
            }
            let mut whole: Vec<Vec<SqlValue>> = Vec::new();
            let mut partial: Vec<Vec<SqlValue>> = Vec::new();
            for (site_id, f) in folds {
                match f.acquired {
                    Some((p, acquired_at_us)) => whole.push(vec![
                        site_id.into(),
                        p.lease.into(),
                        p.holder_node_id.into(),
                        i64::try_from(p.epoch).unwrap_or(i64::MAX).into(),
                        f.expires_at_us.unwrap_or(p.expires_at_us).into(),
                        SqlValue::Bool(f.released.is_some()),
                        opt_text(f.released),
                        acquired_at_us.into(),
                        f.at_us.into(),
                        f.version.into(),
                        f.position.into(),
                    ]),
                    None => partial.push(vec![
                        site_id.into(),
                        f.expires_at_us.map_or(SqlValue::NullInt, SqlValue::Int),
                        SqlValue::Bool(f.released.is_some()),
                        opt_text(f.released),
                        f.at_us.into(),
                        f.version.into(),
                        f.position.into(),
                    ]),
                }
            }
            checked_updates(
                tx,
                "site_leases",
                CHANGE_HEAD,
                CHANGE_TAIL,
                partial,
                "a boot lease renewed or released without a site.lease.acquired before it",
            )
            .await?;
            let mut rows = whole.into_iter().peekable();
            while rows.peek().is_some() {
                let chunk: Vec<Vec<SqlValue>> = rows.by_ref().take(BULK_ROWS).collect();
                let mut sql = format!("INSERT INTO site_leases ({}) VALUES ", COLUMNS.join(", "));
                let mut args = Vec::new();
                push_groups(&mut sql, &mut args, chunk);
                sql.push_str(UPSERT_TAIL);
                tx.defer(DeferredWrite::new("site_leases", sql, args))
                    .await?;
            }
            Ok(())
        })
    }
}

enum Change {
    Acquired(SiteLeaseAcquired),
    Renewed(i64),
    Released(String),
}

const UPSERT_TAIL: &str = " ON CONFLICT (site_id) DO UPDATE SET lease = excluded.lease, \
     holder_node_id = excluded.holder_node_id, epoch = excluded.epoch, \
     expires_at_us = excluded.expires_at_us, released = excluded.released, \
     release_cause = excluded.release_cause, acquired_at_us = excluded.acquired_at_us, \
     updated_at_us = excluded.updated_at_us, version = excluded.version, \
     position = excluded.position";

const CHANGE_HEAD: &str =
    "WITH v (site_id, expires_at_us, released, release_cause, updated_at_us, \
     version, position) AS (VALUES ";
const CHANGE_TAIL: &str = ") UPDATE site_leases SET \
     expires_at_us = COALESCE(v.expires_at_us, site_leases.expires_at_us), \
     released = (site_leases.released OR v.released), \
     release_cause = COALESCE(v.release_cause, site_leases.release_cause), \
     updated_at_us = v.updated_at_us, version = v.version, position = v.position \
     FROM v WHERE site_leases.site_id = v.site_id";
