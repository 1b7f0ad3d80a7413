-- Step 7, the attestation plane (issue 18): pools, join requests, node bindings; tokens that
-- name the node they reclaim or were minted for; a claimed hardware key loses its power (the
-- unique index that made it one node per claimed key goes: only node_bindings, proved by an
-- attestor, binds).

ALTER TABLE join_tokens ADD COLUMN reclaim_node_id TEXT;
ALTER TABLE join_tokens ADD COLUMN for_node_id TEXT;
ALTER TABLE join_tokens ADD COLUMN require_approval BOOLEAN NOT NULL DEFAULT FALSE;

DROP INDEX nodes_hardware_key;
ALTER TABLE nodes ADD COLUMN node_key_uri TEXT;
ALTER TABLE nodes ADD COLUMN allowed_kinds TEXT;

-- Subjects an attestor proved, bound to a node for good; one node per subject.
CREATE TABLE node_bindings (
    subject     BLOB   PRIMARY KEY CHECK (length(subject) = 32),
    attestor    TEXT   NOT NULL,
    node_id     TEXT   NOT NULL,
    bound_at_us INTEGER NOT NULL,
    position    INTEGER NOT NULL
);
CREATE INDEX node_bindings_node ON node_bindings (node_id, subject);

CREATE TABLE pools (
    pool_id        TEXT   PRIMARY KEY,
    tenant_id      TEXT   NOT NULL,
    description    TEXT   NOT NULL,
    -- The attestor ids, comma-separated in the order given; NULL: any attestor.
    join_attestors TEXT,
    created_at_us  INTEGER NOT NULL,
    updated_at_us  INTEGER NOT NULL,
    version        INTEGER NOT NULL,
    position       INTEGER NOT NULL
);
CREATE INDEX pools_tenant ON pools (tenant_id, pool_id);

CREATE TABLE join_requests (
    request_id          TEXT   PRIMARY KEY,
    tenant_id           TEXT   NOT NULL,
    attestor            TEXT   NOT NULL,
    subject             BLOB   NOT NULL CHECK (length(subject) = 32),
    csr_sha256          BLOB   NOT NULL,
    role                TEXT   NOT NULL,
    site_id             TEXT   NOT NULL,
    pool_id             TEXT   NOT NULL,
    node_id             TEXT,
    token_id            TEXT,
    product_uuid_sha256 BLOB,
    macs_sha256         BLOB,
    summary             TEXT   NOT NULL,
    status              TEXT   NOT NULL
        CHECK (status IN ('pending', 'approved', 'rejected', 'consumed', 'expired')),
    decided_by          TEXT,
    decision_reason     TEXT,
    joined_node_id      TEXT,
    created_at_us       INTEGER NOT NULL,
    expires_at_us       INTEGER NOT NULL,
    updated_at_us       INTEGER NOT NULL,
    version             INTEGER NOT NULL,
    position            INTEGER NOT NULL
);
CREATE INDEX join_requests_subject ON join_requests (attestor, subject, created_at_us);
CREATE INDEX join_requests_status ON join_requests (status, expires_at_us);
