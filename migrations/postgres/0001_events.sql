-- The append-only event log.
--
-- position: global order of insertion (identity). tx_id: the writing transaction's id, which the
-- exact tailer compares against snapshots to follow commit visibility rather than position.
CREATE TABLE events (
    position        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tx_id           xid8   NOT NULL DEFAULT pg_current_xact_id(),
    stream_id       TEXT   NOT NULL,
    stream_version  BIGINT NOT NULL CHECK (stream_version >= 1),
    event_id        BYTEA  NOT NULL CHECK (length(event_id) = 16),
    event_type      TEXT   NOT NULL,
    schema_version  INTEGER NOT NULL,
    tenant_id       TEXT   NOT NULL,
    occurred_at_us  BIGINT NOT NULL,
    payload         BYTEA  NOT NULL,
    payload_sha256  BYTEA  NOT NULL CHECK (length(payload_sha256) = 32),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version),
    CONSTRAINT events_event_id_key UNIQUE (event_id)
);

-- The tailer walks (tx_id, position) from a snapshot's xmin.
CREATE INDEX events_tx_position ON events (tx_id, position);

-- Current version of every stream: the row lock on it is what orders appends to one stream;
-- appends to different streams never wait on each other.
CREATE TABLE event_streams (
    stream_id TEXT   PRIMARY KEY,
    version   BIGINT NOT NULL
);

CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();

CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();
