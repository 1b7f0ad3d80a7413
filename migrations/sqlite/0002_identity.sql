-- Identity projections (built only from events; every row records the position it reflects)
-- and the refusal-suppression buffer. Times are microseconds since the Unix epoch.

CREATE TABLE join_tokens (
    token_id            TEXT    PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    site_id             TEXT    NOT NULL,
    pool_id             TEXT    NOT NULL,
    role                TEXT    NOT NULL,
    secret_sha256       BLOB   NOT NULL CHECK (length(secret_sha256) = 32),
    uses_total          INTEGER  NOT NULL,
    uses_left           INTEGER  NOT NULL CHECK (uses_left >= 0),
    expires_at_us       INTEGER  NOT NULL,
    expect_product_uuid TEXT,
    expect_mac          TEXT,
    allow_reclaim       BOOLEAN NOT NULL,
    created_at_us       INTEGER  NOT NULL,
    revoked_at_us       INTEGER,
    revoke_reason       TEXT,
    version             INTEGER  NOT NULL,
    position            INTEGER  NOT NULL,
    CONSTRAINT join_tokens_secret_key UNIQUE (secret_sha256)
);
CREATE INDEX join_tokens_tenant ON join_tokens (tenant_id, token_id);

-- One row per use: the unique key is what spends a single-use token once under races.
CREATE TABLE join_token_uses (
    token_id    TEXT   NOT NULL,
    use_number  INTEGER NOT NULL,
    node_id     TEXT   NOT NULL,
    used_at_us  INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    PRIMARY KEY (token_id, use_number)
);

CREATE TABLE nodes (
    node_id             TEXT   PRIMARY KEY,
    tenant_id           TEXT   NOT NULL,
    site_id             TEXT   NOT NULL,
    pool_id             TEXT   NOT NULL,
    role                TEXT   NOT NULL,
    status              TEXT   NOT NULL CHECK (status IN ('active', 'retired', 'deleted')),
    status_reason       TEXT,
    identity_generation INTEGER NOT NULL,
    attestor            TEXT   NOT NULL,
    node_key            TEXT   NOT NULL,
    token_id            TEXT   NOT NULL,
    hardware_key_sha256 BLOB,
    product_uuid_sha256 BLOB,
    macs_sha256         BLOB,
    joined_at_us        INTEGER NOT NULL,
    updated_at_us       INTEGER NOT NULL,
    version             INTEGER NOT NULL,
    position            INTEGER NOT NULL
);
CREATE INDEX nodes_tenant ON nodes (tenant_id, node_id);
-- A trusted hardware key admits one active node.
CREATE UNIQUE INDEX nodes_hardware_key ON nodes (hardware_key_sha256)
    WHERE status = 'active' AND hardware_key_sha256 IS NOT NULL;

CREATE TABLE node_certs (
    serial              TEXT   PRIMARY KEY,
    node_id             TEXT   NOT NULL,
    identity_generation INTEGER NOT NULL,
    der                 BLOB  NOT NULL,
    not_before_us       INTEGER NOT NULL,
    not_after_us        INTEGER NOT NULL,
    revoked_at_us       INTEGER,
    revoke_reason       TEXT,
    issued_position     INTEGER NOT NULL,
    revoked_position    INTEGER
);
CREATE INDEX node_certs_node ON node_certs (node_id, serial);
CREATE INDEX node_certs_revoked ON node_certs (revoked_at_us) WHERE revoked_at_us IS NOT NULL;

CREATE TABLE attestation_uses (
    attestor      TEXT   NOT NULL,
    subject       BLOB  NOT NULL CHECK (length(subject) = 32),
    node_id       TEXT,
    used_at_us    INTEGER NOT NULL,
    expires_at_us INTEGER,
    position      INTEGER NOT NULL,
    PRIMARY KEY (attestor, subject)
);
CREATE INDEX attestation_uses_expiry ON attestation_uses (expires_at_us, attestor, subject)
    WHERE expires_at_us IS NOT NULL;

-- security.*.refused counts per minute window; `recorded` events and `suppressed` ones.
CREATE TABLE refusal_counters (
    kind            TEXT   NOT NULL,
    refusal         TEXT   NOT NULL,
    window_start_us INTEGER NOT NULL,
    recorded        INTEGER NOT NULL,
    suppressed      INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    PRIMARY KEY (kind, refusal, window_start_us)
);

-- Not a projection: refusals over the rate bound waiting to be written as one
-- security.refusals.suppressed event per (kind, refusal, window, tenant). Emptied by the flush.
CREATE TABLE refusal_suppressed_pending (
    kind            TEXT   NOT NULL,
    refusal         TEXT   NOT NULL,
    window_start_us INTEGER NOT NULL,
    tenant_id       TEXT   NOT NULL,
    count           INTEGER NOT NULL,
    PRIMARY KEY (kind, refusal, window_start_us, tenant_id)
);
