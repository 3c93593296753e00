-- Long-term memories (proto/engram/v1/memories.proto; src/store/memories/postgres.ts).
--
-- One row per (app_name, memory_id). Times are epoch milliseconds (bigint),
-- exactly as the store contract carries them. A superseded memory keeps its
-- row: supersession only sets invalid_at_ms and superseded_by.
--
-- scope_key and supersession_key are written by the driver from the same
-- functions the other stores use (src/store/memories/rules.ts), as JSON text
-- (PostgreSQL text cannot hold the NUL separators rules.ts uses in memory):
-- two memories supersede each other exactly when app_name, scope_key and a
-- non-empty supersession_key are equal.
CREATE TABLE IF NOT EXISTS memories (
  app_name           text NOT NULL,
  -- "C": listing order (created, then memory_id) must be code-point order, as in every store.
  memory_id          text COLLATE "C" NOT NULL,
  user_id            text,
  agent_id           text,
  session_id         text,
  scope_key          text NOT NULL,
  text               text NOT NULL,
  fact_subject       text,
  fact_predicate     text,
  fact_object        text,
  key                text NOT NULL DEFAULT '',
  supersession_key   text NOT NULL DEFAULT '',
  topics             text[] NOT NULL DEFAULT '{}',
  importance         double precision NOT NULL DEFAULT 0,
  pinned             boolean NOT NULL DEFAULT false,
  metadata           jsonb NOT NULL DEFAULT '{}',
  source_session_id  text,
  source_from_seq    bigint,
  source_to_seq      bigint,
  created_ms         bigint NOT NULL,
  valid_from_ms      bigint NOT NULL,
  invalid_at_ms      bigint,
  superseded_by      text,
  -- float32 little-endian, as the wire's `repeated float`: 4 bytes a dimension.
  embedding          bytea,
  fingerprint        text NOT NULL,
  -- What lexical search matches: the text and the fact's words, English
  -- stemming and stop words (stop words matter: ts_rank_cd has no IDF, so
  -- "the" would otherwise weigh as much as "espresso").
  search             tsvector GENERATED ALWAYS AS (
    to_tsvector('english'::regconfig, text || ' ' || coalesce(fact_subject, '') || ' ' || coalesce(fact_predicate, '') || ' ' || coalesce(fact_object, ''))
  ) STORED,
  PRIMARY KEY (app_name, memory_id),
  CHECK (embedding IS NULL OR (octet_length(embedding) > 0 AND octet_length(embedding) % 4 = 0))
);

-- Listing newest first per app (ListMemories, the cursor), and per user:
-- WITHIN/EXACT user scopes, VISIBLE's "the user's own" half, and erasure.
CREATE INDEX IF NOT EXISTS memories_by_app_created ON memories (app_name, created_ms DESC, memory_id DESC);
CREATE INDEX IF NOT EXISTS memories_by_user_created ON memories (app_name, user_id, created_ms DESC, memory_id DESC) WHERE user_id IS NOT NULL;
-- VISIBLE's "shared across users" half: the app-wide and agent- or session-only memories.
CREATE INDEX IF NOT EXISTS memories_shared_created ON memories (app_name, created_ms DESC, memory_id DESC) WHERE user_id IS NULL;
-- Pinned (core) memories newest first, per user and shared (user_id IS NULL is
-- indexable): what Recall puts first, found without walking the unpinned ones.
CREATE INDEX IF NOT EXISTS memories_pinned ON memories (app_name, user_id, created_ms DESC, memory_id DESC) WHERE pinned;
-- The peers a write supersedes (and the later ones that cut it short).
CREATE INDEX IF NOT EXISTS memories_supersession ON memories (app_name, supersession_key, scope_key, valid_from_ms) WHERE supersession_key <> '';
-- Filters by explicit key and by fact.
CREATE INDEX IF NOT EXISTS memories_by_key ON memories (app_name, key) WHERE key <> '';
CREATE INDEX IF NOT EXISTS memories_by_fact ON memories (app_name, fact_subject, fact_predicate) WHERE fact_subject IS NOT NULL;
-- Full-text search and topic filters.
CREATE INDEX IF NOT EXISTS memories_search ON memories USING gin (search);
CREATE INDEX IF NOT EXISTS memories_topics ON memories USING gin (topics);

-- One embedding dimension per app, set by the app's first embedding. A
-- writer upserts its app's row first, so concurrent first writers of
-- different dimensions serialize on it and the second is refused.
CREATE TABLE IF NOT EXISTS memory_dimensions (
  app_name  text PRIMARY KEY,
  dimension integer NOT NULL CHECK (dimension > 0)
);
