/**
 * The PostgreSQL schema: numbered migrations (migrations/NNNN_*.sql, each
 * applied once, in order, recorded in schema_migrations; a released one is
 * never edited), then the functions the running code calls (functions.sql,
 * replaced whole at every start), all in one transaction under the schema's
 * advisory lock (graphile-worker style).
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { StoreIncompatibleError } from "../incompatible.js";
import { PostgresDatabase } from "./database.js";

const here = path.dirname(fileURLToPath(import.meta.url));
/** Where the numbered migrations live, next to this file. */
export const MIGRATIONS_DIR = path.join(here, "migrations");
/** The live definitions of the functions this release calls, applied after the migrations at every start. */
const FUNCTIONS_FILE = path.join(here, "functions.sql");

/** The version of a migration file: its four leading digits. */
function migrationVersion(file: string): number {
  return Number(file.slice(0, 4));
}

/** A migration version as the files name it (7 -> "0007"). */
function migrationName(version: number): string {
  return String(version).padStart(4, "0");
}

/**
 * Why this release must not use a schema, or undefined when it may: the
 * schema holds a migration newer than every file here (a newer release
 * migrated it, and an older replica writing into it could corrupt what the
 * newer one relies on, as graphile-worker refuses too), or lacks a migration
 * below its newest one (applying it now would run it out of order).
 */
export function schemaVersionProblem(
  schema: string,
  applied: readonly number[],
  known: readonly number[],
): string | undefined {
  if (applied.length === 0) return undefined;
  const newestApplied = Math.max(...applied);
  const newestKnown = Math.max(0, ...known);
  if (newestApplied > newestKnown) {
    return (
      `schema ${JSON.stringify(schema)} is at migration ${migrationName(newestApplied)} but this Engram knows migrations up to ${migrationName(newestKnown)}: ` +
      "a newer release migrated it; upgrade this replica (an older replica must not write into a newer schema)"
    );
  }
  const has = new Set(applied);
  const missing = known.filter((v) => v < newestApplied && !has.has(v));
  if (missing.length > 0) {
    return (
      `schema ${JSON.stringify(schema)} is at migration ${migrationName(newestApplied)} but lacks migration ${missing.map(migrationName).join(", ")} ` +
      "that this Engram would have to apply out of order: the schema was altered by hand or by another program; restore it or use a fresh MEMORY_KEY_PREFIX"
    );
  }
  return undefined;
}

/**
 * Applies pending migrations, then the live functions, inside the caller's
 * transaction, under the schema's advisory lock; StoreIncompatibleError
 * (before anything is applied) on a schema this release must not use.
 */
export async function applyMigrations(client: pg.ClientBase, schemaName: string): Promise<void> {
  const schema = pg.escapeIdentifier(schemaName);
  const files = readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{4}_.*\.sql$/.test(f))
    .sort();
  // Replicas starting together queue here; the first applies, the rest find nothing pending.
  await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [`engram:migrate:${schemaName}`]);
  await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await client.query(`SET LOCAL search_path TO ${schema}`);
  await client.query(
    "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
  );
  const { rows } = await client.query<{ version: number }>("SELECT version FROM schema_migrations");
  const applied = new Set(rows.map((r) => r.version));
  // Refused before anything is applied (and the throw rolls the transaction back).
  const problem = schemaVersionProblem(schemaName, [...applied], files.map(migrationVersion));
  if (problem) throw new StoreIncompatibleError(problem);
  for (const file of files) {
    const version = migrationVersion(file);
    if (applied.has(version)) continue;
    await client.query(readFileSync(path.join(MIGRATIONS_DIR, file), "utf8"));
    await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [version, file]);
  }
  // Idempotent (CREATE OR REPLACE), so the live definitions are this file's whatever the migrations left.
  await client.query(readFileSync(FUNCTIONS_FILE, "utf8"));
}

/** Migrates a schema on a pool of its own, for a caller without a store (the API keys). */
export async function migrateSchema(url: string, schema: string): Promise<void> {
  const db = new PostgresDatabase({ url, schema });
  try {
    await db.transaction((client) => applyMigrations(client, schema));
  } finally {
    await db.close();
  }
}
