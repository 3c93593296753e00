-- The change log of each app's long-term memories (WatchMemories' `after`;
-- src/store/memories/postgres.ts).
--
-- memory_change_heads holds each app's newest change number; a write or
-- deletion advances it inside its transaction, which locks the row until
-- commit, so an app's numbers follow commit order and a reader never sees
-- number n+1 committed before n. memory_changes keeps the newest
-- MEMORY_CHANGES_RETAINED (rules.ts) changes of each app: a written or
-- superseded change references its memory (read as it is now; gone once the
-- memory is deleted), a deletion keeps its memories' ids and scope as
-- [memory_id, user_id, agent_id, session_id] arrays, nothing of their text.
--
-- Additive only: a replica of the previous release neither numbers nor logs
-- its changes (watchers resuming across its writes miss them).
CREATE TABLE IF NOT EXISTS memory_change_heads (
  app_name text PRIMARY KEY,
  head     bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS memory_changes (
  app_name  text NOT NULL,
  seq       bigint NOT NULL,
  kind      text NOT NULL CHECK (kind IN ('written', 'superseded', 'deleted')),
  memory_id text,
  deleted   jsonb,
  PRIMARY KEY (app_name, seq)
);
