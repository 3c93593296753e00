/**
 * Starts a throw-away Redis Cluster for tests: 3 masters and 3 replicas of
 * Debian's redis-server or another build (startRedisServer, one temp dir each) on free
 * loopback ports, joined with `redis-cli --cluster create --cluster-replicas 1`.
 * It gives the store its `redis+cluster://` URL and the fault tests their
 * levers: kill -9 the master of a key's slot, wait for its replica's
 * promotion, restart a node, move slots between masters, stop everything.
 *
 * Why these settings:
 *   - `cluster-node-timeout 1000`: a killed master is marked failed and its
 *     replica promoted within seconds, so fault tests take seconds;
 *   - `cluster-replica-validity-factor 0`: a replica always stands for
 *     election however long its link was down (a busy 2-core box can starve
 *     the replication link past the default window, leaving a slot without a
 *     master forever);
 *   - `cluster-port` set explicitly: the default bus port is port + 10000,
 *     which may exceed 65535 or be taken for a kernel-picked port;
 *   - AOF on (as the single-node helper): a node restarted after kill -9
 *     comes back with its `nodes.conf` and rejoins as a replica.
 * Start one cluster per test FILE (beforeAll) and share it; every key a test
 * writes carries a prefix of its own.
 */
import { execFile } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { debianBinary, freePort, onPath } from "./host.js";
import type { RedisBuild } from "./redis-builds.js";
import { startRedisServer, type RedisServer } from "./redis-server.js";

const execFileAsync = promisify(execFile);

/** How long a node may stay silent before the others mark it failed (ms). */
export const CLUSTER_NODE_TIMEOUT_MS = 1000;

/** One redis-server of the cluster. */
export interface ClusterNode {
  /** Its place in `nodes` (0..5), stable across restarts. */
  index: number;
  port: number;
  /** "127.0.0.1:<port>", as the cluster names it. */
  address: string;
  /** Its cluster node id (40 hex characters), stable across restarts (kept in nodes.conf). */
  id: string;
  server: RedisServer;
  /** False between kill()/stop and restart. */
  running: boolean;
}

/** A slot or a key (whose slot Redis computes, hash tags included). */
export type SlotOrKey = number | string;

/** A running test cluster; see the file header. */
export interface RedisCluster {
  /** `redis+cluster://` with every node as a seed. */
  url: string;
  nodes: ClusterNode[];
  /** The slot of `key` (CLUSTER KEYSLOT, so hash tags count). */
  slotOf(key: string): Promise<number>;
  /** The node serving `slotOrKey` as master now, as a running node sees it. */
  masterOf(slotOrKey: SlotOrKey): Promise<ClusterNode>;
  /** The slot ranges [from, to] `master` serves, ascending, as a running node sees them. */
  rangesOf(master: ClusterNode): Promise<Array<[number, number]>>;
  /** The replicas of `master`, as a running node sees them. */
  replicasOf(master: ClusterNode): Promise<ClusterNode[]>;
  /** kill -9 of the master serving `slotOrKey`; resolves with that node once it is dead. */
  killMaster(slotOrKey: SlotOrKey): Promise<ClusterNode>;
  /**
   * Waits (bounded) until `failed`'s slots are served by one of its former
   * replicas and every running node reports cluster_state:ok; resolves with the new master.
   */
  waitForFailover(failed: ClusterNode, timeoutMs?: number): Promise<ClusterNode>;
  /** Starts `node` again on its port and dir (its nodes.conf and AOF kept) and waits until the cluster is whole. */
  restartNode(node: ClusterNode): Promise<void>;
  /** SIGSTOP: the node keeps its sockets but answers nothing (a hung or partitioned node) until resume(). */
  pause(node: ClusterNode): void;
  /** SIGCONT after pause(). */
  resume(node: ClusterNode): void;
  /** SIGTERM to every node (each flushes its AOF): the whole cluster is down until restartAll(). */
  stopAll(): Promise<void>;
  /** Restarts every node (stopping any still running) and waits until the cluster is whole: an operator's full restart. */
  restartAll(): Promise<void>;
  /**
   * Moves `slots` to master `to` the way `redis-cli --cluster reshard` does
   * (SETSLOT IMPORTING/MIGRATING, MIGRATE the keys in batches, SETSLOT NODE),
   * but for exactly these slots. `betweenBatches` runs after each batch of
   * keys moves, while the slot is half-migrated (ASK redirects, TRYAGAIN), so
   * a test can interleave reads and writes.
   */
  migrateSlots(
    slots: readonly number[],
    to: ClusterNode,
    opts?: { keysPerBatch?: number; betweenBatches?: () => Promise<void> },
  ): Promise<void>;
  /** `redis-cli --cluster reshard`: moves `count` slots (redis-cli picks which) from master `from` to master `to`. */
  reshard(from: ClusterNode, to: ClusterNode, count: number): Promise<void>;
  /** Waits (bounded) until every running node reports cluster_state:ok and they all agree on who serves every slot. */
  waitForOk(timeoutMs?: number): Promise<void>;
  /** A plain (non-cluster) connection to one node, for admin commands; closed by stop(). */
  admin(node: ClusterNode): Redis;
  /** Stops every node and removes their dirs. */
  stop(): Promise<void>;
}

function redisCliBinary(): Promise<string> {
  return debianBinary({ packageName: "redis-tools", candidates: onPath("redis-cli"), timeoutMs: 300_000 });
}

async function redisCli(args: readonly string[], timeoutMs: number): Promise<string> {
  const binary = await redisCliBinary();
  try {
    const { stdout } = await execFileAsync(binary, args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (err) {
    const { stdout, stderr } = err as { stdout?: string; stderr?: string };
    throw new Error(`redis-cli ${args.join(" ")} failed: ${String(err)}\n${stdout ?? ""}\n${stderr ?? ""}`, {
      cause: err,
    });
  }
}

/** One line of CLUSTER NODES. */
interface NodeLine {
  id: string;
  address: string; // ip:port
  flags: string[];
  masterId: string | undefined;
  /** Slot ranges [from, to] it serves (importing/migrating markers skipped). */
  ranges: Array<[number, number]>;
}

function parseClusterNodes(text: string): NodeLine[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [id, addr, flags, master, , , , , ...slots] = line.trim().split(" ");
      const ranges: Array<[number, number]> = [];
      for (const slot of slots) {
        if (slot.startsWith("[")) continue;
        const [from, to] = slot.split("-").map(Number);
        ranges.push([from, to ?? from]);
      }
      return {
        id,
        address: addr.split("@")[0],
        flags: flags.split(","),
        masterId: master === "-" ? undefined : master,
        ranges,
      };
    });
}

const serves = (line: NodeLine, slot: number) => line.ranges.some(([from, to]) => slot >= from && slot <= to);
const isFailed = (line: NodeLine) => line.flags.includes("fail") || line.flags.includes("fail?");

/** Polls `check` (bounded) until it returns a value; the last error names what was missing. */
async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = String(err);
    }
    if (Date.now() > deadline)
      throw new Error(`cluster: ${what} not reached within ${timeoutMs} ms${last ? ` (${last})` : ""}`);
    await sleep(100);
  }
}

async function startNode(index: number, build: RedisBuild | undefined): Promise<ClusterNode> {
  // The bus port is chosen by us; should another process grab it first, start-up fails: retry with fresh ports.
  for (let attempt = 0; ; attempt++) {
    const busPort = await freePort();
    try {
      const server = await startRedisServer({
        appendonly: true,
        build,
        extraArgs: [
          "--cluster-enabled",
          "yes",
          "--cluster-config-file",
          "nodes.conf",
          "--cluster-node-timeout",
          String(CLUSTER_NODE_TIMEOUT_MS),
          "--cluster-replica-validity-factor",
          "0",
          "--cluster-port",
          String(busPort),
        ],
      });
      return { index, port: server.port, address: `127.0.0.1:${server.port}`, id: "", server, running: true };
    } catch (err) {
      if (attempt >= 2) throw err;
    }
  }
}

/** Starts 3 masters + 3 replicas (of `build`, Debian's by default) and waits until the cluster is whole; see the file header. */
export async function startRedisCluster(opts: { build?: RedisBuild } = {}): Promise<RedisCluster> {
  const nodes: ClusterNode[] = [];
  const admins = new Map<number, Redis>();
  const admin = (node: ClusterNode): Redis => {
    let client = admins.get(node.index);
    if (!client) {
      // No retries and no offline queue: a dead node answers with an error at once, not after a wait.
      // A command timeout too: a paused node must make a query fail, not hang the test.
      client = new Redis({
        host: "127.0.0.1",
        port: node.port,
        lazyConnect: false,
        maxRetriesPerRequest: 0,
        enableOfflineQueue: false,
        retryStrategy: () => 200,
        commandTimeout: 5000,
      });
      client.on("error", () => {}); // a killed node is expected here
      admins.set(node.index, client);
    }
    return client;
  };
  /** A connection to a running node, ready for a command (ioredis reconnects after a restart). */
  const ready = async (node: ClusterNode): Promise<Redis> => {
    const client = admin(node);
    if (client.status !== "ready")
      await until(`connection to ${node.address}`, 10_000, async () => (client.status === "ready" ? true : undefined));
    return client;
  };
  const running = () => nodes.filter((node) => node.running);
  const paused = new Set<number>();
  /** A running node that answers (not paused), to ask for the cluster's view. */
  const witness = () => {
    const node = running().find((candidate) => !paused.has(candidate.index));
    if (!node) throw new Error("cluster: no running node answers");
    return node;
  };
  const byId = (id: string) => nodes.find((node) => node.id === id);
  const viewOf = async (node: ClusterNode) =>
    parseClusterNodes(String(await (await ready(node)).call("CLUSTER", "NODES")));

  const stop = async () => {
    for (const client of admins.values()) client.disconnect();
    admins.clear();
    await Promise.all(nodes.map((node) => node.server.destroy()));
  };

  try {
    for (let index = 0; index < 6; index++) nodes.push(await startNode(index, opts.build));
    for (const node of nodes) node.id = String(await (await ready(node)).call("CLUSTER", "MYID"));
    // redis-cli makes the first three masters and gives each one replica (it may warn that they share a host).
    await redisCli(
      ["--cluster", "create", ...nodes.map((node) => node.address), "--cluster-replicas", "1", "--cluster-yes"],
      60_000,
    );
  } catch (err) {
    await stop();
    throw err;
  }

  const slotOf = async (key: string) => Number(await (await ready(witness())).call("CLUSTER", "KEYSLOT", key));
  const toSlot = async (slotOrKey: SlotOrKey) => (typeof slotOrKey === "number" ? slotOrKey : slotOf(slotOrKey));

  const masterOf = async (slotOrKey: SlotOrKey) => {
    const slot = await toSlot(slotOrKey);
    const view = await viewOf(witness());
    const line = view.find(
      (candidate) => candidate.flags.includes("master") && !isFailed(candidate) && serves(candidate, slot),
    );
    const node = line && byId(line.id);
    if (!node) throw new Error(`cluster: no live master serves slot ${slot}`);
    return node;
  };

  const rangesOf = async (master: ClusterNode) => {
    const line = (await viewOf(witness())).find((candidate) => candidate.id === master.id);
    return [...(line?.ranges ?? [])].sort((a, b) => a[0] - b[0]);
  };

  const replicasOf = async (master: ClusterNode) => {
    const view = await viewOf(witness());
    return view.filter((line) => line.masterId === master.id).map((line) => byId(line.id)!);
  };

  /** Every running node: state ok, slots all assigned, and the same owner for every slot range in every view. */
  const whole = async (): Promise<true | undefined> => {
    let reference: string | undefined;
    for (const node of running()) {
      const info = String(await (await ready(node)).call("CLUSTER", "INFO"));
      if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_assigned:16384")) return undefined;
      const view = await viewOf(node);
      // Every running node must be seen as healthy: a restarted node that others still flag "fail" is not back yet.
      const healthy = new Set(
        view.filter((line) => !isFailed(line) && !line.flags.includes("handshake")).map((line) => line.id),
      );
      if (running().some((other) => !healthy.has(other.id))) return undefined;
      const owners = view
        .filter((line) => line.flags.includes("master") && line.ranges.length > 0)
        .map((line) => `${line.id}:${line.ranges.map((range) => range.join("-")).join(",")}`)
        .sort()
        .join(" ");
      if (reference === undefined) reference = owners;
      else if (owners !== reference) return undefined;
      if (view.find((line) => line.id === node.id)?.flags.includes("slave")) {
        const replication = String(await (await ready(node)).call("INFO", "replication"));
        if (!replication.includes("master_link_status:up")) return undefined;
      }
    }
    return true;
  };
  const waitForOk = async (timeoutMs = 30_000) => {
    await until("every node ok and agreeing", timeoutMs, whole);
  };

  try {
    await waitForOk(60_000);
  } catch (err) {
    await stop();
    throw err;
  }

  const killMaster = async (slotOrKey: SlotOrKey) => {
    const master = await masterOf(slotOrKey);
    await master.server.kill();
    master.running = false;
    return master;
  };

  const waitForFailover = async (failed: ClusterNode, timeoutMs = 30_000) => {
    const promoted = await until(`a replica of ${failed.address} promoted`, timeoutMs, async () => {
      const view = await viewOf(witness());
      const line = view.find(
        (candidate) =>
          formerReplicas.get(failed.id)?.has(candidate.id) &&
          candidate.flags.includes("master") &&
          candidate.ranges.length > 0,
      );
      const node = line && byId(line.id);
      return node?.running ? node : undefined;
    });
    await waitForOk(timeoutMs);
    return promoted;
  };

  // Who replicated whom at creation and after each change: a promotion must come from failed's own replicas.
  const formerReplicas = new Map<string, Set<string>>();
  const recordReplicas = async () => {
    for (const line of await viewOf(witness())) {
      if (!line.masterId) continue;
      const set = formerReplicas.get(line.masterId) ?? new Set<string>();
      set.add(line.id);
      formerReplicas.set(line.masterId, set);
    }
  };
  await recordReplicas();

  const restartNode = async (node: ClusterNode) => {
    await node.server.restart();
    node.running = true;
    await waitForOk();
    await recordReplicas();
  };

  const signal = (node: ClusterNode, sig: NodeJS.Signals) => {
    const pid = node.server.pid;
    if (pid === undefined) throw new Error(`cluster: ${node.address} is not running`);
    process.kill(pid, sig);
  };

  const stopAll = async () => {
    await Promise.all(nodes.map((node) => node.server.stop()));
    for (const node of nodes) node.running = false;
  };

  const restartAll = async () => {
    await stopAll();
    await Promise.all(nodes.map((node) => node.server.restart()));
    for (const node of nodes) node.running = true;
    await waitForOk(60_000);
    await recordReplicas();
  };

  const migrateSlots = async (
    slots: readonly number[],
    to: ClusterNode,
    opts: { keysPerBatch?: number; betweenBatches?: () => Promise<void> } = {},
  ) => {
    const keysPerBatch = opts.keysPerBatch ?? 100;
    let hookError: unknown;
    const target = await ready(to);
    for (const slot of slots) {
      const from = await masterOf(slot);
      if (from.id === to.id) continue;
      const source = await ready(from);
      await target.call("CLUSTER", "SETSLOT", String(slot), "IMPORTING", from.id);
      await source.call("CLUSTER", "SETSLOT", String(slot), "MIGRATING", to.id);
      // Bounded: a slot holds at most the keys a test wrote; 10_000 batches is far beyond any test.
      for (let batch = 0; ; batch++) {
        const keys = (await source.call("CLUSTER", "GETKEYSINSLOT", String(slot), String(keysPerBatch))) as string[];
        if (keys.length === 0) break;
        if (batch >= 10_000)
          throw new Error(`cluster: slot ${slot} still holds keys on ${from.address} after 10000 batches`);
        await source.call("MIGRATE", "127.0.0.1", String(to.port), "", "0", "10000", "REPLACE", "KEYS", ...keys);
        // A failing hook must not leave the slot half-migrated for the next test: finish, then throw.
        if (hookError === undefined)
          await opts
            .betweenBatches?.()
            .catch((err: unknown) => (hookError = err ?? new Error("betweenBatches failed")));
      }
      // Target first, then source, then everyone (what redis-cli does), so no node ever redirects in a loop.
      await target.call("CLUSTER", "SETSLOT", String(slot), "NODE", to.id);
      await source.call("CLUSTER", "SETSLOT", String(slot), "NODE", to.id);
      for (const node of running()) {
        if (node.id === from.id || node.id === to.id) continue;
        const view = await viewOf(node);
        if (view.find((line) => line.id === node.id)?.flags.includes("master"))
          await (await ready(node)).call("CLUSTER", "SETSLOT", String(slot), "NODE", to.id);
      }
    }
    await waitForOk();
    if (hookError !== undefined) throw hookError;
  };

  const reshard = async (from: ClusterNode, to: ClusterNode, count: number) => {
    await redisCli(
      [
        "--cluster",
        "reshard",
        to.address,
        "--cluster-from",
        from.id,
        "--cluster-to",
        to.id,
        "--cluster-slots",
        String(count),
        "--cluster-yes",
        "--cluster-pipeline",
        "100",
      ],
      120_000,
    );
    await waitForOk();
  };

  return {
    url: `redis+cluster://${nodes.map((node) => node.address).join(",")}`,
    nodes,
    slotOf,
    masterOf,
    rangesOf,
    replicasOf,
    killMaster,
    waitForFailover,
    restartNode,
    pause: (node) => {
      signal(node, "SIGSTOP");
      paused.add(node.index);
    },
    resume: (node) => {
      signal(node, "SIGCONT");
      paused.delete(node.index);
    },
    stopAll,
    restartAll,
    migrateSlots,
    reshard,
    waitForOk,
    admin,
    stop,
  };
}
