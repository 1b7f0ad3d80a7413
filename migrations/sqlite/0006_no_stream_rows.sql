-- Step 6 drops event_streams on Postgres only. SQLite keeps it: its single writer reads the
-- stream's version from it before inserting. Nothing changes here.
SELECT 1;
