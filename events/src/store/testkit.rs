//! Throwaway stores for tests: each test gets its own database and never sees another's rows.
//!
//! Postgres: a new database `bc_test_<uuid>` on the server named by `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), dropped when the handle is dropped.
//! SQLite: a new file in a temporary directory, removed with it.

use sqlx::Connection;

use super::{EventStore, LogStore, PgLogStore, Result};

/// The server tests use, from `DATABASE_URL`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
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
    /// A fresh, empty Postgres database (not migrated).
    pub async fn postgres() -> Result<TestDb> {
        let admin_url = server_url();
        let name = format!("bc_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await?;
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

    /// Both kinds, for conformance tests that run against each backend.
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
            let admin_url = admin_url.clone();
            let name = name.clone();
            // Drop runs outside any runtime guarantee, so the cleanup gets a runtime of its own.
            let cleanup = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(&mut admin)
                                .await;
                    }
                });
            });
            let _ = cleanup.join();
        }
    }
}

/// `postgres://host/db?x` with the database part replaced.
fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}
