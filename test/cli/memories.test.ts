/**
 * `engram memories list|search|forget` against a real server on 127.0.0.1:
 * human tables and --json, scope and validity filters, paging, forgetting
 * by ids and (only with --yes) by scope, and usage mistakes exiting 2.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient } from "@engram-memory/client";
import { startTestServer, type TestServer } from "../support/engram.js";
import { runEngram } from "./run.js";

let server: TestServer;
let memory: MemoryClient;
let url: string;
let lyonFrom: Date;

beforeAll(async () => {
  server = await startTestServer();
  url = server.baseUrl;
  memory = createMemoryClient({ baseUrl: url, protocol: "connect" });
  // Alice moved from Lyon to Porto half an hour ago: the Lyon memory is superseded, kept as of before then.
  lyonFrom = new Date(Date.now() - 3_600_000);
  await memory.writeMemories([
    {
      memoryId: "alice-city",
      appName: "travel-bot",
      userId: "alice",
      key: "city",
      text: "Alice lives in Lyon",
      topics: ["home"],
      validFrom: lyonFrom,
    },
  ]);
  await memory.writeMemories([
    {
      memoryId: "alice-city-2",
      appName: "travel-bot",
      userId: "alice",
      key: "city",
      text: "Alice lives in Porto",
      topics: ["home"],
      validFrom: new Date(lyonFrom.getTime() + 1_800_000),
    },
  ]);
  await memory.writeMemories([
    {
      memoryId: "alice-tea",
      appName: "travel-bot",
      userId: "alice",
      agentId: "barista",
      text: "Alice prefers green tea",
      topics: ["drinks"],
    },
  ]);
  await memory.writeMemories([
    { memoryId: "bob-city", appName: "travel-bot", userId: "bob", text: "Bob lives in Porto too" },
  ]);
  await memory.writeMemories([{ memoryId: "office", appName: "travel-bot", text: "The Porto office opens at nine" }]);
});

afterAll(async () => {
  memory?.close();
  await server?.stop();
});

/** The first column (the memory id, or the score for search) of a table's rows. */
function column(stdout: string, index = 0): string[] {
  return stdout
    .trim()
    .split("\n")
    .slice(1)
    .map((line) => line.split(/\s{2,}/)[index]);
}

describe("engram memories list", () => {
  it("prints a user's memories newest first as a table, valid ones only", async () => {
    const run = await runEngram(["memories", "list", "--url", url, "--app", "travel-bot", "--user", "alice"]);
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^MEMORY\s+USER\s+AGENT\s+SESSION\s+VALID FROM\s+INVALID AT\s+TEXT$/);
    expect(column(run.stdout)).toEqual(["alice-tea", "alice-city-2"]);
    expect(lines[1].split(/\s{2,}/).slice(1, 4)).toEqual(["alice", "barista", "-"]);
    expect(lines[2]).toContain("Alice lives in Porto");
  });

  it("filters by agent, topic, --as-of and --include-invalid, and prints JSON with --json", async () => {
    const agent = JSON.parse(
      (
        await runEngram([
          "memories",
          "list",
          "--url",
          url,
          "--app",
          "travel-bot",
          "--user",
          "alice",
          "--agent",
          "barista",
          "--json",
        ])
      ).stdout,
    );
    expect(agent.memories.map((m: { memory_id: string }) => m.memory_id)).toEqual(["alice-tea"]);
    expect(agent.memories[0]).toMatchObject({
      app_name: "travel-bot",
      user_id: "alice",
      agent_id: "barista",
      text: "Alice prefers green tea",
      topics: ["drinks"],
      invalid_at: "",
    });
    expect(agent.next_page_token).toBe("");

    const home = JSON.parse(
      (
        await runEngram([
          "memories",
          "list",
          "--url",
          url,
          "--app",
          "travel-bot",
          "--topic",
          "home",
          "--include-invalid",
          "--json",
        ])
      ).stdout,
    );
    const byId = Object.fromEntries(home.memories.map((m: { memory_id: string }) => [m.memory_id, m]));
    expect(Object.keys(byId).sort()).toEqual(["alice-city", "alice-city-2"]);
    expect(byId["alice-city"]).toMatchObject({
      superseded_by: "alice-city-2",
      invalid_at: new Date(lyonFrom.getTime() + 1_800_000).toISOString(),
    });

    const then = new Date(lyonFrom.getTime() + 1_000).toISOString();
    const asOf = await runEngram([
      "memories",
      "list",
      "--url",
      url,
      "--app",
      "travel-bot",
      "--user",
      "alice",
      "--topic",
      "home",
      "--as-of",
      then,
    ]);
    expect(column(asOf.stdout)).toEqual(["alice-city"]);
  });

  it("pages with --limit and --page-token, and --all reads every page", async () => {
    const first = JSON.parse(
      (await runEngram(["memories", "list", "--url", url, "--app", "travel-bot", "--limit", "2", "--json"])).stdout,
    );
    expect(first.memories.map((m: { memory_id: string }) => m.memory_id)).toEqual(["office", "bob-city"]);
    const human = await runEngram(["memories", "list", "--url", url, "--app", "travel-bot", "--limit", "2"]);
    expect(human.stderr).toContain(`more: engram memories list --page-token ${first.next_page_token}`);
    const second = JSON.parse(
      (
        await runEngram([
          "memories",
          "list",
          "--url",
          url,
          "--app",
          "travel-bot",
          "--limit",
          "2",
          "--page-token",
          first.next_page_token,
          "--json",
        ])
      ).stdout,
    );
    expect(second.memories.map((m: { memory_id: string }) => m.memory_id)).toEqual(["alice-tea", "alice-city-2"]);
    const all = JSON.parse(
      (await runEngram(["memories", "list", "--url", url, "--app", "travel-bot", "--limit", "1", "--all", "--json"]))
        .stdout,
    );
    expect(all.memories).toHaveLength(4);
    expect(all.next_page_token).toBe("");
  });

  it("says so on stderr when nothing matches", async () => {
    const run = await runEngram(["memories", "list", "--url", url, "--app", "nobody-here"]);
    expect(run).toMatchObject({ code: 0, stdout: "", stderr: "no memories\n" });
  });
});

describe("engram memories search", () => {
  it("ranks what a user may recall by a query: theirs and the app-wide ones, never another user's", async () => {
    const run = await runEngram([
      "memories",
      "search",
      "--url",
      url,
      "--app",
      "travel-bot",
      "--user",
      "alice",
      "--query",
      "lives in Porto",
    ]);
    expect(run.code).toBe(0);
    expect(run.stdout.split("\n")[0]).toMatch(/^SCORE\s+MEMORY\s+USER/);
    const ids = column(run.stdout, 1);
    expect(ids[0]).toBe("alice-city-2");
    expect(ids).toContain("office");
    expect(ids).not.toContain("bob-city");
    expect(ids).not.toContain("alice-tea"); // another agent's: not visible without --agent
    expect(Number(column(run.stdout, 0)[0])).toBeGreaterThan(0);
  });

  it("takes --top-k, --topic, --as-of, --session and prints JSON with --json", async () => {
    const top = JSON.parse(
      (
        await runEngram([
          "memories",
          "search",
          "--url",
          url,
          "--app",
          "travel-bot",
          "--user",
          "alice",
          "--query",
          "Porto",
          "--top-k",
          "1",
          "--json",
        ])
      ).stdout,
    );
    expect(top.results).toHaveLength(1);
    expect(top.results[0].memory.memory_id).toBe("alice-city-2");
    expect(top.results[0].score).toBeGreaterThan(0);
    expect(top.results[0].lexical_score).toBeGreaterThan(0);

    const then = new Date(lyonFrom.getTime() + 1_000).toISOString();
    const past = JSON.parse(
      (
        await runEngram([
          "memories",
          "search",
          "--url",
          url,
          "--app",
          "travel-bot",
          "--user",
          "alice",
          "--topic",
          "home",
          "--query",
          "lives",
          "--as-of",
          then,
          "--json",
        ])
      ).stdout,
    );
    expect(past.results.map((r: { memory: { memory_id: string } }) => r.memory.memory_id)).toEqual(["alice-city"]);

    await memory.writeMemories([
      { memoryId: "desk-key", appName: "desk-bot", sessionId: "s-1", text: "The office key is under the mat" },
      { memoryId: "desk-other", appName: "desk-bot", sessionId: "s-2", text: "The office printer is broken" },
      { memoryId: "desk-shared", appName: "desk-bot", text: "The office opens at nine" },
    ]);
    const inSession = JSON.parse(
      (
        await runEngram([
          "memories",
          "search",
          "--url",
          url,
          "--app",
          "desk-bot",
          "--session",
          "s-1",
          "--query",
          "office",
          "--json",
        ])
      ).stdout,
    );
    expect(inSession.results.map((r: { memory: { memory_id: string } }) => r.memory.memory_id).sort()).toEqual([
      "desk-key",
      "desk-shared",
    ]);
  });

  it("refuses --as-of with --include-invalid, a bad time or --top-k, exiting 2, and reports the server's refusal with 1", async () => {
    const both = await runEngram([
      "memories",
      "search",
      "--url",
      url,
      "--app",
      "travel-bot",
      "--as-of",
      "2024-01-01T00:00:00Z",
      "--include-invalid",
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--as-of and --include-invalid cannot be combined");
    const badTime = await runEngram([
      "memories",
      "search",
      "--url",
      url,
      "--app",
      "travel-bot",
      "--as-of",
      "last week",
    ]);
    expect(badTime.code).toBe(2);
    expect(badTime.stderr).toContain("--as-of: expected an ISO 8601 time");
    const badTopK = await runEngram(["memories", "search", "--url", url, "--app", "travel-bot", "--top-k", "0"]);
    expect(badTopK.code).toBe(2);
    expect(badTopK.stderr).toContain("--top-k: expected a whole number ≥ 1");
    const noApp = await runEngram(["memories", "search", "--url", url, "--query", "x"]);
    expect(noApp.code).toBe(2);
    expect(noApp.stderr).toContain("--app");
    const tooMany = await runEngram(["memories", "search", "--url", url, "--app", "travel-bot", "--top-k", "101"]);
    expect(tooMany.code).toBe(1);
    expect(tooMany.stderr).toContain("top_k");
  });
});

describe("engram memories forget", () => {
  it("forgets memories by id and says how many", async () => {
    await memory.writeMemories([
      { memoryId: "f-1", appName: "forget-bot", userId: "carol", text: "one" },
      { memoryId: "f-2", appName: "forget-bot", userId: "carol", text: "two" },
    ]);
    const human = await runEngram(["memories", "forget", "f-1", "f-absent", "--url", url, "--app", "forget-bot"]);
    expect(human).toMatchObject({ code: 0, stdout: "forgot 1 memories\n" });
    const json = await runEngram(["memories", "forget", "f-2", "--url", url, "--app", "forget-bot", "--json"]);
    expect(JSON.parse(json.stdout)).toEqual({ deleted_count: 1 });
  });

  it("forgets a scope only with --yes, and leaves other scopes alone", async () => {
    await memory.writeMemories([
      { memoryId: "s-1", appName: "forget-bot", userId: "dan", text: "one" },
      { memoryId: "s-2", appName: "forget-bot", userId: "dan", agentId: "a", text: "two" },
      { memoryId: "s-keep", appName: "forget-bot", userId: "eve", text: "kept" },
    ]);
    const unconfirmed = await runEngram(["memories", "forget", "--url", url, "--app", "forget-bot", "--user", "dan"]);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stderr).toContain("add --yes to confirm");
    expect((await memory.getMemory("forget-bot", "s-1")).text).toBe("one");

    const confirmed = await runEngram([
      "memories",
      "forget",
      "--url",
      url,
      "--app",
      "forget-bot",
      "--user",
      "dan",
      "--yes",
      "--json",
    ]);
    expect(confirmed.code).toBe(0);
    expect(JSON.parse(confirmed.stdout)).toEqual({ deleted_count: 2 });
    expect((await memory.getMemory("forget-bot", "s-keep")).text).toBe("kept");
  });

  it("refuses ids together with a scope, and neither, exiting 2", async () => {
    const both = await runEngram([
      "memories",
      "forget",
      "x",
      "--url",
      url,
      "--app",
      "forget-bot",
      "--user",
      "eve",
      "--yes",
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("not both");
    const neither = await runEngram(["memories", "forget", "--url", url, "--app", "forget-bot", "--yes"]);
    expect(neither.code).toBe(2);
    expect(neither.stderr).toContain("name memory ids, or a scope");
    expect((await memory.getMemory("forget-bot", "s-keep")).text).toBe("kept");
  });

  it("forgets a whole app with --scope-match within --yes", async () => {
    await memory.writeMemories([
      { memoryId: "app-1", appName: "wipe-bot", text: "shared" },
      { memoryId: "app-2", appName: "wipe-bot", userId: "fay", text: "fay's" },
    ]);
    const run = await runEngram([
      "memories",
      "forget",
      "--url",
      url,
      "--app",
      "wipe-bot",
      "--scope-match",
      "within",
      "--yes",
    ]);
    expect(run).toMatchObject({ code: 0, stdout: "forgot 2 memories\n" });
  });
});
