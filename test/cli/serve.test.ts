/**
 * `engram serve` runs the real server in the CLI's process: it takes the
 * server's flags, serves RPC, REST and the inspector on one port, turns the
 * inspector off with --inspector false, and stops cleanly on SIGTERM.
 */
import { describe, expect, it } from "vitest";
import { runEngram, spawnEngram } from "./run.js";

async function listeningPort(serve: ReturnType<typeof spawnEngram>): Promise<number> {
  const line = await serve.waitForLine((l) => l.includes('"msg":"listening"'), 30_000);
  return JSON.parse(line).port as number;
}

describe("engram serve", () => {
  it("serves the API and the inspector, and exits 0 on SIGTERM", async () => {
    const serve = spawnEngram(["serve", "--host", "127.0.0.1", "--port", "0", "--agent-name", "cli-agent"]);
    try {
      const port = await listeningPort(serve);
      const base = `http://127.0.0.1:${port}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect(await (await fetch(`${base}/memory/sessions`)).json()).toMatchObject({ agent: "cli-agent" });
      const page = await fetch(`${base}/`);
      expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
      expect(await page.text()).toContain("Engram inspector");
      const stats = await runEngram(["stats", "--url", base, "--json"]);
      expect(JSON.parse(stats.stdout).backend).toBe("local");
      expect(await serve.stop("SIGTERM")).toBe(0);
    } finally {
      await serve.stop("SIGKILL");
    }
  });

  it("honours --inspector false and the MEMORY_* environment", async () => {
    const serve = spawnEngram(["serve", "--host", "127.0.0.1", "--port", "0", "--inspector", "false"], {
      MEMORY_CONTEXT_LIMIT: "3",
    });
    try {
      const port = await listeningPort(serve);
      expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(404);
      expect(serve.stdoutLines.find((l) => l.includes("effective configuration"))).toMatch(
        /"contextLimit":3.*"inspector":false|"inspector":false.*"contextLimit":3/,
      );
    } finally {
      await serve.stop("SIGKILL");
    }
  });

  it("exits 2 naming the setting when a server flag is invalid, and lists the settings in --help", async () => {
    const bad = await runEngram(["serve", "--port", "nope"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--port: expected a whole number, got "nope"');
    const help = await runEngram(["serve", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("MEMORY_INSPECTOR (default true)");
  });
});
