/**
 * Context assembly lives in the service, over events read from the store, so
 * every store must give the same context: one session, replayed into a local,
 * a Redis and a PostgreSQL server (real servers, real backends), must answer
 * every request identically, including object content whose key order
 * PostgreSQL's jsonb does not keep.
 */
import pg from "pg";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import { RedisStore } from "../../src/store/redis.js";
import type { StoreLimits } from "../../src/store/types.js";
import { connectClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { ev, sessionWith, type EventSpec, type ContextRequestInit } from "./helpers.js";

const LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
const redisUrl = process.env.MEMORY_TEST_REDIS_URL!;
const postgresUrl = process.env.MEMORY_TEST_POSTGRES_URL!;
const keyPrefix = `ctx${process.pid}`;
const schema = `ctx_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;

const servers: Record<string, TestServer> = {};
const clients: Record<string, MemoryClient> = {};
beforeAll(async () => {
  servers.local = await startTestServer();
  servers.redis = await startTestServer({ store: await RedisStore.open({ url: redisUrl, keyPrefix, limits: LIMITS }) });
  servers.postgres = await startTestServer({
    store: await PostgresStore.open({ url: postgresUrl, schema, limits: LIMITS }),
  });
  for (const [name, s] of Object.entries(servers)) clients[name] = connectClient(s.baseUrl, { binary: true });
});
afterAll(async () => {
  for (const c of Object.values(clients)) c.close();
  for (const s of Object.values(servers)) await s.stop();
  const redis = new Redis(redisUrl);
  const keys = await redis.keys(`${keyPrefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  await redis.quit();
  const admin = new pg.Pool({ connectionString: postgresUrl, max: 1 });
  await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  await admin.end();
});

/** A long session mixing every rendering rule; deterministic. */
function session(): EventSpec[] {
  const topics = ["paris weather", "bridge pier cracks", "rust borrow checker", "python lists", "louvre museum"];
  const events: EventSpec[] = [
    ev.system("You are Engram's test agent."),
    ev.system("Answer in one line.", { section: "role" }),
  ];
  for (let i = 0; i < 120; i++) {
    const topic = topics[i % topics.length];
    switch (i % 8) {
      case 0:
        events.push(ev.user(`Tell me about ${topic}, turn ${i} — ünïcödé 🎉`));
        break;
      case 1:
        // Keys deliberately out of order: jsonb stores them sorted.
        events.push(
          ev.call(
            "search",
            `c${i}`,
            { zeta: i, alpha: topic, mid: { y: [1, 2.5, "x"], b: true } },
            { section: "actions" },
          ),
        );
        events.push(ev.result("search", `c${i}`, { zz: `found ${topic}`, aa: i }, { section: "actions" }));
        break;
      case 2:
        events.push(ev.assistant(`Here is what I know about ${topic}.`));
        break;
      case 3:
        events.push(ev.doc(`Reference document ${i} on ${topic}: ${"details ".repeat(i % 5)}`));
        break;
      case 4:
        events.push({
          type: "finding",
          content: { text: `Finding ${i}: ${topic} matters`, confidence: 0.5 },
          metadata: { section: "findings" },
        });
        break;
      case 5:
        events.push({
          type: "user_message",
          content: [
            { type: "text", text: `Look at ${topic}` },
            { type: "image_url", image_url: { url: `https://example.test/${i}.png` } },
          ],
        });
        break;
      case 6:
        events.push({ type: "delegation_request", content: { task: `research ${topic}`, target_agent: "researcher" } });
        break;
      default:
        events.push(ev.call("pending", `open${i}`)); // never answered
    }
    if (i === 60) events.push(ev.summary("Earlier we covered paris, bridges, rust and python.", 3, 40));
  }
  return events;
}

const requests: Array<[string, ContextRequestInit]> = [
  ["legacy max_events", { maxEvents: 50 }],
  ["default window", {}],
  ["token budget", { tokenBudget: 1500 }],
  ["tight budget, no system preservation", { tokenBudget: 300, preserveSystem: false }],
  ["query with retrieval", { tokenBudget: 800, query: "louvre museum paris" }],
  [
    "sections",
    {
      tokenBudget: 2000,
      sectionBudgets: { documents: 200, actions: 300 },
      sectionPriority: ["documents", "findings", "messages", "actions"],
    },
  ],
  [
    "cl100k and threshold",
    { tokenBudget: 1200, tokenizer: "cl100k_base", query: "rust borrow", retrievalThreshold: 3 },
  ],
  ["chars4", { tokenBudget: 900, tokenizer: "chars4" }],
];

describe("context assembly on the local, Redis and PostgreSQL stores", () => {
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    const events = session();
    for (const name of Object.keys(clients)) ids[name] = await sessionWith(clients[name], events, "same");
  });

  it.each(requests)("answers %s identically", async (_name, req) => {
    const answers = await Promise.all(
      Object.keys(clients).map((name) => clients[name].buildConversationContext({ ...req, sessionId: ids[name] })),
    );
    expect(answers[0].eventsIncluded).toBeGreaterThan(0);
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
    // And again, with warm caches: the same answer.
    expect(await clients.postgres.buildConversationContext({ ...req, sessionId: ids.postgres })).toEqual(answers[0]);
  });
});
