/**
 * The PostgreSQL driver's connections: one pool per store, statements sent
 * as named prepared statements, bounded by each call's deadline, retried
 * once per pooled connection when an established one broke, and every error
 * mapped to a MemoryError (error-mapping.ts).
 */
import { createHash } from "node:crypto";
import type pg from "pg";
import { openPostgresPool } from "../../backends/postgres.js";
import { MemoryError } from "../../errors.js";
import type { StoreCall } from "../types.js";
import { isConnectionLost, isUnavailable, toMemoryError } from "./error-mapping.js";

/** How to reach PostgreSQL, and the bounds on waiting for it. */
export interface PostgresConnectionOptions {
  /** Connection URL (MEMORY_POSTGRES_URL). */
  url: string;
  /** Schema holding every table (MEMORY_KEY_PREFIX). */
  schema: string;
  /** Bound on opening a connection (or waiting for a pooled one); default 5 s. */
  connectTimeoutMs?: number;
  /** Bound on one statement, client- and server-side; default 15 s. */
  queryTimeoutMs?: number;
  /** Pooled connections; default 10. */
  poolSize?: number;
}

/** How a statement is planned. */
export interface StatementShape {
  /**
   * "prepared" (the default): a named prepared statement per pooled
   * connection, parsed once, whose plan PostgreSQL may make generic after
   * five calls. "custom": unnamed, planned at every call with its
   * parameters' values, for statements whose best plan depends on them. A
   * search's words fold into a constant tsquery only in a custom plan: a
   * generic one estimated their matches blind and evaluated to_tsvector of
   * the query again for every memory it walked.
   */
  plan?: "prepared" | "custom";
}

/**
 * Milliseconds left before a call's deadline (epoch ms), rounded up;
 * undefined without a deadline; DEADLINE_EXCEEDED once it has passed, before
 * any statement is sent.
 */
export function timeLeft(deadline: number | undefined): number | undefined {
  if (deadline === undefined) return undefined;
  const left = Math.ceil(deadline - Date.now());
  if (left <= 0) throw new MemoryError("DEADLINE_EXCEEDED", "deadline exceeded before the store was called");
  return left;
}

/** A store's pool and the ways its statements reach PostgreSQL. */
export class PostgresDatabase {
  readonly pool: pg.Pool;
  /** Set by close(): a broken connection is not retried any more. */
  private closed = false;
  /** Prepared-statement name of each SQL text sent through the pool. */
  private readonly statementNames = new Map<string, string>();

  constructor(options: PostgresConnectionOptions) {
    const queryTimeout = options.queryTimeoutMs ?? 15_000;
    this.pool = openPostgresPool(
      {
        connectionString: options.url,
        max: options.poolSize ?? 10,
        connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
        // The server gives up first (and releases locks); the client bound catches a silent network.
        statement_timeout: queryTimeout,
        query_timeout: queryTimeout + 1000,
        idle_in_transaction_session_timeout: queryTimeout * 2,
        keepAlive: true,
      },
      options.schema,
    );
  }

  /** One pooled statement, retried once if its connection broke, errors as MemoryError. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
    call?: StoreCall,
    shape: StatementShape = {},
  ): Promise<pg.QueryResult<R>> {
    return this.attempt(() => this.poolQuery<R>(sql, params, call, shape));
  }

  /**
   * One statement on a pooled connection, bounded by the call's deadline when
   * it has one: the client stops waiting then, and the pool discards that
   * connection (its state is unknown), so a dead backend cannot hold
   * connections longer than the callers wait.
   */
  async poolQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[],
    call: StoreCall | undefined,
    shape: StatementShape = {},
  ): Promise<pg.QueryResult<R>> {
    return this.pool.query<R>(this.statement(sql, params, timeLeft(call?.deadline), shape));
  }

  /**
   * A pooled statement as a named prepared statement: each connection parses
   * and plans it once, then sends only Bind/Execute, where an unnamed one is
   * parsed and planned by PostgreSQL at every call. Every text is one of a
   * few fixed per store (the schema is part of it), so the names stay few.
   * A "custom" statement stays unnamed (see StatementShape).
   */
  statement(
    sql: string,
    values: unknown[],
    queryTimeout: number | undefined,
    shape: StatementShape = {},
  ): pg.QueryConfig {
    // Bounded client-side too: past it the pool discards the connection, whose state is then unknown.
    const config =
      queryTimeout === undefined ? { text: sql, values } : { text: sql, values, query_timeout: queryTimeout };
    if (shape.plan === "custom") return config as pg.QueryConfig;
    let name = this.statementNames.get(sql);
    if (name === undefined) {
      name = `engram_${createHash("sha256").update(sql).digest("hex").slice(0, 24)}`;
      this.statementNames.set(sql, name);
    }
    return { ...config, name } as pg.QueryConfig;
  }

  /**
   * Runs `fn`, again when an established connection broke under it (the
   * outcome of a commit is then unknown; every operation here is safe to
   * repeat), and maps the final error to a MemoryError. A backend restart or
   * pg_terminate_backend kills every idle pooled connection at once, and the
   * pool learns of each death only when its socket is read, so one retry could
   * land on another dead connection: retry at most once per pooled connection
   * (each dead one fails at once), yielding first so pending socket errors
   * evict the dead ones. A refused or timed-out connect is not retried.
   */
  async attempt<T>(fn: (retried: boolean) => Promise<T>): Promise<T> {
    const maxRetries = this.pool.options.max ?? 10;
    for (let retries = 0; ; retries++) {
      try {
        return await fn(retries > 0);
      } catch (err) {
        if (this.closed || retries >= maxRetries || !isConnectionLost(err)) throw toMemoryError(err);
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** BEGIN … COMMIT on one pooled connection, bounded by the call's deadline when it has one; ROLLBACK on error; a broken connection is discarded. */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, call?: StoreCall): Promise<T> {
    const client = await this.pool.connect();
    // While checked out the pool does not listen: an error between statements must not crash the process.
    let broken: unknown;
    const onError = (err: unknown) => (broken ??= err);
    client.on("error", onError);
    try {
      // The server aborts the transaction (and frees its locks) at the call's deadline.
      const deadline = call?.deadline;
      await client.query(
        deadline === undefined
          ? "BEGIN"
          : `BEGIN; SET LOCAL statement_timeout = ${Math.max(1, Math.ceil(deadline - Date.now()))}`,
      );
      const result = await fn(client);
      await client.query("COMMIT");
      return result;
    } catch (err) {
      if (!broken && !isUnavailable(err)) {
        await client.query("ROLLBACK").catch((rollbackErr: unknown) => (broken = rollbackErr));
      } else {
        broken ??= err;
      }
      throw err;
    } finally {
      client.removeListener("error", onError);
      client.release(broken instanceof Error ? broken : broken ? true : undefined);
    }
  }

  /** `fn` in one transaction, run again if the connection broke under it, errors as MemoryError. */
  async retriedTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>, call?: StoreCall): Promise<T> {
    return this.attempt(() => this.transaction(fn, call));
  }

  /** Ends the pool (never rejects); from now on nothing is retried. */
  async close(): Promise<void> {
    this.closed = true;
    await this.pool.end().catch(() => {});
  }
}
