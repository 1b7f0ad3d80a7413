-- bcd's command journal (`journal.db` in the node's data directory, spec 002): the machine's own
-- SQLite file, not the control plane's log. One node id (meta), one row per command that started
-- on this machine: "started" before it runs, "finished" with its encoded CommandResult after.
PRAGMA journal_mode = DELETE;
PRAGMA synchronous = FULL;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS commands (
    command_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('started', 'finished')),
    started_at_ms INTEGER NOT NULL,
    result BLOB
);
