/**
 * Opening PostgreSQL: the one place Engram makes a connection to it, for the
 * store, the API keys and the quotas alike.
 */
import pg from "pg";

/** How a connection is named in pg_stat_activity: the schema it serves and, but for the store's pool, its role. */
export function connectionName(schema: string, role?: string): string {
  return (role === undefined ? `engram:${schema}` : `engram:${schema}:${role}`).slice(0, 63);
}

/**
 * A pool on `config.connectionString` whose connections carry
 * connectionName(schema, role). An idle pooled connection that dies
 * (restart, pg_terminate_backend) is dropped by the pool; without a listener
 * the event would crash the process.
 */
export function openPostgresPool(config: pg.PoolConfig, schema: string, role?: string): pg.Pool {
  const pool = new pg.Pool({ ...config, application_name: connectionName(schema, role) });
  pool.on("error", () => {});
  return pool;
}

/** One connection of its own (LISTEN's), not pooled and not yet connected, named connectionName(schema, role). */
export function openPostgresClient(config: pg.ClientConfig, schema: string, role: string): pg.Client {
  return new pg.Client({ ...config, application_name: connectionName(schema, role) });
}
