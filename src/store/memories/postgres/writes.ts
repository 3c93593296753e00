/**
 * Writing a batch of memories inside its transaction: the supersession
 * groups' advisory locks, every check, the memories in as few statements as
 * their groups allow, what each supersedes closed, and the change log.
 */
import type pg from "pg";
import type { MemoryChange, MemoryRecord, MemoryWriteResult } from "../../types.js";
import { ANALYZER_VERSION } from "../analyzer.js";
import { embeddingDimensionMismatch, exactScopeKey, memoryIdTaken } from "../rules.js";
import { logChanges, type UnnumberedChange } from "./changes.js";
import type { MemoriesContext } from "./context.js";
import {
  COLUMN_LISTS,
  COLUMNS,
  encodeEmbedding,
  idOf,
  type MemoryRow,
  memoryTerms,
  storedSupersessionKey,
  supersessionGroup,
  toRecord,
} from "./rows.js";

/**
 * The batch inside its transaction: locks on its supersession groups,
 * every check, then its memories in as few statements as their groups
 * allow (writeRound), the change log, and the notices sent at commit.
 * Only memories with a key are looked up first (a retry must not close
 * their key's memories again); any other memory id already stored is
 * found by the insert itself (ON CONFLICT), and a conflict with other
 * content refuses the batch, which rolls back whole.
 */
export async function writeBatch(
  ctx: MemoriesContext,
  client: pg.PoolClient,
  batch: readonly MemoryRecord[],
): Promise<{ result: MemoryWriteResult; changes: Map<string, MemoryChange[]> }> {
  const writes = batch.map((memory) => ({ memory, id: idOf(memory), group: supersessionGroup(memory) }));
  const keyed = writes.filter((w) => w.group !== undefined);
  await lockGroups(
    ctx,
    client,
    keyed.map((w) => w.group!),
  );

  const first = new Map<string, number>();
  writes.forEach((w, i) => first.has(w.id) || first.set(w.id, i));
  const latest = new Map<string, MemoryRecord>();
  const take = (stored: MemoryRecord) => {
    const i = first.get(idOf(stored));
    if (i !== undefined && stored.fingerprint !== batch[i].fingerprint)
      throw memoryIdTaken(`memories[${i}].memory_id`, stored.memoryId);
    latest.set(idOf(stored), stored);
  };
  if (keyed.length > 0)
    (
      await readByIds(
        ctx,
        client,
        keyed.map((w) => w.memory),
      )
    ).forEach(take);
  const dimensions = await appDimensions(ctx, client, batch);

  // First every check, then every change: a refused batch changes nothing.
  const fresh: typeof writes = [];
  writes.forEach((w, i) => {
    const m = w.memory;
    if (m.embedding && m.embedding.length !== dimensions.get(m.appName)) {
      throw embeddingDimensionMismatch(`memories[${i}].embedding`, m.embedding.length, dimensions.get(m.appName)!);
    }
    const earlier = first.get(w.id)!;
    if (earlier !== i && batch[earlier].fingerprint !== m.fingerprint)
      throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
    if (earlier === i && !latest.has(w.id)) fresh.push(w);
  });

  // Round r writes the r-th memory of each supersession group (and, in the first, every memory without one):
  // a group's memories in batch order, each seeing the one before, as if written one by one.
  const rounds: (typeof writes)[] = [];
  const groupSeen = new Map<string, number>();
  for (const w of fresh) {
    const round = w.group === undefined ? 0 : (groupSeen.get(w.group) ?? 0);
    if (w.group !== undefined) groupSeen.set(w.group, round + 1);
    (rounds[round] ??= []).push(w);
  }
  const closedBy = new Map<string, MemoryRecord[]>();
  const written = new Map<string, MemoryRecord>();
  for (const round of rounds) {
    const outcome = await writeRound(ctx, client, round);
    outcome.stored.forEach(take);
    for (const memory of outcome.written) {
      written.set(idOf(memory), memory);
      latest.set(idOf(memory), memory);
    }
    for (const [by, closed] of outcome.closed) {
      closedBy.set(by, closed);
      for (const memory of closed) latest.set(idOf(memory), memory);
    }
  }

  // The log in batch order: what each memory closed, then the memory itself.
  const unnumbered = new Map<string, UnnumberedChange[]>();
  const change = (appName: string, c: UnnumberedChange) => {
    const list = unnumbered.get(appName);
    if (list) list.push(c);
    else unnumbered.set(appName, [c]);
  };
  const superseded = new Set<string>();
  for (const { id } of fresh) {
    const memory = written.get(id);
    if (!memory) continue;
    for (const record of closedBy.get(id) ?? []) {
      superseded.add(idOf(record));
      change(record.appName, { kind: "superseded", memory: record });
    }
    change(memory.appName, { kind: "written", memory });
  }

  const changes = new Map<string, MemoryChange[]>();
  // Apps in one order: two batches of the same apps lock their log heads without waiting on each other in a cycle.
  for (const appName of [...unnumbered.keys()].sort())
    changes.set(appName, await logChanges(ctx, client, appName, "w", unnumbered.get(appName)!));
  return {
    result: {
      memories: writes.map((w) => latest.get(w.id)!),
      superseded: [...superseded].map((id) => latest.get(id)!),
    },
    changes,
  };
}

/** The stored memories of these ids (absent ones left out). */
async function readByIds(
  ctx: MemoriesContext,
  client: pg.PoolClient,
  memories: readonly MemoryRecord[],
): Promise<MemoryRecord[]> {
  const { rows } = await client.query<MemoryRow>(
    `SELECT ${COLUMNS} FROM ${ctx.s}.memories WHERE (app_name, memory_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
    [memories.map((m) => m.appName), memories.map((m) => m.memoryId)],
  );
  return rows.map(toRecord);
}

/**
 * Locks supersession groups (app, exact scope, key), each exclusively
 * until the transaction ends, in one sorted order: replicas writing the
 * same key queue instead of both closing the same old memory or both
 * inserting a "current" one, and no two wait on each other in a cycle.
 * Nothing else is locked: a memory id is claimed by the primary key
 * (writeRound's ON CONFLICT), so writers of different keys, and of
 * memories without one, never wait on each other. A batch takes at most
 * MAX_BATCH_MEMORIES advisory locks, each a slot of PostgreSQL's shared
 * lock table (max_locks_per_transaction x max_connections).
 */
async function lockGroups(ctx: MemoriesContext, client: pg.PoolClient, groups: readonly string[]): Promise<void> {
  if (groups.length === 0) return;
  const names = [...new Set(groups)].sort().map((group) => `engram:memory-key:${ctx.schemaName}:${group}`);
  await client.query(
    `SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i)`,
    [names],
  );
}

/**
 * Writes memories of distinct supersession groups, none stored yet, in at
 * most three statements: closes what each supersedes (valid when it
 * starts: their validity ends there), finds for each the stored memory of
 * its key that begins after it (then it held only until that one began),
 * and inserts them all. A memory whose id is stored already (by another
 * transaction, or before) is not written: it comes back in `stored`.
 * `closed` maps the id of each memory written to what it closed.
 */
async function writeRound(
  ctx: MemoriesContext,
  client: pg.PoolClient,
  round: ReadonlyArray<{ memory: MemoryRecord; id: string; group: string | undefined }>,
): Promise<{ written: MemoryRecord[]; closed: Map<string, MemoryRecord[]>; stored: MemoryRecord[] }> {
  const memories = round.map((w) => w.memory);
  const keyed = memories.filter((_, i) => round[i].group !== undefined);
  const closed = new Map<string, MemoryRecord[]>();
  if (keyed.length > 0) {
    const peers = [
      keyed.map((m) => m.appName),
      keyed.map(storedSupersessionKey),
      keyed.map(exactScopeKey),
      keyed.map((m) => m.validFrom),
    ];
    // Spelled as memories_supersession_open (0017) indexes it; "<> ''" because a join key proves nothing of its predicate.
    const { rows: closedRows } = await client.query<MemoryRow>(
      `UPDATE ${ctx.s}.memories m SET invalid_at_ms = i.valid_from, superseded_by = i.memory_id
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS i(app_name, supersession_key, scope_key, valid_from, memory_id)
       WHERE m.app_name = i.app_name AND m.supersession_key = i.supersession_key AND m.scope_key = i.scope_key AND m.supersession_key <> ''
         AND coalesce(m.invalid_at_ms, 9223372036854775807) > i.valid_from AND m.valid_from_ms <= i.valid_from
       RETURNING ${COLUMN_LISTS.m.full}`,
      [...peers, keyed.map((m) => m.memoryId)],
    );
    for (const record of closedRows.map(toRecord)) {
      const by = idOf({ appName: record.appName, memoryId: record.supersededBy! });
      const list = closed.get(by);
      if (list) list.push(record);
      else closed.set(by, [record]);
    }
    const { rows: later } = await client.query<{ i: string; memory_id: string; valid_from_ms: string }>(
      `SELECT DISTINCT ON (i.i) i.i, m.memory_id, m.valid_from_ms
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS i(app_name, supersession_key, scope_key, valid_from, i)
       JOIN ${ctx.s}.memories m ON m.app_name = i.app_name AND m.supersession_key = i.supersession_key AND m.scope_key = i.scope_key AND m.valid_from_ms > i.valid_from
        AND m.supersession_key <> ''
       ORDER BY i.i, m.valid_from_ms, m.created_ms, m.memory_id`,
      peers,
    );
    for (const next of later) {
      const input = keyed[Number(next.i) - 1];
      if (input.invalidAt !== undefined && input.invalidAt <= Number(next.valid_from_ms)) continue;
      memories[memories.indexOf(input)] = {
        ...input,
        invalidAt: Number(next.valid_from_ms),
        supersededBy: next.memory_id,
      };
    }
  }
  const { rows: inserted } = await client.query<{ memory_id: string; app_name: string }>(
    `INSERT INTO ${ctx.s}.memories (${COLUMNS}, scope_key, supersession_key, terms, analyzer, search_vector)
     SELECT r.app_name, r.memory_id, r.user_id, r.agent_id, r.session_id, r.text, r.fact_subject, r.fact_predicate, r.fact_object, r.key, r.topics,
            r.importance, r.pinned, r.metadata, r.source_session_id, r.source_from_seq, r.source_to_seq, r.created_ms, r.valid_from_ms, r.invalid_at_ms,
            r.superseded_by, decode(r.embedding, 'base64'), r.fingerprint, r.scope_key, r.supersession_key,
            to_tsvector('simple'::regconfig, r.terms), ${ANALYZER_VERSION}, ${ctx.search.vectorParam("r.vector")}
     FROM json_to_recordset($1::json) AS r(
       app_name text, memory_id text, user_id text, agent_id text, session_id text, text text, fact_subject text, fact_predicate text, fact_object text,
       key text, topics text[], importance double precision, pinned boolean, metadata jsonb, source_session_id text, source_from_seq bigint,
       source_to_seq bigint, created_ms bigint, valid_from_ms bigint, invalid_at_ms bigint, superseded_by text, embedding text, fingerprint text,
       scope_key text, supersession_key text, terms text, vector text)
     ON CONFLICT (app_name, memory_id) DO NOTHING
     RETURNING app_name, memory_id`,
    [JSON.stringify(memories.map((m) => insertRow(ctx, m)))],
  );
  const insertedIds = new Set(inserted.map((row) => idOf({ appName: row.app_name, memoryId: row.memory_id })));
  const written = memories.filter((m) => insertedIds.has(idOf(m)));
  const stored =
    written.length < memories.length
      ? await readByIds(
          ctx,
          client,
          memories.filter((m) => !insertedIds.has(idOf(m))),
        )
      : [];
  return { written, closed, stored };
}

/** One memory as a row of writeRound's json_to_recordset. */
function insertRow(ctx: MemoriesContext, m: MemoryRecord): Record<string, unknown> {
  return {
    app_name: m.appName,
    memory_id: m.memoryId,
    user_id: m.userId ?? null,
    agent_id: m.agentId ?? null,
    session_id: m.sessionId ?? null,
    text: m.text,
    fact_subject: m.fact?.subject ?? null,
    fact_predicate: m.fact?.predicate ?? null,
    fact_object: m.fact?.object ?? null,
    key: m.key,
    topics: m.topics,
    importance: m.importance,
    pinned: m.pinned,
    metadata: m.metadata,
    source_session_id: m.source?.sessionId ?? null,
    source_from_seq: m.source?.fromSeq ?? null,
    source_to_seq: m.source?.toSeq ?? null,
    created_ms: m.createdAt,
    valid_from_ms: m.validFrom,
    invalid_at_ms: m.invalidAt ?? null,
    superseded_by: m.supersededBy ?? null,
    embedding: m.embedding ? encodeEmbedding(m.embedding).toString("base64") : null,
    fingerprint: m.fingerprint,
    scope_key: exactScopeKey(m),
    supersession_key: storedSupersessionKey(m),
    terms: memoryTerms(m),
    vector: ctx.search.vectorText(m.embedding),
  };
}

/**
 * The embedding dimension of every app the batch embeds into: the stored
 * one, or for an app without one the batch's first embedding's, recorded
 * now. ON CONFLICT DO NOTHING waits for a concurrent first writer of the
 * app and then keeps its row, which the next read returns.
 */
async function appDimensions(
  ctx: MemoriesContext,
  client: pg.PoolClient,
  batch: readonly MemoryRecord[],
): Promise<Map<string, number>> {
  const first = new Map<string, number>();
  for (const m of batch) if (m.embedding && !first.has(m.appName)) first.set(m.appName, m.embedding.length);
  if (first.size === 0) return first;
  const apps = [...first.keys()].sort();
  const read = async () => {
    const { rows } = await client.query<{ app_name: string; dimension: number }>(
      `SELECT app_name, dimension FROM ${ctx.s}.memory_dimensions WHERE app_name = ANY($1::text[])`,
      [apps],
    );
    return new Map(rows.map((r) => [r.app_name, r.dimension]));
  };
  const stored = await read();
  if (stored.size === apps.length) return stored;
  const missing = apps.filter((a) => !stored.has(a));
  await client.query(
    `INSERT INTO ${ctx.s}.memory_dimensions (app_name, dimension) SELECT * FROM unnest($1::text[], $2::int[]) ON CONFLICT (app_name) DO NOTHING`,
    [missing, missing.map((a) => first.get(a))],
  );
  return read();
}
