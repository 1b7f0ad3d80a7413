//! The database's clock (spec 000: token expiry "at compute_now()", the x509pop window "of
//! database time"): the time a decision is judged at on Postgres, read from the server so that
//! every api replica, whatever its own clock says, decides the same request alike.
//!
//! `now()` is the transaction's time (its start): every read inside one transaction sees the
//! same instant, as a `DEFAULT now()` column of its rows would record. SQLite has no clock of
//! its own worth reading: it is one process, whose clock the caller already has, so both reads
//! answer `None` there and the caller keeps its own.

use super::{EventStore, Result, StoreTx};

/// µs since the Unix epoch of the server's `now()`.
const NOW_US: &str = "SELECT (EXTRACT(EPOCH FROM now()) * 1000000)::bigint";

impl StoreTx {
    /// This transaction's time on Postgres, µs since the Unix epoch; `None` on SQLite and for a
    /// recording transaction (no server to ask).
    pub async fn database_now_us(&mut self) -> Result<Option<i64>> {
        match self {
            StoreTx::Postgres(t) => {
                let us: i64 = sqlx::query_scalar(NOW_US).fetch_one(t.connection()).await?;
                Ok(Some(us))
            }
            StoreTx::Sqlite(_) | StoreTx::Recorder(_) => Ok(None),
        }
    }
}

impl EventStore {
    /// The server's time on Postgres, read by one statement outside any transaction, µs since
    /// the Unix epoch; `None` on SQLite.
    pub async fn database_now_us(&self) -> Result<Option<i64>> {
        match self {
            EventStore::Postgres(s) => {
                let us: i64 = sqlx::query_scalar(NOW_US).fetch_one(s.pool()).await?;
                Ok(Some(us))
            }
            EventStore::Sqlite(_) => Ok(None),
        }
    }
}
