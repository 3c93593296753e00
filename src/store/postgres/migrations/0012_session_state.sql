-- Session state (ADK's model; src/store/state.ts, proto/engram/v1/memory.proto).
--
-- A session's own state and its version live on its row; the app-wide state
-- and each user's state (shared by the user's sessions of one app) have
-- tables of their own, keyed as the session's tenancy is. Each state is a
-- JSON object, keys without their "app:" / "user:" prefix. An event keeps
-- the delta it carried (NULL: none), so reads and streams return it.
--
-- The driver changes state inside the append's (or UpdateSession's)
-- transaction, after append_many_retained has locked the session row; it
-- locks the user's and then the app's row, always in that order. A user's
-- state goes with DeleteUserData; the app's never does.
--
-- Additive only: a replica of the previous release ignores the new columns
-- and tables (its appends store no delta and change no state).
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS state jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN IF NOT EXISTS state_delta jsonb;

CREATE TABLE IF NOT EXISTS app_state (
  app_name text PRIMARY KEY,
  state    jsonb NOT NULL
);

CREATE TABLE IF NOT EXISTS user_state (
  app_name text NOT NULL,
  user_id  text NOT NULL,
  state    jsonb NOT NULL,
  PRIMARY KEY (app_name, user_id)
);
