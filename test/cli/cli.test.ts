/**
 * The `engram` binary against real servers on 127.0.0.1: every subcommand,
 * human tables and --json, usage and call errors with their exit statuses,
 * API keys, and `tail` following live and resuming after the server restarts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient } from "@engram-memory/client";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { LocalStore } from "../../src/store/local.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { runEngram, spawnEngram } from "./run.js";

let server: TestServer;
let memory: MemoryClient;
let url: string;

beforeAll(async () => {
  server = await startTestServer();
  url = server.baseUrl;
  memory = createMemoryClient({ baseUrl: url, protocol: "connect" });
  await memory.createSession("weather-bot", "alice", "s-alice", { channel: "web" });
  await memory.createSession("weather-bot", "bob", "s-bob");
  await memory.createSession("billing-bot", "alice", "s-billing");
  await memory.addEvent("s-alice", "user_message", "What is the weather in Paris?");
  await memory.addEvent(
    "s-alice",
    "tool_call",
    { tool: "weather", arguments: { city: "Paris" }, tool_call_id: "c1" },
    undefined,
    { eventId: "c1" },
  );
  await memory.addEvent("s-alice", "tool_result", { tool: "weather", result: "18°C, sunny", tool_call_id: "c1" });
  await memory.addEvent("s-alice", "agent_response", "It is 18°C and sunny in Paris.");
});

afterAll(async () => {
  memory?.close();
  await server?.stop();
});

describe("engram sessions", () => {
  it("prints a table of sessions", async () => {
    const run = await runEngram(["sessions", "--url", url]);
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^SESSION\s+APP\s+USER\s+EVENTS\s+HEAD\s+UPDATED$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 5))).toEqual([
      ["s-alice", "weather-bot", "alice", "4", "4"],
      ["s-billing", "billing-bot", "alice", "0", "0"],
      ["s-bob", "weather-bot", "bob", "0", "0"],
    ]);
  });

  it("filters by app and user, takes the URL from ENGRAM_URL, and prints JSON with --json", async () => {
    const run = await runEngram(["sessions", "--app", "weather-bot", "--user", "alice", "--json"], {
      env: { ENGRAM_URL: url },
    });
    expect(run.code).toBe(0);
    const out = JSON.parse(run.stdout);
    expect(out.next_page_token).toBe("");
    expect(out.sessions).toHaveLength(1);
    expect(out.sessions[0]).toMatchObject({
      session_id: "s-alice",
      app_name: "weather-bot",
      user_id: "alice",
      metadata: { channel: "web" },
      head_seq: 4,
      event_count: 4,
    });
  });

  it("pages with --limit and --page-token, and --all reads every page", async () => {
    const first = JSON.parse((await runEngram(["sessions", "--url", url, "--limit", "2", "--json"])).stdout);
    expect(first.sessions.map((s: { session_id: string }) => s.session_id)).toEqual(["s-alice", "s-billing"]);
    expect(first.next_page_token).not.toBe("");
    const human = await runEngram(["sessions", "--url", url, "--limit", "2"]);
    expect(human.stderr).toContain(`more: engram sessions --page-token ${first.next_page_token}`);
    const second = JSON.parse(
      (await runEngram(["sessions", "--url", url, "--limit", "2", "--page-token", first.next_page_token, "--json"]))
        .stdout,
    );
    expect(second.sessions.map((s: { session_id: string }) => s.session_id)).toEqual(["s-bob"]);
    const all = JSON.parse((await runEngram(["sessions", "--url", url, "--limit", "1", "--all", "--json"])).stdout);
    expect(all.sessions).toHaveLength(3);
  });
});

describe("engram events", () => {
  it("prints a session's events as a table", async () => {
    const run = await runEngram(["events", "s-alice", "--url", url]);
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^SEQ\s+TIME\s+TYPE\s+EVENT ID\s+CONTENT$/);
    expect(lines).toHaveLength(5);
    expect(lines[2]).toMatch(
      /^2\s+\S+Z\s+tool_call\s+c1\s+\{"tool":"weather","arguments":\{"city":"Paris"\},"tool_call_id":"c1"\}$/,
    );
    expect(lines[4]).toContain("It is 18°C and sunny in Paris.");
  });

  it("filters by type, --tail and --after, and prints KAOS-shaped JSON", async () => {
    const typed = JSON.parse(
      (await runEngram(["events", "s-alice", "--url", url, "--type", "tool_call", "--type", "tool_result", "--json"]))
        .stdout,
    );
    expect(typed.map((e: { seq: number }) => e.seq)).toEqual([2, 3]);
    expect(typed[0]).toEqual({
      event_id: "c1",
      timestamp: expect.stringMatching(/Z$/),
      event_type: "tool_call",
      content: { tool: "weather", arguments: { city: "Paris" }, tool_call_id: "c1" },
      metadata: {},
      seq: 2,
      session_id: "s-alice",
    });
    const tail = JSON.parse((await runEngram(["events", "s-alice", "--url", url, "--tail", "1", "--json"])).stdout);
    expect(tail.map((e: { seq: number }) => e.seq)).toEqual([4]);
    const after = JSON.parse((await runEngram(["events", "s-alice", "--url", url, "--after", "2", "--json"])).stdout);
    expect(after.map((e: { seq: number }) => e.seq)).toEqual([3, 4]);
  });

  it("exits 1 naming the field when the session does not exist", async () => {
    const run = await runEngram(["events", "no-such-session", "--url", url]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('session_id: session "no-such-session" not found');
  });
});

describe("engram stats and context", () => {
  it("prints the store's totals", async () => {
    const human = await runEngram(["stats", "--url", url]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^sessions\s+3$/m);
    expect(human.stdout).toMatch(/^events\s+4$/m);
    expect(human.stdout).toMatch(/^backend\s+local$/m);
    const json = JSON.parse((await runEngram(["stats", "--url", url, "--json"])).stdout);
    expect(json).toEqual({
      total_sessions: 3,
      total_events: 4,
      avg_events_per_session: expect.any(Number),
      backend: "local",
    });
  });

  it("prints the context for a token budget and never exceeds it", async () => {
    const human = await runEngram(["context", "s-alice", "--url", url, "--budget", "1000"]);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain("User: What is the weather in Paris?");
    expect(human.stdout).toContain("Assistant: It is 18°C and sunny in Paris.");
    expect(human.stderr).toMatch(/-- 4 events included, 0 dropped, \d+ tokens/);
    const small = JSON.parse(
      (await runEngram(["context", "s-alice", "--url", url, "--budget", "12", "--json"])).stdout,
    );
    expect(small.tokens_used).toBeLessThanOrEqual(12);
    expect(small.events_dropped).toBeGreaterThan(0);
    expect(Array.isArray(small.messages)).toBe(true);
  });
});

describe("usage errors", () => {
  it("exits 2 with a message naming the option", async () => {
    const limit = await runEngram(["sessions", "--url", url, "--limit", "ten"]);
    expect(limit.code).toBe(2);
    expect(limit.stderr).toContain('--limit: expected a whole number ≥ 1, got "ten"');
    const badUrl = await runEngram(["stats", "--url", "ftp://127.0.0.1:1"]);
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toContain("--url: expected http:// or https://");
    const unknown = await runEngram(["nonsense"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command 'nonsense'");
  });

  it("lists every subcommand in --help and exits 0", async () => {
    const help = await runEngram(["--help"]);
    expect(help.code).toBe(0);
    for (const sub of [
      "serve",
      "sessions",
      "events",
      "tail",
      "context",
      "memories",
      "stats",
      "export",
      "import",
      "erase",
    ]) {
      expect(help.stdout).toMatch(new RegExp(`^  ${sub}\\b`, "m"));
    }
  });
});

describe("API keys", () => {
  let dir: string;
  let secured: TestServer;
  let key: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "engram-cli-keys-"));
    const keys = new FileKeyStore(path.join(dir, "keys.json"));
    const generated = generateApiKey({ role: "admin", apps: ["*"] });
    await keys.create(generated.record);
    key = generated.key;
    secured = await startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } });
  });

  afterAll(async () => {
    await secured?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("sends --api-key or ENGRAM_API_KEY as a Bearer token", async () => {
    const without = await runEngram(["stats", "--url", secured.baseUrl]);
    expect(without.code).toBe(1);
    expect(without.stderr).toMatch(/unauthenticated/);
    const flag = await runEngram(["stats", "--url", secured.baseUrl, "--api-key", key, "--json"]);
    expect(flag.code).toBe(0);
    expect(JSON.parse(flag.stdout).backend).toBe("local");
    const env = await runEngram(["sessions", "--url", secured.baseUrl, "--json"], { env: { ENGRAM_API_KEY: key } });
    expect(env.code).toBe(0);
    const grpc = await runEngram(["stats", "--url", secured.baseUrl, "--protocol", "grpc"], {
      env: { ENGRAM_API_KEY: key },
    });
    expect(grpc.code).toBe(0);
  });
});

describe("engram tail", () => {
  it.each(["connect", "grpc"])(
    "prints the newest events, follows new ones live, and resumes after the server restarts (%s)",
    async (protocol) => {
      const store = new LocalStore({ maxSessions: 100, maxSessionEvents: 100 });
      let first: TestServer | undefined = await startTestServer({ store });
      const port = first.port;
      let second: TestServer | undefined;
      const client = createMemoryClient({ baseUrl: first.baseUrl, protocol: "connect" });
      try {
        await client.createSession("app", "user", "live");
        for (let i = 1; i <= 3; i++) await client.addEvent("live", "user_message", `before ${i}`);
        const follow = spawnEngram([
          "tail",
          "live",
          "--url",
          first.baseUrl,
          "-n",
          "2",
          "--json",
          "--protocol",
          protocol,
        ]);
        try {
          await follow.waitForLine((l) => l.includes("before 3"));
          await client.addEvent("live", "agent_response", "live 4");
          await follow.waitForLine((l) => l.includes("live 4"));

          // Restart: the listener goes away (streams end UNAVAILABLE), a new one comes up on the same port and store.
          await first.server.close();
          first = undefined;
          // While it is down, reconnections are refused: tail keeps trying.
          await follow.waitForLine((l) => l.includes("reconnecting (attempt 2)"), 15_000, "stderr");
          second = await startTestServer({ store, config: { port } });
          await client.addEvent("live", "agent_response", "after restart 5");
          await follow.waitForLine((l) => l.includes("after restart 5"), 20_000);
          await client.addEvent("live", "agent_response", "live 6");
          await follow.waitForLine((l) => l.includes("live 6"));

          expect(follow.stderrLines.some((l) => l.includes("reconnecting"))).toBe(true);
          const seqs = follow.stdoutLines.map((l) => JSON.parse(l).seq);
          expect(seqs).toEqual([2, 3, 4, 5, 6]); // the last 2, then live: no gap, no repeat
          expect(await follow.stop("SIGINT")).toBe(0);
        } finally {
          await follow.stop("SIGKILL");
        }
      } finally {
        client.close();
        await first?.server.close();
        await second?.stop();
      }
    },
    60_000,
  );

  it("exits 1 naming the field when the session does not exist", async () => {
    const run = await runEngram(["tail", "no-such-session", "--url", url]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('session_id: session "no-such-session" not found');
  });

  it("prints events in a human format", async () => {
    const follow = spawnEngram(["tail", "s-alice", "--url", url, "-n", "1"]);
    try {
      const line = await follow.waitForLine((l) => l.startsWith("#4"));
      expect(line).toMatch(/^#4 {2}\S+Z {2}agent_response {2}It is 18°C and sunny in Paris\.$/);
      await memory.addEvent("s-alice", "user_message", "thanks");
      await follow.waitForLine((l) => l.startsWith("#5") && l.endsWith("thanks"));
    } finally {
      expect(await follow.stop("SIGINT")).toBe(0);
    }
  });
});

describe("engram erase", () => {
  it("erases every session, event and memory of one user of one app, and says what it removed", async () => {
    await memory.createSession("erase-bot", "carol", "s-erase-1");
    await memory.createSession("erase-bot", "carol", "s-erase-2");
    await memory.addEvent("s-erase-1", "user_message", "forget me");
    await memory.writeMemories([{ appName: "erase-bot", userId: "carol", text: "carol likes tea" }]);
    const human = await runEngram(["erase", "--url", url, "--app", "erase-bot", "--user", "carol"]);
    expect(human.code).toBe(0);
    expect(human.stdout).toBe("erased 2 sessions, 1 events, 1 memories\n");
    const json = await runEngram(["erase", "--url", url, "--app", "erase-bot", "--user", "carol", "--json"]);
    expect(JSON.parse(json.stdout)).toEqual({ removed_sessions: 0, removed_events: 0, removed_memories: 0 });
    // Everyone else is still there.
    expect((await memory.getSession("s-alice")).userId).toBe("alice");
  });

  it("needs both --app and --user", async () => {
    const run = await runEngram(["erase", "--url", url, "--app", "erase-bot"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--user");
  });
});
