/**
 * `npx engram` in a fresh checkout, as docs/inspector-and-cli.md tells a
 * newcomer to run it: a copy of the files a clone has, `npm ci`, then
 * `npx engram --help`. What keeps it at npm's own start-up cost: the root
 * package declares no `engram` bin (npm would link the whole project into its
 * npx cache and load its dependency tree on every call), the CLI workspace
 * does, so `npm ci` links it into node_modules/.bin and npx runs that file:
 * nothing goes into the npx cache, nothing is rebuilt, nothing is fetched.
 * How long the calls take is measured by bench/cli-startup.ts, not here.
 */
import {
  existsSync,
  lstatSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CACHE, copyTrackedFiles, sh } from "./artifacts.js";

/** Folders npm compares with node_modules/.package-lock.json: node_modules, each package and scope in it, and each link's target. */
function recordedFolders(checkout: string): string[] {
  const modules = path.join(checkout, "node_modules");
  const folders = [modules];
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name.startsWith(".")) continue;
      const full = path.join(dir, entry.name);
      if (entry.isSymbolicLink()) folders.push(path.resolve(dir, readlinkSync(full)));
      else if (entry.isDirectory()) {
        folders.push(full);
        if (entry.name.startsWith("@")) visit(full);
      }
    }
  };
  visit(modules);
  return folders;
}

/** When the build outputs `prepare` makes were last written. */
function buildTimes(checkout: string): Record<string, number> {
  const outputs = [
    "dist/.build-stamp",
    "dist/cli/main.js",
    "inspector/dist/index.html",
    "clients/typescript/dist/index.js",
  ];
  return Object.fromEntries(outputs.map((file) => [file, statSync(path.join(checkout, file)).mtimeMs]));
}

describe("npx engram in a fresh checkout", () => {
  let work: string;
  let checkout: string;
  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), "engram-npx-"));
    checkout = path.join(work, "engram");
    copyTrackedFiles(checkout);
    expect(existsSync(path.join(checkout, "node_modules"))).toBe(false);
    expect(existsSync(path.join(checkout, "dist"))).toBe(false);
    // Downloads come from the cache the package tests share.
    const env = {
      ...process.env,
      npm_config_cache: path.join(CACHE, "npm-cache"),
      npm_config_prefer_offline: "true",
      npm_config_audit: "false",
      npm_config_fund: "false",
    };
    await sh("npm", ["ci", "--loglevel=error"], { cwd: checkout, env });
  }, 600_000);
  // Removing a whole node_modules takes more than the default hook time on a busy machine.
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  }, 300_000);

  it("npm ci leaves npm's record of node_modules newer than every folder it records", () => {
    // npm commands that load the tree (npm ls, npm install) read this record instead of every folder.
    const recorded = statSync(path.join(checkout, "node_modules/.package-lock.json")).mtimeMs;
    const newer = recordedFolders(checkout).filter((dir) => lstatSync(dir).mtimeMs > recorded);
    expect(newer.map((dir) => path.relative(checkout, dir))).toEqual([]);
  });

  it("the root package declares no bin; npm ci links the CLI workspace's `engram` into node_modules/.bin", () => {
    const root = JSON.parse(readFileSync(path.join(checkout, "package.json"), "utf8")) as { bin?: unknown };
    expect(root.bin).toBeUndefined();
    expect(realpathSync(path.join(checkout, "node_modules/.bin/engram"))).toBe(
      realpathSync(path.join(checkout, "packages/cli/bin.mjs")),
    );
  });

  it("answers --help, first and again, from node_modules/.bin: nothing in the npx cache, nothing rebuilt or fetched", async () => {
    const built = buildTimes(checkout);
    // An empty npm cache and --offline: any package npm had to fetch would fail the call.
    const npmCache = path.join(work, "empty-npm-cache");
    const env = {
      ...process.env,
      npm_config_cache: npmCache,
      npm_config_offline: "true",
      npm_config_update_notifier: "false",
    };
    for (const call of ["first", "warm"]) {
      const help = await sh("npx", ["engram", "--help"], { cwd: checkout, env });
      expect(help, call).toContain("Usage: engram");
      expect(buildTimes(checkout), call).toEqual(built);
      // npx installs or links what it cannot run from node_modules/.bin into <cache>/_npx.
      expect(existsSync(path.join(npmCache, "_npx")), call).toBe(false);
    }
  }, 120_000);
});
