//! Opening the Postgres store: one direct connection first, so that a server that cannot be
//! reached fails at once naming where and why, rather than after a pool's acquire timeout.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use super::super::error::TOO_MANY_CONNECTIONS;
use super::super::{Result, StoreError};

/// How long opening the store waits for the server's first answer before it gives up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where `options` points, for a message: `host:port` and the database, never the password.
fn target(options: &PgConnectOptions) -> String {
    let host = options.get_host();
    let at = if host.starts_with('/') {
        format!("{host} (socket, port {})", options.get_port())
    } else {
        format!("{host}:{}", options.get_port())
    };
    match options.get_database() {
        Some(db) => format!("{at}, database {db}"),
        None => at,
    }
}

/// One direct connection before the pool is built: a server that cannot be reached fails
/// within [`CONNECT_TIMEOUT`] naming the host and the real error ("connection refused", a bad
/// password, a missing database), where the pool would retry until its acquire timeout and
/// then say only that it timed out. A server with no free connection is told apart: its URL is
/// right ([`StoreError::NoFreeConnections`]).
pub(super) async fn probe(options: &PgConnectOptions) -> Result<()> {
    use sqlx::{ConnectOptions, Connection};
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await;
    match attempt {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(sqlx::Error::Database(db)))
            if db.code().as_deref() == Some(TOO_MANY_CONNECTIONS) =>
        {
            Err(StoreError::NoFreeConnections {
                target: format!("at {} ", target(options)),
                detail: db.message().to_owned(),
            })
        }
        Ok(Err(e)) => Err(StoreError::Unreachable {
            target: target(options),
            why: e.to_string(),
        }),
        Err(_) => Err(StoreError::Unreachable {
            target: target(options),
            why: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }),
    }
}
