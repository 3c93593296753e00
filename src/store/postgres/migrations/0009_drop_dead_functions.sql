-- Drops the append functions that no code calls anymore.
--
-- append_events and append_batch (0003) and append_many (0004) were kept so
-- that replicas of earlier releases could go on appending during a rolling
-- upgrade. Every release since migration 0006 appends through
-- append_many_retained (0006) alone, and so does this one: the replicas of
-- the previous release that keep running while this one migrates (the
-- schema guard checks at start-up only) never call what is dropped here.
-- A replica of a release older than 0006 would: upgrade such a deployment
-- through a release holding 0006-0008 first, or stop its old replicas before
-- starting this one.
--
-- Full signatures, so that nothing else of these names could go with them;
-- IF EXISTS, so that a schema whose functions were removed by hand migrates.
DROP FUNCTION IF EXISTS append_batch(
  text[], integer[], bigint[], text[], text[], text[], text[], timestamptz[], text[], bigint, boolean, smallint, text, integer, integer, timestamptz
);
DROP FUNCTION IF EXISTS append_events(
  text, text[], text[], text[], text[], timestamptz[], text[], bigint, bigint, boolean, text, integer, integer, timestamptz
);
DROP FUNCTION IF EXISTS append_many(
  text[], bigint[], integer[], text[], text[], text[], text[], timestamptz[], text[], bigint, boolean, smallint, text, integer, integer, timestamptz
);
