//! SQL migrations for both log-store backends, embedded at build time.
//!
//! `postgres/` and `sqlite/` hold one numbered file per schema step; both backends move together,
//! step for step. This crate only carries the SQL and the two migrators; it must never hold logic
//! that reads or writes events.

use sqlx::migrate::Migrator;

/// Migrations for the Postgres backend.
pub static POSTGRES: Migrator = sqlx::migrate!("./postgres");

/// Migrations for the SQLite backend (the embedded default).
pub static SQLITE: Migrator = sqlx::migrate!("./sqlite");
