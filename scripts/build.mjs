// Compiles the server and CLI (src/) to JavaScript in dist/ with tsc
// (tsconfig.build.json) and copies next to it the files the compiled code
// reads at run time: the Redis Lua scripts, the PostgreSQL migrations and functions.sql.
// First it builds the TypeScript client's dist/ (clients/typescript), whose
// generated contract code (@engram-memory/client/gen/...) the server imports.
// Run by `npm run build`, by the root `prepare` script on `npm ci` (with
// --optional: an install without TypeScript goes on without a build), and by
// `prestart` with --if-stale, which builds only when dist/ is missing or a
// source is newer than it, so `npm start` never runs stale code.
//
// The build goes to a fresh directory that then replaces dist/ by rename, so
// a server starting meanwhile never reads half a build.
import { cpSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { BUILD_STAMP, buildIsStale, ROOT } from "../src/cli/build-state.mjs";

const root = ROOT;
const dist = path.join(root, "dist");
const stamp = BUILD_STAMP;
/** Run-time files that are not TypeScript, as paths under src/ (copied to the same paths under dist/). */
const ASSETS = [
  "store/redis/scripts",
  "store/memories/redis-scripts",
  "store/postgres/migrations",
  "store/postgres/functions.sql",
];

if (process.argv.includes("--if-stale") && !buildIsStale()) process.exit(0);

let tsc;
try {
  tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
} catch {
  // An install without dev dependencies (`npm ci --omit=dev`, run by prepare) goes on without a build;
  // starting without one fails here with what to do.
  const optional = process.argv.includes("--optional");
  console.error(
    existsSync(stamp)
      ? "engram build: typescript is not installed; dist/ may be older than src/ (npm ci without --omit=dev rebuilds it)"
      : `engram build: dist/ is missing and typescript is not installed to build it${optional ? "; skipping" : ""}: run npm ci (with dev dependencies)`,
  );
  process.exit(existsSync(stamp) || optional ? 0 : 1);
}

// Under the repository's .tmp/ (ignored by git, and on the same file system, so rename works).
const scratch = path.join(root, ".tmp");
mkdirSync(scratch, { recursive: true });
const fresh = path.join(scratch, `dist-build-${process.pid}`);
const old = path.join(scratch, `dist-old-${process.pid}`);
try {
  console.error("engram build: compiling clients/typescript/src/ to clients/typescript/dist/");
  execFileSync(process.execPath, [tsc, "-p", path.join(root, "clients", "typescript", "tsconfig.build.json")], {
    stdio: "inherit",
    cwd: root,
  });
  console.error("engram build: compiling src/ to dist/");
  execFileSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json"), "--outDir", fresh], {
    stdio: "inherit",
    cwd: root,
  });
  for (const asset of ASSETS) cpSync(path.join(root, "src", asset), path.join(fresh, asset), { recursive: true });
  writeFileSync(path.join(fresh, ".build-stamp"), `${new Date().toISOString()}\n`);
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(fresh, dist);
} finally {
  rmSync(fresh, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
}
