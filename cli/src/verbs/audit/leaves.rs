//! The leaves `verify` feeds the trail verifier, read one at a time from an export or page by
//! page from the database, each recomputed from its event (and, for the tenant's own
//! `audit.checkpoint.sealed` events, the checkpoint each recorded); a fault found while reading
//! stops the stream and is reported as the verification's fault.

use std::io::{BufRead, BufReader};

use commands::audit::reads;
use domain::audit::{sealed_leaf, AuditLeaf, SealedLeaf, TrailLeaf};
use events::store::EventStore;
use events::EventPayload as _;

use super::format::{hex_array, EventLine, PAGE};

/// A fault found while reading the trail, before the verifier saw it.
pub(super) struct ReadFault {
    pub(super) kind: &'static str,
    pub(super) message: String,
    pub(super) index: Option<u64>,
    pub(super) position: Option<i64>,
}

/// Where the leaves come from.
pub(super) enum LeafSource {
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

pub(super) struct Leaves {
    pub(super) source: LeafSource,
    pub(super) tenant: String,
    pub(super) fault: Option<ReadFault>,
    pub(super) payload: Vec<u8>,
    pub(super) total: Option<u64>,
}

impl Leaves {
    pub(super) fn fail(
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

    /// The checkpoint a sealed event of the tenant recorded (`Some(None)` for any other event);
    /// `None` (with the fault set) when such an event does not decode.
    fn sealed_of(&mut self, event: &events::RecordedEvent) -> Option<Option<SealedLeaf>> {
        match sealed_leaf(event, &self.tenant) {
            Ok(sealed) => Some(sealed),
            Err(e) => {
                let msg = format!(
                    "an audit.checkpoint.sealed event does not decode: {e}; the checkpoint it recorded cannot be checked"
                );
                self.fail("malformed_event", msg, None, Some(event.position));
                None
            }
        }
    }

    pub(super) fn next_export(&mut self) -> Option<TrailLeaf> {
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
            (Some(recorded), Ok(hash)) => {
                let sealed = if ev.event_type == events::schema::AuditCheckpointSealed::EVENT_TYPE {
                    let event = events::RecordedEvent {
                        position,
                        stream_id: ev.stream_id.to_string(),
                        stream_version: ev.stream_version,
                        event_id: hex_array::<16>(&ev.event_id).unwrap_or_default(),
                        event_type: ev.event_type.to_string(),
                        schema_version: ev.schema_version,
                        tenant_id: ev.tenant_id.to_string(),
                        occurred_at_us: ev.occurred_at_us,
                        payload: self.payload.clone(),
                        payload_sha256: [0; 32],
                        tx_id: None,
                        actor: ev.recorded_actor().ok().flatten(),
                    };
                    self.sealed_of(&event)?
                } else {
                    None
                };
                Some(TrailLeaf {
                    index,
                    position,
                    leaf_hash: hash,
                    recorded_leaf_hash: Some(recorded),
                    sealed,
                })
            }
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

    pub(super) fn next_database(&mut self) -> Option<TrailLeaf> {
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
                sealed: self.sealed_of(event)?,
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
