/** The WHERE clauses of memory reads: scope, filter, and the newest-first listing. */
import type { MemoryCursor, MemoryFilter, MemoryScopeFilter } from "../../types.js";

/** Numbered parameters for one statement. */
export class Params {
  readonly values: unknown[] = [];
  /** Adds a value; returns its placeholder. */
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

const SCOPE_COLUMNS = [
  ["user_id", "userId"],
  ["agent_id", "agentId"],
  ["session_id", "sessionId"],
] as const;

/** The SQL condition of a scope filter (ScopeMatch in memories.proto; scopeSelects in rules.ts). Only the conditions the filter needs, so each shape keeps its index. */
export function scopeSql(p: Params, scope: MemoryScopeFilter): string[] {
  const where = [`app_name = ${p.add(scope.appName)}`];
  for (const [column, dimension] of SCOPE_COLUMNS) {
    const want = scope[dimension];
    switch (scope.match) {
      case "visible":
        where.push(want === undefined ? `${column} IS NULL` : `(${column} IS NULL OR ${column} = ${p.add(want)})`);
        break;
      case "within":
        if (want !== undefined) where.push(`${column} = ${p.add(want)}`);
        break;
      case "exact":
        where.push(want === undefined ? `${column} IS NULL` : `${column} = ${p.add(want)}`);
        break;
    }
  }
  return where;
}

/** The filter's conditions besides the scope, added to `where`. */
export function filterConditions(p: Params, filter: MemoryFilter, where: string[]): string {
  if (filter.asOf !== undefined) {
    const at = p.add(filter.asOf);
    where.push(`valid_from_ms <= ${at} AND (invalid_at_ms IS NULL OR invalid_at_ms > ${at})`);
  }
  // A literal, not a parameter: a generic plan could not otherwise use the partial index of pinned memories.
  if (filter.pinned !== undefined) where.push(filter.pinned ? "pinned" : "NOT pinned");
  if (filter.key !== undefined) where.push(`key = ${p.add(filter.key)}`);
  if (filter.subject !== undefined) where.push(`fact_subject = ${p.add(filter.subject)}`);
  if (filter.predicate !== undefined) where.push(`fact_predicate = ${p.add(filter.predicate)}`);
  if (filter.topics && filter.topics.length > 0) where.push(`topics && ${p.add([...filter.topics])}::text[]`);
  return where.join(" AND ");
}

/**
 * The filter's memories newest first (created, then id, descending), at
 * most `limit`, after the cursor, as a statement selecting `columns`. A
 * VISIBLE scope naming a user selects the user's memories OR the shared
 * ones: an OR no index keeps in order, so PostgreSQL would walk the app's
 * whole listing index filtering out other users' rows. Instead each half
 * walks its own index (memories_by_user_created, memories_shared_created)
 * newest first, and the two are merged: O(limit) rows whatever the app holds.
 */
export function newestSql(
  schema: string,
  p: Params,
  filter: MemoryFilter,
  columns: string,
  limit: number,
  after?: MemoryCursor,
  extra = "",
): string {
  const cursor = (where: string[]) => {
    if (after)
      where.push(
        `(created_ms, memory_id) < (${p.add(after.createdAt)}::bigint, ${p.add(after.memoryId)}::text COLLATE "C")`,
      );
    if (extra) where.push(extra);
    return where;
  };
  const order = `ORDER BY created_ms DESC, memory_id DESC LIMIT ${p.add(limit)}`;
  const { scope } = filter;
  if (scope.match !== "visible" || scope.userId === undefined) {
    return `SELECT ${columns} FROM ${schema}.memories WHERE ${filterConditions(p, filter, cursor(scopeSql(p, scope)))} ${order}`;
  }
  const half = (user: "own" | "shared") => {
    const where = scopeSql(p, { ...scope, userId: undefined, match: "visible" });
    // scopeSql wrote "user_id IS NULL" for the absent user: the shared half; the own half wants the user.
    if (user === "own") where[where.indexOf("user_id IS NULL")] = `user_id = ${p.add(scope.userId)}`;
    return `(SELECT ${columns} FROM ${schema}.memories WHERE ${filterConditions(p, filter, cursor(where))} ${order})`;
  };
  return `SELECT * FROM (${half("own")} UNION ALL ${half("shared")}) both_halves ${order}`;
}

/** The OR of terms as tsquery text: each quoted (quotes doubled, backslashes escaped), so no user text can break its syntax. */
export function orQueryText(terms: readonly string[]): string {
  return terms.map((term) => `'${term.replaceAll("\\", "\\\\").replaceAll("'", "''")}'`).join(" | ");
}
