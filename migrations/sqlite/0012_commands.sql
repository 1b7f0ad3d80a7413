-- Issue 21, the command queue: one row per command (its signed body, signature and worker
-- certificate exactly as enqueued, the scope leaf it uses, dispatches and the node's answer),
-- and one row per worker certificate. Built only from `command.*` events; every row records the
-- position it reflects.
--
-- status: held (waits for its batch's approval: a held row whose batch reads `approved` in
-- command_batches is runnable, joined at read time), queued, dispatched, succeeded, failed,
-- rejected, cancelled. ready_position: the position at which an unheld command became runnable
-- (its enqueue); a held one is released at its batch's `batch.approved` position.

CREATE TABLE commands (
    command_id          TEXT    PRIMARY KEY,
    node_id             TEXT    NOT NULL,
    tenant_id           TEXT    NOT NULL,
    kind                TEXT    NOT NULL,
    destructive         BOOLEAN NOT NULL,
    payload_type_url    TEXT    NOT NULL,
    payload             BLOB    NOT NULL,
    batch_id            BLOB,
    leaf_hash           BLOB,
    body                BLOB    NOT NULL,
    signature           BLOB    NOT NULL,
    worker_certificate  BLOB    NOT NULL,
    caller              TEXT    NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN ('held', 'queued', 'dispatched',
                            'succeeded', 'failed', 'rejected', 'cancelled')),
    enqueued_at_us      INTEGER  NOT NULL,
    not_after_us        INTEGER  NOT NULL,
    ready_position      INTEGER,
    dispatch_count      INTEGER  NOT NULL,
    last_dispatch_cause TEXT,
    reject_reason       TEXT,
    exit_code           INTEGER,
    detail              TEXT,
    output_tail         BLOB,
    started_at_ms       INTEGER,
    finished_at_ms      INTEGER,
    answered_at_us      INTEGER,
    cancel_reason       TEXT,
    enqueued_position   INTEGER  NOT NULL,
    stream_version      INTEGER  NOT NULL,
    position            INTEGER  NOT NULL
);
CREATE INDEX commands_node ON commands (node_id, enqueued_position);
CREATE INDEX commands_ready ON commands (ready_position) WHERE ready_position IS NOT NULL;
CREATE INDEX commands_batch ON commands (batch_id, status) WHERE batch_id IS NOT NULL;

CREATE TABLE command_workers (
    certificate_sha256  BLOB    PRIMARY KEY,
    certificate_der     BLOB    NOT NULL,
    root_sha256         BLOB    NOT NULL,
    holder              TEXT    NOT NULL,
    not_before_us       INTEGER  NOT NULL,
    not_after_us        INTEGER  NOT NULL,
    position            INTEGER  NOT NULL
);
