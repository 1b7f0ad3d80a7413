-- The audit trail (issue 5, embedded backend): per-tenant RFC 9162 Merkle logs built by the sequencer, and the
-- signed checkpoints the sealer records.
--
-- The sequencer owns audit_sequencer, audit_trees, audit_leaves and audit_nodes: it writes one
-- batch of leaves, the interior nodes they complete, every touched tenant's tree size and the
-- tailer cursor in one transaction, so a crash resumes exactly where the last commit left off.
-- audit_checkpoints is a projection of `audit.checkpoint.sealed` events.

-- The sequencer's cursor: one row, the exact tailer's text form (see events::store::TailCursor).
CREATE TABLE audit_sequencer (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    cursor     TEXT    NOT NULL,
    sequenced  INTEGER  NOT NULL
);

-- Each tenant's tree size (its number of leaves).
CREATE TABLE audit_trees (
    tenant_id  TEXT   PRIMARY KEY,
    size       INTEGER NOT NULL CHECK (size >= 0)
);

-- One row per event: its dense per-tenant index and its RFC 9162 leaf hash. `position` is unique:
-- an event is in exactly one tenant's tree, exactly once.
CREATE TABLE audit_leaves (
    tenant_id   TEXT   NOT NULL,
    leaf_index  INTEGER NOT NULL CHECK (leaf_index >= 0),
    position    INTEGER NOT NULL,
    leaf_hash   BLOB  NOT NULL CHECK (length(leaf_hash) = 32),
    PRIMARY KEY (tenant_id, leaf_index),
    CONSTRAINT audit_leaves_position_key UNIQUE (position)
);

-- Hashes of complete subtrees above the leaves: node (level, node_index) covers leaves
-- [node_index * 2^level, (node_index + 1) * 2^level). Level 0 is audit_leaves. Write-once.
CREATE TABLE audit_nodes (
    tenant_id   TEXT    NOT NULL,
    level       INTEGER NOT NULL CHECK (level >= 1 AND level < 64),
    node_index  INTEGER  NOT NULL CHECK (node_index >= 0),
    hash        BLOB   NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (tenant_id, level, node_index)
);

-- Projection of audit.checkpoint.sealed: every signed checkpoint, chained by note hashes.
CREATE TABLE audit_checkpoints (
    tenant_id             TEXT    NOT NULL,
    seq                   INTEGER  NOT NULL CHECK (seq >= 1),
    tree_size             INTEGER  NOT NULL CHECK (tree_size >= 1),
    root_hash             BLOB   NOT NULL CHECK (length(root_hash) = 32),
    origin                TEXT    NOT NULL,
    verifier_key          TEXT    NOT NULL,
    signed_note           TEXT    NOT NULL,
    note_sha256           BLOB   NOT NULL CHECK (length(note_sha256) = 32),
    previous_note_sha256  BLOB   CHECK (length(previous_note_sha256) = 32),
    consistency_proof     BLOB   NOT NULL,
    position              INTEGER  NOT NULL,
    occurred_at_us        INTEGER  NOT NULL,
    PRIMARY KEY (tenant_id, seq),
    CONSTRAINT audit_checkpoints_size_key UNIQUE (tenant_id, tree_size)
);
