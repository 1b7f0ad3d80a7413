//! The migrated template database that Postgres test databases are copied from.
//!
//! Migrating every test database costs more than most tests do themselves, so test databases are
//! made with `CREATE DATABASE .. TEMPLATE` from a database that is already migrated. There is one
//! template per server and per migration set: its name carries a digest of the Postgres
//! migrations (version, description, checksum of each), so an added or changed migration makes a
//! new template and no template is ever used for another schema. Test processes running at the
//! same time (and other checkouts sharing the server) take turns making it under an advisory
//! lock. A finished template is flagged `IS_TEMPLATE` and takes no connections (nothing can change
//! it, and nothing connected to it can block a copy); one left half-made by a killed process has
//! neither flag, and is dropped and made again.

use sha2::{Digest, Sha256};
use sqlx::Connection;
use tokio::sync::OnceCell;

use super::replace_database;
use crate::store::Result;

/// The prefix of every template's name (test databases are `bc_test_*`: the stale-database
/// sweep never touches a template).
pub const TEMPLATE_PREFIX: &str = "bc_template_";

/// The advisory lock (on the server's admin database) that serialises making a template: the
/// ASCII of "bctmpl".
const LOCK_KEY: i64 = 0x6263_746d_706c;

/// The template made (or found) by this process, and the server it is on.
static MADE: OnceCell<(String, String)> = OnceCell::const_new();

/// The template's name for the migrations compiled into this build: `bc_template_` and the
/// first 16 hex digits of a SHA-256 over every migration's version, description and checksum.
pub fn template_name() -> String {
    let mut digest = Sha256::new();
    for migration in migrations::POSTGRES.iter() {
        digest.update(migration.version.to_be_bytes());
        for part in [migration.description.as_bytes(), &migration.checksum] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
    }
    let digest = digest.finalize();
    format!("{TEMPLATE_PREFIX}{}", hex::encode(&digest[..8]))
}

/// The name of the migrated template on the server at `admin_url`, made first if the server has
/// no finished one. Within one process this asks the server once.
pub async fn migrated_template(admin_url: &str) -> Result<String> {
    let (server, name) = MADE
        .get_or_try_init(|| async {
            let name = ensure(admin_url).await?;
            Ok::<_, crate::store::StoreError>((admin_url.to_owned(), name))
        })
        .await?;
    if server == admin_url {
        Ok(name.clone())
    } else {
        // Another server than the first one asked about in this process: not cached.
        ensure(admin_url).await
    }
}

/// Makes the template on the server at `admin_url` unless a finished one is there.
async fn ensure(admin_url: &str) -> Result<String> {
    let name = template_name();
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    if !is_finished(&mut admin, &name).await? {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(LOCK_KEY)
            .execute(&mut admin)
            .await?;
        let made = make_unless_finished(&mut admin, admin_url, &name).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LOCK_KEY)
            .execute(&mut admin)
            .await;
        made?;
        unlocked?;
    }
    admin.close().await?;
    Ok(name)
}

/// Whether `name` exists and was finished: flagged a template that takes no connections.
async fn is_finished(admin: &mut sqlx::PgConnection, name: &str) -> Result<bool> {
    let flags: Option<(bool, bool)> =
        sqlx::query_as("SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1")
            .bind(name)
            .fetch_optional(&mut *admin)
            .await?;
    Ok(flags == Some((true, false)))
}

/// Under the lock: checks again (another process may have finished it meanwhile), else drops
/// what a killed process left, creates, migrates and closes the template.
async fn make_unless_finished(
    admin: &mut sqlx::PgConnection,
    admin_url: &str,
    name: &str,
) -> Result<()> {
    if is_finished(admin, name).await? {
        return Ok(());
    }
    // `name` is ours: the prefix and hex digits.
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut *admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut *admin)
        .await?;
    let mut template = sqlx::PgConnection::connect(&replace_database(admin_url, name)).await?;
    migrations::POSTGRES.run(&mut template).await?;
    template.close().await?;
    sqlx::query(&format!(
        "ALTER DATABASE {name} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
    ))
    .execute(&mut *admin)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_a_plain_identifier_that_depends_on_the_migrations() {
        let name = template_name();
        assert_eq!(name, template_name());
        assert_eq!(name.len(), TEMPLATE_PREFIX.len() + 16);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    }
}
