-- Recent events in ingest order, per tenant.
--
-- ListEvents used to order by the client-settable "timestamp" over the whole
-- table, so a tenant appending future-dated events took over every recent
-- view, and a scoped key's listing filtered a store-wide page. Now every
-- event carries:
--   ingest_seq  its place in the order this database stored events (a
--               sequence, so never a client's clock);
--   app_name, user_id  its session's tenancy, copied at insert, so each scope
--               (an app, a user, an app and user) reads its own newest rows
--               from its own index: O(limit), whatever other tenants store.
--
-- Rolling upgrades: replicas of earlier releases insert through append_many
-- (0004), or append_batch / append_events (0003), none of which name these
-- columns. The column default and the trigger fill them for every insert,
-- whoever makes it, so those replicas keep working unchanged. The
-- events_by_time index stays for their ListEvents (ORDER BY "timestamp"); a
-- later migration may drop it once no replica older than this one runs.
--
-- Rows stored before this migration never had an ingest position: they are
-- numbered in the order of their timestamps, the best record there is.
--
-- ingest_seq is drawn as rows are inserted, so a batch keeps seq order in it
-- because append_many_retained (0006; this release's), append_many and
-- append_events insert a batch's rows in seq order; a new append function
-- must too (test/store/model.test.ts checks).
--
-- Rows a trim or a deletion removes (append_many_retained's trim, a session
-- delete cascading to its events) leave these indexes with them: the recent
-- views never show a removed event, and need no upkeep of their own.

CREATE SEQUENCE IF NOT EXISTS events_ingest_seq AS bigint;
ALTER TABLE events ADD COLUMN IF NOT EXISTS ingest_seq bigint;
ALTER TABLE events ADD COLUMN IF NOT EXISTS app_name text;
ALTER TABLE events ADD COLUMN IF NOT EXISTS user_id text;

UPDATE events e SET ingest_seq = o.n, app_name = s.app_name, user_id = s.user_id
FROM (SELECT session_id, seq, row_number() OVER (ORDER BY "timestamp", session_id, seq) AS n FROM events) o, sessions s
WHERE o.session_id = e.session_id AND o.seq = e.seq AND s.session_id = e.session_id;
SELECT setval('events_ingest_seq', coalesce((SELECT max(ingest_seq) FROM events), 0) + 1, false);

ALTER SEQUENCE events_ingest_seq OWNED BY events.ingest_seq;
ALTER TABLE events ALTER COLUMN ingest_seq SET DEFAULT nextval('events_ingest_seq');
ALTER TABLE events ALTER COLUMN ingest_seq SET NOT NULL;

-- A session's tenancy never changes, and an insert into events holds (or
-- follows) the session's row: copying it here is exact.
CREATE OR REPLACE FUNCTION events_copy_tenancy() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
  SELECT s.app_name, s.user_id INTO NEW.app_name, NEW.user_id FROM sessions s WHERE s.session_id = NEW.session_id;
  RETURN NEW;
END;
$$;
DROP TRIGGER IF EXISTS events_copy_tenancy ON events;
CREATE TRIGGER events_copy_tenancy BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION events_copy_tenancy();
ALTER TABLE events ALTER COLUMN app_name SET NOT NULL;
ALTER TABLE events ALTER COLUMN user_id SET NOT NULL;

-- One index per recent scope: every event, an app's, a user's, an app and
-- user's. The store-wide one is partial on purpose: only the store-wide
-- listing, whose query says "ingest_seq > 0" (true of every row), may walk
-- it. A scoped listing walking it newest first would filter other tenants'
-- rows out one by one, and with few apps the planner rates that as cheap as
-- the scope's own index: a flooding tenant would make it read the flood.
CREATE INDEX IF NOT EXISTS events_by_ingest ON events (ingest_seq) WHERE ingest_seq > 0;
CREATE INDEX IF NOT EXISTS events_by_app_ingest ON events (app_name, ingest_seq);
CREATE INDEX IF NOT EXISTS events_by_user_ingest ON events (user_id, ingest_seq);
CREATE INDEX IF NOT EXISTS events_by_app_user_ingest ON events (app_name, user_id, ingest_seq);
