-- Quorum projections (issue 6): the published trust bundle and its history, node trust reports,
-- destructive batches with their scope (each leaf's proof) and approvals. Built only from events;
-- every row records the log position it reflects.

CREATE TABLE trust_bundle_state (
    id                      INTEGER PRIMARY KEY CHECK (id = 1),
    version                 BIGINT NOT NULL,
    digest                  BYTEA NOT NULL,
    -- protobuf TrustBundleContent, as the last trust.bundle.published event carried it
    content                 BYTEA NOT NULL,
    roots_sha256            TEXT NOT NULL,
    active_root_sha256      BYTEA NOT NULL,
    -- none | added | switched
    rotation_stage          TEXT NOT NULL,
    rotation_root_sha256    BYTEA,
    switched_at_us          BIGINT,
    approver_keys           TEXT NOT NULL,
    approver_threshold      BIGINT NOT NULL,
    quorum_tiers            TEXT NOT NULL,
    unbatched_per_hour      BIGINT NOT NULL,
    approver_set_sha256     BYTEA,
    approver_set_epoch      BIGINT NOT NULL,
    approver_set_signatures BIGINT NOT NULL,
    floor                   BIGINT NOT NULL,
    stream_version          BIGINT NOT NULL,
    published_at_us         BIGINT NOT NULL,
    position                BIGINT NOT NULL
);

CREATE TABLE trust_bundle_history (
    version          BIGINT PRIMARY KEY,
    digest           BYTEA NOT NULL,
    previous_version BIGINT NOT NULL,
    cause            TEXT NOT NULL,
    published_at_us  BIGINT NOT NULL,
    position         BIGINT NOT NULL
);
CREATE INDEX trust_bundle_history_digest ON trust_bundle_history (digest, version);

CREATE TABLE node_trust_reports (
    node_id       TEXT PRIMARY KEY,
    trust_version BIGINT NOT NULL,
    connected     BOOLEAN NOT NULL,
    last_seen_us  BIGINT NOT NULL,
    position      BIGINT NOT NULL
);

CREATE TABLE command_batches (
    batch_id           BYTEA PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    caller             TEXT NOT NULL,
    reason             TEXT NOT NULL,
    request_digest     BYTEA NOT NULL,
    scope_root         BYTEA NOT NULL,
    scope_size         BIGINT NOT NULL,
    not_after_us       BIGINT NOT NULL,
    required_approvals BIGINT NOT NULL,
    approvals_held     BIGINT NOT NULL,
    approver_set_epoch BIGINT NOT NULL,
    -- pending | approved | expired | cancelled
    status             TEXT NOT NULL,
    created_at_us      BIGINT NOT NULL,
    status_at_us       BIGINT NOT NULL,
    stream_version     BIGINT NOT NULL,
    position           BIGINT NOT NULL
);
CREATE INDEX command_batches_pending ON command_batches (status, not_after_us);

CREATE TABLE command_batch_scope (
    batch_id         BYTEA NOT NULL,
    leaf_index       BIGINT NOT NULL,
    leaf_hash        BYTEA NOT NULL,
    subject          TEXT NOT NULL,
    kind             TEXT NOT NULL,
    payload_sha256   BYTEA,
    payload_type_url TEXT,
    payload_value    BYTEA,
    -- the sibling hashes of the leaf's proof, bottom-up, 32 bytes each
    proof            BYTEA NOT NULL,
    position         BIGINT NOT NULL,
    PRIMARY KEY (batch_id, leaf_index)
);
CREATE UNIQUE INDEX command_batch_scope_leaf ON command_batch_scope (batch_id, leaf_hash);

CREATE TABLE command_batch_approvals (
    batch_id       BYTEA NOT NULL,
    kid            BYTEA NOT NULL,
    sig            BYTEA NOT NULL,
    recorded_at_us BIGINT NOT NULL,
    position       BIGINT NOT NULL,
    PRIMARY KEY (batch_id, kid)
);
