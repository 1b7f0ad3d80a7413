//! Reading the Postgres errors an append can meet: a connection that died while idle, a unique
//! violation on either key of the log, and the stream a version race collided on.

/// True when `err` says the connection was dead before anything ran on it: the socket is gone,
/// or the server had ended the session (SQLSTATE class 57P: operator intervention, as sent by
/// `pg_terminate_backend`, a shutdown or a restart).
pub(super) fn is_dead_connection(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c.starts_with("57P")),
        _ => false,
    }
}

/// True when `err` is a unique violation on either unique key of the log.
pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.code().as_deref() == Some("23505")
                && matches!(
                    db.constraint(),
                    Some("events_stream_version_key" | "events_event_id_key")
                )
        }
        _ => false,
    }
}

/// The `(stream, version)` a stream-version race collided on, read from the unique violation's
/// detail (`Key (stream_id, stream_version)=(token/t, 2) already exists.`): the stream that lost,
/// named without a second connection.
pub(super) fn collided_key(err: &sqlx::Error) -> Option<(String, u64)> {
    let sqlx::Error::Database(db) = err else {
        return None;
    };
    let detail = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?
        .detail()?;
    let key = detail.split_once(")=(")?.1;
    let key = key.rsplit_once(") already exists")?.0;
    let (stream, version) = key.rsplit_once(", ")?;
    Some((stream.to_owned(), version.parse().ok()?))
}

/// True when an append lost a race for its stream versions: the unique `(stream_id,
/// stream_version)` key refused its insert after the winner committed.
pub(super) fn is_stream_version_race(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.constraint() == Some("events_stream_version_key"))
}
