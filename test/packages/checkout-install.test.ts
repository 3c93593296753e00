/**
 * The TypeScript client's install route from a checkout, as its README
 * writes it, run in a temp folder on a copy of the files a clone has (what
 * git tracks: no node_modules, no built dist/): the README's shell lines,
 * with only the two placeholder paths filled in, then its quickstart in the
 * project they installed into, against a real server. `npm install
 * ./clients/typescript` is not among them: npm links the folder without its
 * dependencies or a built dist/.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT, startTestServer, type TestServer } from "../support/engram.js";
import { CACHE, copyTrackedFiles, readmeBlock, sh } from "./artifacts.js";

const README = "clients/typescript/README.md";
const README_ADDRESS = "127.0.0.1:8000";

/** The README's shell block that installs from a checkout (the one that packs). */
function checkoutInstallBlock(): string {
  const blocks = [...readFileSync(path.join(REPO_ROOT, README), "utf8").matchAll(/```sh\n([\s\S]*?)```/g)].map(
    (m) => m[1],
  );
  const block = blocks.find((b) => b.includes("npm pack"));
  if (!block) throw new Error(`${README} has no \`\`\`sh block with npm pack`);
  return block;
}

describe("the TypeScript client, installed from a checkout as its README says", () => {
  let work: string;
  let server: TestServer;
  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), "engram-checkout-"));
    server = await startTestServer();
  });
  afterAll(async () => {
    await server?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("the README's lines pack the client in a fresh checkout and install the tarball; the quickstart runs with it", async () => {
    const checkout = path.join(work, "engram");
    const project = path.join(work, "your-project");
    copyTrackedFiles(checkout);
    expect(existsSync(path.join(checkout, "clients/typescript/dist"))).toBe(false);
    expect(existsSync(path.join(checkout, "node_modules"))).toBe(false);
    mkdirSync(project);
    writeFileSync(
      path.join(project, "package.json"),
      JSON.stringify({ name: "your-project", version: "1.0.0", private: true, type: "module" }),
    );

    const block = checkoutInstallBlock()
      .replaceAll("/path/to/engram", checkout)
      .replaceAll("/path/to/your-project", project);
    // Downloads come from the cache the package tests share; the commands are the README's.
    const env = {
      ...process.env,
      npm_config_cache: path.join(CACHE, "npm-cache"),
      npm_config_prefer_offline: "true",
      npm_config_audit: "false",
      npm_config_fund: "false",
    };
    await sh("bash", ["-euo", "pipefail", "-c", block], { cwd: work, env });

    // Installed as a copy from the tarball, not a link into the checkout.
    const installed = path.join(project, "node_modules/@engram-memory/client");
    expect(existsSync(path.join(installed, "dist/index.js"))).toBe(true);
    expect(existsSync(path.join(checkout, "node_modules"))).toBe(false);
    const script = path.join(project, "quickstart.mjs");
    writeFileSync(script, readmeBlock(README, "js").replace(README_ADDRESS, server.address));
    const stdout = await sh(process.execPath, [script], { cwd: project });
    expect(stdout).toContain("1 user_message What is the weather in Paris?");
  }, 600_000);
});
