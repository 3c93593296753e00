/**
 * The replica suite on PostgreSQL: a dedicated server that the suite may
 * interrupt (pg_terminate_backend on every connection, LISTEN included) and
 * stop; never the shared test PostgreSQL other files use.
 */
import { readdirSync, readFileSync } from "node:fs";
import { startPostgresServer, type PostgresServer } from "../support/postgres-server.js";
import { describeReplicaSuite } from "./suite.js";

let server: PostgresServer | undefined;
const keyPrefix = `replicas_${process.pid}`;

/**
 * Replica processes this file started that outlived their kill: SIGKILL of
 * the `tsx` launcher does not reach the node process it spawned. Found by the
 * key prefix only this file uses.
 */
function leftoverReplicas(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const env = readFileSync(`/proc/${entry}/environ`, "latin1").split("\0");
      if (env.includes("MEMORY_TYPE=postgres") && env.includes(`MEMORY_KEY_PREFIX=${keyPrefix}`))
        pids.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return pids;
}

describeReplicaSuite(
  () => ({
    name: "postgres",
    env: () => ({ MEMORY_TYPE: "postgres", MEMORY_POSTGRES_URL: server!.url, MEMORY_KEY_PREFIX: keyPrefix }),
    // The terminating session is itself proof that the server answers again.
    interrupt: async () => {
      await server!.terminateBackends();
    },
    outage: async () => {
      await server!.halt();
      return () => server!.start();
    },
  }),
  {
    beforeAll: async () => {
      server = await startPostgresServer();
    },
    afterAll: async () => {
      if (process.platform === "linux") for (const pid of leftoverReplicas()) process.kill(pid, "SIGKILL");
      await server?.stop();
    },
  },
);
