//! Throwaway stores for tests: each test gets its own database and never sees another's rows.
//!
//! Postgres: a new database `bc_test_<unix seconds>_<random>` on the server named by
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`), dropped in the
//! background once the handle is dropped (see [`dropper`]). It is copied from a migrated
//! template (see [`template`]), so it starts with the schema in place;
//! [`TestDb::postgres_unmigrated`] makes an empty one. A process that is killed cannot drop its
//! databases, so the first test database of each process also sweeps the finished ones and
//! those left more than [`STALE_AFTER`] ago by others.
//! SQLite: a new file in a temporary directory, removed with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::Connection;

use super::{EventStore, LogStore, PgLogStore, Result};

pub mod dropper;
pub mod template;
mod threads;
mod url;

pub use url::replace_database;

/// The server tests use, from `DATABASE_URL`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// How old a test database must be before a later test run drops it: far longer than any test
/// or benchmark runs, so a database still in use is never swept.
pub const STALE_AFTER: Duration = Duration::from_secs(6 * 3600);

/// The prefix of every test database's name.
const PREFIX: &str = "bc_test_";

static SWEPT: AtomicBool = AtomicBool::new(false);

/// Seconds since the Unix epoch: the clock test database names carry.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The creation time (unix seconds) in a test database's name, if it has one.
fn created_at(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(PREFIX)?;
    let (secs, random) = rest.split_once('_')?;
    (!random.is_empty()).then_some(())?;
    secs.parse().ok()
}

/// Drops the test databases on the server at `admin_url` that are finished (their handle was
/// dropped, see [`dropper`]), whatever their age, and those whose names say they were created
/// more than `older_than` ago, and returns their names. An unfinished database someone is still
/// connected to is left alone (no `FORCE`), as are databases named otherwise.
pub async fn sweep_stale_databases(admin_url: &str, older_than: Duration) -> Result<Vec<String>> {
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    let found: Vec<(String, bool)> = sqlx::query_as(
        "SELECT datname::text, NOT datallowconn FROM pg_database WHERE starts_with(datname, $1)",
    )
    .bind(PREFIX)
    .fetch_all(&mut admin)
    .await?;
    let cutoff = unix_now().saturating_sub(older_than.as_secs());
    let mut dropped = Vec::new();
    let mut finished = tokio::task::JoinSet::new();
    for (name, is_finished) in found {
        let Some(created) = created_at(&name) else {
            continue;
        };
        // The name comes from the catalogue and matched the pattern of our own names, which are
        // plain identifiers ([a-z0-9_]).
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !plain {
            continue;
        }
        if is_finished {
            let admin_url = admin_url.to_owned();
            finished
                .spawn(async move { dropper::drop_now(&admin_url, &name).await.then_some(name) });
            while finished.len() >= dropper::AT_ONCE {
                dropped.extend(finished.join_next().await.and_then(Result::ok).flatten());
            }
        } else if created < cutoff {
            let gone = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
                .execute(&mut admin)
                .await;
            if gone.is_ok() {
                dropped.push(name);
            }
        }
    }
    while let Some(done) = finished.join_next().await {
        dropped.extend(done.ok().flatten());
    }
    admin.close().await?;
    Ok(dropped)
}

/// A database that exists for one test.
pub struct TestDb {
    url: String,
    kind: Kind,
}

enum Kind {
    Postgres { admin_url: String, name: String },
    Sqlite { _dir: tempfile::TempDir },
}

impl TestDb {
    /// A fresh Postgres database with every migration applied: a copy of the migrated template
    /// (made on first use). [`TestDb::store`] on it finds nothing left to migrate.
    pub async fn postgres() -> Result<TestDb> {
        let admin_url = server_url();
        let template = template::migrated_template(&admin_url).await?;
        TestDb::postgres_from(admin_url, Some(&template)).await
    }

    /// A fresh, empty Postgres database (not migrated), for tests of what happens before the
    /// migrations have run.
    pub async fn postgres_unmigrated() -> Result<TestDb> {
        TestDb::postgres_from(server_url(), None).await
    }

    /// A new test database on the server at `admin_url`, copied from `template` if one is given.
    async fn postgres_from(admin_url: String, template: Option<&str>) -> Result<TestDb> {
        if !SWEPT.swap(true, Ordering::SeqCst) {
            // Best effort: a sweep that fails must not fail the test.
            let _ = sweep_stale_databases(&admin_url, STALE_AFTER).await;
        }
        let name = format!("{PREFIX}{}_{}", unix_now(), uuid::Uuid::new_v4().simple());
        let create = match template {
            Some(template) => format!("CREATE DATABASE {name} TEMPLATE {template}"),
            None => format!("CREATE DATABASE {name}"),
        };
        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
        sqlx::query(&create).execute(&mut admin).await?;
        admin.close().await?;
        let url = replace_database(&admin_url, &name);
        Ok(TestDb {
            url,
            kind: Kind::Postgres { admin_url, name },
        })
    }

    /// A fresh SQLite file (not migrated).
    pub fn sqlite() -> Result<TestDb> {
        let dir = tempfile::tempdir().map_err(sqlx::Error::Io)?;
        let url = format!("sqlite://{}", dir.path().join("events.db").display());
        Ok(TestDb {
            url,
            kind: Kind::Sqlite { _dir: dir },
        })
    }

    /// Both kinds, for conformance tests that run against each backend (the Postgres one
    /// migrated, the SQLite one not yet: [`TestDb::store`] migrates either).
    pub async fn each() -> Result<Vec<TestDb>> {
        Ok(vec![TestDb::postgres().await?, TestDb::sqlite()?])
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.kind, Kind::Postgres { .. })
    }

    /// A migrated store on this database.
    pub async fn store(&self) -> Result<EventStore> {
        let store = EventStore::connect(&self.url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// A migrated Postgres store with a pool of `size` connections.
    pub async fn pg_store(&self, size: u32) -> Result<PgLogStore> {
        let store = PgLogStore::with_pool_size(&self.url, size).await?;
        store.migrate().await?;
        Ok(store)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Kind::Postgres { admin_url, name } = &self.kind {
            dropper::finish(admin_url, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_times_are_read_from_our_names_only() {
        assert_eq!(created_at("bc_test_1700000000_abc123"), Some(1_700_000_000));
        assert_eq!(created_at("bc_test_0123456789abcdef0123456789abcdef"), None);
        assert_eq!(created_at("bc_test_1700000000_"), None);
        assert_eq!(created_at("other_1700000000_abc"), None);
    }
}
