-- The memories of a supersession group still valid at a given time, found
-- without walking the group's history (src/store/memories/postgres.ts,
-- writeRound): a write closes the memories of its key whose validity has not
-- ended when it begins. memories_supersession orders a group by valid_from,
-- so that search read every memory of the key that began before, all of its
-- closed past; this index orders it by the end of validity, open-ended last,
-- and the search reads only the memories that end after the new one begins.
CREATE INDEX IF NOT EXISTS memories_supersession_open
  ON memories (app_name, supersession_key, scope_key, (coalesce(invalid_at_ms, 9223372036854775807)))
  WHERE supersession_key <> '';
