/**
 * The Redis store writes its scripts' commands in RESP itself on one node
 * (RedisScripts.runRaw, appendScript.resp): the bytes must be exactly those
 * ioredis' defined command wrote from the args() arrays, for every script
 * and every shape of append.
 */
import { describe, expect, it } from "vitest";
import { Command } from "ioredis";
import { createHash } from "node:crypto";
import { CLUSTER_BUCKETS, RedisKeys } from "../../src/store/redis/keys.js";
import { respOf } from "../../src/store/redis/script-args.js";
import { loadScripts, RedisScripts } from "../../src/store/redis/script-runner.js";
import {
  appendScript,
  readScript,
  type AppendInput,
  type Reply,
  type ScriptContext,
} from "../../src/store/redis/scripts.js";
import type { StoreLimits } from "../../src/store/types.js";
import type { RedisClient } from "../../src/backends/redis.js";
import { newEvent } from "./conformance.js";

/** What ioredis' defined command (Script.execute) writes for these keys and args. */
function ioredisBytes(name: string, args: Array<string | number>): string {
  const { lua, numberOfKeys } = loadScripts().get(name)!;
  const sha = createHash("sha1").update(lua).digest("hex");
  const command = new Command("evalsha", numberOfKeys === undefined ? [sha, ...args] : [sha, numberOfKeys, ...args], {
    replyEncoding: "utf8",
  });
  return command.toWritable({}) as string;
}

/** A stand-in client: records what RedisScripts sends, answers NOSCRIPT first when asked. */
function fakeClient(noScriptFirst = false) {
  const sent: string[] = [];
  let refuse = noScriptFirst;
  const client: Record<string, unknown> = {
    defineCommand(name: string) {
      // ioredis defines `<name>Buffer` too (bulk strings as Buffers).
      client[name] = client[`${name}Buffer`] = () =>
        Promise.reject(new Error("the defined command is not to be used on one node"));
    },
    sendCommand(command: Command) {
      sent.push(command.toWritable({}) as string);
      if (refuse) {
        refuse = false;
        return Promise.reject(new Error("NOSCRIPT No matching script. Please use EVAL."));
      }
      return Promise.resolve(["NOT_FOUND"] as Reply);
    },
  };
  return { client: client as unknown as RedisClient, sent };
}

const limitsCases: StoreLimits[] = [
  { maxSessions: 1000, maxSessionEvents: 500 },
  { maxSessions: 0, maxSessionEvents: 0, dedupeWindowMs: 0 },
  {
    maxSessions: 10,
    maxSessionEvents: 7,
    dedupeWindowMs: 1234,
    dedupeMaxIds: 9,
    apps: new Map([
      ["capped ✓", { maxSessionEvents: 3 }],
      ["same", { maxSessionEvents: 7 }],
    ]),
  },
];

function appendInputs(): AppendInput[] {
  const tenancies = [
    { appName: "app", userId: "user" },
    { appName: "capped ✓", userId: "ü {x}" },
  ];
  const inputs: AppendInput[] = [];
  for (const sessionId of ["s1", "ü session ✓", "{b3}", ""]) {
    for (const tenancy of tenancies) {
      inputs.push(
        { sessionId, tenancy, events: [newEvent("user_message", "hello ✓")], now: 1_700_000_000_123 },
        {
          sessionId,
          tenancy,
          events: [newEvent("t", { a: [1, "é"] }, { eventId: "mine", metadata: { k: "v" } })],
          expectedSeq: 0,
          now: 5,
          incarnation: "inc-1",
        },
        {
          sessionId,
          tenancy,
          events: [
            newEvent("a", 1, { stateDelta: { "app:x": 1, "user:y": null, s: "z✓" } }),
            newEvent("b", null),
            newEvent("c", "x", { eventId: "id ✓", stateDelta: { q: [1] } }),
          ],
          expectedSeq: 12,
          now: 9,
          ingestBase: 1_700_000_000_123_000,
        },
        { sessionId, tenancy, events: [], now: 1 },
      );
    }
  }
  return inputs;
}

describe("Redis scripts in RESP", () => {
  it("appendScript.resp writes what respOf(args()) writes, on one node and a cluster, with and without its per-session cache", () => {
    for (const limits of limitsCases) {
      for (const keys of [new RedisKeys("p", 0), new RedisKeys("p:✓", CLUSTER_BUCKETS)]) {
        const context: ScriptContext = { keys, limits };
        for (const input of appendInputs()) {
          const expected = respOf(appendScript.args(context, input));
          expect(appendScript.resp!(context, input)).toEqual(expected);
          // Again from the cache; then for another tenancy of the same id (the cached runs must not be used).
          expect(appendScript.resp!(context, input)).toEqual(expected);
          const moved = { ...input, tenancy: { appName: input.tenancy.appName + "2", userId: input.tenancy.userId } };
          expect(appendScript.resp!(context, moved)).toEqual(respOf(appendScript.args(context, moved)));
        }
      }
    }
  });

  it("RedisScripts writes the bytes ioredis' defined commands wrote, and EVAL after NOSCRIPT", async () => {
    const limits = limitsCases[2];
    const keys = new RedisKeys("p", 0);
    const { client, sent } = fakeClient();
    const scripts = new RedisScripts(client, { keys, limits });
    for (const input of appendInputs()) {
      await scripts.run(appendScript, input);
      expect(sent.pop()).toBe(ioredisBytes("append", appendScript.args({ keys, limits }, input)));
    }
    const read = { sessionId: "s ✓", direction: "desc" as const, limit: 20, types: ["a", "ü"] };
    await scripts.run(readScript, read);
    expect(sent.pop()).toBe(ioredisBytes("read", readScript.args({ keys, limits }, read)));

    const refusing = fakeClient(true);
    const input = appendInputs()[1];
    await new RedisScripts(refusing.client, { keys, limits }).run(appendScript, input);
    const { lua } = loadScripts().get("append")!;
    const expectedEval = new Command("eval", [lua, 12, ...appendScript.args({ keys, limits }, input)]).toWritable(
      {},
    ) as string;
    expect(refusing.sent).toEqual([ioredisBytes("append", appendScript.args({ keys, limits }, input)), expectedEval]);
  });
});
