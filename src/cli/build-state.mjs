// Whether dist/ (the compiled server and CLI, made by scripts/build.mjs) is
// current: it exists and no source is newer than its build stamp. Shared by
// the build (`prestart` rebuilds only when stale) and the `engram` bin (runs
// the compiled CLI only when current, else the sources through tsx).
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository (package) root. */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Written last by a build: its time is when the build finished. */
export const BUILD_STAMP = path.join(ROOT, "dist", ".build-stamp");

/** Newest modification time (ms) of any file under `dir` (0 when it does not exist). */
function newestUnder(dir) {
  if (!existsSync(dir)) return 0;
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestUnder(full) : statSync(full).mtimeMs);
  }
  return newest;
}

/**
 * True when dist/ is missing or older than a file under src/, the TypeScript
 * client's src/ (the server runs its generated contract code) or the build's configuration.
 * An installed package (npm's tarball, the Docker image) ships dist/ without
 * the TypeScript sources, and its files' times are when they were unpacked,
 * so there the build is current whenever it is there.
 */
export function buildIsStale() {
  if (!existsSync(BUILD_STAMP)) return true;
  if (!existsSync(path.join(ROOT, "src", "main.ts"))) return false;
  const built = statSync(BUILD_STAMP).mtimeMs;
  const inputs = ["package.json", "tsconfig.json", "tsconfig.build.json"].map((file) => path.join(ROOT, file)).filter((file) => existsSync(file));
  const sources = [path.join(ROOT, "src"), path.join(ROOT, "clients", "typescript", "src")];
  return sources.some((dir) => newestUnder(dir) > built) || inputs.some((file) => statSync(file).mtimeMs > built);
}
