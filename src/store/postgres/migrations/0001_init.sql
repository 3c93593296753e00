-- Engram schema, version 1.
--
-- Applied by src/store/postgres.ts inside one transaction that holds the
-- schema's advisory lock and has run SET LOCAL search_path to the target
-- schema: names stay unqualified so one file serves every MEMORY_KEY_PREFIX.
-- Times are timestamptz (exact to the microsecond, so epoch milliseconds
-- round-trip); seqs are bigint.

-- One row per session. head_seq/first_seq bound the retained events: an
-- append locks this row (SELECT ... FOR UPDATE), so commit order is seq order.
-- COLLATE "C" makes ORDER BY session_id the code-point order the local store
-- and the page tokens use, whatever the database's default collation.
CREATE TABLE IF NOT EXISTS sessions (
  session_id text COLLATE "C" PRIMARY KEY,
  app_name   text NOT NULL,
  user_id    text NOT NULL,
  metadata   jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  head_seq   bigint NOT NULL DEFAULT 0,
  first_seq  bigint NOT NULL DEFAULT 1,
  CONSTRAINT sessions_retained_range CHECK (first_seq >= 1 AND first_seq <= head_seq + 1)
);

-- ListSessions filtered by app (and user), paged by session_id.
CREATE INDEX IF NOT EXISTS sessions_by_app_user ON sessions (app_name, user_id, session_id);
-- Eviction (least recently updated first) and cleanup (updated_at < cutoff).
CREATE INDEX IF NOT EXISTS sessions_by_updated_at ON sessions (updated_at, session_id);

-- The retained events; seqs of one session are always the contiguous range
-- first_seq..head_seq, so the count per session is head_seq - first_seq + 1.
CREATE TABLE IF NOT EXISTS events (
  session_id  text COLLATE "C" NOT NULL REFERENCES sessions (session_id) ON DELETE CASCADE,
  seq         bigint NOT NULL,
  event_id    text NOT NULL,
  event_type  text NOT NULL,
  content     jsonb NOT NULL,
  metadata    jsonb NOT NULL DEFAULT '{}',
  "timestamp" timestamptz NOT NULL,
  -- Canonical hash of (event_type, content, metadata): jsonb reorders keys and
  -- normalizes numbers, so the payload identity is kept as it was computed.
  fingerprint text NOT NULL,
  PRIMARY KEY (session_id, seq),
  CONSTRAINT events_event_id_unique UNIQUE (session_id, event_id)
);

-- ListEvents over every session: newest first by (timestamp, session, seq).
CREATE INDEX IF NOT EXISTS events_by_time ON events ("timestamp", session_id, seq);

-- Exact totals for Stats in O(1): each transaction adds its deltas to one
-- randomly chosen slot as its last write, so concurrent appends to different
-- sessions rarely queue on the same row, and the sum over the slots is exact.
CREATE TABLE IF NOT EXISTS counters (
  slot     smallint PRIMARY KEY,
  sessions bigint NOT NULL DEFAULT 0,
  events   bigint NOT NULL DEFAULT 0
);
INSERT INTO counters (slot) SELECT generate_series(0, 15) ON CONFLICT (slot) DO NOTHING;
