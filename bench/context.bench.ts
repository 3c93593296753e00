/**
 * Benchmark of BuildConversationContext: server CPU per call over a 500-event
 * session on the local store.
 *
 * - In process: MemoryService over a LocalStore, called directly, CPU from
 *   process.cpuUsage() over many calls (the service's own cost: read, choose,
 *   render, build the response message; no protocol).
 * - Over RPC: `tsx src/main.ts` as a child process driven by a Connect
 *   (binary) client on 127.0.0.1; the server process's CPU is read from
 *   /proc/<pid>/stat, so it includes decoding, encoding and HTTP.
 *
 * `npx tsx bench/context.bench.ts` prints the figures as JSON; bench/run.ts
 * imports runContextBench().
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create, fromJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import {
  BuildConversationContextRequestSchema,
  EventInputSchema,
  MemoryService as MemoryServiceDesc,
  type EventInput,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { DEFAULT_SERVICE_LIMITS } from "../src/service/limits.js";
import { MemoryService } from "../src/service/memory-service.js";
import { LocalStore } from "../src/store/local.js";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import path from "node:path";

/** One scenario's figures. */
export interface ContextBenchScenario {
  name: string;
  /** Calls per second of one core, from the CPU time (not wall time). */
  opsPerSec: number;
  cpuMicrosPerCall: number;
  calls: number;
  eventsInSession: number;
  eventsIncluded: number;
  tokensUsed: number;
}

/** What runContextBench returns: the headline figure (budgeted context, in process) and every scenario. */
export interface ContextBenchResult extends ContextBenchScenario {
  scenarios: ContextBenchScenario[];
  rpc: ContextBenchScenario[];
  notes: string[];
}

const SESSION_EVENTS = 500;
const WORDS =
  "the agent checked the weather report for paris and rome then booked a flight compared hotel prices summarised reviews and asked the user".split(
    " ",
  );

/** A realistic 500-event session: a system prompt, user/assistant turns of 20-60 words, tool calls with results, documents. */
export function benchSession(): EventInput[] {
  const events: EventInput[] = [];
  const text = (i: number, n: number) =>
    Array.from({ length: n }, (_, k) => WORDS[(i * 7 + k * 3) % WORDS.length]).join(" ");
  const add = (eventType: string, content: JsonValue, metadata?: Record<string, JsonValue>) =>
    events.push(
      create(EventInputSchema, {
        eventId: `e${events.length + 1}`,
        eventType,
        content: fromJson(ValueSchema, content),
        metadata: metadata as never,
      }),
    );
  add("system", "You are a travel agent. Be precise and cite your sources.");
  for (let i = 0; events.length < SESSION_EVENTS; i++) {
    switch (i % 5) {
      case 0:
        add("user_message", `${text(i, 20 + (i % 40))} (turn ${i})`);
        break;
      case 1:
        add("tool_call", { tool: "search", tool_call_id: `c${i}`, arguments: { query: text(i, 6), limit: 5 } });
        if (events.length < SESSION_EVENTS)
          add("tool_result", { tool: "search", tool_call_id: `c${i}`, result: text(i + 1, 40) });
        break;
      case 2:
        add("agent_response", text(i, 30 + (i % 30)));
        break;
      case 3:
        add("document", `Document ${i}: ${text(i + 2, 50)}`, { section: "documents" });
        break;
      default:
        add("agent_response", text(i + 3, 25));
    }
  }
  return events;
}

const SCENARIOS: Array<
  [string, Omit<MessageInitShape<typeof BuildConversationContextRequestSchema>, "sessionId" | "$typeName">]
> = [
  ["budget 4000 tokens", { tokenBudget: 4000 }],
  ["whole session, no budget (max_events 500)", { maxEvents: 500 }],
  [
    "sections + budget",
    { tokenBudget: 4000, sectionBudgets: { documents: 1000 }, sectionPriority: ["messages", "documents"] },
  ],
  [
    "budget + query (BM25 over 400 message items and 100 documents)",
    { tokenBudget: 4000, query: "paris hotel prices" },
  ],
  ["legacy (max_events 6)", {}],
];

/** Appends one turn before each measured call, so every call sees a new window (cold caches for the newest event and the BM25 index). */
const GROWING: Array<
  [string, Omit<MessageInitShape<typeof BuildConversationContextRequestSchema>, "sessionId" | "$typeName">]
> = [
  ["budget 4000 tokens, one new event per call", { tokenBudget: 4000 }],
  ["budget + query, one new event per call (BM25 index rebuilt)", { tokenBudget: 4000, query: "paris hotel prices" }],
];
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

function cpuMicros(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** utime + stime of a process, in microseconds (Linux /proc; clock ticks of 10 ms). */
function processCpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

async function inProcess(calls: number): Promise<ContextBenchScenario[]> {
  const store = new LocalStore({ maxSessions: 10, maxSessionEvents: SESSION_EVENTS });
  const service = new MemoryService(store, { limits: DEFAULT_SERVICE_LIMITS, contextLimit: 6, heartbeatMs: 15_000 });
  await store.createSession({ sessionId: "bench", appName: "bench", userId: "bench", metadata: {}, now: Date.now() });
  await service.addEvents({ sessionId: "bench", events: benchSession() } as never);
  const out: ContextBenchScenario[] = [];
  for (const [name, fields] of SCENARIOS) {
    const req = create(BuildConversationContextRequestSchema, { sessionId: "bench", ...fields });
    let last = await service.buildConversationContext(req);
    for (let i = 0; i < 200; i++) last = await service.buildConversationContext(req); // warm-up: JIT, tokenizer load, caches
    const n = fields.query ? Math.ceil(calls / 10) : calls;
    const before = cpuMicros();
    for (let i = 0; i < n; i++) last = await service.buildConversationContext(req);
    const micros = (cpuMicros() - before) / n;
    out.push({
      name,
      opsPerSec: Math.round(1e6 / micros),
      cpuMicrosPerCall: Math.round(micros * 10) / 10,
      calls: n,
      eventsInSession: SESSION_EVENTS,
      eventsIncluded: last.eventsIncluded,
      tokensUsed: last.tokensUsed,
    });
  }
  let turn = 0;
  const append = () =>
    service.addEvent({
      sessionId: "bench",
      event: create(EventInputSchema, {
        eventType: "user_message",
        content: fromJson(ValueSchema, `new turn ${++turn} about hotel prices in paris`),
      }),
    } as never);
  for (const [name, fields] of GROWING) {
    const req = create(BuildConversationContextRequestSchema, { sessionId: "bench", ...fields });
    const n = fields.query ? Math.ceil(calls / 20) : Math.ceil(calls / 5);
    let micros = 0;
    let last = await service.buildConversationContext(req);
    for (let i = 0; i < n; i++) {
      await append();
      const before = cpuMicros();
      last = await service.buildConversationContext(req);
      micros += cpuMicros() - before;
    }
    micros /= n;
    out.push({
      name,
      opsPerSec: Math.round(1e6 / micros),
      cpuMicrosPerCall: Math.round(micros * 10) / 10,
      calls: n,
      eventsInSession: SESSION_EVENTS,
      eventsIncluded: last.eventsIncluded,
      tokensUsed: last.tokensUsed,
    });
  }
  await store.close();
  return out;
}

/** Starts `node --import tsx src/main.ts` (no wrapper process, so its pid is the server's) on a free loopback port. */
async function startServerProcess(): Promise<{ pid: number; baseUrl: string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "--host", "127.0.0.1", "--port", "0"], {
    cwd: REPO_ROOT,
    env: { ...process.env, MEMORY_TYPE: "local" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start in 30 s")), 30_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === "listening" && entry.port) {
          clearTimeout(timer);
          resolve(entry.port);
        }
      } catch {
        // not a log line
      }
    });
    void exited.then(() => reject(new Error("server exited before listening")));
  });
  return {
    pid: child.pid!,
    baseUrl: `http://127.0.0.1:${port}`,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

async function overRpc(calls: number): Promise<ContextBenchScenario[]> {
  const server = await startServerProcess();
  try {
    const client = createClient(
      MemoryServiceDesc,
      createConnectTransport({ baseUrl: server.baseUrl, httpVersion: "1.1", useBinaryFormat: true }),
    );
    await client.createSession({ appName: "bench", userId: "bench", sessionId: "bench" });
    await client.addEvents({ sessionId: "bench", events: benchSession() });
    const out: ContextBenchScenario[] = [];
    for (const [name, fields] of SCENARIOS.slice(0, 2)) {
      const req = { sessionId: "bench", ...fields };
      let last = await client.buildConversationContext(req);
      for (let i = 0; i < 200; i++) last = await client.buildConversationContext(req);
      const before = processCpuMicros(server.pid);
      for (let i = 0; i < calls; i++) last = await client.buildConversationContext(req);
      const micros = (processCpuMicros(server.pid) - before) / calls;
      out.push({
        name: `${name}, over Connect (binary)`,
        opsPerSec: Math.round(1e6 / micros),
        cpuMicrosPerCall: Math.round(micros * 10) / 10,
        calls,
        eventsInSession: SESSION_EVENTS,
        eventsIncluded: last.eventsIncluded,
        tokensUsed: last.tokensUsed,
      });
    }
    // The protocol's own cost, for comparison: a unary call that does next to nothing.
    for (let i = 0; i < 200; i++) await client.getSession({ sessionId: "bench" });
    const before = processCpuMicros(server.pid);
    for (let i = 0; i < calls; i++) await client.getSession({ sessionId: "bench" });
    const micros = (processCpuMicros(server.pid) - before) / calls;
    out.push({
      name: "baseline: GetSession over Connect (binary)",
      opsPerSec: Math.round(1e6 / micros),
      cpuMicrosPerCall: Math.round(micros * 10) / 10,
      calls,
      eventsInSession: SESSION_EVENTS,
      eventsIncluded: 0,
      tokensUsed: 0,
    });
    return out;
  } finally {
    await server.stop();
  }
}

/** Runs every scenario; the headline is the budgeted context in process. */
export async function runContextBench(
  options: { calls?: number; rpcCalls?: number } = {},
): Promise<ContextBenchResult> {
  const scenarios = await inProcess(options.calls ?? 5000);
  const notes: string[] = [];
  let rpc: ContextBenchScenario[] = [];
  try {
    rpc = await overRpc(options.rpcCalls ?? 1000);
  } catch (err) {
    notes.push(`over-RPC measurement skipped: ${err instanceof Error ? err.message : String(err)}`);
  }
  return {
    ...scenarios[0],
    name: `BuildConversationContext, ${SESSION_EVENTS}-event local session, ${scenarios[0].name} (server CPU, in process)`,
    scenarios,
    rpc,
    notes,
  };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  console.log(JSON.stringify(await runContextBench(), null, 2));
}
