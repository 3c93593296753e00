/**
 * Polyglot end-to-end: on one real server, a Python agent (EngramMemory, gRPC)
 * writes a conversation with tool calls, a Go process (engram-stream, gRPC)
 * follows the session live, and the TypeScript client builds the context.
 * Run on the local store and on Redis. The Python venv and the Go binary are
 * made by this file's setup (clients/python/scripts/venv.sh, go build), so it
 * does not depend on the client suites having run first.
 */
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient } from "../../clients/typescript/src/index.js";
import { REPO_ROOT, spawnServer, type ServerProcess } from "../support/engram.js";

const run = promisify(execFile);
const PYTHON = path.join(REPO_ROOT, "clients/python/.venv/bin/python");
const TURNS = 12;
// Each turn: user_message, tool_call, tool_result, agent_response; the last has two parallel calls.
const EVENTS = TURNS * 4 + 2;

let binDir: string;
let streamBin: string;

beforeAll(async () => {
  binDir = mkdtempSync(path.join(tmpdir(), "engram-e2e-"));
  streamBin = path.join(binDir, "engram-stream");
  await Promise.all([
    run(path.join(REPO_ROOT, "clients/python/scripts/venv.sh"), [], { timeout: 600_000 }),
    run("go", ["build", "-o", streamBin, "./cmd/engram-stream"], {
      cwd: path.join(REPO_ROOT, "clients/go"),
      timeout: 600_000,
    }),
  ]);
}, 900_000);

afterAll(() => rmSync(binDir, { recursive: true, force: true }));

/** Starts `engram-stream` and resolves once it reports having caught up (so it then follows live). */
async function startGoStreamer(baseUrl: string, sessionId: string) {
  const child = spawn(
    streamBin,
    ["-addr", baseUrl, "-session", sessionId, "-count", String(EVENTS), "-timeout", "60s", "-v"],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const lines: string[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => lines.push(line));
  let stderr = "";
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`engram-stream did not catch up in 20 s: ${stderr}`)), 20_000);
    child.stderr!.on("data", (chunk) => {
      stderr += chunk;
      if (stderr.includes("caught up")) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`engram-stream exited with ${code} before catching up: ${stderr}`));
    });
  });
  return { lines, exited, stderr: () => stderr, kill: () => child.kill("SIGKILL") };
}

interface StreamedEvent {
  seq: number;
  event_id: string;
  event_type: string;
  content: unknown;
  session_id: string;
}

function describePolyglot(backend: "local" | "redis", env: () => Record<string, string>) {
  describe(`polyglot end-to-end on the ${backend} store`, () => {
    let server: ServerProcess;
    beforeAll(async () => {
      server = await spawnServer(env());
    });
    afterAll(async () => {
      await server?.kill();
    });

    it("a Python agent writes, a Go process streams it live in order, a TypeScript client builds the context", async () => {
      const ts = createMemoryClient({ baseUrl: server.baseUrl, protocol: "grpc" });
      try {
        const sessionId = `polyglot-${backend}-${process.pid}`;
        await ts.createSession("polyglot", "py-agent", sessionId);
        const go = await startGoStreamer(server.baseUrl, sessionId);
        try {
          const agent = await run(
            PYTHON,
            [path.join(REPO_ROOT, "test/e2e/python_agent.py"), server.address, sessionId, String(TURNS)],
            {
              timeout: 60_000,
            },
          );
          const written = JSON.parse(agent.stdout.trim()) as { events: number; seqs: number[] };
          expect(written.seqs).toEqual(Array.from({ length: EVENTS }, (_, i) => i + 1));

          expect(await go.exited, go.stderr()).toBe(0);
        } finally {
          go.kill();
        }
        const streamed = go.lines.map((line) => JSON.parse(line) as StreamedEvent);
        // Complete and in order: seq 1..n exactly once each, and the same events the log holds.
        expect(streamed.map((e) => e.seq)).toEqual(Array.from({ length: EVENTS }, (_, i) => i + 1));
        const stored = await ts.getSessionEvents(sessionId);
        expect(streamed.map((e) => [e.seq, e.event_id, e.event_type, e.content, e.session_id])).toEqual(
          stored.map((e) => [e.seq, e.eventId, e.eventType, e.content, sessionId]),
        );
        expect(streamed.slice(0, 4).map((e) => e.event_type)).toEqual([
          "user_message",
          "tool_call",
          "tool_result",
          "agent_response",
        ]);

        const context = await ts.buildConversationContext(sessionId, EVENTS);
        expect(context.eventsIncluded).toBe(EVENTS);
        expect(context.eventsDropped).toBe(0);
        const textLines = context.text.split("\n");
        expect(textLines).toHaveLength(TURNS * 2);
        expect(textLines[0]).toBe("User: question 1: weather in city-1?");
        expect(textLines.at(-1)).toBe(`Assistant: answer ${TURNS}: sunny in city-${TURNS}`);

        // Every tool message follows the assistant turn that called it, paired by id.
        const messages = context.messages as Array<{
          role: string;
          tool_calls?: Array<{ id: string }>;
          tool_call_id?: string;
        }>;
        const open = new Set<string>();
        for (const m of messages) {
          for (const call of m.tool_calls ?? []) open.add(call.id);
          if (m.role === "tool") {
            expect(open.has(m.tool_call_id!), `tool result ${m.tool_call_id} without its call`).toBe(true);
            open.delete(m.tool_call_id!);
          }
        }
        expect(open.size).toBe(0);
        const parallel = messages.find((m) => (m.tool_calls?.length ?? 0) === 2);
        expect(parallel?.tool_calls?.map((c) => c.id)).toEqual([`call-${TURNS}-a`, `call-${TURNS}-b`]);
      } finally {
        ts.close();
      }
    }, 180_000);
  });
}

describePolyglot("local", () => ({ MEMORY_TYPE: "local" }));

const redisPrefix = `e2e${process.pid}`;
describePolyglot("redis", () => ({
  MEMORY_TYPE: "redis",
  MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
  MEMORY_KEY_PREFIX: redisPrefix,
}));

afterAll(async () => {
  const admin = new Redis(process.env.MEMORY_TEST_REDIS_URL!);
  try {
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${redisPrefix}:*`, "COUNT", 1000);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== "0");
  } finally {
    await admin.quit();
  }
});
