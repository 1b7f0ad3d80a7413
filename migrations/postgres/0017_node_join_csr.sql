-- Step 17, lost answers (issue 40): the SHA-256 of the CSR the node's last join (or re-join)
-- was admitted for, from `node.joined` field 14 (`csr_sha256`). A join whose answer was lost is asked
-- again with the same CSR, and answered again only when it is this one. Rows written before this
-- step keep NULL until the node joins again or the table is rebuilt.

ALTER TABLE nodes ADD COLUMN join_csr_sha256 BYTEA;
