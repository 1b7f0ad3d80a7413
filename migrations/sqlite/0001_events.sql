-- The append-only event log (embedded backend). One writer at a time, so the position assigned
-- inside the write transaction is also the commit order and serves as the tail cursor.
CREATE TABLE events (
    position        INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_id       TEXT    NOT NULL,
    stream_version  INTEGER NOT NULL CHECK (stream_version >= 1),
    event_id        BLOB    NOT NULL CHECK (length(event_id) = 16),
    event_type      TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    tenant_id       TEXT    NOT NULL,
    occurred_at_us  INTEGER NOT NULL,
    payload         BLOB    NOT NULL,
    payload_sha256  BLOB    NOT NULL CHECK (length(payload_sha256) = 32),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version),
    CONSTRAINT events_event_id_key UNIQUE (event_id)
);

CREATE TABLE event_streams (
    stream_id TEXT    PRIMARY KEY,
    version   INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: UPDATE refused');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: DELETE refused');
END;
