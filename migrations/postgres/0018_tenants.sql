-- Issue 45 item 6: a tenant's life cycle, from the tenant/<id> streams' tenant.created and
-- tenant.deleted. A tenant the log names only through its tokens, nodes or batches (every
-- tenant before this step) has no row until it is deleted. A deleted tenant keeps its row: its
-- name is never reused.

CREATE TABLE tenants (
    tenant_id         TEXT    PRIMARY KEY,
    description       TEXT    NOT NULL,
    created_at_us     BIGINT,
    deleted_at_us     BIGINT,
    delete_reason     TEXT,
    retired_nodes     BIGINT  NOT NULL,
    revoked_tokens    BIGINT  NOT NULL,
    cancelled_batches BIGINT  NOT NULL,
    version           BIGINT  NOT NULL,
    position          BIGINT  NOT NULL
);
