//! `join_requests`: approval requests of deferred joins and their decisions, from the
//! `join-request/<id>` streams.

use std::collections::HashMap;

use events::schema::{
    JoinRequestApproved, JoinRequestConsumed, JoinRequestCreated, JoinRequestExpired,
    JoinRequestRejected,
};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{bytes_or_null, checked_updates, inapplicable, opt_text, text_or_null};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `join_requests`.
pub struct JoinRequests;

const JOIN_REQUESTS_TABLES: &[TableSpec] = &[TableSpec {
    name: "join_requests",
    columns: &[
        "request_id",
        "tenant_id",
        "attestor",
        "subject",
        "csr_sha256",
        "role",
        "site_id",
        "pool_id",
        "node_id",
        "token_id",
        "product_uuid_sha256",
        "macs_sha256",
        "summary",
        "status",
        "decided_by",
        "decision_reason",
        "joined_node_id",
        "created_at_us",
        "expires_at_us",
        "updated_at_us",
        "version",
        "position",
    ],
    order_by: "request_id",
}];

/// What the events after `join_request.created` change.
#[derive(Default)]
struct Change {
    status: &'static str,
    decided_by: Option<String>,
    decision_reason: Option<String>,
    joined_node_id: Option<String>,
    updated_at_us: i64,
    version: i64,
    position: i64,
}

impl Change {
    /// Folds one later event in: the status is the last one, the other fields the last set.
    fn fold(&mut self, e: &RecordedEvent, later: Later) {
        match later {
            Later::Decided { status, by, reason } => {
                self.status = status;
                self.decided_by = Some(by)
                    .filter(|s| !s.is_empty())
                    .or(self.decided_by.take());
                self.decision_reason = Some(reason)
                    .filter(|s| !s.is_empty())
                    .or(self.decision_reason.take());
            }
            Later::Consumed { node_id } => {
                self.status = "consumed";
                self.joined_node_id = Some(node_id).filter(|s| !s.is_empty());
            }
            Later::Expired => self.status = "expired",
        }
        self.updated_at_us = e.occurred_at_us;
        self.version = e.stream_version;
        self.position = e.position;
    }
}

enum Later {
    Decided {
        status: &'static str,
        by: String,
        reason: String,
    },
    Consumed {
        node_id: String,
    },
    Expired,
}

/// A request created in the run, with its later changes.
struct NewRequest {
    p: JoinRequestCreated,
    created_at_us: i64,
    change: Change,
}

fn later_of(e: &RecordedEvent) -> Result<Option<(String, Later)>, ProjectionError> {
    Ok(Some(match e.event_type.as_str() {
        JoinRequestApproved::EVENT_TYPE => {
            let p: JoinRequestApproved = e.decode()?;
            let later = Later::Decided {
                status: "approved",
                by: p.actor,
                reason: p.reason,
            };
            (p.request_id, later)
        }
        JoinRequestRejected::EVENT_TYPE => {
            let p: JoinRequestRejected = e.decode()?;
            let later = Later::Decided {
                status: "rejected",
                by: p.actor,
                reason: p.reason,
            };
            (p.request_id, later)
        }
        JoinRequestConsumed::EVENT_TYPE => {
            let p: JoinRequestConsumed = e.decode()?;
            (p.request_id, Later::Consumed { node_id: p.node_id })
        }
        JoinRequestExpired::EVENT_TYPE => {
            let p: JoinRequestExpired = e.decode()?;
            (p.request_id, Later::Expired)
        }
        _ => return Ok(None),
    }))
}

impl Projection for JoinRequests {
    fn name(&self) -> &'static str {
        "join_requests"
    }
    fn tables(&self) -> &'static [TableSpec] {
        JOIN_REQUESTS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            JoinRequestCreated::EVENT_TYPE,
            JoinRequestApproved::EVENT_TYPE,
            JoinRequestRejected::EVENT_TYPE,
            JoinRequestConsumed::EVENT_TYPE,
            JoinRequestExpired::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let mut created: Vec<NewRequest> = Vec::new();
            let mut created_at: HashMap<String, usize> = HashMap::new();
            let mut changes: Vec<(String, Change)> = Vec::new();
            let mut change_at: HashMap<String, usize> = HashMap::new();
            for e in events {
                if e.event_type == JoinRequestCreated::EVENT_TYPE {
                    let p: JoinRequestCreated = e.decode()?;
                    if p.subject.len() != 32 {
                        return Err(inapplicable(
                            "join_requests",
                            e,
                            "the subject is not 32 bytes",
                        ));
                    }
                    if created_at.contains_key(&p.request_id)
                        || change_at.contains_key(&p.request_id)
                    {
                        return Err(inapplicable(
                            "join_requests",
                            e,
                            "the request was already created",
                        ));
                    }
                    created_at.insert(p.request_id.clone(), created.len());
                    created.push(NewRequest {
                        change: Change {
                            status: "pending",
                            updated_at_us: e.occurred_at_us,
                            version: e.stream_version,
                            position: e.position,
                            ..Change::default()
                        },
                        created_at_us: e.occurred_at_us,
                        p,
                    });
                    continue;
                }
                let Some((id, later)) = later_of(e)? else {
                    continue;
                };
                if let Some(row) = created_at.get(&id).and_then(|&i| created.get_mut(i)) {
                    row.change.fold(e, later);
                    continue;
                }
                let i = *change_at.entry(id.clone()).or_insert_with(|| {
                    changes.push((id, Change::default()));
                    changes.len() - 1
                });
                changes[i].1.fold(e, later);
            }
            let rows: Vec<Vec<SqlValue>> = created
                .into_iter()
                .map(|r| {
                    let p = r.p;
                    vec![
                        p.request_id.into(),
                        p.tenant_id.into(),
                        p.attestor.into(),
                        p.subject.into(),
                        p.csr_sha256.into(),
                        p.role.into(),
                        p.site_id.into(),
                        p.pool_id.into(),
                        text_or_null(&p.node_id),
                        text_or_null(&p.token_id),
                        bytes_or_null(&p.product_uuid_sha256),
                        bytes_or_null(&p.macs_sha256),
                        p.summary.into(),
                        r.change.status.into(),
                        opt_text(r.change.decided_by),
                        opt_text(r.change.decision_reason),
                        opt_text(r.change.joined_node_id),
                        r.created_at_us.into(),
                        p.expires_at_us.into(),
                        r.change.updated_at_us.into(),
                        r.change.version.into(),
                        r.change.position.into(),
                    ]
                })
                .collect();
            let table = &JOIN_REQUESTS_TABLES[0];
            tx.insert_rows(table.name, table.columns, rows).await?;
            let rows: Vec<Vec<SqlValue>> = changes
                .into_iter()
                .map(|(id, c)| {
                    vec![
                        id.into(),
                        c.status.into(),
                        opt_text(c.decided_by),
                        opt_text(c.decision_reason),
                        opt_text(c.joined_node_id),
                        c.updated_at_us.into(),
                        c.version.into(),
                        c.position.into(),
                    ]
                })
                .collect();
            checked_updates(
                tx,
                "join_requests",
                REQUEST_UPDATE_HEAD,
                REQUEST_UPDATE_TAIL,
                rows,
                "join_requests changed without a join_request.created before them",
            )
            .await
        })
    }
}

const REQUEST_UPDATE_HEAD: &str = "WITH v (request_id, status, decided_by, decision_reason, \
     joined_node_id, updated_at_us, version, position) AS (VALUES ";
const REQUEST_UPDATE_TAIL: &str = ") UPDATE join_requests SET status = v.status, \
     decided_by = COALESCE(v.decided_by, join_requests.decided_by), \
     decision_reason = COALESCE(v.decision_reason, join_requests.decision_reason), \
     joined_node_id = COALESCE(v.joined_node_id, join_requests.joined_node_id), \
     updated_at_us = v.updated_at_us, version = v.version, position = v.position \
     FROM v WHERE join_requests.request_id = v.request_id";
