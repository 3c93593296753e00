-- A session's incarnation: assigned at creation, never shared with an earlier
-- session deleted under the same id. Live streams hold the incarnation they
-- opened and end NOT_FOUND when a read finds another one, so a stream whose
-- replica missed the deletion notice (its LISTEN connection was down) can
-- never deliver events of a session created afterwards under that id.
-- Sessions stored before this migration, and sessions a replica of an older
-- release creates, get '' (every new one gets 96 random bits).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '';
