-- Issue 45 item 6: a tenant's life cycle, from the tenant/<id> streams' tenant.created and
-- tenant.deleted. A tenant the log names only through its tokens, nodes or batches (every
-- tenant before this step) has no row until it is deleted. A deleted tenant keeps its row: its
-- name is never reused.

CREATE TABLE tenants (
    tenant_id         TEXT    PRIMARY KEY,
    description       TEXT    NOT NULL,
    created_at_us     INTEGER,
    deleted_at_us     INTEGER,
    delete_reason     TEXT,
    retired_nodes     INTEGER  NOT NULL,
    revoked_tokens    INTEGER  NOT NULL,
    cancelled_batches INTEGER  NOT NULL,
    version           INTEGER  NOT NULL,
    position          INTEGER  NOT NULL
);
