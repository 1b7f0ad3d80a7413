-- Issue 23: who caused an event. `actor_id` (a SPIFFE ID such as spiffe://td/operator/alice, or
-- local:<user>@<host> for a direct run) and `actor_role` (admin, operator, approver, auditor) are
-- both NULL (an event nobody decided: a node's join, the sequencer's seal, every event written
-- before this step) or both set, by a store opened with `EventStore::acting_as`.
--
-- Adding nullable columns without a default rewrites nothing and fires no row trigger, so the
-- append-only triggers (BEFORE UPDATE OR DELETE, BEFORE TRUNCATE) are not tripped. No CHECK that
-- the two go together: Postgres re-plans CHECK constraints at every INSERT (see ARCHITECTURE,
-- "Schema"); the store writes both from one `Actor` and every read refuses a row with one of the
-- two as `Corrupt`.
ALTER TABLE events ADD COLUMN actor_id TEXT;
ALTER TABLE events ADD COLUMN actor_role TEXT;
