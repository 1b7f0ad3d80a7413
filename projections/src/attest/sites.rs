//! `sites` and `boot_entries`, from the `site/<id>` streams' `site.created`, `site.boot.added`
//! and `site.boot.removed` events. A site row carries its stream's version and position, so the
//! boot entry events move it too: the command layer appends a boot entry at the site's version
//! (one active entry per MAC under races).

use std::collections::HashMap;

use events::schema::{BootEntryAdded, BootEntryRemoved, SiteCreated};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{checked_updates, inapplicable, text_or_null};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `sites`.
pub struct Sites;

/// `boot_entries`.
pub struct BootEntries;

const SITES_TABLES: &[TableSpec] = &[TableSpec {
    name: "sites",
    columns: &[
        "site_id",
        "tenant_id",
        "description",
        "default_pool_id",
        "created_by",
        "created_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "site_id",
}];

const BOOT_ENTRIES_TABLES: &[TableSpec] = &[TableSpec {
    name: "boot_entries",
    columns: &[
        "entry_id",
        "site_id",
        "tenant_id",
        "mac",
        "product_uuid",
        "kernel_url",
        "initrd_url",
        "kernel_args",
        "pool_id",
        "not_after_us",
        "added_by",
        "removed",
        "removed_by",
        "remove_reason",
        "created_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "entry_id",
}];

/// Where a row's stream stood at its last event.
#[derive(Clone, Copy)]
struct Moved {
    at_us: i64,
    version: i64,
    position: i64,
}

fn moved(e: &RecordedEvent) -> Moved {
    Moved {
        at_us: e.occurred_at_us,
        version: e.stream_version,
        position: e.position,
    }
}

impl Projection for Sites {
    fn name(&self) -> &'static str {
        "sites"
    }
    fn tables(&self) -> &'static [TableSpec] {
        SITES_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            SiteCreated::EVENT_TYPE,
            BootEntryAdded::EVENT_TYPE,
            BootEntryRemoved::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut created: Vec<(SiteCreated, i64, Moved)> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut touched: Vec<(String, Moved)> = Vec::new();
            let mut touched_at: HashMap<String, usize> = HashMap::new();
            for e in events {
                let site_id = match e.event_type.as_str() {
                    SiteCreated::EVENT_TYPE => {
                        let p: SiteCreated = e.decode()?;
                        if created_at.contains_key(&p.site_id)
                            || touched_at.contains_key(&p.site_id)
                        {
                            return Err(inapplicable("sites", e, "the site was already created"));
                        }
                        created_at.insert(p.site_id.clone(), created.len());
                        created.push((p, e.occurred_at_us, moved(e)));
                        continue;
                    }
                    BootEntryAdded::EVENT_TYPE => e.decode::<BootEntryAdded>()?.site_id,
                    BootEntryRemoved::EVENT_TYPE => e.decode::<BootEntryRemoved>()?.site_id,
                    _ => continue,
                };
                if let Some(&i) = created_at.get(&site_id) {
                    created[i].2 = moved(e);
                } else if let Some(&i) = touched_at.get(&site_id) {
                    touched[i].1 = moved(e);
                } else {
                    touched_at.insert(site_id.clone(), touched.len());
                    touched.push((site_id, moved(e)));
                }
            }
            let rows: Vec<Vec<SqlValue>> = touched
                .into_iter()
                .map(|(id, m)| {
                    vec![
                        id.into(),
                        m.at_us.into(),
                        m.version.into(),
                        m.position.into(),
                    ]
                })
                .collect();
            checked_updates(
                tx,
                "sites",
                SITE_MOVE_HEAD,
                SITE_MOVE_TAIL,
                rows,
                "a site's boot entries changed without a site.created before them",
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = created
                .into_iter()
                .map(|(p, created_at_us, m)| {
                    vec![
                        p.site_id.into(),
                        p.tenant_id.into(),
                        p.description.into(),
                        text_or_null(&p.default_pool_id),
                        p.actor.into(),
                        created_at_us.into(),
                        m.at_us.into(),
                        m.version.into(),
                        m.position.into(),
                    ]
                })
                .collect();
            let table = &SITES_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            Ok(())
        })
    }
}

const SITE_MOVE_HEAD: &str = "WITH v (site_id, updated_at_us, version, position) AS (VALUES ";
const SITE_MOVE_TAIL: &str = ") UPDATE sites SET updated_at_us = v.updated_at_us, \
     version = v.version, position = v.position FROM v WHERE sites.site_id = v.site_id";

/// A removal, as the row records it.
struct Removal {
    by: String,
    reason: String,
    moved: Moved,
}

impl Projection for BootEntries {
    fn name(&self) -> &'static str {
        "boot_entries"
    }
    fn tables(&self) -> &'static [TableSpec] {
        BOOT_ENTRIES_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == BootEntryAdded::EVENT_TYPE || event_type == BootEntryRemoved::EVENT_TYPE
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut created: Vec<(BootEntryAdded, Moved, Option<Removal>)> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut removed: Vec<(String, Removal)> = Vec::new();
            for e in events {
                match e.event_type.as_str() {
                    BootEntryAdded::EVENT_TYPE => {
                        let p: BootEntryAdded = e.decode()?;
                        if created_at.contains_key(&p.entry_id) {
                            return Err(inapplicable(
                                "boot_entries",
                                e,
                                "the entry was already added",
                            ));
                        }
                        created_at.insert(p.entry_id.clone(), created.len());
                        created.push((p, moved(e), None));
                    }
                    BootEntryRemoved::EVENT_TYPE => {
                        let p: BootEntryRemoved = e.decode()?;
                        let r = Removal {
                            by: p.actor,
                            reason: p.reason,
                            moved: moved(e),
                        };
                        let twice =
                            || inapplicable("boot_entries", e, "the entry was already removed");
                        match created_at
                            .get(&p.entry_id)
                            .and_then(|&i| created.get_mut(i))
                        {
                            Some((_, _, Some(_))) => return Err(twice()),
                            Some((_, _, slot)) => *slot = Some(r),
                            None if removed.iter().any(|(id, _)| *id == p.entry_id) => {
                                return Err(twice())
                            }
                            None => removed.push((p.entry_id, r)),
                        }
                    }
                    _ => {}
                }
            }
            let rows: Vec<Vec<SqlValue>> = removed
                .into_iter()
                .map(|(id, r)| {
                    vec![
                        id.into(),
                        r.by.into(),
                        r.reason.into(),
                        r.moved.at_us.into(),
                        r.moved.version.into(),
                        r.moved.position.into(),
                    ]
                })
                .collect();
            checked_updates(
                tx,
                "boot_entries",
                REMOVE_HEAD,
                REMOVE_TAIL,
                rows,
                "boot_entries removed without a site.boot.added before them, or twice",
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = created.into_iter().map(entry_row).collect();
            let table = &BOOT_ENTRIES_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            Ok(())
        })
    }
}

fn entry_row((p, added, removal): (BootEntryAdded, Moved, Option<Removal>)) -> Vec<SqlValue> {
    let (removed, by, reason, last) = match removal {
        None => (false, SqlValue::NullText, SqlValue::NullText, added),
        Some(r) => (
            true,
            SqlValue::Text(r.by),
            SqlValue::Text(r.reason),
            r.moved,
        ),
    };
    vec![
        p.entry_id.into(),
        p.site_id.into(),
        p.tenant_id.into(),
        p.mac.into(),
        text_or_null(&p.product_uuid),
        p.kernel_url.into(),
        p.initrd_url.into(),
        p.kernel_args.into(),
        p.pool_id.into(),
        p.not_after_us.into(),
        p.actor.into(),
        SqlValue::Bool(removed),
        by,
        reason,
        added.at_us.into(),
        last.at_us.into(),
        last.version.into(),
        last.position.into(),
    ]
}

const REMOVE_HEAD: &str = "WITH v (entry_id, removed_by, remove_reason, updated_at_us, version, \
     position) AS (VALUES ";
const REMOVE_TAIL: &str = ") UPDATE boot_entries SET removed = TRUE, removed_by = v.removed_by, \
     remove_reason = v.remove_reason, updated_at_us = v.updated_at_us, version = v.version, \
     position = v.position FROM v WHERE boot_entries.entry_id = v.entry_id \
     AND NOT boot_entries.removed";
