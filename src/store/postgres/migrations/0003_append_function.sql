-- Appends in one round trip, and concurrent appends in one transaction.
--
-- The driver used to run an append as BEGIN, a row lock, an event-id lookup,
-- the write and COMMIT: five round trips, and on a VM each costs the Node
-- process ~130 µs of socket syscalls (bench/README.md). These functions do
-- the same steps server-side in one statement, its own transaction. In a
-- VOLATILE plpgsql function every statement takes a fresh snapshot under READ
-- COMMITTED, so the event-id lookup after the row lock sees what the previous
-- lock holder committed, exactly as the separate statements did.

-- One append to one session. Arguments: the session; the new events as
-- parallel arrays (ids, types, JSON texts of content and metadata,
-- timestamps, fingerprints); the expected head seq or NULL; the retention
-- cap; whether to skip a session locked by another transaction instead of
-- waiting for it; the NOTIFY channel and the largest payload it may carry; a
-- lock timeout in ms or NULL (the call's deadline: a waiter on a locked
-- session gives up with its caller); the time of the append (the server's
-- clock, like every other write).
--
-- Returns one row per event that was already stored (a retry), with its
-- stored columns, then one outcome row whose `status` is:
--   'not_found'  the session does not exist (the only row);
--   'busy'       skipped: another transaction holds the session (the only row; nothing written);
--   'duplicate'  `event_id` is retained with another fingerprint (the only row; nothing written);
--   'conflict'   the expected seq differs from head_seq (the only row; nothing written);
--   'replayed'   every event was already stored (nothing written);
--   'appended'   the new events took head_seq + 1, + 2, … in input order.
-- head_seq and first_seq are the session's before the append; `delta` is the
-- change in retained events, for the caller's counters update. The caller
-- numbers the new events itself from head_seq, by the same rule.
CREATE OR REPLACE FUNCTION append_events(
  p_session_id text,
  p_event_ids text[],
  p_event_types text[],
  p_contents text[],
  p_metadata text[],
  p_timestamps timestamptz[],
  p_fingerprints text[],
  p_expected_seq bigint,
  p_max_session_events bigint,
  p_skip_locked boolean,
  p_channel text,
  p_max_notify_bytes integer,
  p_lock_timeout_ms integer,
  p_now timestamptz
) RETURNS TABLE (
  status text,
  head_seq bigint,
  first_seq bigint,
  seq bigint,
  event_id text,
  event_type text,
  content jsonb,
  metadata jsonb,
  ts_ms bigint,
  delta bigint
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
  v_head bigint;
  v_first bigint;
  v_found bigint;
  v_fresh bigint;
  v_new_head bigint;
  v_new_first bigint;
  v_inserted bigint;
  v_trimmed bigint := 0;
  v_duplicate_ord bigint;
  v_payload text;
BEGIN
  IF p_lock_timeout_ms IS NOT NULL THEN
    PERFORM set_config('lock_timeout', greatest(p_lock_timeout_ms, 1) || 'ms', true);
  END IF;

  -- The row lock serializes appends to one session: seqs are assigned and
  -- committed in order, and this session's events cannot change under us
  -- (deleting the session needs the same lock).
  IF p_skip_locked THEN
    SELECT s.head_seq, s.first_seq INTO v_head, v_first FROM sessions s WHERE s.session_id = p_session_id FOR UPDATE SKIP LOCKED;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = p_session_id) THEN
      RETURN QUERY SELECT 'busy'::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, NULL::bigint;
      RETURN;
    END IF;
  ELSE
    SELECT s.head_seq, s.first_seq INTO v_head, v_first FROM sessions s WHERE s.session_id = p_session_id FOR UPDATE;
  END IF;
  IF v_head IS NULL THEN
    RETURN QUERY SELECT 'not_found'::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;

  -- Retries are ids already retained (one index probe per id finds them all);
  -- the service refuses a batch that repeats an id.
  SELECT count(*), min(t.ord) FILTER (WHERE e.fingerprint <> t.fp) INTO v_found, v_duplicate_ord
  FROM unnest(p_event_ids, p_fingerprints) WITH ORDINALITY AS t(event_id, fp, ord)
  JOIN events e ON e.session_id = p_session_id AND e.event_id = t.event_id;
  IF v_duplicate_ord IS NOT NULL THEN
    RETURN QUERY SELECT 'duplicate'::text, v_head, v_first, NULL::bigint, p_event_ids[v_duplicate_ord::integer], NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;
  v_fresh := cardinality(p_event_ids) - v_found;
  IF v_fresh > 0 AND p_expected_seq IS NOT NULL AND p_expected_seq <> v_head THEN
    RETURN QUERY SELECT 'conflict'::text, v_head, v_first, NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;

  IF v_found > 0 THEN
    RETURN QUERY SELECT NULL::text, NULL::bigint, NULL::bigint, e.seq, e.event_id, e.event_type, e.content, e.metadata,
                        (extract(epoch from e."timestamp") * 1000)::bigint, NULL::bigint
                 FROM events e WHERE e.session_id = p_session_id AND e.event_id = ANY (p_event_ids);
  END IF;
  IF v_fresh = 0 THEN
    RETURN QUERY SELECT 'replayed'::text, v_head, v_first, NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, 0::bigint;
    RETURN;
  END IF;

  -- Events of this batch already past the cap are acknowledged but never written.
  v_new_head := v_head + v_fresh;
  v_new_first := greatest(v_first, v_new_head - p_max_session_events + 1);
  INSERT INTO events (session_id, seq, event_id, event_type, content, metadata, "timestamp", fingerprint)
  SELECT p_session_id, f.new_seq, f.event_id, f.event_type, f.content::jsonb, f.metadata::jsonb, f.ts, f.fp
  FROM (
    SELECT t.*, v_head + row_number() OVER (ORDER BY t.ord) AS new_seq
    FROM unnest(p_event_ids, p_event_types, p_contents, p_metadata, p_timestamps, p_fingerprints)
         WITH ORDINALITY AS t(event_id, event_type, content, metadata, ts, fp, ord)
    -- Only a batch mixing retries and new events needs the lookup again.
    WHERE v_found = 0 OR NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = p_session_id AND e.event_id = t.event_id)
  ) f
  WHERE f.new_seq >= v_new_first;
  GET DIAGNOSTICS v_inserted = ROW_COUNT;

  IF v_new_first > v_first THEN
    DELETE FROM events e WHERE e.session_id = p_session_id AND e.seq < v_new_first;
    GET DIAGNOSTICS v_trimmed = ROW_COUNT;
  END IF;

  UPDATE sessions s SET head_seq = v_new_head, first_seq = v_new_first, updated_at = p_now WHERE s.session_id = p_session_id;

  -- Too long to NOTIFY (only hostile store-level ids): readers' heartbeat re-read covers it.
  v_payload := json_build_object('s', p_session_id, 'h', v_new_head)::text;
  IF octet_length(v_payload) <= p_max_notify_bytes THEN
    PERFORM pg_notify(p_channel, v_payload);
  END IF;
  RETURN QUERY SELECT 'appended'::text, v_head, v_first, NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::bigint, v_inserted - v_trimmed;
END;
$$;

-- Several appends (to any sessions) in one statement: one transaction, one
-- WAL flush, one round trip, one counters update. Append i is `p_counts[i]`
-- consecutive elements of the event arrays, and its rows come back tagged
-- `idx` = i. A refused append (not_found, duplicate, conflict) refuses only
-- itself. With `p_skip_locked` a session held by another transaction comes
-- back 'busy' instead of holding up the whole batch; the driver writes those
-- appends alone. The counters row is updated last, so a batch never waits
-- for a session lock while holding a counters row.
CREATE OR REPLACE FUNCTION append_batch(
  p_session_ids text[],
  p_counts integer[],
  p_expected_seqs bigint[],
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
AS $$
DECLARE
  v_from integer := 1;
  v_to integer;
  v_delta bigint := 0;
  r record;
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_session_ids), 0) LOOP
    v_to := v_from + p_counts[i] - 1;
    FOR r IN SELECT * FROM append_events(
        p_session_ids[i], p_event_ids[v_from:v_to], p_event_types[v_from:v_to], p_contents[v_from:v_to], p_metadata[v_from:v_to],
        p_timestamps[v_from:v_to], p_fingerprints[v_from:v_to], p_expected_seqs[i], p_max_session_events, p_skip_locked,
        p_channel, p_max_notify_bytes, p_lock_timeout_ms, p_now) LOOP
      v_delta := v_delta + coalesce(r.delta, 0);
      idx := i; status := r.status; head_seq := r.head_seq; first_seq := r.first_seq; seq := r.seq;
      event_id := r.event_id; event_type := r.event_type; content := r.content; metadata := r.metadata; ts_ms := r.ts_ms;
      RETURN NEXT;
    END LOOP;
    v_from := v_to + 1;
  END LOOP;
  IF v_delta <> 0 THEN
    UPDATE counters c SET events = c.events + v_delta WHERE c.slot = p_slot;
  END IF;
END;
$$;
