-- The functions this release calls, as they are now: applied after the
-- migrations at every start, in the same transaction and under the same
-- advisory lock (migrations.ts), with CREATE OR REPLACE, so this file, not
-- whichever migration last re-created a function, is its live definition.
--
-- Change a function here, keeping its signature and its result columns
-- (CREATE OR REPLACE cannot change those; replicas of the previous release
-- call it too during a rolling upgrade). A new signature is a new function:
-- define it here and drop the old one in a migration once no release that
-- calls it can still be running, as 0009 dropped 0003's and 0004's.
--
-- append_many_retained (0006) is not here: only replicas of releases before
-- 0015 call it, and it stays as 0006 left it until a migration drops it.

-- append_many_checked (first 0015): a batch of appends in one statement.
-- Per append (p_session_ids[i], its events those with p_event_appends = i):
-- the session's row lock, taken only when the session has the incarnation
-- its caller expects (p_incarnations[i], NULL for any; another answers
-- 'not_found' and changes nothing); retries of retained or recently trimmed
-- event ids answered from the stored originals; the expected seq checked;
-- the new events numbered, written and trimmed to the app's (or the global)
-- events cap, trimmed ids remembered for the dedupe window; heads, counters
-- and one NOTIFY per session. With p_skip_locked a session another
-- transaction holds answers 'busy' (the driver writes it alone). Rows: per
-- append, one per retried event, then its outcome row.
CREATE OR REPLACE FUNCTION append_many_checked(
  p_session_ids text[],
  p_expected_seqs bigint[],
  p_event_appends integer[],
  p_event_ids text[],
  p_event_types text[],
  p_contents text[],
  p_metadata text[],
  p_timestamps timestamptz[],
  p_fingerprints text[],
  p_max_session_events bigint,
  p_app_names text[],
  p_app_max_session_events bigint[],
  p_dedupe_window_ms bigint,
  p_dedupe_max_ids bigint,
  p_skip_locked boolean,
  p_slot smallint,
  p_channel text,
  p_max_notify_bytes integer,
  p_lock_timeout_ms integer,
  p_now timestamptz,
  p_incarnations text[]
) RETURNS TABLE (
  idx integer,
  status text,
  head_seq bigint,
  first_seq bigint,
  seq bigint,
  event_id text,
  event_type text,
  content jsonb,
  metadata jsonb,
  ts_ms bigint,
  trimmed bigint
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
  v_held integer[];  -- appends whose session row this transaction holds
  v_heads bigint[];
  v_firsts bigint[];
  v_apps text[];
  v_window interval := make_interval(secs => p_dedupe_window_ms / 1000.0);
  v_pruned text[] := '{}';   -- sessions that trimmed in this call: their remembered ids are pruned
  v_pruned_firsts bigint[] := '{}';
  v_busy integer[] := '{}';
  v_payload text;
  r record;
BEGIN
  IF coalesce(cardinality(p_session_ids), 0) = 0 THEN
    RETURN;
  END IF;
  IF (SELECT count(DISTINCT u) FROM unnest(p_session_ids) u) <> cardinality(p_session_ids) THEN
    RAISE EXCEPTION 'append_many_checked: a session appears more than once in one call' USING ERRCODE = '22023';
  END IF;
  IF p_lock_timeout_ms IS NOT NULL THEN
    PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  END IF;

  -- The row locks serialize appends to one session (seqs are assigned and
  -- committed in order) and keep its events from changing under us. Taken in
  -- session order, so two waiting calls cannot deadlock. Everything after
  -- this runs in a later statement, so it sees what an earlier holder of
  -- these locks committed.
  IF p_skip_locked THEN
    SELECT array_agg(u.i::integer), array_agg(l.head_seq), array_agg(l.first_seq), array_agg(l.app_name) INTO v_held, v_heads, v_firsts, v_apps
    FROM (SELECT s.session_id, s.head_seq, s.first_seq, s.app_name FROM sessions s
          JOIN unnest(p_session_ids, p_incarnations) AS x(session_id, incarnation) ON x.session_id = s.session_id
          WHERE x.incarnation IS NULL OR x.incarnation = s.incarnation
          ORDER BY s.session_id FOR UPDATE OF s SKIP LOCKED) l
    JOIN unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i) ON u.session_id = l.session_id;
    IF coalesce(cardinality(v_held), 0) < cardinality(p_session_ids) THEN
      SELECT coalesce(array_agg(u.i::integer), '{}') INTO v_busy
      FROM unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i)
      WHERE u.i <> ALL (coalesce(v_held, '{}'))
        AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = u.session_id AND (p_incarnations[u.i] IS NULL OR p_incarnations[u.i] = s.incarnation));
    END IF;
  ELSE
    SELECT array_agg(u.i::integer), array_agg(l.head_seq), array_agg(l.first_seq), array_agg(l.app_name) INTO v_held, v_heads, v_firsts, v_apps
    FROM (SELECT s.session_id, s.head_seq, s.first_seq, s.app_name FROM sessions s
          JOIN unnest(p_session_ids, p_incarnations) AS x(session_id, incarnation) ON x.session_id = s.session_id
          WHERE x.incarnation IS NULL OR x.incarnation = s.incarnation
          ORDER BY s.session_id FOR UPDATE OF s) l
    JOIN unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i) ON u.session_id = l.session_id;
  END IF;
  v_held := coalesce(v_held, '{}');

  FOR r IN
    WITH held AS (
      -- Each session's events cap: its app's, else the global one; 0 is no cap.
      SELECT h.i, h.head, h.first,
             coalesce((SELECT c.cap FROM unnest(p_app_names, p_app_max_session_events) AS c(app, cap) WHERE c.app = h.app LIMIT 1),
                      p_max_session_events) AS cap
      FROM unnest(v_held, v_heads, v_firsts, v_apps) AS h(i, head, first, app)
    ), incoming AS (
      SELECT t.i, t.ord, p_session_ids[t.i] AS session_id, t.event_id, t.event_type, t.content, t.metadata, t.ts, t.fp
      FROM unnest(p_event_appends, p_event_ids, p_event_types, p_contents, p_metadata, p_timestamps, p_fingerprints)
           WITH ORDINALITY AS t(i, event_id, event_type, content, metadata, ts, fp, ord)
    ), stored AS (
      -- Retries: ids already retained in a held session (one index probe each).
      SELECT n.i, n.ord, n.fp AS new_fp, e.seq, e.event_id, e.event_type, e.content, e.metadata, e."timestamp", e.fingerprint
      FROM incoming n JOIN held h ON h.i = n.i
      JOIN events e ON e.session_id = n.session_id AND e.event_id = n.event_id
      UNION ALL
      -- Retries of events trimmed inside the dedupe window: their seq and
      -- fingerprint, no content (NULL event_type tells the driver so).
      SELECT n.i, n.ord, n.fp, t.seq, t.event_id, NULL, NULL, NULL, NULL, t.fingerprint
      FROM incoming n JOIN held h ON h.i = n.i
      JOIN trimmed_event_ids t ON t.session_id = n.session_id AND t.event_id = n.event_id
      WHERE t.seq < h.first AND t.trimmed_at > p_now - v_window
    ), sizes AS (
      SELECT n.i, count(*) AS events FROM incoming n GROUP BY n.i
    ), retried AS (
      SELECT st.i, count(*) AS events, min(st.ord) FILTER (WHERE st.fingerprint <> st.new_fp) AS duplicate_ord
      FROM stored st GROUP BY st.i
    ), decided AS (
      SELECT d.*,
             CASE WHEN d.duplicate_ord IS NOT NULL THEN 'duplicate'
                  WHEN d.fresh > 0 AND p_expected_seqs[d.i] IS NOT NULL AND p_expected_seqs[d.i] <> d.head THEN 'conflict'
                  WHEN d.fresh = 0 THEN 'replayed'
                  ELSE 'appended' END AS outcome,
             d.head + d.fresh AS new_head,
             -- Events of this batch already past the cap are acknowledged but never written.
             CASE WHEN d.cap > 0 THEN greatest(d.first, d.head + d.fresh - d.cap + 1) ELSE d.first END AS new_first
      FROM (SELECT h.i, h.head, h.first, h.cap, rt.duplicate_ord, coalesce(sz.events, 0) - coalesce(rt.events, 0) AS fresh
            FROM held h LEFT JOIN sizes sz ON sz.i = h.i LEFT JOIN retried rt ON rt.i = h.i) d
    ), numbered AS (
      SELECT n.*, d.head + row_number() OVER (PARTITION BY n.i ORDER BY n.ord) AS new_seq, d.new_first
      FROM incoming n JOIN decided d ON d.i = n.i
      WHERE d.outcome = 'appended' AND NOT EXISTS (SELECT 1 FROM stored st WHERE st.i = n.i AND st.ord = n.ord)
    ), inserted AS (
      -- In seq order within each session (ord order is seq order), so that
      -- columns filled per row as it is inserted (events.ingest_seq, a
      -- sequence default of migration 0007) follow seq. The window above
      -- yields them in this order already; the ORDER BY makes it a promise
      -- (a sort of one batch's rows), not a plan's accident.
      INSERT INTO events (session_id, seq, event_id, event_type, content, metadata, "timestamp", fingerprint)
      SELECT m.session_id, m.new_seq, m.event_id, m.event_type, m.content::jsonb, m.metadata::jsonb, m.ts, m.fp
      FROM numbered m WHERE m.new_seq >= m.new_first
      ORDER BY m.i, m.ord
      RETURNING 1
    ), trimmed AS (
      DELETE FROM events e USING decided d
      WHERE d.outcome = 'appended' AND d.new_first > d.first AND e.session_id = p_session_ids[d.i] AND e.seq < d.new_first
      RETURNING e.session_id, e.seq, e.event_id, e.fingerprint, d.new_first
    ), remembered AS (
      -- The newest p_dedupe_max_ids trimmed ids (those of this batch never
      -- written included) stay for the dedupe window. An id that expired and
      -- was appended again takes its old row's place.
      INSERT INTO trimmed_event_ids (session_id, seq, event_id, fingerprint, trimmed_at)
      SELECT x.session_id, x.seq, x.event_id, x.fingerprint, p_now
      FROM (SELECT tr.session_id, tr.seq, tr.event_id, tr.fingerprint, tr.new_first FROM trimmed tr
            UNION ALL
            SELECT m.session_id, m.new_seq, m.event_id, m.fp, m.new_first FROM numbered m WHERE m.new_seq < m.new_first) x
      WHERE p_dedupe_window_ms > 0 AND x.seq >= x.new_first - p_dedupe_max_ids
      ON CONFLICT (session_id, event_id) DO UPDATE SET seq = excluded.seq, fingerprint = excluded.fingerprint, trimmed_at = excluded.trimmed_at
    ), bumped AS (
      UPDATE sessions s SET head_seq = d.new_head, first_seq = d.new_first, updated_at = p_now
      FROM decided d WHERE d.outcome = 'appended' AND s.session_id = p_session_ids[d.i]
      RETURNING 1
    ), counted AS (
      -- The last write, as in append_batch: every session lock is already held.
      UPDATE counters c SET events = c.events + (SELECT count(*) FROM inserted) - (SELECT count(*) FROM trimmed)
      WHERE c.slot = p_slot AND (SELECT count(*) FROM inserted) <> (SELECT count(*) FROM trimmed)
      RETURNING 1
    )
    SELECT x.i, x.outcome, x.head, x.first, x.seq, x.event_id, x.event_type, x.content, x.metadata, x.ts_ms, x.trimmed
    FROM (
      SELECT st.i, 0 AS rank, NULL::text AS outcome, NULL::bigint AS head, NULL::bigint AS first, st.seq, st.event_id, st.event_type,
             st.content, st.metadata, (extract(epoch from st."timestamp") * 1000)::bigint AS ts_ms, NULL::bigint AS trimmed
      FROM stored st JOIN decided d ON d.i = st.i WHERE d.outcome IN ('replayed', 'appended')
      UNION ALL
      SELECT d.i, 1, d.outcome, d.head, d.first, CASE WHEN d.outcome = 'appended' THEN d.new_head END,
             CASE WHEN d.outcome = 'duplicate' THEN p_event_ids[d.duplicate_ord] END, NULL, NULL, NULL, NULL,
             CASE WHEN d.outcome = 'appended' THEN d.new_first - d.first END
      FROM decided d
      UNION ALL
      SELECT u.i::integer, 1, CASE WHEN u.i = ANY (v_busy) THEN 'busy' ELSE 'not_found' END, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
      FROM unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i) WHERE u.i <> ALL (v_held)
    ) x
    ORDER BY x.i, x.rank
  LOOP
    IF r.outcome = 'appended' THEN
      -- Too long to NOTIFY (only hostile store-level ids): readers' heartbeat re-read covers it.
      v_payload := json_build_object('s', p_session_ids[r.i], 'h', r.seq)::text;
      IF octet_length(v_payload) <= p_max_notify_bytes THEN
        PERFORM pg_notify(p_channel, v_payload);
      END IF;
      IF r.trimmed > 0 THEN
        v_pruned := v_pruned || p_session_ids[r.i];
        v_pruned_firsts := v_pruned_firsts || (r.first + r.trimmed);
      END IF;
    END IF;
    idx := r.i; status := r.outcome; head_seq := r.head; first_seq := r.first; seq := r.seq;
    event_id := r.event_id; event_type := r.event_type; content := r.content; metadata := r.metadata; ts_ms := r.ts_ms;
    trimmed := r.trimmed;
    RETURN NEXT;
  END LOOP;

  -- Forget remembered ids past the window or past the per-session bound, for
  -- the sessions that trimmed now (a later statement: the rows inserted above
  -- are visible to it). Rows of other sessions are bounded by the same count
  -- and ignored once expired; they go at the session's next trim or deletion.
  IF cardinality(v_pruned) > 0 THEN
    DELETE FROM trimmed_event_ids t USING unnest(v_pruned, v_pruned_firsts) AS p(session_id, first)
    WHERE t.session_id = p.session_id AND t.seq < p.first - p_dedupe_max_ids;
    DELETE FROM trimmed_event_ids t USING unnest(v_pruned) AS p(session_id)
    WHERE t.session_id = p.session_id AND t.trimmed_at <= p_now - v_window;
  END IF;
END;
$$;

-- events_copy_tenancy (first 0007): the insert trigger copying a session's
-- tenancy onto each of its events. A session's tenancy never changes, and an
-- insert into events holds (or follows) the session's row: copying it here
-- is exact.
CREATE OR REPLACE FUNCTION events_copy_tenancy() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
  SELECT s.app_name, s.user_id INTO NEW.app_name, NEW.user_id FROM sessions s WHERE s.session_id = NEW.session_id;
  RETURN NEW;
END;
$$;
