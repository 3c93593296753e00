/**
 * `npx engram` in a fresh checkout, as docs/inspector-and-cli.md tells a
 * newcomer to run it: a copy of the files a clone has, `npm ci`, then
 * `npx engram --help`. npm runs a project's own bin by linking the project
 * into its npx cache, and that link runs the project's `prepare`; this holds
 * that the link rebuilds nothing (the checkout was built by `npm ci`) and
 * fetches nothing, and that `npm ci` leaves npm's record of node_modules
 * current, so npm reads that record instead of the whole tree on each call.
 * How long the calls take is measured by bench/cli-startup.ts, not here.
 */
import { existsSync, lstatSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync } from "node:fs";
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
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("npm ci leaves npm's record of node_modules newer than every folder it records", () => {
    const recorded = statSync(path.join(checkout, "node_modules/.package-lock.json")).mtimeMs;
    const newer = recordedFolders(checkout).filter((dir) => lstatSync(dir).mtimeMs > recorded);
    expect(newer.map((dir) => path.relative(checkout, dir))).toEqual([]);
  });

  it("answers --help, first and again, without rebuilding the checkout or fetching a package", async () => {
    const built = buildTimes(checkout);
    // An empty npm cache and --offline: any package npm had to fetch would fail the call.
    const env = {
      ...process.env,
      npm_config_cache: path.join(work, "empty-npm-cache"),
      npm_config_offline: "true",
      npm_config_update_notifier: "false",
    };
    for (const call of ["first", "warm"]) {
      const help = await sh("npx", ["engram", "--help"], { cwd: checkout, env });
      expect(help, call).toContain("Usage: engram");
      expect(buildTimes(checkout), call).toEqual(built);
    }
  }, 120_000);
});
