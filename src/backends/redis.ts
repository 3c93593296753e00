/**
 * Opening Redis: the one place Engram makes a client of it, for the store,
 * the API keys and the quotas alike. MEMORY_REDIS_URL names one server
 * (redis://, rediss://: a `Redis`) or a cluster by its seed nodes
 * (redis+cluster://[user:pass@]h1:p1,h2:p2,..., rediss+cluster:// with TLS:
 * an ioredis `Cluster`, which learns the other nodes and follows MOVED/ASK
 * redirections, failovers and resharding); redis-url.ts parses it without
 * loading ioredis.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from "ioredis";
import { parseRedisUrl } from "./redis-url.js";

/** A client of one Redis server or of a Redis Cluster: the commands both run alike. */
export type RedisClient = Redis | Cluster;

/** openRedisClient's options: ioredis' own (per node on a cluster), and sharded pub/sub for a cluster's subscriber. */
export type RedisClientOptions = Omit<RedisOptions, "connectionName" | "retryStrategy" | "enableOfflineQueue"> & {
  /** Cluster only: one subscriber connection per master, for SSUBSCRIBE. */
  shardedSubscribers?: boolean;
};

/** How a connection is named in CLIENT LIST: the key prefix it serves and its role (commands, keys, quotas...). */
export function redisConnectionName(keyPrefix: string, role: string): string {
  return `${keyPrefix}:${role}`;
}

/** Reconnecting: 100 ms, doubling, at most a second apart, for as long as it takes. */
const reconnectDelay = (attempt: number) => Math.min(50 * 2 ** attempt, 1000);

/**
 * A `Redis` for a redis:// or rediss:// URL, a `Cluster` for a
 * redis+cluster:// one, whose connections carry redisConnectionName(keyPrefix,
 * role) and reconnect with reconnectDelay. One node has no offline queue, so
 * a call during an outage fails at once instead of hanging. On a cluster,
 * `options` apply to every node's connection; `lazyConnect` and the offline
 * queue are the cluster's (kept: it holds commands while the client re-learns
 * the slots; a queued command has no timeout of its own, so
 * RedisConnection.call bounds each call). Reads go to masters, so a read sees
 * every write acknowledged before it. Errors get a listener that ignores them
 * (calls fail meanwhile): without one ioredis reports each failed reconnect as
 * unhandled.
 */
export function openRedisClient(url: string, keyPrefix: string, role: string, options: RedisClientOptions = {}) {
  const target = parseRedisUrl(url);
  const { shardedSubscribers, lazyConnect, ...rest } = options;
  const perNode = { ...rest, connectionName: redisConnectionName(keyPrefix, role) };
  let client: RedisClient;
  if (target.kind === "node") {
    client = new Redis(url, { ...perNode, lazyConnect, enableOfflineQueue: false, retryStrategy: reconnectDelay });
  } else {
    const clusterOptions: ClusterOptions = {
      lazyConnect,
      scaleReads: "master",
      shardedSubscribers,
      // No auto-pipelining: a pipeline in which one command is redirected (ASK while a slot migrates) fails
      // every command in it that is not read-only; commands sent one by one are each redirected by ioredis.
      // A failover takes about cluster-node-timeout (seconds): retry redirected and refused commands until then.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 300,
      retryDelayOnTryAgain: 100,
      retryDelayOnMoved: 0,
      maxRedirections: 16,
      slotsRefreshTimeout: 2000,
      clusterRetryStrategy: reconnectDelay,
      redisOptions: {
        ...perNode,
        username: target.username,
        password: target.password,
        tls: target.tls ? {} : undefined,
      },
    };
    client = new Cluster(target.seeds, clusterOptions);
  }
  client.on("error", () => {});
  return client;
}

/**
 * A subscriber beside `client`: the same server or cluster with the same
 * options, named for `role`, not yet connected, and with no command timeout
 * (its only commands are subscriptions). On a cluster a Cluster of its own
 * with one subscriber connection per master (sharded pub/sub), which
 * follows the slots as they move.
 */
export function openRedisSubscriber(client: RedisClient, keyPrefix: string, role: string): RedisClient {
  const ownOptions = { connectionName: redisConnectionName(keyPrefix, role), commandTimeout: undefined };
  const subscriber = isCluster(client)
    ? client.duplicate(undefined, {
        shardedSubscribers: true,
        lazyConnect: true,
        redisOptions: { ...client.options.redisOptions, ...ownOptions },
      })
    : client.duplicate({ ...ownOptions, lazyConnect: true });
  subscriber.on("error", () => {});
  return subscriber;
}

/** True for a cluster client. */
export function isCluster(client: RedisClient): client is Cluster {
  return client instanceof Cluster;
}
