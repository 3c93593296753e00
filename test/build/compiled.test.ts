/**
 * The compiled server and CLI (dist/, what `npm start`, the Docker image and
 * the `engram` bin run): built by scripts/build.mjs (only when stale, as
 * `npm start` does), they find their non-TypeScript files (Redis Lua
 * scripts, PostgreSQL migrations, the inspector page), serve real calls on
 * both network stores, and report the package version. The other suites run
 * the TypeScript sources.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { grpcJsClient } from "../support/clients.js";
import { REPO_ROOT, spawnServer } from "../support/engram.js";

const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as { version: string };

beforeAll(() => {
  execFileSync(process.execPath, ["scripts/build.mjs", "--if-stale"], {
    cwd: REPO_ROOT,
    stdio: "inherit",
    timeout: 240_000,
  });
}, 300_000);

describe("the compiled server (node dist/main.js)", () => {
  it.each([
    ["redis", { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL! }],
    ["postgres", { MEMORY_TYPE: "postgres", MEMORY_POSTGRES_URL: process.env.MEMORY_TEST_POSTGRES_URL! }],
  ])(
    "serves calls on %s (its Lua scripts or migrations found next to the compiled code)",
    async (name, env) => {
      const server = await spawnServer({ ...env, MEMORY_KEY_PREFIX: `compiled_${name}_${process.pid}` }, [], {
        compiled: true,
      });
      const client = grpcJsClient(server.address);
      try {
        expect(server.child.spawnargs).toContain("dist/main.js");
        const sessionId = `compiled-${name}`;
        await client.createSession({ appName: "build", userId: "u", sessionId });
        await client.addEvents({ sessionId, events: [{ eventType: "user_message" }, { eventType: "agent_response" }] });
        const { events } = await client.getSessionEvents({ sessionId });
        expect(events.map((e) => Number(e.seq))).toEqual([1, 2]);
        expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);

        const listening = server.lines
          .map((l) => JSON.parse(l) as { msg: string; version?: string })
          .find((l) => l.msg === "listening");
        expect(listening?.version).toBe(version);
        const metrics = await (await fetch(`${server.baseUrl}/metrics`)).text();
        expect(metrics).toContain(`engram_build_info{version="${version}",node="${process.version}"} 1`);
        // The inspector page (inspector/dist) is found from dist/server too.
        const page = await fetch(`${server.baseUrl}/`);
        expect(page.status).toBe(200);
        expect(page.headers.get("content-type")).toMatch(/text\/html/);
      } finally {
        client.close();
        await server.kill();
      }
    },
    60_000,
  );
});

describe("the compiled CLI", () => {
  it("answers --help and --version from dist/cli, directly and through the engram bin", () => {
    for (const entry of ["dist/cli/main.js", "src/cli/bin.mjs"]) {
      const help = execFileSync(process.execPath, [entry, "--help"], {
        cwd: REPO_ROOT,
        encoding: "utf8",
        timeout: 30_000,
      });
      expect(help).toMatch(/^Usage: engram/m);
      expect(help).toContain("serve");
      expect(
        execFileSync(process.execPath, [entry, "--version"], {
          cwd: REPO_ROOT,
          encoding: "utf8",
          timeout: 30_000,
        }).trim(),
      ).toBe(version);
    }
  });
});
