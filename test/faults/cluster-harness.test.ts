/**
 * The test cluster itself (test/support/redis-cluster.ts): it forms, a key
 * written through one node is read through the cluster client, a kill -9 of
 * a master promotes its replica and keeps the data, slots move with their
 * keys, and the killed node rejoins. The store's own cluster tests rely on
 * each of these levers doing what it says.
 */
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";

let cluster: RedisCluster;
let client: Cluster;

beforeAll(async () => {
  cluster = await startRedisCluster();
  client = new Cluster(
    cluster.nodes.map((node) => ({ host: "127.0.0.1", port: node.port })),
    { clusterRetryStrategy: () => 100 },
  );
  client.on("error", () => {}); // the full-restart case takes every node away
}, 120_000);

afterAll(async () => {
  client?.disconnect();
  await cluster?.stop();
});

describe("the test Redis Cluster", () => {
  it("forms with 3 masters and one replica each, all reporting cluster_state:ok", async () => {
    const masters = new Set<number>();
    for (const slot of [0, 5000, 10_000, 16_383]) masters.add((await cluster.masterOf(slot)).index);
    expect(masters.size).toBe(3);
    for (const index of masters) expect(await cluster.replicasOf(cluster.nodes[index])).toHaveLength(1);
    expect(cluster.url).toMatch(/^redis\+cluster:\/\/(127\.0\.0\.1:\d+,){5}127\.0\.0\.1:\d+$/);
  });

  it("serves a key written through the cluster client from the master of its slot", async () => {
    await client.set("harness:{a}:k", "v1");
    expect(await client.get("harness:{a}:k")).toBe("v1");
    const master = await cluster.masterOf("harness:{a}:k");
    expect(await cluster.admin(master).get("harness:{a}:k")).toBe("v1");
  });

  it("promotes the replica when the master of a key's slot is killed with SIGKILL, and keeps the key", async () => {
    const key = "harness:{failover}:k";
    await client.set(key, "before");
    const before = await cluster.masterOf(key);
    const [replica] = await cluster.replicasOf(before);
    // The replica must hold the key before the master dies: WAIT 1 makes sure it was replicated.
    expect(await cluster.admin(before).call("WAIT", "1", "5000")).toBe(1);

    const killed = await cluster.killMaster(key);
    expect(killed.index).toBe(before.index);
    const promoted = await cluster.waitForFailover(killed);
    expect(promoted.index).toBe(replica.index);
    expect((await cluster.masterOf(key)).index).toBe(replica.index);

    expect(await client.get(key)).toBe("before");
    await client.set(key, "after");
    expect(await client.get(key)).toBe("after");

    await cluster.restartNode(killed);
    expect(await cluster.replicasOf(promoted)).toEqual([expect.objectContaining({ index: killed.index })]);
  }, 60_000);

  it("moves a slot with its keys to another master (migrateSlots) while the client keeps reading it", async () => {
    const keys = Array.from({ length: 250 }, (_, i) => `harness:{moving}:${i}`);
    for (const key of keys) await client.set(key, key);
    const slot = await cluster.slotOf(keys[0]);
    const from = await cluster.masterOf(slot);
    const to = await cluster.masterOf((slot + 8000) % 16_384);
    expect(to.index).not.toBe(from.index);

    let readsDuring = 0;
    await cluster.migrateSlots([slot], to, {
      keysPerBatch: 50,
      betweenBatches: async () => {
        // Half-migrated slot: the client follows ASK redirects for keys already moved.
        expect(await client.get(keys[readsDuring % keys.length])).toBe(keys[readsDuring % keys.length]);
        readsDuring++;
      },
    });
    expect(readsDuring).toBeGreaterThan(0);
    expect((await cluster.masterOf(slot)).index).toBe(to.index);
    expect(await client.mget(...keys)).toEqual(keys);
  }, 60_000);

  it("comes back whole with its data after a full stop and restart (stopAll, restartAll)", async () => {
    await client.set("harness:{restart}:k", "kept");
    expect(await cluster.admin(await cluster.masterOf("harness:{restart}:k")).call("WAIT", "1", "5000")).toBe(1);
    await cluster.stopAll();
    expect(cluster.nodes.map((node) => node.server.pid)).toEqual(cluster.nodes.map(() => undefined));
    await cluster.restartAll();
    expect(await client.get("harness:{restart}:k")).toBe("kept");
  }, 90_000);

  it("reshards slots with redis-cli --cluster reshard", async () => {
    const from = await cluster.masterOf(0);
    const to = await cluster.masterOf(16_383);
    await cluster.reshard(from, to, 10);
    expect((await cluster.masterOf(0)).index).toBe(to.index);
  }, 60_000);
});
