// Builds the inspector (inspector/dist) with Vite. Run by the root `prepare`
// script on `npm ci`/`npm install`, so the server has its assets on a fresh
// machine; skips quietly when Vite is not installed (`npm ci --omit=dev`),
// in which case the server answers / with how to build them.
//
// Built on install rather than committed: the bundle embeds the generated
// protobuf descriptors, so a committed bundle would go stale with every proto
// change made elsewhere, and its freshness check would fail for whoever made it.
//
// The build goes to a fresh directory that then replaces dist/ by rename, so
// a server starting meanwhile (another test run, say) never reads half a build.
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
let vite;
try {
  createRequire(import.meta.url).resolve("vite");
  vite = await import("vite");
} catch {
  console.error("engram inspector: vite is not installed; skipping the build of inspector/dist");
  process.exit(0);
}
const dist = fileURLToPath(new URL("../dist", import.meta.url));
// Under the repository's .tmp/ (ignored by git, and on the same file system, so rename works).
const scratch = fileURLToPath(new URL("../../.tmp/", import.meta.url));
mkdirSync(scratch, { recursive: true });
const fresh = `${scratch}inspector-build-${process.pid}`;
const old = `${scratch}inspector-old-${process.pid}`;
try {
  // configLoader "runner": the default loader bundles vite.config.ts into node_modules/.vite-temp, which
  // leaves node_modules newer than npm's record of it (node_modules/.package-lock.json), so every later
  // npm command that loads the tree (npm ls, npm install, npx of a package not installed) reads the whole tree
  // again instead of that record.
  await vite.build({
    root,
    configFile: fileURLToPath(new URL("../vite.config.ts", import.meta.url)),
    configLoader: "runner",
    build: { outDir: fresh, emptyOutDir: true },
  });
  if (existsSync(dist)) renameSync(dist, old);
  renameSync(fresh, dist);
} finally {
  rmSync(fresh, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
}
