/**
 * Cluster: session state's app: and user: keys live in the app's slot, so a
 * write that changes them is two steps there. The write script checks
 * nothing about them but files them in its bucket's outbox (after
 * statecheck-2.lua checked the caps), then shared-3.lua applies the entry in
 * the app's slot, once (an applied id is remembered), and the entry is
 * removed. An entry left by a replica that died between the two steps is
 * applied by any replica's outbox sweep (OUTBOX_SWEEP_MS).
 *
 * The guarantee is weaker than one node's single atomic script: the shared
 * states change just after the events are stored, not with them (a
 * sharedState read in between sees the old value); a re-driven entry may
 * land after a later change of the same key; two writes racing under a cap
 * may together exceed it. Events, seqs, idempotency and session state keep
 * the one-node guarantees. On one node every method here does nothing.
 */
import { stateTooLarge } from "../state.js";
import type { StateChange } from "../types.js";
import { encodeStateChanges } from "./codec.js";
import type { RedisConnection } from "./connection.js";
import type { Bucket, RedisKeys, Tenancy } from "./keys.js";
import type { RedisScripts } from "./script-runner.js";
import { applySharedScript, stateCheckScript, type OutboxEntry } from "./scripts.js";

/** How often each replica applies outbox entries left behind, and how old an entry must be to count as left. */
const OUTBOX_SWEEP_MS = 10_000;

/** The outboxes of a cluster's buckets: the user and app state changes of writes, applied in the app's slot. */
export class SharedStateOutbox {
  /** The sweep's timer. */
  private sweep?: NodeJS.Timeout;

  constructor(
    private readonly connection: RedisConnection,
    private readonly keys: RedisKeys,
    private readonly scripts: RedisScripts,
  ) {}

  /**
   * Refuses (INVALID_ARGUMENT, as one node's script would) user and app state
   * changes past a cap before the write that carries them runs
   * (statecheck-2.lua). On one node the write script checks them itself.
   */
  async check(tenancy: Tenancy, deltas: readonly StateChange[]): Promise<void> {
    if (!this.keys.clustered) return;
    const changes = sharedChangesOf(deltas);
    if (changes.length === 0) return;
    const refused = await this.connection.call(() => this.scripts.run(stateCheckScript, { tenancy, changes }));
    if (refused) throw stateTooLarge("state_delta", refused.scope, refused.entries, refused.bytes);
  }

  /** Applies one outbox entry in the app's slot (once: shared-3.lua), then removes it from its bucket's outbox. */
  async apply(bucket: Bucket, entry: OutboxEntry): Promise<void> {
    const { app, user, changes } = JSON.parse(entry.value) as {
      app: string;
      user: string;
      changes: Array<[string, string, string]>;
    };
    await this.connection.call(() =>
      this.scripts.run(applySharedScript, {
        tenancy: { appName: app, userId: user },
        changes,
        field: entry.field,
        now: Date.now(),
      }),
    );
    await this.connection.call((redis) => redis.hdel(this.keys.outbox(bucket), entry.field));
  }

  /** Every OUTBOX_SWEEP_MS, applies the entries a replica left behind (it died, or Redis failed, between the two steps). */
  startSweep(): void {
    const sweep = () => {
      this.applyLeft(Date.now() - OUTBOX_SWEEP_MS).catch(() => {
        // Redis unreachable: the next sweep tries again.
      });
    };
    this.sweep = setInterval(sweep, OUTBOX_SWEEP_MS);
    this.sweep.unref();
    sweep();
  }

  stopSweep(): void {
    clearInterval(this.sweep);
  }

  /** Applies every outbox entry written before `before` (epoch ms); how many it applied or found applied. */
  async applyLeft(before = Number.POSITIVE_INFINITY): Promise<number> {
    let applied = 0;
    for (const bucket of this.keys.buckets) {
      const entries = await this.connection.call((redis) => redis.hgetall(this.keys.outbox(bucket)));
      for (const [field, value] of Object.entries(entries)) {
        if ((JSON.parse(value) as { at: number }).at >= before) continue;
        await this.apply(bucket, { field, value });
        applied++;
      }
    }
    return applied;
  }

  /** Drops every outbox entry of one user (DeleteUserData): applied later, they would bring the user's state back. */
  async drop(tenancy: Tenancy): Promise<void> {
    if (!this.keys.clustered) return;
    for (const bucket of this.keys.buckets) {
      const entries = await this.connection.call((redis) => redis.hgetall(this.keys.outbox(bucket)));
      const fields = Object.entries(entries)
        .filter(([, value]) => {
          const { app, user } = JSON.parse(value) as { app: string; user: string };
          return app === tenancy.appName && user === tenancy.userId;
        })
        .map(([field]) => field);
      if (fields.length > 0) await this.connection.call((redis) => redis.hdel(this.keys.outbox(bucket), ...fields));
    }
  }
}

/** The user ("u") and app ("a") state changes of some events or an update, in order, as [scope, key, value] (encodeStateChanges). */
function sharedChangesOf(deltas: readonly StateChange[]): Array<[string, string, string]> {
  const out: Array<[string, string, string]> = [];
  for (const delta of deltas) {
    const flat = encodeStateChanges(delta);
    for (let i = 1; i < flat.length; i += 3) {
      if (flat[i] === "u" || flat[i] === "a") out.push([String(flat[i]), String(flat[i + 1]), String(flat[i + 2])]);
    }
  }
  return out;
}
