//! `join_tokens` and `join_token_uses`: a token's state and its spent uses, from the token stream's
//! events.

use std::collections::HashMap;

use events::schema::{JoinTokenCreated, JoinTokenRevoked, JoinTokenUsed};
use events::store::{LogTx, SqlValue, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{bulk, opt_int, opt_text, text_or_null};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `join_tokens` and `join_token_uses`.
pub struct JoinTokens;

const JOIN_TOKENS_TABLES: &[TableSpec] = &[
    TableSpec {
        name: "join_tokens",
        columns: &[
            "token_id",
            "tenant_id",
            "site_id",
            "pool_id",
            "role",
            "secret_sha256",
            "uses_total",
            "uses_left",
            "expires_at_us",
            "expect_product_uuid",
            "expect_mac",
            "allow_reclaim",
            "reclaim_node_id",
            "for_node_id",
            "require_approval",
            "boot_entry_id",
            "created_at_us",
            "revoked_at_us",
            "revoke_reason",
            "version",
            "position",
        ],
        order_by: "token_id",
    },
    TableSpec {
        name: "join_token_uses",
        columns: &[
            "token_id",
            "use_number",
            "node_id",
            "used_at_us",
            "position",
        ],
        order_by: "token_id, use_number",
    },
];

impl Projection for JoinTokens {
    fn name(&self) -> &'static str {
        "join_tokens"
    }
    fn tables(&self) -> &'static [TableSpec] {
        JOIN_TOKENS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            JoinTokenCreated::EVENT_TYPE,
            JoinTokenRevoked::EVENT_TYPE,
            JoinTokenUsed::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            // A run of events becomes three deferred writes (per BULK_ROWS rows): the tokens
            // created in it (with every later change of theirs folded in), their uses, and one
            // update per older token carrying its last state. Each token's row ends as the events in order
            // would leave it.
            let Folded {
                created,
                uses,
                updates,
            } = fold(events)?;
            let rows = created.into_iter().map(created_row).collect();
            bulk(
                tx,
                "join_tokens",
                "INSERT INTO join_tokens (token_id, tenant_id, site_id, pool_id, role, \
                 secret_sha256, uses_total, uses_left, expires_at_us, expect_product_uuid, \
                 expect_mac, allow_reclaim, reclaim_node_id, for_node_id, require_approval, \
                 boot_entry_id, created_at_us, revoked_at_us, revoke_reason, version, position) VALUES ",
                "",
                rows,
                None,
            )
            .await?;
            let rows: Vec<Vec<SqlValue>> = updates.into_iter().map(update_row).collect();
            // A join's token use and the token's new state go out, on Postgres, in the
            // statement that carries the join's other projection writes (deferred writes).
            let uses_table = &JOIN_TOKENS_TABLES[1];
            tx.insert_rows(uses_table.name, uses_table.columns, uses)
                .await?;
            bulk(
                tx,
                "join_tokens",
                TOKEN_UPDATE_HEAD,
                TOKEN_UPDATE_TAIL,
                rows,
                None,
            )
            .await?;
            Ok(())
        })
    }
}

/// A run of events folded: the tokens created in it (with their later changes), their uses'
/// rows, and the last state of each older token the run changed.
struct Folded {
    created: Vec<NewTokenRow>,
    uses: Vec<Vec<SqlValue>>,
    updates: Vec<(String, TokenUpdate)>,
}

/// Folds a run of the token stream's events, in order.
fn fold(events: &[&RecordedEvent]) -> Result<Folded, ProjectionError> {
    let mut created: Vec<NewTokenRow> = Vec::new();
    let mut uses: Vec<Vec<SqlValue>> = Vec::new();
    let mut created_at: HashMap<String, usize> = HashMap::new();
    let mut updates: Vec<(String, TokenUpdate)> = Vec::new();
    let mut update_at: HashMap<String, usize> = HashMap::new();
    for e in events {
        match e.event_type.as_str() {
            JoinTokenCreated::EVENT_TYPE => {
                let p: JoinTokenCreated = e.decode()?;
                created_at.insert(p.token_id.clone(), created.len());
                created.push(NewTokenRow {
                    uses_left: i64::from(p.uses),
                    created_at_us: e.occurred_at_us,
                    revoked: None,
                    version: e.stream_version,
                    position: e.position,
                    p,
                });
            }
            JoinTokenRevoked::EVENT_TYPE => {
                let p: JoinTokenRevoked = e.decode()?;
                let revoked = Some((e.occurred_at_us, p.reason));
                match created_at
                    .get(&p.token_id)
                    .and_then(|&i| created.get_mut(i))
                {
                    Some(row) => {
                        row.revoked = revoked;
                        row.version = e.stream_version;
                        row.position = e.position;
                    }
                    None => {
                        let u = token_update(&mut updates, &mut update_at, p.token_id);
                        u.revoked = revoked;
                        u.version = e.stream_version;
                        u.position = e.position;
                    }
                }
            }
            JoinTokenUsed::EVENT_TYPE => {
                let p: JoinTokenUsed = e.decode()?;
                uses.push(vec![
                    p.token_id.clone().into(),
                    i64::from(p.use_number).into(),
                    p.node_id.into(),
                    e.occurred_at_us.into(),
                    e.position.into(),
                ]);
                let left = i64::from(p.uses_left);
                match created_at
                    .get(&p.token_id)
                    .and_then(|&i| created.get_mut(i))
                {
                    Some(row) => {
                        row.uses_left = left;
                        row.version = e.stream_version;
                        row.position = e.position;
                    }
                    None => {
                        let u = token_update(&mut updates, &mut update_at, p.token_id);
                        u.uses_left = Some(left);
                        u.version = e.stream_version;
                        u.position = e.position;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(Folded {
        created,
        uses,
        updates,
    })
}

/// The `join_tokens` row of a token created in the run.
fn created_row(r: NewTokenRow) -> Vec<SqlValue> {
    let (revoked_at, reason) = match r.revoked {
        Some((at, reason)) => (Some(at), Some(reason)),
        None => (None, None),
    };
    vec![
        r.p.token_id.into(),
        r.p.tenant_id.into(),
        r.p.site_id.into(),
        r.p.pool_id.into(),
        r.p.role.into(),
        r.p.secret_sha256.into(),
        i64::from(r.p.uses).into(),
        r.uses_left.into(),
        r.p.expires_at_us.into(),
        text_or_null(&r.p.expect_product_uuid),
        text_or_null(&r.p.expect_mac),
        r.p.allow_reclaim.into(),
        text_or_null(&r.p.reclaim_node_id),
        text_or_null(&r.p.for_node_id),
        r.p.require_approval.into(),
        text_or_null(&r.p.boot_entry_id),
        r.created_at_us.into(),
        opt_int(revoked_at),
        opt_text(reason),
        r.version.into(),
        r.position.into(),
    ]
}

/// The values of an older token's update (`TOKEN_UPDATE_HEAD`'s columns).
fn update_row((id, u): (String, TokenUpdate)) -> Vec<SqlValue> {
    let (revoked_at, reason) = match u.revoked {
        Some((at, reason)) => (Some(at), Some(reason)),
        None => (None, None),
    };
    vec![
        id.into(),
        opt_int(u.uses_left),
        opt_int(revoked_at),
        opt_text(reason),
        u.version.into(),
        u.position.into(),
    ]
}

const TOKEN_UPDATE_HEAD: &str =
    "WITH v (token_id, uses_left, revoked_at_us, revoke_reason, version, position) AS (VALUES ";
const TOKEN_UPDATE_TAIL: &str = ") UPDATE join_tokens SET \
     uses_left = COALESCE(v.uses_left, join_tokens.uses_left), \
     revoked_at_us = COALESCE(v.revoked_at_us, join_tokens.revoked_at_us), \
     revoke_reason = CASE WHEN v.revoked_at_us IS NULL \
     THEN join_tokens.revoke_reason ELSE v.revoke_reason END, \
     version = v.version, position = v.position \
     FROM v WHERE join_tokens.token_id = v.token_id";

/// A token created in the run being applied, with its later changes folded in.
struct NewTokenRow {
    p: JoinTokenCreated,
    uses_left: i64,
    created_at_us: i64,
    revoked: Option<(i64, String)>,
    version: i64,
    position: i64,
}

/// The last state of a token created before the run.
#[derive(Default)]
struct TokenUpdate {
    uses_left: Option<i64>,
    revoked: Option<(i64, String)>,
    version: i64,
    position: i64,
}

fn token_update<'u>(
    updates: &'u mut Vec<(String, TokenUpdate)>,
    index: &mut HashMap<String, usize>,
    token_id: String,
) -> &'u mut TokenUpdate {
    let i = *index.entry(token_id.clone()).or_insert_with(|| {
        updates.push((token_id, TokenUpdate::default()));
        updates.len() - 1
    });
    &mut updates[i].1
}
