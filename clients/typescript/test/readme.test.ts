/**
 * The README's example is examples/quickstart.mjs, and it runs as written
 * against a real server (its fixed URL rewritten to the test server's port),
 * importing the package by name as a user would.
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

it("the README's example is examples/quickstart.mjs and runs as written", async () => {
  const example = readFileSync(path.join(PACKAGE, "examples/quickstart.mjs"), "utf8");
  const readme = readFileSync(path.join(PACKAGE, "README.md"), "utf8");
  expect(readme).toContain("```js\n" + example + "```");
  expect(example).toContain(URL_IN_EXAMPLE);
  // Next to the original, so "@engram-memory/client" resolves as it does for the example.
  const patched = path.join(PACKAGE, "examples", `.quickstart-${process.pid}.mjs`);
  writeFileSync(patched, example.replace(URL_IN_EXAMPLE, JSON.stringify(server.baseUrl)));
  try {
    const { stdout } = await run(process.execPath, [patched], { timeout: 30_000 });
    expect(stdout).toContain("1 user_message What is the weather in Paris?");
    expect(stdout).toContain("User: What is the weather in Paris?");
  } finally {
    rmSync(patched, { force: true });
  }
});
