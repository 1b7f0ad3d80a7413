-- Quorum projections (issue 6): the published trust bundle and its history, node trust reports,
-- destructive batches with their scope (each leaf's proof) and approvals. Built only from events;
-- every row records the log position it reflects.

CREATE TABLE trust_bundle_state (
    id                      INTEGER PRIMARY KEY CHECK (id = 1),
    version                 INTEGER NOT NULL,
    digest                  BLOB NOT NULL,
    -- protobuf TrustBundleContent, as the last trust.bundle.published event carried it
    content                 BLOB NOT NULL,
    roots_sha256            TEXT NOT NULL,
    active_root_sha256      BLOB NOT NULL,
    -- none | added | switched
    rotation_stage          TEXT NOT NULL,
    rotation_root_sha256    BLOB,
    switched_at_us          INTEGER,
    approver_keys           TEXT NOT NULL,
    approver_threshold      INTEGER NOT NULL,
    quorum_tiers            TEXT NOT NULL,
    unbatched_per_hour      INTEGER NOT NULL,
    approver_set_sha256     BLOB,
    approver_set_epoch      INTEGER NOT NULL,
    approver_set_signatures INTEGER NOT NULL,
    floor                   INTEGER NOT NULL,
    stream_version          INTEGER NOT NULL,
    published_at_us         INTEGER NOT NULL,
    position                INTEGER NOT NULL
);

CREATE TABLE trust_bundle_history (
    version          INTEGER PRIMARY KEY,
    digest           BLOB NOT NULL,
    previous_version INTEGER NOT NULL,
    cause            TEXT NOT NULL,
    published_at_us  INTEGER NOT NULL,
    position         INTEGER NOT NULL
);
CREATE INDEX trust_bundle_history_digest ON trust_bundle_history (digest, version);

CREATE TABLE node_trust_reports (
    node_id       TEXT PRIMARY KEY,
    trust_version INTEGER NOT NULL,
    connected     INTEGER NOT NULL,
    last_seen_us  INTEGER NOT NULL,
    position      INTEGER NOT NULL
);

CREATE TABLE command_batches (
    batch_id           BLOB PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    caller             TEXT NOT NULL,
    reason             TEXT NOT NULL,
    request_digest     BLOB NOT NULL,
    scope_root         BLOB NOT NULL,
    scope_size         INTEGER NOT NULL,
    not_after_us       INTEGER NOT NULL,
    required_approvals INTEGER NOT NULL,
    approvals_held     INTEGER NOT NULL,
    approver_set_epoch INTEGER NOT NULL,
    -- pending | approved | expired | cancelled
    status             TEXT NOT NULL,
    created_at_us      INTEGER NOT NULL,
    status_at_us       INTEGER NOT NULL,
    stream_version     INTEGER NOT NULL,
    position           INTEGER NOT NULL
);
CREATE INDEX command_batches_pending ON command_batches (status, not_after_us);

CREATE TABLE command_batch_scope (
    batch_id         BLOB NOT NULL,
    leaf_index       INTEGER NOT NULL,
    leaf_hash        BLOB NOT NULL,
    subject          TEXT NOT NULL,
    kind             TEXT NOT NULL,
    payload_sha256   BLOB,
    payload_type_url TEXT,
    payload_value    BLOB,
    -- the sibling hashes of the leaf's proof, bottom-up, 32 bytes each
    proof            BLOB NOT NULL,
    position         INTEGER NOT NULL,
    PRIMARY KEY (batch_id, leaf_index)
);
CREATE UNIQUE INDEX command_batch_scope_leaf ON command_batch_scope (batch_id, leaf_hash);

CREATE TABLE command_batch_approvals (
    batch_id       BLOB NOT NULL,
    kid            BLOB NOT NULL,
    sig            BLOB NOT NULL,
    recorded_at_us INTEGER NOT NULL,
    position       INTEGER NOT NULL,
    PRIMARY KEY (batch_id, kid)
);
