/** The RPC suite on the PostgreSQL store: every server gets its own schema, dropped when it stops. */
import pg from "pg";
import { afterAll } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import { describeRpcSuite } from "./suite.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const admin = new pg.Pool({ connectionString: url, max: 1 });
admin.on("error", () => {});
afterAll(() => admin.end());
let schemas = 0;

describeRpcSuite("postgres", async (limits) => {
  const schema = `rpc_${process.pid}_${++schemas}_${Math.random().toString(36).slice(2, 8)}`;
  const store = await PostgresStore.open({ url, schema, limits });
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  };
  return store;
});
