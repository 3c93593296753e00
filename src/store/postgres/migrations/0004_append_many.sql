-- Group-commit batches in a fixed number of statements, whatever their size.
--
-- append_batch (0003) runs append_events once per append, and a profile of
-- PostgreSQL under the benchmark's load (perf, bench/README.md) shows where
-- that goes: planning, executor start-up and PL/pgSQL dispatch of ~8
-- statements per append, ~85% of the backend's CPU, against ~3% inserting
-- and updating rows. append_many does a whole batch in four statements: a
-- guard, the row locks, the rest set-based in one statement, and a
-- notification per appended session. Its plans are generic, so they are
-- made once per connection rather than at every call (every plan here is
-- index lookups by session, whatever the batch holds).
--
-- Each session appears at most once per call (the driver batches distinct
-- sessions); a call that breaks this is refused with SQLSTATE 22023 and
-- nothing is written. append_batch and append_events stay for replicas
-- still running the previous version during a rolling upgrade.
--
-- Arguments: the appends' sessions and expected head seqs (NULL: any);
-- their events as parallel arrays, each event tagged with the index (from 1)
-- of its append in `p_event_appends`, each append's events in order; the
-- retention cap; whether to skip a session another transaction holds; the
-- counters slot; the NOTIFY channel and the largest payload it may carry; a
-- lock timeout in ms or NULL; the time of the append.
--
-- Returns, per append `idx`, one row per event already stored (a retry) with
-- its stored columns, then one outcome row, exactly as append_batch does
-- ('not_found', 'busy', 'duplicate' naming the event id, 'conflict',
-- 'replayed', 'appended'; head_seq and first_seq as before the append),
-- except that an 'appended' row's `seq` is the new head seq.
CREATE OR REPLACE FUNCTION append_many(
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
  p_skip_locked boolean,
  p_slot smallint,
  p_channel text,
  p_max_notify_bytes integer,
  p_lock_timeout_ms integer,
  p_now timestamptz
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
  ts_ms bigint
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
  v_busy integer[] := '{}';
  v_payload text;
  r record;
BEGIN
  IF coalesce(cardinality(p_session_ids), 0) = 0 THEN
    RETURN;
  END IF;
  IF (SELECT count(DISTINCT u) FROM unnest(p_session_ids) u) <> cardinality(p_session_ids) THEN
    RAISE EXCEPTION 'append_many: a session appears more than once in one call' USING ERRCODE = '22023';
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
    SELECT array_agg(u.i::integer), array_agg(l.head_seq), array_agg(l.first_seq) INTO v_held, v_heads, v_firsts
    FROM (SELECT s.session_id, s.head_seq, s.first_seq FROM sessions s
          WHERE s.session_id = ANY (p_session_ids) ORDER BY s.session_id FOR UPDATE SKIP LOCKED) l
    JOIN unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i) ON u.session_id = l.session_id;
    IF coalesce(cardinality(v_held), 0) < cardinality(p_session_ids) THEN
      SELECT coalesce(array_agg(u.i::integer), '{}') INTO v_busy
      FROM unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i)
      WHERE u.i <> ALL (coalesce(v_held, '{}')) AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = u.session_id);
    END IF;
  ELSE
    SELECT array_agg(u.i::integer), array_agg(l.head_seq), array_agg(l.first_seq) INTO v_held, v_heads, v_firsts
    FROM (SELECT s.session_id, s.head_seq, s.first_seq FROM sessions s
          WHERE s.session_id = ANY (p_session_ids) ORDER BY s.session_id FOR UPDATE) l
    JOIN unnest(p_session_ids) WITH ORDINALITY AS u(session_id, i) ON u.session_id = l.session_id;
  END IF;
  v_held := coalesce(v_held, '{}');

  FOR r IN
    WITH held AS (
      SELECT h.i, h.head, h.first FROM unnest(v_held, v_heads, v_firsts) AS h(i, head, first)
    ), incoming AS (
      SELECT t.i, t.ord, p_session_ids[t.i] AS session_id, t.event_id, t.event_type, t.content, t.metadata, t.ts, t.fp
      FROM unnest(p_event_appends, p_event_ids, p_event_types, p_contents, p_metadata, p_timestamps, p_fingerprints)
           WITH ORDINALITY AS t(i, event_id, event_type, content, metadata, ts, fp, ord)
    ), stored AS (
      -- Retries: ids already retained in a held session (one index probe each).
      SELECT n.i, n.ord, n.fp AS new_fp, e.seq, e.event_id, e.event_type, e.content, e.metadata, e."timestamp", e.fingerprint
      FROM incoming n JOIN held h ON h.i = n.i
      JOIN events e ON e.session_id = n.session_id AND e.event_id = n.event_id
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
             greatest(d.first, d.head + d.fresh - p_max_session_events + 1) AS new_first
      FROM (SELECT h.i, h.head, h.first, rt.duplicate_ord, coalesce(sz.events, 0) - coalesce(rt.events, 0) AS fresh
            FROM held h LEFT JOIN sizes sz ON sz.i = h.i LEFT JOIN retried rt ON rt.i = h.i) d
    ), numbered AS (
      SELECT n.*, d.head + row_number() OVER (PARTITION BY n.i ORDER BY n.ord) AS new_seq, d.new_first
      FROM incoming n JOIN decided d ON d.i = n.i
      WHERE d.outcome = 'appended' AND NOT EXISTS (SELECT 1 FROM stored st WHERE st.i = n.i AND st.ord = n.ord)
    ), inserted AS (
      INSERT INTO events (session_id, seq, event_id, event_type, content, metadata, "timestamp", fingerprint)
      SELECT m.session_id, m.new_seq, m.event_id, m.event_type, m.content::jsonb, m.metadata::jsonb, m.ts, m.fp
      FROM numbered m WHERE m.new_seq >= m.new_first
      RETURNING 1
    ), trimmed AS (
      DELETE FROM events e USING decided d
      WHERE d.outcome = 'appended' AND d.new_first > d.first AND e.session_id = p_session_ids[d.i] AND e.seq < d.new_first
      RETURNING 1
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
    SELECT x.i, x.outcome, x.head, x.first, x.seq, x.event_id, x.event_type, x.content, x.metadata, x.ts_ms
    FROM (
      SELECT st.i, 0 AS rank, NULL::text AS outcome, NULL::bigint AS head, NULL::bigint AS first, st.seq, st.event_id, st.event_type,
             st.content, st.metadata, (extract(epoch from st."timestamp") * 1000)::bigint AS ts_ms
      FROM stored st JOIN decided d ON d.i = st.i WHERE d.outcome IN ('replayed', 'appended')
      UNION ALL
      SELECT d.i, 1, d.outcome, d.head, d.first, CASE WHEN d.outcome = 'appended' THEN d.new_head END,
             CASE WHEN d.outcome = 'duplicate' THEN p_event_ids[d.duplicate_ord] END, NULL, NULL, NULL, NULL
      FROM decided d
      UNION ALL
      SELECT u.i::integer, 1, CASE WHEN u.i = ANY (v_busy) THEN 'busy' ELSE 'not_found' END, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
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
    END IF;
    idx := r.i; status := r.outcome; head_seq := r.head; first_seq := r.first; seq := r.seq;
    event_id := r.event_id; event_type := r.event_type; content := r.content; metadata := r.metadata; ts_ms := r.ts_ms;
    RETURN NEXT;
  END LOOP;
END;
$$;
