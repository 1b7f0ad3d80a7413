//! `bcctl events list [--stream S] [--type T] [--tenant T] [--since POS|RFC3339] [--limit N]`
//! and `bcctl events show POSITION`: browsing the event log, read only, no key opened.
//!
//! Each event is shown with its envelope (position, stream, version, type, schema version,
//! tenant, time as RFC 3339, the actor who caused it when there is one: `actor: {id, role}` in
//! JSON, null without) and its payload as stored: protobuf bytes, printed as base64 with
//! their SHA-256. `show` also decodes a payload of a known event type to JSON (fields by their
//! camelCase JSON names, fields at their default left out as protobuf does, bytes as base64,
//! enums by number), by reflection over the schema's descriptor set. `--since` takes a log position (events after
//! it) or an RFC 3339 time (events at or after it).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use clap::{Args, Subcommand};
use projections::browse::{self, EventFilter, EventRow};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::output::{print_json, rfc3339_us};
use crate::verbs::token::{print_table, IdentityArgs, IdentityCmdError};

#[derive(Subcommand)]
pub enum EventsCommand {
    /// List events, oldest first, filtered.
    List(ListArgs),
    /// Show one event by its log position.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// Only this stream's events (e.g. node/node_...).
    #[arg(long)]
    pub stream: Option<String>,
    /// Only events of this type (e.g. node.joined).
    #[arg(long = "type", value_name = "TYPE")]
    pub event_type: Option<String>,
    /// Only this tenant's events.
    #[arg(long)]
    pub tenant: Option<String>,
    /// A log position (events after it) or an RFC 3339 time (events at or after it).
    #[arg(long, value_name = "POS|RFC3339")]
    pub since: Option<String>,
    /// At most this many events.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// The event's log position.
    pub position: i64,
}

/// An event as printed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub position: i64,
    pub stream_id: String,
    pub stream_version: i64,
    pub event_type: String,
    pub schema_version: i64,
    pub tenant_id: String,
    pub occurred_at: String,
    /// Who caused the event; null for an event nobody decided.
    pub actor: Option<ActorView>,
    pub payload_bytes: usize,
    pub payload_sha256: String,
    /// The protobuf payload, base64.
    pub payload: String,
    /// The payload decoded (`events show` only, for a known event type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoded: Option<serde_json::Value>,
}

/// An event's actor as printed: its id (a SPIFFE ID, or `local:<user>@<host>`) and role.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ActorView {
    pub id: String,
    pub role: String,
}

impl ActorView {
    pub fn of(actor: &events::Actor) -> Self {
        ActorView {
            id: actor.id().to_string(),
            role: actor.role().to_string(),
        }
    }
}

/// An actor in a text table: its id, or `-` for none.
pub fn actor_cell(actor: Option<&ActorView>) -> String {
    actor.map_or_else(|| "-".to_string(), |a| a.id.clone())
}

/// The payload of `event_type` as JSON, when the type is known and the bytes decode.
pub fn decode_payload(event_type: &str, payload: &[u8]) -> Option<serde_json::Value> {
    use prost_reflect::{DescriptorPool, DynamicMessage};
    let rust_name = events::schema::message_of(event_type)?;
    let pool = DescriptorPool::decode(events::schema::FILE_DESCRIPTOR_SET).ok()?;
    // prost turns a message name into UpperCamelCase (NodeCSRUsed -> NodeCsrUsed): compare
    // without case and underscores.
    let norm = |s: &str| s.replace('_', "").to_ascii_lowercase();
    let desc = pool
        .all_messages()
        .find(|m| m.package_name() == "bc.events.v1" && norm(m.name()) == norm(rust_name))?;
    let msg = DynamicMessage::decode(desc, payload).ok()?;
    Some(message_json(&msg))
}

fn message_json(msg: &prost_reflect::DynamicMessage) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (field, value) in msg.fields() {
        out.insert(field.json_name().to_string(), value_json(value));
    }
    serde_json::Value::Object(out)
}

fn value_json(v: &prost_reflect::Value) -> serde_json::Value {
    use prost_reflect::{MapKey, Value};
    use serde_json::json;
    match v {
        Value::Bool(b) => json!(b),
        Value::I32(n) => json!(n),
        Value::I64(n) => json!(n),
        Value::U32(n) => json!(n),
        Value::U64(n) => json!(n),
        Value::F32(n) => json!(n),
        Value::F64(n) => json!(n),
        Value::String(s) => json!(s),
        Value::Bytes(b) => json!(STANDARD.encode(b)),
        Value::EnumNumber(n) => json!(n),
        Value::Message(m) => message_json(m),
        Value::List(items) => serde_json::Value::Array(items.iter().map(value_json).collect()),
        Value::Map(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        MapKey::Bool(b) => b.to_string(),
                        MapKey::I32(n) => n.to_string(),
                        MapKey::I64(n) => n.to_string(),
                        MapKey::U32(n) => n.to_string(),
                        MapKey::U64(n) => n.to_string(),
                        MapKey::String(s) => s.clone(),
                    };
                    (key, value_json(v))
                })
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().collect())
        }
    }
}

fn view(e: &EventRow) -> EventView {
    EventView {
        position: e.position,
        stream_id: e.stream_id.clone(),
        stream_version: e.stream_version,
        event_type: e.event_type.clone(),
        schema_version: e.schema_version,
        tenant_id: e.tenant_id.clone(),
        occurred_at: rfc3339_us(e.occurred_at_us),
        actor: e.actor.as_ref().map(ActorView::of),
        payload_bytes: e.payload.len(),
        payload_sha256: hex::encode(domain::identity::sha256(&e.payload)),
        payload: STANDARD.encode(&e.payload),
        decoded: None,
    }
}

/// `--since`: a position, or an RFC 3339 time in µs since the epoch.
pub fn parse_since(text: &str) -> Result<(Option<i64>, Option<i64>), IdentityCmdError> {
    if let Ok(p) = text.parse::<i64>() {
        if p >= 0 {
            return Ok((Some(p), None));
        }
    }
    let t = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| {
        IdentityCmdError::Invalid(format!(
            "--since {text:?}: expected a log position (a number, 0 or more) or an RFC 3339 time \
             such as 2026-01-31T12:00:00Z"
        ))
    })?;
    let us = i64::try_from(t.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX);
    Ok((None, Some(us)))
}

pub async fn run(cmd: EventsCommand) -> Result<(), IdentityCmdError> {
    match cmd {
        EventsCommand::List(args) => {
            let (after_position, since_us) = match &args.since {
                Some(s) => parse_since(s)?,
                None => (None, None),
            };
            let store = args.common.store().await?;
            let rows = browse::list_events(
                &store,
                &EventFilter {
                    stream: args.stream,
                    event_type: args.event_type,
                    tenant: args.tenant,
                    after_position,
                    since_us,
                    limit: i64::from(args.limit),
                },
            )
            .await?;
            let views: Vec<EventView> = rows.iter().map(view).collect();
            if args.common.json {
                print_json(&views);
            } else {
                let table: Vec<Vec<String>> = views
                    .iter()
                    .map(|v| {
                        vec![
                            v.position.to_string(),
                            v.occurred_at.clone(),
                            v.tenant_id.clone(),
                            v.event_type.clone(),
                            format!("{}@{}", v.stream_id, v.stream_version),
                            actor_cell(v.actor.as_ref()),
                            v.payload_bytes.to_string(),
                        ]
                    })
                    .collect();
                print_table(
                    &[
                        "POSITION", "OCCURRED", "TENANT", "TYPE", "STREAM", "ACTOR", "BYTES",
                    ],
                    &table,
                );
            }
        }
        EventsCommand::Show(args) => {
            let store = args.common.store().await?;
            let row = browse::event_at(&store, args.position)
                .await?
                .ok_or_else(|| {
                    IdentityCmdError::Setup(format!(
                        "no event at position {} (see `bcctl events list`)",
                        args.position
                    ))
                })?;
            let mut v = view(&row);
            v.decoded = decode_payload(&row.event_type, &row.payload);
            if args.common.json {
                print_json(&v);
            } else {
                crate::outln!("position:        {}", v.position);
                crate::outln!(
                    "stream:          {} (version {})",
                    v.stream_id,
                    v.stream_version
                );
                crate::outln!(
                    "type:            {} (schema {})",
                    v.event_type,
                    v.schema_version
                );
                crate::outln!("tenant:          {}", v.tenant_id);
                crate::outln!("occurred:        {}", v.occurred_at);
                match &v.actor {
                    Some(a) => crate::outln!("actor:           {} (role {})", a.id, a.role),
                    None => crate::outln!("actor:           none"),
                }
                crate::outln!("payload sha256:  {}", v.payload_sha256);
                match &v.decoded {
                    Some(d) => {
                        crate::outln!("payload ({} bytes, decoded):", v.payload_bytes);
                        let pretty = serde_json::to_string_pretty(d).unwrap_or_default();
                        for line in pretty.lines() {
                            crate::outln!("  {line}");
                        }
                    }
                    None => {
                        crate::outln!("payload ({} bytes, protobuf, hex):", v.payload_bytes);
                        crate::outln!("  {}", hex::encode(&row.payload));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_position_or_a_time() {
        assert_eq!(parse_since("12").ok(), Some((Some(12), None)));
        assert_eq!(
            parse_since("1970-01-01T00:00:01Z").ok(),
            Some((None, Some(1_000_000)))
        );
        assert!(parse_since("yesterday").is_err());
        assert!(parse_since("-3").is_err());
    }
}
