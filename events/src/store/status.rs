//! What `bcctl status` and `bcctl migrate` report about a store: its schema version (the last
//! migration applied), how many events it holds and its head position; and telling a store that
//! was never migrated from other failures.

use super::{EventStore, LogStore, Result, StoreError};

/// A store's schema and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreStatus {
    /// The highest migration version applied successfully (0: none).
    pub schema_version: i64,
    pub events: i64,
    pub head_position: i64,
}

impl EventStore {
    /// The store's schema version, event count and head. On a store that was never migrated
    /// this fails with an error for which [`StoreError::is_missing_table`] holds.
    pub async fn status(&self) -> Result<StoreStatus> {
        let version: Option<(Option<i64>,)> = self
            .fetch_optional(
                "SELECT max(version) FROM _sqlx_migrations WHERE success",
                &[],
            )
            .await?;
        let events: Option<(i64,)> = self
            .fetch_optional("SELECT count(*) FROM events", &[])
            .await?;
        Ok(StoreStatus {
            schema_version: version.and_then(|(v,)| v).unwrap_or(0),
            events: events.map_or(0, |(n,)| n),
            head_position: self.head_position().await?,
        })
    }
}

impl StoreError {
    /// True when a statement named a table the database does not have (Postgres `42P01`,
    /// SQLite "no such table"): the store has not been migrated.
    pub fn is_missing_table(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => {
                db.code().as_deref() == Some("42P01") || db.message().contains("no such table")
            }
            _ => false,
        }
    }
}
