-- Quorum (issue 6): store each batch's scope tree once instead of every leaf's full proof.
--
-- A leaf's proof is its siblings bottom-up: at level 0 the leaf hash of its neighbour row, at
-- level l >= 1 the tree node at index (i >> l) XOR 1 of that level. Each row now keeps, in
-- `nodes`, the tree's nodes at its own index for every level l >= 1 that reaches it (level 1
-- first, 32 bytes each; the root is the last node of row 0), so every node is stored exactly
-- once (about 32 bytes a leaf instead of ~512) and any leaf's proof is read from at most 17 rows
-- without hashing. `nodes` is NULL only on rows written before this migration; their proofs are
-- rebuilt from the batch's stored leaf hashes (a projection rebuild rewrites them).
ALTER TABLE command_batch_scope DROP COLUMN proof;
ALTER TABLE command_batch_scope ADD COLUMN nodes BYTEA;
