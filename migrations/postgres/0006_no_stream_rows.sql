-- Appends no longer keep a row per stream: the unique (stream_id, stream_version) key orders
-- appends to one stream, and Any appends take a per-stream advisory lock. The table was derived
-- from events, so nothing is lost by dropping it.
DROP TABLE event_streams;
