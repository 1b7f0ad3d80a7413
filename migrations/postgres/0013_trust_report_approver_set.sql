-- Issue 21: the approver set each node reports holding in its session (spec 003 "Nodes that hold
-- another set"), so `pki trust-version` can name the connected nodes that enforce another set than
-- the published one. Written from `node.trust.reported` fields 5 and 6: a Hello writes the set as
-- it comes; a StatusReport with trust_version above 0 writes it only when that version is at least
-- the one recorded; a node holding no approver keys (an empty digest) is NULL in both columns.
-- Rows recorded before this step keep NULL until the node's next Hello.

ALTER TABLE node_trust_reports ADD COLUMN approver_set_epoch BIGINT;
ALTER TABLE node_trust_reports ADD COLUMN approver_set_sha256 BYTEA;
