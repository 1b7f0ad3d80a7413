//! Tampering with a store behind the log's back, for the tests that show the audit trail catches
//! it: each function is one named attack, run on its own connection to the database at `url`,
//! getting past the append-only triggers where it must.
//!
//! Only with the `testkit` feature; nothing in a deployment can call these.

use sqlx::{Connection, PgConnection, SqliteConnection};

use super::{Result, StoreError};

/// Runs `statements` in order on a fresh connection to `url`.
async fn run(url: &str, statements: &[String]) -> Result<()> {
    if is_postgres(url) {
        let mut c = PgConnection::connect(url).await?;
        for s in statements {
            sqlx::query(s).execute(&mut c).await?;
        }
    } else if url.starts_with("sqlite:") {
        let mut c = SqliteConnection::connect(url).await?;
        for s in statements {
            sqlx::query(s).execute(&mut c).await?;
        }
    } else {
        return Err(StoreError::UnsupportedUrl(url.to_string()));
    }
    Ok(())
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The statement that lets `UPDATE` (and, on Postgres, `DELETE`) through on `events`.
fn allow_changing_events(url: &str, op: &str) -> String {
    if is_postgres(url) {
        "ALTER TABLE events DISABLE TRIGGER events_append_only".into()
    } else {
        format!("DROP TRIGGER events_no_{op}")
    }
}

/// Overwrites one byte of the payload of the event at `position` with `X` (the third byte on
/// Postgres, the first on SQLite), leaving its recorded SHA-256 as it was.
pub async fn overwrite_payload_byte(url: &str, position: i64) -> Result<()> {
    let change = if is_postgres(url) {
        "overlay(payload placing '\\x58'::bytea from 3 for 1)"
    } else {
        "X'58' || substr(payload, 2)"
    };
    run(
        url,
        &[
            allow_changing_events(url, "update"),
            format!("UPDATE events SET payload = {change} WHERE position = {position}"),
        ],
    )
    .await
}

/// Deletes the event at `position` from the log (its audit leaf stays).
pub async fn delete_event(url: &str, position: i64) -> Result<()> {
    run(
        url,
        &[
            allow_changing_events(url, "delete"),
            format!("DELETE FROM events WHERE position = {position}"),
        ],
    )
    .await
}

/// Deletes the event at `position` and its audit leaf row.
pub async fn delete_event_and_leaf(url: &str, position: i64) -> Result<()> {
    run(
        url,
        &[
            allow_changing_events(url, "delete"),
            format!("DELETE FROM events WHERE position = {position}"),
            format!("DELETE FROM audit_leaves WHERE position = {position}"),
        ],
    )
    .await
}

/// Swaps the events two audit leaves point at (the leaves at positions `a` and `b`).
pub async fn swap_leaf_positions(url: &str, a: i64, b: i64) -> Result<()> {
    run(
        url,
        &[
            format!("UPDATE audit_leaves SET position = -1 WHERE position = {a}"),
            format!("UPDATE audit_leaves SET position = {a} WHERE position = {b}"),
            format!("UPDATE audit_leaves SET position = {b} WHERE position = -1"),
        ],
    )
    .await
}

/// Rewrites the role recorded for the actor of the event at `position` (which must have one:
/// SQLite's CHECK refuses a role without an id).
pub async fn overwrite_actor_role(url: &str, position: i64, role: &str) -> Result<()> {
    let role = role.replace('\'', "''");
    run(
        url,
        &[
            allow_changing_events(url, "update"),
            format!("UPDATE events SET actor_role = '{role}' WHERE position = {position}"),
        ],
    )
    .await
}

/// (Postgres) Records each event of `rewrites`, `(position, tx id)`, as written by that
/// transaction id, one an earlier transaction of the server would have had: how a test puts a
/// log's transaction ids where it needs them (straddling a power of ten, say) without running
/// that many transactions first. Ids below every snapshot's `xmin` read as committed long ago.
pub async fn rewrite_tx_ids(url: &str, rewrites: &[(i64, u64)]) -> Result<()> {
    if !is_postgres(url) {
        return Err(StoreError::UnsupportedUrl(url.to_string()));
    }
    let mut statements = vec![allow_changing_events(url, "update")];
    statements.extend(rewrites.iter().map(|(position, tx)| {
        format!("UPDATE events SET tx_id = '{tx}'::xid8 WHERE position = {position}")
    }));
    run(url, &statements).await
}
