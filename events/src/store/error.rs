//! What can go wrong in the store, as one typed error: a wrong expected version is always
//! [`StoreError::Conflict`], never a generic database error.

use super::ExpectedVersion;

/// Everything that can go wrong in the store. A wrong expected version is always
/// [`StoreError::Conflict`], never a generic database error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "stream {stream} is at {actual}, the append expected {expected}: read it again and retry"
    )]
    Conflict {
        stream: String,
        expected: ExpectedVersion,
        /// The version the stream is at (0 when it does not exist). On Postgres, when the
        /// append lost a race and no second connection was free within 100 ms to read it, a
        /// lower bound: the version it collided with.
        actual: u64,
    },
    #[error("event id {event_id} is already in the log with different content or in another stream; event ids must be unique")]
    DuplicateEventId { event_id: String },
    #[error("an append needs at least one event")]
    EmptyAppend,
    #[error("unsupported database URL {0:?}: use postgres://... or sqlite://PATH")]
    UnsupportedUrl(String),
    #[error("read_database_url {0:?} names a read replica, which needs a Postgres primary store and a postgres:// URL (SQLite has no replicas)")]
    ReplicaNeedsPostgres(String),
    #[error("the WAL position {0:?} the server reported is not an LSN")]
    BadLsn(String),
    #[error("the snapshot {0:?} the standby reported is not xmin:xmax")]
    BadSnapshot(String),
    #[error(
        "the standby sees transactions {xmin}..{xmax} as possibly in progress, too many to tail          exactly: a transaction held open on the primary holds the replica back; end it          (pg_stat_activity on the primary, oldest xact_start)"
    )]
    ReplicaWindowTooWide { xmin: u64, xmax: u64 },
    #[error("tail cursor {cursor:?} is malformed: {why}")]
    BadCursor { cursor: String, why: &'static str },
    #[error("tail cursor is for the {cursor} backend, this store is {store}")]
    CursorBackend {
        cursor: &'static str,
        store: &'static str,
    },
    #[error("writing {table}: {changed} rows changed where {expected} should have: {meaning}")]
    UnexpectedRowCount {
        table: String,
        expected: u64,
        changed: u64,
        meaning: String,
    },
    #[error("stored event at position {position} is malformed: {why}")]
    Corrupt { position: i64, why: String },
    #[error("bulk insert into {table}: {why}; split the rows or the value")]
    TooLarge { table: String, why: String },
    #[error("{op} is not possible on a transaction that only records projection writes (a projection that reads must not declare only_writes)")]
    RecordingOnly { op: &'static str },
    #[error("applying migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The filesystem under the database is full (SQLite `SQLITE_FULL`, Postgres `53100`). The
    /// database rolled the statement's transaction back: nothing of it is in the store.
    #[error(
        "the disk holding the {backend} store is full ({detail}): this transaction was rolled \
         back and nothing of it was written; free space on that filesystem (for SQLite, where the \
         database file and its -wal file live), then retry"
    )]
    DiskFull {
        backend: &'static str,
        detail: String,
    },
    /// The server could not be reached or refused the connection, told when the store is opened.
    #[error("cannot connect to the store at {target}: {why}; check that the server is running and reachable there and that the URL's host, port, user, password and database are right")]
    Unreachable { target: String, why: String },
    /// The Postgres server refused a connection because it has none free (SQLSTATE `53300`:
    /// its `max_connections`, the slots it reserves for superusers, or a role's or database's
    /// connection limit), at the store's opening or when a pool opened one more.
    #[error("the Postgres server {target}has no free connections ({detail}): each process of the control plane opens up to its pool size (32 by default, docs/INSTALL.md \"Postgres\"); raise max_connections on the server (or the role's or database's CONNECTION LIMIT), or run fewer processes, then retry")]
    NoFreeConnections { target: String, detail: String },
    /// The SQLite file could not be opened (or created), told when the store is opened.
    #[error("cannot open the SQLite store {path}: {why}; check that its directory exists and that this user may read and write there")]
    SqliteOpen { path: String, why: String },
    #[error("database error: {0}")]
    Database(sqlx::Error),
}

/// Postgres's SQLSTATE for a connection refused for want of a free one (`too_many_connections`).
pub(crate) const TOO_MANY_CONNECTIONS: &str = "53300";

impl From<sqlx::Error> for StoreError {
    /// Every database error, with a full disk told apart ([`StoreError::DiskFull`]).
    fn from(err: sqlx::Error) -> StoreError {
        if let sqlx::Error::Database(db) = &err {
            let code = db.code();
            let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
            let backend = match code.as_deref() {
                // SQLITE_FULL (an extended code keeps the primary code in its low byte).
                Some(c) if sqlite && c.parse::<i32>().is_ok_and(|n| n & 0xff == 13) => {
                    Some("SQLite")
                }
                Some("53100") if !sqlite => Some("Postgres"),
                _ => None,
            };
            if let Some(backend) = backend {
                return StoreError::DiskFull {
                    backend,
                    detail: db.message().to_owned(),
                };
            }
            if !sqlite && code.as_deref() == Some(TOO_MANY_CONNECTIONS) {
                return StoreError::NoFreeConnections {
                    target: String::new(),
                    detail: db.message().to_owned(),
                };
            }
        }
        StoreError::Database(err)
    }
}

impl StoreError {
    /// True for the expected-version conflict the command layer retries from a fresh read.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True when the database refused a write for breaking a unique key (a projection's race
    /// guard: a token use or a renew proof spent by a concurrent command).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db)) if db.is_unique_violation())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Maps a unique violation on `events.event_id` to the typed error, other errors through.
pub(crate) fn map_append_error(err: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &err {
        if db.constraint() == Some("events_event_id_key") {
            return StoreError::DuplicateEventId {
                event_id: "(one of this batch's ids)".into(),
            };
        }
    }
    StoreError::from(err)
}
