-- State removals and stored nulls (proto/engram/v1/memory.proto: an event's
-- state_removals and state_nulls_are_values). An event keeps the keys it
-- deleted (NULL: none; else a JSON array of keys) and whether the nulls of
-- its state_delta were stored as values (NULL or false: they deleted their
-- keys, as before), so reads and streams return the event as it was sent.
--
-- Additive only: a replica of the previous release ignores the new columns.
ALTER TABLE events ADD COLUMN IF NOT EXISTS state_removals jsonb;
ALTER TABLE events ADD COLUMN IF NOT EXISTS state_nulls_are_values boolean;
