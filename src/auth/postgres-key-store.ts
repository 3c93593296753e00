/**
 * API keys in PostgreSQL: the `api_keys` table of the schema (migration
 * 0002), so every replica sees a revocation. Opening applies pending
 * migrations, so the key CLI works before any server has started.
 */
import pg from "pg";
import { openPostgresPool } from "../backends/postgres.js";
import { MemoryError } from "../errors.js";
import { StoreIncompatibleError } from "../store/incompatible.js";
import { migrateSchema } from "../store/postgres/migrations.js";
import type { ApiKeyRecord, ApiKeyRole, ApiKeyStore } from "./api-keys.js";

interface KeyRow {
  id: string;
  hash: string;
  role: ApiKeyRole;
  apps: string[];
  user_id: string | null;
  name: string | null;
  rate_limit: number | null;
  created_ms: string;
  revoked_ms: string | null;
}

const COLUMNS = `id, hash, role, apps, user_id, name, rate_limit,
  (extract(epoch from created_at) * 1000)::bigint AS created_ms,
  (extract(epoch from revoked_at) * 1000)::bigint AS revoked_ms`;

function toRecord(row: KeyRow): ApiKeyRecord {
  return {
    id: row.id,
    hash: row.hash,
    role: row.role,
    apps: row.apps,
    createdAt: Number(row.created_ms),
    ...(row.user_id !== null && { userId: row.user_id }),
    ...(row.name !== null && { name: row.name }),
    ...(row.rate_limit !== null && { rateLimit: row.rate_limit }),
    ...(row.revoked_ms !== null && { revokedAt: Number(row.revoked_ms) }),
  };
}

/** Keys kept in the configured PostgreSQL schema. */
export class PostgresKeyStore implements ApiKeyStore {
  private readonly table: string;

  private constructor(
    private readonly pool: pg.Pool,
    schema: string,
  ) {
    this.table = `${pg.escapeIdentifier(schema)}.api_keys`;
  }

  /** Applies migrations and opens a small pool; rejects UNAVAILABLE when unreachable, StoreIncompatibleError on a schema of a newer release. */
  static async open(url: string, schema: string): Promise<PostgresKeyStore> {
    try {
      await migrateSchema(url, schema);
    } catch (err) {
      // A schema of a newer release is no outage: passed on as it is, so it is not retried.
      if (err instanceof StoreIncompatibleError) throw err;
      throw new MemoryError("UNAVAILABLE", `PostgreSQL is unavailable for API keys: ${(err as Error).message}`);
    }
    const pool = openPostgresPool(
      { connectionString: url, max: 2, connectionTimeoutMillis: 4000, statement_timeout: 4000 },
      schema,
      "keys",
    );
    return new PostgresKeyStore(pool, schema);
  }

  async create(r: ApiKeyRecord): Promise<void> {
    await this.query(
      `INSERT INTO ${this.table} (id, hash, role, apps, user_id, name, rate_limit, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, to_timestamp($8 / 1000.0))`,
      [r.id, r.hash, r.role, r.apps, r.userId ?? null, r.name ?? null, r.rateLimit ?? null, r.createdAt],
    );
  }

  async get(id: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.query<KeyRow>(`SELECT ${COLUMNS} FROM ${this.table} WHERE id = $1`, [id]);
    return rows[0] && toRecord(rows[0]);
  }

  async list(): Promise<ApiKeyRecord[]> {
    const { rows } = await this.query<KeyRow>(`SELECT ${COLUMNS} FROM ${this.table} ORDER BY created_at, id`, []);
    return rows.map(toRecord);
  }

  async revoke(id: string, now = Date.now()): Promise<boolean> {
    const { rowCount } = await this.query(
      `UPDATE ${this.table} SET revoked_at = coalesce(revoked_at, to_timestamp($2 / 1000.0)) WHERE id = $1`,
      [id, now],
    );
    return (rowCount ?? 0) > 0;
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  private async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[],
  ): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>(sql, params);
    } catch (err) {
      if (typeof (err as { code?: unknown }).code === "string" && /^(23|22|42)/.test((err as { code: string }).code))
        throw err;
      throw new MemoryError(
        "UNAVAILABLE",
        `PostgreSQL is unavailable for API keys: ${(err as Error).message}`,
        {},
        { cause: err },
      );
    }
  }
}
