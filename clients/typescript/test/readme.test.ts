/**
 * The README's examples are examples/quickstart.mjs and examples/memories.mjs,
 * and they run as written against a real server (their fixed URL rewritten to
 * the test server's port), importing the package by name as a user would.
 */
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";

const run = promisify(execFile);
const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const URL_IN_EXAMPLE = '"http://127.0.0.1:8000"';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server?.stop());

/** Runs examples/<name> as written, but against the test server; returns its stdout. */
async function runExample(name: string): Promise<string> {
  const example = readFileSync(path.join(PACKAGE, "examples", name), "utf8");
  const readme = readFileSync(path.join(PACKAGE, "README.md"), "utf8");
  expect(readme).toContain("```js\n" + example + "```");
  expect(example).toContain(URL_IN_EXAMPLE);
  // Next to the original, so "@engram-memory/client" resolves as it does for the example.
  const patched = path.join(PACKAGE, "examples", `.${name.replace(/\.mjs$/, "")}-${process.pid}.mjs`);
  writeFileSync(patched, example.replace(URL_IN_EXAMPLE, JSON.stringify(server.baseUrl)));
  try {
    const { stdout } = await run(process.execPath, [patched], { timeout: 30_000 });
    return stdout;
  } finally {
    rmSync(patched, { force: true });
  }
}

it("the README's example is examples/quickstart.mjs and runs as written", async () => {
  const stdout = await runExample("quickstart.mjs");
  expect(stdout).toContain("1 user_message What is the weather in Paris?");
  expect(stdout).toContain("User: What is the weather in Paris?");
});

it("the README's long-term memory example is examples/memories.mjs and runs as written", async () => {
  const stdout = await runExample("memories.mjs");
  expect(stdout).toContain("superseded [ 'drink-1' ]");
  expect(stdout).toMatch(/^found drink-2 Alice switched to green tea$/m);
  expect(stdout).not.toMatch(/^found drink-1/m);
  expect(stdout).toMatch(/^listed drink-2 holds$/m);
  expect(stdout).toMatch(/^listed drink-1 until \d{4}-/m);
  expect(stdout).toMatch(/## Core memories\n- \d{4}-\d\d-\d\d: The shop opens at nine/);
  expect(stdout).toContain("Alice switched to green tea");
  expect(stdout).toContain("Can I order a drink?");
  expect(stdout).toMatch(/^tokens \d+ of 1000$/m);
  expect(stdout).toMatch(/^forgot 2$/m);
});
