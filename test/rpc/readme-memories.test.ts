/**
 * The README's long-term memory example, run as written: every line of its
 * shell block (curl over Connect's JSON, grpcurl over gRPC with reflection)
 * against a real server, only localhost:8000 swapped for the test server's
 * address. A README example that stops working fails here.
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

/** The commands of the README's long-term memory example: its shell block, continuation lines joined, comments dropped. */
function readmeMemoryCommands(): string[] {
  const readme = readFileSync(path.join(REPO_ROOT, "README.md"), "utf8");
  const start = readme.indexOf("```sh\n# Write a preference for alice");
  expect(start, "the README's long-term memory example").toBeGreaterThan(0);
  const block = readme.slice(start + "```sh\n".length, readme.indexOf("\n```", start + 1));
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .filter((line) => line.trim() !== "" && !line.startsWith("#"));
}

describe("README: the long-term memory example works as written", () => {
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
    const commands = readmeMemoryCommands();
    expect(commands.filter((c) => c.startsWith("curl")).length).toBe(5);
    expect(commands.filter((c) => c.startsWith("grpcurl")).length).toBe(1);
    const outputs: Array<Record<string, unknown>> = [];
    // One at a time, in order (the server runs in this process: a synchronous spawn would block it).
    for (const command of commands) {
      const local = command.replaceAll("localhost:8000", `127.0.0.1:${server.port}`);
      const { stdout } = await run("bash", ["-c", local], {
        encoding: "utf8",
        env: { ...process.env, PATH: `${grpcurlDir}:${process.env.PATH}` },
        timeout: 30_000,
      });
      const json = JSON.parse(stdout) as Record<string, unknown>;
      // An error answer is JSON too: it carries a code.
      expect(json.code, `${command}\n${stdout}`).toBeUndefined();
      outputs.push(json);
    }
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
