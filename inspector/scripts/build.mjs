// Builds the inspector (inspector/dist) with Vite. Run by the root `prepare`
// script on `npm ci`/`npm install`, so the server has its assets on a fresh
// machine; skips quietly when Vite is not installed (`npm ci --omit=dev`),
// in which case the server answers / with how to build them.
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
const outDir = process.argv[2] ? process.argv[2] : undefined;
await vite.build({ root, configFile: fileURLToPath(new URL("../vite.config.ts", import.meta.url)), build: outDir ? { outDir } : {} });
