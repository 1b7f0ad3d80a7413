//! SQL migrations for both log-store backends, embedded at build time.
//!
//! `postgres/` and `sqlite/` hold one numbered file per schema step; both backends move together,
//! step for step. This crate only carries the SQL and the two migrators; it must never hold logic
//! that reads or writes events.
//!
//! The migrators are built here from `include_str!` rather than by sqlx's `migrate!` macro: the
//! macro is the only reason the workspace would enable sqlx's proc macros, and those compile
//! sqlx's Postgres and SQLite drivers (and SQLite's C sources) a second time for the compiler's
//! own use (docs/DECISIONS.md, 0075). Each migration is exactly what the macro made of the same
//! file: the version and the description from the file name (`0002_identity.sql` is version 2,
//! "identity"), the SQL as written, its SHA-384 checksum (`Migration::new`), and no transaction
//! opt-out. A test below compares each with what sqlx's own folder reader makes of the file.

use std::borrow::Cow;
use std::sync::LazyLock;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// One migration file: its name (`NNNN_description.sql`) and its SQL.
type File = (&'static str, &'static str);

/// Migrations for the Postgres backend.
pub static POSTGRES: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES_FILES));

/// Migrations for the SQLite backend (the embedded default).
pub static SQLITE: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE_FILES));

/// The files of both folders, which hold the same names (both backends move step for step), in
/// order, each with its SQL.
macro_rules! both_backends {
    ($($name:literal),+ $(,)?) => {
        const POSTGRES_FILES: &[File] = &[$(($name, include_str!(concat!("../postgres/", $name)))),+];
        const SQLITE_FILES: &[File] = &[$(($name, include_str!(concat!("../sqlite/", $name)))),+];
    };
}

both_backends!(
    "0001_events.sql",
    "0002_identity.sql",
    "0003_audit.sql",
    "0004_quorum.sql",
    "0005_quorum_scope_nodes.sql",
    "0006_no_stream_rows.sql",
    "0007_attestation.sql",
    "0008_tpm.sql",
    "0009_sites.sql",
    "0010_cloud_accounts.sql",
    "0011_cert_allowed_kinds.sql",
    "0012_commands.sql",
    "0013_trust_report_approver_set.sql",
    "0014_operator_certs.sql",
    "0015_event_actor.sql",
    "0016_attestor_entries.sql",
    "0017_node_join_csr.sql",
    "0018_tenants.sql",
    "0019_node_claims.sql",
    "0020_ssh_certificates.sql",
    "0021_oidc_keys.sql",
    "0022_node_names.sql",
);

fn migrator(files: &'static [File]) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            files
                .iter()
                .map(|&(name, sql)| migration(name, sql))
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// What sqlx's folder reader makes of one file: `NNNN_words_here.sql` is version NNNN with the
/// description "words here"; SQL starting `-- no-transaction` runs outside a transaction.
fn migration(name: &'static str, sql: &'static str) -> Migration {
    let (version, rest) = name
        .split_once('_')
        .expect("a migration file is named NNNN_description.sql");
    let version: i64 = version
        .parse()
        .expect("a migration file name starts with its version");
    let description = rest
        .strip_suffix(".sql")
        .expect("a migration file ends in .sql")
        .replace('_', " ");
    Migration::new(
        version,
        Cow::Owned(description),
        MigrationType::Simple,
        Cow::Borrowed(sql),
        sql.starts_with("-- no-transaction"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn folder(dir: &str) -> Vec<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&path)
            .expect("the migrations folder")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".sql"))
            .collect();
        names.sort();
        names
    }

    fn listed(files: &[File]) -> Vec<String> {
        files.iter().map(|(n, _)| n.to_string()).collect()
    }

    #[test]
    fn every_file_of_each_folder_is_listed_in_order() {
        assert_eq!(listed(POSTGRES_FILES), folder("postgres"));
        assert_eq!(listed(SQLITE_FILES), folder("sqlite"));
    }

    /// What sqlx's own folder reader (the one its `migrate!` macro used) makes of a folder.
    fn read_by_sqlx(dir: &str) -> Migrator {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(Migrator::new(path))
            .expect("sqlx reads the folder")
    }

    #[test]
    fn each_migration_is_what_sqlx_reads_from_its_file() {
        for (ours, dir) in [(&*POSTGRES, "postgres"), (&*SQLITE, "sqlite")] {
            let theirs = read_by_sqlx(dir);
            assert_eq!(ours.migrations.len(), theirs.migrations.len(), "{dir}");
            for (a, b) in ours.migrations.iter().zip(theirs.migrations.iter()) {
                assert_eq!(a.version, b.version, "{dir}");
                assert_eq!(a.description, b.description, "{dir} {}", b.version);
                assert_eq!(a.migration_type, b.migration_type, "{dir} {}", b.version);
                assert_eq!(a.sql, b.sql, "{dir} {}", b.version);
                // The checksum sqlx records in _sqlx_migrations and validates on every start.
                assert_eq!(a.checksum, b.checksum, "{dir} {}", b.version);
                assert_eq!(a.no_tx, b.no_tx, "{dir} {}", b.version);
            }
            assert_eq!(ours.ignore_missing, theirs.ignore_missing);
            assert_eq!(ours.locking, theirs.locking);
        }
        assert_eq!(POSTGRES.migrations[1].description, "identity");
        assert_eq!(
            SQLITE.migrations[12].description,
            "trust report approver set"
        );
    }
}
