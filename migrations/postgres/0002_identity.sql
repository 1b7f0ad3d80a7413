-- Identity projections (built only from events; every row records the position it reflects)
-- and the refusal-suppression buffer. Times are microseconds since the Unix epoch.

CREATE TABLE join_tokens (
    token_id            TEXT    PRIMARY KEY,
    tenant_id           TEXT    NOT NULL,
    site_id             TEXT    NOT NULL,
    pool_id             TEXT    NOT NULL,
    role                TEXT    NOT NULL,
    secret_sha256       BYTEA   NOT NULL CHECK (length(secret_sha256) = 32),
    uses_total          BIGINT  NOT NULL,
    uses_left           BIGINT  NOT NULL CHECK (uses_left >= 0),
    expires_at_us       BIGINT  NOT NULL,
    expect_product_uuid TEXT,
    expect_mac          TEXT,
    allow_reclaim       BOOLEAN NOT NULL,
    created_at_us       BIGINT  NOT NULL,
    revoked_at_us       BIGINT,
    revoke_reason       TEXT,
    version             BIGINT  NOT NULL,
    position            BIGINT  NOT NULL,
    CONSTRAINT join_tokens_secret_key UNIQUE (secret_sha256)
);
CREATE INDEX join_tokens_tenant ON join_tokens (tenant_id, token_id);

-- One row per use: the unique key is what spends a single-use token once under races.
CREATE TABLE join_token_uses (
    token_id    TEXT   NOT NULL,
    use_number  BIGINT NOT NULL,
    node_id     TEXT   NOT NULL,
    used_at_us  BIGINT NOT NULL,
    position    BIGINT NOT NULL,
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
    identity_generation BIGINT NOT NULL,
    attestor            TEXT   NOT NULL,
    node_key            TEXT   NOT NULL,
    token_id            TEXT   NOT NULL,
    hardware_key_sha256 BYTEA,
    product_uuid_sha256 BYTEA,
    macs_sha256         BYTEA,
    joined_at_us        BIGINT NOT NULL,
    updated_at_us       BIGINT NOT NULL,
    version             BIGINT NOT NULL,
    position            BIGINT NOT NULL
);
CREATE INDEX nodes_tenant ON nodes (tenant_id, node_id);
-- A trusted hardware key admits one active node.
CREATE UNIQUE INDEX nodes_hardware_key ON nodes (hardware_key_sha256)
    WHERE status = 'active' AND hardware_key_sha256 IS NOT NULL;

CREATE TABLE node_certs (
    serial              TEXT   PRIMARY KEY,
    node_id             TEXT   NOT NULL,
    identity_generation BIGINT NOT NULL,
    der                 BYTEA  NOT NULL,
    not_before_us       BIGINT NOT NULL,
    not_after_us        BIGINT NOT NULL,
    revoked_at_us       BIGINT,
    revoke_reason       TEXT,
    issued_position     BIGINT NOT NULL,
    revoked_position    BIGINT
);
CREATE INDEX node_certs_node ON node_certs (node_id, serial);
CREATE INDEX node_certs_revoked ON node_certs (revoked_at_us) WHERE revoked_at_us IS NOT NULL;

CREATE TABLE attestation_uses (
    attestor      TEXT   NOT NULL,
    subject       BYTEA  NOT NULL CHECK (length(subject) = 32),
    node_id       TEXT,
    used_at_us    BIGINT NOT NULL,
    expires_at_us BIGINT,
    position      BIGINT NOT NULL,
    PRIMARY KEY (attestor, subject)
);
CREATE INDEX attestation_uses_expiry ON attestation_uses (expires_at_us, attestor, subject)
    WHERE expires_at_us IS NOT NULL;

-- security.*.refused counts per minute window; `recorded` events and `suppressed` ones.
CREATE TABLE refusal_counters (
    kind            TEXT   NOT NULL,
    refusal         TEXT   NOT NULL,
    window_start_us BIGINT NOT NULL,
    recorded        BIGINT NOT NULL,
    suppressed      BIGINT NOT NULL,
    position        BIGINT NOT NULL,
    PRIMARY KEY (kind, refusal, window_start_us)
);

-- Not a projection: refusals over the rate bound waiting to be written as one
-- security.refusals.suppressed event per (kind, refusal, window, tenant). Emptied by the flush.
CREATE TABLE refusal_suppressed_pending (
    kind            TEXT   NOT NULL,
    refusal         TEXT   NOT NULL,
    window_start_us BIGINT NOT NULL,
    tenant_id       TEXT   NOT NULL,
    count           BIGINT NOT NULL,
    PRIMARY KEY (kind, refusal, window_start_us, tenant_id)
);
