/**
 * The history checker (history.ts) on PostgreSQL: the shared test server,
 * reached through a loopback chaos proxy that blackholes it (connections
 * stay open, bytes vanish).
 */
import { startChaosProxy, type ChaosProxy } from "../support/chaos-proxy.js";
import { describeHistorySuite } from "./history.js";

let proxy: ChaosProxy | undefined;

describeHistorySuite("PostgreSQL blackholed for 20 s under writers and live streams on two replicas", {
  start: async () => {
    const target = new URL(process.env.MEMORY_TEST_POSTGRES_URL!);
    proxy = await startChaosProxy(Number(target.port), target.hostname);
    const proxied = new URL(target);
    proxied.port = String(proxy.port);
    return {
      env: {
        MEMORY_TYPE: "postgres",
        MEMORY_POSTGRES_URL: proxied.toString(),
        MEMORY_KEY_PREFIX: `history${process.pid}`,
      },
      blackhole: async () => proxy!.set({ kind: "blackhole" }),
      pass: async () => proxy!.set({ kind: "pass" }),
    };
  },
  stop: async () => {
    await proxy?.close();
  },
});
