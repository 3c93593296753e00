/**
 * A call already sent when the client loses every node of the cluster
 * answers UNAVAILABLE then, not when the cluster comes back. ioredis' Cluster
 * puts a command whose connection closed under it back in its offline queue,
 * where no command timeout applies, so without the store's own give-up the
 * call would wait for the cluster (here: forever, every node being dead).
 * The command timeout is set far above the test's bound, so only the loss of
 * every node can end the call in time. A fresh cluster, dedicated to this
 * file: the kill leaves nothing to restart.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { MemoryError } from "../../src/errors.js";
import { RedisConnection } from "../../src/store/redis/connection.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";

/** Far above ANSWER_BOUND_MS: a call ending in time was not ended by its timeout. */
const COMMAND_TIMEOUT_MS = 120_000;
/** How long the call may take to fail once every node is dead (it takes milliseconds). */
const ANSWER_BOUND_MS = 20_000;

let cluster: RedisCluster | undefined;
let connection: RedisConnection | undefined;

beforeAll(async () => {
  cluster = await startRedisCluster();
  connection = new RedisConnection({
    url: cluster.url,
    keyPrefix: `outage_${process.pid}`,
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
  });
  await connection.connect();
}, 120_000);

afterAll(async () => {
  await connection?.close();
  await cluster?.stop();
});

describe("a Redis Cluster lost while a call waits for its answer", () => {
  it(
    "fails the call UNAVAILABLE once the client loses every node, long before the command timeout",
    async () => {
      const conn = connection!;
      const nodes = cluster!.nodes;
      await conn.call((redis) => redis.set("outage:{a}:k", "v"));

      // Frozen nodes keep their sockets open and answer nothing: the read is sent and waits.
      for (const node of nodes) cluster!.pause(node);
      const read = conn
        .call((redis) => redis.get("outage:{a}:k"))
        .then(
          () => "answered",
          (err: unknown) => err,
        );
      // The read went out on a live connection: a node's connection holds it, waiting for the answer.
      const commands = conn.commands;
      const nodeClients = () => ("nodes" in commands ? commands.nodes() : [commands]);
      await vi.waitFor(() => expect(nodeClients().some((node) => node.commandQueue.length > 0)).toBe(true), {
        timeout: 10_000,
        interval: 10,
      });
      expect(commands.status).toBe("ready");

      // SIGKILL works on stopped processes: every connection closes under the waiting read.
      await Promise.all(nodes.map((node) => node.server.kill()));
      const bound = new Promise((resolve) => setTimeout(() => resolve("still waiting"), ANSWER_BOUND_MS).unref());
      const outcome = await Promise.race([read, bound]);

      expect(outcome).toBeInstanceOf(MemoryError);
      expect((outcome as MemoryError).code).toBe("UNAVAILABLE");
      expect((outcome as MemoryError).message).toMatch(/every node was lost/);
    },
    ANSWER_BOUND_MS + 10_000,
  );
});
