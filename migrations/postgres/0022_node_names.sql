-- Step 22, the names a node may serve (issue 41 item 1): the DNS names and IP addresses an
-- operator gave a node, from the node/<id> streams' `node.names.set` (each carries the node's
-- whole set, replacing its rows); `node.retired` and `node.deleted` drop them. One row a name;
-- the tenant's index answers "which other node holds this name" for the sharing refusal.

CREATE TABLE node_names (
    node_id   TEXT   NOT NULL,
    tenant_id TEXT   NOT NULL,
    kind      TEXT   NOT NULL,
    name      TEXT   NOT NULL,
    position  BIGINT NOT NULL,
    PRIMARY KEY (node_id, kind, name)
);

CREATE INDEX node_names_by_tenant_name ON node_names (tenant_id, kind, name);
