-- Long-term memory searched on real indexes over the whole scope
-- (src/store/memories/postgres.ts: searchMemories, nearestMemories).
-- Written to apply again over itself (IF [NOT] EXISTS), as the earlier ones are.
--
-- Words: `terms` holds what the shared analyzer (src/store/memories/analyzer.ts)
-- makes of the text and the fact, as a tsvector under the `simple`
-- configuration (which neither stems nor drops words again), under a GIN
-- index. The analyzer runs in Engram, so the driver writes `terms` with each
-- memory; `analyzer` is the ANALYZER_VERSION it was made with. Rows written
-- before this migration read analyzer 0 (the default is only for them, and is
-- dropped at once): the driver re-analyzes them in the background
-- (memories_to_analyze finds them). An older release inserting a memory
-- names no analyzer, which NOT NULL refuses: it cannot write rows the
-- searches here would never find.
ALTER TABLE memories DROP COLUMN IF EXISTS search;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS terms tsvector;
ALTER TABLE memories ADD COLUMN IF NOT EXISTS analyzer smallint NOT NULL DEFAULT 0;
ALTER TABLE memories ALTER COLUMN analyzer DROP DEFAULT;
CREATE INDEX IF NOT EXISTS memories_terms ON memories USING gin (terms);
-- The literal is ANALYZER_VERSION: a new analyzer ships a migration that recreates this index with its own.
CREATE INDEX IF NOT EXISTS memories_to_analyze ON memories (app_name, memory_id) WHERE analyzer <> 1;

-- Vectors: `search_vector` is the embedding as pgvector's `vector` when the
-- extension can be had (created here when available and allowed), else as
-- real[] for an exact scan in SQL. `embedding` (float32 bytes) stays what a
-- read returns. Apps choose their dimension, so the column has none; the
-- driver builds one HNSW index (cosine) per dimension in use, over
-- search_vector cast to that dimension, each partial to its dimension.
DO $$
DECLARE
  extension_schema text;
BEGIN
  IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'vector') AND EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector') THEN
    BEGIN
      -- In public, not in this store's schema: dropping one store's schema must not drop the extension under the others.
      CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
    EXCEPTION
      -- Not allowed (creating it takes a superuser), or created by another schema's migration at this moment: decided below.
      WHEN insufficient_privilege OR unique_violation OR duplicate_object THEN NULL;
    END;
  END IF;
  SELECT extnamespace::regnamespace::text INTO extension_schema FROM pg_extension WHERE extname = 'vector';
  IF extension_schema IS NOT NULL THEN
    EXECUTE format('ALTER TABLE memories ADD COLUMN IF NOT EXISTS search_vector %s.vector', extension_schema);
    -- The HNSW indexes are partial to a dimension; without statistics of it the planner takes a
    -- dimension's rows for 0.5% of the table and sorts them all instead of walking the index.
    IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'search_vector') <> 'real[]'::regtype THEN
      EXECUTE format('CREATE STATISTICS IF NOT EXISTS memories_vector_dimensions ON (%s.vector_dims(search_vector)) FROM memories', extension_schema);
    END IF;
  ELSE
    ALTER TABLE memories ADD COLUMN IF NOT EXISTS search_vector real[];
  END IF;
END
$$;

-- 0011's indexes of the newest embedded memories served the candidate window
-- vector search no longer has: the HNSW indexes, or the scope's own indexes
-- for the exact scan, find what it compares.
DROP INDEX IF EXISTS memories_embedded_by_app;
DROP INDEX IF EXISTS memories_embedded_by_user;
DROP INDEX IF EXISTS memories_embedded_shared;
