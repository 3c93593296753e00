/**
 * The documentation's shell examples, run as written: every line of the
 * long-term memory example of docs/memories.md (curl over Connect's JSON,
 * grpcurl over gRPC with reflection) and of the README's five-minute tour,
 * against a real server, only localhost:8000 swapped for the test server's
 * address. A documented example that stops working fails here.
 */
import { execFile, execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/engram.js";

const run = promisify(execFile);
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/**
 * The commands of the ```sh block of `page` that starts with `firstLine`:
 * continuation lines joined, a quoted argument spanning lines kept whole,
 * comments and blank lines dropped.
 */
function shellCommands(page: string, firstLine: string): string[] {
  const text = readFileSync(path.join(REPO_ROOT, page), "utf8");
  const start = text.indexOf("```sh\n" + firstLine);
  expect(start, `${page}'s example starting ${firstLine}`).toBeGreaterThan(0);
  const block = text.slice(start + "```sh\n".length, text.indexOf("\n```", start + 1));
  const commands: string[] = [];
  let pending = "";
  for (const line of block.replace(/\\\n\s*/g, "").split("\n")) {
    if (pending === "" && (line.trim() === "" || line.startsWith("#"))) continue;
    pending = pending === "" ? line : `${pending}\n${line}`;
    // A single-quoted JSON body may span lines: the command ends where its quotes are balanced.
    if ((pending.match(/'/g) ?? []).length % 2 === 0) {
      commands.push(pending);
      pending = "";
    }
  }
  expect(pending, `${page}: a quote left open`).toBe("");
  return commands;
}

/** Runs each command in order against `server`; each answer parsed as JSON, none of them an error. */
async function runInOrder(
  commands: readonly string[],
  server: TestServer,
  pathPrefix = "",
): Promise<Array<Record<string, unknown>>> {
  const outputs: Array<Record<string, unknown>> = [];
  // One at a time, in order (the server runs in this process: a synchronous spawn would block it).
  for (const command of commands) {
    const local = command.replaceAll("localhost:8000", `127.0.0.1:${server.port}`);
    const { stdout } = await run("bash", ["-c", local], {
      encoding: "utf8",
      env: { ...process.env, PATH: `${pathPrefix}${process.env.PATH}` },
      timeout: 30_000,
    });
    const json = JSON.parse(stdout) as Record<string, unknown>;
    // An error answer is JSON too: it carries a code.
    expect(json.code, `${command}\n${stdout}`).toBeUndefined();
    outputs.push(json);
  }
  return outputs;
}

describe("docs/memories.md: the long-term memory example works as written", () => {
  let server: TestServer;
  let grpcurlDir: string;
  beforeAll(async () => {
    server = await startTestServer();
    grpcurlDir = path.dirname(
      execFileSync(path.join(REPO_ROOT, "test/support/grpcurl.sh"), { encoding: "utf8", timeout: 600_000 }).trim(),
    );
  }, 660_000);
  afterAll(() => server?.stop());

  it("runs every curl and grpcurl line: the newer preference supersedes the older, and Recall and search find it", async () => {
    const commands = shellCommands("docs/memories.md", "# Write a preference for alice");
    expect(commands.filter((c) => c.startsWith("curl")).length).toBe(5);
    expect(commands.filter((c) => c.startsWith("grpcurl")).length).toBe(1);
    const outputs = await runInOrder(commands, server, `${grpcurlDir}:`);
    type Wire = { memory_id: string };
    const [, second, search, listing, , recall] = outputs as [
      unknown,
      { superseded: Wire[] },
      { results: { memory: Wire }[] },
      { memories: { memoryId: string }[] },
      unknown,
      { memories: { memory: Wire }[]; text: string },
    ];
    expect(second.superseded.map((m) => m.memory_id)).toEqual(["drink-1"]);
    expect(search.results.map((r) => r.memory.memory_id)).toEqual(["drink-2"]);
    expect(listing.memories.map((m) => m.memoryId)).toEqual(["drink-2", "drink-1"]);
    expect(recall.memories.map((r) => r.memory.memory_id)).toEqual(["drink-2"]);
    expect(recall.text).toContain("Alice switched to green tea");
  });

  it("grpcurl decodes an error's google.rpc details through reflection", async () => {
    const args = [
      "-plaintext",
      "-d",
      JSON.stringify({ app_name: "", memory_id: "m" }),
      `127.0.0.1:${server.port}`,
      "engram.v1.MemoryService/GetMemory",
    ];
    const failed = await run(path.join(grpcurlDir, "grpcurl"), args, { encoding: "utf8", timeout: 30_000 }).then(
      () => undefined,
      (err: { stdout: string; stderr: string }) => err,
    );
    expect(failed, "GetMemory without app_name must fail").toBeDefined();
    const printed = `${failed!.stdout}${failed!.stderr}`;
    expect(printed).not.toContain("not recognized");
    expect(printed).toContain("InvalidArgument");
    expect(printed).toContain('"@type": "type.googleapis.com/google.rpc.BadRequest"');
    expect(printed).toContain('"field": "app_name"');
  });
});

describe("README: the five-minute tour works as written", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server?.stop());

  it("creates the session, appends, reads, builds the context, writes a memory and recalls it", async () => {
    const commands = shellCommands("README.md", "# A session is an ordered");
    expect(commands).toHaveLength(6);
    type Wire = { seq: string };
    const [created, appended, read, context, written, recall] = (await runInOrder(commands, server)) as [
      { session: { session_id: string } },
      { events: Wire[] },
      { events: Wire[] },
      { messages: { role: string }[]; tokens_used: number },
      { memories: { text: string }[] },
      { text: string },
    ];
    expect(created.session.session_id).toBe("tour-1");
    expect(appended.events.map((e) => e.seq)).toEqual(["1", "2", "3"]);
    expect(read.events.map((e) => e.seq)).toEqual(["2", "3"]);
    expect(context.messages.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
    expect(context.tokens_used).toBeLessThanOrEqual(200);
    expect(written.memories.map((m) => m.text)).toEqual(["Alice lives in Lyon"]);
    expect(recall.text).toContain("## Relevant memories\n- ");
    expect(recall.text).toContain("Alice lives in Lyon");
    expect(recall.text).toContain("## Conversation\nUser: I live in Lyon. Plan a weekend in Paris.");
  });
});
