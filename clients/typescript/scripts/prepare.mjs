// `prepare` hook: builds dist/ when TypeScript is installed (the root workspace's
// `npm ci`, or `npm install --prefix .` in this folder before `npm pack`) and skips
// quietly when it is not (e.g. `npm ci --omit=dev` at the repository root), so installs
// never fail on it. A bare `npm install <this folder>` elsewhere links it unbuilt and
// without its dependencies: the README installs the `npm pack` tarball instead.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
let tsc;
try {
  tsc = join(dirname(createRequire(join(root, "package.json")).resolve("typescript/package.json")), "bin", "tsc");
} catch {
  console.error("@engram-memory/client: typescript is not installed; skipping the build of dist/");
  process.exit(0);
}
const result = spawnSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" });
process.exit(result.status ?? 1);
