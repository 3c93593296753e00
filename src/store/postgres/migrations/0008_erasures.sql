-- Erasures in progress (DeleteUserData): written before an erasure removes
-- anything and deleted once it is done, so that a replica that opens the
-- store finishes one a crash cut short. `token` tells concurrent erasures of
-- the same user apart: only the one that wrote the current token clears the
-- row, and a row left behind is simply run again (erasures are idempotent).
CREATE TABLE IF NOT EXISTS erasures (
  app_name   text NOT NULL,
  user_id    text NOT NULL,
  token      text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_name, user_id)
);
