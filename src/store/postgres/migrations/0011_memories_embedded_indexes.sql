-- The newest embedded memories of a scope, found without walking the others
-- (src/store/memories/postgres.ts, nearestMemories).
--
-- Vector ranking compares the query with the newest NEAREST_CANDIDATES
-- memories of the filter that carry an embedding. Through 0010's listing
-- indexes that walk passed every memory without one: at 100k memories of an
-- app of which only the oldest 10k were embedded (a vector endpoint set
-- after the app began, or clients embedding some memories only), a hybrid
-- Recall read 90k rows to find its 2,000 candidates. These indexes hold the
-- embedded memories only, in the same three shapes as the listing indexes:
-- the whole app, one user's, and the shared (no user) ones.
CREATE INDEX IF NOT EXISTS memories_embedded_by_app ON memories (app_name, created_ms DESC, memory_id DESC) WHERE embedding IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_embedded_by_user ON memories (app_name, user_id, created_ms DESC, memory_id DESC) WHERE embedding IS NOT NULL AND user_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_embedded_shared ON memories (app_name, created_ms DESC, memory_id DESC) WHERE embedding IS NOT NULL AND user_id IS NULL;
