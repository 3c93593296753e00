/**
 * The PostgreSQL functions the server calls live in one file
 * (src/store/postgres/functions.sql), applied at every start after the
 * migrations: whatever definition a migration (or a hand) left, the running
 * one is that file's, and schema_migrations records only the migrations.
 */
import { readdirSync } from "node:fs";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import { MIGRATIONS_DIR } from "../../src/store/postgres/migrations.js";
import { makeSession, newEvent, rejection } from "./fixtures.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const LIMITS = { maxSessions: 100, maxSessionEvents: 100 };
const admin = new pg.Pool({ connectionString: url, max: 1 });
admin.on("error", () => {});
afterAll(() => admin.end());

/** append_many_checked as the schema holds it now: its body, and the whole CREATE OR REPLACE statement. */
async function appendFunction(schema: string): Promise<{ body: string; definition: string }> {
  const { rows } = await admin.query(
    `SELECT p.prosrc AS body, pg_get_functiondef(p.oid) AS definition FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = $1 AND p.proname = 'append_many_checked'`,
    [schema],
  );
  return rows[0];
}

describe("PostgreSQL functions.sql", () => {
  it("replaces at start-up a function a migration or a hand left otherwise, and records only the migrations", async () => {
    const schema = `t_functions_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    const quoted = pg.escapeIdentifier(schema);
    let store = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      const live = await appendFunction(schema);
      // Another body under the same signature, as an older migration's definition would be.
      await admin.query(
        live.definition.replace(
          /AS \$function\$[\s\S]*\$function\$/,
          "AS $function$ BEGIN RAISE EXCEPTION 'stale definition'; END $function$",
        ),
      );
      await makeSession(store, "s1");
      const stale = await rejection(store.appendEvents("s1", [newEvent("user_message", 1)]));
      expect(stale.code).toBe("INTERNAL");
      expect((stale.cause as Error).message).toContain("stale definition");
      await store.close();

      store = await PostgresStore.open({ url, schema, limits: LIMITS });
      expect((await appendFunction(schema)).body).toBe(live.body);
      expect((await store.appendEvents("s1", [newEvent("user_message", 2)])).events.map((e) => e.seq)).toEqual([1]);
      const { rows } = await admin.query(`SELECT name FROM ${quoted}.schema_migrations ORDER BY version`);
      expect(rows.map((r) => r.name)).toEqual(
        readdirSync(MIGRATIONS_DIR)
          .filter((f) => /^\d{4}_.*\.sql$/.test(f))
          .sort(),
      );
    } finally {
      await store.close();
      await admin.query(`DROP SCHEMA IF EXISTS ${quoted} CASCADE`);
    }
  });
});
