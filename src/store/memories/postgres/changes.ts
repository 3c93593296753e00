/**
 * The change log of an app's memories (migration 0013_memory_changes.sql):
 * every change numbered inside the transaction that makes it, the newest
 * MEMORY_CHANGES_RETAINED kept, and other replicas told at commit.
 */
import type pg from "pg";
import type { MemoryChange, MemoryChangePage, MemoryRecord, StoreCall } from "../../types.js";
import { changeWindowOf, deletedStub, MEMORY_CHANGES_RETAINED, requireRetained } from "../rules.js";
import type { MemoriesContext } from "./context.js";
import { COLUMNS, type MemoryRow, toRecord } from "./rows.js";

/** A notice of an app's changes: m "w" (written, superseded) or "d" (deleted), origin, app, and the newest change number it made. */
export type ChangeNotice = { m: "w" | "d"; o: string; a: string; q: number };

/** A change before the app's log numbers it. */
export type UnnumberedChange =
  | { kind: "written" | "superseded"; memory: MemoryRecord }
  | { kind: "deleted"; memories: readonly MemoryRecord[] };

/**
 * Numbers an app's changes inside their transaction, in one statement:
 * advances (and locks, until commit) the app's log head, appends the
 * changes to its log, trims the log to the newest MEMORY_CHANGES_RETAINED,
 * and notifies other replicas at commit. Last in its transaction, so the
 * head is held only while the transaction commits. The changes, numbered.
 */
export async function logChanges(
  ctx: MemoriesContext,
  client: pg.PoolClient,
  appName: string,
  kind: ChangeNotice["m"],
  changes: readonly UnnumberedChange[],
): Promise<MemoryChange[]> {
  const { rows } = await client.query<{ head: string }>(
    `WITH advanced AS (
       INSERT INTO ${ctx.s}.memory_change_heads AS h (app_name, head) VALUES ($1, $2)
       ON CONFLICT (app_name) DO UPDATE SET head = h.head + EXCLUDED.head RETURNING head
     ), logged AS (
       INSERT INTO ${ctx.s}.memory_changes (app_name, seq, kind, memory_id, deleted)
       SELECT $1, a.head - $2 + t.i, t.k, NULLIF(t.m, ''), t.d::jsonb FROM advanced a, unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS t(k, m, d, i)
     ), trimmed AS (
       DELETE FROM ${ctx.s}.memory_changes WHERE app_name = $1 AND seq <= (SELECT head FROM advanced) - ${MEMORY_CHANGES_RETAINED}
     )
     SELECT head, pg_notify($6, json_build_object('m', $7::text, 'o', $8::text, 'a', $1::text, 'q', head)::text) FROM advanced`,
    [
      appName,
      changes.length,
      changes.map((c) => c.kind),
      changes.map((c) => (c.kind === "deleted" ? "" : c.memory.memoryId)),
      changes.map((c) =>
        c.kind === "deleted"
          ? JSON.stringify(
              c.memories.map((m) => [m.memoryId, m.userId ?? null, m.agentId ?? null, m.sessionId ?? null]),
            )
          : null,
      ),
      ctx.channel,
      kind,
      ctx.origin,
    ],
  );
  const first = Number(rows[0].head) - changes.length + 1;
  return changes.map((c, i) => ({ ...c, seq: first + i }) as MemoryChange);
}

/** MemoryStore.readMemoryChanges: a page of the app's log after `after`, the memories it names as they are now. */
export async function readChanges(
  ctx: MemoriesContext,
  appName: string,
  after: number,
  limit: number,
  call: StoreCall | undefined,
): Promise<MemoryChangePage> {
  // One snapshot for the window and the log: a trim between two reads could otherwise hide evicted changes.
  return ctx.db.retriedTransaction(async (client) => {
    await client.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    const { rows: heads } = await client.query<{ head: string }>(
      `SELECT head FROM ${ctx.s}.memory_change_heads WHERE app_name = $1`,
      [appName],
    );
    requireRetained(after, changeWindowOf(Number(heads[0]?.head ?? 0)));
    const { rows } = await client.query<{
      seq: string;
      kind: string;
      memory_id: string | null;
      deleted: Array<[string, string | null, string | null, string | null]> | null;
    }>(
      `SELECT seq, kind, memory_id, deleted FROM ${ctx.s}.memory_changes WHERE app_name = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
      [appName, after, limit],
    );
    const ids = rows.flatMap((row) => (row.memory_id === null ? [] : [row.memory_id]));
    const { rows: memoryRows } =
      ids.length === 0
        ? { rows: [] as MemoryRow[] }
        : await client.query<MemoryRow>(
            `SELECT ${COLUMNS} FROM ${ctx.s}.memories WHERE app_name = $1 AND memory_id = ANY($2::text[])`,
            [appName, ids],
          );
    const byId = new Map(memoryRows.map((row) => [row.memory_id, toRecord(row)]));
    const changes: MemoryChange[] = [];
    for (const row of rows) {
      const seq = Number(row.seq);
      if (row.kind === "deleted") {
        const memories = (row.deleted ?? []).map(([memoryId, userId, agentId, sessionId]) =>
          deletedStub(appName, memoryId, userId, agentId, sessionId),
        );
        changes.push({ seq, kind: "deleted", memories });
        continue;
      }
      const memory = byId.get(row.memory_id ?? "");
      // Deleted since: its deletion follows.
      if (memory) changes.push({ seq, kind: row.kind === "superseded" ? "superseded" : "written", memory });
    }
    return { changes, through: rows.length > 0 ? Number(rows[rows.length - 1].seq) : after };
  }, call);
}
