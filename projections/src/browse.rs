//! Browsing the event log as an operator does (`bcctl events list | show`, `bcctl tenant
//! list`): events filtered by stream, type, tenant and a starting position or time, one event by
//! position, and the tenants the log names with their event counts. Read outside any
//! transaction, on either backend. The filters are bound parameters, never spliced text. Each
//! event comes with its actor, when it has one (who caused it, `events::Actor`).

use events::store::{EventStore, SqlValue, StoreError};
use events::Actor;

/// One stored event as it is browsed (the payload as stored: protobuf bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub position: i64,
    pub stream_id: String,
    pub stream_version: i64,
    pub event_type: String,
    pub schema_version: i64,
    pub tenant_id: String,
    pub occurred_at_us: i64,
    pub payload: Vec<u8>,
    /// Who caused the event (`None`: nobody decided it, or it was written before the log
    /// recorded actors).
    pub actor: Option<Actor>,
}

/// Which events to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub stream: Option<String>,
    pub event_type: Option<String>,
    pub tenant: Option<String>,
    /// Only events at a position above this one.
    pub after_position: Option<i64>,
    /// Only events that occurred at or after this time (µs since the epoch).
    pub since_us: Option<i64>,
    /// At most this many, oldest first.
    pub limit: i64,
}

type EventTuple = (
    i64,
    String,
    i64,
    String,
    i64,
    String,
    i64,
    Vec<u8>,
    Option<String>,
    Option<String>,
);

const COLUMNS: &str = "position, stream_id, stream_version, event_type, \
     CAST(schema_version AS BIGINT), tenant_id, occurred_at_us, payload, actor_id, actor_role";

fn row(r: EventTuple) -> Result<EventRow, StoreError> {
    let position = r.0;
    let actor = match (r.8, r.9) {
        (None, None) => None,
        (Some(id), Some(role)) => Some(Actor::new(id, role).map_err(|e| StoreError::Corrupt {
            position,
            why: format!("actor: {e}"),
        })?),
        _ => {
            return Err(StoreError::Corrupt {
                position,
                why: "one of actor_id and actor_role is NULL".into(),
            })
        }
    };
    Ok(EventRow {
        position: r.0,
        stream_id: r.1,
        stream_version: r.2,
        event_type: r.3,
        schema_version: r.4,
        tenant_id: r.5,
        occurred_at_us: r.6,
        payload: r.7,
        actor,
    })
}

/// The events `filter` selects, oldest first.
pub async fn list_events(
    store: &EventStore,
    filter: &EventFilter,
) -> Result<Vec<EventRow>, StoreError> {
    let mut clauses = Vec::new();
    let mut args: Vec<SqlValue> = Vec::new();
    let mut bind = |clause: &str, value: SqlValue, args: &mut Vec<SqlValue>| {
        args.push(value);
        clauses.push(format!("{clause} ${}", args.len()));
    };
    if let Some(s) = &filter.stream {
        bind("stream_id =", s.clone().into(), &mut args);
    }
    if let Some(t) = &filter.event_type {
        bind("event_type =", t.clone().into(), &mut args);
    }
    if let Some(t) = &filter.tenant {
        bind("tenant_id =", t.clone().into(), &mut args);
    }
    if let Some(p) = filter.after_position {
        bind("position >", p.into(), &mut args);
    }
    if let Some(t) = filter.since_us {
        bind("occurred_at_us >=", t.into(), &mut args);
    }
    let filter_sql = if clauses.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", clauses.join(" AND "))
    };
    args.push(filter.limit.max(0).into());
    let sql = format!(
        "SELECT {COLUMNS} FROM events{filter_sql} ORDER BY position LIMIT ${}",
        args.len()
    );
    let rows: Vec<EventTuple> = store.fetch_all(&sql, &args).await?;
    rows.into_iter().map(row).collect()
}

/// The event at `position`.
pub async fn event_at(store: &EventStore, position: i64) -> Result<Option<EventRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM events WHERE position = $1");
    let r: Option<EventTuple> = store.fetch_optional(&sql, &[position.into()]).await?;
    r.map(row).transpose()
}

/// A tenant the log names, with its event count and last position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTenant {
    pub tenant_id: String,
    pub events: i64,
    pub last_position: i64,
}

/// Every tenant the log names.
pub async fn log_tenants(store: &EventStore) -> Result<Vec<LogTenant>, StoreError> {
    let rows: Vec<(String, i64, i64)> = store
        .fetch_all(
            "SELECT tenant_id, count(*), max(position) FROM events GROUP BY tenant_id \
             ORDER BY tenant_id",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| LogTenant {
            tenant_id: r.0,
            events: r.1,
            last_position: r.2,
        })
        .collect())
}
