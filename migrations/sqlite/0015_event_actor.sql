-- Issue 23: who caused an event. `actor_id` (a SPIFFE ID such as spiffe://td/operator/alice, or
-- local:<user>@<host> for a direct run) and `actor_role` (admin, operator, approver, auditor) are
-- both NULL (an event nobody decided, and every event written before this step) or both set, by
-- a store opened with `EventStore::acting_as`. ADD COLUMN rewrites no row, so the append-only
-- triggers (BEFORE UPDATE, BEFORE DELETE) are not tripped; the CHECK holds the two together.
ALTER TABLE events ADD COLUMN actor_id TEXT;
ALTER TABLE events ADD COLUMN actor_role TEXT
    CHECK ((actor_id IS NULL) = (actor_role IS NULL));
